"""ELL kernel on the CPU: tasks of consecutive rows, each walking its slots column by column.

The column-major layout stores slot ``k`` of rows ``r, r+1, ...`` contiguously, so a task of
``ROWS_PER_TASK`` rows streams through ``col``/``data`` one column at a time and keeps its part of
``y`` in L1. A row's padding is trailing, so padding slots are skipped without touching ``x``, and a
task stops at the first column where all its rows are exhausted (ELL accepted under the fill limit
can still hold up to 3x padding in tasks of short rows).
"""

from __future__ import annotations

import numba
import numpy as np

from ..._support.jit import specialisations
from . import ROWS_PER_TASK, use_parallel


def _ell(col, data, width, x, y, accumulate, nchunks):
    m = y.shape[0]
    for chunk in numba.prange(nchunks):
        start = chunk * ROWS_PER_TASK
        end = min(m, start + ROWS_PER_TASK)
        if not accumulate:
            for r in range(start, end):
                y[r] = 0
        for k in range(width):
            base = k * m
            live = False
            for r in range(start, end):
                c = col[base + r]
                if c >= 0:
                    y[r] += data[base + r] * x[np.uintp(c)]  # unsigned: no wrap-around test
                    live = True
            if not live:
                break


_ell_serial, _ell_parallel = specialisations(_ell)


def bind_ell(fmt, accumulate: bool, parallel=None):
    """``run(x, y)`` computing ``y = A @ x``, or ``y += A @ x`` when ``accumulate`` (HYB adds its
    ELL part this way). Columns stay signed: padding is marked by -1."""
    if parallel is None:
        parallel = use_parallel(fmt.col.shape[0])
    kernel = _ell_parallel if parallel else _ell_serial
    col, data, width = fmt.col, fmt.data, fmt.width
    nchunks = (fmt.shape[0] + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    return lambda x, y: kernel(col, data, width, x, y, accumulate, nchunks)


def bind(fmt, params, parallel=None):
    return bind_ell(fmt, False, parallel)
