"""Krylov solvers that run where the data is: one task per rank runs the whole iteration.

Each solver has two halves: a *rank function* (``cg_on``, ``bicgstab_on``) that runs on every
rank at once through :meth:`DistributedOperator.map_ranks` (products through
:meth:`Rank.matvec`, dots as all-reduces, the vector updates on the rank's chunks through
:mod:`._kernels`), and a client wrapper (:func:`cg`, :func:`bicgstab`) that scatters a NumPy
right-hand side when given one and returns x in the kind b came in. The rank functions follow
SciPy's ``scipy.sparse.linalg.cg`` and ``bicgstab`` step for step (same tolerances, same tests,
same order of updates), so they take the same number of iterations up to rounding; the dots'
partial sums are added in another order, which is the only difference.

A rank function needs only ``matvec``, ``dot``, ``dots``, ``norm`` and ``xp`` of its rank, so
:class:`LocalRank` runs the same code on one device without Dask (for comparisons such as
``benchmarks/distributed_scaling.py``).
"""

from __future__ import annotations

import operator as _op

import numpy as np

from ._kernels import axpy, xpay
from ._vector import DistributedVector


def _tolerance(bnrm2, rtol, atol):
    return max(float(atol), float(rtol) * float(bnrm2))


def _start(rank, b, x0):
    """``(x, r)`` from x0 (None: zeros), as SciPy starts."""
    xp = rank.xp
    if x0 is None:
        return xp.zeros_like(b), b.copy()
    x = x0.astype(b.dtype, copy=True)
    nonzero = rank.dot(xp.abs(x), xp.ones_like(x)) > 0  # x.any() over all ranks
    return x, (b - rank.matvec(x) if nonzero else b.copy())


def cg_on(rank, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter):
    """SciPy's cg on one rank; ``(x chunk, info, iterations)``, the iterations counted as
    SciPy's callback would be called."""
    xp = rank.xp
    bnrm2 = rank.norm(b)
    tol = _tolerance(bnrm2, rtol, atol)
    if bnrm2 == 0:
        return b.copy(), 0, 0
    x, r = _start(rank, b, x0)
    p, rho_prev = None, None
    for iteration in range(maxiter):
        rho = rank.dot(r, r)
        if np.sqrt(rho) < tol:
            return x, 0, iteration
        if iteration > 0:
            xpay(xp, r, rho / rho_prev, p)
        else:
            p = r.copy()
        q = rank.matvec(p)
        alpha = rho / rank.dot(p, q)
        axpy(xp, alpha, p, x)
        axpy(xp, -alpha, q, r)
        rho_prev = rho
    return x, maxiter, maxiter


def bicgstab_on(rank, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter):
    """SciPy's bicgstab on one rank; ``(x chunk, info, iterations)``."""
    xp = rank.xp
    bnrm2 = rank.norm(b)
    tol = _tolerance(bnrm2, rtol, atol)
    if bnrm2 == 0:
        return b.copy(), 0, 0
    rhotol = np.finfo(b.dtype).eps ** 2
    omegatol = rhotol
    x, r = _start(rank, b, x0)
    rtilde = r.copy()
    rho_prev = omega = alpha = p = v = None
    for iteration in range(maxiter):
        if rank.norm(r) < tol:
            return x, 0, iteration
        rho = rank.dot(rtilde, r)
        if abs(rho) < rhotol:
            return x, -10, iteration
        if iteration > 0:
            if abs(omega) < omegatol:
                return x, -11, iteration
            beta = (rho / rho_prev) * (alpha / omega)
            axpy(xp, -omega, v, p)
            xpay(xp, r, beta, p)
        else:
            p = r.copy()
        v = rank.matvec(p)
        rv = rank.dot(rtilde, v)
        if rv == 0:
            return x, -11, iteration
        alpha = rho / rv
        axpy(xp, -alpha, v, r)
        s = r  # SciPy's s is a copy of r, read before r changes again: r serves as s
        if rank.norm(s) < tol:
            axpy(xp, alpha, p, x)
            return x, 0, iteration  # SciPy returns here before its callback
        t = rank.matvec(s)
        ts, tt = rank.dots((t, s), (t, t))
        omega = ts / tt
        axpy(xp, alpha, p, x)
        axpy(xp, omega, s, x)
        axpy(xp, -omega, t, r)
        rho_prev = rho
    return x, maxiter, maxiter


class LocalRank:
    """One device without Dask, seen as a rank: an :class:`autospmv.SpMVOperator` and its
    vectors (CuPy on a GPU, NumPy on the CPU), for running the rank functions in process."""

    def __init__(self, op):
        self.op = op
        self.device = op.device

    @property
    def xp(self):
        if self.device == "cuda":
            import cupy

            return cupy
        return np

    def matvec(self, x):
        return self.op.matvec(x)

    def dot(self, a, b):
        return float(self.xp.dot(a, b))

    def dots(self, *pairs):
        return [self.dot(a, b) for a, b in pairs]

    def norm(self, a):
        return float(np.sqrt(self.dot(a, a)))

    def synchronize(self):
        if self.device == "cuda":
            import cupy

            cupy.cuda.get_current_stream().synchronize()


def _solve(method, op, b, x0, rtol, atol, maxiter):
    """Run ``method`` (a rank function) on all ranks; ``(x, info)`` with x of b's kind, and
    ``op.last_solve = {"iterations", "info"}``."""
    m, n = op.shape
    if m != n:
        raise ValueError(f"the solvers need a square operator; this one is {m}x{n}")
    given = b
    if not isinstance(b, DistributedVector):
        b = op.vector(b, side="rows", dtype=np.result_type(op.dtype, _dtype_of(b)))
    elif b.layout != op.row_layout:
        raise ValueError("b is cut differently from the operator's rows; make it with "
                         "op.vector(b, side='rows')")
    if x0 is not None and not isinstance(x0, DistributedVector):
        x0 = op.vector(x0, side="columns", dtype=b.dtype)
    elif x0 is not None and x0.layout != op.col_layout:
        raise ValueError("x0 is cut differently from the operator's columns; make it with "
                         "op.vector(x0)")
    maxiter = n * 10 if maxiter is None else int(maxiter)
    vectors = (b,) if x0 is None else (b, x0)
    results = op.map_ranks(_solve_on_rank, *vectors, method=method, rtol=rtol, atol=atol,
                           maxiter=maxiter)
    client = op.client
    chunks = [client.submit(_op.itemgetter(0), result, workers=[part.worker], pure=False)
              for part, result in zip(op.parts, results)]
    _, info, iterations = client.submit(_summary, results[0], workers=[op.parts[0].worker],
                                        pure=False).result()
    op.last_solve = {"iterations": int(iterations), "info": int(info)}
    x = DistributedVector(client, op.col_layout, chunks, b.dtype)
    if isinstance(given, DistributedVector):
        return x, int(info)
    if type(given).__module__.startswith("dask"):
        return x.to_dask(), int(info)
    return x.gather(), int(info)


def _solve_on_rank(rank, b, x0=None, *, method, **kwargs):
    solver = {"cg": cg_on, "bicgstab": bicgstab_on}[method]
    return solver(rank, b, x0, **kwargs)


def _summary(result):
    return None, result[1], result[2]


def _dtype_of(b):
    dtype = getattr(b, "dtype", None)
    return np.asarray(b).dtype if dtype is None else dtype


def cg(op, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None):
    """Solve ``A x = b`` by conjugate gradients on the workers (A symmetric positive
    definite), as ``scipy.sparse.linalg.cg`` does; ``(x, info)``.

    ``b`` (and ``x0``) may be a :class:`DistributedVector` (x comes back as one, on the
    workers), a dask array (x is a dask array) or a NumPy or CuPy vector (x is NumPy).
    ``info`` is SciPy's: 0 converged, else the iterations run. The iteration count is in
    ``op.last_solve["iterations"]``.
    """
    return _solve("cg", op, b, x0, rtol, atol, maxiter)


def bicgstab(op, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None):
    """Solve ``A x = b`` by BiCGSTAB on the workers (any nonsingular A), as
    ``scipy.sparse.linalg.bicgstab`` does; ``(x, info)`` as :func:`cg` (info < 0: a
    breakdown, as SciPy's)."""
    return _solve("bicgstab", op, b, x0, rtol, atol, maxiter)
