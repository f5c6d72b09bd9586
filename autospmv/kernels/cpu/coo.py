"""COO kernel on the CPU: walks the row-sorted triples once, accumulating runs of equal rows.

Rows are sorted, so a task owning a contiguous slice of nonzeros only shares its first and last
row with its neighbours; those boundary partial sums are added serially afterwards, which keeps
the result deterministic (no atomics on the CPU).
"""

from __future__ import annotations

import numba
import numpy as np

from ..._support.jit import specialisations
from .. import unsigned
from . import NNZ_PER_TASK, use_parallel


def _coo(row, col, data, x, y, ntasks):
    y[:] = 0
    nnz = data.shape[0]
    first_row = np.empty(ntasks, dtype=np.int64)
    first_sum = np.zeros(ntasks, dtype=y.dtype)
    for t in numba.prange(ntasks):
        start, end = t * NNZ_PER_TASK, min(nnz, (t + 1) * NNZ_PER_TASK)
        r0 = row[start]
        first_row[t] = r0
        acc = y.dtype.type(0)
        current = r0
        head = True  # still in the run of the task's first row, which may continue a previous task's row
        for k in range(start, end):
            r = row[k]
            if r != current:
                if head:
                    first_sum[t] = acc
                    head = False
                else:
                    y[current] = acc
                acc = y.dtype.type(0)
                current = r
            acc += data[k] * x[col[k]]
        if head:
            first_sum[t] = acc
        else:
            y[current] = acc
    for t in range(ntasks):
        y[first_row[t]] += first_sum[t]


_coo_serial, _coo_parallel = specialisations(_coo)


def bind(fmt, params, parallel=None):
    nnz = fmt.data.shape[0]
    ntasks = (nnz + NNZ_PER_TASK - 1) // NNZ_PER_TASK
    if parallel is None:
        parallel = use_parallel(nnz)
    kernel = _coo_parallel if parallel else _coo_serial
    row, col, data = unsigned(fmt.row), unsigned(fmt.col), fmt.data
    return lambda x, y: kernel(row, col, data, x, y, ntasks)
