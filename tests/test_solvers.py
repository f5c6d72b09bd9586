"""autospmv.cg, bicgstab, gmres and minres on the CPU against SciPy's solvers: the same
iterates, iteration counts, info and callbacks, and SciPy's argument handling."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import autospmv
from solver_cases import (convection, indefinite, laplacian, problems, right_hand_side,
                          scipy_iterations, scipy_solve)

PROBLEMS = problems(12)
IDS = [f"{method}-{name}" for method, name, _ in PROBLEMS]
PRECONDITIONERS = ["none", "jacobi", "operator", "linear_operator"]


def preconditioner(kind, A, device="cpu"):
    """autospmv's M and SciPy's M of the same Jacobi preconditioner (or None)."""
    if kind == "none":
        return None, None
    inverse = sp.diags(1.0 / A.diagonal(), format="csr")
    if kind == "jacobi":
        return "jacobi", inverse
    if kind == "operator":
        return autospmv.prepare(inverse, device=device), inverse
    return spla.aslinearoperator(inverse), inverse


@pytest.mark.parametrize("kind", PRECONDITIONERS)
@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_scipys_iterates_in_float64(method, name, A, kind):
    if method == "minres" and name == "indefinite" and kind != "none":
        pytest.skip("a Jacobi preconditioner of an indefinite matrix is indefinite")
    b = right_hand_side(A.shape[0])
    M, M_scipy = preconditioner(kind, A)
    op = autospmv.prepare(A, device="cpu")
    x, info = getattr(autospmv, method)(op, b, rtol=1e-8, M=M)
    x_ref, info_ref, _ = scipy_solve(method, A, b, rtol=1e-8, M=M_scipy)
    assert info == info_ref == 0
    assert op.last_solve["iterations"] == scipy_iterations(method, A, b, rtol=1e-8, M=M_scipy)
    assert isinstance(x, np.ndarray) and x.dtype == np.float64
    residual, residual_ref = (np.linalg.norm(A @ v - b) for v in (x, x_ref))
    assert residual <= 2 * residual_ref + 1e-14 * np.linalg.norm(b)
    assert np.linalg.norm(x - x_ref) <= 1e-6 * np.linalg.norm(x_ref)


@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_callbacks_as_scipy_calls_them(method, name, A):
    b = right_hand_side(A.shape[0], seed=1)
    seen = []
    x, info = getattr(autospmv, method)(A, b, rtol=1e-6, callback=lambda v: seen.append(v.copy()))
    _, _, calls = scipy_solve(method, A, b, rtol=1e-6)
    assert len(seen) == calls
    assert np.array_equal(seen[-1], x) or method == "bicgstab"


@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_float32_problems_stay_float32(method, name, A):
    A32 = A.astype(np.float32)
    b = right_hand_side(A.shape[0]).astype(np.float32)
    x, info = getattr(autospmv, method)(autospmv.prepare(A32, device="cpu"), b, rtol=1e-4)
    x_ref, info_ref, _ = scipy_solve(method, A32, b, rtol=1e-4)
    assert info == info_ref == 0 and x.dtype == np.float32
    residual, residual_ref = (np.linalg.norm(A @ v - b) for v in (x, x_ref))
    assert residual <= 2 * residual_ref + 1e-5 * np.linalg.norm(b)


def test_a_float32_matrix_with_a_float64_b_solves_in_float64():
    A = laplacian(8).astype(np.float32)
    x, info = autospmv.cg(autospmv.prepare(A, device="cpu"), right_hand_side(64), rtol=1e-10)
    assert info == 0 and x.dtype == np.float64


@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_the_iteration_limit_gives_scipys_info(method, name, A):
    b = right_hand_side(A.shape[0])
    x, info = getattr(autospmv, method)(A, b, rtol=1e-12, maxiter=3)
    x_ref, info_ref, _ = scipy_solve(method, A, b, rtol=1e-12, maxiter=3)
    assert info == info_ref == 3
    assert np.linalg.norm(x - x_ref) <= 1e-10 * np.linalg.norm(x_ref)


@pytest.mark.parametrize("method, name, A", PROBLEMS, ids=IDS)
def test_a_starting_guess(method, name, A):
    b = right_hand_side(A.shape[0])
    x0 = right_hand_side(A.shape[0], seed=5)
    x, info = getattr(autospmv, method)(A, b, x0=x0, rtol=1e-8)
    x_ref, info_ref, _ = scipy_solve(method, A, b, x0=x0, rtol=1e-8)
    assert info == info_ref == 0
    assert np.linalg.norm(x - x_ref) <= 1e-6 * np.linalg.norm(x_ref)


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres", "minres"])
def test_a_zero_right_hand_side_returns_zeros(method):
    x, info = getattr(autospmv, method)(laplacian(5), np.zeros(25))
    assert info == 0 and np.array_equal(x, np.zeros(25))


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres", "minres"])
def test_an_empty_system(method):
    x, info = getattr(autospmv, method)(sp.csr_matrix((0, 0)), np.zeros(0))
    assert info == 0 and x.shape == (0,)


def test_maxiter_zero_returns_the_start_as_scipy_does():
    x0 = np.ones(25)
    x, info = autospmv.cg(laplacian(5), right_hand_side(25), x0=x0, maxiter=0)
    assert info == 0 and np.array_equal(x, x0)


def test_gmres_restart_and_cycles():
    A = convection(12)
    b = right_hand_side(A.shape[0])
    op = autospmv.prepare(A, device="cpu")
    x, info = autospmv.gmres(op, b, rtol=1e-8, restart=5, maxiter=500)
    x_ref, info_ref, cycles = scipy_solve("gmres", A, b, rtol=1e-8, restart=5, maxiter=500)
    assert info == info_ref == 0
    assert op.last_solve["iterations"] == scipy_iterations("gmres", A, b, rtol=1e-8, restart=5,
                                                           maxiter=500)
    with pytest.raises(ValueError, match="restart"):
        autospmv.gmres(op, b, restart=0)


def test_minres_refuses_an_indefinite_preconditioner_as_scipy_does():
    A = (laplacian(6) - sp.diags(np.arange(36) % 2 * 8.0)).tocsr()  # half the diagonal < 0
    b = np.zeros(36)
    b[1] = 1.0  # r·M⁻¹r = 1 / A[1, 1] < 0
    with pytest.raises(ValueError, match="indefinite"):
        spla.minres(A, b, M=sp.diags(1.0 / A.diagonal()))
    with pytest.raises(ValueError, match="indefinite"):
        autospmv.minres(A, b, M="jacobi")


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), None, "1e-5"])
def test_tolerances_are_checked(bad):
    with pytest.raises(ValueError, match="rtol"):
        autospmv.cg(laplacian(4), np.ones(16), rtol=bad)
    with pytest.raises(ValueError, match="atol"):
        autospmv.cg(laplacian(4), np.ones(16), atol=bad)


def test_shapes_dtypes_and_preconditioners_are_checked():
    A = laplacian(4)
    with pytest.raises(ValueError, match="square"):
        autospmv.cg(sp.random(4, 5, density=0.5, format="csr"), np.ones(4))
    with pytest.raises(ValueError, match="length 15"):
        autospmv.cg(A, np.ones(15))
    with pytest.raises(ValueError, match="x0 has length"):
        autospmv.cg(A, np.ones(16), x0=np.ones(3))
    with pytest.raises(TypeError, match="real"):
        autospmv.cg(A, np.ones(16, dtype=complex))
    with pytest.raises(TypeError, match="longdouble|float128|float64"):
        autospmv.cg(A, np.ones(16, dtype=np.longdouble))
    with pytest.raises(ValueError, match="nonzero diagonal"):
        autospmv.cg(A - sp.diags(A.diagonal()), np.ones(16), M="jacobi")
    with pytest.raises(ValueError, match="'jacobi'"):
        autospmv.cg(A, np.ones(16), M="ilu")
    with pytest.raises(ValueError, match="M must be 16x16"):
        autospmv.cg(A, np.ones(16), M=sp.identity(5))
    with pytest.raises(TypeError, match="maxiter"):
        autospmv.cg(A, np.ones(16), maxiter=2.5)
    with pytest.raises(ValueError, match="maxiter"):
        autospmv.cg(A, np.ones(16), maxiter=-1)


def test_a_matrix_is_prepared_with_the_solves_workload():
    A = laplacian(10)
    x, info = autospmv.cg(A, right_hand_side(100), rtol=1e-10)
    assert info == 0 and np.linalg.norm(A @ x - right_hand_side(100)) <= 1e-9 * 10


def test_the_operator_reports_its_last_solve():
    op = autospmv.prepare(laplacian(6), device="cpu")
    autospmv.cg(op, right_hand_side(36))
    assert op.last_solve["method"] == "cg" and op.last_solve["device"] == "cpu"
    assert op.last_solve["info"] == 0 and op.last_solve["iterations"] > 0


def test_operator_diagonal():
    A = sp.random(30, 20, density=0.3, format="csr", random_state=2) + sp.eye(30, 20)
    for kernel in autospmv.KERNELS:
        np.testing.assert_array_equal(autospmv.prepare(A, kernel=kernel, device="cpu")
                                      .diagonal(), A.diagonal())
