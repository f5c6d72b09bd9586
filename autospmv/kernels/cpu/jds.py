"""JDS kernel on the CPU: tasks of consecutive sorted rows, walking the jagged diagonals.

A task owns ``ROWS_PER_TASK`` consecutive sorted positions. Diagonal ``d`` stores those rows'
entries contiguously (at ``jd_ptr[d] + i``), so the task streams through each diagonal into a small
accumulator and stops at the first diagonal shorter than its first row. Every row's sum runs over
its entries in column order, as in CSR; the sums are then scattered to ``y`` through ``perm``.
"""

from __future__ import annotations

import numba
import numpy as np

from ..._support.jit import specialisations
from .. import unsigned
from . import ROWS_PER_TASK, use_parallel


def _jds(perm, jd_ptr, col, data, x, y, nchunks):
    m = y.shape[0]
    ndiag = jd_ptr.shape[0] - 1
    for chunk in numba.prange(nchunks):
        start = chunk * ROWS_PER_TASK
        end = min(m, start + ROWS_PER_TASK)
        acc = np.zeros(end - start, dtype=y.dtype)
        for d in range(ndiag):
            base = jd_ptr[d]
            stop = min(end, jd_ptr[d + 1] - base)  # the diagonal holds sorted rows 0..stop-1
            if stop <= start:
                break
            for i in range(start, stop):
                acc[i - start] += data[base + i] * x[col[base + i]]
        for i in range(start, end):
            y[perm[i]] = acc[i - start]


_jds_serial, _jds_parallel = specialisations(_jds)


def bind(fmt, params, parallel=None):
    if parallel is None:
        parallel = use_parallel(fmt.data.shape[0])
    kernel = _jds_parallel if parallel else _jds_serial
    perm, jd_ptr, col, data = unsigned(fmt.perm), fmt.jd_ptr, unsigned(fmt.col), fmt.data
    nchunks = (fmt.shape[0] + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    return lambda x, y: kernel(perm, jd_ptr, col, data, x, y, nchunks)
