"""Where a GPU cg iteration's time goes: each of its launches timed alone, against the whole
iteration and the memory floor.

A cg iteration on the GPU is three launches when the product forms p·q (``direction``, the
product with its dot, ``update``) and four when it cannot (the product, then a pass that forms
p·q). For each Laplacian and dtype this captures 32 copies of one launch as a CUDA graph on a
solve's own workspace (:class:`autospmv._solve.machines.CudaMachine`) and replays it: µs per
launch, back to back, for

* ``direction``: p = r + β p;
* ``product``: q = A p alone, and ``product_dot``: q = A p with p·q (one launch where the
  product forms it, ``fused_dot``; else the product and a pass of its own);
* ``update``: x += α p, r −= α q with the sums of r·r;
* ``iteration``: the three or four in a row, and ``solve_iteration``: ``autospmv.cg`` with
  rtol=0 per iteration (what a user's solve takes, replays and flag reads included);
* ``vector_copy``: one device copy of a vector, for scale;

with ``floor_us`` and ``chained_floor_us`` as :mod:`benchmarks.solvers_gpu` computes them.
``--blocks-per-sm`` reruns each case with the steps' and the dot's grid of that many blocks
per multiprocessor (:data:`autospmv.kernels.cuda.grid_sum.BLOCKS_PER_SM`). Results go to
``--out`` (JSON lines naming the GPU). Run from the repository root on a GPU::

    PYTHONPATH=. python benchmarks/cg_iteration_pieces.py --out pieces.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import autospmv
from autospmv._solve.cg import CG, DIRECTION, UPDATE
from autospmv._solve.machines import CudaMachine
from autospmv._solve.scalars import MAXITER, TOL
from autospmv.kernels.cuda import grid_sum
from benchmarks.solvers_gpu import (chained_copies_seconds, copy_bandwidth, floor_seconds,
                                    graph_us, laplacian, solver_iteration_us)


def pieces(cp, op, n: int, dtype) -> dict:
    """µs per launch of each piece of a cg iteration on a workspace of its own (the iteration
    limit out of reach and the tolerance 0, so that no step stops)."""
    machine = CudaMachine(op, n, dtype, CG.rows, CG.scalars, None)
    out = {}
    with machine:
        cg = CG(machine)
        machine.upload(cg.b, cp.asarray(np.random.default_rng(1).standard_normal(n), dtype))
        machine.set_flags({MAXITER: 2**62})
        machine.set_scalars({TOL: 0.0})
        cg.start(False)
        stream = machine.stream
        out["direction"] = graph_us(cp, stream,
                                    lambda: machine.step(DIRECTION, cg.p, cg.r, cg.r))
        out["product"] = graph_us(cp, stream, lambda: machine.product(cg.p, cg.q))
        out["product_dot"] = graph_us(cp, stream,
                                      lambda: machine.product(cg.p, cg.q, keep_dot=True))
        out["fused_dot"] = op.product_with_dot(dtype, cp.zeros(1), 0) is not None
        out["update"] = graph_us(cp, stream,
                                 lambda: machine.step(UPDATE, cg.x, cg.r, cg.p, cg.q))
        out["iteration"] = graph_us(cp, stream, cg.iteration)
        p, q = machine.view(cg.p), machine.view(cg.q)
        out["vector_copy"] = graph_us(cp, stream, lambda: q.__setitem__(Ellipsis, p))
        out["stopped"] = bool(machine.stopped(machine.flags()))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results (JSON lines)")
    parser.add_argument("--cases", default="2:5e6,3:5e6,3:1e6,2:2e7",
                        help="Laplacians as dimensions:nonzeros, comma-separated")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--blocks-per-sm", default=str(grid_sum.BLOCKS_PER_SM),
                        help="grids of the steps and the dot to time, comma-separated")
    args = parser.parse_args(argv)
    import cupy as cp

    bandwidth = copy_bandwidth(cp)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    shipped = grid_sum.BLOCKS_PER_SM
    with args.out.open("w") as out:
        for case in args.cases.split(","):
            dims, size = case.split(":")
            A = laplacian(int(dims), float(size))
            n = A.shape[0]
            for dtype in (np.dtype(d) for d in args.dtypes.split(",")):
                Ad = A.astype(dtype)
                b = cp.asarray(np.random.default_rng(2).standard_normal(n), dtype)
                base = dict(device=device, matrix=f"laplacian{dims}d-{float(size):.0e}", n=n,
                            nnz=int(A.nnz), dtype=dtype.name,
                            floor_us=floor_seconds(A, dtype.itemsize, bandwidth) * 1e6,
                            chained_floor_us=chained_copies_seconds(cp, A,
                                                                    dtype.itemsize) * 1e6)
                for blocks in (int(b) for b in args.blocks_per_sm.split(",")):
                    grid_sum.BLOCKS_PER_SM = blocks
                    try:
                        op = autospmv.prepare(Ad, device="cuda")
                        row = dict(base, kernel=op.kernel, blocks_per_sm=blocks,
                                   **pieces(cp, op, n, dtype),
                                   solve_iteration=solver_iteration_us(cp, op, b, "cg", 320))
                    finally:
                        grid_sum.BLOCKS_PER_SM = shipped
                    print(json.dumps(row), flush=True)
                    out.write(json.dumps(row) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
