"""The serial CSR loop: numba's ``csr_scalar`` against SciPy's compiled ``csr_matvec``.

For the demo's matrices and those of ``--matrices`` folders, both loops are called on the same
vectors in interleaved rounds (no operator around them: the loops alone), and the ratio of their
medians is recorded with min/median/max of each, the matrix's nonzeros and mean row length. The
rule of :mod:`autospmv.kernels.cpu.scipy_product` (SciPy's loop from ``SCIPY_MIN_NNZ`` nonzeros
with at most ``SCIPY_MAX_ROW_LENGTH`` per row) is read from these figures. Writes
``benchmarks/results/cpu-scipy-product.json``.

    python benchmarks/cpu_scipy_product.py --matrices /work/shared/matrices
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autospmv._decide.model.store import cpu_model  # noqa: E402
from autospmv._tools.examples import demo_matrices  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv.kernels import unsigned  # noqa: E402
from autospmv.kernels.cpu.csr import _scalar_serial  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cpu-scipy-product.json"


def matrices(folders) -> dict[str, sp.csr_matrix]:
    found = dict(demo_matrices())
    for folder in folders:
        for path in sorted(Path(folder).glob("*.npz")):
            found[path.stem] = sp.load_npz(path)
    return {name: canonicalize(A).astype(np.float64) for name, A in found.items()}


def compare(A: sp.csr_matrix, rounds: int) -> dict:
    from scipy.sparse._sparsetools import csr_matvec

    x = np.random.default_rng(0).standard_normal(A.shape[1])
    y = np.empty(A.shape[0])
    indptr, indices = unsigned(A.indptr), unsigned(A.indices)

    def numba_loop():
        _scalar_serial(indptr, indices, A.data, x, y)

    def scipy_loop():
        y.fill(0)
        csr_matvec(A.shape[0], A.shape[1], A.indptr, A.indices, A.data, x, y)

    samples = {"numba": [], "scipy": []}
    numba_loop(), scipy_loop()
    for _ in range(rounds):
        for name, loop in (("numba", numba_loop), ("scipy", scipy_loop)):
            started = time.perf_counter()
            loop()
            samples[name].append((time.perf_counter() - started) * 1e6)
    spread = {name: {"min": float(np.min(t)), "median": float(np.median(t)),
                     "max": float(np.max(t))} for name, t in samples.items()}
    return {"nnz": int(A.nnz), "row_length": A.nnz / max(A.shape[0], 1), "us": spread,
            "scipy_over_numba": spread["scipy"]["median"] / spread["numba"]["median"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", nargs="*", default=[], metavar="DIR")
    parser.add_argument("--budget-calls", type=float, default=2e8,
                        help="nonzeros per loop and matrix, in all (sets the rounds)")
    args = parser.parse_args(argv)
    results = {}
    for name, A in matrices(args.matrices).items():
        rounds = int(min(2000, max(30, args.budget_calls / max(A.nnz, 1) / 10)))
        results[name] = compare(A, rounds)
        r = results[name]
        print(f"{name[:28]:28s} nnz {r['nnz']:9,d} row {r['row_length']:7.1f}  SciPy/numba "
              f"{r['scipy_over_numba']:.2f}", flush=True)
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
               "numpy": np.__version__, "scipy": scipy.__version__,
               "note": "a shared machine: other processes ran beside the measurement"}
    RESULTS.write_text(json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d"),
                                   "results": results}, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
