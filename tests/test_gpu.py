"""Every CUDA kernel on a real GPU against SciPy with device arrays: numba, CuPy and torch.

Needs a real GPU (marked ``requires_gpu``; skipped elsewhere and under the CUDA simulator, which
``test_cuda_simulator.py`` covers with tiny matrices). Host vectors on the GPU run with the CPU's
in ``test_kernels.py``, one body for both devices. Device arrays go in and come out without a
copy: the result is the same kind of array as x, and ``out=`` is filled in place.
"""

from __future__ import annotations

import numpy as np
import pytest

import autospmv
from matrices import (
    ALL, DTYPE_IDS, DTYPES, assert_close, matrix, prepare_or_refuse, random_matrix, random_vector,
    reference,
)

cuda = pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.requires_gpu

KERNELS = autospmv.KERNELS
MATRICES = sorted(ALL)


def prepare_gpu(A, kernel: str):
    return prepare_or_refuse(A, kernel, "cuda")


# --- device arrays: numba, CuPy, torch ----------------------------------------------------------

# Each returns (to_device, full_of_nan(m, dtype), to_host, array type).

def numba_arrays():
    return (cuda.to_device, lambda m, dtype: cuda.to_device(np.full(m, np.nan, dtype)),
            lambda a: a.copy_to_host(), cuda.devicearray.DeviceNDArray)


def cupy_arrays():
    cupy = pytest.importorskip("cupy")
    return cupy.asarray, lambda m, dtype: cupy.full(m, np.nan, dtype), cupy.asnumpy, cupy.ndarray


def torch_arrays():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    def full_of_nan(m, dtype):
        return torch.full((m,), float("nan"), dtype=getattr(torch, np.dtype(dtype).name),
                          device="cuda")

    def to_device(a):
        return torch.from_numpy(a).cuda()

    return to_device, full_of_nan, lambda t: t.cpu().numpy(), torch.Tensor


LIBRARIES = {"numba": numba_arrays, "cupy": cupy_arrays, "torch": torch_arrays}


@pytest.mark.parametrize("library", list(LIBRARIES))
@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_device_vectors(kernel, dtype, name, library, rng):
    to_device, full_of_nan, to_host, array_type = LIBRARIES[library]()
    A = matrix(name, dtype)
    op = prepare_gpu(A, kernel)
    if op is None:
        return
    x = random_vector(rng, A.shape[1], dtype)
    y = op @ to_device(x)
    assert isinstance(y, array_type), f"{library} in, {type(y).__name__} out"
    assert_close(to_host(y), reference(A, x), dtype)
    out = full_of_nan(A.shape[0], dtype)
    for _ in range(2):
        x = random_vector(rng, A.shape[1], dtype)
        assert op.matvec(to_device(x), out=out) is out
        cuda.synchronize()
        assert_close(to_host(out), reference(A, x), dtype)


@pytest.mark.parametrize("library", list(LIBRARIES))
@pytest.mark.parametrize("name", ["power_law_500", "huge_row_among_short_300x3000",
                                  "half_rows_empty_200x150", "parallel_long_rows_24x40000"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_device_vectors_of_the_other_dtype(kernel, dtype, name, library, rng):
    """x of the other dtype than the matrix's (float64 x for a float32 matrix, float32 x for a
    float64 one): a float64 result of x's kind, accumulated in float64 (float64's tolerance),
    also into a float64 ``out``, while x of the matrix's dtype keeps its dtype."""
    to_device, full_of_nan, to_host, array_type = LIBRARIES[library]()
    A = matrix(name, dtype)
    op = prepare_gpu(A, kernel)
    if op is None:
        return
    other = np.float32 if dtype == np.float64 else np.float64
    x = random_vector(rng, A.shape[1], other)
    y = op @ to_device(x)
    assert isinstance(y, array_type) and to_host(y).dtype == np.float64
    assert_close(to_host(y), reference(A, x), np.float64)
    out = full_of_nan(A.shape[0], np.float64)
    assert op.matvec(to_device(x), out=out) is out
    cuda.synchronize()
    assert_close(to_host(out), reference(A, x), np.float64)
    with pytest.raises(TypeError, match="out must have dtype float64; got float32"):
        op.matvec(to_device(x), out=full_of_nan(A.shape[0], np.float32))
    x = random_vector(rng, A.shape[1], dtype)
    assert to_host(op @ to_device(x)).dtype == dtype


@pytest.mark.parametrize("library", ["cupy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_device_columns_and_transposed_products(kernel, dtype, library, rng):
    """A 2-D CuPy array or PyTorch tensor multiplies in one multi-vector product on the device
    (``@``, ``dot``, ``matmat``; k = 3, 1 and 0 columns; more in ``test_spmm.py``), and
    ``rmatvec``/``rmatmat`` take device arrays too, each giving SciPy's result as the same kind
    of array."""
    to_device, _, to_host, array_type = LIBRARIES[library]()
    A = random_matrix(300, 200, 0.05, 3).astype(dtype)
    op = prepare_gpu(A, kernel)
    if op is None:
        return
    for k in (3, 1, 0):
        X = rng.standard_normal((A.shape[1], k)).astype(dtype)
        for product in (op @ to_device(X), op.dot(to_device(X)), op.matmat(to_device(X))):
            assert isinstance(product, array_type) and tuple(product.shape) == (A.shape[0], k)
            assert_close(to_host(product), A.astype(np.float64) @ X.astype(np.float64), dtype)
    z = random_vector(rng, A.shape[0], dtype)
    y = op.rmatvec(to_device(z))
    assert isinstance(y, array_type)
    assert_close(to_host(y), reference(A.T.tocsr(), z), dtype)
    Z = rng.standard_normal((A.shape[0], 2)).astype(dtype)
    Y = op.rmatmat(to_device(Z))
    assert isinstance(Y, array_type) and tuple(Y.shape) == (A.shape[1], 2)
    assert_close(to_host(Y), A.T.astype(np.float64) @ Z.astype(np.float64), dtype)


def test_an_operator_on_the_gpu_refuses_to_be_pickled():
    import pickle

    op = autospmv.prepare(random_matrix(6, 4, 0.5, 1), kernel="csr_scalar", device="cuda")
    with pytest.raises(TypeError, match="an operator on the GPU cannot be pickled"):
        pickle.dumps(op)


LARGE_NNZ = 200_000


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_large_random_matrix(kernel, dtype, rng):
    A = random_matrix(40_000, 30_000, LARGE_NNZ / (40_000 * 30_000), 99).astype(dtype)
    op = prepare_gpu(A, kernel)
    if op is None:
        return
    x = random_vector(rng, A.shape[1], dtype)
    assert_close(op @ x, reference(A, x), dtype)
    x_device = cuda.to_device(x)
    assert_close((op @ x_device).copy_to_host(), reference(A, x), dtype)


def test_bench_times_cusparse_as_a_row_of_its_table(capsys, tmp_path):
    """``autospmv bench`` on the GPU: cuSPARSE through CuPy is a row of the kernels' table,
    timed by the same Bench, and the chosen kernel is compared with it."""
    import scipy.sparse as sp

    from autospmv.__main__ import main

    pytest.importorskip("cupy")
    path = tmp_path / "matrix.npz"
    sp.save_npz(path, random_matrix(3000, 2000, 0.01, 4))
    assert main(["bench", str(path), "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert f"  {'cuSPARSE':11s} " in out and " µs per call" in out
    assert "× cuSPARSE's speed" in out


def test_automatic_device_is_cuda():
    op = autospmv.prepare(random_matrix(30, 20, 0.2, 1))
    assert op.device == "cuda"


# --- device-vector errors -----------------------------------------------------------------------

@pytest.fixture
def op():
    return autospmv.prepare(random_matrix(6, 4, 0.5, 1), kernel="csr_scalar", device="cuda")


def test_rejects_device_x_of_wrong_shape(op):
    with pytest.raises(ValueError, match=r"x must have shape \(4,\); got \(5,\)"):
        op @ cuda.to_device(np.ones(5))
    with pytest.raises(ValueError, match=r"x must have shape \(4,\); got \(4, 1\)"):
        op.matvec(cuda.to_device(np.ones((4, 1))))


def test_rejects_device_x_of_wrong_dtype(op):
    with pytest.raises(TypeError, match="x must have dtype float32 or float64; got int32"):
        op @ cuda.to_device(np.ones(4, dtype=np.int32))


def test_rejects_non_contiguous_device_x(op):
    with pytest.raises(ValueError, match="x must be contiguous"):
        op @ cuda.to_device(np.ones(8))[::2]


def test_rejects_device_out_of_wrong_shape_or_dtype(op):
    x = cuda.to_device(np.ones(4))
    with pytest.raises(ValueError, match=r"out must have shape \(6,\); got \(5,\)"):
        op.matvec(x, out=cuda.device_array(5))
    with pytest.raises(TypeError, match="out must have dtype float64; got float32"):
        op.matvec(x, out=cuda.device_array(6, dtype=np.float32))


def test_rejects_host_out_for_device_x(op):
    with pytest.raises(TypeError, match="out must be a CUDA device array like x; got ndarray"):
        op.matvec(cuda.to_device(np.ones(4)), out=np.empty(6))
