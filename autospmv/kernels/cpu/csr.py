"""CSR kernels on the CPU: ``csr_scalar`` (one task per row) and ``csr_vector``.

``csr_vector`` mirrors the GPU work split: a group of ``threads_per_row`` lanes shares a row, lane
``l`` sums entries ``l, l+g, l+2g, ...`` and the lanes are combined by the same halving tree as the
GPU shuffle reduction. On the CPU the lanes become independent accumulators, which lets the compiler
vectorise long rows; short rows pay for the reduction.
"""

from __future__ import annotations

import numba
import numpy as np

from . import specialisations, unsigned, use_parallel

_ROWS_PER_TASK = 256


def _scalar(indptr, indices, data, x, y):
    # One flat loop over rows: numba splits it into one contiguous block of rows per thread,
    # and the serial specialisation is the plain CSR loop (a loop over 256-row tasks, as the
    # vector kernel needs for its scratch, made the serial product 5-20 % slower than SciPy's).
    for i in numba.prange(y.shape[0]):
        acc = data.dtype.type(0)
        for k in range(indptr[i], indptr[i + 1]):
            acc += data[k] * x[indices[k]]
        y[i] = acc


def _vector(indptr, indices, data, x, y, group, nchunks):
    m = y.shape[0]
    for chunk in numba.prange(nchunks):
        lanes = np.empty(group, dtype=data.dtype)
        for i in range(chunk * _ROWS_PER_TASK, min(m, (chunk + 1) * _ROWS_PER_TASK)):
            start, end = indptr[i], indptr[i + 1]
            for lane in range(group):
                acc = data.dtype.type(0)
                for k in range(start + lane, end, group):
                    acc += data[k] * x[indices[k]]
                lanes[lane] = acc
            offset = group // 2
            while offset > 0:
                for lane in range(offset):
                    lanes[lane] += lanes[lane + offset]
                offset //= 2
            y[i] = lanes[0]


_scalar_serial, _scalar_parallel = specialisations(_scalar)
_vector_serial, _vector_parallel = specialisations(_vector)


def _nchunks(m: int) -> int:
    return (m + _ROWS_PER_TASK - 1) // _ROWS_PER_TASK


def bind_scalar(fmt, params, parallel=None):
    if parallel is None:
        parallel = use_parallel(fmt.data.shape[0])
    kernel = _scalar_parallel if parallel else _scalar_serial
    indptr, indices, data = unsigned(fmt.indptr), unsigned(fmt.indices), fmt.data
    return lambda x, y: kernel(indptr, indices, data, x, y)


def bind_vector(fmt, params, parallel=None):
    if parallel is None:
        parallel = use_parallel(fmt.data.shape[0])
    kernel = _vector_parallel if parallel else _vector_serial
    indptr, indices, data = unsigned(fmt.indptr), unsigned(fmt.indices), fmt.data
    group, nchunks = params["threads_per_row"], _nchunks(fmt.shape[0])
    return lambda x, y: kernel(indptr, indices, data, x, y, group, nchunks)
