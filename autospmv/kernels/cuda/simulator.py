"""Warp shuffles for numba-cuda's CUDA simulator, so every kernel runs unchanged under it.

The simulator (``NUMBA_ENABLE_CUDASIM=1``) executes each CUDA thread as a Python thread but
implements no warp-level primitives. autospmv's kernels only use them in *warp-uniform* code: every
live thread of a block reaches the same sequence of shuffles (threads without work carry a zero
instead of returning early). Under that discipline a shuffle is a block barrier around an exchange
of values, which is what :func:`install` adds to the simulator's fake ``cuda`` module. Lanes outside
the warp, or lanes whose thread has already exited, read back the caller's own value, as
``__shfl_*_sync`` does for out-of-range source lanes.

The simulator's device arrays also lack ``__cuda_array_interface__``, which autospmv uses to tell
device vectors from host vectors; :func:`install` adds it.
"""

from __future__ import annotations

import threading

WARP = 32


def _exchange(value, source_lane):
    thread = threading.current_thread()
    manager = thread._manager
    board = manager.__dict__.setdefault("_warp_board", {})
    me = thread.thread_id
    board[me] = value
    thread.syncthreads()
    lane = me % WARP
    source = source_lane(lane)
    result = board.get(me - lane + source, value) if 0 <= source < WARP else value
    thread.syncthreads()
    return result


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


def syncwarp(self, mask=0xFFFFFFFF):
    threading.current_thread().syncthreads()


def _array_interface(self) -> dict:
    """``__cuda_array_interface__`` of a simulated device array (its host buffer's address)."""
    host = self._ary
    return {"shape": host.shape, "typestr": host.dtype.str, "strides": None if
            host.flags.c_contiguous else host.strides, "data": (host.ctypes.data, False),
            "version": 3}


def install() -> None:
    """Add the shuffles above to the simulator's fake ``cuda`` module, and the CUDA array
    interface to its device arrays so that they are recognised like real ones (idempotent)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    for function in (shfl_down_sync, shfl_up_sync, shfl_xor_sync, shfl_sync, syncwarp):
        setattr(FakeCUDAModule, function.__name__, function)
    FakeCUDAArray.__cuda_array_interface__ = property(_array_interface)
