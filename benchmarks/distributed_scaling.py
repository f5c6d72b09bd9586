"""Weak and strong scaling of :mod:`autospmv.distributed` against one device without Dask.

For each case (band and power-law matrices, float64 and float32, in that order of priority):

* **one device without Dask** (this process): the matrix of ``--rows`` rows (the weak-scaling
  base) and, for the band float64 case, of ``W × --rows`` rows (the strong-scaling base); run
  through the same solver code as the ranks (:class:`autospmv.distributed._solvers.LocalRank`);
* **W ranks** (one worker per GPU when W GPUs are visible: ``dask_cuda.LocalCUDACluster``, or
  one Nanny per GPU where it fails; else a ``LocalCluster`` of CPU worker processes): the
  matrix of ``W × --rows`` rows, built on the workers from a block function (no nonzero passes
  through the client).

Timed (seconds):

* ``generate_s``, ``prepare_s``: making the matrix and :func:`autospmv.prepare` (one device);
  ``prepare_s`` of the ranks includes making their row blocks on the workers;
* ``product``: one product with vectors in place (CuPy on GPUs), the median of ``--repeats``
  products each waited for; on the ranks, timed inside a :meth:`map_ranks` task (what a solver
  sees), the slowest rank's median;
* ``product_dispatched`` (ranks only): ``op @ x`` for a :class:`DistributedVector` from the
  client, waited for: the product plus one round of Dask scheduling;
* ``cg_iteration``: ``--cg-iterations`` iterations of cg (rtol 0, so none stops early) over
  their count; on the ranks, :func:`autospmv.distributed.cg` called from the client (one round
  of Dask scheduling per call), and ``cg_iteration_in_task``: the same solver code timed
  inside a :meth:`map_ranks` task (the slowest rank).

Last, ``--one-rank`` (a case) runs on one rank through Dask with ``--rows`` rows: what Dask and
the split cost without any exchange.

Efficiencies: weak ``t(one device, rows) / t(W ranks, W × rows)``; strong
``t(one device, W × rows) / t(W ranks, W × rows)`` (a speedup, ideal W). Before the cases, a
small check compares products with SciPy's (relative error) and cg's iteration count with
SciPy's, on the ranks.

Results are written after every case (a run cut short keeps what it measured) to
``benchmarks/results/distributed-<device>-<date>.json``, progress to stderr::

    python benchmarks/distributed_scaling.py --rows 200000                 # CPU workers, small
    python benchmarks/distributed_scaling.py --rows 15000000 --per-row 17  # 2 GPUs: 255M nnz/GPU

(The file is not called ``distributed.py``: run as a script, that name would shadow Dask's
``distributed`` package.)
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
import autospmv.distributed as adist  # noqa: E402
from autospmv.distributed._solvers import LocalRank, cg_on  # noqa: E402

CHUNK_ROWS = 1 << 20
"""Power-law rows are drawn in chunks of this many rows, each from its own seed, so any row
range gives the same rows whatever the partition."""


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# Matrices, as block functions ``(start, stop) -> CSR rows`` (vectorised; run on the workers).

def band_block(start, stop, *, n, per_row, band, dtype):
    """Rows start:stop of an n×n symmetric band matrix: -1 on ``per_row // 2`` offsets each
    side (spread up to ``band``), and on the diagonal one more than a full row's off-diagonal
    sum (so it is symmetric positive definite)."""
    k = max(1, per_row // 2)
    offsets = np.unique(np.linspace(1, max(1, min(band, n - 1)), k).astype(np.int64))
    shifts = np.concatenate((-offsets[::-1], [0], offsets))
    values = np.where(shifts == 0, 2.0 * offsets.size + 1.0, -1.0).astype(dtype)
    rows = np.arange(start, stop, dtype=np.int64)
    columns = rows[:, None] + shifts[None, :]
    valid = (columns >= 0) & (columns < n)
    indptr = np.zeros(stop - start + 1, dtype=np.int64)
    np.cumsum(valid.sum(axis=1), out=indptr[1:])
    indices = columns[valid].astype(np.int32)
    data = np.broadcast_to(values, columns.shape)[valid]
    return sp.csr_matrix((data, indices, indptr), shape=(stop - start, n))


def powerlaw_block(start, stop, *, n, per_row, dtype, seed=0, exponent=2.5, longest=20000):
    """Rows start:stop of an n×n matrix with Pareto-distributed row lengths (mean about
    ``per_row``, capped at ``longest``) whose columns spread over all of n (each row an
    arithmetic progression with a random start and step), so most ghost columns are needed."""
    scale = (per_row + 0.5) * (exponent - 2.0) / (exponent - 1.0)
    pieces = []
    for chunk in range(start // CHUNK_ROWS, (max(stop, 1) - 1) // CHUNK_ROWS + 1):
        c0, c1 = chunk * CHUNK_ROWS, min((chunk + 1) * CHUNK_ROWS, n)
        rng = np.random.default_rng([seed, chunk])
        u, v, w = rng.random((3, c1 - c0))
        lengths = np.minimum(np.floor(scale * (1 - u) ** (-1 / (exponent - 1))), longest)
        lengths = np.clip(lengths, 1, n).astype(np.int64)
        steps = 1 + np.floor(v * ((n - 1) // lengths)).astype(np.int64)
        firsts = np.floor(w * (n - (lengths - 1) * steps)).astype(np.int64)
        lo, hi = max(start, c0) - c0, min(stop, c1) - c0
        lengths, steps, firsts = lengths[lo:hi], steps[lo:hi], firsts[lo:hi]
        indptr = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        row = np.repeat(np.arange(hi - lo), lengths)
        within = np.arange(indptr[-1], dtype=np.int64) - indptr[row]
        columns = firsts[row] + within * steps[row]
        data = np.repeat((0.5 + w[lo:hi]).astype(dtype), lengths)  # a value per row
        pieces.append(sp.csr_matrix((data, columns.astype(np.int32), indptr),
                                    shape=(hi - lo, n)))
    return sp.vstack(pieces, format="csr") if len(pieces) > 1 else pieces[0]


def block_function(kind, n, per_row, band, dtype):
    if kind == "band":
        return functools.partial(band_block, n=n, per_row=per_row, band=band, dtype=dtype)
    return functools.partial(powerlaw_block, n=n, per_row=per_row, dtype=dtype)


# Timing.

def synchronize(device):
    if device == "cuda":
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def median_product(rank, x, repeats):
    """On a rank (or a LocalRank): median seconds of one product, each waited for."""
    device = getattr(rank, "device", "cpu")
    rank.matvec(x)
    synchronize(device)
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        rank.matvec(x)
        synchronize(device)
        samples.append(time.perf_counter() - started)
    return float(np.median(samples))


def release_device_memory(device):
    """Give the GPU memory of the operators and vectors just dropped back to the driver (CuPy
    keeps freed blocks in its pool and numba defers deallocations), so the ranks' worker on the
    same GPU finds it free."""
    import gc

    gc.collect()
    if device == "cuda":
        import cupy
        from numba import cuda

        cuda.current_context().deallocations.clear()
        cupy.get_default_memory_pool().free_all_blocks()


def vector_on(device, values):
    if device == "cuda":
        import cupy

        return cupy.asarray(values)
    return values


def measure_one_device(kind, rows, args, dtype, device, cg_too):
    fn = block_function(kind, rows, args.per_row, args.band, dtype)
    started = time.perf_counter()
    A = fn(0, rows)
    generated = time.perf_counter()
    op = autospmv.prepare(A, device=device)
    synchronize(device)
    prepared = time.perf_counter()
    out = {"rows": rows, "nnz": int(A.nnz), "kernel": op.kernel,
           "generate_s": generated - started, "prepare_s": prepared - generated}
    del A
    local = LocalRank(op)
    x = vector_on(device, np.random.default_rng(0).random(rows).astype(dtype))
    out["product"] = median_product(local, x, args.repeats)
    if cg_too:
        out["cg_iteration"] = cg_iteration_time(local, x, args.cg_iterations)
    return out


def _time_on_rank(rank, x, repeats):
    return median_product(rank, x, repeats)


def cg_iteration_time(rank, b, iterations):
    """On a rank (or a LocalRank): seconds per iteration of ``iterations`` cg iterations, after
    two untimed ones."""
    device = getattr(rank, "device", "cpu")
    cg_on(rank, b, rtol=0.0, maxiter=2)
    synchronize(device)
    started = time.perf_counter()
    cg_on(rank, b, rtol=0.0, maxiter=iterations)
    synchronize(device)
    return (time.perf_counter() - started) / iterations


def measure_ranks(client, kind, rows, args, dtype, device, cg_too, parts=None):
    fn = block_function(kind, rows, args.per_row, args.band, dtype)
    started = time.perf_counter()
    op = adist.prepare(fn, client=client, shape=(rows, rows), device=device, parts=parts)
    out = {"rows": rows, "nnz": op.nnz, "prepare_s": time.perf_counter() - started,
           "comm": op.comm, "comm_reason": op.comm_reason,
           "parts": [{"rows": list(p.rows), "nnz": p.nnz, "owned_nnz": p.owned_nnz,
                      "ghost_nnz": p.ghost_nnz, "ghost_rows": p.ghost_rows,
                      "ghost_columns": p.ghost_columns, "kernel": p.kernel,
                      "ghost_kernel": p.ghost_kernel, "device": p.device}
                     for p in op.parts]}
    x = op.vector(np.random.default_rng(0).random(rows).astype(dtype))
    out["product"] = max(client.gather(op.map_ranks(_time_on_rank, x, repeats=args.repeats)))
    from distributed import wait

    samples = []
    for _ in range(args.repeats // 2 + 2):
        began = time.perf_counter()
        wait((op @ x).chunks)
        samples.append(time.perf_counter() - began)
    out["product_dispatched"] = float(np.median(samples[2:]))
    if cg_too:
        adist.cg(op, x, rtol=0.0, maxiter=2)
        started = time.perf_counter()
        adist.cg(op, x, rtol=0.0, maxiter=args.cg_iterations)
        out["cg_iteration"] = (time.perf_counter() - started) / args.cg_iterations
        out["cg_iteration_in_task"] = max(client.gather(op.map_ranks(
            cg_iteration_time, x, iterations=args.cg_iterations)))
    op.close()
    return out


def check_against_scipy(client, device, workers):
    """Products equal SciPy's (float64) and cg takes SciPy's iterations, on small matrices."""
    import scipy.sparse.linalg as spla

    result = {}
    for kind in ("band", "powerlaw"):
        n = 300_000
        fn = block_function(kind, n, 17, 2000, np.float64)
        A = fn(0, n)
        op = adist.prepare(fn, client=client, shape=(n, n), device=device)
        x = np.random.default_rng(1).standard_normal(n)
        y = op @ x
        reference = A @ x
        result[f"{kind}_product_relative_error"] = float(
            np.linalg.norm(y - reference) / np.linalg.norm(reference))
        if kind == "band":
            count = [0]
            spla.cg(A, x, rtol=1e-10, callback=lambda _: count.__setitem__(0, count[0] + 1))
            adist.cg(op, op.vector(x, side="rows"), rtol=1e-10)
            result["cg_iterations_scipy"] = count[0]
            result["cg_iterations_ranks"] = op.last_solve["iterations"]
        result[f"{kind}_comm"] = op.comm
        result[f"{kind}_explain"] = op.explain()
        op.close()
    return result


def gpu_count() -> int:
    try:
        from numba import cuda

        return len(cuda.gpus) if cuda.is_available() else 0
    except Exception:
        return 0


def start_cluster(device: str, workers: int):
    """``(cluster, client, description)``. GPUs: dask-cuda's LocalCUDACluster, or, where it
    fails to start, one Nanny per GPU with its own ``CUDA_VISIBLE_DEVICES`` (what
    LocalCUDACluster does, less its extras)."""
    from distributed import Client, LocalCluster

    if device == "cuda":
        try:
            from dask_cuda import LocalCUDACluster

            cluster = LocalCUDACluster(n_workers=workers, threads_per_worker=1, memory_limit=0,
                                       device_memory_limit=0,
                                       CUDA_VISIBLE_DEVICES=",".join(map(str, range(workers))))
            return cluster, Client(cluster), "dask_cuda.LocalCUDACluster, one worker per GPU"
        except Exception as error:
            log(f"LocalCUDACluster failed ({type(error).__name__}: {error}); one Nanny per GPU")
            from distributed import Nanny, Scheduler, SpecCluster

            specs = {i: {"cls": Nanny, "options": {"nthreads": 1, "memory_limit": 0,
                                                   "env": {"CUDA_VISIBLE_DEVICES": str(i)}}}
                     for i in range(workers)}
            cluster = SpecCluster(workers=specs, scheduler={
                "cls": Scheduler, "options": {"dashboard_address": ":0"}})
            return cluster, Client(cluster), (f"SpecCluster of Nannies, one per GPU "
                                              f"(LocalCUDACluster failed: {error})")
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0", silence_logs=40,
                               env={"NUMBA_NUM_THREADS": str(threads)})
    return cluster, Client(cluster), "distributed.LocalCluster of CPU worker processes"


class Watchdog:
    """Ends the process (status 3) after ``seconds`` unless stopped, saving the result first:
    a communicator that never joins must not hold the machine until the outer timeout."""

    def __init__(self, seconds, result, save):
        import threading

        self._stopped = threading.Event()

        def watch():
            if not self._stopped.wait(seconds):
                result["error"] = f"cluster start or check took over {seconds} s; gave up"
                save()
                log(result["error"])
                os._exit(3)

        threading.Thread(target=watch, daemon=True).start()

    def stop(self):
        self._stopped.set()


def efficiencies(single, large_single, ranks, workers) -> dict:
    out = {}
    for key in ("product", "cg_iteration"):
        if key in single and key in ranks:
            out[f"weak_{key}"] = single[key] / ranks[key]
        if large_single and key in large_single and key in ranks:
            out[f"strong_{key}_speedup"] = large_single[key] / ranks[key]
    if "cg_iteration_in_task" in ranks:
        out["weak_cg_iteration_in_task"] = single["cg_iteration"] / ranks["cg_iteration_in_task"]
        if large_single:
            out["strong_cg_iteration_in_task_speedup"] = (large_single["cg_iteration"]
                                                          / ranks["cg_iteration_in_task"])
    if "product_dispatched" in ranks:
        out["weak_product_dispatched"] = single["product"] / ranks["product_dispatched"]
    out["prepare_ratio"] = ranks["prepare_s"] / (single["generate_s"] + single["prepare_s"])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per rank")
    parser.add_argument("--per-row", type=int, default=17, help="nonzeros per row (mean)")
    parser.add_argument("--band", type=int, default=2000, help="band: largest column offset")
    parser.add_argument("--workers", type=int, default=None,
                        help="W (default: the GPUs visible, with dask-cuda; else 2)")
    parser.add_argument("--cases", default="band-float64,powerlaw-float64,band-float32,"
                                           "powerlaw-float32")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--cg-iterations", type=int, default=200)
    parser.add_argument("--one-rank", default="band-float64",
                        help="a case also run on one rank through Dask, last ('' for none)")
    parser.add_argument("--cpu", action="store_true", help="CPU workers even where GPUs exist")
    parser.add_argument("--device-kind", default="", help="the lent machine's kind, recorded")
    parser.add_argument("--stall-timeout", type=float, default=240.0,
                        help="seconds the cluster start and check may take before the run "
                             "gives up (exit status 3), e.g. a communicator that never joins")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast (workers inherit)
    gpus = 0 if args.cpu else gpu_count()
    workers = args.workers or (gpus if gpus >= 2 else 2)
    device = "cuda" if gpus >= workers else "cpu"
    date = datetime.date.today().isoformat()
    out_path = args.out or (Path(__file__).parent / "results"
                            / f"distributed-{device}-{date}.json")
    result = {"config": {**{k: (str(v) if isinstance(v, Path) else v)
                            for k, v in vars(args).items()},
                         "device": device, "workers": workers, "gpus": gpus,
                         "times": "seconds; see benchmarks/distributed_scaling.py"},
              "machine": machine(gpus, date), "cases": {}}

    def save():
        out_path.write_text(json.dumps(result, indent=1) + "\n")

    log(f"W = {workers} ranks on {device}; results to {out_path}")
    started = time.perf_counter()
    watchdog = Watchdog(args.stall_timeout, result, save)
    cluster, client, result["config"]["cluster"] = start_cluster(device, workers)
    result["cluster_start_s"] = time.perf_counter() - started
    try:
        result["check"] = check_against_scipy(client, device, workers)
        watchdog.stop()
        log({k: v for k, v in result["check"].items() if "explain" not in k})
        save()
        for case in args.cases.split(","):
            kind, dtype_name = case.split("-")
            dtype = np.dtype(dtype_name)
            cg_too = kind == "band"
            strong = case == "band-float64"
            entry = result["cases"][case] = {}
            try:
                log(f"{case}: one device, {args.rows} rows")
                entry["one_device"] = measure_one_device(kind, args.rows, args, dtype, device,
                                                         cg_too)
                release_device_memory(device)
                save()
                if strong:
                    log(f"{case}: one device, {workers * args.rows} rows")
                    entry["one_device_large"] = measure_one_device(
                        kind, workers * args.rows, args, dtype, device, cg_too)
                    release_device_memory(device)
                    save()
                log(f"{case}: {workers} ranks, {workers * args.rows} rows")
                entry["ranks"] = measure_ranks(client, kind, workers * args.rows, args, dtype,
                                               device, cg_too)
                entry["summary"] = efficiencies(entry["one_device"],
                                                entry.get("one_device_large"), entry["ranks"],
                                                workers)
                log(case, json.dumps(entry["summary"]))
            except Exception as error:  # keep what the other cases measure
                entry["error"] = f"{type(error).__name__}: {error}"
                log(case, entry["error"])
            save()
        if args.one_rank:
            kind, dtype_name = args.one_rank.split("-")
            log(f"{args.one_rank}: 1 rank through Dask, {args.rows} rows")
            entry = result["cases"][args.one_rank]
            entry["one_rank"] = measure_ranks(client, kind, args.rows, args,
                                              np.dtype(dtype_name), device, kind == "band",
                                              parts=1)
            save()
    finally:
        client.close()
        cluster.close()
    save()
    log(f"written to {out_path}")


def machine(gpus, date) -> dict:
    import dask
    import distributed
    import scipy

    info = {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "gpus": gpus, "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "dask": dask.__version__,
            "distributed": distributed.__version__, "autospmv": autospmv.__version__,
            "date": date}
    try:
        import cupy

        info["cupy"] = cupy.__version__
        info["gpu_names"] = [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode()
                             for i in range(gpus)]
        from cupy.cuda import nccl

        info["nccl"] = nccl.get_version() if nccl.available else None
    except Exception as error:
        info["cupy_error"] = f"{type(error).__name__}: {error}"
    try:
        import dask_cuda

        info["dask_cuda"] = dask_cuda.__version__
    except ImportError:
        pass
    return info


if __name__ == "__main__":
    main()
