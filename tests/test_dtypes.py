"""SciPy's dtype rules: the product's dtype is ``numpy.result_type(A.dtype, x.dtype)``.

A float32 operator keeps its float32 matrix; with a float64 x every kernel reads the float32
values and accumulates in float64, so the result must meet float64's tolerance against SciPy in
float64 on the same (float32) matrix, where a float32 sum would miss it by orders of magnitude.
A float32 x keeps the float32 product. Every kernel runs every (matrix, x) dtype pair on the CPU
and, with host vectors, on a real GPU (the ``device`` fixture); the CUDA simulator's runs are in
``test_cuda_simulator.py`` and device arrays in ``test_gpu.py``. A vector whose product the
kernels cannot compute in (``numpy.longdouble``) is refused with a TypeError naming the dtype
and the fix, on the CPU and under the simulator (``dtype_simulator_worker.py``), on every
product form.
"""

from __future__ import annotations

import pathlib
import re

import numba
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import autospmv
from matrices import (ALL, TOLERANCE, matrix, poisson2d, prepare_or_refuse, reference,
                      relative_error)

KERNELS = autospmv.KERNELS
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
PAIRS = [(F32, F32), (F32, F64), (F64, F32), (F64, F64)]
PAIR_IDS = ["float32_A-float32_x", "float32_A-float64_x", "float64_A-float32_x",
            "float64_A-float64_x"]
MATRICES = ["empty_5x0", "all_rows_empty_9x11", "row_1x300", "column_300x1",
            "huge_row_among_short_300x3000", "power_law_500", "poisson2d_169", "rect_37x61",
            "half_rows_empty_200x150", "parallel_long_rows_24x40000"]


def assert_product(y, A, x, expected_dtype) -> None:
    """y has ``expected_dtype`` and that dtype's accuracy against SciPy in float64."""
    assert y.dtype == expected_dtype
    error = relative_error(y, reference(A, x))
    assert error <= TOLERANCE[np.dtype(expected_dtype)], f"relative error {error:.3g}"


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("matrix_dtype, x_dtype", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_gives_scipys_dtype_and_accuracy(kernel, matrix_dtype, x_dtype, name,
                                                      device, rng):
    A = matrix(name, matrix_dtype)
    op = prepare_or_refuse(A, kernel, device)
    if op is None:
        return
    expected = np.result_type(matrix_dtype, x_dtype)
    assert op.dtype == matrix_dtype  # the operator's dtype is its matrix's, as SciPy's is
    x = rng.standard_normal(A.shape[1]).astype(x_dtype)
    assert (A @ x).dtype == expected
    assert_product(op @ x, A, x, expected)
    out = np.full(A.shape[0], np.nan, dtype=expected)
    assert op.matvec(x, out=out) is out
    assert_product(out, A, x, expected)
    z = rng.standard_normal(A.shape[0]).astype(x_dtype)
    assert_product(op.rmatvec(z), A.T, z, expected)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_threaded_kernels_accumulate_in_float64_for_a_float64_x(kernel, rng):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here")
    A = matrix("parallel_random_2000x2000", F32)
    op = prepare_or_refuse(A, kernel, "cpu")
    if op is None:
        return
    op = autospmv.prepare(A, kernel=kernel, device="cpu", threads=2)
    assert op.threads == 2
    x = rng.standard_normal(A.shape[1])
    assert_product(op @ x, A, x, F64)
    assert_product(op @ x.astype(F32), A, x.astype(F32), F32)


@pytest.mark.parametrize("x_dtype, expected", [
    (np.int64, F64), (np.int32, F64), (np.int16, F32), (np.uint8, F32), (np.bool_, F32),
    (np.float16, F32), (np.dtype(">f8"), F64),
])
def test_other_real_vectors_follow_numpy(x_dtype, expected):
    """Integer, bool, float16 and big-endian x: SciPy's (NumPy's) result dtype."""
    A = matrix("poisson2d_169", F32)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    x = (np.arange(A.shape[1]) % 3).astype(x_dtype)
    assert (A @ x).dtype == expected
    assert_product(op @ x, A, x, expected)


def test_the_product_forms_scipy_uses_keep_the_dtype(rng):
    """``@``, ``dot``, ``*``, matmat (2-D x), an (n, 1) column, the transpose and the operator
    algebra of LinearOperator all give SciPy's dtype and float64 accuracy for float64 input."""
    A = matrix("power_law_500", F32)
    op = autospmv.prepare(A, device="cpu")
    x = rng.standard_normal(A.shape[1])
    X = rng.standard_normal((A.shape[1], 3))
    for y in (op @ x, op.dot(x), op * x, op.matvec(x.reshape(-1, 1)).ravel()):
        assert_product(y, A, x, F64)
    Y = op @ X
    assert Y.dtype == F64
    assert relative_error(Y, A.astype(F64) @ X) <= TOLERANCE[F64]
    assert_product(op.matmat(X)[:, 1], A, X[:, 1], F64)
    z = rng.standard_normal(A.shape[0])
    assert_product(op.T @ z, A.T, z, F64)
    assert_product(op.H @ z, A.T, z, F64)
    assert_product((2 * op) @ x / 2, A, x, F64)
    assert (op @ x.astype(F32)).dtype == F32


def test_out_must_have_the_products_dtype():
    A = matrix("poisson2d_169", F32)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    with pytest.raises(TypeError, match="out must have dtype float64; got float32"):
        op.matvec(np.ones(A.shape[1]), out=np.empty(A.shape[0], dtype=F32))
    with pytest.raises(TypeError, match="out must have dtype float32; got float64"):
        op.matvec(np.ones(A.shape[1], dtype=F32), out=np.empty(A.shape[0]))


def test_cg_with_a_float32_operator_reaches_scipys_residual():
    """SciPy's solvers work in result_type(A, b): float64 for a float32 matrix and a float64 b.
    The operator then gives the true residual SciPy's own float32 matrix gives."""
    A32 = poisson2d(40).astype(F32)
    b = np.random.default_rng(1).standard_normal(A32.shape[0])
    op = autospmv.prepare(A32, device="cpu")
    A64 = A32.astype(F64)

    def true_residual(x):
        return np.linalg.norm(b - A64 @ x) / np.linalg.norm(b)

    x_scipy, info_scipy = spla.cg(A32, b, rtol=1e-8, maxiter=5000)
    x_op, info_op = spla.cg(op, b, rtol=1e-8, maxiter=5000)
    assert info_scipy == info_op == 0
    assert x_op.dtype == x_scipy.dtype == F64
    assert true_residual(x_op) <= 1e-8
    assert true_residual(x_op) <= 2 * true_residual(x_scipy)


def test_complex_matrices_and_vectors_are_refused_with_the_reason():
    A = matrix("poisson2d_169", F64)
    with pytest.raises(TypeError, match=r"does not support complex matrices \(complex128\): "
                                        r"its kernels are real-valued .*atomic adds"):
        autospmv.prepare(A.astype(np.complex128), device="cpu")
    op = autospmv.prepare(A.astype(F32), device="cpu")
    with pytest.raises(TypeError, match=r"x has complex dtype complex64: .* op @ x.real \+ "
                                        r"1j \* \(op @ x.imag\)"):
        op @ np.ones(A.shape[1], dtype=np.complex64)


def test_a_real_operator_times_complex_parts_matches_scipy(rng):
    """The workaround the refusal names gives SciPy's complex product."""
    A = matrix("power_law_500", F64)
    op = autospmv.prepare(A, device="cpu")
    x = rng.standard_normal(A.shape[1]) + 1j * rng.standard_normal(A.shape[1])
    y = op @ x.real + 1j * (op @ x.imag)
    y_ref = sp.csr_matrix(A) @ x
    assert np.linalg.norm(y - y_ref) <= TOLERANCE[F64] * np.linalg.norm(y_ref)


def test_every_matrix_of_the_family_is_covered():
    """MATRICES above are names of the shared family, so a renamed maker fails here."""
    assert set(MATRICES) <= set(ALL)


LONGDOUBLE_MESSAGE = (r"must have dtype float32 or float64; got float(128|96), which "
                      r"autospmv's kernels do not compute in; convert it first, "
                      r"e\.g\. [xX]\.astype\(numpy\.float64\)")

LONGDOUBLE_FORMS = {
    "matvec": lambda op, x, X, z: op.matvec(x),
    "@": lambda op, x, X, z: op @ x,
    "column": lambda op, x, X, z: op @ x[:, None],
    "dot": lambda op, x, X, z: op.dot(x),
    "out= of its dtype": lambda op, x, X, z: op.matvec(x, out=np.empty(op.shape[0], x.dtype)),
    "out= float64": lambda op, x, X, z: op.matvec(x, out=np.empty(op.shape[0])),
    "matmat": lambda op, x, X, z: op.matmat(X),
    "@ X": lambda op, x, X, z: op @ X,
    "rmatvec": lambda op, x, X, z: op.rmatvec(z),
    "T @": lambda op, x, X, z: op.T @ z,
    "rmatmat": lambda op, x, X, z: op.rmatmat(np.stack([z, z], axis=1)),
}


@pytest.mark.skipif(np.dtype(np.longdouble) == np.float64, reason="longdouble is float64 here")
@pytest.mark.parametrize("matrix_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_longdouble_vectors_are_refused_with_the_fix_on_every_product_form(kernel, matrix_dtype,
                                                                          rng):
    A = sp.random(40, 30, density=0.2, format="csr", random_state=3, dtype=matrix_dtype)
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    x, z = rng.uniform(0.5, 1, 30), rng.uniform(0.5, 1, 40)
    X = rng.uniform(0.5, 1, (30, 3))
    wide = [v.astype(np.longdouble) for v in (x, X, z)]
    for form, call in LONGDOUBLE_FORMS.items():
        with pytest.raises(TypeError, match=LONGDOUBLE_MESSAGE):
            call(op, *wide)
    assert np.allclose(op @ x, A @ x) and np.allclose(op @ X, A @ X)  # still usable


@pytest.mark.skipif(np.dtype(np.longdouble) == np.float64, reason="longdouble is float64 here")
def test_a_longdouble_matrix_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"does not support dtype float(128|96); supported: "
                                        r"float32, float64 .*A\.astype\(numpy\.float64\)"):
        autospmv.prepare(sp.random(10, 10, density=0.3, format="csr").astype(np.longdouble),
                         device="cpu")


@pytest.mark.skipif(np.dtype(np.longdouble) == np.float64, reason="longdouble is float64 here")
def test_longdouble_vectors_are_refused_by_the_simulated_gpu_operators():
    """CUDA operators under numba-cuda's simulator, host and device vectors, every product
    form (``dtype_simulator_worker.py``): refused with the fix, while float64 vectors of the
    same form give SciPy's result."""
    from simulator_run import run_simulator_worker

    results = run_simulator_worker(pathlib.Path(__file__).with_name(
        "dtype_simulator_worker.py"), 600)
    assert len(results) == 2 * 8
    for case, result in results.items():
        assert isinstance(result["control"], float) and result["control"] <= 1e-12, (case, result)
        assert re.fullmatch("TypeError: [xX] " + LONGDOUBLE_MESSAGE, result["refused"]), \
            (case, result)


@pytest.mark.requires_gpu
@pytest.mark.skipif(np.dtype(np.longdouble) == np.float64, reason="longdouble is float64 here")
@pytest.mark.parametrize("matrix_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_longdouble_vectors_are_refused_by_the_gpu_operators(kernel, matrix_dtype, rng):
    """Every kernel's CUDA operator, every product form with host vectors, and with device
    vectors where the device array can be made at all: refused with the fix, while float64
    vectors of the same form give SciPy's result."""
    from numba import cuda
    from product_forms import DEVICE_FORMS, expected_products, to_host

    A = sp.random(40, 30, density=0.2, format="csr", random_state=3, dtype=matrix_dtype)
    op = autospmv.prepare(A, kernel=kernel, device="cuda")
    x, z = rng.uniform(0.5, 1, 30), rng.uniform(0.5, 1, 40)
    X = rng.uniform(0.5, 1, (30, 3))
    wide = [v.astype(np.longdouble) for v in (x, X, z)]
    try:
        cuda.to_device(wide[0])
        device_longdouble = True
    except Exception:  # noqa: BLE001 - numba-cuda has no longdouble device arrays
        device_longdouble = False
    expected = expected_products(A, x, X, z)
    for form, call in DEVICE_FORMS.items():
        if form.startswith("host") or device_longdouble:
            with pytest.raises(TypeError, match=LONGDOUBLE_MESSAGE):
                call(op, *wide)
        assert relative_error(to_host(call(op, x, X, z)), expected[form]) <= 1e-12, form
    with pytest.raises(TypeError, match="out must have dtype float64; got float(128|96)"):
        op.matvec(x, out=np.empty(40, np.longdouble))
