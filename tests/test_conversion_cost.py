"""What a conversion and an operator cost besides time: compilation, memory and copies.

Conversions are compiled once per index and value dtype, never per matrix; they allocate their
outputs and little else; the operator holds what it runs and reports it.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv import _registry as registry
from autospmv._support.cache import compile_timer
from autospmv._support.validation import canonicalize
from matrices import assert_close, poisson2d, power_law, random_vector

FORMAT_KERNELS = ["coo", "ell", "hyb", "jds", "csr5"]
DTYPES = [np.float32, np.float64]


def _matrices(dtype):
    return {"poisson": canonicalize(poisson2d(90).astype(dtype)),
            "power_law": canonicalize(power_law(3000, 2500, 2.0, 5).astype(dtype))}


def _convert(kernel, csr):
    return registry.get(kernel).convert(csr, registry.choose_params(kernel, csr, "cuda"))


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("kernel", FORMAT_KERNELS)
def test_a_new_matrix_compiles_nothing(kernel, dtype):
    first, second = _matrices(dtype).values()
    if kernel == "ell":
        second = canonicalize(poisson2d(61).astype(dtype))  # ELL refuses the power-law rows
    _convert(kernel, first)
    with compile_timer() as compiled:
        _convert(kernel, second)
    assert compiled.total == 0


def _owned_bytes(fmt, csr) -> int:
    """Bytes of the format's arrays that are not the CSR's own."""
    shared = (csr.indptr, csr.indices, csr.data)
    return sum(a.nbytes for a in fmt.arrays().values()
               if not any(np.shares_memory(a, s) for s in shared))


@pytest.mark.parametrize("kernel", FORMAT_KERNELS)
def test_conversions_allocate_their_output_and_little_else(kernel):
    csr = _matrices(np.float64)["poisson" if kernel == "ell" else "power_law"]
    _convert(kernel, csr)  # compiled outside the measurement
    tracemalloc.start()
    try:
        fmt = _convert(kernel, csr)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    m = csr.shape[0]
    # Besides the output: at most two row-sized int64 arrays (row lengths, overflow offsets).
    assert peak <= _owned_bytes(fmt, csr) + 16 * (m + 1) + 64 * 1024


def test_coo_shares_the_csr_columns_and_values():
    csr = _matrices(np.float32)["power_law"]
    fmt = _convert("coo", csr)
    assert fmt.col is csr.indices and fmt.data is csr.data
    np.testing.assert_array_equal(fmt.row, np.repeat(np.arange(csr.shape[0]),
                                                     np.diff(csr.indptr)))


@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_cpu_operator_memory_is_its_format(kernel):
    A = _matrices(np.float64)["poisson"]
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    assert op.memory == {"host": op.format.nbytes, "device": 0}
    assert op.nbytes == op.format.nbytes
    assert op.nnz == A.nnz and f"nnz={A.nnz}" in repr(op)


def test_transpose_is_built_from_the_prepared_matrix(rng):
    rows = rng.integers(0, 40, 300)
    cols = rng.integers(0, 30, 300)
    A = sp.coo_matrix((rng.integers(1, 5, 300), (rows, cols)), shape=(40, 30))  # duplicates, int
    op = autospmv.prepare(A, kernel="ell", device="cpu")
    x = random_vector(rng, 40, np.float64)
    assert_close(op.T @ x, A.T.astype(np.float64) @ x, np.float64)
    assert_close(op.rmatvec(x), A.T.astype(np.float64) @ x, np.float64)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_row_tasks_split_without_copying_the_row_pointer(itype):
    from autospmv.formats import convert

    lengths = np.random.default_rng(3).integers(0, 40, 200_000)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(itype)
    tracemalloc.start()
    bounds = convert.row_tasks(indptr, 3)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < indptr.nbytes / 4
    m, nnz = indptr.size - 1, int(indptr[-1])
    assert bounds[0] == 0 and bounds[-1] == m and (np.diff(bounds) > 0).all()
    assert (bounds[:-1] % 3 == 0).all()
    # Every task but the last holds about _TASK_NNZ nonzeros (up to a block of rows more).
    per_task = np.diff(indptr[bounds])
    assert (np.abs(per_task[:-1] - nnz / (bounds.size - 1)) <= 3 * 40).all()
