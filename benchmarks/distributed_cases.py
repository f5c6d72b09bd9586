"""The matrices, cluster, machine record and acceptance table of
``benchmarks/distributed_scaling.py``.

Matrices are block functions ``(start, stop) -> CSR rows`` of an n×n matrix (vectorised), so
the workers make their own rows and any row range gives the same rows whatever the partition.
"""

from __future__ import annotations

import functools
import os
import platform
import sys

import numpy as np
import scipy.sparse as sp

import autospmv

CHUNK_ROWS = 1 << 20
"""Power-law rows are drawn in chunks of this many rows, each from its own seed, so any row
range gives the same rows whatever the partition."""


def log(*args):
    print(*args, file=sys.stderr, flush=True)


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
    # No NUMBA_NUM_THREADS for the workers: set through the cluster, a worker's first
    # compilation failed with "Cannot set NUMBA_NUM_THREADS to a different value once the
    # threads have been launched".
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=":0", silence_logs=40)
    return cluster, Client(cluster), "distributed.LocalCluster of CPU worker processes"


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


def acceptance(result) -> list:
    """The issue's criteria on 2 ranks, each with its measured value and whether it is met."""
    rows = []

    def item(name, case, value, threshold, at_most=False):
        if value is not None:
            met = value <= threshold if at_most else value >= threshold
            rows.append({"item": name, "case": case, "value": value, "threshold": threshold,
                         "met": bool(met)})

    for case, entry in result["cases"].items():
        s, ranks = entry.get("summary", {}), entry.get("ranks", {}).get("2", {})
        per_gpu = ranks.get("nnz", 0) / 2
        if case.startswith("band") and per_gpu >= 250e6:
            item("product weak efficiency, 2 GPUs, >= 250M nnz per GPU", case,
                 s.get("weak_product_2"), 0.85)
            item("cg iteration weak efficiency, 2 GPUs (from the client)", case,
                 s.get("weak_cg_iteration_2"), 0.8)
        if case.startswith("powerlaw") and per_gpu >= 250e6:
            item("product weak efficiency, 2 GPUs, power-law", case, s.get("weak_product_2"),
                 0.7)
        if case.startswith("band") and ranks.get("nnz", 0) >= 500e6:
            item("cg strong speedup, 2 GPUs, >= 500M nnz (from the client)", case,
                 s.get("strong_cg_iteration_2"), 1.7)
        if ranks.get("nnz", 0) >= 500e6:
            item("prepare on 2 GPUs / one GPU's make and prepare of half", case,
                 s.get("prepare_ratio_2"), 2.0, at_most=True)
    for ranks, check in result.get("check", {}).items():
        for kind in ("band", "powerlaw"):
            item(f"product relative error vs SciPy, float64, {ranks} ranks", kind,
                 check.get(f"{kind}_product_relative_error"), 1e-12, at_most=True)
        scipy_count = check.get("cg_iterations_scipy")
        for key in ("cg_iterations_ranks", "cg_iterations_one_device"):
            if scipy_count and key in check:
                item(f"cg iterations / SciPy's - 1 ({key}, {ranks} ranks)", "band",
                     abs(check[key] / scipy_count - 1), 0.01, at_most=True)
    return rows
