"""Where a solve runs: the workspace of its vectors and scalars, and the calls its iteration is
written in (:meth:`step`, :meth:`product`, :meth:`precondition`).

A method's iteration (:mod:`.cg`, :mod:`.bicgstab`, :mod:`.gmres`, :mod:`.minres`) is a short
sequence of those calls, written once. :class:`CpuMachine` runs each call at once (numba loops
on the host). :class:`CudaMachine` queues each call on its stream, where the driver
(:mod:`.driver`) captures whole iterations once as a CUDA graph and replays them: the scalars
and the tests stay on the device, and the host reads the flags once per replay.

The workspace is one array ``W`` with a row per named vector (row ``k`` starts at offset
``k * ld``), ``s`` (float64 scalars) and ``f`` (int64 flags, :mod:`.scalars`), allocated once per
solve. A method names its vectors by their offsets (:meth:`Machine.row`, :meth:`Machine.offset`):
the steps' bodies read element i of a vector at ``W[offset + i]``.
"""

from __future__ import annotations

import numpy as np

from .dual import dual
from .bodies import dot
from .scalars import FLAGS, KEPT, STATE, STOPPED, keep
from . import steps
from .steps import (BLOCK, PARALLEL_FROM, MultiStep, Step, cpu_multi_step, cpu_step,
                    cuda_multi_step, cuda_step)

KEPT_DOT = Step(dot, keep)
"""The product of two vectors into ``s[KEPT]`` (:meth:`Machine.product` with ``keep_dot``)."""

NO_JACOBI = np.ones(1)
"""``D`` of a solve without a Jacobi preconditioner (one element: see
:func:`.bodies.preconditioned`)."""


class Machine:
    """What both machines share: rows by name, the preconditioner's kind, the solve's
    operator and vectors."""

    captures = False
    simulated = False
    flag_interval = 1
    """Iterations run eagerly between two reads of the flags (:mod:`.driver`)."""

    def __init__(self, op, n: int, dtype, rows: tuple, scalars: int, preconditioner):
        """``preconditioner``: None, ``("jacobi", inverse diagonal)``, ``("product", op)`` for an
        operator whose product can be queued and captured, or ``("call", M)`` for anything with
        ``matvec`` (run eagerly)."""
        self.op = op
        self.n = n
        self.dtype = np.dtype(dtype)
        self.rows = {name: k for k, name in enumerate(rows)}
        kind = preconditioner[0] if preconditioner else None
        self.preconditioner = preconditioner
        self.preconditioner_is_product = kind in ("product", "call")
        self.captures = self.captures and kind != "call"

    def row(self, name: str):
        """The offset of the vector ``name`` in the workspace."""
        return self.offset(self.rows[name])

    def offset(self, k: int) -> int:
        """The offset of the workspace's row ``k``: ``k * ld``."""
        return k * self.ld

    def view(self, row):
        """The vector at offset ``row`` as a vector of length n (a view)."""
        return self._views[row]

    def stopped(self, flags) -> bool:
        return bool(flags[STATE] & STOPPED)

    def product(self, src, dst, keep_dot: bool = False) -> None:
        """The vector at offset ``dst`` = A @ the one at ``src`` (queued on the current stream
        on a GPU); with ``keep_dot``, their product ``src · dst`` in ``s[KEPT]`` too (by a
        step here; :class:`CudaMachine` has the product's kernel form it where it can)."""
        self.op.matvec(self._views[src], out=self._views[dst])
        if keep_dot:
            self.step(KEPT_DOT, src, dst)

    def precondition(self, src, dst) -> None:
        """The vector at offset ``dst`` = M @ the one at ``src`` for an operator M (queued as
        :meth:`product`) or any other M (called now)."""
        kind, M = self.preconditioner
        if kind == "product":
            M.matvec(self._views[src], out=self._views[dst])
        else:
            self._views[dst][...] = self.xp.asarray(M.matvec(self._views[src])).reshape(-1)

    def upload(self, row, vector) -> None:
        self._views[row][...] = self.xp.asarray(vector)

    def result(self, row):
        return self._views[row].copy()

    def set_scalars(self, values: dict) -> None:
        """Set slots of ``s`` (``{slot: value}``; queued on the machine's stream on a GPU,
        nothing read back)."""
        for slot, value in values.items():
            self.s[slot] = value

    def set_flags(self, values: dict) -> None:
        """Set slots of ``f`` (``{slot: value}``), as :meth:`set_scalars`."""
        for slot, value in values.items():
            self.f[slot] = value

    def __enter__(self):
        """The solve's context (nothing but on the GPU, :meth:`CudaMachine.__enter__`)."""
        return self

    def __exit__(self, *exc):
        pass


class CpuMachine(Machine):
    """Runs every call at once on the host: steps as numba loops (on numba's threads for
    vectors of :data:`~.steps.PARALLEL_FROM` elements or more), products by the operator."""

    xp = np

    def __init__(self, op, n, dtype, rows, scalars, preconditioner, workspace_rows=None,
                 partial_sums=2):
        super().__init__(op, n, dtype, rows, scalars, preconditioner)
        self.ld = max(n, 1)
        count = workspace_rows or len(rows)
        self.W = np.zeros(count * self.ld, dtype=self.dtype)
        self.s = np.zeros(scalars, dtype=np.float64)
        self.f = np.zeros(FLAGS, dtype=np.int64)
        self.D = NO_JACOBI.astype(self.dtype)
        if preconditioner and preconditioner[0] == "jacobi":
            self.D = np.ascontiguousarray(preconditioner[1], dtype=self.dtype)
        self._views = {k * self.ld: self.W[k * self.ld:k * self.ld + n] for k in range(count)}
        import numba

        self._parallel = n >= PARALLEL_FROM and numba.get_num_threads() > 1
        self._runs = {}

    def step(self, step, a=0, b=0, c=0, d=0, e=0, g=0, n=None) -> None:
        run = self._runs.get(step)
        if run is None:
            run = self._runs[step] = self._compiled(step)
        run(self.W, self.ld, self.n if n is None else n, self.s, self.f, self.D, a, b, c, d, e, g)

    def _compiled(self, step):
        """What runs ``step`` here: its numba function, or its host function where it has one
        (then its finish after it)."""
        host = step.host
        if host is not None:
            if step.finish is None:
                def run(W, ld, n, s, f, D, a, b, c, d, e, g):
                    if not f[STATE] & step.skip:
                        host(W, ld, n, s, D, a, b, c, d, e, g)
            elif isinstance(step, MultiStep):
                finish = step.finish.on("cpu")

                def run(W, ld, n, s, f, D, a, b, c, d, e, g):
                    if not f[STATE] & step.skip:
                        finish(s, f, host(W, ld, n, s, D, a, b, c, d, e, g))
            else:
                finish = step.finish.on("cpu")

                def run(W, ld, n, s, f, D, a, b, c, d, e, g):
                    if not f[STATE] & step.skip:
                        finish(s, f, *host(W, ld, n, s, D, a, b, c, d, e, g))

            return run
        compiled = cpu_multi_step if isinstance(step, MultiStep) else cpu_step
        return compiled(step, self._parallel)

    def flags(self):
        return self.f

    def scalars(self):
        return self.s



class CudaMachine(Machine):
    """Queues every call on a stream of its own (CuPy): steps as numba-cuda kernels launched
    through :class:`autospmv.kernels.cuda.launch.Launch` (arguments fixed once per solve),
    products by the operator on that stream. Under numba-cuda's simulator the workspace is
    NumPy arrays and the kernels run in the simulator (the products then run on the host)."""

    captures = True

    def __init__(self, op, n, dtype, rows, scalars, preconditioner, workspace_rows=None,
                 partial_sums=2):
        super().__init__(op, n, dtype, rows, scalars, preconditioner)
        from ..kernels.cuda import grid_sum
        from ..kernels.cuda.launch import SIMULATOR

        self.simulated = SIMULATOR
        self.captures = self.captures and not SIMULATOR
        if SIMULATOR:
            self.xp = np
            self.stream = None
            blocks = 4
        else:
            import cupy

            self.xp = cupy
            self.stream = cupy.cuda.Stream(non_blocking=True)
            device = cupy.cuda.Device()
            blocks = grid_sum.BLOCKS_PER_SM * device.attributes["MultiProcessorCount"]
        xp = self.xp
        self.ld = -(-max(n, 1) // 64) * 64  # rows start 512-byte aligned
        count = workspace_rows or len(rows)
        self.grid = max(1, min(-(-n // BLOCK), blocks))
        with self:
            self.W = xp.zeros(count * self.ld, dtype=self.dtype)
            self.s = xp.zeros(scalars, dtype=np.float64)
            self.f = xp.zeros(FLAGS, dtype=np.int64)
            self.D = xp.asarray(NO_JACOBI.astype(self.dtype))
            if preconditioner and preconditioner[0] == "jacobi":
                self.D = xp.zeros(self.ld, dtype=self.dtype)
                self.D[:n] = xp.asarray(preconditioner[1], dtype=self.dtype)
            partials, tickets = grid_sum.workspace(self.grid)
            self.partials = xp.zeros(max(partials, max(2, partial_sums) * self.grid),
                                     dtype=np.float64)
            self.tickets = xp.zeros(tickets, dtype=np.int32)
        self._views = {k * self.ld: self.W[k * self.ld:k * self.ld + n] for k in range(count)}
        self._launches = {}
        self._product_with_dot = None
        """The operator's product that also forms the dot (:meth:`product`), once asked for:
        ``(operator, run or None)``."""

    def reset(self, op) -> None:
        """Ready for another solve with ``op`` (the same matrix): the vectors, scalars and
        flags set back to zeros, on the machine's stream (a captured graph stays valid: it
        refers to the same arrays)."""
        self.op = op
        self.W.fill(0)
        self.s.fill(0)
        self.f.fill(0)

    def __enter__(self):
        """Make the machine's stream current, after the caller's current stream's work (which
        produced b and x0); :meth:`__exit__` orders the caller's stream after the solve."""
        if self.stream is not None:
            import cupy

            self._caller = cupy.cuda.get_current_stream()
            self.stream.wait_event(self._caller.record())
            self.stream.__enter__()
        return self

    def __exit__(self, *exc):
        if self.stream is not None:
            self.stream.__exit__(*exc)
            self._caller.wait_event(self.stream.record())

    def step(self, step, a=0, b=0, c=0, d=0, e=0, g=0, n=None) -> None:
        n = self.n if n is None else n
        key = (step, a, b, c, d, e, g, n)
        fire = self._launches.get(key)
        if fire is None:
            fire = self._launches[key] = self._load(step, (a, b, c, d, e, g), n)
        fire()

    def product(self, src, dst, keep_dot: bool = False) -> None:
        """:meth:`Machine.product`; with ``keep_dot``, one launch where the operator's kernel
        owns whole rows (:meth:`autospmv.SpMVOperator.product_with_dot`): it forms
        ``src · dst`` as it writes dst, in float64, and no step reads the two vectors again."""
        run = self._dot_product() if keep_dot else None
        if run is None:
            super().product(src, dst, keep_dot)
        elif self.simulated:
            run(self._views[src], self._views[dst], 0)
        else:
            run(self._views[src].data.ptr, self._views[dst].data.ptr, self.stream.ptr)

    def _dot_product(self):
        cached = self._product_with_dot
        if cached is None or cached[0] is not self.op:
            cached = (self.op, self.op.product_with_dot(self.dtype, self.s, KEPT))
            self._product_with_dot = cached
        return cached[1]

    def _load(self, step, rows: tuple, n: int):
        from ..kernels.cuda.launch import Launch

        grid = self.grid if n else 1
        args = [self.W, np.int64(self.ld), np.int64(n), self.s, self.f, self.D,
                *(np.int64(r) for r in rows), self.partials, self.tickets]
        if isinstance(step, MultiStep):  # a block per tile of w, at most the step grid
            grid = max(1, min(grid, -(-n // steps.multi_tile(self.W.itemsize))))
            args.append(steps.wide_view(self.W))
        kernel = (cuda_multi_step(step, self.W.itemsize) if isinstance(step, MultiStep)
                  else cuda_step(step))
        launch = Launch(kernel, grid, BLOCK, args, np.float64, overlaps_previous=steps.OVERLAP)
        if self.simulated:
            return lambda: launch.simulate(None, None)
        launch.load(0, 0)
        fire, stream = launch.fire(), self.stream.ptr
        return lambda: fire(0, 0, stream)

    def capture(self, run):
        """``run()`` captured as a CUDA graph on this machine's stream, not yet run."""
        stream = self.stream
        stream.begin_capture()
        try:
            run()
        finally:
            graph = stream.end_capture()
        return graph

    def replay(self, graph) -> None:
        graph.launch(self.stream)

    def flags(self):
        return self.f if self.simulated else self.f.get(stream=self.stream)

    def scalars(self):
        return self.s if self.simulated else self.s.get(stream=self.stream)



class RankMachine:
    """One rank of :mod:`autospmv.distributed`: its chunk of every vector on a machine of its
    device (:class:`CpuMachine` or :class:`CudaMachine`), products through ``rank.matvec``
    (which exchanges the ghost entries), and each step's sums all-reduced over the ranks
    before its finish runs, so every rank runs the same scalar logic on the same totals and
    stops at the same iteration.

    A step with a finish runs as three: the step with a finish that keeps its sums at the end
    of ``s``; the all-reduce of those slots (``rank.comm.allreduce``, in place); the finish on
    the totals (:func:`_finishing`). Nothing is captured; on a GPU the host reads the flags
    every :attr:`flag_interval` iterations (the steps do nothing once the method has stopped)."""

    captures = False
    simulated = False

    def __init__(self, rank, n, dtype, rows, scalars, preconditioner, workspace_rows=None,
                 partial_sums=2):
        if preconditioner is not None:
            raise ValueError("the distributed solvers take no preconditioner")
        self.rank = rank
        self.sums = max(2, partial_sums)
        machine_type = CudaMachine if rank.device == "cuda" else CpuMachine
        self.inner = machine_type(None, n, dtype, rows, scalars + self.sums, None,
                                  workspace_rows=workspace_rows, partial_sums=partial_sums)
        self.flag_interval = 8 if rank.device == "cuda" else 1
        self._totals = self.inner.s[scalars:]

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __enter__(self):
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        self.inner.__exit__(*exc)

    def step(self, step, a=0, b=0, c=0, d=0, e=0, g=0, n=None) -> None:
        if step.finish is None:
            self.inner.step(step, a, b, c, d, e, g, n)
            return
        summing, finishing = _rank_steps(step, self.sums)
        self.inner.step(summing, a, b, c, d, e, g, n)
        self.rank.comm.allreduce(self._totals, self.inner.xp if isinstance(
            self.inner, CudaMachine) else np, out=self._totals)
        self.inner.step(finishing, n=0)

    def product(self, src: int, dst: int, keep_dot: bool = False) -> None:
        """:meth:`Machine.product` through ``rank.matvec``."""
        self.inner.view(dst)[...] = self.rank.matvec(self.inner.view(src))
        if keep_dot:
            self.step(KEPT_DOT, src, dst)


def _keep_two(s, f, sum0, sum1):
    s[s.shape[0] - 2] = sum0
    s[s.shape[0] - 1] = sum1


def _keep_all(s, f, totals):
    for k in range(SUMS):
        s[s.shape[0] - SUMS + k] = totals[k]


def _finish_two(s, f, sum0, sum1):
    FINISH(s, f, s[s.shape[0] - 2], s[s.shape[0] - 1])


def _finish_all(s, f, sum0, sum1):
    FINISH(s, f, s[s.shape[0] - SUMS:])


_RANK_STEPS: dict = {}


def _rank_steps(step, sums: int):
    """``(summing, finishing)`` of a step for :class:`RankMachine`."""
    key = (step, sums)
    if key not in _RANK_STEPS:
        import types

        from .dual import Dual
        from .steps import Step

        def dual_of(template, name, **names):
            function = types.FunctionType(template.__code__,
                                          {**template.__globals__, **names}, name)
            return Dual(function)

        finish = step.finish
        if isinstance(step, MultiStep):
            keep = dual_of(_keep_all, f"keep_{step.sums}", SUMS=step.sums)
            summing = MultiStep(step.body, keep, step.sums, step.skip,
                                combines=step.combines)  # the body's sums
            apply = dual_of(_finish_all, f"all_reduced_{finish.__name__}", FINISH=finish,
                            SUMS=sums)
        else:
            summing = Step(step.body, dual_of(_keep_two, "keep_two"), step.skip)
            apply = dual_of(_finish_two, f"all_reduced_{finish.__name__}", FINISH=finish)
        _RANK_STEPS[key] = (summing, Step(_nothing, apply, step.skip))
    return _RANK_STEPS[key]


@dual
def _nothing(W, ld, i, s, D, a, b, c, d, e, g):
    return 0.0, 0.0
