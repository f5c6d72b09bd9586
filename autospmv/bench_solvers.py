"""Solver benchmark (``autospmv bench --solver``): SciPy's iterative solvers with the autospmv
operator against the SciPy matrix.

What users run is not ``op @ x`` alone but a solver that alternates products with BLAS calls
(``dot``, ``norm``, ARPACK's ``gemv``) on their own thread pool; a thread pool that spins between
products, or more threads than free cores, shows up only there. For every matrix this runs

* ``cg`` on an SPD matrix M: the graph Laplacian of the matrix's symmetrised pattern (of the
  bipartite graph ``[[0, A], [Aᵀ, 0]]`` for a rectangular A) plus ``0.01 × mean degree × I``;
* ``gmres`` (restart 20) on A itself when square, else on M;
* ``lsqr`` on A itself (products with A and Aᵀ);
* ``eigsh`` (ARPACK, the 4 largest eigenvalues) on M;
* ``expm_multiply`` on S = -M / ‖M‖₁ (a heat-kernel step). SciPy computes exact norms for a
  sparse matrix but estimates them for any LinearOperator, which changes the number of products;
  the SciPy side is therefore ``aslinearoperator(S)``, so that both take the same path (with
  ``traceA`` given and NumPy's global seed reset, as its norm estimator is randomised),

each with ``autospmv.prepare(A, device="cpu")`` (the automatic choice) and with the SciPy CSR
matrix. An untimed run first counts the products of both (and checks that the counts, the
iterations and the solutions agree); then the two are timed in interleaved rounds (the order
alternating every round; fewer when a case is slow, see ``CASE_BUDGET_S``), and the minimum and
median wall times are reported. Solvers stop at 1e-8 relative tolerance or ``MAX_ITERATIONS``. The pair
``op @ x`` then ``dot`` is timed against its parts on every matrix as well.

Wall time of whole solver runs, not of products, is the figure here, so the timing loops are
this module's own rather than the labeller's timer (:class:`autospmv.timing.Bench`, which times
one operator's products); its child processes may also import another version of autospmv,
for comparisons, which need not have that timer.

Each configuration runs in its own process: the default environment, and the BLAS limited to one
thread (threadpoolctl in the process when installed, else ``OPENBLAS_NUM_THREADS`` and friends),
each on 1 core, 2 cores and all cores (CPU affinity of the process, which numba's default thread
count and autospmv's thread rule both follow). Progress goes to stderr; the results (device,
date, versions, every record and a summary against the acceptance targets) go to
``solvers-<cpu>-<cores>c-<date>.json`` in the current folder (``--out`` names another file;
the repository's ``benchmarks/solvers.py`` writes to ``benchmarks/results``).

The matrices are the ``.npz`` files of a folder (``--matrices DIR``), or, without one, the
structures ``autospmv demo`` generates (:func:`autospmv.examples.demo_matrices`: a 2-D Poisson
grid, power-law rows, a block FEM-like matrix, a few dense rows among short ones), so that an
installed autospmv runs it anywhere. Command lines::

    # everything: 2 environments × 1, 2 and all cores (4 processes on a 2-core machine, 6 on a
    # 16-core one); on a quiet machine each takes a minute or two
    autospmv bench --solver --matrices DIR
    # the same, split into one file per core count (e.g. to spread it over quiet moments):
    autospmv bench --solver --matrices DIR --cores 1 --out solvers-<host>-1core.json
    # a quick look: default environment, all cores, 3 rounds, at most 8 matrices (the project's
    # quick set where the folder has it: 5 of them with >= 100K nonzeros)
    autospmv bench --solver --quick                    # the generated matrices
    # selected matrices, solvers and configurations:
    autospmv bench --solver --matrices DIR --only MIT8,bcsstk16 --solvers cg,eigsh \\
        --envs default --cores all

Read the ratios of minimum times with the median-based ones beside them: where they disagree,
the machine was busy; ``device.load_average_at_start`` and ``_at_end`` record how busy.

Options: ``--matrices DIR`` (default: the generated matrices), ``--only``, ``--solvers``,
``--envs default,blas1``, ``--cores 1,2,all``, ``--rounds N``, ``--quick``, ``--out FILE``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

SOLVERS = ("cg", "gmres", "lsqr", "eigsh", "expm_multiply")
ENVS = ("default", "blas1")
LARGE_NNZ = 100_000
QUICK_MATRICES = ("young1c", "watt_2", "airfoil1", "bayer10", "FIT2D", "delaunay_n15",
                  "bcsstk16", "MIT8")
"""``--quick``'s matrices where the folder has them (the project's shared matrices)."""
QUICK_COUNT = 8
"""``--quick`` in a folder without those: its first this-many matrices by name."""
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS")
MAX_ITERATIONS = 200
"""Iteration cap of every solver, so that a badly conditioned matrix cannot take minutes."""
CASE_BUDGET_S = 1.0
"""Timed rounds per (matrix, solver) are cut (to no fewer than 2) to stay near this budget."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def geomean(values) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# ------------------------------------------------------------------ problems (child process)

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
    from autospmv.validation import canonicalize

    try:
        from autospmv.cpu_threads import wait_policy
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


# ------------------------------------------------------------------ driver (parent process)

def core_counts(requested: list[str]) -> list[int]:
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    counts = []
    for item in requested:
        count = available if item == "all" else int(item)
        if 1 <= count <= available and count not in counts:
            counts.append(count)
    return counts


def run_config(args, env_name: str, cores: int) -> dict:
    """One child process: ``env_name`` environment, pinned to the first ``cores`` usable CPUs."""
    env = dict(os.environ)
    if "autospmv.cpu_threads" in sys.modules:  # imported here (by the CLI): the child gets the
        from autospmv.cpu_threads import wait_policy  # user's variables, not autospmv's

        if "set by autospmv" in wait_policy():
            env.pop("OMP_WAIT_POLICY", None)
    method = None
    if env_name == "blas1":
        try:
            import threadpoolctl  # noqa: F401

            method = "threadpoolctl"
        except ImportError:
            method = "environment"
            env.update({name: "1" for name in BLAS_VARIABLES})
    cpus = sorted(os.sched_getaffinity(0))[:cores] if hasattr(os, "sched_getaffinity") else None
    command = [sys.executable, "-m", __spec__.name, "--child", "--env", env_name,
               "--blas-method", str(method), "--solvers", ",".join(args.solvers),
               "--rounds", str(args.rounds)]
    if args.matrices is not None:
        command += ["--matrices", str(args.matrices)]
    if args.only:
        command += ["--only", ",".join(args.only)]

    def pin():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, preexec_fn=pin,
                            check=False, text=True)
    if result.returncode != 0:
        raise SystemExit(f"configuration {env_name} on {cores} cores failed "
                         f"(exit status {result.returncode})")
    return json.loads(result.stdout)


def summarise(configs: list[dict]) -> list[dict]:
    """Per configuration and solver: the acceptance figures (ratios of minimum times)."""
    rows = []
    for run in configs:
        config = run["config"]
        for solver in sorted({r["solver"] for r in run["records"]}):
            records = [r for r in run["records"] if r["solver"] == solver]
            large = [r["ratio_min"] for r in records if r["nnz"] >= LARGE_NNZ]
            rows.append({
                "env": config["env"], "cores": config["cores"], "solver": solver,
                "matrices": len(records),
                "max_ratio_min": max(r["ratio_min"] for r in records),
                "worst_matrix": max(records, key=lambda r: r["ratio_min"])["matrix"],
                "geomean_ratio_min": geomean(r["ratio_min"] for r in records),
                "geomean_ratio_median": geomean(r["ratio_median"] for r in records),
                "large_matrices": len(large),
                "large_geomean_ratio_min": geomean(large),
                "same_products_everywhere": all(r["same_products"] for r in records),
                "max_solution_rel_diff": max(r["solution_rel_diff"] for r in records),
            })
        pairs = run["pairs"]
        rows.append({"env": config["env"], "cores": config["cores"], "solver": "op@x then dot",
                     "matrices": len(pairs),
                     "max_pair_ratio_min": max(p["pair_ratio_min"] for p in pairs),
                     "geomean_pair_ratio_median": geomean(p["pair_ratio_median"] for p in pairs)})
    return rows


def versions() -> dict:
    import numba
    import numpy
    import scipy

    import autospmv

    out = {"python": platform.python_version(), "autospmv": autospmv.__version__,
           "numba": numba.__version__, "numpy": numpy.__version__, "scipy": scipy.__version__}
    try:
        import threadpoolctl

        out["threadpoolctl"] = threadpoolctl.__version__
    except ImportError:
        out["threadpoolctl"] = None
    return out


def print_summary(rows: list[dict]) -> None:
    log("\nratio = operator time / SciPy time (minimum over rounds); large = nnz >= 100K")
    for row in rows:
        head = f"{row['env']:8s} {row['cores']:3d} cores  {row['solver']:14s}"
        if "max_ratio_min" in row:
            log(f"{head} max {row['max_ratio_min']:.2f} ({row['worst_matrix']}), geomean "
                f"{row['geomean_ratio_min']:.2f} (median-based {row['geomean_ratio_median']:.2f}),"
                f" large geomean {row['large_geomean_ratio_min']:.2f}, same products: "
                f"{row['same_products_everywhere']}")
        else:
            log(f"{head} pair/(parts) max {row['max_pair_ratio_min']:.2f}, geomean of medians "
                f"{row['geomean_pair_ratio_median']:.2f}")


def parse_args(argv=None, prog: str = "autospmv bench --solver", matrices=None):
    """The options; ``matrices``: the folder used when ``--matrices`` is not given (None: the
    generated matrices)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="SciPy solvers with the autospmv operator against the SciPy matrix")
    parser.add_argument("--matrices", default=matrices,
                        help="folder of .npz files (default: generated matrices)")
    parser.add_argument("--only", type=lambda s: [x for x in s.split(",") if x],
                        help="comma-separated matrix names (file stems)")
    parser.add_argument("--solvers", type=lambda s: [x for x in s.split(",") if x],
                        default=list(SOLVERS), help=f"comma-separated, from {', '.join(SOLVERS)}")
    parser.add_argument("--envs", type=lambda s: [x for x in s.split(",") if x],
                        default=list(ENVS), help="default (environment as it is), blas1 (BLAS "
                                                 "limited to one thread)")
    parser.add_argument("--cores", type=lambda s: [x for x in s.split(",") if x],
                        default=["1", "2", "all"], help="core counts: numbers and/or 'all'")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed rounds per solver and side (default 5, --quick 3)")
    parser.add_argument("--quick", action="store_true",
                        help=f"at most {QUICK_COUNT} matrices, 3 rounds, default environment, "
                             "all cores (unless given otherwise)")
    parser.add_argument("--out", help="results file (default: solvers-<cpu>-<cores>c-<date>.json "
                                      "in the results folder)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--env", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--blas-method", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.solvers) - set(SOLVERS)
    if unknown:
        parser.error(f"unknown solvers {sorted(unknown)}; valid: {', '.join(SOLVERS)}")
    unknown = set(args.envs) - set(ENVS)
    if unknown:
        parser.error(f"unknown environments {sorted(unknown)}; valid: {', '.join(ENVS)}")
    if args.matrices is not None and not Path(args.matrices).is_dir():
        parser.error(f"--matrices {args.matrices}: no such folder")
    if args.quick:
        argv_text = " ".join(argv if argv is not None else sys.argv[1:])
        if args.only is None and args.matrices is not None:
            names = [path.stem for path in matrix_files(args)]
            args.only = [name for name in QUICK_MATRICES if name in names] or names[:QUICK_COUNT]
        if "--envs" not in argv_text:
            args.envs = ["default"]
        if "--cores" not in argv_text:
            args.cores = ["all"]
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    return args


def main(argv=None, prog: str = "autospmv bench --solver", matrices=None,
         results: Path | None = None) -> int:
    """Run the benchmark with the options ``argv``; ``matrices`` is the folder used without
    ``--matrices`` (None: the generated matrices), ``results`` the folder of the default
    results file (None: the current folder)."""
    args = parse_args(argv, prog, matrices)
    if args.child:
        json.dump(run_child(args), sys.stdout)
        return 0
    started = time.perf_counter()
    load_at_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    configs = []
    for cores in core_counts(args.cores):
        for env_name in args.envs:
            log(f"configuration: {env_name} environment, {cores} cores")
            configs.append(run_config(args, env_name, cores))
    from autospmv.model import cpu_model, slugify  # after the runs: its import sets variables
    summary = summarise(configs)
    print_summary(summary)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    today = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "benchmark": "solvers", "date": today.isoformat(timespec="seconds"),
        "command": [prog, *(argv if argv is not None else sys.argv[1:])],
        "device": {"cpu_model": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable,
                   "host": platform.node(), "platform": platform.platform(),
                   "load_average_at_start": load_at_start,
                   "load_average_at_end": list(os.getloadavg())
                   if hasattr(os, "getloadavg") else None},
        "versions": versions(), "max_iterations": MAX_ITERATIONS, "large_nnz": LARGE_NNZ,
        "wall_s": time.perf_counter() - started, "summary": summary, "configs": configs,
    }
    out = Path(args.out) if args.out else (
        (results or Path.cwd()) / f"solvers-{slugify(cpu_model())}-{usable}c-{today:%Y-%m-%d}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {out} ({result['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":  # the child processes of run_config
    sys.exit(main())
