"""CSR kernels on the CPU: ``csr_scalar`` (one task per row) and ``csr_vector``, and the serial
product with Aᵀ from A's arrays (:func:`bind_transposed`, the operator's ``rmatvec``).

``csr_vector`` mirrors the GPU work split: a group of ``threads_per_row`` lanes shares a row, lane
``l`` sums entries ``l, l+g, l+2g, ...`` and the lanes are combined by the same halving tree as the
GPU shuffle reduction. On the CPU the lanes become independent accumulators, which lets the compiler
vectorise long rows; short rows pay for the reduction.
"""

from __future__ import annotations

import numba
import numpy as np

from ..._support.jit import specialisations
from .. import njit, unsigned
from . import ROWS_PER_TASK, use_parallel


LONG_ROW = 16
"""Rows of at least this many nonzeros are summed in four interleaved partial sums by
``csr_scalar`` on the CPU, in a matrix where such rows hold :data:`LONG_ROWS_MIN_SHARE` of the
nonzeros or more (other rows in one running sum, in order, as SciPy's loop sums them)."""

LONG_ROWS_MIN_SHARE = 0.5
"""Smallest share of a matrix's nonzeros in rows of :data:`LONG_ROW` or more for which
``csr_scalar`` sums those rows in partial sums: where they hold half of the nonzeros or more,
they set the product's time (with partial sums, 1.25-2.2 times the speed of SciPy's loop, which
keeps one running sum, on the 11 shared test matrices of that kind, 1.04 times on the demo's
FEM-like matrix of rows of 21: ``benchmarks/results/cpu-scipy-product.json``); where they hold
less, telling long rows from short ones costs more than it saves on some matrices (a power-law
graph of 48,632 nonzeros, 38 % of them in rows of 16 to 205, ran about 1.5x slower with the test
per row on the 2-core development machine)."""


def _scalar(indptr, indices, data, x, y, split):
    # One flat loop over rows: numba splits it into one contiguous block of rows per thread,
    # and the serial specialisation is the plain CSR loop (a loop over 256-row tasks, as the
    # vector kernel needs for its scratch, made the serial product 5-20 % slower than SciPy's).
    # With ``split``, a row of LONG_ROW or more sums terms k, k+4, k+8, ... into four partial
    # sums, added pairwise, then the last (length mod 4) terms in order: one running sum waits
    # for each addition before the next (the add's latency, about 3 cycles a term), four do not.
    # Other rows keep one sum, in order: SciPy's result, bit for bit. LLVM compiles the loop
    # twice, with and without the test (``split`` is the same for every row), so the plain loop
    # runs as if the test were not there. The constants have the index arrays' type, so that
    # with unsigned indices every index stays unsigned (numba tests a signed one for
    # wrap-around).
    long_row = indptr.dtype.type(LONG_ROW)
    one, two, three, four = (indptr.dtype.type(1), indptr.dtype.type(2),
                             indptr.dtype.type(3), indptr.dtype.type(4))
    for i in numba.prange(y.shape[0]):
        start = indptr[i]
        end = indptr[i + 1]
        acc = y.dtype.type(0)
        if not split or end - start < long_row:
            for k in range(start, end):
                acc += data[k] * x[indices[k]]
        else:
            acc1 = y.dtype.type(0)
            acc2 = y.dtype.type(0)
            acc3 = y.dtype.type(0)
            stop = end - (end - start) % four
            k = start
            while k < stop:
                acc += data[k] * x[indices[k]]
                acc1 += data[k + one] * x[indices[k + one]]
                acc2 += data[k + two] * x[indices[k + two]]
                acc3 += data[k + three] * x[indices[k + three]]
                k += four
            acc = (acc + acc1) + (acc2 + acc3)
            for k in range(stop, end):
                acc += data[k] * x[indices[k]]
        y[i] = acc


def long_row_share(indptr) -> float:
    """The share of a CSR matrix's nonzeros in rows of :data:`LONG_ROW` or more (0 without
    nonzeros)."""
    lengths = np.diff(indptr)
    total = int(lengths.sum())
    return float(lengths[lengths >= LONG_ROW].sum()) / total if total else 0.0


def _vector(indptr, indices, data, x, y, group, nchunks):
    m = y.shape[0]
    for chunk in numba.prange(nchunks):
        lanes = np.empty(group, dtype=y.dtype)
        for i in range(chunk * ROWS_PER_TASK, min(m, (chunk + 1) * ROWS_PER_TASK)):
            start, end = indptr[i], indptr[i + 1]
            for lane in range(group):
                acc = y.dtype.type(0)
                for k in range(start + lane, end, group):
                    acc += data[k] * x[indices[k]]
                lanes[lane] = acc
            offset = group // 2
            while offset > 0:
                for lane in range(offset):
                    lanes[lane] += lanes[lane + offset]
                offset //= 2
            y[i] = lanes[0]


@njit(cache=True, nogil=True)
def _transposed_serial(indptr, indices, data, z, y):
    # y = Aᵀ z from A's own CSR arrays: row i of A scatters z[i]·A[i, :] into y. Rows go in
    # order, so every y[j] adds its terms in increasing i, as SciPy's transposed product does
    # (the same sums, bit for bit) and as the CSR product with Aᵀ does for its rows of fewer
    # than LONG_ROW terms (longer ones it sums in four partial sums), one pass over A's rows.
    for j in range(y.shape[0]):
        y[j] = 0
    for i in range(indptr.shape[0] - 1):
        zi = z[i]
        for k in range(indptr[i], indptr[i + 1]):
            y[indices[k]] += data[k] * zi


_scalar_serial, _scalar_parallel = specialisations(_scalar)
_vector_serial, _vector_parallel = specialisations(_vector)


def _nchunks(m: int) -> int:
    return (m + ROWS_PER_TASK - 1) // ROWS_PER_TASK


def bind_scalar(fmt, params, parallel=None):
    if parallel is None:
        parallel = use_parallel(fmt.data.shape[0])
    kernel = _scalar_parallel if parallel else _scalar_serial
    indptr, indices, data = unsigned(fmt.indptr), unsigned(fmt.indices), fmt.data
    split = long_row_share(fmt.indptr) >= LONG_ROWS_MIN_SHARE
    return lambda x, y: kernel(indptr, indices, data, x, y, split)


def bind_transposed(fmt):
    """``run(z, y)``: y = Aᵀ z serially from a CSR format's arrays (no Aᵀ built). A product with
    Aᵀ of many short rows (a wide A) costs a pass per row of Aᵀ; this one passes over A's rows,
    fewer, as SciPy's transposed product does (2-2.5x faster on 80BAU3B's 9,799 × 2,262 Aᵀ)."""
    indptr, indices, data = unsigned(fmt.indptr), unsigned(fmt.indices), fmt.data
    return lambda z, y: _transposed_serial(indptr, indices, data, z, y)


def bind_vector(fmt, params, parallel=None):
    if parallel is None:
        parallel = use_parallel(fmt.data.shape[0])
    kernel = _vector_parallel if parallel else _vector_serial
    indptr, indices, data = unsigned(fmt.indptr), unsigned(fmt.indices), fmt.data
    group, nchunks = params["threads_per_row"], _nchunks(fmt.shape[0])
    return lambda x, y: kernel(indptr, indices, data, x, y, group, nchunks)
