"""Memory bounded by the matrix, whatever its shape: the features, the decision and the
transpose of a matrix with far more columns than nonzeros allocate a small multiple of its CSR
bytes, not arrays over its columns.

The peaks are measured with ``tracemalloc`` (which sees NumPy's allocations) in a fresh
interpreter, one per shape; the bound is 4 × the CSR arrays' bytes + 64 MB. The counting over
the nonzeros that keeps the features bounded must give the scan's values exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import autospmv
from matrices import FAMILY

ROOT = Path(__file__).resolve().parent.parent
from autospmv._decide.features import scan as feature_scan
from autospmv._decide.features.sampling import SAMPLE_THRESHOLD

MEASURE = textwrap.dedent("""
    import json, sys, tracemalloc
    import numpy as np, scipy.sparse as sp
    import autospmv
    from autospmv._decide.model.lookup import shipped_models
    from autospmv._support.validation import canonicalize, index_dtype

    def wide(m, n, nnz, seed=0):
        # distinct random positions, the CSR built from its arrays: nothing of n entries
        rng = np.random.default_rng(seed)
        flat = np.unique(rng.integers(0, m * n, nnz, dtype=np.int64))
        itype = index_dtype(flat.size, (m, n))
        indptr = np.searchsorted(flat // n, np.arange(m + 1)).astype(itype)
        A = sp.csr_matrix((rng.random(flat.size), (flat % n).astype(itype), indptr), shape=(m, n))
        return canonicalize(A)

    def peak(call):
        tracemalloc.start()
        call()
        used = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return used

    model = shipped_models()["cuda-nvidia-h100-80gb-hbm3-float64"]
    small = wide(3, 3_000_000, 6)  # the same paths, compiled before anything is measured
    autospmv.features(small)
    autospmv.select(small, device="cuda")
    autospmv.prepare(small, device="cpu", model=model).T
    reports = {}
    for shape in sys.argv[1:]:
        m, n, nnz = (int(v) for v in shape.split(","))
        A = wide(m, n, nnz)
        op = autospmv.prepare(A, device="cpu")
        peaks = {
            "features": peak(lambda: autospmv.features(A)),
            "select": peak(lambda: autospmv.select(A, device="cuda")),
            "prepare with a model": peak(
                lambda: autospmv.prepare(A, device="cpu", model=model)),
            "op.T": peak(lambda: op.T),
        }
        csr_bytes = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
        reports[shape] = {"csr_bytes": csr_bytes, "peaks": peaks, "transpose": op.T.kernel}
        del A, op
    print(json.dumps(reports))
""")

SHAPES = {"10x1e9": (10, 10**9, 10**5), "4x4e8": (4, 4 * 10**8, 8),
          "4x2^31+10": (4, 2**31 + 10, 8)}
"""(rows, columns, nonzeros) of the matrices measured: the issue's wide matrices, the last
with 64-bit indices."""


@pytest.fixture(scope="module")
def peaks() -> dict:
    """The measurements of :data:`MEASURE` for every shape of :data:`SHAPES`, by name."""
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    shapes = {",".join(map(str, shape)): name for name, shape in SHAPES.items()}
    done = subprocess.run([sys.executable, "-c", MEASURE, *shapes], capture_output=True,
                          text=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {shapes[shape]: report for shape, report in json.loads(done.stdout).items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHAPES))
def test_wide_matrices_cost_memory_in_proportion_to_their_nonzeros(peaks, name):
    report = peaks[name]
    bound = 4 * report["csr_bytes"] + 64 * 2**20
    assert len(report["peaks"]) == 4 and all(p <= bound for p in report["peaks"].values()), report
    assert report["transpose"] == "coo"  # Aᵀ has no row pointer of n + 1 entries


@pytest.mark.parametrize("name", list(FAMILY))
def test_counting_over_the_nonzeros_gives_the_scans_values(name, monkeypatch):
    for dtype in (np.float64, np.float32):
        A = FAMILY[name]().astype(dtype)
        for sample_rows in (None, 40):
            scanned = autospmv.features(A, sample_rows=sample_rows, device="cpu")
            with monkeypatch.context() as patch:
                patch.setattr(feature_scan, "scratch_fits", lambda *args: False)
                counted = autospmv.features(A, sample_rows=sample_rows, device="cpu")
            assert counted == scanned, (dtype, sample_rows)


def test_a_wide_matrix_is_counted_over_its_nonzeros_and_sampled_like_the_scan(monkeypatch):
    """A matrix wider than the scan's scratch allowance, large enough to be sampled: the
    counting path runs by itself, and with more allowance the scan gives the same values."""
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    m, n, per_row = 96, 1_000_000, 2_000
    columns = np.sort(rng.choice(n, (m, per_row)), axis=1)  # duplicates summed by autospmv
    A = sp.csr_matrix((rng.random(m * per_row), columns.ravel(),
                       np.arange(m + 1) * per_row), shape=(m, n))
    assert A.nnz > SAMPLE_THRESHOLD
    calls = []
    counters = feature_scan.nonzero_counters
    monkeypatch.setattr(feature_scan, "nonzero_counters",
                        lambda *args: calls.append(1) or counters(*args))
    counted = autospmv.features(A, device="cpu")
    assert calls
    monkeypatch.setattr(feature_scan, "SCRATCH_ALWAYS", 1 << 40)
    assert autospmv.features(A, device="cpu") == counted
    assert len(calls) == 1
