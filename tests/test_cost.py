"""Tests of :mod:`autospmv._decide.cost`: a direct reference from the definitions in its docstring on
the whole matrix family, values worked out by hand, and empty matrices."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from matrices import ALL

from autospmv._decide.cost import launches_of_features
from autospmv._decide.features.quantities import QUANTITY_NAMES, quantities
from autospmv._decide.choosers import choose_csr5_sigma, choose_hyb_width, choose_threads_per_row
from autospmv._registry import KERNELS
from autospmv._support.validation import canonicalize


def _warp_loops(lengths, rows_per_warp: int, lanes: int) -> int:
    """Σ over consecutive groups of rows of the group's longest ⌈len/lanes⌉, row by row."""
    total = 0
    for start in range(0, len(lengths), rows_per_warp):
        group = lengths[start:start + rows_per_warp]
        total += max(math.ceil(int(length) / lanes) for length in group)
    return total


def cost_reference(csr, device: str) -> dict[str, float]:
    """The quantities from the tables of the module docstring, one kernel at a time."""
    m, n = csr.shape
    nnz = csr.nnz
    if m == 0 or nnz == 0:
        return dict.fromkeys(QUANTITY_NAMES, 0.0)
    lengths = np.diff(csr.indptr).astype(np.int64)
    v = csr.dtype.itemsize
    vectors = v * (m + n)
    longest = int(lengths.max())
    g = choose_threads_per_row(csr, device)["threads_per_row"]
    w = choose_hyb_width(csr, device)["width"]
    sigma = choose_csr5_sigma(csr, device)["sigma"]
    tiles = math.ceil(nnz / (32 * sigma))
    overflow = np.maximum(lengths - w, 0)
    csr_bytes = nnz * (v + 4) + 4 * (m + 1) + vectors
    vector_warps = math.ceil(m / (32 // g))
    table = {
        "coo": (nnz * (v + 8) + vectors, nnz, 1, math.ceil(longest / 32), 2),
        "csr_scalar": (csr_bytes, 32 * _warp_loops(lengths, 32, 1), longest, 0, 1),
        "csr_vector": (csr_bytes,
                       32 * (_warp_loops(lengths, 32 // g, g) + math.log2(g) * vector_warps),
                       math.ceil(longest / g) + math.log2(g), 0, 1),
        "ell": (m * longest * (v + 4) + vectors, 32 * math.ceil(m / 32) * longest, longest, 0,
                1),
        "hyb": (m * w * (v + 4) + overflow.sum() * (v + 8) + vectors,
                32 * math.ceil(m / 32) * w + overflow.sum(), w + (overflow.sum() > 0),
                math.ceil(overflow.max() / 32), 1 + (overflow.sum() > 0)),
        "jds": (nnz * (v + 4) + 4 * (m + longest + 1) + vectors,
                32 * _warp_loops(np.sort(lengths)[::-1], 32, 1), longest, 0, 1),
        "csr5": (nnz * (v + 4) + tiles * (32 * 8 + 4) + vectors, 32 * sigma * tiles, sigma,
                 math.ceil(longest / (32 * sigma)) + 1, 2),
    }
    return {f"{kernel}_{q}": float(value) for kernel in KERNELS
            for q, value in zip(("bytes", "work", "span", "atomics", "launches"),
                                table[kernel], strict=True)}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", sorted(ALL))
def test_matches_reference_on_family(name, device):
    csr = canonicalize(ALL[name]())
    got = quantities(csr, device)
    assert list(got) == list(QUANTITY_NAMES)
    assert got == pytest.approx(cost_reference(csr, device), rel=1e-12)


def _rows_3_0_1_40() -> sp.csr_matrix:
    lengths = [3, 0, 1, 40]
    rows = np.repeat(np.arange(4), lengths)
    cols = np.concatenate([np.arange(k) for k in lengths])
    return canonicalize(sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(4, 50)))


def test_values_by_hand():
    # Row lengths 3, 0, 1, 40 in a 4×50 float64 matrix on the CPU: one warp, CSR-vector group 2,
    # HYB width 0 (fewer than 4096 rows), CSR5 σ = 2 × 16.
    q = quantities(_rows_3_0_1_40(), "cpu")
    vectors = 8 * (4 + 50)
    assert q["coo_bytes"] == 44 * 16 + vectors and q["coo_atomics"] == 2
    assert (q["csr_scalar_work"], q["csr_scalar_span"]) == (32 * 40, 40)
    assert q["csr_scalar_bytes"] == 44 * 12 + 4 * 5 + vectors
    # Group 2: 16 rows a warp, all four in one; loop ⌈40/2⌉ = 20 plus a 1-step reduction.
    assert (q["csr_vector_work"], q["csr_vector_span"]) == (32 * 21, 21)
    assert q["ell_bytes"] == 4 * 40 * 12 + vectors and q["ell_work"] == 32 * 40
    assert (q["hyb_work"], q["hyb_span"], q["hyb_atomics"]) == (44, 1, 2)
    assert q["jds_work"] == 32 * 40 and q["jds_bytes"] == 44 * 12 + 4 * (4 + 41) + vectors
    assert (q["csr5_span"], q["csr5_work"], q["csr5_atomics"]) == (32, 32 * 32, 2)
    # Width 0: HYB zeroes y and runs its COO part, two steps like COO and CSR5.
    assert {k: q[f"{k}_launches"] for k in KERNELS} == {
        "coo": 2, "csr_scalar": 1, "csr_vector": 1, "ell": 1, "hyb": 2, "jds": 1, "csr5": 2}


def test_hyb_launches_once_without_overflow():
    # Every row 3 long in 5000 rows: width 3 holds all entries, the ELL part is the one step.
    A = canonicalize(sp.diags([1.0, 2.0, 3.0], [0, 1, 2], shape=(5000, 5002), format="csr"))
    q = quantities(A, "cuda")
    assert (q["hyb_atomics"], q["hyb_launches"]) == (0, 1)


@pytest.mark.parametrize("name", sorted(ALL))
def test_launches_derived_from_features_match(name):
    # Label records taken before launches were counted get them from their other features.
    from autospmv import features

    csr = canonicalize(ALL[name]())
    f = features(csr, device="cuda")
    assert launches_of_features(f) == {k: f[k] for k in f if k.endswith("_launches")}


def test_values_by_hand_on_cuda():
    # The same matrix with the CUDA choosers: group 32 (the 40-long row's loop dominates in so
    # small a matrix), one row a warp: loops 1, 0, 1 and 2 plus 5 reduction steps each; CSR5
    # σ = 16 / 2 = 8 (one tile), atomics ⌈40/256⌉ + 1.
    q = quantities(_rows_3_0_1_40(), "cuda")
    assert (q["csr_vector_work"], q["csr_vector_span"]) == (32 * (4 + 4 * 5), 2 + 5)
    assert (q["csr5_span"], q["csr5_work"], q["csr5_atomics"]) == (8, 32 * 8, 2)


def test_sorted_warps_span_several_lengths():
    # 70 rows: 40 of length 5 then 30 of length 9; sorted, the warps start with 9, 5 and 5.
    lengths = [5] * 40 + [9] * 30
    rows = np.repeat(np.arange(70), lengths)
    cols = np.concatenate([np.arange(k) for k in lengths])
    A = canonicalize(sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(70, 10)))
    assert quantities(A, "cpu")["jds_work"] == 32 * (9 + 5 + 5)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("shape", [(0, 0), (5, 0), (0, 5), (7, 3)])
def test_empty(shape, device):
    assert quantities(canonicalize(sp.csr_matrix(shape)), device) == dict.fromkeys(
        QUANTITY_NAMES, 0.0)
