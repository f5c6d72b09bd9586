"""Format conversions on the GPU as shipped kernels: the row-expanding steps of COO, ELL and HYB
(:mod:`autospmv.formats.coo`, :mod:`autospmv.formats.ell`, :mod:`autospmv.formats.hyb`) for a
matrix whose CSR arrays are on the GPU.

The same steps written as CuPy array operations need a dozen elementwise kernels that CuPy
compiles with NVRTC on first use; these kernels ship as cubins with the SpMV kernels
(:mod:`.ship`), so a first conversion compiles nothing. Each builds exactly
the arrays of the host conversion:

* :func:`longest_row_kernel`, one thread per row: the longest row (an atomic maximum);
* :func:`nonzero_rows_kernel`, one thread per nonzero: its row, by a binary search in the row
  pointer (empty rows skipped, as ``searchsorted(indptr, j, "right") - 1``);
* :func:`ell_pad_kernel`, one thread per ELL slot: column -1 and value 0 in the slots past the
  row's end;
* :func:`split_kernel`, one thread per nonzero: entry ``p`` of row ``r`` to ELL slot
  ``p * m + r`` when ``p < width``, else to position ``overflow_ptr[r] + p - width`` of the COO
  part (rows in order, columns in order within a row: the host's COO order).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, int64

from . import jit

BLOCK = 256
"""Threads per block of every kernel here."""


@jit(device=True)
def _row_of(indptr, m, j):
    """The row holding nonzero ``j``: the last row whose first entry is at or before ``j``."""
    lo, hi = int64(0), m - 1
    while lo < hi:
        middle = (lo + hi + 1) // 2
        if int64(indptr[middle]) <= j:
            lo = middle
        else:
            hi = middle - 1
    return lo


@jit(cache=True)
def longest_row_kernel(indptr, m, longest):
    r = cuda.grid(1)
    if r < m:
        cuda.atomic.max(longest, 0, int64(indptr[r + 1]) - int64(indptr[r]))


@jit(cache=True)
def nonzero_rows_kernel(indptr, m, rows):
    j = cuda.grid(1)
    if j < rows.shape[0]:
        rows[j] = _row_of(indptr, m, int64(j))


@jit(cache=True)
def ell_pad_kernel(indptr, m, width, col, data):
    i = cuda.grid(1)
    if i >= m * width:
        return
    r = i % m
    if i // m >= int64(indptr[r + 1]) - int64(indptr[r]):
        col[i] = -1
        data[i] = 0


@jit(cache=True)
def split_kernel(indptr, indices, values, m, width, overflow_ptr, col, data, coo_row, coo_col,
                 coo_data):
    j = cuda.grid(1)
    if j >= indices.shape[0]:
        return
    r = _row_of(indptr, m, int64(j))
    p = int64(j) - int64(indptr[r])
    if p < width:
        slot = p * m + r
        col[slot] = indices[j]
        data[slot] = values[j]
    else:
        q = int64(overflow_ptr[r]) + p - width
        coo_row[q] = r
        coo_col[q] = indices[j]
        coo_data[q] = values[j]


def runs_on(csr) -> bool:
    """Whether ``csr`` (a :class:`~autospmv.formats.base.DeviceCSR`) is converted by these
    kernels: its arrays are on the GPU (NumPy stand-ins take the array operations)."""
    return not isinstance(csr.indices, np.ndarray)


def longest_row(csr) -> int:
    """The longest row of ``csr``, reduced on the GPU (one scalar comes back)."""
    m = csr.shape[0]
    if m == 0:
        return 0
    longest = csr.xp.zeros(1, np.int64)
    _launch(csr, longest_row_kernel, m, [csr.indptr, np.int64(m), longest])
    return int(longest[0].item())


def nonzero_rows(csr, itype):
    """The row of every nonzero of ``csr`` (CSR order), an ``itype`` array on the GPU."""
    rows = csr.xp.empty(csr.nnz, dtype=itype)
    if csr.nnz:
        _launch(csr, nonzero_rows_kernel, csr.nnz, [csr.indptr, np.int64(csr.shape[0]), rows])
    return rows


def split_at_width(csr, width: int, longest: int):
    """ELL arrays of ``width`` slots per row (column-major: slot ``k * m + r``) and the COO
    arrays of the entries past them, from ``csr`` on the GPU, whose longest row is ``longest``:
    ``(col, data, coo_row, coo_col, coo_data)``. When a row is longer than ``width``, the COO
    part's size and each row's place in it come from the host's row pointer; otherwise there
    is no COO part and the row pointer is not read on the host."""
    xp, m, itype = csr.xp, csr.shape[0], csr.indices.dtype
    if longest > width:
        over = np.maximum(np.diff(csr.host_indptr).astype(np.int64) - width, 0)
        overflow_ptr = np.zeros(m + 1, np.int64)
        np.cumsum(over, out=overflow_ptr[1:])
        overflow = int(overflow_ptr[-1])
        overflow_ptr = xp.asarray(overflow_ptr)
    else:
        overflow, overflow_ptr = 0, xp.zeros(1, np.int64)  # never read: every entry fits
    col = xp.empty(m * width, dtype=itype)
    data = xp.empty(m * width, dtype=csr.data.dtype)
    coo_row = xp.empty(overflow, dtype=itype)
    coo_col = xp.empty(overflow, dtype=itype)
    coo_data = xp.empty(overflow, dtype=csr.data.dtype)
    if m * width:
        _launch(csr, ell_pad_kernel, m * width, [csr.indptr, np.int64(m), np.int64(width), col,
                                                 data])
    if csr.nnz:
        _launch(csr, split_kernel, csr.nnz, [
            csr.indptr, csr.indices, csr.data, np.int64(m), np.int64(width), overflow_ptr, col,
            data, coo_row, coo_col, coo_data])
    return col, data, coo_row, coo_col, coo_data


def _launch(csr, kernel, threads: int, args: list) -> None:
    """``kernel`` on ``threads`` threads in blocks of :data:`BLOCK` (see
    :func:`~autospmv.kernels.cuda.launch.launch_once`)."""
    from .launch import launch_once

    launch_once(kernel, threads, BLOCK, args, csr.xp)


def shipped_launches() -> list[tuple]:
    """``(kernel, argument types)`` of every launch here on a matrix with 32-bit indices, for
    float32 and float64 values: what :mod:`.ship` compiles (64-bit indices compile on first
    use, as for the SpMV kernels)."""
    from numba import types

    def array(dtype):
        return types.Array(dtype, 1, "C")

    index, i64 = array(types.int32), types.int64
    launches = [(longest_row_kernel, (index, i64, array(i64))),
                (nonzero_rows_kernel, (index, i64, index))]
    for value in (array(types.float32), array(types.float64)):
        launches += [
            (ell_pad_kernel, (index, i64, i64, index, value)),
            (split_kernel, (index, index, value, i64, i64, array(i64), index, value, index,
                            index, value)),
        ]
    return launches
