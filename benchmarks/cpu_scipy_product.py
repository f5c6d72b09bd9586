"""The serial CSR product: numba's ``csr_scalar`` against SciPy's compiled ``csr_matvec``.

For the demo's matrices, generated matrices of short rows with lengths of set spreads, and those
of ``--matrices`` folders, both serial products the operator can run are called on the same
vectors in interleaved rounds, as the operator binds them (no operator around them): numba's
loop (:func:`autospmv.kernels.cpu.csr.bind_scalar`, serial), and SciPy's loop with the zeroing
of y it needs (:func:`autospmv.kernels.cpu.scipy_product.bind_scipy`). Each of ``--repeats``
repeats gives the ratio of the two medians, t(SciPy) / t(numba); recorded per matrix: min,
median and max of that ratio, both medians in µs, the matrix's nonzeros, mean row length and
row-length spread (:func:`~autospmv.kernels.cpu.scipy_product.length_spread`), and whether the
rule of :mod:`autospmv.kernels.cpu.scipy_product` runs SciPy's loop on it. The rule is read from
these figures. Repeats that other processes disturbed are taken again, as in
``benchmarks/cpu_default.py``. Writes ``benchmarks/results/cpu-scipy-product.json``.

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
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv._tools.examples import demo_matrices  # noqa: E402
from autospmv.formats.csr import CSRFormat  # noqa: E402
from autospmv.kernels.cpu.csr import bind_scalar  # noqa: E402
from autospmv.kernels.cpu.scipy_product import (  # noqa: E402
    bind_scipy, length_spread, scipy_applies,
)
from cpu_default import cpu_ticks, others_share, wait_until_quiet  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cpu-scipy-product.json"


def generated() -> dict[str, sp.csr_matrix]:
    """Short rows of set length distributions at random columns (50,000 rows and columns)."""
    rng = np.random.default_rng(0)
    n = 50_000

    def rows_of(lengths) -> sp.csr_matrix:
        rows = np.repeat(np.arange(lengths.size), lengths)
        return sp.csr_matrix((rng.standard_normal(rows.size), (rows, rng.integers(0, n, rows.size))),
                             shape=(lengths.size, n))

    return {"rows of 4": rows_of(np.full(n, 4)),
            "rows of 1 + Poisson(3)": rows_of(1 + rng.poisson(3.0, n)),
            "rows of 1 to 12": rows_of(rng.integers(1, 13, n)),
            "rows of power-law lengths up to 8": rows_of(
                np.minimum((rng.pareto(1.5, n) * 3 + 1).astype(int), 8))}


def matrices(folders) -> dict[str, sp.csr_matrix]:
    found = {**demo_matrices(), **generated()}
    for folder in folders:
        for path in sorted(Path(folder).glob("*.npz")):
            found[path.stem] = sp.load_npz(path)
    return {name: canonicalize(A).astype(np.float64) for name, A in found.items()}


def compare(A: sp.csr_matrix, repeats: int, calls: int, others: float, patience: float) -> dict:
    fmt = CSRFormat.from_csr(A)
    x = np.random.default_rng(0).standard_normal(A.shape[1])
    y = np.empty(A.shape[0])
    numba_run = bind_scalar(fmt, {}, False)
    scipy_run = bind_scipy(fmt, numba_run)
    loops = {"numba": lambda: numba_run(x, y), "scipy": lambda: scipy_run(x, y)}
    for loop in loops.values():
        loop()
    ratios, medians, retaken = [], {"numba": [], "scipy": []}, 0
    deadline = time.perf_counter() + patience
    while len(ratios) < repeats:
        samples = {"numba": [], "scipy": []}
        before, began = cpu_ticks(), time.perf_counter()
        for call in range(calls):
            for name, loop in loops.items() if call % 2 else reversed(loops.items()):
                started = time.perf_counter()
                loop()
                samples[name].append((time.perf_counter() - started) * 1e6)
        share = others_share(before, cpu_ticks(), time.perf_counter() - began)
        if share >= others and time.perf_counter() < deadline:
            retaken += 1
            wait_until_quiet(others, deadline)
            continue
        us = {name: float(np.median(t)) for name, t in samples.items()}
        ratios.append(us["scipy"] / us["numba"])
        for name in us:
            medians[name].append(us[name])
    return {"nnz": int(A.nnz), "row_length": A.nnz / max(A.shape[0], 1),
            "length_spread": length_spread(A.indptr),
            "rule_runs_scipy": scipy_applies("csr_scalar", fmt, 1),
            "us": {name: float(np.median(v)) for name, v in medians.items()},
            "scipy_over_numba": {"min": min(ratios), "median": float(np.median(ratios)),
                                 "max": max(ratios)},
            "repeats_taken_again": retaken}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", nargs="*", default=[], metavar="DIR")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.1,
                        help="about how long each repeat of one matrix takes")
    parser.add_argument("--others", type=float, default=0.1,
                        help="as for benchmarks/cpu_default.py (default: %(default)s)")
    parser.add_argument("--patience", type=float, default=600.0,
                        help="as for benchmarks/cpu_default.py (default: %(default)s)")
    args = parser.parse_args(argv)
    results = {}
    for name, A in matrices(args.matrices).items():
        calls = int(min(2000, max(20, args.seconds / (2 * (A.nnz * 2e-9 + 2e-6)))))
        results[name] = r = compare(A, args.repeats, calls, args.others, args.patience)
        print(f"{name[:28]:28s} nnz {r['nnz']:9,d} row {r['row_length']:7.1f} spread "
              f"{r['length_spread']:5.2f}  SciPy/numba median {r['scipy_over_numba']['median']:.3f}"
              f"{'  (rule: SciPy)' if r['rule_runs_scipy'] else ''}", flush=True)
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
               "numpy": np.__version__, "scipy": scipy.__version__,
               "note": ("a shared machine: a repeat counted when the other processes used less "
                        f"than {args.others} of one core while it ran (repeats_taken_again per "
                        f"matrix), or when the patience of {args.patience:g} s per matrix ran "
                        "out")}
    RESULTS.write_text(json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d"),
                                   "results": results}, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
