"""Storage formats lose nothing: ``fmt.to_csr()`` gives back the canonical matrix exactly.

Checked for every kernel's format over the matrix family, then as properties on random shapes
(0..50 x 0..50) and row-length distributions, where the CPU kernels are compared with SciPy too.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import autospmv
from autospmv import _registry as registry
from autospmv.formats.base import FormatTooLargeError, SparseFormat
from autospmv._support.validation import canonicalize
from matrices import (
    ALL, DTYPE_IDS, DTYPES, assert_close, conversion_refused, from_row_lengths, random_vector,
    reference,
)

KERNELS = autospmv.KERNELS


def convert(kernel: str, csr: sp.csr_matrix) -> SparseFormat:
    spec = registry.get(kernel)
    return spec.convert(csr, registry.choose_params(kernel, csr, "cuda"))


def assert_same_csr(actual: sp.csr_matrix, expected: sp.csr_matrix):
    """Same shape, structure (explicit zeros included) and bit-identical values."""
    assert actual.shape == expected.shape
    actual = sp.csr_matrix(actual)
    np.testing.assert_array_equal(actual.indptr, expected.indptr)
    np.testing.assert_array_equal(actual.indices, expected.indices)
    assert actual.data.dtype == expected.data.dtype
    np.testing.assert_array_equal(actual.data, expected.data)


def check_round_trip(kernel: str, csr: sp.csr_matrix):
    before = csr.copy()
    fmt = convert(kernel, csr)
    assert fmt.shape == csr.shape
    assert fmt.dtype == csr.dtype
    arrays = fmt.arrays()
    assert all(isinstance(a, np.ndarray) for a in arrays.values())
    assert fmt.nbytes == sum(a.nbytes for a in arrays.values())
    assert_same_csr(fmt.to_csr(), csr)
    assert_same_csr(csr, before)  # the conversion did not modify its input


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_round_trip(kernel, dtype, name):
    csr = canonicalize(ALL[name]().astype(dtype))
    if conversion_refused(kernel, csr):
        with pytest.raises(FormatTooLargeError, match="fill limit"):
            convert(kernel, csr)
        return
    check_round_trip(kernel, csr)


ROW_LENGTH_LAWS = ("uniform", "power_law", "with_empty_rows")


@st.composite
def random_csr(draw) -> sp.csr_matrix:
    """A canonical CSR matrix of random shape, row-length law and dtype."""
    m = draw(st.integers(0, 50))
    n = draw(st.integers(0, 50))
    law = draw(st.sampled_from(ROW_LENGTH_LAWS))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if law == "uniform":  # lengths uniform in 0..k for a random k <= n
        lengths = rng.integers(0, rng.integers(0, n + 1) + 1, m)
    elif law == "power_law":  # mostly short rows, a few long ones
        lengths = np.minimum(np.floor(rng.pareto(1.1, m) * 2), n)
    else:  # a random share of empty rows among rows of uniform length
        lengths = np.where(rng.random(m) < rng.random(), 0, rng.integers(0, n + 1, m))
    return canonicalize(from_row_lengths(lengths.astype(np.int64), n, seed).astype(dtype))


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=25, deadline=None)
@given(csr=random_csr())
def test_round_trip_property(kernel, csr):
    check_round_trip(kernel, csr)  # at most 50 x 50: always under the fill limit's allowance


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=25, deadline=None)
@given(csr=random_csr(), seed=st.integers(0, 2**32 - 1))
def test_cpu_kernel_property(kernel, csr, seed):
    op = autospmv.prepare(csr, kernel=kernel, device="cpu")
    x = random_vector(np.random.default_rng(seed), csr.shape[1], csr.dtype)
    y = op @ x
    assert y.shape == (csr.shape[0],) and y.dtype == csr.dtype
    assert_close(y, reference(csr, x), csr.dtype)
