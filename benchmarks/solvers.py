"""The solver benchmark from the repository: :mod:`autospmv._tools.bench_solvers` (what
``autospmv bench --solver`` runs) on the project's shared matrices, results to
``benchmarks/results``.

Differences from ``autospmv bench --solver``: ``--matrices`` defaults to the first of
``.matrices/shared``, ``.matrices`` and ``../shared/matrices`` beside the repository that holds
``.npz`` files (the generated matrices when none does), and
the results file defaults to ``benchmarks/results/solvers-<cpu>-<cores>c-<date>.json``. Command
lines, from the repository root::

    # everything: 2 environments × 1, 2 and all cores (4 processes on a 2-core machine, 6 on a
    # 16-core one); on a quiet machine each takes a minute or two
    PYTHONPATH=. python benchmarks/solvers.py
    # a quick look: 8 matrices (5 with >= 100K nonzeros), 3 rounds, default environment, all
    # cores
    PYTHONPATH=. python benchmarks/solvers.py --quick
    # selected matrices, solvers and configurations:
    PYTHONPATH=. python benchmarks/solvers.py --only MIT8,bcsstk16 --solvers cg,eigsh \\
        --envs default --cores all

The names below are the module's, for the scripts that build on it
(``solver_product_share.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autospmv._tools.bench_solvers import main  # noqa: E402


def default_matrices() -> Path | None:
    """The project's shared matrices beside the repository, or None."""
    for candidate in (ROOT / ".matrices" / "shared", ROOT / ".matrices",
                      ROOT.parent / "shared" / "matrices"):
        if any(candidate.glob("*.npz")):
            return candidate
    return None


if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/solvers.py", matrices=default_matrices(),
                  results=ROOT / "benchmarks" / "results"))
