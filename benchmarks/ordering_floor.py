"""The floor of a renumbered product in the caller's order on the GPU.

An operator that stores ``P A Pᵀ`` (``prepare(A, order=...)``) takes x and returns y in A's own
order, so each product moves x into the stored order and y out of it: a scattered access per
row each, whatever kernel runs the product. This benchmark measures, on the square shared
matrices grown to ``--grown-nnz`` nonzeros and numbered at random (as
:mod:`benchmarks.ordering`), each timed as a CUDA graph replayed
(:func:`benchmarks.solvers_gpu.graph_us`, so the host's launches do not count):

* ``keep_us``: the automatic operator in A's order (random numbering, no gathers);
* ``caller_us``: the operator in the bfs order, in A's order (its two gathers included);
* ``own_us``: the same operator's product in its stored order (``op.in_own_order()``);
* ``gather_us`` and ``scatter_us``: one permutation of x alone, as a gather (``dst[i] =
  src[perm[i]]``: scattered reads; the operator's own kernel) and as a scatter
  (``dst[inverse[j]] = src[j]``: scattered writes); ``copy_us``: a copy of x;
* ``floor_caller_us`` = ``own_us`` + 2 × the faster permutation, and ``ceiling_caller`` =
  ``keep_us / floor_caller_us``: the most a product in the caller's order can gain from the
  order on this device.

Run from the repository root on a GPU::

    PYTHONPATH=. python benchmarks/ordering_floor.py .matrices/shared --limit 10 --out floor.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from numba import cuda

import autospmv
from autospmv.kernels.cuda.permute import BLOCK, gather_kernel
from benchmarks.ordering import Device, at_random, geomean, grown, shared_matrices
from benchmarks.solvers_gpu import graph_us


@cuda.jit
def scatter_kernel(index, src, dst):
    """``dst[index[j]] = src[j]``: the permutation with its writes scattered (the operator's
    own :func:`autospmv.kernels.cuda.permute.gather_kernel` scatters its reads)."""
    j = cuda.grid(1)
    if j < src.shape[0]:
        dst[index[j]] = src[j]


def measure(cp, stream, name: str, R, dtype) -> dict:
    """One matrix numbered at random, in one dtype: the row of the module docstring."""
    Rd = R.astype(dtype)
    n = R.shape[0]
    x = cp.asarray(np.random.default_rng(0).standard_normal(n).astype(dtype))
    y = cp.empty(n, dtype)
    keep = autospmv.prepare(Rd, device="cuda", order="keep")
    started = time.perf_counter()
    ordered = autospmv.prepare(Rd, device="cuda", order="bfs")
    prepare_s = time.perf_counter() - started
    own = ordered.in_own_order()
    perm, inverse = ordered.order_arrays(cp)  # the device copies the operator gathers with
    moved = cp.empty_like(x)
    blocks = -(-n // BLOCK)
    on = cuda.external_stream(stream.ptr)
    d_perm, d_inverse, d_x, d_moved = (cuda.as_cuda_array(v) for v in (perm, inverse, x, moved))
    row = {"matrix": name, "dtype": np.dtype(dtype).name, "n": n, "nnz": R.nnz,
           "keep_kernel": keep.kernel, "own_kernel": own.kernel, "bfs_prepare_s": prepare_s}
    with stream:
        row["keep_us"] = graph_us(cp, stream, lambda: keep.matvec(x, out=y))
        row["caller_us"] = graph_us(cp, stream, lambda: ordered.matvec(x, out=y))
        row["own_us"] = graph_us(cp, stream, lambda: own.matvec(x, out=y))
        row["gather_us"] = graph_us(
            cp, stream, lambda: gather_kernel[blocks, BLOCK, on](d_perm, d_x, d_moved))
        row["scatter_us"] = graph_us(
            cp, stream, lambda: scatter_kernel[blocks, BLOCK, on](d_inverse, d_x, d_moved))
        row["copy_us"] = graph_us(cp, stream, lambda: moved.__setitem__(Ellipsis, x))
    row["floor_caller_us"] = row["own_us"] + 2 * min(row["gather_us"], row["scatter_us"])
    row["speedup_caller"] = row["keep_us"] / row["caller_us"]
    row["speedup_own"] = row["keep_us"] / row["own_us"]
    row["ceiling_caller"] = row["keep_us"] / row["floor_caller_us"]
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrices", nargs="+", help="folders of .npz matrices")
    parser.add_argument("--grown-nnz", type=float, default=1e7)
    parser.add_argument("--limit", type=int, default=10, help="matrices at most")
    parser.add_argument("--out", required=True, help="JSON file of the results")
    args = parser.parse_args(argv)
    device = Device("cuda")
    cp = device.cp
    stream = cp.cuda.Stream(non_blocking=True)
    rows = []
    for name, A in shared_matrices(args.matrices, args.limit):
        R = at_random(grown(A, args.grown_nnz))
        for dtype in (np.float32, np.float64):
            row = measure(cp, stream, name, R, dtype)
            rows.append(row)
            print(f"{name} {row['dtype']}: keep {row['keep_us']:.1f} µs, caller's order "
                  f"{row['caller_us']:.1f}, stored order {row['own_us']:.1f}, gather "
                  f"{row['gather_us']:.1f}, scatter {row['scatter_us']:.1f}; ceiling "
                  f"{row['ceiling_caller']:.2f}", file=sys.stderr, flush=True)
    summary = {dtype: {key: geomean(r[key] for r in rows if r["dtype"] == dtype)
                       for key in ("speedup_caller", "speedup_own", "ceiling_caller")}
               for dtype in ("float32", "float64")}
    Path(args.out).write_text(json.dumps({"device": device.describe(), "args": vars(args),
                                          "rows": rows,
                                          "summary": summary}, indent=1))
    print(json.dumps(summary, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
