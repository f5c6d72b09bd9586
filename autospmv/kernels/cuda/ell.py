"""ELL kernel on the GPU: one thread per row, reading the column-major slots.

At step ``k`` the threads of a warp read slot ``k`` of 32 consecutive rows, which are consecutive
words of ``col``/``data``: fully coalesced, and no row pointers to load. A thread stops at its
row's first padding slot (``col < 0``), so padding never multiplies ``x``.

Weak where row lengths vary: a warp runs as long as its longest row, and the padding still costs
memory (bounded by the fill limit of :mod:`autospmv.formats.ell`). Reads of ``x`` are gathers, as
in every SpMV kernel.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .launch import X, Y, DeviceProgram, Launch

BLOCK = 256


@cuda.jit(cache=True)
def ell_kernel(col, data, width, x, y):
    row = cuda.grid(1)
    m = y.shape[0]
    if row < m:
        acc = data.dtype.type(0)
        for k in range(width):
            slot = k * m + row
            c = col[slot]
            if c < 0:
                break
            acc += data[slot] * x[c]
        y[row] = acc


def ell_launch(m: int, width: int, col, data, dtype) -> Launch:
    """The launch that overwrites all m > 0 entries of ``y`` with the ELL product."""
    return Launch(ell_kernel, -(-m // BLOCK), BLOCK, [col, data, np.int32(width), X, Y], dtype)


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    steps = [ell_launch(m, fmt.width, arrays["col"], arrays["data"], fmt.dtype)] if m else []
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps)
