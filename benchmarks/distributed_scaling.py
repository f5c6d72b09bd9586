"""Weak and strong scaling of :mod:`autospmv.distributed` against one device without Dask.

One Dask cluster of G workers (one per GPU: ``dask_cuda.LocalCUDACluster``, or a Nanny per GPU
where it fails; without GPUs ``LocalCluster`` CPU worker processes) serves runs on W = 1, 2,
4, ... of them (``prepare(parts=W)``). For each case (band and power-law matrices of
:mod:`distributed_cases`, float64 and float32, in that order of priority):

* **one device without Dask** (this process, on the first GPU): the matrix of ``--rows`` rows
  (the weak-scaling base) and, for the ``--strong`` cases, of ``2 × --rows`` rows (the
  strong-scaling base); the same solver code as the ranks
  (:class:`autospmv.distributed._solvers.LocalRank`);
* **W ranks**: the matrix of ``W × --rows`` rows (weak scaling; W = 2 is also the strong run
  on 2 devices), and for the ``--strong`` cases the ``2 × --rows`` matrix on every W > 2; rows
  made on the workers by a block function (no nonzero passes through the client).

Timed (seconds):

* ``generate_s``, ``prepare_s``: making the matrix and :func:`autospmv.prepare` (one device);
  ``prepare_s`` of the ranks includes making their row blocks on the workers;
* ``product``: one product with vectors in place (CuPy on GPUs), the median of ``--repeats``
  products each waited for; on the ranks, timed inside a :meth:`map_ranks` task (what a solver
  sees), the slowest rank's median;
* ``product_dispatched`` (ranks): ``op @ x`` for a :class:`DistributedVector` from the client,
  waited for: the product plus one round of Dask scheduling;
* ``cg_iteration`` (band): ``--cg-iterations`` iterations of cg (rtol 0, so none stops early)
  over their count; on the ranks, :func:`autospmv.distributed.cg` called from the client (one
  round of Dask scheduling per call), and ``cg_iteration_in_task``: the same solver code timed
  inside a :meth:`map_ranks` task (the slowest rank); ``cg_call`` (ranks): the median time of a
  one-iteration cg from the client, less one iteration in the task: what a call adds;
  ``cg_iteration_host_scalars``: the iteration with its scalars read on the host after each
  dot, in the task (one device: in process), for comparison with the solvers' own.

Each timed client call starts at least 20 ms after the client's last message, since a Dask
client sends at most one batch of messages every 10 ms (see ``autospmv.distributed._tasks``):
a call made right after another one's messages pays up to 10 ms more.

Efficiencies: weak ``t(one device, rows) / t(W ranks, W × rows)``; strong ``t(one device,
2 × rows) / t(W ranks, 2 × rows)`` (ideal W); prepare ``prepare_s(W ranks) / (generate_s +
prepare_s)(one device, rows)``. First, on W = 2 and W = G ranks, products are compared with
SciPy's (float64) and cg's iterations with SciPy's (also one device's); ``acceptance`` lists
the issue's criteria, each met or not.

Results are written after every step (a run cut short keeps what it measured) to ``--out``
(default ``benchmarks/results/distributed-<device>-<date>.json``), progress to stderr::

    python benchmarks/distributed_scaling.py --rows 200000                 # CPU workers, small
    python benchmarks/distributed_scaling.py --rows 15000000 --per-row 17  # GPUs: 255M nnz/GPU

(The file is not called ``distributed.py``: run as a script, that name would shadow Dask's
``distributed`` package.)
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import os
import sys
import time
from pathlib import Path

import cloudpickle
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import autospmv  # noqa: E402
import autospmv.distributed as adist  # noqa: E402
from autospmv.distributed._kernels import axpy, xpay  # noqa: E402
from autospmv.distributed._solvers import LocalRank, cg_on  # noqa: E402
import distributed_cases  # noqa: E402
from distributed_cases import (acceptance, block_function, gpu_count, machine,  # noqa: E402
                               start_cluster)

cloudpickle.register_pickle_by_value(distributed_cases)  # the workers cannot import it

QUIET_S = 0.02
"""Pause before a timed client call, so it is the first message of the client's batch."""


def log(*args):
    print(*args, file=sys.stderr, flush=True)


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


def cg_host_scalars(rank, b, iterations):
    """cg's iteration with its scalars read on the host (two waits per iteration, the way the
    solvers ran before they kept them on the device), for comparison: seconds per iteration,
    as :func:`cg_iteration_time` times them."""
    xp, device = rank.xp, getattr(rank, "device", "cpu")

    def run(count):
        x, r, p, rho_prev = xp.zeros_like(b), b.copy(), None, None
        for iteration in range(count):
            rho = rank.dot(r, r)
            if iteration:
                xpay(xp, r, rho / rho_prev, p)
            else:
                p = r.copy()
            q = rank.matvec(p)
            alpha = rho / rank.dot(p, q)
            axpy(xp, alpha, p, x)
            axpy(xp, -alpha, q, r)
            rho_prev = rho
        synchronize(device)

    run(2)
    started = time.perf_counter()
    run(iterations)
    return (time.perf_counter() - started) / iterations


def release_device_memory(device="cuda"):
    """Give the GPU memory of the operators and vectors just dropped back to the driver (CuPy
    keeps freed blocks in its pool and numba defers deallocations), so that the next matrix
    on the same GPU, in this process or a worker's, finds it free."""
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
        out["cg_iteration_host_scalars"] = cg_host_scalars(local, x, args.cg_iterations)
    del local, op, x
    release_device_memory(device)
    return out


def timed_call(call, repeats):
    """Median seconds of ``call()`` from the client, each started :data:`QUIET_S` after the
    client's last message; the results are dropped after the clock stops."""
    samples, kept = [], []
    for _ in range(repeats):
        time.sleep(QUIET_S)
        started = time.perf_counter()
        kept.append(call())
        samples.append(time.perf_counter() - started)
        if len(kept) > 2:
            kept.pop(0)
    return float(np.median(samples))


PART_FIELDS = ("rows", "nnz", "owned_nnz", "ghost_nnz", "ghost_rows", "ghost_columns", "kernel",
               "ghost_kernel", "device", "build_seconds")


def measure_ranks(client, kind, rows, args, dtype, device, cg_too, parts):
    fn = block_function(kind, rows, args.per_row, args.band, dtype)
    started = time.perf_counter()
    op = adist.prepare(fn, client=client, shape=(rows, rows), device=device, parts=parts)
    out = {"ranks": parts, "rows": rows, "nnz": op.nnz,
           "prepare_s": time.perf_counter() - started, "comm": op.comm,
           "comm_reason": op.comm_reason,
           "parts": [{key: getattr(p, key) for key in PART_FIELDS} for p in op.parts]}
    try:
        time_ranks(client, op, op.vector(np.random.default_rng(0).random(rows).astype(dtype)),
                   args, cg_too, out)
    finally:
        op.close()
        del op
        client.run(release_device_memory, device)
    return out


def time_ranks(client, op, x, args, cg_too, out):
    """The product's and cg's times on the ranks, into ``out``."""
    from distributed import wait

    out["product"] = max(client.gather(op.map_ranks(median_product, x, repeats=args.repeats)))

    def product():
        y = op @ x
        wait(y.chunks)
        return y

    out["product_dispatched"] = timed_call(product, args.repeats // 2 + 2)
    if cg_too:
        adist.cg(op, x, rtol=0.0, maxiter=2)
        out["cg_iteration"] = timed_call(
            lambda: adist.cg(op, x, rtol=0.0, maxiter=args.cg_iterations), 1) \
            / args.cg_iterations
        out["cg_iteration_in_task"] = max(client.gather(op.map_ranks(
            cg_iteration_time, x, iterations=args.cg_iterations)))
        out["cg_iteration_host_scalars"] = max(client.gather(op.map_ranks(
            cg_host_scalars, x, iterations=args.cg_iterations)))
        one = timed_call(lambda: adist.cg(op, x, rtol=0.0, maxiter=1), 9)
        in_task = max(client.gather(op.map_ranks(cg_iteration_time, x, iterations=1)))
        out["cg_call"] = one - in_task


def check_against_scipy(client, device, parts, one_device):
    """Products equal SciPy's (float64) and cg takes SciPy's iterations, on small matrices, on
    ``parts`` ranks (and, with ``one_device``, cg on one device without Dask)."""
    import scipy.sparse.linalg as spla

    result = {}
    for kind in ("band", "powerlaw"):
        n = 300_000
        fn = block_function(kind, n, 17, 2000, np.float64)
        A = fn(0, n)
        op = adist.prepare(fn, client=client, shape=(n, n), device=device, parts=parts)
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
            if one_device:
                local = LocalRank(autospmv.prepare(A, device=device))
                result["cg_iterations_one_device"] = cg_on(
                    local, vector_on(device, x), rtol=1e-10, maxiter=10 * n)[2]
        result[f"{kind}_comm"] = op.comm
        result[f"{kind}_explain"] = op.explain()
        op.close()
    return result


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


def summary(entry) -> dict:
    """Weak efficiencies, strong speedups and prepare ratios of one case, by number of ranks
    (a run on W × rows is weak, one on the strong base's rows strong; W = 2 is both)."""
    one, large = entry.get("one_device"), entry.get("one_device_large")
    out = {}
    for ranks in entry.get("ranks", {}).values():
        w = ranks["ranks"]
        for kind, base in (("weak", one), ("strong", large)):
            if not base or ranks["rows"] != (w * base["rows"] if kind == "weak"
                                             else base["rows"]):
                continue
            for key in ("product", "product_dispatched", "cg_iteration",
                        "cg_iteration_in_task", "cg_iteration_host_scalars"):
                reference = base.get(key if key == "cg_iteration_host_scalars" else
                                     "cg_iteration" if key.startswith("cg") else "product")
                if reference and key in ranks:
                    out[f"{kind}_{key}_{w}"] = reference / ranks[key]
            if kind == "weak":
                out[f"prepare_ratio_{w}"] = ranks["prepare_s"] / (base["generate_s"]
                                                                  + base["prepare_s"])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per rank")
    parser.add_argument("--per-row", type=int, default=17, help="nonzeros per row (mean)")
    parser.add_argument("--band", type=int, default=2000, help="band: largest column offset")
    parser.add_argument("--workers", type=int, default=None,
                        help="G, the cluster's workers (default: the GPUs visible, with "
                             "dask-cuda; else 2)")
    parser.add_argument("--ranks", default="2,4",
                        help="the W of the weak runs, each at most G, in order")
    parser.add_argument("--cases", default="band-float64,powerlaw-float64,band-float32,"
                                           "powerlaw-float32")
    parser.add_argument("--strong", default="band-float64,powerlaw-float64",
                        help="cases also run on 2 × rows: one device, and every W > 2")
    parser.add_argument("--one-rank", default="band-float64",
                        help="cases also run on one rank through Dask, last ('' for none)")
    parser.add_argument("--warm-rows", type=int, default=0,
                        help="first prepare a band matrix of this many rows on one device and "
                             "per rank on all G, untimed, so that each process's first large "
                             "prepare (its one-time costs) stays out of the timed ones")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--cg-iterations", type=int, default=200)
    parser.add_argument("--cpu", action="store_true", help="CPU workers even where GPUs exist")
    parser.add_argument("--device-kind", default="", help="the lent machine's kind, recorded")
    parser.add_argument("--stall-timeout", type=float, default=240.0,
                        help="seconds the cluster start and check may take before the run "
                             "gives up (exit status 3), e.g. a communicator that never joins")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    for name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        os.environ.setdefault(name, "0" if name == "NCCL_NVLS_ENABLE" else "1")  # no multicast
    gpus = 0 if args.cpu else gpu_count()
    workers = args.workers or (gpus if gpus >= 2 else 2)
    device = "cuda" if gpus >= workers else "cpu"
    rank_counts = [int(w) for w in args.ranks.split(",") if w and int(w) <= workers]
    date = datetime.date.today().isoformat()
    out_path = args.out or (Path(__file__).parent / "results"
                            / f"distributed-{device}-{date}.json")
    result = {"config": {**{k: (str(v) if isinstance(v, Path) else v)
                            for k, v in vars(args).items()},
                         "device": device, "workers": workers, "gpus": gpus,
                         "times": "seconds; see benchmarks/distributed_scaling.py"},
              "machine": machine(gpus, date), "cases": {}}

    def save():
        result["acceptance"] = acceptance(result)
        out_path.write_text(json.dumps(result, indent=1) + "\n")

    log(f"G = {workers} workers on {device}, W in {rank_counts}; results to {out_path}")
    started = time.perf_counter()
    warm_up(device, args.warm_rows)
    result["warm_up_s"] = time.perf_counter() - started
    watchdog = Watchdog(args.stall_timeout, result, save)
    cluster, client, result["config"]["cluster"] = start_cluster(device, workers)
    result["cluster_start_s"] = time.perf_counter() - started - result["warm_up_s"]
    try:
        if args.warm_rows:
            adist.prepare(block_function("band", workers * args.warm_rows, 17, 2000,
                                         np.float64), client=client, device=device,
                          shape=(workers * args.warm_rows,) * 2).close()
            client.run(release_device_memory, device)
            result["warm_ranks_s"] = time.perf_counter() - started - result["warm_up_s"]
        result["check"] = {}
        for w in sorted({min(2, workers), workers}):
            result["check"][str(w)] = check_against_scipy(client, device, w, w == workers)
            log(w, "ranks:", {k: v for k, v in result["check"][str(w)].items()
                              if "explain" not in k})
            save()
        watchdog.stop()
        for case in args.cases.split(","):
            run_case(case, client, args, device, rank_counts, result, save)
    finally:
        client.close()
        cluster.close()
    save()
    for row in result["acceptance"]:
        log(f"{'met' if row['met'] else 'NOT met'}: {row['item']} [{row['case']}] "
            f"{row['value']:.4g} (threshold {row['threshold']})")
    log(f"written to {out_path}")


def warm_up(device, rows):
    """Compile (or load from the disk cache) the feature and kernel code once in this process,
    before the workers start: they load it from the cache then, and the timed prepares do not
    include it; with ``rows``, also prepare a band matrix of that many rows."""
    for dtype in (np.float64, np.float32):
        for kind in ("band", "powerlaw"):
            A = block_function(kind, 200_000, 17, 2000, dtype)(0, 200_000)
            op = autospmv.prepare(A, device=device)
            op.matvec(vector_on(device, np.ones(A.shape[1], dtype)))
    if rows:
        autospmv.prepare(block_function("band", rows, 17, 2000, np.float64)(0, rows),
                         device=device)
    release_device_memory(device)


def run_case(case, client, args, device, rank_counts, result, save):
    """One case's steps in order of priority, each saved when done; a failed step is recorded
    and the next one runs."""
    kind, dtype_name = case.split("-")
    dtype = np.dtype(dtype_name)
    cg_too = kind == "band"
    rows = args.rows
    entry = result["cases"][case] = {"ranks": {}}
    steps = [("one_device", lambda: measure_one_device(kind, rows, args, dtype, device,
                                                        cg_too))]
    for w in rank_counts:
        steps.append((str(w), functools.partial(measure_ranks, client, kind, w * rows, args,
                                                dtype, device, cg_too, w)))
    if case in args.strong.split(","):
        steps.append(("one_device_large", lambda: measure_one_device(
            kind, 2 * rows, args, dtype, device, cg_too)))
        for w in rank_counts:
            if w > 2:
                steps.append((f"{w}-strong", functools.partial(
                    measure_ranks, client, kind, 2 * rows, args, dtype, device, cg_too, w)))
    if case in args.one_rank.split(","):
        steps.append(("1", functools.partial(measure_ranks, client, kind, rows, args, dtype,
                                             device, cg_too, 1)))
    for name, step in steps:
        log(f"{case}: {name}")
        began = time.perf_counter()
        try:
            measured = step()
        except Exception as error:  # keep what the other steps measure
            entry.setdefault("errors", {})[name] = f"{type(error).__name__}: {error}"
            log(case, name, entry["errors"][name])
            continue
        finally:
            log(f"{case}: {name} took {time.perf_counter() - began:.1f} s")
        if name.startswith("one_device"):
            entry[name] = measured
        else:
            entry["ranks"][name] = measured
        entry["summary"] = summary(entry)
        save()
    log(case, json.dumps(entry.get("summary", {})))


if __name__ == "__main__":
    main()
