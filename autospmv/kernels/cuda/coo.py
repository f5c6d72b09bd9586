"""COO kernel on the GPU: one thread per nonzero, one atomic add per run of equal rows per warp.

Thread ``k`` computes ``data[k] * x[col[k]]``. The entries are sorted by row, so each warp holds
runs of equal rows; a segmented suffix sum over shuffles (``shfl_down``, five steps, a step adding
only when the lane ``offset`` away carries the same row) leaves each run's total in its first lane,
which alone adds it to ``y`` atomically. ``y`` is zeroed first (:class:`ZeroY`). Threads past
``nnz`` carry row -1 and value 0 and still take part in the shuffles.

Load balance is perfect whatever the row lengths. Weak where rows are short (about one atomic per
row, and a row index read per entry that CSR does not need) and where long runs span many warps
(one atomic per warp touching the row); the result's rounding depends on the order of the atomics,
so it is not bitwise reproducible from run to run.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import jit
from .launch import X, Y, DeviceProgram, Launch, ZeroY

BLOCK = 256
WARP = 32


@jit(cache=True)
def coo_kernel(row, col, data, x, y):
    k = cuda.grid(1)
    lane = cuda.laneid
    r = row.dtype.type(-1)
    value = data.dtype.type(0)
    if k < data.shape[0]:
        r = row[k]
        value = data[k] * x[col[k]]
    offset = 1
    while offset < WARP:
        other_value = cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        other_row = cuda.shfl_down_sync(0xFFFFFFFF, r, offset)
        # Rows are sorted, so an equal row `offset` lanes on means the whole span is one run.
        if lane + offset < WARP and other_row == r:
            value += other_value
        offset *= 2
    previous_row = cuda.shfl_up_sync(0xFFFFFFFF, r, 1)
    if r >= 0 and (lane == 0 or previous_row != r):
        cuda.atomic.add(y, r, value)


def coo_launch(nnz: int, row, col, data, dtype) -> Launch:
    """The accumulating launch ``y += A @ x`` for a row-sorted COO matrix with nnz > 0."""
    return Launch(coo_kernel, -(-nnz // BLOCK), BLOCK, [row, col, data, X, Y], dtype)


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    nnz = fmt.data.shape[0]
    steps = [ZeroY(m, np.dtype(fmt.dtype).itemsize)] if m else []
    if nnz:
        steps.append(coo_launch(nnz, arrays["row"], arrays["col"], arrays["data"], fmt.dtype))
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps)
