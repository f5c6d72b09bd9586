"""Where a GPU GMRES column's time goes: each of its launches timed alone, against the bytes it
moves at the copy bandwidth, and whole solves against cupyx's.

A GMRES column on the GPU is the product w = A v_c, the first Gram-Schmidt pass's projection
(w's dot products with v_0 … v_c and its norm, one :class:`autospmv._solve.steps.MultiStep`),
its subtraction (w −= Σ h_k v_k with ‖w‖², another), where needed the same two again, and the
scaling of w into v_{c+1}. For each convection–diffusion matrix (a Laplacian with a
skew-symmetric part, :func:`benchmarks.solvers_gpu.convection`) and dtype this captures 32
copies of one launch as a CUDA graph on a solve's own workspace, with a basis of ``--basis``
vectors, and replays it (:func:`benchmarks.solvers_gpu.graph_us`): µs per launch of

* ``product``, ``project``, ``subtract`` and ``scale``, each against ``*_floor``: its fewest
  bytes (the basis and w once; w twice more for the subtraction's write and the scale) at the
  device-to-device copy bandwidth measured in the same run;
* ``column``: the column's launches in the solver's order as one graph (product, projection,
  subtraction, the second pass's projection and subtraction, which skip as they do for a column
  orthogonal after its first pass, and scale), and ``column_without_second_pass``: the same
  without the two launches that skip (their difference is what those cost in the sequence);
* ``solve_per_inner``: ``autospmv.gmres`` with rtol=0 and restart=30 per inner iteration
  (4 restart cycles, median of 3 solves), and ``cupyx_per_inner``: cupyx's gmres on the matrix
  in cuSPARSE, the same way.

The passes time with finishes that do nothing (so that no column ends; only the second pass's
launches in ``column`` skip).
Results go to ``--out`` (JSON lines naming the GPU). Run from the repository root on a GPU::

    PYTHONPATH=. python benchmarks/gmres_column_pieces.py --out pieces.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

import numpy as np

import autospmv
from autospmv._solve import gmres
from autospmv._solve.dual import dual
from autospmv._solve.machines import CudaMachine
from autospmv._solve.scalars import ORTHOGONAL, STATE
from autospmv._solve.steps import MultiStep, Step
from benchmarks.solvers_gpu import (convection, copy_bandwidth, cupyx_call, graph_us, laplacian,
                                    timed)

RESTART = 30
CYCLES = 4


@dual
def no_totals(s, f, totals):
    """A finish that leaves the scalars and flags as they are."""
    return


@contextlib.contextmanager
def gmres_workspace(cp, op, n: int, dtype):
    """``(machine, method)``: the machine of a GMRES(RESTART) solve on ``op``, entered, its
    workspace filled with random values, and the method on it."""
    options = {"restart": RESTART}
    machine = CudaMachine(op, n, dtype, gmres.GMRES.rows, gmres.GMRES.scalar_count(options),
                          None, workspace_rows=gmres.GMRES.workspace_rows(options),
                          partial_sums=gmres.GMRES.partial_sums(options))
    with machine:
        method = gmres.GMRES(machine, RESTART)
        machine.W[...] = cp.asarray(np.random.default_rng(1).standard_normal(machine.W.size),
                                    dtype)
        yield machine, method


def pieces(cp, op, n: int, dtype, basis: int, bandwidth: float) -> dict:
    """µs per launch of each pass of a column with ``basis`` basis vectors, and their floors."""
    with gmres_workspace(cp, op, n, dtype) as (machine, method):
        out = {"grid": machine.grid}
        project = MultiStep(gmres.project, no_totals, RESTART + 2, 0)
        subtract = MultiStep(gmres.subtract_projections, no_totals, RESTART + 2, 0,
                             combines=True)
        scale = Step(gmres.scale, None, 0)
        stream, w, v = machine.stream, method.w, method.v
        out["product"] = graph_us(cp, stream, lambda: machine.product(v[basis - 1], w))
        out["project"] = graph_us(cp, stream,
                                  lambda: machine.step(project, w, v[0], basis, 0, 0))
        out["subtract"] = graph_us(cp, stream,
                                   lambda: machine.step(subtract, w, v[0], 0, gmres.H, basis))
        out["scale"] = graph_us(cp, stream, lambda: machine.step(scale, v[basis], w))
        # a whole column as the solver queues it, the second pass's two launches skipping (the
        # column orthogonal after its first pass), and the same without them
        machine.set_flags({STATE: ORTHOGONAL})
        again = dataclasses.replace(project, skip=gmres.SECOND_PASS_SKIP)
        subtract_again = dataclasses.replace(subtract, skip=gmres.SECOND_PASS_SKIP)

        def column(second_pass: bool):
            machine.product(v[basis - 1], w)
            machine.step(project, w, v[0], basis, 0, 0)
            machine.step(subtract, w, v[0], 0, gmres.H, basis)
            if second_pass:
                machine.step(again, w, v[0], basis, 0, 0)
                machine.step(subtract_again, w, v[0], 0, gmres.H, basis)
            machine.step(scale, v[basis], w)

        out["column"] = graph_us(cp, stream, lambda: column(True))
        out["column_without_second_pass"] = graph_us(cp, stream, lambda: column(False))
    vector_us = n * np.dtype(dtype).itemsize / bandwidth * 1e6
    out.update(project_floor=(basis + 1) * vector_us, subtract_floor=(basis + 2) * vector_us,
               scale_floor=2 * vector_us)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results (JSON lines)")
    parser.add_argument("--cases", default="2:5e6,3:5e6",
                        help="Laplacians as dimensions:nonzeros, comma-separated")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--basis", type=int, default=16,
                        help="basis vectors of the column timed (at most 30)")
    args = parser.parse_args(argv)
    if not 1 <= args.basis <= RESTART:
        parser.error(f"--basis must be from 1 to {RESTART}")
    import cupy as cp
    import cupyx.scipy.sparse as csp

    bandwidth = copy_bandwidth(cp)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with args.out.open("w") as out:
        for case in args.cases.split(","):
            dims, size = case.split(":")
            A = convection(laplacian(int(dims), float(size)))
            n = A.shape[0]
            for dtype in (np.dtype(d) for d in args.dtypes.split(",")):
                Ad = A.astype(dtype)
                op = autospmv.prepare(Ad, device="cuda")
                row = dict(device=device, matrix=f"convection{dims}d-{float(size):.0e}", n=n,
                           nnz=int(A.nnz), dtype=dtype.name, kernel=op.kernel,
                           copy_bandwidth=bandwidth, basis=args.basis,
                           **pieces(cp, op, n, dtype, args.basis, bandwidth))
                b = cp.asarray(np.random.default_rng(2).standard_normal(n), dtype)
                seconds, _ = timed(cp, lambda: autospmv.gmres(op, b, rtol=0.0, restart=RESTART,
                                                              maxiter=CYCLES), repeats=3)
                row["solve_per_inner"] = seconds * 1e6 / (RESTART * CYCLES)
                cusparse = csp.csr_matrix(Ad)
                seconds, _ = timed(cp, lambda: cupyx_call("gmres", cusparse, b, 0.0, CYCLES),
                                   repeats=3)
                row["cupyx_per_inner"] = seconds * 1e6 / (RESTART * CYCLES)
                print(json.dumps(row), flush=True)
                out.write(json.dumps(row) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
