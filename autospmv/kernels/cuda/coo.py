"""COO kernel on the GPU: four consecutive nonzeros per thread, one atomic add per run of equal
rows per thread or per warp.

Thread ``t`` owns nonzeros ``4t .. 4t+3`` (row order). It loads the four rows, columns and values
at once (twelve independent loads, then four gathers of x, so a lane keeps many loads in flight)
and walks them in order: every run of equal rows that ends inside the thread is added to ``y``
with one atomic; the thread's last run (its *tail*, which may continue in the next threads) goes
into a segmented suffix sum over shuffles (``shfl_down``, five steps, a step adding only when the
lane ``offset`` away carries the same tail row), which leaves each run's total in its first lane,
which alone adds it atomically. ``y`` is zeroed first (:class:`ZeroY`). Positions past ``nnz``
carry row -1 and value 0 and still take part in the shuffles.

Four entries per thread divide the shuffles per nonzero by four against one entry per thread; a
warp's four loads of an array cover 512 consecutive bytes, so they are served by the same cache
lines. Load balance is perfect whatever the row lengths. Weak where rows are short (about one
atomic per row, and a row index read per entry that CSR does not need: 12 bytes per float32
nonzero against CSR's 8) and where long runs span many warps (one atomic per warp touching the
row); the result's rounding depends on the order of the atomics, so it is not bitwise
reproducible from run to run.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, uint64

from .. import WARP, unsigned
from . import jit
from .launch import X, Y, DeviceProgram, Launch, ZeroY

BLOCK = 256


ITEMS = 4
"""Consecutive nonzeros per thread."""


@jit(cache=True)
def coo_kernel(row, col, data, x, y):
    lane = cuda.laneid
    nnz = data.shape[0]
    k = cuda.grid(1) * ITEMS
    none = row.dtype.type(-1)
    zero = y.dtype.type(0)  # sums in y's dtype: float64 for a float32 matrix too
    if k + ITEMS <= nnz:  # four loads of each array issued before any is used
        u = uint64(k)  # unsigned positions index without numba's negative-index test
        r0, r1, r2, r3 = row[u], row[u + uint64(1)], row[u + uint64(2)], row[u + uint64(3)]
        c0, c1, c2, c3 = col[u], col[u + uint64(1)], col[u + uint64(2)], col[u + uint64(3)]
        v0 = data[u] * x[c0]
        v1 = data[u + uint64(1)] * x[c1]
        v2 = data[u + uint64(2)] * x[c2]
        v3 = data[u + uint64(3)] * x[c3]
    else:  # the last partial thread and threads past nnz
        r0 = row[k] if k < nnz else none
        r1 = row[k + 1] if k + 1 < nnz else none
        r2 = row[k + 2] if k + 2 < nnz else none
        r3 = row[k + 3] if k + 3 < nnz else none
        v0 = data[k] * x[col[k]] if k < nnz else zero
        v1 = data[k + 1] * x[col[k + 1]] if k + 1 < nnz else zero
        v2 = data[k + 2] * x[col[k + 2]] if k + 2 < nnz else zero
        v3 = data[k + 3] * x[col[k + 3]] if k + 3 < nnz else zero
    # Runs that end inside the thread go to y at once; `value` keeps the tail run of row `r`.
    r = r0
    value = v0
    for _ in range(ITEMS - 1):  # a constant trip count, unrolled: r1, v1 step through the rest
        if r1 != r:
            if r >= 0:
                cuda.atomic.add(y, r, value)
            r = r1
            value = zero
        value += v1
        r1, v1 = r2, v2
        r2, v2 = r3, v3
    offset = 1
    while offset < WARP:
        other_value = cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        other_row = cuda.shfl_down_sync(0xFFFFFFFF, r, offset)
        # Rows are sorted, so an equal tail row `offset` lanes on means the span is one run.
        if lane + offset < WARP and other_row == r:
            value += other_value
        offset *= 2
    previous_row = cuda.shfl_up_sync(0xFFFFFFFF, r, 1)
    if r >= 0 and (lane == 0 or previous_row != r):
        cuda.atomic.add(y, r, value)


def coo_launch(nnz: int, row, col, data, dtype) -> Launch:
    """The accumulating launch ``y += A @ x`` for a row-sorted COO matrix with nnz > 0."""
    return Launch(coo_kernel, -(-nnz // (BLOCK * ITEMS)), BLOCK, [row, unsigned(col), data, X, Y],
                  dtype)


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    nnz = fmt.data.shape[0]
    steps = [ZeroY(m, np.dtype(fmt.dtype).itemsize)] if m else []
    if nnz:
        steps.append(coo_launch(nnz, arrays["row"], arrays["col"], arrays["data"], fmt.dtype))
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps)
