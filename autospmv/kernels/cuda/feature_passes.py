"""The feature scan's passes on the GPU, for a matrix that is there: the device version of the
host's compiled passes (:mod:`autospmv._decide.features.scan`,
:mod:`autospmv._decide.features.row_lengths` and :func:`autospmv._decide.cost._group_max_sum_of`),
counting the same integers.

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
* :func:`sample_detail_kernel`, one thread per :data:`CHUNK` entries of the drawn windows of 32
  rows: the block, x-sector and narrow-band counters of the host's detail pass
  (``_detail_rows``). Each distinct thing counted (an x sector of a row or of a window, a
  block of a block row) is counted by the entry that owns it, its first entry in the first
  row that has it: binary searches in the rows above tell an entry whether it is the owner,
  and the owner of a block reads the block's cells from its rows. The work is spread evenly
  over the entries, so a window holding a very long row costs no more than its entries.
  3-row block rows count when all their rows lie in drawn windows (a run of them, as on the
  host).

The kernels index with signed positions and keep to integer arithmetic; they run once per
decision, so their speed matters less than the SpMV kernels'.
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
def _first_at_least(indptr, indices, row, column):
    """The position of row ``row``'s first entry in a column ≥ ``column`` (its end if none):
    a binary search, the columns of a row being sorted."""
    lo, hi = int64(indptr[row]), int64(indptr[row + 1])
    while lo < hi:
        middle = (lo + hi) // 2
        if int64(indices[middle]) < column:
            lo = middle + 1
        else:
            hi = middle
    return lo


@jit(device=True)
def _any_in(indptr, indices, first_row, last_row, lo, hi):
    """Whether a row of first_row … last_row - 1 has an entry in columns lo … hi - 1."""
    for r in range(first_row, last_row):
        p = _first_at_least(indptr, indices, r, lo)
        if p < int64(indptr[r + 1]) and int64(indices[p]) < hi:
            return True
    return False


@jit(device=True)
def _block_mask(indptr, indices, first_row, last_row, lo, b):
    """The cells of rows first_row … last_row - 1 in columns lo … lo + b - 1, bit b·r + c
    for row first_row + r and column lo + c."""
    mask = uint64(0)
    for r in range(first_row, last_row):
        p, end = _first_at_least(indptr, indices, r, lo), int64(indptr[r + 1])
        while p < end and int64(indices[p]) < lo + b:
            mask |= uint64(1) << uint64(b * (r - first_row) + int64(indices[p]) - lo)
            p += 1
    return mask


@jit(device=True)
def _entry_counters(indptr, indices, m, n, shift, narrow, i, p, selected, totals):
    """Add entry p (row i) of a drawn window to the detail counters ``totals``. A count of
    distinct things (x sectors of the row or of its window, blocks of its block rows) is
    added by the entry that owns the thing: the first entry of it in the first row that has
    it, which the earlier rows' binary searches tell; the owner of a block reads the block's
    cells from its rows and counts them as the host scan does when the block row ends."""
    j = int64(indices[p])
    row_start = int64(indptr[i])
    previous = int64(indices[p - 1]) if p > row_start else int64(-1)
    totals[NARROW] += abs(j - i) <= narrow
    totals[SAMPLED_NNZ] += 1
    sector = j >> shift
    if previous < 0 or previous >> shift != sector:
        totals[ROW_SECTORS] += 1
        if not _any_in(indptr, indices, i & ~(WINDOW_ROWS - 1), i, sector << shift,
                       (sector + 1) << shift):
            totals[WARP_SECTORS] += 1
    c = j >> 3
    first = i & ~7
    if (previous < 0 or previous >> 3 != c) and not _any_in(indptr, indices, first, i, 8 * c,
                                                              8 * c + 8):
        last = min(first + 8, m)
        mask = _block_mask(indptr, indices, first, last, 8 * c, 8)
        padded = mask | _row_pad(m, first, 8)
        if n % 8 and c == n // 8:
            padded |= _column_pad(n, 8)
        totals[T2] += _touched(mask, 2, ANCHOR2)
        totals[T4] += _touched(mask, 4, ANCHOR4)
        totals[T8] += 1
        if _popcount(padded) >= 4:  # fewer cells fill no block
            totals[F2] += _in_full(mask, padded, 2, ANCHOR2, CELLS2)
            totals[F4] += _in_full(mask, padded, 4, ANCHOR4, CELLS4)
            if padded == uint64(0xFFFFFFFFFFFFFFFF):
                totals[F8] += _popcount(mask)
    # 3-row block rows count when all their rows lie in drawn windows (a run of them)
    first = i - i % 3
    last = min(first + 3, m)
    if selected[first // WINDOW_ROWS] and selected[(last - 1) // WINDOW_ROWS]:
        totals[SAMPLED_NNZ3] += 1
        q = int64(uint64(j) // uint64(3))
        if (previous < 0 or int64(uint64(previous) // uint64(3)) != q) and not _any_in(
                indptr, indices, first, i, 3 * q, 3 * q + 3):
            mask = _block_mask(indptr, indices, first, last, 3 * q, 3)
            padded = mask | _row_pad(m, first, 3)
            if n % 3 and q == n // 3:
                padded |= _column_pad(n, 3)
            totals[T3] += 1
            if padded == uint64(FULL3):
                totals[F3] += _popcount(mask)


@jit(cache=True)
def sample_detail_kernel(indptr, indices, m, n, shift, narrow, windows, offsets, selected,
                         counters):
    # The drawn windows' entries, window after window, CHUNK per thread: window k's start at
    # offsets[k]; each thread adds its counts to the block's, and the block to the totals.
    block_totals = cuda.shared.array(COUNTERS, int64)
    if cuda.threadIdx.x < COUNTERS:
        block_totals[cuda.threadIdx.x] = 0
    cuda.syncthreads()
    totals = cuda.local.array(COUNTERS, int64)
    for t in range(COUNTERS):
        totals[t] = 0
    start = int64(cuda.grid(1)) * CHUNK
    count = offsets[windows.shape[0]]
    if start < count:
        lo, hi = int64(0), int64(windows.shape[0])  # offsets[lo] <= start < offsets[hi]
        while hi - lo > 1:
            middle = (lo + hi) // 2
            if offsets[middle] <= start:
                lo = middle
            else:
                hi = middle
        k = lo
        i = int64(windows[k]) * WINDOW_ROWS
        p = int64(indptr[i]) + start - offsets[k]
        for _ in range(min(CHUNK, count - start)):
            while p >= int64(indptr[i + 1]):  # the row of p: past empty rows and windows
                i += 1
                if i == min((int64(windows[k]) + 1) * WINDOW_ROWS, m):
                    k += 1
                    i = int64(windows[k]) * WINDOW_ROWS
                    p = int64(indptr[i])
            _entry_counters(indptr, indices, m, n, shift, narrow, i, p, selected, totals)
            p += 1
    for t in range(COUNTERS):
        if totals[t]:
            cuda.atomic.add(block_totals, t, totals[t])
    cuda.syncthreads()
    if cuda.threadIdx.x < COUNTERS and block_totals[cuda.threadIdx.x]:
        cuda.atomic.add(counters, cuda.threadIdx.x, block_totals[cuda.threadIdx.x])


def shipped_launches() -> list[tuple]:
    """``(kernel, argument types)`` of every launch of the feature passes
    (:mod:`autospmv._decide.features.device_scan`) on a matrix with 32-bit indices: what
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
        (sample_detail_kernel, (index, index, i64, i64, i64, i64, array(i64), array(i64),
                                array(types.uint8), array(i64))),
    ]
