"""Cost of :func:`autospmv._decide.features.extract.features` against one SciPy ``A @ x``.

``features`` runs inside every ``prepare()``, so it must stay within a small multiple of one
matrix-vector product. This script times both on the largest matrix of a folder of ``.npz``
matrices and on a generated 5-point Laplacian (default 11.2M nonzeros), prints a table and
writes ``benchmarks/results/features-cpu-<date>.json``.

Method: the matrix is made canonical first (as ``prepare()`` does), ``features`` is called
once to compile (or load the numba cache; that first-call time is reported too), then the two
are timed alternately, ``--repeat`` times each, and the medians compared; alternating keeps
a busy machine from favouring either side. The loop is its own rather than the labeller's timer
(:class:`autospmv._support.timing.Bench`), which times operators' ``matvec``: the quantity here is the
feature extractor, a function of the whole matrix, against the SciPy product it is compared
with.

    python benchmarks/features.py [--matrices DIR] [--grid 1500] [--repeat 21]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import sys
import time

import numba
import numpy as np
import scipy
import scipy.sparse as sp

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from autospmv._support.threads import PARALLEL_MIN_THREADS, PASSES_PARALLEL_MIN_NNZ
from autospmv._decide.features.extract import features
from autospmv._decide.features.sampling import SAMPLE_THRESHOLD
from autospmv._support.validation import canonicalize


def default_matrix_dir() -> pathlib.Path:
    """``../shared/matrices`` beside the repository, else ``/work/shared/matrices``."""
    beside = REPO_ROOT.parent / "shared" / "matrices"
    fallback = pathlib.Path("/work/shared/matrices")
    return beside if beside.is_dir() or not fallback.is_dir() else fallback


def largest_matrix(folder: pathlib.Path) -> tuple[str, sp.csr_matrix]:
    """The matrix with the most nonzeros among ``folder/*.npz``."""
    best = None
    for path in sorted(folder.glob("*.npz")):
        A = sp.load_npz(path)
        if best is None or A.nnz > best[1].nnz:
            best = (path.stem, A)
    if best is None:
        raise SystemExit(f"no .npz matrices in {folder}")
    return best


def poisson2d(k: int) -> sp.csr_matrix:
    """The 5-point Laplacian on a k×k grid, built directly in CSR (k² rows, ≈ 5k² entries)."""
    m = k * k
    row = np.arange(m)
    cols = np.stack([row - k, row - 1, row, row + 1, row + k], axis=1)
    keep = np.stack(
        [row >= k, row % k != 0, np.ones(m, bool), row % k != k - 1, row < m - k], axis=1
    )
    indptr = np.zeros(m + 1, np.int64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    indices = cols[keep]
    data = np.where(indices == np.repeat(row, keep.sum(axis=1)), 4.0, -1.0)
    return canonicalize(sp.csr_matrix((data, indices, indptr), shape=(m, m)))


def median_ms(samples: list[float]) -> float:
    return float(np.median(samples) * 1e3)


def measure(name: str, A: sp.csr_matrix, repeat: int) -> dict:
    """Time ``features(A)`` and ``A @ x`` alternately; medians in milliseconds."""
    A = canonicalize(A)
    x = np.random.default_rng(0).random(A.shape[1])
    start = time.perf_counter()
    features(A)
    first = time.perf_counter() - start
    A @ x
    spmv, feat = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        A @ x
        spmv.append(time.perf_counter() - start)
        start = time.perf_counter()
        features(A)
        feat.append(time.perf_counter() - start)
    return {
        "matrix": name,
        "rows": A.shape[0],
        "cols": A.shape[1],
        "nnz": int(A.nnz),
        "sampled": bool(A.nnz > SAMPLE_THRESHOLD),
        "threads": threads_used(A.nnz),
        "spmv_ms": median_ms(spmv),
        "features_ms": median_ms(feat),
        "features_first_call_ms": first * 1e3,
        "ratio": median_ms(feat) / median_ms(spmv),
    }


def threads_used(nnz: int) -> int:
    """Threads the feature scan runs on (see ``autospmv._support.threads.PARALLEL_MIN_THREADS``)."""
    threads = numba.get_num_threads()
    return threads if nnz >= PASSES_PARALLEL_MIN_NNZ and threads >= PARALLEL_MIN_THREADS else 1


def threading_layer() -> str:
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region has run in this process
        return "none started"


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "numba_threading_layer": threading_layer(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "load_average": os.getloadavg(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--matrices", type=pathlib.Path, default=default_matrix_dir(),
        help="folder of .npz matrices; the largest is timed",
    )  # fmt: skip
    parser.add_argument(
        "--grid", type=int, default=1500,
        help="side of the generated 5-point grid (1500: 11.2M entries)",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=21, help="timed calls of each")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)

    cases = [largest_matrix(args.matrices), (f"poisson2d_{args.grid}", poisson2d(args.grid))]
    rows = [measure(name, A, args.repeat) for name, A in cases]
    info = machine()  # after the runs: numba's threading layer is known only then

    print(f"{'matrix':<18} {'rows':>10} {'nnz':>11} {'sampled':>8} {'threads':>8} "
          f"{'A@x ms':>9} {'features ms':>12} {'ratio':>6} {'first call ms':>14}")  # fmt: skip
    for r in rows:
        print(f"{r['matrix']:<18} {r['rows']:>10,} {r['nnz']:>11,} {r['sampled']!s:>8} "
              f"{r['threads']:>8} {r['spmv_ms']:>9.3f} {r['features_ms']:>12.3f} "
              f"{r['ratio']:>6.2f} {r['features_first_call_ms']:>14.1f}")  # fmt: skip
    print(f"{info['cpu_count']} CPUs, numba {info['numba_threads']} threads "
          f"({info['numba_threading_layer']}), load average {info['load_average']}")  # fmt: skip

    date = datetime.date.today().isoformat()
    out = args.out or REPO_ROOT / "benchmarks" / "results" / f"features-cpu-{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": "features", "date": date, "machine": info, "repeat": args.repeat,
           "results": rows}  # fmt: skip
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
