"""µs per iteration of autospmv's GPU solvers on Laplacians: cg, bicgstab and minres, each run
for a fixed number of iterations (rtol=0) on one operator prepared for solving
(``prepare(A, solver=True)``: the model's kernel, not timed candidates, so that runs of two
trees multiply by the same kernel), CUDA events around whole solves, the median of
five after one (:func:`benchmarks.solvers_gpu.solver_iteration_us`).

For comparing two trees of the solvers' steps on one machine: run it once per tree with a
``--tag`` naming it, and the rows (JSON lines naming the GPU, the matrix, the dtype, the kernel
and each solver's µs) land in one file. Run from the repository root on a GPU::

    PYTHONPATH=. python benchmarks/solver_iterations.py --tag mytree --out iterations.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import autospmv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solvers_gpu import laplacian, solver_iteration_us  # noqa: E402  (beside this script)

SOLVERS = ("cg", "bicgstab", "minres")
CASES = "2:5e6,3:5e6,2:2e7"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="results (JSON lines, appended)")
    parser.add_argument("--tag", required=True, help="names the tree in every row")
    parser.add_argument("--cases", default=CASES,
                        help="Laplacians as dimensions:nonzeros, comma-separated")
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args(argv)
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    with open(args.out, "a") as out:
        for case in args.cases.split(","):
            dims, nnz = case.split(":")
            A = laplacian(int(dims), float(nnz))
            for dtype in (np.float32, np.float64):
                op = autospmv.prepare(A.astype(dtype), device="cuda", solver=True)
                rng = np.random.default_rng(1)
                b = cp.asarray(rng.standard_normal(A.shape[0]).astype(dtype))
                row = {"tag": args.tag, "device": device, "matrix": f"laplacian{dims}d-{nnz}",
                       "nnz": int(A.nnz), "dtype": np.dtype(dtype).name, "kernel": op.kernel,
                       **{solver: solver_iteration_us(cp, op, b, solver, args.iterations)
                          for solver in SOLVERS}}
                out.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
