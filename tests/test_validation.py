"""Input checking and canonicalisation: one test per error message, then what is accepted."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv._support.validation import canonicalize, index_dtype
from matrices import (
    TOLERANCE, random_matrix, random_vector, reference, relative_error, with_duplicates,
)


@pytest.fixture
def A():
    return random_matrix(6, 4, 0.5, 1)


@pytest.fixture
def op(A):
    return autospmv.prepare(A, kernel="csr_scalar", device="cpu")


# --- the matrix -------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["abc", None, 3.5, {"a": 1}],
                         ids=["str", "None", "float", "dict"])
def test_rejects_non_matrix(value):
    with pytest.raises(TypeError, match="needs a scipy.sparse matrix/array or a 2-D numpy array; "
                                        f"got {type(value).__name__}"):
        autospmv.prepare(value, device="cpu")


def test_accepts_nested_lists_like_numpy():
    op = autospmv.prepare([[1, 0, 2], [0, 0, 3]], kernel="coo", device="cpu")
    assert op.shape == (2, 3) and op.dtype == np.float64
    np.testing.assert_array_equal(op @ np.array([1.0, 2.0, 3.0]), [7.0, 9.0])


@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), ()], ids=["3-D", "1-D", "0-D"])
def test_rejects_dense_array_not_2d(shape):
    message = f"needs a 2-D matrix; got an array with shape {shape}"
    with pytest.raises(ValueError, match=re.escape(message)):
        autospmv.prepare(np.ones(shape), device="cpu")


def test_rejects_sparse_array_not_2d():
    with pytest.raises(ValueError, match="needs a 2-D matrix; got a 3-D sparse array"):
        autospmv.prepare(sp.coo_array(np.ones((2, 3, 4))), device="cpu")


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_rejects_complex_matrix(dtype, sparse):
    matrix = np.eye(3, dtype=dtype)
    if sparse:
        matrix = sp.csr_matrix(matrix)
    message = (rf"does not support complex matrices \({np.dtype(dtype)}\): its kernels are "
               "real-valued")
    with pytest.raises(TypeError, match=message):
        autospmv.prepare(matrix, device="cpu")


def test_rejects_object_array():
    with pytest.raises(TypeError, match="cannot build a matrix from ndarray with object dtype"):
        autospmv.prepare(np.array([[1.0, None], [None, 2.0]], dtype=object), device="cpu")


# --- kernel, device, params, model ------------------------------------------------------------

@pytest.mark.parametrize("kernel", ["csr", "CSR_SCALAR", 3, ["coo"]], ids=repr)
def test_rejects_unknown_kernel_listing_valid_ones(A, kernel):
    message = f"unknown kernel {kernel!r}; valid kernels: {', '.join(autospmv.KERNELS)}"
    with pytest.raises(ValueError, match=re.escape(message)):
        autospmv.prepare(A, kernel=kernel, device="cpu")
    with pytest.raises(ValueError, match=re.escape(message)):
        autospmv.select(A, kernel=kernel)


@pytest.mark.parametrize("device", ["gpu", "CUDA", "cuda:0", 0], ids=repr)
def test_rejects_unknown_device(A, device):
    with pytest.raises(ValueError, match=re.escape(f"unknown device {device!r}; valid devices: "
                                                   "'cuda', 'cpu' or None")):
        autospmv.prepare(A, device=device)


def test_rejects_params_without_kernel(A):
    with pytest.raises(ValueError, match=re.escape("params= needs kernel=")):
        autospmv.prepare(A, device="cpu", params={"threads_per_row": 4})


def test_rejects_unknown_parameter_listing_valid_ones(A):
    message = "kernel 'csr_vector' has no parameter 'width'; its parameters: threads_per_row"
    with pytest.raises(ValueError, match=re.escape(message)):
        autospmv.prepare(A, kernel="csr_vector", device="cpu", params={"width": 3})


def test_rejects_parameter_of_kernel_without_parameters(A):
    message = "kernel 'coo' has no parameter 'width'; its parameters: none"
    with pytest.raises(ValueError, match=re.escape(message)):
        autospmv.prepare(A, kernel="coo", device="cpu", params={"width": 3})


def test_missing_model_file_is_a_clear_error(A):
    with pytest.raises(ValueError, match="model file 'tree.json' does not exist"):
        autospmv.prepare(A, device="cpu", model="tree.json")


def test_cuda_without_gpu_is_a_clear_error(A):
    if autospmv.cuda_available():
        pytest.skip("a CUDA GPU (or the simulator) is available here")
    with pytest.raises(RuntimeError, match="device='cuda' was requested but no usable CUDA GPU "
                                           "was found"):
        autospmv.prepare(A, device="cuda")


# --- vectors ----------------------------------------------------------------------------------

def test_rejects_x_of_wrong_length(op):
    with pytest.raises(ValueError, match="x has length 5, but the matrix has 4 columns"):
        op.matvec(np.ones(5))
    with pytest.raises(ValueError, match="x has length 3, but the matrix has 4 columns"):
        op.matvec(np.ones(3), out=np.empty(6))


@pytest.mark.parametrize("shape", [(2, 4), (4, 2), (1, 1, 4), (2, 2)])
def test_rejects_x_that_is_not_a_vector(op, shape):
    with pytest.raises(ValueError, match=re.escape(f"x must be a vector of length 4; got an array "
                                                   f"with shape {shape}")):
        op.matvec(np.ones(shape))


@pytest.mark.parametrize("product", ["matmul", "dot", "transpose"])
def test_a_product_of_more_than_two_dimensions_names_the_shape(op, product):
    x = np.ones((4, 2, 2))
    run = {"matmul": lambda: op @ x, "dot": lambda: op.dot(x), "transpose": lambda: op.T @ x}
    with pytest.raises(ValueError, match=re.escape("A @ x takes a vector or a 2-D block of "
                                                   "columns; got an array with shape "
                                                   "(4, 2, 2)")):
        run[product]()


@pytest.mark.parametrize("shape", [(3,), (5,), (4, 2), (2, 2)])
def test_a_transposed_product_names_the_length_it_needs(op, shape):
    with pytest.raises(ValueError, match=re.escape(f"Aᵀ @ x needs x of length {op.shape[0]} "
                                                   f"(A's rows); got an array with shape "
                                                   f"{shape}")):
        op.rmatvec(np.ones(shape))


def test_rejects_complex_x(op):
    with pytest.raises(TypeError, match="x has complex dtype complex128: autospmv does not "
                                        "support complex vectors"):
        op.matvec(np.ones(4, dtype=complex))


@pytest.mark.parametrize("shape", [(5,), (7,), (6, 1), ()], ids=str)
def test_rejects_out_of_wrong_shape(op, shape):
    with pytest.raises(ValueError, match=re.escape(f"out must have shape (6,); got {shape}")):
        op.matvec(np.ones(4), out=np.empty(shape))


def test_rejects_out_that_is_not_an_array(op):
    with pytest.raises(ValueError, match=re.escape("out must have shape (6,); got None")):
        op.matvec(np.ones(4), out=[0.0] * 6)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128])
def test_rejects_out_of_wrong_dtype(op, dtype):
    with pytest.raises(TypeError, match=f"out must have dtype float64; got {np.dtype(dtype)}"):
        op.matvec(np.ones(4), out=np.empty(6, dtype=dtype))


def test_rejects_non_contiguous_out(op):
    with pytest.raises(ValueError, match="out must be contiguous"):
        op.matvec(np.ones(4), out=np.empty(12)[::2])


class FakeDeviceArray:
    """Anything with ``__cuda_array_interface__`` is treated as a device array."""

    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f8", "data": (0, False), "version": 3}


def test_cpu_operator_rejects_device_arrays(op):
    with pytest.raises(TypeError, match="this operator runs on the CPU and takes numpy arrays; "
                                        "got a CUDA device array \\(FakeDeviceArray\\)"):
        op.matvec(FakeDeviceArray())
    with pytest.raises(TypeError, match="build the operator with device='cuda'"):
        op @ FakeDeviceArray()


# --- what is accepted: canonicalisation -------------------------------------------------------

@pytest.mark.parametrize("dtype, expected", [
    (np.bool_, np.float64), (np.int8, np.float64), (np.int32, np.float64), (np.int64, np.float64),
    (np.uint64, np.float64), (np.float16, np.float32), (np.float32, np.float32),
    (np.float64, np.float64),
], ids=lambda v: np.dtype(v).name)
def test_value_dtype(dtype, expected):
    dense = np.array([[1, 0, 1], [0, 1, 1]], dtype=dtype)
    inputs = [dense] if dtype == np.float16 else [dense, sp.csr_matrix(dense)]  # no sparse float16
    for A in inputs:
        csr = canonicalize(A)
        assert csr.dtype == expected
        np.testing.assert_array_equal(csr.toarray(), dense.astype(expected))
        assert autospmv.prepare(A, device="cpu").dtype == expected


def test_index_dtype_int32_until_it_overflows():
    assert index_dtype(2**31 - 1, (2**31 - 1, 2**31 - 1)) == np.int32
    assert index_dtype(2**31, (10, 10)) == np.int64
    assert index_dtype(10, (2**31, 10)) == np.int64
    assert index_dtype(10, (10, 2**31)) == np.int64


def test_int64_indices_become_int32():
    A = random_matrix(30, 20, 0.3, 2)
    A.indptr = A.indptr.astype(np.int64)
    A.indices = A.indices.astype(np.int64)
    csr = canonicalize(A)
    assert csr.indptr.dtype == np.int32 and csr.indices.dtype == np.int32


def test_duplicates_are_summed_without_touching_the_input():
    A = with_duplicates(20, 17, 120, 3)
    csr = canonicalize(A)
    assert csr.has_canonical_format
    assert csr.nnz < A.nnz == 120
    np.testing.assert_allclose(csr.toarray(), A.toarray(), rtol=1e-15)


def test_unsorted_indices_are_sorted_without_touching_the_input():
    indptr = np.array([0, 3, 3, 5])
    indices = np.array([4, 0, 2, 3, 1])
    A = sp.csr_matrix((np.arange(1.0, 6.0), indices, indptr), shape=(3, 5))
    assert not A.has_sorted_indices
    csr = canonicalize(A)
    assert csr.has_sorted_indices and csr.has_canonical_format
    np.testing.assert_array_equal(csr.indices, [0, 2, 4, 1, 3])
    np.testing.assert_array_equal(csr.data, [2.0, 3.0, 1.0, 5.0, 4.0])
    np.testing.assert_array_equal(A.indices, indices)  # the caller's matrix is unchanged


def test_explicit_zeros_stay_in_the_structure():
    A = sp.csr_matrix((np.array([0.0, 2.0, 0.0]), np.array([0, 1, 2]), np.array([0, 2, 3])),
                      shape=(2, 3))
    csr = canonicalize(A)
    assert csr.nnz == 3
    np.testing.assert_array_equal(csr.data, [0.0, 2.0, 0.0])


def test_canonical_matrix_is_used_without_a_copy():
    A = random_matrix(5, 5, 0.5, 4)
    assert canonicalize(A) is A
    array = sp.csr_array(A)
    csr = canonicalize(array)
    assert type(csr) is sp.csr_matrix
    for name in ("data", "indices", "indptr"):
        assert np.shares_memory(getattr(csr, name), getattr(array, name))


@pytest.mark.parametrize("kernel", autospmv.KERNELS)
@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array"])
def test_operator_is_a_snapshot_of_the_matrix(kernel, kind, rng):
    """Changing A after prepare() changes neither op nor op.T (prepare()'s docstring)."""
    A = random_matrix(40, 30, 0.2, 4)
    B = A.copy() if kind == "csr_matrix" else sp.csr_array(A.copy())
    op = autospmv.prepare(B, kernel=kernel, device="cpu")
    B.data *= 2
    B.indices[:] = 0
    x, z = random_vector(rng, 30, np.float64), random_vector(rng, 40, np.float64)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    assert relative_error(op.T @ z, reference(A.T, z)) <= TOLERANCE[np.dtype(np.float64)]


INPUT_KINDS = {
    "coo_matrix": sp.coo_matrix,
    "csc_matrix": sp.csc_matrix,
    "lil_matrix": sp.lil_matrix,
    "dok_matrix": sp.dok_matrix,
    "bsr_matrix": lambda A: sp.bsr_matrix(A, blocksize=(3, 1)),
    "dia_matrix": sp.dia_matrix,
    "csr_array": sp.csr_array,
    "coo_array": sp.coo_array,
    "csc_array": sp.csc_array,
    "numpy_array": lambda A: A.toarray(),
    "numpy_matrix": lambda A: A.todense(),
    "fortran_array": lambda A: np.asfortranarray(A.toarray()),
}


@pytest.mark.parametrize("kind", list(INPUT_KINDS))
def test_accepts_any_scipy_format_and_dense_input(kind, rng):
    A = random_matrix(12, 9, 0.3, 5)
    csr = canonicalize(INPUT_KINDS[kind](A))
    assert type(csr) is sp.csr_matrix
    assert csr.has_canonical_format
    assert csr.indices.dtype == np.int32 and csr.indptr.dtype == np.int32
    np.testing.assert_array_equal(csr.toarray(), A.toarray())
    op = autospmv.prepare(INPUT_KINDS[kind](A), device="cpu")
    x = random_vector(rng, 9, np.float64)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]


def test_x_of_any_real_kind_gives_scipys_dtype(rng):
    """Lists, integer and strided arrays: the product's dtype is NumPy's result type with the
    float32 matrix (float64 for these), computed to float64's accuracy."""
    A = random_matrix(12, 9, 0.3, 6).astype(np.float32)
    op = autospmv.prepare(A, kernel="csr_vector", device="cpu")
    for x in (random_vector(rng, 9, np.float64), np.arange(9), list(range(9)),
              np.arange(18.0)[::2]):
        y = op @ x
        assert y.dtype == np.float64 == (A @ np.asarray(x)).dtype
        assert relative_error(y, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
