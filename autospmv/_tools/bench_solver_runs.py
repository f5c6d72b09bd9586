"""The child process of the solver benchmark (:mod:`autospmv._tools.bench_solvers`): the problems each
solver runs on a matrix, the untimed check that the operator and the SciPy matrix agree, and the
interleaved timing of both, for one configuration (environment and cores) of the driver.

Its imports of NumPy, SciPy and autospmv sit inside the functions, so that the child sets its
BLAS and thread limits before any of them loads.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

SOLVERS = ("cg", "gmres", "lsqr", "eigsh", "expm_multiply")
MAX_ITERATIONS = 200
"""Iteration cap of every solver, so that a badly conditioned matrix cannot take minutes."""
CASE_BUDGET_S = 1.0
"""Timed rounds per (matrix, solver) are cut (to no fewer than 2) to stay near this budget."""
LARGE_NNZ = 100_000
"""Matrices of at least this many nonzeros count as large in the summary."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def geomean(values) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def spd_from(A):
    """SPD matrix from A's pattern: graph Laplacian (unit weights) + 0.01 × mean degree × I."""
    import numpy as np
    import scipy.sparse as sp

    pattern = abs(A).tocsr()
    if pattern.shape[0] != pattern.shape[1]:
        pattern = sp.bmat([[None, pattern], [pattern.T, None]], format="csr")
    W = (pattern + pattern.T).tocsr()
    W.setdiag(0)
    W.eliminate_zeros()
    W.data[:] = 1.0
    degree = np.asarray(W.sum(axis=1)).ravel()
    shift = 0.01 * max(degree.mean(), 1.0)
    return (sp.diags(degree + shift) - W).tocsr()


class Counting:
    """A LinearOperator-like wrapper that counts products (vectors, columns of blocks, and
    transposed products), for the untimed checking run."""

    def __init__(self, M):
        from scipy.sparse.linalg import aslinearoperator

        self.inner = aslinearoperator(M)
        self.count = 0

    def operator(self):
        from scipy.sparse.linalg import LinearOperator

        inner = self.inner

        def matvec(x):
            self.count += 1
            return inner.matvec(x)

        def rmatvec(x):
            self.count += 1
            return inner.rmatvec(x)

        def matmat(X):
            self.count += X.shape[1]
            return inner.matmat(X)

        return LinearOperator(inner.shape, matvec=matvec, rmatvec=rmatvec, matmat=matmat,
                              dtype=inner.dtype)


def solution(n: int):
    """The exact solution of the linear systems: fixed random numbers (a constant vector would
    be an eigenvector of a Laplacian, solved in one iteration)."""
    import numpy as np

    return np.random.default_rng(0).uniform(-1.0, 1.0, n)


def solver_calls(name: str, matrices: dict):
    """(solve(M) -> (solution, iterations or None), the operand for autospmv, for SciPy)."""
    import numpy as np
    import scipy.sparse.linalg as sla

    if name == "cg":
        M = matrices["spd"]
        b = M @ solution(M.shape[1])

        def solve(op):
            count = [0]
            x, _ = sla.cg(op, b, rtol=1e-8, maxiter=MAX_ITERATIONS,
                          callback=lambda xk: count.__setitem__(0, count[0] + 1))
            return x, count[0]
        return solve, "spd", "spd"
    if name == "gmres":
        key = "square"
        M = matrices[key]
        b = M @ solution(M.shape[1])

        def solve(op):
            count = [0]
            x, _ = sla.gmres(op, b, rtol=1e-8, restart=20, maxiter=MAX_ITERATIONS // 20,
                             callback=lambda rk: count.__setitem__(0, count[0] + 1),
                             callback_type="pr_norm")
            return x, count[0]
        return solve, key, key
    if name == "lsqr":
        A = matrices["A"]
        b = A @ solution(A.shape[1])

        def solve(op):
            result = sla.lsqr(op, b, atol=1e-8, btol=1e-8, iter_lim=MAX_ITERATIONS)
            return result[0], int(result[2])
        return solve, "A", "A"
    if name == "eigsh":
        M = matrices["spd"]
        v0 = np.random.default_rng(0).uniform(0.5, 1.5, M.shape[0])
        k = min(4, M.shape[0] - 2)

        def solve(op):
            try:
                values = sla.eigsh(op, k=k, which="LM", v0=v0, tol=1e-8,
                                   maxiter=MAX_ITERATIONS, return_eigenvectors=False)
            except sla.ArpackNoConvergence as error:  # the same on both sides: keep what came
                values = error.eigenvalues
            return np.sort(values), None
        return solve, "spd", "spd"
    if name == "expm_multiply":
        S = matrices["heat"]
        v = np.random.default_rng(0).standard_normal(S.shape[1])
        trace = float(S.diagonal().sum())

        def solve(op):
            np.random.seed(0)  # the 1-norm estimator draws from NumPy's global generator
            return sla.expm_multiply(op, v, traceA=trace), None
        return solve, "heat", "heat_operator"
    raise ValueError(f"unknown solver {name!r}; valid: {', '.join(SOLVERS)}")


def build_problems(A):
    """The matrices the solvers run on (SciPy side) and their autospmv operators."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import aslinearoperator

    import autospmv

    M = spd_from(A)
    heat = (-M / abs(M).sum(axis=0).max()).tocsr()
    scipy_side = {"A": A, "spd": M, "square": A if A.shape[0] == A.shape[1] else M,
                  "heat": heat}
    ops, prepare_s = {}, {}
    for key, matrix in scipy_side.items():
        if key == "square" and matrix is M:
            ops[key] = ops["spd"]
            continue
        started = time.perf_counter()
        ops[key] = autospmv.prepare(matrix, device="cpu")
        prepare_s[key] = time.perf_counter() - started
    scipy_side["heat_operator"] = aslinearoperator(heat)
    ops["heat_operator"] = ops["heat"]
    assert all(sp.issparse(scipy_side[k]) for k in ("A", "spd", "square", "heat"))
    return scipy_side, ops, prepare_s


def relative_difference(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(float(np.linalg.norm(b)), 1e-300)
    return float(np.linalg.norm(a - b)) / scale


def time_pair(op, M, rounds: int) -> dict:
    """``op @ x`` alone, ``dot`` alone, and ``op @ x`` followed by a ``dot``, interleaved."""
    import numpy as np

    x = np.random.default_rng(1).standard_normal(M.shape[1])
    n = M.shape[0]
    z = np.random.default_rng(2).standard_normal(n)
    cases = {"op": lambda: op @ x, "dot": lambda: z.dot(z), "op_then_dot": lambda: (op @ x).dot(z),
             "scipy": lambda: M @ x, "scipy_then_dot": lambda: (M @ x).dot(z)}
    for fn in cases.values():
        fn()
    samples = {key: [] for key in cases}
    for _ in range(rounds):
        for key, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            samples[key].append(time.perf_counter() - t0)
    out = {f"{key}_s_min": min(v) for key, v in samples.items()}
    out.update({f"{key}_s_median": float(np.median(v)) for key, v in samples.items()})
    out["pair_ratio_min"] = out["op_then_dot_s_min"] / (out["op_s_min"] + out["dot_s_min"])
    out["pair_ratio_median"] = (out["op_then_dot_s_median"]
                                / (out["op_s_median"] + out["dot_s_median"]))
    return out


def run_child(args) -> dict:
    """Benchmark every selected matrix and solver in this process's configuration."""
    import numpy as np
    import scipy.sparse.linalg  # noqa: F401  (loads SciPy's BLAS before it is limited)

    limiter = None
    if args.env == "blas1" and args.blas_method == "threadpoolctl":
        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(1, user_api="blas")
    import autospmv  # noqa: F401  (before numba runs anything: it sets the OpenMP wait policy)
    from autospmv._support.validation import canonicalize

    try:
        from autospmv._support.threads import wait_policy
    except ImportError:  # an autospmv from before the thread policy (for comparisons)
        def wait_policy():
            return f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"

    import numba

    config = {"env": args.env, "cores": len(os.sched_getaffinity(0))
              if hasattr(os, "sched_getaffinity") else os.cpu_count(),
              "blas_limit": args.blas_method if args.env == "blas1" else None,
              "numba_threads": numba.config.NUMBA_NUM_THREADS, "wait_policy": wait_policy()}
    config["blas"] = blas_info()
    records, pairs = [], []
    for name, load in matrices(args):
        A = canonicalize(load()).astype(np.float64)
        scipy_side, ops, prepare_s = build_problems(A)
        pair = {"matrix": name, "nnz": int(scipy_side["spd"].nnz), "kernel": ops["spd"].kernel,
                "threads": getattr(ops["spd"], "threads", None), "prepare_s": prepare_s}
        pair.update(time_pair(ops["spd"], scipy_side["spd"], args.rounds * 20))
        pairs.append(pair)
        for solver in args.solvers:
            solve, key_op, key_sp = solver_calls(solver, scipy_side)
            records.append(compare(solver, name, solve, ops[key_op], scipy_side[key_sp],
                                   scipy_side[key_op], args.rounds))
        try:
            numba_layer = numba.threading_layer()
        except ValueError:  # no parallel kernel ran in this process
            numba_layer = None
        config["numba_layer"] = numba_layer
        log(f"  [{args.env}, {config['cores']} cores] {name}: " + ", ".join(
            f"{r['solver']} {r['ratio_min']:.2f}x" for r in records if r["matrix"] == name)
            + f"; pair {pair['pair_ratio_min']:.2f}")
    if limiter is not None:
        limiter.restore_original_limits()
    return {"config": config, "records": records, "pairs": pairs}


def compare(solver, name, solve, op, scipy_operand, matrix, rounds) -> dict:
    """Check (untimed, products counted) then time ``solve`` on both sides, interleaved.

    ``op`` and ``scipy_operand`` are what the solver receives; ``matrix`` is the SciPy matrix of
    the problem (for its size and the residuals)."""
    import numpy as np

    counted_op, counted_sp = Counting(op), Counting(scipy_operand)
    t0 = time.perf_counter()
    x_op, it_op = solve(counted_op.operator())
    x_sp, it_sp = solve(counted_sp.operator())
    rounds = max(2, min(rounds, int(CASE_BUDGET_S / max(time.perf_counter() - t0, 1e-9))))
    record = {"solver": solver, "matrix": name, "shape": list(matrix.shape), "nnz": int(matrix.nnz),
              "kernel": op.kernel, "threads": getattr(op, "threads", None),
              "products_op": counted_op.count, "products_scipy": counted_sp.count,
              "iterations_op": it_op, "iterations_scipy": it_sp,
              "solution_rel_diff": relative_difference(x_op, x_sp)}
    if solver in ("cg", "gmres", "lsqr"):  # relative residuals ‖A x - b‖ / ‖b‖
        rhs = matrix @ solution(matrix.shape[1])
        record["residual_op"] = relative_difference(matrix @ x_op, rhs)
        record["residual_scipy"] = relative_difference(matrix @ x_sp, rhs)
    record["same_products"] = counted_op.count == counted_sp.count and it_op == it_sp
    record["rounds"] = rounds
    times = {"op": [], "scipy": []}
    for r in range(rounds):
        order = (("op", op), ("scipy", scipy_operand))
        for side, operand in (order if r % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            solve(operand)
            times[side].append(time.perf_counter() - t0)
    for side, values in times.items():
        record[f"{side}_s_min"] = min(values)
        record[f"{side}_s_median"] = float(np.median(values))
    record["ratio_min"] = record["op_s_min"] / record["scipy_s_min"]
    record["ratio_median"] = record["op_s_median"] / record["scipy_s_median"]
    return record


def blas_info() -> list[dict]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keys = ("user_api", "internal_api", "num_threads", "version", "threading_layer")
    return [{k: pool.get(k) for k in keys} for pool in threadpool_info()]


def matrix_files(args) -> list[Path]:
    """The ``.npz`` files of the folder ``args.matrices`` (those named by ``args.only``)."""
    files = sorted(Path(args.matrices).glob("*.npz"), key=lambda p: p.stem.lower())
    if args.only:
        wanted = set(args.only)
        missing = wanted - {p.stem for p in files}
        if missing:
            raise SystemExit(f"no such matrices in {args.matrices}: {', '.join(sorted(missing))}")
        files = [p for p in files if p.stem in wanted]
    return files


def matrices(args) -> list[tuple[str, object]]:
    """(name, load) of every matrix to run: the folder's files (:func:`matrix_files`), or
    without a folder the generated ones (those named by ``args.only``); ``load()`` gives the
    matrix."""
    import scipy.sparse as sp

    if args.matrices is not None:
        return [(path.stem, lambda path=path: sp.load_npz(path)) for path in matrix_files(args)]
    from .examples import demo_matrices

    generated = demo_matrices()
    missing = set(args.only or ()) - set(generated)
    if missing:
        raise SystemExit(f"no such generated matrices: {', '.join(sorted(missing))}; "
                         f"generated: {', '.join(generated)}")
    return [(name, lambda A=A: A) for name, A in generated.items()
            if not args.only or name in args.only]
