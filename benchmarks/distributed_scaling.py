"""Strong and weak scaling of :mod:`autospmv.distributed` against one device without Dask.

For W = 1 and W = ``--workers`` workers, on a ``dask_cuda.LocalCUDACluster`` (one worker per GPU)
when dask-cuda is installed and at least two GPUs are visible, else on a ``LocalCluster`` of CPU
worker processes (the result file says which, in ``cluster``):

* **strong scaling**: one matrix of ``--rows`` rows on 1 and on W workers (one part each);
* **weak scaling**: ``--rows / W`` rows per worker: the matrix with rows/W rows on 1 worker
  against the matrix with ``--rows`` rows on W workers (efficiency t(1) / t(W), ideal 1).

Every configuration is also run without Dask on one device (``autospmv.prepare`` in this process)
as the baseline. Timed per configuration (medians over ``--repeats`` products, after warm-up):

* ``matvec``: one ``op @ x`` with a NumPy x (y gathered as NumPy): what a host loop sees;
* ``matvec_device`` (GPU only, CuPy installed): the same with a CuPy x and CuPy y;
* ``cg_iteration``: ``scipy.sparse.linalg.cg`` wall time divided by its iterations;
* ``part_compute``: the slowest part's product timed on its own worker, with its x already
  there (the kernels' share of a product; the rest is scheduling and moving x and y).

These are timed with loops of their own rather than the labeller's timer
(:class:`autospmv.timing.Bench`, which times one operator's ``matvec(x, out=y)`` on vectors of
its device): a distributed product's time is mostly scheduling and moving x and y between the
client and the workers, measured here as wall time around ``op @ x`` with the vectors a user
passes, and the per-part figure is taken on a worker.

The matrix is a symmetric, diagonally dominant band (``--per-row`` nonzeros a row, offsets
spread over ``--band`` columns), so cg converges and the column footprints compact.
On the CPU, each configuration uses the whole machine: a worker's numba kernels get
cores / W threads, the one-device baseline all cores.

    python benchmarks/distributed_scaling.py                                 # CPU workers, small
    python benchmarks/distributed_scaling.py --rows 64000000 --per-row 17    # 2 GPUs: ~1.1B nonzeros

Progress goes to stderr; the result to ``benchmarks/results/distributed-<kind>-<date>.json``.
(The file is not called ``distributed.py``: run as a script, that name would shadow Dask's
``distributed`` package.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp
import scipy.sparse.linalg as spla

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
import autospmv.distributed as adist  # noqa: E402
from autospmv.timing import time_calls  # noqa: E402


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def band_matrix(m: int, per_row: int, band: int, dtype) -> sp.csr_matrix:
    """m x m, symmetric: -1 on ``per_row // 2`` off-diagonals each side (offsets spread up to
    ``band``), and on the diagonal one more than a full row's off-diagonal sum (so SPD)."""
    k = max(1, per_row // 2)
    offsets = np.unique(np.linspace(1, min(band, m - 1), k).astype(np.int64))
    diagonals = [np.full(m, offsets.size * 2 + 1.0)]
    for o in offsets:
        diagonals += [np.full(m - o, -1.0), np.full(m - o, -1.0)]
    all_offsets = [0] + [s * int(o) for o in offsets for s in (1, -1)]
    return sp.diags(diagonals, all_offsets, shape=(m, m), format="csr", dtype=dtype)


def median_time(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` on the host's clock, after two untimed."""
    fn()  # time_calls makes the second untimed call
    return time_calls(fn, "cpu", budget=0.0, min_samples=repeats)["median"] / 1e6


def cg_iteration_time(op, b, iterations: int) -> float:
    count = [0]

    def callback(_):
        count[0] += 1

    spla.cg(op, b, rtol=1e-30, maxiter=2, callback=callback)  # warm-up
    count[0] = 0
    started = time.perf_counter()
    spla.cg(op, b, rtol=1e-30, maxiter=iterations, callback=callback)
    return (time.perf_counter() - started) / max(count[0], 1)


def _time_part(op, x, repeats):
    """On a worker: median seconds of the part's own product with x already there."""
    import time as _time

    import numpy as _np

    y = op.matvec(x)
    samples = []
    for _ in range(repeats):
        started = _time.perf_counter()
        y = op.matvec(x)
        if hasattr(y, "__cuda_array_interface__"):
            from numba import cuda

            cuda.synchronize()
        samples.append(_time.perf_counter() - started)
    return float(_np.median(samples))


def part_compute_time(op: adist.DistributedOperator, x: np.ndarray, repeats: int) -> float:
    """The slowest part's product time on its worker (x, or its footprint, sent beforehand)."""
    client, times = op.client, []
    for part, future in zip(op.parts, op._futures):
        piece = x[part.footprint] if part.compacted else x
        piece = client.scatter(piece, workers=[part.worker], hash=False)
        times.append(client.submit(_time_part, future, piece, repeats, workers=[part.worker],
                                   pure=False).result())
    return max(times)


def gpu_count() -> int:
    try:
        from numba import cuda

        return len(cuda.gpus) if cuda.is_available() else 0
    except Exception:
        return 0


def start_cluster(kind: str, workers: int):
    from distributed import Client, LocalCluster

    if kind == "cuda":
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(n_workers=workers,
                                   CUDA_VISIBLE_DEVICES=",".join(map(str, range(workers))))
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0", silence_logs=40,
                               env={"NUMBA_NUM_THREADS": str(threads),
                                    "OMP_NUM_THREADS": str(threads)})
    return cluster, Client(cluster)


def device_matvec_time(op, x, repeats) -> dict:
    """``{"matvec_device": seconds}`` for ``op @ x`` with x a CuPy array (synchronised), or {}
    without CuPy."""
    try:
        import cupy
    except ImportError:
        return {}
    xd = cupy.asarray(x)

    def product():
        op @ xd
        cupy.cuda.runtime.deviceSynchronize()

    return {"matvec_device": median_time(product, repeats)}


def measure_single(A, device, repeats, cg_iters):
    op = autospmv.prepare(A, device=device)
    x = np.random.default_rng(0).random(A.shape[1]).astype(A.dtype)
    out = {"kernel": op.kernel, "matvec": median_time(lambda: op @ x, repeats),
           "cg_iteration": cg_iteration_time(op, x, cg_iters)}
    if device == "cuda":
        out.update(device_matvec_time(op, x, repeats))
    return out


def measure_distributed(A, client, device, repeats, cg_iters):
    started = time.perf_counter()
    op = adist.prepare(A, client=client, device=device)
    prepare_s = time.perf_counter() - started
    x = np.random.default_rng(0).random(A.shape[1]).astype(A.dtype)
    out = {"prepare_s": prepare_s, "kernels": op.kernels,
           "parts": [{"rows": list(p.rows), "nnz": p.nnz, "columns": p.columns,
                      "compacted": p.compacted, "device": p.device, "kernel": p.kernel}
                     for p in op.parts],
           "matvec": median_time(lambda: op @ x, repeats)}
    out["x_entries_sent"] = op.last_transfer["entries"]
    out["cg_iteration"] = cg_iteration_time(op, x, cg_iters)
    out["part_compute"] = part_compute_time(op, x, repeats)
    if device == "cuda":
        out.update(device_matvec_time(op, x, repeats))
    op.close()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000,
                        help="rows of the strong-scaling matrix (= the weak-scaling W-worker one)")
    parser.add_argument("--per-row", type=int, default=9, help="nonzeros per row (odd)")
    parser.add_argument("--band", type=int, default=1000, help="largest column offset")
    parser.add_argument("--workers", type=int, default=None,
                        help="W (default: the GPUs visible, with dask-cuda; else 2)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cg-iterations", type=int, default=20)
    parser.add_argument("--cpu", action="store_true", help="CPU workers even where GPUs exist")
    parser.add_argument("--note", default="", help="free text stored with the result")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    gpus = 0 if args.cpu else gpu_count()
    try:
        import dask_cuda  # noqa: F401
        have_dask_cuda = True
    except ImportError:
        have_dask_cuda = False
    kind = "cuda" if gpus >= 2 and have_dask_cuda else "cpu"
    device = kind
    workers = args.workers or (gpus if kind == "cuda" else 2)
    dtype = np.dtype(args.dtype)
    log(f"cluster: {'LocalCUDACluster' if kind == 'cuda' else 'LocalCluster of CPU processes'}"
        f", W = {workers}, device {device}")

    small = band_matrix(args.rows // workers, args.per_row, args.band, dtype)
    large = band_matrix(args.rows, args.per_row, args.band, dtype)
    log(f"matrices: {small.shape[0]} rows / {small.nnz} nnz and {large.shape[0]} rows / "
        f"{large.nnz} nnz")

    result = {"single_device": {}, "dask": {}}
    log("one device, no Dask")
    result["single_device"]["small"] = measure_single(small, device, args.repeats,
                                                      args.cg_iterations)
    result["single_device"]["large"] = measure_single(large, device, args.repeats,
                                                      args.cg_iterations)
    for w in sorted({1, workers}):
        cluster, client = start_cluster(kind, w)
        try:
            for name, A in (("small", small), ("large", large)):
                if w == workers and name == "small" and w > 1:
                    continue  # not part of either scaling comparison
                log(f"{w} worker(s), {name} matrix")
                result["dask"][f"{w}-{name}"] = measure_distributed(A, client, device,
                                                                    args.repeats,
                                                                    args.cg_iterations)
        finally:
            client.close()
            cluster.close()

    one_small = result["dask"]["1-small"]
    one_large = result["dask"]["1-large"]
    many_large = result["dask"][f"{workers}-large"]
    keys = ["matvec", "cg_iteration", "part_compute"] + (
        ["matvec_device"] if "matvec_device" in many_large else [])
    result["summary"] = {
        "strong_speedup_vs_1_worker": {k: one_large[k] / many_large[k] for k in keys},
        "strong_speedup_vs_single_device": {
            k: result["single_device"]["large"][k] / many_large[k]
            for k in ("matvec", "cg_iteration", "matvec_device")
            if k in many_large and k in result["single_device"]["large"]},
        "weak_efficiency_vs_1_worker": {k: one_small[k] / many_large[k] for k in keys},
        "weak_efficiency_vs_single_device": {
            k: result["single_device"]["small"][k] / many_large[k]
            for k in ("matvec", "cg_iteration", "matvec_device")
            if k in many_large and k in result["single_device"]["small"]},
    }
    import dask
    import distributed

    date = datetime.date.today().isoformat()
    result["config"] = {
        "cluster": ("dask_cuda.LocalCUDACluster, one worker per GPU" if kind == "cuda" else
                    "distributed.LocalCluster of CPU worker processes (1 task thread each; "
                    "numba threads = cores / W)"),
        "workers": workers, "device": device, "dtype": args.dtype, "rows": args.rows,
        "per_row": args.per_row, "band": args.band, "repeats": args.repeats,
        "cg_iterations": args.cg_iterations, "note": args.note,
        "times": "seconds, medians; see benchmarks/distributed_scaling.py",
    }
    result["machine"] = {"host": platform.node(), "platform": platform.platform(),
                         "processor": platform.processor(), "cpus": os.cpu_count(),
                         "gpus": gpus, "load_average": list(os.getloadavg()),
                         "python": platform.python_version(), "numpy": np.__version__,
                         "scipy": scipy.__version__, "dask": dask.__version__,
                         "distributed": distributed.__version__, "autospmv":
                         autospmv.__version__, "date": date}
    out = args.out or (Path(__file__).parent / "results" / f"distributed-{kind}-{date}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    log(json.dumps(result["summary"], indent=1))
    log(f"written to {out}")


if __name__ == "__main__":
    main()
