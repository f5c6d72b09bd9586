"""Every kernel against SciPy on every matrix of the family, in float32 and float64, on each
device: the CPU, and CUDA with host vectors where a real GPU is present (the ``device`` fixture).

The reference is SciPy in float64 on the same (already rounded) matrix and vector, so the
tolerance measures the kernel's own rounding only: 1e-5 relative for float32, 1e-12 for float64.
Formats with a fill limit (ell, jds) must refuse exactly the matrices that the fill rule names.
Device arrays in and out are in ``test_gpu.py``; the CUDA simulator's runs on tiny matrices are in
``test_cuda_simulator.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import autospmv
from matrices import (
    ALL, DTYPE_IDS, DTYPES, assert_close, conversion_refused, matrix, prepare_or_refuse,
    random_vector, reference, signed_from_row_lengths,
)

KERNELS = autospmv.KERNELS
MATRICES = sorted(ALL)
WITH_COLUMNS = [name for name in MATRICES if min(ALL[name]().shape) > 0]
"""Matrices that have rows and columns, so x can hold NaN and y has entries to check."""


def every_kernel_and_dtype(names):
    """Parametrize a test over ``kernel`` × ``dtype`` × ``name`` (the matrices ``names``)."""
    def parametrize(test):
        test = pytest.mark.parametrize("kernel", KERNELS)(test)
        test = pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)(test)
        return pytest.mark.parametrize("name", names)(test)
    return parametrize


@every_kernel_and_dtype(MATRICES)
def test_matches_scipy_with_and_without_out(kernel, dtype, name, device, rng):
    A = matrix(name, dtype)
    op = prepare_or_refuse(A, kernel, device)
    if op is None:
        return
    out = np.full(A.shape[0], np.nan, dtype=dtype)  # stale contents must not leak into y
    for _ in range(2):  # the second product must not add onto the first; with and without
        x = random_vector(rng, A.shape[1], dtype)  # out= alternate on one operator
        y = op @ x
        assert isinstance(y, np.ndarray)
        assert y.shape == (A.shape[0],)
        assert y.dtype == np.dtype(dtype)
        assert_close(y, reference(A, x), dtype)
        assert op.matvec(x, out=out) is out
        assert_close(out, reference(A, x), dtype)


@every_kernel_and_dtype(WITH_COLUMNS)
def test_nan_and_inf_propagate_like_scipy(kernel, dtype, name, device, rng):
    """NaN and ±Inf in x reach exactly the rows that store an entry in their column.

    x[0] is NaN: most rows have no entry in column 0, so a kernel that multiplies padding or
    empty slots by x[0] turns them into NaN where SciPy has a finite value.
    """
    A = matrix(name, dtype)
    op = prepare_or_refuse(A, kernel, device)
    if op is None:
        return
    n = A.shape[1]
    x = random_vector(rng, n, dtype)
    x[0] = np.nan
    x[n // 2] = np.inf if n > 1 else np.nan
    x[n - 1] = -np.inf if n > 2 else x[n - 1]
    with np.errstate(invalid="ignore"):
        y_ref = reference(A, x)
    y = op @ x
    np.testing.assert_array_equal(np.isnan(y), np.isnan(y_ref))
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(y_ref))
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(y_ref))
    finite = np.isfinite(y_ref)
    assert_close(y[finite], y_ref[finite], dtype)


SWEEP_MATRICES = ["power_law_500", "huge_row_among_short_300x3000", "half_rows_empty_200x150",
                  "odd_65x47"]


@pytest.mark.parametrize("name", SWEEP_MATRICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("threads_per_row", [2, 4, 8, 16, 32])
def test_csr_vector_every_group_size(threads_per_row, dtype, name, device, rng):
    A = matrix(name, dtype)
    op = prepare_or_refuse(A, "csr_vector", device, {"threads_per_row": threads_per_row})
    assert op.params == {"threads_per_row": threads_per_row}
    x = random_vector(rng, A.shape[1], dtype)
    assert_close(op @ x, reference(A, x), dtype)


@pytest.mark.parametrize("name", SWEEP_MATRICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("width", [0, 1, 2, 7, 10_000])
def test_hyb_every_width(width, dtype, name, device, rng):
    """Width 0 is pure COO; a width beyond the longest row is pure ELL (and may hit the limit)."""
    A = matrix(name, dtype)
    op = prepare_or_refuse(A, "hyb", device, {"width": width})
    if op is None:
        return
    x = random_vector(rng, A.shape[1], dtype)
    assert_close(op @ x, reference(A, x), dtype)


def test_fill_rule_refuses_somewhere():
    """The family exercises both outcomes of the fill rule for the padded formats."""
    for kernel in ("ell", "jds"):
        outcomes = {conversion_refused(kernel, ALL[name]()) for name in MATRICES}
        assert outcomes == {True, False}, kernel


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cpu_csr_scalar_sums_long_rows_in_four_partial_sums(dtype, rng):
    """On the CPU, csr_scalar sums a row of fewer than LONG_ROW terms in one running sum, in
    order (SciPy's result, bit for bit), and, where rows of LONG_ROW or more hold at least
    LONG_ROWS_MIN_SHARE of the nonzeros, such a row in four partial sums over the terms k, k+4,
    k+8, ..., added pairwise, then its last (length mod 4) terms in order; elsewhere every row
    in order. The serial and the parallel specialisation give the same bits."""
    from autospmv.formats.csr import CSRFormat
    from autospmv.kernels.cpu.csr import LONG_ROW, LONG_ROWS_MIN_SHARE, bind_scalar, long_row_share

    def rows_of(lengths):
        return signed_from_row_lengths(lengths, 2_000, 3).astype(dtype)

    def in_order(terms):
        total = dtype(0)
        for term in terms:
            total += term
        return total

    def partial_sums(terms):
        sums = [dtype(0)] * 4
        whole = len(terms) - len(terms) % 4
        for k in range(whole):
            sums[k % 4] += terms[k]
        return in_order([(sums[0] + sums[1]) + (sums[2] + sums[3])] + terms[whole:])

    lengths = [0, 1, LONG_ROW - 1, LONG_ROW, LONG_ROW + 1, LONG_ROW + 2, LONG_ROW + 3, 64, 1001]
    mostly_short = [LONG_ROW + 5] + [LONG_ROW - 1] * 200  # long rows: 21 of 3,021 nonzeros
    assert long_row_share(rows_of(mostly_short).indptr) < LONG_ROWS_MIN_SHARE
    for lengths, split in ((lengths, True), (mostly_short, False)):
        A = rows_of(lengths)
        x = random_vector(rng, A.shape[1], dtype)
        expected = np.empty(A.shape[0], dtype=dtype)
        for i in range(A.shape[0]):
            terms = [A.data[k] * x[A.indices[k]] for k in range(A.indptr[i], A.indptr[i + 1])]
            long = split and len(terms) >= LONG_ROW
            expected[i] = partial_sums(terms) if long else in_order(terms)
        short = np.diff(A.indptr) < LONG_ROW
        np.testing.assert_array_equal(expected[short], (A @ x)[short])
        if not split:
            np.testing.assert_array_equal(expected, A @ x)
        fmt = CSRFormat.from_csr(A)
        for parallel in (False, True):
            y = np.full(A.shape[0], np.nan, dtype=dtype)
            bind_scalar(fmt, {}, parallel)(x, y)
            np.testing.assert_array_equal(y, expected)
