"""The feature scan's passes on the GPU, for a matrix that is there: the device version of the
host's compiled passes (:mod:`autospmv._decide.feature_scan`, :mod:`autospmv._decide.row_passes`
and :func:`autospmv._decide.cost._group_max_sum_of`), counting the same integers.

They ship as cubins with the SpMV kernels (:mod:`.ship`), so a first run on a GPU of the shipped
architectures decides with nothing compiled, on the host or the device. Each kernel adds its
counts to a few int64 totals with atomics (integer sums: the same in any order); the one float
result, each warp's imbalance ratio, is stored per warp and summed on the host in the host's
order.

* :func:`row_pass_kernel`, one thread per warp of 32 rows: the warp's imbalance ratio, the
  longest row, and for every group size of the cost quantities the sum over groups of the
  group's longest row in steps of its lanes.
* :func:`length_count_kernel`, one thread per warp: the row-length histogram, one atomic per
  run of equal lengths.
* :func:`band_kernel`, one thread per :data:`CHUNK` nonzeros: the bandwidth, and a flag per
  occupied diagonal; :func:`count_flags_kernel` counts the flags.
* :func:`window_detail_kernel`, one thread per drawn window of 32 rows: the block, x-sector and
  narrow-band counters of the host's detail pass (``_detail_rows``). A window's rows are
  merged by column, as the rows of a block row are: the thread keeps a cursor per row and
  takes the smallest next block column (or sector) of all of them, so it needs no scratch
  over the columns. 3-row block rows are counted by the window holding their first row, when
  all their rows lie in drawn windows (a run of drawn windows, as on the host).

Weak where a window holds a very long row: its thread walks it alone (the host scan does too).
"""

from __future__ import annotations

from numba import cuda, int64, uint64

from . import jit

WINDOW_ROWS = 32
"""Rows per window and per thread of the row passes: a warp of the SpMV kernels."""
CHUNK = 32
"""Nonzeros per thread of :func:`band_kernel`."""
BLOCK = 128
"""Threads per block of every kernel here."""

# Entries of the totals of the row passes and the index passes (`stats`).
LONGEST = 0
GROUP_SUMS = 1
"""``stats[GROUP_SUMS + k]``: groups of ``WINDOW_ROWS >> k`` rows with ``1 << k`` lanes each."""
GROUP_SIZES = 6
BAND = 7
DIAGONALS = 8
STATS = 9

# Entries of the detail counters, in the order of the host scan's sums.
T2, T3, T4, T8, F2, F3, F4, F8 = range(8)  # touched blocks, nonzeros in full blocks
NARROW, ROW_SECTORS, WARP_SECTORS, SAMPLED_NNZ, SAMPLED_NNZ3 = 8, 10, 11, 12, 13
COUNTERS = 14

NONE = 0x7FFFFFFFFFFFFFFF
"""A row's next column when it has none left: larger than any."""
ANCHOR2 = 0x0055005500550055  # top-left cells of the 2×2 sub-blocks of an 8×8 mask
ANCHOR4 = 0x0000001100000011
CELLS2 = 0x0303  # cells of the 2×2 sub-block at the origin
CELLS4 = 0x0F0F0F0F
FULL3 = 0x1FF


@jit(cache=True)
def row_pass_kernel(indptr, m, ratios, stats):
    w = cuda.grid(1)
    if w >= ratios.shape[0]:
        return
    lo = int64(w) * WINDOW_ROWS
    rows = min(lo + WINDOW_ROWS, m) - lo
    lengths = cuda.local.array(WINDOW_ROWS, int64)
    longest = entries = 0
    for r in range(rows):
        length = int64(indptr[lo + r + 1]) - int64(indptr[lo + r])
        lengths[r] = length
        entries += length
        longest = max(longest, length)
    ratios[w] = longest * rows / entries if entries else 1.0
    cuda.atomic.max(stats, LONGEST, longest)
    for k in range(GROUP_SIZES):
        size = WINDOW_ROWS >> k
        lanes = 1 << k
        total = 0
        for start in range(0, rows, size):
            top = 0
            for r in range(start, min(start + size, rows)):
                top = max(top, lengths[r])
            total += -(-top // lanes)
        cuda.atomic.add(stats, GROUP_SUMS + k, total)


@jit(cache=True)
def length_count_kernel(indptr, m, counts):
    w = cuda.grid(1)
    lo = int64(w) * WINDOW_ROWS
    if lo >= m:
        return
    run_length = int64(indptr[lo + 1]) - int64(indptr[lo])
    run = 0
    for i in range(lo, min(lo + WINDOW_ROWS, m)):
        length = int64(indptr[i + 1]) - int64(indptr[i])
        if length != run_length:
            cuda.atomic.add(counts, run_length, run)
            run_length = length
            run = 0
        run += 1
    cuda.atomic.add(counts, run_length, run)


@jit(cache=True)
def band_kernel(indptr, indices, m, nnz, flags, stats):
    start = int64(cuda.grid(1)) * CHUNK
    if start >= nnz:
        return
    lo, hi = int64(0), m  # indptr[lo] <= start < indptr[hi]
    while hi - lo > 1:
        middle = (lo + hi) // 2
        if int64(indptr[middle]) <= start:
            lo = middle
        else:
            hi = middle
    row = lo
    row_end = int64(indptr[row + 1])
    band = 0
    for p in range(start, min(start + CHUNK, nnz)):
        while p >= row_end:
            row += 1
            row_end = int64(indptr[row + 1])
        offset = int64(indices[p]) - row
        band = max(band, abs(offset))
        flags[offset + m - 1] = 1
    cuda.atomic.max(stats, BAND, band)


@jit(cache=True)
def count_flags_kernel(flags, stats):
    count = 0
    for k in range(cuda.grid(1), flags.shape[0], cuda.gridsize(1)):
        count += flags[k] != 0
    cuda.atomic.add(stats, DIAGONALS, count)


@jit(device=True)
def _popcount(x):
    return int64(cuda.popc(uint64(x)))


@jit(device=True)
def _touched(mask, s, anchor):
    """Aligned s×s sub-blocks (s = 2, 4) of an 8×8 block mask with a cell set: the mask ORed
    with copies of itself moved towards bit 0 gathers each sub-block at its top-left cell."""
    k = 1
    while k < s:
        mask |= mask >> uint64(k)
        k *= 2
    k = 8
    while k < 8 * s:
        mask |= mask >> uint64(k)
        k *= 2
    return _popcount(mask & uint64(anchor))


@jit(device=True)
def _in_full(mask, padded, s, anchor, cells):
    """Cells of ``mask`` inside aligned s×s sub-blocks that are full in ``padded`` (the mask and
    the cells outside the matrix): ANDing as :func:`_touched` ORs leaves the full sub-blocks'
    top-left cells, and multiplying by a sub-block's ``cells`` spreads them over it."""
    k = 1
    while k < s:
        padded &= padded >> uint64(k)
        k *= 2
    k = 8
    while k < 8 * s:
        padded &= padded >> uint64(k)
        k *= 2
    return _popcount(mask & ((padded & uint64(anchor)) * uint64(cells)))


@jit(device=True)
def _row_pad(m, first, b):
    """The cells of rows m and beyond in the b×b blocks of the block row from ``first``."""
    pad = uint64(0)
    for r in range(b):
        if first + r >= m:
            pad |= uint64((1 << b) - 1) << uint64(r * b)
    return pad


@jit(device=True)
def _column_pad(n, b):
    """The cells of columns n and beyond in the b×b block cut by the matrix's last column."""
    inside = n % b
    pad = uint64(0)
    if inside:
        cut = uint64((1 << b) - 1) ^ uint64((1 << inside) - 1)
        for r in range(b):
            pad |= cut << uint64(r * b)
    return pad


@jit(device=True)
def _start(indptr, indices, lo, rows, cursor, head, shift):
    """Cursors at the first entry of rows lo … lo + rows - 1, and each row's first column
    shifted right by ``shift`` (:data:`NONE` for an empty row)."""
    for r in range(rows):
        p = int64(indptr[lo + r])
        cursor[r] = p
        head[r] = int64(indices[p]) >> shift if p < int64(indptr[lo + r + 1]) else NONE


@jit(device=True)
def _smallest(head, rows):
    smallest = int64(NONE)
    for r in range(rows):
        smallest = min(smallest, head[r])
    return smallest


@jit(device=True)
def _sectors_of_window(indptr, indices, lo, rows, shift, cursor, head):
    """Distinct x sectors (columns >> ``shift``) read by rows lo … lo + rows - 1."""
    _start(indptr, indices, lo, rows, cursor, head, shift)
    sectors = 0
    sector = _smallest(head, rows)
    while sector != NONE:
        sectors += 1
        for r in range(rows):
            if head[r] == sector:
                p, end = cursor[r], int64(indptr[lo + r + 1])
                while p < end and int64(indices[p]) >> shift == sector:
                    p += 1
                cursor[r] = p
                head[r] = int64(indices[p]) >> shift if p < end else NONE
        sector = _smallest(head, rows)
    return sectors


@jit(device=True)
def _block_row8(indptr, indices, m, n, first, rows, cursor, head, totals):
    """The 2×2, 4×4 and 8×8 counters of the 8-row block row from ``first`` (``rows`` of its
    rows in the matrix), added to ``totals`` (T2, T4, T8, F2, F4, F8)."""
    _start(indptr, indices, first, rows, cursor, head, 3)
    row_pad = _row_pad(m, first, 8)
    column_pad = _column_pad(n, 8)
    last = n // 8 if n % 8 else -1
    c = _smallest(head, rows)
    while c != NONE:
        mask = uint64(0)
        for r in range(rows):
            if head[r] == c:
                p, end = cursor[r], int64(indptr[first + r + 1])
                while p < end and int64(indices[p]) >> 3 == c:
                    mask |= uint64(1) << uint64(8 * r + (int64(indices[p]) & 7))
                    p += 1
                cursor[r] = p
                head[r] = int64(indices[p]) >> 3 if p < end else NONE
        padded = mask | row_pad
        if c == last:
            padded |= column_pad
        totals[0] += _touched(mask, 2, ANCHOR2)
        totals[1] += _touched(mask, 4, ANCHOR4)
        totals[2] += 1
        if _popcount(padded) >= 4:  # fewer cells fill no block
            totals[3] += _in_full(mask, padded, 2, ANCHOR2, CELLS2)
            totals[4] += _in_full(mask, padded, 4, ANCHOR4, CELLS4)
            if padded == uint64(0xFFFFFFFFFFFFFFFF):
                totals[5] += _popcount(mask)
        c = _smallest(head, rows)


@jit(device=True)
def _block_row3(indptr, indices, m, n, first, rows, cursor, head):
    """(touched 3×3 blocks, nonzeros in full ones) of the 3-row block row from ``first``."""
    for r in range(rows):
        p = int64(indptr[first + r])
        cursor[r] = p
        head[r] = int64(uint64(indices[p]) // uint64(3)) if p < int64(indptr[first + r + 1]) \
            else NONE
    row_pad = _row_pad(m, first, 3)
    column_pad = _column_pad(n, 3)
    last = n // 3 if n % 3 else -1
    touched = full = 0
    q = _smallest(head, rows)
    while q != NONE:
        mask = uint64(0)
        for r in range(rows):
            if head[r] == q:
                p, end = cursor[r], int64(indptr[first + r + 1])
                while p < end and int64(uint64(indices[p]) // uint64(3)) == q:
                    mask |= uint64(1) << uint64(3 * r + int64(indices[p]) - 3 * q)
                    p += 1
                cursor[r] = p
                head[r] = int64(uint64(indices[p]) // uint64(3)) if p < end else NONE
        padded = mask | row_pad
        if q == last:
            padded |= column_pad
        touched += 1
        if padded == uint64(FULL3):
            full += _popcount(mask)
        q = _smallest(head, rows)
    return touched, full


@jit(cache=True)
def window_detail_kernel(indptr, indices, m, n, shift, narrow, windows, selected, counters):
    k = cuda.grid(1)
    if k >= windows.shape[0]:
        return
    w = int64(windows[k])
    lo = w * WINDOW_ROWS
    hi = min(lo + WINDOW_ROWS, m)
    cursor = cuda.local.array(WINDOW_ROWS, int64)
    head = cuda.local.array(WINDOW_ROWS, int64)
    near = row_sectors = 0
    for i in range(lo, hi):
        previous = int64(-1)
        for p in range(int64(indptr[i]), int64(indptr[i + 1])):
            j = int64(indices[p])
            near += abs(j - i) <= narrow
            sector = j >> shift
            row_sectors += sector != previous
            previous = sector
    cuda.atomic.add(counters, NARROW, near)
    cuda.atomic.add(counters, ROW_SECTORS, row_sectors)
    cuda.atomic.add(counters, SAMPLED_NNZ, int64(indptr[hi]) - int64(indptr[lo]))
    cuda.atomic.add(counters, WARP_SECTORS,
                    _sectors_of_window(indptr, indices, lo, hi - lo, shift, cursor, head))
    totals = cuda.local.array(6, int64)
    for t in range(6):
        totals[t] = 0
    for first in range(lo, hi, 8):
        _block_row8(indptr, indices, m, n, first, min(first + 8, hi) - first, cursor, head,
                    totals)
    for t, counter in enumerate((T2, T4, T8, F2, F4, F8)):
        cuda.atomic.add(counters, counter, totals[t])
    # 3-row block rows from this window whose rows all lie in drawn windows
    touched = full = entries = 0
    for first in range(-(-lo // 3) * 3, hi, 3):
        top = min(first + 3, m)
        if top <= lo + WINDOW_ROWS or selected[w + 1]:
            block = _block_row3(indptr, indices, m, n, first, top - first, cursor, head)
            touched += block[0]
            full += block[1]
            entries += int64(indptr[top]) - int64(indptr[first])
    cuda.atomic.add(counters, T3, touched)
    cuda.atomic.add(counters, F3, full)
    cuda.atomic.add(counters, SAMPLED_NNZ3, entries)


def shipped_launches() -> list[tuple]:
    """``(kernel, argument types)`` of every launch of the feature passes
    (:mod:`autospmv._decide.device_passes`) on a matrix with 32-bit indices: what
    :mod:`.ship` compiles (64-bit indices compile on first use, as for the SpMV kernels)."""
    from numba import types

    def array(dtype):
        return types.Array(dtype, 1, "C")

    index, i64 = array(types.int32), types.int64
    return [
        (row_pass_kernel, (index, i64, array(types.float64), array(i64))),
        (length_count_kernel, (index, i64, array(i64))),
        (band_kernel, (index, index, i64, i64, array(types.uint8), array(i64))),
        (count_flags_kernel, (array(types.uint8), array(i64))),
        (window_detail_kernel, (index, index, i64, i64, i64, i64, array(i64), array(types.uint8),
                                array(i64))),
    ]
