"""How many steps the bfs order's walk on the GPU (:mod:`autospmv.kernels.cuda.ordering`) takes:
its labelling passes and its levels, counted on the host for the matrices of
``benchmarks/ordering.py`` (each shared square matrix grown block-diagonally to about
``--grown-nnz`` nonzeros and numbered at random).

The walk's time on a GPU is about its steps times the launches of a step (a few microseconds
each), plus passes over A at the GPU's bandwidth; the host's walk is O(n + nnz) but sequential.
Per matrix: the parts (connected parts of A + Aᵀ, each walked from its vertex of least
``(degree, index)``), the **levels** (the deepest part's levels from its start: exactly the
levels the walk queues before its last vertex is placed; the device reads its bounds every
``CHECK_EVERY`` levels, so it queues up to that many more, which do nothing), and the
**labelling passes** of a synchronous emulation of the parts' labels (every edge's two labels
lowered to their minimum, the label of the larger label's vertex too, then each label
replaced by its label's label, until an edge-wise pass changes nothing). On the GPU a pass sees
the updates of the threads before it, so it takes at most about as many. For comparison, the
host's walk of the same matrix on this machine (``rows_rcm``, compiled before the clock), and
with ``--gpu`` the walk on the GPU of the matrix uploaded there (``bfs_on_device``, the median
of ``--repeats`` walks after one that compiles its kernels): ``device_walk_s`` against nnz and
levels is what the estimate of a walk on the GPU (``DEVICE_ORDER_SECONDS``) is fitted to.
``--grown-nnz`` takes several sizes.

    PYTHONPATH=. python benchmarks/walk_steps.py .matrices/shared --out walk-steps.json
    PYTHONPATH=. python benchmarks/walk_steps.py .matrices/shared --gpu \
        --grown-nnz 1e5 1e6 1e7 --out walk-steps-gpu.json

Results go to ``--out`` (JSON), progress to stderr. About two minutes on two cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv.kernels.cpu.ordering import rows_rcm  # noqa: E402
from ordering import at_random, grown, log, shared_matrices  # noqa: E402  (beside this script)


def structure_of_a_plus_at(A) -> sp.csr_matrix:
    pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    both = (pattern + pattern.T).tocsr()
    both.sort_indices()
    return both


def labelling_passes(S) -> int:
    """The passes of the synchronous emulation of the parts' labels (module docstring)."""
    n = S.shape[0]
    label = np.arange(n)
    rows = np.repeat(np.arange(n), np.diff(S.indptr))
    columns = S.indices.astype(np.int64)
    passes = 0
    while True:
        passes += 1
        a, b = label[rows], label[columns]
        differ = a != b
        if not differ.any():
            return passes
        low = np.minimum(a, b)[differ]
        np.minimum.at(label, np.maximum(a, b)[differ], low)
        np.minimum.at(label, rows[differ], low)
        np.minimum.at(label, columns[differ], low)
        label = label[label]


def parts_and_levels(S) -> tuple[int, int]:
    """The connected parts of S and the levels of the walk from each part's start."""
    n = S.shape[0]
    parts, part = connected_components(S, directed=False)
    key = np.diff(S.indptr).astype(np.int64) * n + np.arange(n)
    by_part = np.lexsort((key, part))
    starts = by_part[np.r_[0, np.flatnonzero(np.diff(part[by_part])) + 1]]
    reached = np.zeros(n, bool)
    reached[starts] = True
    frontier = np.zeros(n, bool)
    frontier[starts] = True
    levels = 1
    while True:
        nxt = np.zeros(n, bool)
        nxt[S[frontier].indices] = True
        nxt &= ~reached
        if not nxt.any():
            return parts, levels
        reached |= nxt
        frontier = nxt
        levels += 1


def device_walk_seconds(R, S, repeats: int) -> float:
    """The median time of the bfs walk on the GPU of ``R`` uploaded there, its order checked
    against the host walk of ``S``, the structure of R + Rᵀ; NaN where the walk gives up (the
    host would walk)."""
    import cupy

    from autospmv._decide.ordering import bfs_on_device
    from autospmv._prepare.device_input import upload_csr

    on_gpu = upload_csr(R)
    times = []
    for _ in range(repeats):
        cupy.cuda.Device().synchronize()
        started = time.perf_counter()
        perm = bfs_on_device(on_gpu)
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - started)
        if perm is None:
            return float("nan")
    if not np.array_equal(perm, rows_rcm(S.indptr, S.indices, S.shape[0])):
        raise AssertionError("the walk on the GPU differs from the host's walk of A + Aᵀ")
    return float(np.median(times))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrices", nargs="+", help="folders of .npz matrices")
    parser.add_argument("--grown-nnz", type=float, nargs="+", default=[1e7],
                        help="the sizes each matrix is grown to")
    parser.add_argument("--gpu", action="store_true", help="time the walk on the GPU too")
    parser.add_argument("--repeats", type=int, default=3, help="walks on the GPU timed")
    parser.add_argument("--limit", type=int, default=21, help="matrices at most")
    parser.add_argument("--out", required=True, help="JSON file of the results")
    args = parser.parse_args(argv)
    small = canonicalize(sp.random(50, 50, density=0.1, format="csr", random_state=0))
    rows_rcm(small.indptr, small.indices, 50)  # compiled before the clock
    if args.gpu:
        device_walk_seconds(small, structure_of_a_plus_at(small), 1)  # compiled before the clock
    rows = []
    for (name, A), nnz in itertools.product(shared_matrices(args.matrices, args.limit),
                                            args.grown_nnz):
        R = canonicalize(at_random(grown(A, nnz)))
        started = time.perf_counter()
        rows_rcm(R.indptr, R.indices, R.shape[0])
        host_s = time.perf_counter() - started
        S = structure_of_a_plus_at(R)
        parts, levels = parts_and_levels(S)
        row = {"matrix": name, "rows": R.shape[0], "nnz": int(R.nnz), "parts": parts,
               "levels": levels, "labelling_passes": labelling_passes(S),
               "host_walk_s": host_s}
        if args.gpu:
            row["device_walk_s"] = device_walk_seconds(R, S, args.repeats)
        log(f"{name}: {row['rows']:,} rows, {row['nnz']:,} nonzeros, {parts:,} parts, "
            f"{levels} levels, {row['labelling_passes']} labelling passes; the host's walk "
            f"{host_s:.3f} s" + (f", on the GPU {row['device_walk_s']:.4f} s" if args.gpu else ""))
        rows.append(row)
    keys = ("levels", "labelling_passes", "host_walk_s") + (("device_walk_s",) if args.gpu else ())
    out = {"machine": platform.machine(), "processor": platform.processor(),
           "date": time.strftime("%Y-%m-%d"), "grown_nnz": args.grown_nnz,
           "command": " ".join(["benchmarks/walk_steps.py", *(argv or sys.argv[1:])]),
           "rows": rows,
           "summary": {key: [min(values), max(values)] for key in keys
                       if (values := [r[key] for r in rows if not math.isnan(r[key])])}}
    if args.gpu:
        import cupy

        out["device"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
