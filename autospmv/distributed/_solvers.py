"""Krylov solvers that run where the data is: one task per rank runs the whole iteration.

Each solver has two halves: a *rank function* (``cg_on``, ``bicgstab_on``) that runs on every
rank at once through :meth:`DistributedOperator.map_ranks` (products through
:meth:`Rank.matvec`, dots as all-reduces, the vector updates on the rank's chunks through
:mod:`._kernels`), and a client wrapper (:func:`cg`, :func:`bicgstab`) that scatters a NumPy
right-hand side when given one and returns x in the kind b came in. The rank functions follow
SciPy's ``scipy.sparse.linalg.cg`` and ``bicgstab`` step for step (same tolerances, same tests,
same order of updates), so they take the same number of iterations up to rounding; the dots'
partial sums are added in another order, which is the only difference.

``cg_on`` keeps its scalars (the dots, alpha, beta) in device memory: each dot is all-reduced
into a device slot (:meth:`Rank.sum_dot`), the vector kernels read their coefficients from
there, and the convergence test sets a stop flag on the device that makes every later update a
no-op (:mod:`._kernels`). The host queues iteration after iteration and reads the flag one
iteration late (:class:`StopFlag`), so it never waits for the iteration it has just queued and
the GPU never waits for the host; the iteration after the stopping one is queued and does
nothing. ``bicgstab_on`` reads its scalars on the host (several tests per iteration).

A call from the client is one round of Dask scheduling: the ranks' tasks go to the scheduler in
one message (:mod:`._tasks`), each returns only ``(info, iterations)``, and the client waits for
rank 0's. The solution's chunks stay on the workers, handed over by a second task per rank
(:func:`_solution`) that the client does not wait for.

A rank function needs only ``matvec``, ``dot``, ``dots``, ``sum_dot``, ``norm`` and ``xp`` of
its rank, so :class:`LocalRank` runs the same code on one device without Dask (for comparisons
such as ``benchmarks/distributed_scaling.py``).
"""

from __future__ import annotations

import numpy as np

from ._kernels import axpy, copy_unless, cg_step_unless, stop_below, xpay, xpay_ratio_unless
from ._tasks import on_workers
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


class StopFlag:
    """A solver's stop flag ``[stopped, iteration]`` in device memory (:attr:`device`), read on
    the host one iteration late on a GPU (at once on the CPU).

    After queueing iteration i, :meth:`read` queues a copy of the flag to pinned host memory
    and returns what the copy queued after iteration i - 1 found, waiting for that copy only:
    the GPU has iteration i to work on meanwhile.
    """

    def __init__(self, xp):
        self.device = xp.zeros(2, dtype=np.int64)
        self._on_gpu = xp is not np
        if self._on_gpu:
            import cupy

            self._pinned = cupy.cuda.alloc_pinned_memory(2 * self.device.nbytes)
            self._host = np.ndarray((2, 2), dtype=np.int64, buffer=self._pinned)
            self._copied = [None, None]

    def read(self, iteration: int):
        """The iteration the solver stopped at, as known after ``iteration - 1`` (GPU) or
        ``iteration`` (CPU); None while not stopped."""
        if not self._on_gpu:
            return int(self.device[1]) if self.device[0] else None
        self._queue_copy(iteration % 2)
        return self._take((iteration - 1) % 2) if iteration else None

    def last(self, iteration: int):
        """The iteration the solver stopped at after all queued work up to ``iteration``."""
        if not self._on_gpu:
            return self.read(iteration)
        self._queue_copy(iteration % 2)
        return self._take(iteration % 2)

    def _queue_copy(self, slot):
        import cupy

        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(self._host[slot].ctypes.data, self.device.data.ptr,
                                      self.device.nbytes,
                                      cupy.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        self._copied[slot] = stream.record()

    def _take(self, slot):
        self._copied[slot].synchronize()
        stopped, iteration = self._host[slot]
        return int(iteration) if stopped else None

    def settle(self):
        """Wait for the copies still queued, so the pinned memory can go back to its pool."""
        if self._on_gpu:
            for event in self._copied:
                if event is not None:
                    event.synchronize()


def cg_on(rank, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter):
    """SciPy's cg on one rank; ``(x chunk, info, iterations)``, the iterations counted as
    SciPy's callback would be called. The scalars stay on the device (see the module docs)."""
    xp = rank.xp
    bnrm2 = rank.norm(b)
    tol = _tolerance(bnrm2, rtol, atol)
    if bnrm2 == 0:
        return b.copy(), 0, 0
    x, r = _start(rank, b, x0)
    p = xp.zeros_like(r)
    scalars = xp.zeros(3, dtype=np.float64)  # r·r of even and odd iterations, p·q
    rhos, pq = (scalars[0:1], scalars[1:2]), scalars[2:3]
    flag = StopFlag(xp)
    stop = flag.device
    for iteration in range(maxiter):
        rho, rho_prev = rhos[iteration % 2], rhos[(iteration + 1) % 2]
        rank.sum_dot(r, r, out=rho)
        stop_below(xp, stop, rho, tol, iteration)
        if iteration > 0:
            xpay_ratio_unless(xp, stop, r, rho, rho_prev, p)
        else:
            copy_unless(xp, stop, r, p)
        q = rank.matvec(p)
        rank.sum_dot(p, q, out=pq)
        cg_step_unless(xp, stop, rho, pq, p, q, x, r)
        stopped = flag.read(iteration)
        if stopped is not None:
            break
    else:
        stopped = flag.last(maxiter - 1) if maxiter > 0 else None
    flag.settle()
    return (x, 0, stopped) if stopped is not None else (x, maxiter, maxiter)


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

    def sum_dot(self, a, b, out):
        """``out[0] = a · b`` (float64), on the device, without waiting for it."""
        out[...] = self.xp.dot(a, b)

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
    outcomes = op.map_ranks(_solve_on_rank, *vectors, method=method, rtol=rtol, atol=atol,
                            maxiter=maxiter)
    client = op.client
    chunks = on_workers(client, _solution, op.workers, op._live_ranks(), outcomes)
    op._order_after(chunks)
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
    solver = {"cg": cg_on, "bicgstab": bicgstab_on}[method]
    x, info, iterations = solver(rank, b, x0, **kwargs)
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
