"""The solvers on a real GPU: every method, dtype and preconditioner against the same solve on
the CPU and SciPy's, vectors of CuPy, torch and NumPy, a second solve on the kept workspace and
graph, callbacks, and the operator's product captured in a user's own CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from solver_cases import problems, right_hand_side, scipy_iterations, scipy_solve

pytestmark = pytest.mark.requires_gpu
cupy = pytest.importorskip("cupy")

PROBLEMS = problems(20)
IDS = [f"{method}-{name}" for method, name, _ in PROBLEMS]


def preconditioner(kind, A, dtype):
    if kind == "none":
        return None
    if kind == "jacobi":
        return "jacobi"
    return autospmv.prepare(sp.diags(1.0 / A.diagonal(), format="csr").astype(dtype),
                            device="cuda")


@pytest.mark.parametrize("kind", ["none", "jacobi", "operator"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_every_method_on_the_gpu(method, name, A, dtype, kind):
    if method == "minres" and name == "indefinite" and kind != "none":
        pytest.skip("a Jacobi preconditioner of an indefinite matrix is indefinite")
    Ad = A.astype(dtype)
    b = right_hand_side(A.shape[0]).astype(dtype)
    rtol = 1e-8 if dtype == np.float64 else 1e-4
    gpu = autospmv.prepare(Ad, device="cuda")
    x, info = getattr(autospmv, method)(gpu, cupy.asarray(b), rtol=rtol,
                                        M=preconditioner(kind, A, dtype))
    assert isinstance(x, cupy.ndarray) and x.dtype == dtype and info == 0
    cpu = autospmv.prepare(Ad, device="cpu")
    x_cpu, info_cpu = getattr(autospmv, method)(cpu, b, rtol=rtol,
                                                M=None if kind == "none" else "jacobi")
    residual = np.linalg.norm(A @ cupy.asnumpy(x).astype(np.float64) - b)
    residual_cpu = np.linalg.norm(A @ x_cpu.astype(np.float64) - b)
    assert residual <= 2 * residual_cpu + 1e-6 * np.linalg.norm(b)
    if dtype == np.float64:
        # MINRES on an indefinite matrix stops on a slow plateau of its residual estimate,
        # where the order of the partial sums (the GPU's differs from the CPU's and NumPy's)
        # moves the stopping iteration by a few; everywhere else the counts are equal.
        slack = 0.03 if name == "indefinite" else 0.0
        scipy_count = scipy_iterations(method, A, b, rtol=rtol, M=None if kind == "none" else
                                       sp.diags(1.0 / A.diagonal()))
        for count in (cpu.last_solve["iterations"], scipy_count):
            assert abs(gpu.last_solve["iterations"] - count) <= slack * count


@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_the_kept_workspace_and_graph_give_the_same_solve(method, name, A):
    op = autospmv.prepare(A, device="cuda")
    b = cupy.asarray(right_hand_side(A.shape[0]))
    first, _ = getattr(autospmv, method)(op, b, rtol=1e-10)
    iterations = op.last_solve["iterations"]
    second, _ = getattr(autospmv, method)(op, b, rtol=1e-10)
    assert op.last_solve["iterations"] == iterations
    assert cupy.array_equal(first, second)
    third, _ = getattr(autospmv, method)(op, 2 * b, rtol=1e-10)
    cupy.testing.assert_allclose(third, 2 * first, rtol=1e-6)


@pytest.mark.parametrize("kernel", ["csr_scalar", "ell", "jds", "hyb"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_the_product_that_forms_its_dot(kernel, dtype):
    """The kernels that own whole rows form x · y as they write y: y is the plain product's,
    bit for bit, the sum NumPy's to rounding; cg on them (p · Ap from the product) takes SciPy's
    iterations, a second solve on the kept graph the same, and their x agrees with the CPU's."""
    A = problems(70)[0][2].astype(dtype)  # enough rows of five for hyb's ELL part to take all
    op = autospmv.prepare(A, kernel=kernel, device="cuda")
    sums = cupy.zeros(3)
    run = op.product_with_dot(dtype, sums, 1)
    assert run is not None
    x = cupy.asarray(right_hand_side(A.shape[0], seed=1).astype(dtype))
    y = cupy.empty_like(x)
    run(x.data.ptr, y.data.ptr, cupy.cuda.get_current_stream().ptr)
    assert cupy.array_equal(y, op @ x)
    expected = float(cupy.dot(x.astype(np.float64), y.astype(np.float64)))
    assert abs(float(sums[1]) - expected) <= 1e-13 * abs(expected)
    assert float(sums[0]) == float(sums[2]) == 0
    b = right_hand_side(A.shape[0]).astype(dtype)
    rtol = 1e-8 if dtype == np.float64 else 1e-4
    first, info = autospmv.cg(op, cupy.asarray(b), rtol=rtol)
    iterations = op.last_solve["iterations"]
    second, _ = autospmv.cg(op, cupy.asarray(b), rtol=rtol)
    assert info == 0 and op.last_solve["iterations"] == iterations
    assert cupy.array_equal(first, second)
    cpu = autospmv.prepare(A, device="cpu")
    x_cpu, _ = autospmv.cg(cpu, b, rtol=rtol)
    if dtype == np.float64:
        assert iterations == cpu.last_solve["iterations"] == scipy_iterations("cg", A, b,
                                                                              rtol=rtol)
        np.testing.assert_allclose(cupy.asnumpy(first), x_cpu, rtol=1e-10)


@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_callbacks_and_vector_kinds(method, name, A):
    torch = pytest.importorskip("torch")
    b = right_hand_side(A.shape[0])
    seen = []
    x, info = getattr(autospmv, method)(autospmv.prepare(A, device="cuda"),
                                        torch.from_numpy(b).cuda(), rtol=1e-6,
                                        callback=lambda v: seen.append(v))
    assert isinstance(x, torch.Tensor) and x.is_cuda and info == 0
    assert all(isinstance(v, torch.Tensor) for v in seen)
    assert len(seen) == scipy_solve(method, A, b, rtol=1e-6)[2]
    x_host, _ = getattr(autospmv, method)(autospmv.prepare(A, device="cuda"), b, rtol=1e-6)
    assert isinstance(x_host, np.ndarray)
    np.testing.assert_allclose(x_host, x.cpu().numpy(), rtol=1e-8, atol=1e-12)


def test_a_general_preconditioner_runs_eagerly():
    A = problems(10)[0][2]
    b = right_hand_side(A.shape[0])
    M = sp.linalg.aslinearoperator(sp.diags(1.0 / A.diagonal()))
    x, info = autospmv.cg(autospmv.prepare(A, device="cuda"), cupy.asarray(b), rtol=1e-8, M=M)
    x_ref, info_ref, _ = scipy_solve("cg", A, b, rtol=1e-8, M=M)
    assert info == info_ref == 0
    np.testing.assert_allclose(cupy.asnumpy(x), x_ref, rtol=1e-6)


@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_the_product_in_a_users_cuda_graph(kernel):
    """Power iteration with the operator's product captured by CuPy stream capture."""
    A = problems(16)[0][2]
    op = autospmv.prepare(A, kernel=kernel, device="cuda")
    x = cupy.asarray(right_hand_side(A.shape[0]))
    y = cupy.empty_like(x)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        op.matvec(x, out=y)  # the first call checks and loads outside the capture
        stream.begin_capture()
        for _ in range(5):
            op.matvec(x, out=y)
            x[...] = y / cupy.linalg.norm(y)
        graph = stream.end_capture()
        expected = right_hand_side(A.shape[0])
        for _ in range(2 * 5):
            expected = A @ expected
            expected /= np.linalg.norm(expected)
        x[...] = cupy.asarray(right_hand_side(A.shape[0]))
        graph.launch(stream)
        graph.launch(stream)
        stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(x), expected, rtol=1e-10, atol=1e-12)
