"""Compiled host conversions from canonical CSR: one pass over the nonzeros per format.

Every function here is a numba ``njit(cache=True)`` kernel, so it is compiled once per
combination of index dtype (int32/int64) and value dtype (float32/float64), stored in numba's
on-disk cache (see :mod:`autospmv._support.cache`) and never again for another matrix. The callers
in the format modules allocate every output with NumPy before calling (so ``tracemalloc`` sees the
memory a conversion takes) and the kernels only fill them: no temporary array of nnz entries is
built on the way.

The work is split over numba's threads (``prange``) in tasks of consecutive rows, sorted rows or
tiles, each writing a disjoint part of the outputs, so the result does not depend on the
threading. A task of rows costs about its nonzeros; :func:`row_tasks` cuts the rows into tasks of
about equal nonzeros so that a few long rows do not leave one thread with most of the work.

Array positions are cast to ``np.uintp`` (``_u``) where they index: numba accepts negative
indices, so an access with a signed index carries a wrap-around test, and without it these
copy loops ran about 1.7x faster. Every position is computed in signed int64 first (numba types
``uint64 + int64`` as float64) and cast only at the access.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._support.jit import njit, specialisations

_TASK_NNZ = 1 << 16
"""Nonzeros per task of :func:`row_tasks` (a task is at least one row)."""

ROWS_PER_BLOCK = 256
"""Rows written together into a column-major layout (ELL slots, JDS diagonals): their slot k is
one run of consecutive words, and their CSR entries stay in the cache while k advances."""


def row_tasks(indptr: np.ndarray, rows_per_block: int = 1) -> np.ndarray:
    """Task boundaries over the rows (int64, first 0, last m) with about :data:`_TASK_NNZ`
    nonzeros per task, every boundary a multiple of ``rows_per_block`` (except m). Task k
    starts at the first row starting at or after ⌈k·nnz/count⌉, searched with targets of the
    row pointer's own dtype (targets of another dtype would make NumPy convert the whole row
    pointer first)."""
    m = indptr.shape[0] - 1
    nnz = int(indptr[-1])
    count = max(1, nnz // _TASK_NNZ)
    targets = -(-(np.arange(count + 1, dtype=np.int64) * nnz) // count)
    bounds = np.searchsorted(indptr, targets.astype(indptr.dtype), side="left").astype(np.int64)
    bounds = bounds // rows_per_block * rows_per_block
    bounds[0], bounds[-1] = 0, m
    return np.unique(np.minimum(bounds, m))


def _jit(function):
    """A parallel conversion pass, compiled and called like the CPU kernels'
    (:func:`autospmv._support.jit.specialisations`): under a lock while numba's threading layer
    is ``workqueue``, which aborts when two threads run parallel work at once, and serially in
    a process forked after GNU OpenMP started."""
    return specialisations(function)[1]


_jit_serial = njit(cache=True, nogil=True)
_u = np.uintp


@_jit
def coo_rows(indptr, tasks, row):
    """``row[k]`` = the row of nonzero k (CSR order), for every nonzero."""
    for t in prange(tasks.shape[0] - 1):
        for r in range(tasks[t], tasks[t + 1]):
            value = row.dtype.type(r)
            for k in range(indptr[_u(r)], indptr[_u(r + 1)]):
                row[_u(k)] = value


@_jit_serial
def overflow_pointer(indptr, width, out):
    """``out[r]`` = overflow entries (those beyond the first ``width``) of the rows before r;
    returns the total."""
    total = 0
    for r in range(indptr.shape[0] - 1):
        out[_u(r)] = total
        length = indptr[_u(r + 1)] - indptr[_u(r)]
        if length > width:
            total += length - width
    out[_u(indptr.shape[0] - 1)] = total
    return total


@_jit
def split_at_width(indptr, indices, data, width, tasks, overflow_ptr, ell_col, ell_data,
                   coo_row, coo_col, coo_data):
    """Fill ELL (column-major slots, ``-1``/0 padding) with each row's first ``width`` entries
    and the COO arrays with the rest, in CSR order (``overflow_ptr`` from
    :func:`overflow_pointer`). ``tasks``: row boundaries, multiples of :data:`ROWS_PER_BLOCK`."""
    m = indptr.shape[0] - 1
    zero = data.dtype.type(0)
    padding = ell_col.dtype.type(-1)
    for t in prange(tasks.shape[0] - 1):
        for r0 in range(tasks[t], tasks[t + 1], ROWS_PER_BLOCK):
            r1 = min(tasks[t + 1], r0 + ROWS_PER_BLOCK)
            for k in range(width):
                base = k * m
                for r in range(r0, r1):
                    p = indptr[_u(r)] + k
                    slot = _u(base + r)
                    if p < indptr[_u(r + 1)]:
                        ell_col[slot] = indices[_u(p)]
                        ell_data[slot] = data[_u(p)]
                    else:
                        ell_col[slot] = padding
                        ell_data[slot] = zero
            for r in range(r0, r1):
                o = overflow_ptr[_u(r)]
                for p in range(indptr[_u(r)] + width, indptr[_u(r + 1)]):
                    coo_row[_u(o)] = r
                    coo_col[_u(o)] = indices[_u(p)]
                    coo_data[_u(o)] = data[_u(p)]
                    o += 1


@_jit_serial
def sort_rows_by_length(indptr, max_length, perm, jd_ptr):
    """Counting sort of the rows by length, longest first and stable: fills ``perm`` (original
    row of each sorted position) and ``jd_ptr`` (start of each jagged diagonal, plus the end)."""
    m = indptr.shape[0] - 1
    count = np.zeros(max_length + 1, dtype=np.int64)  # rows of each length
    for r in range(m):
        count[_u(indptr[_u(r + 1)] - indptr[_u(r)])] += 1
    # Rows longer than length L come first: next_position[L] = rows of length > L.
    next_position = np.empty(max_length + 1, dtype=np.int64)
    longer = 0
    for length in range(max_length, -1, -1):
        next_position[_u(length)] = longer
        longer += count[_u(length)]
    for r in range(m):
        length = _u(indptr[_u(r + 1)] - indptr[_u(r)])
        perm[_u(next_position[length])] = r
        next_position[length] += 1
    # Diagonal d holds the rows longer than d.
    jd_ptr[0] = 0
    reaching = m - count[0]
    for d in range(max_length):
        jd_ptr[_u(d + 1)] = jd_ptr[_u(d)] + reaching
        reaching -= count[_u(d + 1)]


@_jit_serial
def sorted_tasks(indptr, perm):
    """Boundaries of tasks over the sorted rows of :func:`sort_rows_by_length` (int64, first 0,
    last m), each about :data:`_TASK_NNZ` nonzeros, cut at multiples of :data:`ROWS_PER_BLOCK`."""
    m = perm.shape[0]
    bounds = np.empty(m // ROWS_PER_BLOCK + 2, dtype=np.int64)
    bounds[0] = 0
    count = 1
    work = 0
    for i in range(m):
        if i % ROWS_PER_BLOCK == 0 and work >= _TASK_NNZ:
            bounds[count] = i
            count += 1
            work = 0
        r = perm[_u(i)]
        work += indptr[_u(r + 1)] - indptr[_u(r)]
    bounds[count] = m
    return bounds[:count + 1]


@_jit
def gather_diagonals(indptr, indices, data, perm, tasks, jd_ptr, col, out_data):
    """Entry d of sorted row i goes to ``jd_ptr[d] + i`` (JDS layout), in blocks of
    :data:`ROWS_PER_BLOCK` sorted rows: every diagonal's part of a block is written in one
    sequential run, and a block's rows, read once from anywhere in the CSR arrays, stay in the
    cache while d advances. (Writing in row order instead scatters every entry when neighbouring
    rows differ in length: 2x slower on power-law rows.)"""
    m = perm.shape[0]
    for t in prange(tasks.shape[0] - 1):
        start = np.empty(ROWS_PER_BLOCK, dtype=np.int64)
        length = np.empty(ROWS_PER_BLOCK, dtype=np.int64)
        for i0 in range(tasks[t], tasks[t + 1], ROWS_PER_BLOCK):
            n = min(m, i0 + ROWS_PER_BLOCK) - i0
            for i in range(n):
                r = perm[_u(i0 + i)]
                start[i] = indptr[_u(r)]
                length[i] = indptr[_u(r + 1)] - start[i]
            for d in range(length[0]):  # the block's first row is its longest
                base = jd_ptr[_u(d)] + i0
                for i in range(n):
                    if length[i] <= d:
                        break  # so are the rows after it
                    col[_u(base + i)] = indices[_u(start[i] + d)]
                    out_data[_u(base + i)] = data[_u(start[i] + d)]


@njit(cache=True, nogil=True, inline="always")
def _row_of(indptr, p):
    """The last row r with ``indptr[r] <= p`` (skips empty rows; m for p >= nnz)."""
    lo = 0
    hi = indptr.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[_u(mid)] <= p:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@_jit
def csr5_tiles(indptr, sigma, omega, tile_row):
    """First pass of CSR5 over the tiles: each tile's first row."""
    size = omega * sigma
    for t in prange(tile_row.shape[0]):
        tile_row[t] = _row_of(indptr, t * size)


@_jit
def csr5_fill(indptr, padded, indices, data, sigma, omega, tile_row, bit_flag, y_offset,
              out_indices, out_data, placeholder):
    """Second pass of CSR5: every tile's descriptors (see :mod:`autospmv.formats.csr5`) from the
    row pointer ``padded`` (``indptr`` with one entry in every empty row) and the entries in
    the transposed tile order (the incomplete last tile stays in CSR order), an empty row's
    being its placeholder (column ``placeholder``, value 0). With empty ``out_indices`` only the
    descriptors are written (they depend on the row pointers alone), for a matrix whose
    nonzeros stay on the GPU (:mod:`autospmv._prepare.device_input`)."""
    m = padded.shape[0] - 1
    total = padded[m]
    size = omega * sigma
    moved = out_indices.shape[0] > 0
    for t in prange(tile_row.shape[0]):
        base = t * size
        end = min(base + size, total)
        full = end - base == size
        lanes = t * omega
        lane_segments = np.zeros(omega, dtype=np.int32)
        words = np.zeros(omega, dtype=np.uint32)
        r = tile_row[t]
        while r < m and padded[_u(r)] < end:
            first = max(padded[_u(r)], base)  # a row begun earlier: segment 0
            lane = (first - base) // sigma
            words[lane] |= np.uint32(1) << np.uint32(first - base - lane * sigma)
            lane_segments[lane] += 1
            if moved:
                shift = indptr[_u(r)] - padded[_u(r)]
                empty = indptr[_u(r + 1)] == indptr[_u(r)]
                for q in range(first, min(padded[_u(r + 1)], end)):
                    local = q - base
                    target = _u(base + (local % sigma) * omega + local // sigma if full else q)
                    if empty:
                        out_indices[target] = placeholder
                        out_data[target] = 0
                    else:
                        out_indices[target] = indices[_u(q + shift)]
                        out_data[target] = data[_u(q + shift)]
            r += 1
        before = 0
        for lane in range(omega):
            bit_flag[_u(lanes + lane)] = words[lane]
            y_offset[_u(lanes + lane)] = before
            before += lane_segments[lane]
