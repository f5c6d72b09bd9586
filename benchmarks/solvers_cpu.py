"""autospmv's solvers on the CPU against SciPy's with SciPy's matrix: seconds per solve and
iteration counts, for cg and minres (2-D Laplacians, or 3-D ones with ``--dims 3``),
gmres(restart=30) and bicgstab (the Laplacians with a convection term), from 10⁴ to 2·10⁶
nonzeros, in float64 (``--dtypes float64,float32`` adds float32: matrix and b in float32 on
both sides).

SciPy runs in a process of its own that never imports autospmv (so numba's threads and the
OpenMP settings autospmv makes cannot slow it down), on the same problems; each solve runs
``--repeats`` times after one warm-up (compilation excluded), SciPy's and autospmv's solves in
turn, one at a time, so that a change in a shared machine's load falls on both sides alike. The
table gives the medians and the spread. Run from the repository root::

    PYTHONPATH=. python benchmarks/solvers_cpu.py --out results.json
    PYTHONPATH=. python benchmarks/solvers_cpu.py --sizes 1e5,1e6,5e6 --methods cg,gmres \
        --dtypes float64,float32 --out results.json

``--at-random`` numbers every problem at random (one symmetric permutation, P A Pᵀ and P b, the
same on both sides), as graph and mesh data often arrive, and prepares autospmv's operator as its
solvers prepare a matrix they are given (``products=`` the iteration limit, ``solver=True``: the
order is part of the decision); ``prepare``'s seconds are recorded beside the solves.

``--renumberings K`` times nothing: it counts SciPy's iterations on each problem as given and in
K random symmetric renumberings (P A Pᵀ and P b, the same problem with its sums taken in other
orders), next to autospmv's count: how far rounding alone moves SciPy's own count.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp


def laplacian(nnz, dims=2):
    """The (2·dims + 1)-point Laplacian of a cubic grid with about ``nnz`` nonzeros."""
    k = max(3, int(round((nnz / (2 * dims + 1)) ** (1 / dims))))
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    A = T
    for _ in range(dims - 1):
        A = sp.kronsum(A, T)
    return A.tocsr()


def convection(A):
    return (A + 0.5 * (sp.triu(A, 1) - sp.tril(A, -1))).tocsr()


def problems(args):
    for size in (float(s) for s in args.sizes.split(",")):
        for dtype in args.dtypes.split(","):
            P = laplacian(size, args.dims)
            b = np.random.default_rng(0).standard_normal(P.shape[0]).astype(dtype)
            if args.at_random:
                p = np.random.default_rng(1).permutation(P.shape[0])
                P, b = P[p][:, p].tocsr(), b[p]
            for method in args.methods.split(","):
                A = (P if method in ("cg", "minres") else convection(P)).astype(dtype)
                extra = {"restart": 30} if method == "gmres" else {}
                maxiter = max(1, args.maxiter // 30) if method == "gmres" else args.maxiter
                yield method, A, b, dict(rtol=1e-8, maxiter=maxiter, **extra)


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def scipy_side(args):
    """Serve SciPy's solves of :func:`problems` to :func:`main`: each line read names a
    problem's index (never a smaller one than the line before) and ``warm`` or ``time``;
    ``warm`` solves it once and answers its info and residual, ``time`` answers the seconds of
    one more solve. Only the problem asked for is built and held."""
    import scipy.sparse.linalg as spla

    cases = enumerate(problems(args))
    index = -1
    for line in sys.stdin:
        wanted, what = line.split()
        while index < int(wanted):
            index, (method, A, b, kwargs) = next(cases)
        solver = getattr(spla, method)
        if what == "warm":
            x, info = solver(A, b, **kwargs)
            answer = {"info": int(info), "residual": float(np.linalg.norm(A @ x - b))}
        else:
            answer = {"seconds": timed(lambda: solver(A, b, **kwargs))}
        print(json.dumps(answer), flush=True)


def renumbered_counts(args) -> list[dict]:
    """SciPy's counts as given and in ``args.renumberings`` random renumberings, and
    autospmv's count as given, per problem (see the module docstring)."""
    import autospmv
    from solvers_gpu import scipy_iterations  # beside this script

    rows = []
    for method, A, b, kwargs in problems(args):
        def count(A, b):
            return scipy_iterations(method, A, b, kwargs["rtol"], kwargs["maxiter"])[0]

        counts = [count(A, b)]
        for seed in range(args.renumberings):
            p = np.random.default_rng(seed).permutation(A.shape[0])
            counts.append(count(A[p][:, p].tocsr(), b[p]))
        op = autospmv.prepare(A, device="cpu")
        getattr(autospmv, method)(op, b, **kwargs)
        rows.append({"method": method, "dtype": str(A.dtype), "nnz": int(A.nnz),
                     "scipy_given": counts[0], "scipy_renumbered": counts[1:],
                     "autospmv": op.last_solve["iterations"]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results file (JSON)")
    parser.add_argument("--sizes", default="1e4,1e5,5e5,2e6", help="nonzeros, comma-separated")
    parser.add_argument("--methods", default="cg,gmres,bicgstab,minres")
    parser.add_argument("--dtypes", default="float64", help="float64 and/or float32")
    parser.add_argument("--dims", type=int, default=2, choices=(2, 3),
                        help="the Laplacians' grid dimension")
    parser.add_argument("--repeats", type=int, default=5, help="timed solves per solver")
    parser.add_argument("--maxiter", type=int, default=400, help="iteration limit")
    parser.add_argument("--at-random", action="store_true",
                        help="number the problems at random (see the module docstring)")
    parser.add_argument("--renumberings", type=int, default=0,
                        help="count SciPy's iterations in this many random renumberings "
                             "instead of timing")
    parser.add_argument("--scipy-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scipy_side:
        return scipy_side(args)
    if args.out is None:
        parser.error("--out is required")
    if args.renumberings:
        rows = renumbered_counts(args)
        args.out.write_text(json.dumps({"date": datetime.date.today().isoformat(),
                                        "scipy": scipy.__version__, "dims": args.dims,
                                        "renumberings": args.renumberings, "rows": rows}))
        return None
    scipy_process = subprocess.Popen(
        [sys.executable, __file__, "--scipy-side", "--sizes", args.sizes, "--methods",
         args.methods, "--dtypes", args.dtypes, "--dims", str(args.dims), "--maxiter",
         str(args.maxiter)] + (["--at-random"] if args.at_random else []),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask_scipy(index: int, what: str) -> dict:
        scipy_process.stdin.write(f"{index} {what}\n")
        scipy_process.stdin.flush()
        return json.loads(scipy_process.stdout.readline())

    import autospmv
    from autospmv._solve.driver import METHODS, hint_products

    rows = []
    for index, (method, A, b, kwargs) in enumerate(problems(args)):
        started = time.perf_counter()
        if args.at_random:  # the hint the solvers prepare a matrix they are given with
            products = hint_products(METHODS[method], kwargs["maxiter"])
            op = autospmv.prepare(A, device="cpu", products=products, solver=True)
        else:
            op = autospmv.prepare(A, device="cpu")
        prepare_s = time.perf_counter() - started
        solver = getattr(autospmv, method)
        x, info = solver(op, b, **kwargs)
        scipy_row = ask_scipy(index, "warm")
        scipy_row["seconds"], ours = [], []
        for _ in range(args.repeats):
            scipy_row["seconds"].append(ask_scipy(index, "time")["seconds"])
            ours.append(timed(lambda: solver(op, b, **kwargs)))
        row = {"method": method, "dtype": str(A.dtype), "n": A.shape[0], "nnz": int(A.nnz),
               "kernel": op.kernel, "order": op.order, "prepare_s": prepare_s,
               "threads": op.threads, "iterations": op.last_solve["iterations"], "info": info,
               "residual": float(np.linalg.norm(A @ x - b)), "seconds": ours,
               "scipy": scipy_row}
        rows.append(row)
        ratio = statistics.median(scipy_row["seconds"]) / statistics.median(ours)
        print(f"{method:9s} {str(A.dtype):8s} {A.nnz:9d} autospmv "
              f"{statistics.median(ours) * 1e3:9.2f} ms "
              f"[{min(ours) * 1e3:.2f}-{max(ours) * 1e3:.2f}] SciPy "
              f"{statistics.median(scipy_row['seconds']) * 1e3:9.2f} ms "
              f"[{min(scipy_row['seconds']) * 1e3:.2f}-{max(scipy_row['seconds']) * 1e3:.2f}]"
              f"  {ratio:.2f}x", flush=True)
    scipy_process.stdin.close()
    scipy_process.wait()
    out = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
           "date": datetime.date.today().isoformat(), "scipy": scipy.__version__,
           "autospmv": autospmv.__version__, "dims": args.dims, "at_random": args.at_random,
           "rows": rows}
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
