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
this module's own rather than the labeller's timer (:class:`autospmv._support.timing.Bench`, which
times one operator's products); its child processes may also import another version of autospmv,
for comparisons, which need not have that timer.

Each configuration runs in its own process: the default environment, and the BLAS limited to one
thread (threadpoolctl in the process when installed, else ``OPENBLAS_NUM_THREADS`` and friends),
each on 1 core, 2 cores and all cores (CPU affinity of the process, which numba's default thread
count and autospmv's thread rule both follow). Progress goes to stderr; the results (device,
date, versions, every record and a summary against the acceptance targets) go to
``solvers-<cpu>-<cores>c-<date>.json`` in the current folder (``--out`` names another file;
the repository's ``benchmarks/solvers.py`` writes to ``benchmarks/results``).

The matrices are the ``.npz`` files of a folder (``--matrices DIR``), or, without one, the
structures ``autospmv demo`` generates (:func:`autospmv._tools.examples.demo_matrices`: a 2-D Poisson
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
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from .bench_solver_runs import (
    LARGE_NNZ, MAX_ITERATIONS, SOLVERS, geomean, log, matrix_files, run_child,
)
from .cli_checks import OneLineParser, bounded, ending_with_parent, output_path

ENVS = ("default", "blas1")
MAX_ROUNDS = 1000
"""Most timed rounds ``--rounds`` allows (5 is the default: each round runs every solver)."""
QUICK_MATRICES = ("young1c", "watt_2", "airfoil1", "bayer10", "FIT2D", "delaunay_n15",
                  "bcsstk16", "MIT8")
"""``--quick``'s matrices where the folder has them (the project's shared matrices)."""
QUICK_COUNT = 8
"""``--quick`` in a folder without those: its first this-many matrices by name."""
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS")


# ------------------------------------------------------------------ driver (parent process)

def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def core_counts(requested: list[str]) -> list[int]:
    """The distinct core counts of ``--cores`` (numbers and 'all') that this machine has;
    ValueError for an item that is neither a positive number nor 'all', or when none fits."""
    available = usable_cores()
    counts = []
    for item in requested:
        if item != "all" and not (item.strip().isdigit() and int(item) >= 1):
            raise ValueError(f"--cores {item!r}: positive numbers of cores or 'all' are "
                             "allowed")
        count = available if item == "all" else int(item)
        if count <= available and count not in counts:
            counts.append(count)
    if not counts:
        raise ValueError(f"--cores {','.join(requested)}: none of these fits the {available} "
                         "usable cores")
    return counts


def run_config(args, env_name: str, cores: int) -> dict:
    """One child process: ``env_name`` environment, pinned to the first ``cores`` usable CPUs."""
    env = dict(os.environ)
    if "autospmv._support.threads" in sys.modules:  # imported here (by the CLI): the child gets the
        from autospmv._support.threads import wait_policy  # user's variables, not autospmv's

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

    result = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                            preexec_fn=ending_with_parent(then=pin), check=False, text=True)
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


def build_parser(prog: str = "autospmv bench --solver", matrices=None) -> OneLineParser:
    """The parser of the options; ``matrices``: the folder used when ``--matrices`` is not given
    (None: the generated matrices)."""
    parser = OneLineParser(
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
    parser.add_argument("--rounds", type=bounded(int, 1, MAX_ROUNDS), default=None,
                        help=f"timed rounds per solver and side, 1 to {MAX_ROUNDS} (default 5, "
                             "--quick 3)")
    parser.add_argument("--quick", action="store_true",
                        help=f"at most {QUICK_COUNT} matrices, 3 rounds, default environment, "
                             "all cores (unless given otherwise)")
    parser.add_argument("--out", help="results file (default: solvers-<cpu>-<cores>c-<date>.json "
                                      "in the results folder)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--env", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--blas-method", default=None, help=argparse.SUPPRESS)
    return parser


def parse_args(argv=None, prog: str = "autospmv bench --solver", matrices=None):
    """The options, checked (see :func:`build_parser`)."""
    parser = build_parser(prog, matrices)
    args = parser.parse_args(argv)
    unknown = set(args.solvers) - set(SOLVERS)
    if unknown:
        parser.error(f"unknown solvers {sorted(unknown)}; valid: {', '.join(SOLVERS)}")
    unknown = set(args.envs) - set(ENVS)
    if unknown:
        parser.error(f"unknown environments {sorted(unknown)}; valid: {', '.join(ENVS)}")
    if args.matrices is not None and not Path(args.matrices).is_dir():
        parser.error(f"--matrices {args.matrices}: no such folder")
    if args.matrices is not None and not any(Path(args.matrices).glob("*.npz")):
        parser.error(f"--matrices {args.matrices}: the folder holds no .npz files")
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
    try:
        if not args.child:  # a child is pinned to its configuration's cores
            args.core_counts = core_counts(args.cores)
            if args.out:
                output_path(args.out, "--out")
    except ValueError as error:
        parser.error(str(error))
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
    for cores in args.core_counts:
        for env_name in args.envs:
            log(f"configuration: {env_name} environment, {cores} cores")
            configs.append(run_config(args, env_name, cores))
    from autospmv._decide.model.store import cpu_model, slugify
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
    out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {out} ({result['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":  # the child processes of run_config
    sys.exit(main())
