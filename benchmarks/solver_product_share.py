"""How much of a SciPy solver's time is its sparse products, and what that allows any operator.

A solver alternates products with vector work (``dot``, ``norm``, ``axpy``, ARPACK's
orthogonalisation, Python bookkeeping) that no operator changes. If products take a share ``f``
of the solve with the SciPy matrix, an operator whose products are ``k`` times faster makes the
solve ``1 - f + f / k`` times as long (Amdahl's law), and no operator gets below ``1 - f``. On a
machine with ``c`` cores a product is at most ``c`` times faster than SciPy's serial one (the
memory bandwidth usually caps it lower), so ``1 - f + f / c`` bounds the operator/SciPy ratio
that :mod:`benchmarks.solvers` measures.

For every matrix with at least ``--min-nnz`` nonzeros and every solver of
:mod:`benchmarks.solvers` (the same problems, iteration caps and tolerances), this solves with
the SciPy matrix behind a timing wrapper (products timed with ``time.perf_counter`` inside the
wrapper, the solve around it; the minimum over ``--rounds`` runs of each), and prints and writes
``f`` and the two bounds. The wrapper's own call overhead falls partly outside the product
timer, which makes the solve a little longer than without it: ``f`` comes out slightly low for
products of a few microseconds and the bounds are then slightly optimistic, never pessimistic
beyond that overhead.

    python benchmarks/solver_product_share.py \\
        --out benchmarks/results/solver-product-share-<host>.json

With ``--operator`` it also times, alone and back to back (no solver around it), SciPy's product
and autospmv's with one thread and with every core, and reports ``1 - f + f / k`` for the fastest
of them (``k``: its speed-up over SciPy's product): the solve time an operator with that product
reaches at best, since inside a solver a product never runs faster than alone. Run it again with
``OMP_WAIT_POLICY=ACTIVE`` to see what spinning workers give alone (they fight the BLAS inside a
solver: see :mod:`autospmv._support.threads`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import solvers  # noqa: E402  (benchmarks/solvers.py: the problems and solver calls)

sys.path.insert(0, str(solvers.ROOT))
from autospmv._support.threads import wait_policy  # noqa: E402
from autospmv._decide.model.store import cpu_model  # noqa: E402
from autospmv._support.timing import time_calls  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402


class Timed:
    """The SciPy operand behind a LinearOperator that adds up the time spent in products."""

    def __init__(self, operand):
        from scipy.sparse.linalg import LinearOperator, aslinearoperator

        inner = aslinearoperator(operand)
        self.seconds = 0.0

        def timed(call):
            def run(x):
                started = time.perf_counter()
                y = call(x)
                self.seconds += time.perf_counter() - started
                return y
            return run

        self.operator = LinearOperator(inner.shape, matvec=timed(inner.matvec),
                                       rmatvec=timed(inner.rmatvec),
                                       matmat=timed(inner.matmat), dtype=inner.dtype)


def share(solve, operand, rounds: int) -> dict:
    """The minimum solve time over ``rounds`` runs and the product time of that run."""
    best = None
    for _ in range(rounds):
        timed = Timed(operand)
        started = time.perf_counter()
        solve(timed.operator)
        total = time.perf_counter() - started
        if best is None or total < best[0]:
            best = (total, timed.seconds)
    total, products = best
    return {"solve_s": total, "products_s": products, "share": products / total}


def product_speedups(matrix, operand, cores: int) -> dict:
    """``{threads: SciPy's product time / autospmv's}`` for one thread and for ``cores``, each
    product called back to back, alone (median of :func:`autospmv._support.timing.time_calls`, after
    untimed calls)."""
    import autospmv

    x = np.random.default_rng(0).standard_normal(matrix.shape[1])

    def median_us(call) -> float:
        for _ in range(10):
            call()
        return time_calls(call, "cpu", budget=0.1)["median"]

    scipy_us = median_us(lambda: operand @ x)
    out = {}
    for threads in sorted({1, cores}):
        op = autospmv.prepare(matrix, device="cpu", threads=threads)
        out[threads] = scipy_us / median_us(lambda: op @ x)
    return out


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", default=None, help="folder of .mtx/.npz matrices")
    parser.add_argument("--min-nnz", type=int, default=solvers.LARGE_NNZ)
    parser.add_argument("--solvers", default=",".join(solvers.SOLVERS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--operator", action="store_true",
                        help="also time autospmv's products alone and bound the solves by them")
    parser.add_argument("--out", help="write the records and summary here (JSON)")
    args = parser.parse_args(argv)
    if args.matrices is None:
        found = solvers.default_matrices()
        if found is None:
            parser.error("no matrices folder found; pass --matrices DIR")
        args.matrices = str(found)
    names = [s for s in args.solvers.split(",") if s]
    files = solvers.matrix_files(argparse.Namespace(matrices=args.matrices, only=None))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    records = []
    for path in files:
        A = canonicalize(sp.load_npz(path)).astype(np.float64)
        scipy_side = solvers.build_problems(A)[0]
        for name in names:
            solve, matrix_key, operand_key = solvers.solver_calls(name, scipy_side)
            operand = scipy_side[operand_key]
            nnz = int(getattr(operand, "nnz", scipy_side["heat"].nnz))
            if nnz < args.min_nnz:
                continue
            solve(operand)  # untimed: caches, first-call costs
            record = {"solver": name, "matrix": path.stem, "nnz": nnz,
                      **share(solve, operand, args.rounds)}
            f = record["share"]
            record["bound_all_cores"] = 1 - f + f / cores
            record["bound_infinitely_fast"] = 1 - f
            line = ""
            if args.operator:
                speedups = product_speedups(scipy_side[matrix_key], operand, cores)
                k = max(speedups.values())
                record["product_speedup_by_threads"] = {str(t): v for t, v in speedups.items()}
                record["bound_measured_product"] = 1 - f + f / k
                alone = " ".join(f"{t}t {v:.2f}x" for t, v in speedups.items())
                line = (f"  product alone {alone}"
                        f"  bound with it {record['bound_measured_product']:.3f}")
            records.append(record)
            print(f"{name:13s} {path.stem:22s} {nnz:9,d} nnz  solve {record['solve_s'] * 1e3:8.1f}"
                  f" ms  products {f:6.1%}  bound on {cores} cores {record['bound_all_cores']:.3f}"
                  f"  with free products {record['bound_infinitely_fast']:.3f}{line}", flush=True)
    summary = []
    for name in names:
        rows = [r for r in records if r["solver"] == name]
        if rows:
            summary.append({"solver": name, "matrices": len(rows),
                            "geomean_share": geomean(r["share"] for r in rows),
                            "geomean_bound_all_cores": geomean(r["bound_all_cores"] for r in rows),
                            "geomean_bound_infinitely_fast":
                                geomean(r["bound_infinitely_fast"] for r in rows)})
            if args.operator:
                summary[-1]["geomean_bound_measured_product"] = geomean(
                    r["bound_measured_product"] for r in rows)
            s = summary[-1]
            print(f"{name:13s} {len(rows)} matrices: geomean bound "
                  f"{s['geomean_bound_all_cores']:.3f} on {cores} cores, "
                  f"{s['geomean_bound_infinitely_fast']:.3f} with free products"
                  + (f", {s['geomean_bound_measured_product']:.3f} with the measured product"
                     if args.operator else ""))
    if args.out:
        load = os.getloadavg() if hasattr(os, "getloadavg") else None
        doc = {"benchmark": "solver_product_share", "date": datetime.date.today().isoformat(),
               "omp_wait_policy": wait_policy(),
               "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:])),
               "device": {"cpu": cpu_model(), "cores": cores, "load_average_at_end": load,
                          "blas": solvers.blas_info()},
               "versions": solvers.versions(), "min_nnz": args.min_nnz, "rounds": args.rounds,
               "summary": summary, "records": records}
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
