"""Warp shuffles and ballots for numba-cuda's CUDA simulator, so every kernel runs unchanged
under it.

The simulator (``NUMBA_ENABLE_CUDASIM=1``) executes each CUDA thread as a Python thread but
implements no warp-level primitives. autospmv's kernels only use them in *warp-uniform* code: every
live thread of a block reaches the same sequence of shuffles and ballots (threads without work
carry a zero instead of returning early). Under that discipline a shuffle or a ballot is a block
barrier around an exchange of values, which is what :func:`install` adds to the simulator's fake
``cuda`` module. Lanes outside the warp, or lanes whose thread has already exited, read back the
caller's own value, as ``__shfl_*_sync`` does for out-of-range source lanes; in a ballot they
count as false.

Nor does it run libdevice, whose functions are stubs there: :func:`install` gives the moves of
bits between a float64 and its two 32-bit halves, and from 32 bits to a float32, that the
float32 Gram-Schmidt passes of :mod:`autospmv._solve.steps` take from it.

The simulator's device arrays also lack ``__cuda_array_interface__``, which autospmv uses to tell
device vectors from host vectors; :func:`install` adds it.

Its ``cuda.shared.array`` allocates a block's array at the first call from a source line, but
looks the line up and stores the new array without a lock: threads that reach the line together
(after a barrier, as every kernel here does) can each allocate one, and the writes of all but
the last are lost to the threads that read the last. :func:`install` replaces it with the same
allocation under a lock.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from numba.core import types
from numba.np import numpy_support

from .. import WARP

_SHARED_LOCK = threading.Lock()
_SIMULATOR_SHARED_ARRAY = None  # the simulator's own cuda.shared.array, kept by install()


def _warp_values(value) -> tuple[int, list]:
    """``(lane, values)``: the calling thread's lane and the value every lane of its warp posted
    (None for a lane without a live thread), after a block barrier on both sides."""
    thread = threading.current_thread()
    board = thread._manager.__dict__.setdefault("_warp_board", {})
    me = thread.thread_id
    board[me] = value
    thread.syncthreads()
    lane = me % WARP
    values = [board.get(me - lane + other) for other in range(WARP)]
    thread.syncthreads()
    # A thread that exits leaves its last value behind: clear the board for the next exchange.
    board.pop(me, None)
    return lane, values


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
    threading.current_thread().syncthreads()


def shared_array(self, shape, dtype, alignment=None):
    """``cuda.shared.array``: one array per block and source line, allocated under a lock;
    dynamic shared memory (``shape`` 0) and alignments go to the simulator's own allocator."""
    if shape == 0 or alignment is not None:
        return _SIMULATOR_SHARED_ARRAY(self, shape, dtype, alignment)
    caller = sys._getframe(1)
    line = (caller.f_code.co_filename, caller.f_lineno)
    with _SHARED_LOCK:
        array = self._allocations.get(line)
        if array is None:
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            array = self._allocations[line] = np.empty(shape, dtype)
    return array


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
    """Add the shuffles and the ballot above to the simulator's fake ``cuda`` module, the moves
    of bits above to libdevice, the CUDA array interface to its device arrays so that they are
    recognised like real ones, and the locked :func:`shared_array` (idempotent)."""
    from numba.cuda import libdevice
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    from numba.cuda.simulator.kernelapi import FakeCUDAModule, FakeCUDAShared

    global _SIMULATOR_SHARED_ARRAY
    for function in (shfl_down_sync, shfl_up_sync, shfl_xor_sync, shfl_sync, ballot_sync,
                     syncwarp):
        setattr(FakeCUDAModule, function.__name__, function)
    for function in (double2loint, double2hiint, int_as_float):
        setattr(libdevice, function.__name__, function)
    FakeCUDAArray.__cuda_array_interface__ = property(_array_interface)
    if FakeCUDAShared.array is not shared_array:
        _SIMULATOR_SHARED_ARRAY = FakeCUDAShared.array
        FakeCUDAShared.array = shared_array
