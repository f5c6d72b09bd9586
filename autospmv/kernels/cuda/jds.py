"""JDS kernel on the GPU: one thread per sorted row, walking the jagged diagonals.

Thread ``i`` handles sorted row ``i`` (original row ``perm[i]``): entry ``d`` of that row is at
``jd_ptr[d] + i``, so a warp reads consecutive words in every diagonal (coalesced), and
``jd_ptr[d]`` is one broadcast load per warp and step. The thread stops at the first diagonal too
short to reach it, then writes ``y[perm[i]]``; rows past the last diagonal write 0.

Sorting by length gives each warp rows of similar length (little idle time, bounded by the fill
limit of :mod:`autospmv.formats.jds`). Weak points: the scattered write through ``perm``, one
extra ``jd_ptr`` load per step, and a few very long rows, which keep the first warp busy alone.
"""

from __future__ import annotations

from numba import cuda

from . import jit
from .launch import X, Y, DeviceProgram, Launch

BLOCK = 256


@jit(cache=True)
def jds_kernel(perm, jd_ptr, col, data, x, y):
    i = cuda.grid(1)
    if i < y.shape[0]:
        acc = data.dtype.type(0)
        start = jd_ptr[0]
        for d in range(jd_ptr.shape[0] - 1):
            end = jd_ptr[d + 1]
            if end - start <= i:
                break
            k = start + i
            acc += data[k] * x[col[k]]
            start = end
        y[perm[i]] = acc


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    launch = Launch(jds_kernel, -(-m // BLOCK), BLOCK,
                    [arrays["perm"], arrays["jd_ptr"], arrays["col"], arrays["data"], X, Y],
                    fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch] if m else [])
