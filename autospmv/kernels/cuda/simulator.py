"""What autospmv adds to numba-cuda's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) so that every
kernel runs unchanged, and quickly, under it. :func:`install` adds all of it.

**Blocks as greenlets.** The simulator runs each CUDA thread of a block as a Python thread it
creates for the block, and a manager that polls them for arrival at a barrier in a loop holding
the GIL: creating the threads and handing the GIL between them take most of a simulated
kernel's time. :func:`install` runs a block's threads as greenlets on the launching thread
instead (:func:`_run_block`), one at a time: each runs until it reaches a barrier or returns,
then the next; when every live thread waits at the barrier, they go on past it. The first turns
go in the order of the threads' indices, and the turns after each barrier in the reverse of the
turns before, so that a thread that reads what another writes without a barrier between them
reads it stale in one direction or the other. A thread that has returned no longer takes part
in barriers, as on a GPU. Threads change only at barriers, so a kernel whose threads wait for
each other outside barriers (none here do) would wait forever.

**Warp shuffles and ballots.** The simulator implements no warp-level primitives. autospmv's
kernels only use them in *warp-uniform* code: every live thread of a block reaches the same
sequence of shuffles and ballots (threads without work carry a zero instead of returning
early). Under that discipline a shuffle or a ballot is a block barrier around an exchange of
values. Lanes outside the warp, or lanes whose thread has already returned, read back the
caller's own value, as ``__shfl_*_sync`` does for out-of-range source lanes; in a ballot they
count as false.

**libdevice's moves of bits**, whose functions are stubs there: between a float64 and its two
32-bit halves, and from 32 bits to a float32, which the float32 Gram-Schmidt passes of
:mod:`autospmv._solve.steps` take from it.

**The CUDA array interface** on the simulator's device arrays, which autospmv uses to tell
device vectors from host vectors.
"""

from __future__ import annotations

import functools
from collections import namedtuple

import numpy as np

from .. import WARP

try:
    import greenlet
except ImportError as exc:
    raise ImportError("autospmv runs numba-cuda's CUDA simulator with greenlet: pip install "
                      "greenlet (autospmv's test extra has it)") from exc

Dim3 = namedtuple("Dim3", "x y z")
"""A thread's or block's index, as the simulator's ``cuda.threadIdx`` and ``cuda.blockIdx``."""


class SimulatedThread(greenlet.greenlet):
    """One CUDA thread of a simulated block, run by :func:`_run_block`: its indices, its block's
    manager (the simulator's, which holds the block's state for the votes), the board on which
    its warp exchanges values (a slot a lane), and its barriers."""

    def __init__(self, run, manager, block_idx: Dim3, index: int, warp_board: list):
        super().__init__(run)
        self.manager = manager
        self.blockIdx = block_idx
        self.thread_id = index
        self.lane = index % WARP
        self.warp_board = warp_board
        width, height, _ = manager._block_dim
        self.threadIdx = Dim3(index % width, index // width % height, index // (width * height))

    def syncthreads(self) -> None:
        """Wait at the block's barrier: hand the turn back to :func:`_run_block`."""
        self.parent.switch()

    def _vote(self, value, reduce):
        state = self.manager.block_state
        state[self.threadIdx] = value
        self.syncthreads()
        result = reduce(state)
        self.syncthreads()
        return result

    def syncthreads_count(self, value) -> int:
        return int(self._vote(value, np.count_nonzero))

    def syncthreads_and(self, value) -> int:
        return 1 if self._vote(value, np.all) else 0

    def syncthreads_or(self, value) -> int:
        return 1 if self._vote(value, np.any) else 0


def _current() -> SimulatedThread:
    return greenlet.getcurrent()


def _run_block(manager, grid_point, *args) -> None:
    """``BlockManager.run``: run the block's threads as :class:`SimulatedThread` greenlets, in
    turns from barrier to barrier (see the module's docstring), and raise the first exception
    one of them raises, naming the thread as the simulator does."""
    block_idx = Dim3(*grid_point)
    kernel = functools.partial(manager._f, *args)
    size = int(manager.block_state.size)
    boards = [[None] * WARP for _ in range(-(-size // WARP))]
    live = [SimulatedThread(kernel, manager, block_idx, index, boards[index // WARP])
            for index in range(size)]
    while live:
        waiting = []
        for thread in live:
            try:
                thread.switch()
            except Exception as exc:
                raise type(exc)(f"tid={list(thread.threadIdx)} ctaid={list(block_idx)}: {exc}"
                                ).with_traceback(exc.__traceback__) from None
            if thread.dead:
                thread.warp_board[thread.lane] = None  # its lane reads as not live
            else:
                waiting.append(thread)
        live = waiting[::-1]


def _warp_values(value) -> tuple[int, list]:
    """``(lane, values)``: the calling thread's lane and the value every lane of its warp posted
    (None for a lane without a live thread), after a block barrier on both sides."""
    thread = _current()
    thread.warp_board[thread.lane] = value
    thread.syncthreads()
    values = list(thread.warp_board)
    thread.syncthreads()
    return thread.lane, values


def _exchange(value, source_lane):
    lane, values = _warp_values(value)
    source = source_lane(lane)
    result = values[source] if 0 <= source < WARP else None
    return value if result is None else result


def _segment_source(lane, target, width):
    """Source lane for a shuffle of segment ``width``: out-of-segment sources keep the own value."""
    base = lane - lane % width
    return target if base <= target < base + width else lane


def shfl_down_sync(self, mask, value, delta):
    return _exchange(value, lambda lane: _segment_source(lane, lane + delta, WARP))


def shfl_up_sync(self, mask, value, delta):
    return _exchange(value, lambda lane: _segment_source(lane, lane - delta, WARP))


def shfl_xor_sync(self, mask, value, lane_mask):
    return _exchange(value, lambda lane: lane ^ lane_mask)


def shfl_sync(self, mask, value, source):
    return _exchange(value, lambda lane: source % WARP)


def ballot_sync(self, mask, predicate):
    """Bit l set where lane l's predicate is true (``__ballot_sync``)."""
    _, values = _warp_values(bool(predicate))
    return sum(1 << lane for lane, flag in enumerate(values) if flag)


def syncwarp(self, mask=0xFFFFFFFF):
    _current().syncthreads()


def _array_interface(self) -> dict:
    """``__cuda_array_interface__`` of a simulated device array (its host buffer's address)."""
    host = self._ary
    return {"shape": host.shape, "typestr": host.dtype.str, "strides": None if
            host.flags.c_contiguous else host.strides, "data": (host.ctypes.data, False),
            "version": 3}


def double2loint(value):
    """libdevice's lower 32 bits of a float64."""
    return np.array([value], dtype=np.float64).view(np.uint32)[0]


def double2hiint(value):
    """libdevice's upper 32 bits of a float64."""
    return np.array([value], dtype=np.float64).view(np.uint32)[1]


def int_as_float(bits):
    """libdevice's float32 of 32 bits."""
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def install() -> None:
    """Run blocks as greenlets, and add the shuffles and the ballot above to the simulator's
    fake ``cuda`` module, the moves of bits above to libdevice, and the CUDA array interface to
    its device arrays so that they are recognised like real ones (idempotent)."""
    from numba.cuda import libdevice
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    from numba.cuda.simulator.kernel import BlockManager
    from numba.cuda.simulator.kernelapi import FakeCUDAModule, GridGroup

    BlockManager.run = _run_block
    # The simulator's cuda module asks the current OS thread for its indices and barriers; the
    # thread is now the running greenlet.
    FakeCUDAModule.threadIdx = property(lambda self: _current().threadIdx)
    FakeCUDAModule.blockIdx = property(lambda self: _current().blockIdx)
    FakeCUDAModule.laneid = property(lambda self: _current().lane)
    FakeCUDAModule.syncthreads = lambda self: _current().syncthreads()
    FakeCUDAModule.syncthreads_count = lambda self, value: _current().syncthreads_count(value)
    FakeCUDAModule.syncthreads_and = lambda self, value: _current().syncthreads_and(value)
    FakeCUDAModule.syncthreads_or = lambda self, value: _current().syncthreads_or(value)
    GridGroup.sync = lambda self: _current().syncthreads()
    for function in (shfl_down_sync, shfl_up_sync, shfl_xor_sync, shfl_sync, ballot_sync,
                     syncwarp):
        setattr(FakeCUDAModule, function.__name__, function)
    for function in (double2loint, double2hiint, int_as_float):
        setattr(libdevice, function.__name__, function)
    FakeCUDAArray.__cuda_array_interface__ = property(_array_interface)
