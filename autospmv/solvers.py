"""Krylov solvers that run where the operator runs: ``cg``, ``bicgstab``, ``gmres``, ``minres``.

Each has SciPy's signature and meaning (``scipy.sparse.linalg.cg`` and the others): the same
iterates, tests and ``info``. ``A`` is an :class:`autospmv.SpMVOperator` or anything
:func:`autospmv.prepare` accepts (prepared then with a workload hint of the solve's expected
products). ``b`` and ``x0`` may be NumPy arrays, CuPy arrays or PyTorch CUDA tensors; ``x``
comes back as the kind of array ``b`` is, in the dtype ``numpy.result_type`` gives for A, b
and x0 (float32 or float64).

On the GPU (an operator on CUDA; CuPy needed) the iteration runs without the host: its scalars
and tests stay in device memory, the vector updates are fused with the dot products they feed
(one pass where SciPy makes two or three), and whole iterations, the operator's product
included, are captured once as a CUDA graph and replayed; the host reads a stop flag once per
replay. On the CPU the same iteration runs as numba loops. ``op.last_solve`` holds the last
solve's ``{"method", "iterations", "info", "device"}``.

``M``, the preconditioner (an approximation of A⁻¹, as in SciPy): None; ``"jacobi"``, the
inverse of A's diagonal, applied inside the fused passes; an :class:`autospmv.SpMVOperator`
(its product is captured in the graph too); or any linear operator, matrix or object with
``matvec``, which is called from the host: the iteration then runs eagerly, one iteration
after another (on the GPU a SciPy operator is given and returns NumPy vectors). A ``callback``
is called as SciPy calls it, with x of b's kind; with one, the iteration also runs eagerly and
waits for the device after each iteration.
"""

from __future__ import annotations

from ._solve.bicgstab import BiCGSTAB
from ._solve.cg import CG
from ._solve.driver import solve
from ._solve.gmres import GMRES
from ._solve.minres import MINRES

__all__ = ["bicgstab", "cg", "gmres", "minres"]


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Solve ``A x = b`` by conjugate gradients (A symmetric positive definite), as
    ``scipy.sparse.linalg.cg`` does.

    Parameters
    ----------
    A : SpMVOperator or sparse matrix
        The matrix, n×n, or an operator of it (:func:`autospmv.prepare`). A matrix is prepared
        with the solve's iterations as the ``products`` hint and ``solver=True``.
    b : array of length n
        The right-hand side: NumPy, CuPy or a PyTorch CUDA tensor.
    x0 : array of length n, optional
        The starting guess (zeros by default).
    rtol, atol : float
        The iteration stops when ``‖b − A x‖ < max(atol, rtol·‖b‖)``.
    maxiter : int, optional
        The most iterations (10·n by default).
    M : None, "jacobi", SpMVOperator or linear operator
        The preconditioner (see :mod:`autospmv.solvers`).
    callback : callable, optional
        Called as ``callback(x)`` after each iteration.

    Returns
    -------
    x : array
        The solution, the kind of array b is.
    info : int
        0 when converged, else the iterations run (SciPy's meaning).

    Raises
    ------
    ValueError
        A, b, x0 or M of mismatched shapes; a negative or non-finite tolerance; M="jacobi"
        with a zero on A's diagonal.
    TypeError
        Complex input, or dtypes other than float32 and float64 (after NumPy's promotion).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50))
    >>> P = sp.kronsum(T, T, format="csr")
    >>> x, info = autospmv.cg(autospmv.prepare(P, device="cpu"), np.ones(P.shape[0]))
    >>> info, bool(np.linalg.norm(P @ x - 1) <= 1e-5 * np.sqrt(P.shape[0]))
    (0, True)
    """
    return solve(CG, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback)


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Solve ``A x = b`` by BiCGSTAB (any nonsingular A), as ``scipy.sparse.linalg.bicgstab``
    does.

    Parameters
    ----------
    A, b, x0, rtol, atol, maxiter, M, callback
        As for :func:`cg`.

    Returns
    -------
    x : array
        The solution, the kind of array b is.
    info : int
        0 when converged, the iterations run when maxiter was reached, -10 or -11 on a
        breakdown (SciPy's meanings).

    Raises
    ------
    ValueError, TypeError
        As for :func:`cg`.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv
    >>> A = sp.diags([-1.0, 3.0, -0.5], [-1, 0, 1], shape=(100, 100), format="csr")
    >>> x, info = autospmv.bicgstab(A, np.ones(100))
    >>> info, bool(np.linalg.norm(A @ x - 1) <= 1e-5 * 10)
    (0, True)
    """
    return solve(BiCGSTAB, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                 callback=callback)


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
          callback=None):
    """Solve ``A x = b`` by restarted GMRES (any nonsingular A), as
    ``scipy.sparse.linalg.gmres`` does with ``callback_type='x'``.

    Parameters
    ----------
    A, b, x0, rtol, atol, M
        As for :func:`cg`.
    restart : int, optional
        Columns of the Krylov basis between restarts (20 by default, at most n).
    maxiter : int, optional
        The most restart cycles (10·n by default), as in SciPy.
    callback : callable, optional
        Called as ``callback(x)`` after each restart cycle.

    Returns
    -------
    x : array
        The solution, the kind of array b is.
    info : int
        0 when converged, else maxiter (SciPy's meaning).

    Raises
    ------
    ValueError, TypeError
        As for :func:`cg`; also a restart below 1.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv
    >>> A = sp.diags([-1.0, 3.0, -0.5], [-1, 0, 1], shape=(100, 100), format="csr")
    >>> x, info = autospmv.gmres(A, np.ones(100), restart=30)
    >>> info, bool(np.linalg.norm(A @ x - 1) <= 1e-5 * 10)
    (0, True)
    """
    return solve(GMRES, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                 callback=callback, options={"restart": restart})


def minres(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Solve ``A x = b`` by MINRES (A symmetric, possibly indefinite), as
    ``scipy.sparse.linalg.minres`` does (without its ``shift``, ``show`` and ``check``).

    Parameters
    ----------
    A, b, x0, rtol, M, callback
        As for :func:`cg`; M must be symmetric positive definite.
    atol : float
        0 (SciPy's minres has no atol): SciPy's tests alone; above 0, the iteration also stops
        when its residual estimate falls to atol.
    maxiter : int, optional
        The most iterations (5·n by default).

    Returns
    -------
    x : array
        The solution, the kind of array b is.
    info : int
        0 when a stopping test passed, maxiter when the limit was reached.

    Raises
    ------
    ValueError
        As for :func:`cg`; also, as SciPy, when A or M turns out not symmetric or M not
        positive definite.
    TypeError
        As for :func:`cg`.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv
    >>> A = sp.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(100, 100), format="csr")
    >>> x, info = autospmv.minres(A, np.ones(100), rtol=1e-10)
    >>> info, bool(np.linalg.norm(A @ x - 1) <= 1e-6)
    (0, True)
    """
    return solve(MINRES, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                 callback=callback)
