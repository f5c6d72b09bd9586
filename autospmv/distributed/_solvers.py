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
from .._solve.driver import solve_on_rank
from .._solve.gmres import GMRES
from .._solve.minres import MINRES
from ._comm import SelfComm
from ._tasks import naming_lost_workers, on_workers
from ._vector import DistributedVector

METHODS = {"cg": CG, "bicgstab": BiCGSTAB, "gmres": GMRES, "minres": MINRES}


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
    """Run ``method`` (a name of :data:`METHODS`) on all ranks; ``(x, info)`` with x of b's
    kind, and ``op.last_solve = {"iterations", "info"}``."""
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


def gmres(op, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None):
    """Solve ``A x = b`` by restarted GMRES on the workers (any nonsingular A), as
    ``scipy.sparse.linalg.gmres`` does (``maxiter`` counts restart cycles; restart 20 by
    default); ``(x, info)`` as :func:`cg`."""
    return _solve("gmres", op, b, x0, rtol, atol, maxiter, {"restart": restart})


def minres(op, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None):
    """Solve ``A x = b`` by MINRES on the workers (A symmetric), as
    ``scipy.sparse.linalg.minres`` does; ``(x, info)`` as :func:`cg`."""
    return _solve("minres", op, b, x0, rtol, atol, maxiter)
