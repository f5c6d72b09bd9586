"""Tests of :mod:`autospmv._decide.features.extract`: known values on hand-built matrices, a slow
pure-NumPy reference on the whole matrix family, empty shapes, canonicalisation, dtype and
the accuracy of sampling."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.stats
from matrices import ALL, random_matrix
from test_cost import cost_reference

import autospmv
from autospmv._decide.features.extract import FEATURE_NAMES, SAMPLED_FEATURES, features
from autospmv._decide.features.scan import BLOCK_SIZES, WINDOW_ROWS
from autospmv._support import threads as cpu_threads
from autospmv._decide.features import row_lengths
from autospmv.formats.hyb import width_cost
from autospmv._decide.features.sampling import SAMPLE_THRESHOLD, SAMPLE_TOLERANCE
from autospmv._support.devices import target_device
from autospmv._support.validation import canonicalize

from autospmv._decide.features import extract as F


def exact(A, device: str | None = None) -> dict[str, float]:
    """Features with every row scanned (no sampling)."""
    return features(A, sample_rows=max(1, A.shape[0]), device=device)


# ---------------------------------------------------------------------------------------------
# A slow, direct reference: every feature from its definition in the module docstring.


def reference(A, device: str | None = None) -> dict[str, float]:
    csr = canonicalize(A)
    m, n = csr.shape
    nnz = csr.nnz
    lengths = np.diff(csr.indptr).astype(np.int64)
    rows = np.repeat(np.arange(m), lengths)
    cols = csr.indices.astype(np.int64)
    out = {
        "rows": m, "cols": n, "nnz": nnz, "density": nnz / (m * n) if m * n else 0.0,
        "log10_rows": math.log10(1 + m), "log10_cols": math.log10(1 + n),
        "log10_nnz": math.log10(1 + nnz),
    }  # fmt: skip
    out.update(_reference_rows(lengths, m, nnz))
    out.update(cost_reference(csr, target_device(device)))
    out.update(_reference_diagonals(rows, cols, m, n, nnz))
    out.update(_reference_blocks(rows, cols, m, n, nnz))
    out.update(_reference_sectors(csr, rows, cols, m, nnz))
    return out


def _warp_ratios(lengths) -> float:
    ratios = [
        g.max() / g.mean() if g.sum() else 1.0
        for g in (lengths[k:k + 32] for k in range(0, len(lengths), 32))
    ]
    return float(np.mean(ratios)) if ratios else 1.0


def _reference_rows(lengths, m: int, nnz: int) -> dict[str, float]:
    if m == 0:
        lengths = np.zeros(1, np.int64)
    mean = lengths.mean() if m else 0.0
    std = lengths.std()
    pairs = np.abs(lengths[:, None] - lengths[None, :]).sum()
    top = np.sort(lengths)[::-1][: max(1, math.ceil(0.01 * m))].sum()
    width = width_cost(lengths if m else np.zeros(0, np.int64))
    return {
        "row_mean": mean,
        "row_std": std,
        "row_cv": std / mean if mean else 0.0,
        "row_min": lengths.min(),
        "row_max": lengths.max(),
        "row_median": np.percentile(lengths, 50),
        "row_p90": np.percentile(lengths, 90),
        "row_p99": np.percentile(lengths, 99),
        "row_max_over_mean": lengths.max() / mean if mean else 1.0,
        "row_gini": pairs / (2 * m * m * mean) if mean else 0.0,
        "row_skew": scipy.stats.skew(lengths) if std > 0 else 0.0,
        "empty_row_share": np.mean(lengths == 0) if m else 0.0,
        "top1pct_nnz_share": top / nnz if nnz else 0.0,
        "ell_fill": m * lengths.max() / nnz if nnz else 1.0,
        "hyb_width": width,
        "hyb_coo_share": np.maximum(lengths - width, 0).sum() / nnz if nnz else 0.0,
        "warp_imbalance": _warp_ratios(lengths) if m else 1.0,
        "warp_imbalance_sorted": _warp_ratios(np.sort(lengths)[::-1]) if m else 1.0,
    }


def _reference_diagonals(rows, cols, m: int, n: int, nnz: int) -> dict[str, float]:
    dist = np.abs(cols - rows)
    band = int(dist.max()) if nnz else 0
    narrow = max(1, math.floor(0.01 * max(m, n)))
    diagonals = len(set((cols - rows).tolist()))
    return {
        "bandwidth": band,
        "bandwidth_rel": band / max(m, n) if max(m, n) else 0.0,
        "narrow_band_share": np.mean(dist <= narrow) if nnz else 0.0,
        "diagonals": diagonals,
        "diagonals_per_row": diagonals / m if m else 0.0,
    }


def _reference_blocks(rows, cols, m: int, n: int, nnz: int) -> dict[str, float]:
    out = {}
    for b in BLOCK_SIZES:
        cells = {}
        for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
            cells[(i // b, j // b)] = cells.get((i // b, j // b), 0) + 1
        full = sum(
            count for (bi, bj), count in cells.items()
            if count == (min(m, bi * b + b) - bi * b) * (min(n, bj * b + b) - bj * b)
        )  # fmt: skip
        out[f"block{b}_share"] = full / nnz if nnz else 0.0
        out[f"block{b}_fill"] = len(cells) * b * b / nnz if nnz else 1.0
    return out


def _reference_sectors(csr, rows, cols, m: int, nnz: int) -> dict[str, float]:
    sectors = cols // (32 // csr.dtype.itemsize)
    per_row = len(set(zip(rows.tolist(), sectors.tolist(), strict=True)))
    per_warp = len(set(zip((rows // 32).tolist(), sectors.tolist(), strict=True)))
    return {
        "x_sectors_per_nnz_row": per_row / nnz if nnz else 0.0,
        "x_sectors_per_nnz_warp": per_warp / nnz if nnz else 0.0,
    }


# ---------------------------------------------------------------------------------------------


def assert_features_close(got: dict, want: dict, rtol: float = 1e-9) -> None:
    assert list(got) == list(FEATURE_NAMES)
    for name in FEATURE_NAMES:
        assert got[name] == pytest.approx(float(want[name]), rel=rtol, abs=1e-12), name


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", sorted(ALL))
def test_matches_reference_on_family(name, device):
    A = ALL[name]()
    got = exact(A, device)
    assert all(type(v) is float and math.isfinite(v) for v in got.values())
    assert_features_close(got, reference(A, device))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", [(101, 77), (64, 64), (97, 200), (200, 35)])
def test_matches_reference_with_dense_patches(shape, seed):
    """Random matrices with dense rectangles at odd offsets: full, partial and edge blocks."""
    rng = np.random.default_rng(seed)
    m, n = shape
    dense = rng.random(shape) < 0.05
    for _ in range(12):
        i, j = rng.integers(0, m), rng.integers(0, n)
        h, w = rng.integers(1, 11, size=2)
        dense[i:i + h, j:j + w] = True
    dense[-rng.integers(1, 9):, -rng.integers(1, 9):] = True  # bottom-right corner blocks
    for dtype in (np.float32, np.float64):
        A = sp.csr_matrix(dense.astype(dtype))
        assert_features_close(exact(A), reference(A))


def test_diagonal():
    n = 64  # a multiple of 2, 4, 8 but not of 3: the last 3-block is a full 1×1 edge block
    f = features(sp.identity(n, format="csr"))
    assert (f["row_cv"], f["row_gini"], f["row_skew"]) == (0.0, 0.0, 0.0)
    assert (f["bandwidth"], f["bandwidth_rel"], f["diagonals"]) == (0.0, 0.0, 1.0)
    assert f["narrow_band_share"] == 1.0
    assert (f["ell_fill"], f["hyb_width"], f["hyb_coo_share"]) == (1.0, 1.0, 0.0)
    assert f["warp_imbalance"] == f["warp_imbalance_sorted"] == 1.0
    for b in (2, 4, 8):
        assert f[f"block{b}_share"] == 0.0
        assert f[f"block{b}_fill"] == b  # n/b blocks of b² cells for n entries
    assert f["block3_share"] == 1 / n
    assert f["block3_fill"] == math.ceil(n / 3) * 9 / n
    assert f["x_sectors_per_nnz_row"] == 1.0
    assert f["x_sectors_per_nnz_warp"] == 8 / 32  # 32 rows read 32 float64 = 8 sectors


def test_sector_width_follows_dtype():
    A = sp.identity(64, format="csr")
    f32 = features(A.astype(np.float32))
    assert f32["x_sectors_per_nnz_warp"] == 4 / 32  # 8 float32 per sector
    B = random_matrix(500, 3000, 0.02, 3)
    f64, f32 = features(B), features(B.astype(np.float32))
    assert f32["x_sectors_per_nnz_row"] < f64["x_sectors_per_nnz_row"]
    assert f32["x_sectors_per_nnz_warp"] < f64["x_sectors_per_nnz_warp"]
    different = {k for k in FEATURE_NAMES if f32[k] != f64[k]}
    assert different == {"x_sectors_per_nnz_row", "x_sectors_per_nnz_warp"} | {
        f"{kernel}_bytes" for kernel in autospmv.KERNELS}  # values of 4 bytes instead of 8


def test_kron_of_dense_4x4_blocks():
    pattern = random_matrix(50, 40, 0.1, 7)
    f = features(sp.kron(pattern, np.ones((4, 4))))
    assert f["block4_share"] == f["block2_share"] == 1.0
    assert f["block4_fill"] == f["block2_fill"] == 1.0
    assert f["block8_fill"] >= 1.0
    assert f["x_sectors_per_nnz_row"] == 0.25  # a 4-wide run is one float64 sector


def test_one_dense_row():
    f = features(random_matrix(1, 300, 1.0, 1))
    assert f["row_max"] == 300.0 and f["cols"] == 300.0
    assert f["top1pct_nnz_share"] == 1.0
    A = sp.lil_matrix((1000, 500))
    A[7, :] = 1.0
    A.setdiag(1.0)  # 500 entries, one of them in row 7: 999 in all
    f = features(A)
    assert f["row_max"] == 500.0
    assert f["row_max_over_mean"] == 500 / (999 / 1000)
    assert f["top1pct_nnz_share"] == (500 + 9) / 999  # 10 longest rows: the full one + 9


@pytest.mark.parametrize("shape", [(0, 0), (5, 0), (0, 5), (7, 9)])
def test_empty(shape):
    f = features(sp.csr_matrix(shape))
    assert list(f) == list(FEATURE_NAMES)
    assert all(type(v) is float and math.isfinite(v) for v in f.values())
    assert f["nnz"] == f["density"] == f["row_cv"] == f["bandwidth"] == 0.0
    assert f["ell_fill"] == f["block2_fill"] == f["warp_imbalance"] == 1.0
    assert f["empty_row_share"] == (1.0 if shape[0] else 0.0)
    assert_features_close(f, reference(sp.csr_matrix(shape)))


def test_non_canonical_input_equals_canonical():
    rng = np.random.default_rng(3)
    row, col = rng.integers(0, 90, 2000), rng.integers(0, 70, 2000)
    coo = sp.coo_matrix((np.ones(2000), (row, col)), shape=(90, 70))  # duplicates, unsorted
    assert features(coo) == features(canonicalize(coo))
    assert features(coo) == features(coo.toarray())
    wide = canonicalize(coo)
    wide.indptr, wide.indices = wide.indptr.astype(np.int64), wide.indices.astype(np.int64)
    assert features(wide) == features(coo)


@pytest.mark.parametrize("seed", range(30))
def test_hyb_width_equals_the_hyb_format_rule(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 200))
    if seed % 3 == 0:  # two lengths with 3·(rows longer than K) = m: a tie in the cost
        lengths = np.repeat([2, 5], [2 * m // 3, m - 2 * m // 3])
    else:
        lengths = np.minimum(rng.pareto(1.0, m) * rng.integers(1, 20), 10_000).astype(np.int64)
    values, counts = np.unique(lengths, return_counts=True)
    width, overflow = row_lengths._hyb_width(values, counts, m, int(lengths.sum()))
    assert width == width_cost(lengths)
    assert overflow == np.maximum(lengths - width, 0).sum()


def test_sample_rows_must_be_positive():
    with pytest.raises(ValueError, match="sample_rows must be a positive number of rows"):
        features(sp.identity(4, format="csr"), sample_rows=0)


def _scatter(m: int, n: int, count: int, rng) -> sp.csr_matrix:
    """``count`` random positions (a few coincide) in an m×n pattern of ones."""
    i, j = rng.integers(0, m, count), rng.integers(0, n, count)
    return sp.csr_matrix((np.ones(count), (i, j)), shape=(m, n))


@functools.cache
def structured_matrix(seed: int = 0) -> sp.csr_matrix:
    """About 4M nonzeros: dense 3×3 and 8×8 blocks, a band widening down the rows and random
    entries."""
    rng = np.random.default_rng(seed)
    m = 240_000
    parts = [
        sp.kron(_scatter(m // 3, m // 3, 2 * m // 3, rng), np.ones((3, 3)), format="csr"),
        sp.kron(_scatter(m // 8, m // 8, m // 32, rng), np.ones((8, 8)), format="csr"),
        _scatter(m, m, 600_000, rng),
    ]
    width = np.arange(m) * 6 // m
    span = 2 * width + 1
    i = np.repeat(np.arange(m), span)
    j = i + np.arange(i.size) - np.repeat(np.cumsum(span) - span + width, span)
    keep = (j >= 0) & (j < m)
    parts.append(sp.csr_matrix((np.ones(keep.sum()), (i[keep], j[keep])), shape=(m, m)))
    return canonicalize(sum(parts[1:], parts[0]))


def test_sampled_estimates_within_tolerance():
    A = structured_matrix()
    assert A.nnz > 3_000_000 > SAMPLE_THRESHOLD
    sampled, full = features(A), exact(A)
    for name in FEATURE_NAMES:
        if name in SAMPLED_FEATURES:
            tol = SAMPLE_TOLERANCE * (full[name] if name.endswith("fill") else 1.0)
            assert abs(sampled[name] - full[name]) <= tol, (name, sampled[name], full[name])
        else:  # exact either way, up to the order of floating-point sums
            assert sampled[name] == pytest.approx(full[name], rel=1e-12), name
    tiny = features(A, sample_rows=3 * WINDOW_ROWS)  # a tiny sample: deterministic
    assert tiny == features(A, sample_rows=3 * WINDOW_ROWS)


@pytest.mark.parametrize("shape, mean_row", [((1000, 800), 8), ((50_000, 50_000), 5),
                                             ((3, 5), 2), ((70_001, 100), 5)])
def test_the_rows_of_sampled_windows_are_those_of_their_entries(shape, mean_row):
    # Empty rows (about 0.7 % of those with 5 a row on average), a last window cut short.
    from autospmv._decide.features import sampling

    rng = np.random.default_rng(1)
    lengths = rng.poisson(mean_row, shape[0])
    rows = np.repeat(np.arange(shape[0]), lengths)
    A = canonicalize(sp.csr_matrix((np.ones(rows.size), (rows, rng.integers(0, shape[1],
                                                                              rows.size))),
                                   shape=shape))
    total = -(-shape[0] // WINDOW_ROWS)
    for count in (1, 5, total):
        windows = sampling.drawn_windows(total, min(count, total))
        positions, _ = sampling.window_positions(A.indptr, windows, shape[0])
        np.testing.assert_array_equal(sampling.window_rows(A.indptr, windows, shape[0]),
                                      np.searchsorted(A.indptr, positions, side="right") - 1)


def test_parallel_scan_equals_serial(monkeypatch):
    A = structured_matrix()[:60_000]  # ~1M entries
    serial = [features(A), features(A, sample_rows=A.shape[0])]
    monkeypatch.setattr(cpu_threads, "PASSES_PARALLEL_MIN_NNZ", 0)
    monkeypatch.setattr(cpu_threads, "PARALLEL_MIN_THREADS", 1)
    parallel = [features(A), features(A, sample_rows=A.shape[0])]
    for got, want in zip(parallel, serial, strict=True):
        assert got == pytest.approx(want, rel=1e-12)
        assert {k: got[k] for k in SAMPLED_FEATURES} == {k: want[k] for k in SAMPLED_FEATURES}


@pytest.mark.parametrize("m", [0, 1, 3, 4, 5, 1001])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_row_length_counts_is_the_histogram_of_the_row_lengths(m, itype):
    """Any row count (the four interleaved histograms leave up to three rows to the tail),
    runs of equal lengths and empty rows."""
    from autospmv._decide.features.row_lengths import row_length_counts

    rng = np.random.default_rng(m)
    lengths = np.where(rng.random(m) < 0.5, 5, rng.integers(0, 12, m))
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(itype)
    longest = int(lengths.max(initial=0))
    counts = row_length_counts(indptr, m, longest)
    np.testing.assert_array_equal(counts, np.bincount(lengths, minlength=longest + 1))
