"""Krylov solvers that run where the data is: one task per rank runs the whole iteration.

Each solver has two halves: the iteration on every rank at once through
:meth:`DistributedOperator.map_ranks`, and a client wrapper (:func:`cg`, :func:`bicgstab`,
:func:`gmres`, :func:`minres`) that scatters a NumPy right-hand side when given one and returns
x in the kind b came in. The iteration is the one :func:`autospmv.cg` and the others run on one
device (:func:`autospmv._solve.driver.solve_on_rank`): the same fused steps and scalar logic on
the rank's chunks, products through :meth:`Rank.matvec` (with the ghost exchange), and each
step's sums all-reduced over the ranks before its scalar logic runs, so every rank takes the
same decisions and the iterates are SciPy's up to the order in which the partial sums are
added. Nothing waits for a dot product on the host: on a GPU the host reads the stop flag every
few iterations (the steps of iterations queued after the stop do nothing).

A call from the client is one round of Dask scheduling: the ranks' tasks go to the scheduler in
one message (:mod:`._tasks`), each returns only ``(info, iterations)``, and the client waits for
rank 0's. The solution's chunks stay on the workers, handed over by a second task per rank
(:func:`_solution`) that the client does not wait for.

A rank function needs only ``matvec``, ``norm``, ``comm.allreduce``, ``device`` and ``xp`` of
its rank, so :class:`LocalRank` runs the same code on one device without Dask (for comparisons
such as ``benchmarks/distributed_scaling.py``).
"""

from __future__ import annotations

import numpy as np

from .._solve.bicgstab import BiCGSTAB
from .._solve.cg import CG
from .._solve.driver import METHODS, solve_on_rank
from ._comm import SelfComm
from ._tasks import naming_lost_workers, on_workers
from ._vector import DistributedVector


def cg_on(rank, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter):
    """SciPy's cg on one rank; ``(x chunk, info, iterations)``, the iterations counted as
    SciPy's callback would be called."""
    return solve_on_rank(CG, rank, b, x0, rtol=rtol, atol=atol, maxiter=maxiter,
                         columns=b.shape[0])


def bicgstab_on(rank, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter):
    """SciPy's bicgstab on one rank; ``(x chunk, info, iterations)``."""
    return solve_on_rank(BiCGSTAB, rank, b, x0, rtol=rtol, atol=atol, maxiter=maxiter,
                         columns=b.shape[0])


class LocalRank:
    """One device without Dask, seen as a rank: an :class:`autospmv.SpMVOperator` and its
    vectors (CuPy on a GPU, NumPy on the CPU), for running the rank functions in process."""

    def __init__(self, op):
        self.op = op
        self.device = op.device
        self.comm = SelfComm()
        self.cols = op.shape[1]

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

    def sum_dot(self, a, b, out):
        """``out[0] = a · b`` (float64), on the device, without waiting for it."""
        out[...] = self.xp.dot(a, b)

    def norm(self, a):
        return float(np.sqrt(self.dot(a, a)))

    def synchronize(self):
        if self.device == "cuda":
            import cupy

            cupy.cuda.get_current_stream().synchronize()


def _solve(method, op, b, x0, rtol, atol, maxiter, options=None):
    """Run ``method`` (a name of :data:`autospmv._solve.driver.METHODS`) on all ranks;
    ``(x, info)`` with x of b's kind, and ``op.last_solve = {"iterations", "info"}``."""
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
    maxiter = METHODS[method].default_maxiter(n) if maxiter is None else int(maxiter)
    vectors = (b,) if x0 is None else (b, x0)
    outcomes = op.map_ranks(_solve_on_rank, *vectors, method=method, rtol=rtol, atol=atol,
                            maxiter=maxiter, columns=n, options=options)
    client = op.client
    chunks = on_workers(client, _solution, op.workers, op._live_ranks(), outcomes)
    op._order_after(chunks)
    with naming_lost_workers(client, op.workers):
        info, iterations = outcomes[0].result()
    op.last_solve = {"iterations": int(iterations), "info": int(info)}
    x = DistributedVector(client, op.col_layout, chunks, b.dtype)
    if isinstance(given, DistributedVector):
        return x, int(info)
    if type(given).__module__.startswith("dask"):
        return x.to_dask(), int(info)
    return x.gather(), int(info)


_SOLUTIONS: dict = {}
"""Per worker process: ``{(comm id, rank): x chunk}`` of a rank's last solve, until
:func:`_solution` takes it (the rank's next collective task waits for that)."""


def _solve_on_rank(rank, b, x0=None, *, method, **kwargs):
    """On a rank: run the solver, keep x on the worker, return ``(info, iterations)``."""
    x, info, iterations = solve_on_rank(METHODS[method], rank, b, x0, **kwargs)
    _SOLUTIONS[rank.comm_id, rank.rank] = x
    return info, iterations


def _solution(rank, outcome):
    """On a rank: the x chunk its last solve kept (``outcome``, the solve's result, orders this
    task after it)."""
    return _SOLUTIONS.pop((rank.comm_id, rank.rank))


def _dtype_of(b):
    dtype = getattr(b, "dtype", None)
    return np.asarray(b).dtype if dtype is None else dtype


def cg(op, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None):
    """Solve ``A x = b`` by conjugate gradients on the workers (A symmetric positive
    definite), as ``scipy.sparse.linalg.cg`` does.

    The whole iteration runs on the ranks, its dots all-reduced, so the iterates are SciPy's
    up to the order in which the ranks' partial sums are added. There is no preconditioner
    or callback. The iteration count is in ``op.last_solve["iterations"]``.

    Parameters
    ----------
    op : DistributedOperator
        The operator of A, square (:func:`prepare`).
    b : DistributedVector, dask array, NumPy or CuPy vector of length n
        The right-hand side; a :class:`DistributedVector` must be cut like the operator's
        rows (``op.vector(b, side="rows")``).
    x0 : DistributedVector, dask array, NumPy or CuPy vector of length n, optional
        The starting guess (zeros by default); a :class:`DistributedVector` must be cut like
        the operator's columns (``op.vector(x0)``).
    rtol, atol : float
        The iteration stops when ``‖b − A x‖ < max(atol, rtol·‖b‖)``.
    maxiter : int, optional
        The most iterations (10·n by default).

    Returns
    -------
    x : DistributedVector, dask array or numpy.ndarray
        The solution: for a :class:`DistributedVector` b one, on the workers; for a dask
        array a dask array; for a NumPy or CuPy vector NumPy.
    info : int
        0 when converged, else the iterations run (SciPy's meaning).

    Raises
    ------
    ValueError
        A non-square operator; b or x0 not of length n, or a DistributedVector cut
        differently from the operator's rows (b) or columns (x0); a negative or non-finite
        tolerance; a closed client.
    TypeError
        Complex b or x0, or a dtype the kernels do not compute in.
    RuntimeError
        The operator is closed, or a rank's worker has left the cluster (the message names
        the rank and worker).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv.distributed
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(1000, 1000), format="csr")
    >>> op = autospmv.distributed.prepare(T, client=client, device="cpu")  # doctest: +SKIP
    >>> x, info = autospmv.distributed.cg(op, np.ones(1000), rtol=1e-8)  # doctest: +SKIP
    >>> info, bool(np.allclose(T @ x, 1))  # doctest: +SKIP
    (0, True)
    >>> b = op.vector(np.ones(1000), side="rows")  # doctest: +SKIP
    >>> x, info = autospmv.distributed.cg(op, b)  # doctest: +SKIP
    >>> x  # doctest: +SKIP
    <DistributedVector size=1000 float64 chunks=(500, 500) on cpu>
    """
    return _solve("cg", op, b, x0, rtol, atol, maxiter)


def bicgstab(op, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None):
    """Solve ``A x = b`` by BiCGSTAB on the workers (any nonsingular A), as
    ``scipy.sparse.linalg.bicgstab`` does.

    Parameters
    ----------
    op, b, x0, rtol, atol, maxiter
        As for :func:`cg`; op need not be symmetric.

    Returns
    -------
    x : DistributedVector, dask array or numpy.ndarray
        The solution, as for :func:`cg`.
    info : int
        0 when converged, the iterations run when maxiter was reached, below 0 on a
        breakdown (SciPy's meanings).

    Raises
    ------
    ValueError, TypeError, RuntimeError
        As for :func:`cg`.

    Examples
    --------
    >>> A = sp.diags([-1.0, 3.0, -0.5], [-1, 0, 1], shape=(1000, 1000), format="csr")
    >>> op = autospmv.distributed.prepare(A, client=client, device="cpu")  # doctest: +SKIP
    >>> x, info = autospmv.distributed.bicgstab(op, np.ones(1000))  # doctest: +SKIP
    >>> info, bool(np.linalg.norm(A @ x - 1) <= 1e-5 * np.sqrt(1000))  # doctest: +SKIP
    (0, True)
    """
    return _solve("bicgstab", op, b, x0, rtol, atol, maxiter)


def gmres(op, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None):
    """Solve ``A x = b`` by restarted GMRES on the workers (any nonsingular A), as
    ``scipy.sparse.linalg.gmres`` does.

    Parameters
    ----------
    op, b, x0, rtol, atol
        As for :func:`cg`; op need not be symmetric.
    restart : int, optional
        Columns of the Krylov basis between restarts (20 by default, at most n).
    maxiter : int, optional
        The most restart cycles (10·n by default), as in SciPy.

    Returns
    -------
    x : DistributedVector, dask array or numpy.ndarray
        The solution, as for :func:`cg`.
    info : int
        0 when converged, else maxiter (SciPy's meaning).

    Raises
    ------
    ValueError, TypeError, RuntimeError
        As for :func:`cg`; also a ``restart`` that is not a whole number from 1 to 254.

    Examples
    --------
    >>> A = sp.diags([-1.0, 3.0, -0.5], [-1, 0, 1], shape=(1000, 1000), format="csr")
    >>> op = autospmv.distributed.prepare(A, client=client, device="cpu")  # doctest: +SKIP
    >>> x, info = autospmv.distributed.gmres(op, np.ones(1000), restart=30)  # doctest: +SKIP
    >>> info, bool(np.linalg.norm(A @ x - 1) <= 1e-5 * np.sqrt(1000))  # doctest: +SKIP
    (0, True)
    """
    return _solve("gmres", op, b, x0, rtol, atol, maxiter, {"restart": restart})


def minres(op, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None):
    """Solve ``A x = b`` by MINRES on the workers (A symmetric, possibly indefinite), as
    ``scipy.sparse.linalg.minres`` does.

    Parameters
    ----------
    op, b, x0, rtol, maxiter
        As for :func:`cg`, except that maxiter is 5·n by default.
    atol : float
        0 (SciPy's minres has no atol): SciPy's tests alone; above 0, the iteration also
        stops when its residual estimate falls to atol.

    Returns
    -------
    x : DistributedVector, dask array or numpy.ndarray
        The solution, as for :func:`cg`.
    info : int
        0 when a stopping test passed, maxiter when the limit was reached.

    Raises
    ------
    ValueError
        As for :func:`cg`; also, as SciPy, when A turns out not symmetric.
    TypeError, RuntimeError
        As for :func:`cg`.

    Examples
    --------
    >>> A = sp.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(100, 100), format="csr")
    >>> op = autospmv.distributed.prepare(A, client=client, device="cpu")  # doctest: +SKIP
    >>> x, info = autospmv.distributed.minres(op, np.ones(100), rtol=1e-10)  # doctest: +SKIP
    >>> info, bool(np.linalg.norm(A @ x - 1) <= 1e-6)  # doctest: +SKIP
    (0, True)
    """
    return _solve("minres", op, b, x0, rtol, atol, maxiter)
