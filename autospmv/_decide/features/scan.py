"""The numba scan over a canonical CSR matrix's rows, whose counters the features
(:mod:`autospmv._decide.features.extract`) read.

The scan walks the rows in windows of :data:`WINDOW_ROWS` (one warp): every row for the
row-length histogram, the bandwidth and the occupied diagonals, and the rows of the windows
drawn for detail also for the block, x-sector and narrow-band counters (the entries ``_T2`` …
``_SAMPLED_NNZ3`` of a worker's ``sums``). The work is split between workers
(:func:`_split_windows`), each with its own scratch arrays within a memory budget
(:func:`_workers`, :data:`SCRATCH_SHARE`); :data:`scan_serial` runs the workers in turn,
:data:`scan_parallel` on numba's threads. A worker's scratch grows with the columns; when one
worker's would outweigh the matrix (:func:`scratch_fits`: far more columns than nonzeros), the
same counters are counted over the nonzeros instead, by sorting keys per group of rows
(:func:`nonzero_counters`, :func:`band_and_diagonals`), in memory bounded by the nonzeros.
The passes over the row pointer alone are in :mod:`autospmv._decide.features.row_lengths`.

:func:`scan_rows` runs it all on the host and returns a :class:`Scan`, the result that the GPU's
passes (:func:`autospmv._decide.features.device_scan.scan`) return too.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
from numba import prange

from ..._support.devices import WARP
from ..._support.jit import njit, specialisations
from .row_lengths import histogram_bins, length_histogram, row_length_moments, warp_ratio_sum

BLOCK_SIZES = (2, 3, 4, 8)
"""The b of the b×b block counters (2, 4 and 8 from one 8×8 bit mask, 3 from its own)."""

WINDOW_ROWS = WARP
"""Rows per sampling window, the unit of work: one warp, a whole number of 8-row blocks."""
DETAIL_COST = 8
"""Work split between threads: a nonzero of a sampled window costs about this many others."""

# Entries of the counters the scan returns.
_T2, _T3, _T4, _T8, _F2, _F3, _F4, _F8 = range(8)  # touched blocks, nonzeros in full blocks
_TOUCHED = dict(zip(BLOCK_SIZES, (_T2, _T3, _T4, _T8), strict=True))
_FULL = dict(zip(BLOCK_SIZES, (_F2, _F3, _F4, _F8), strict=True))
_NARROW, _BAND, _ROW_SECTORS, _WARP_SECTORS, _SAMPLED_NNZ, _SAMPLED_NNZ3 = range(8, 14)
_N_SUMS = 14

# 8×8 blocks are bit masks, bit 8·r + c for row r and column c inside the block.
_U1 = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_ANCHOR2 = np.uint64(0x0055005500550055)  # top-left cells of the 2×2 sub-blocks
_ANCHOR4 = np.uint64(0x0000001100000011)
_BLOCK2 = np.uint64(0x0303)  # cells of the 2×2 sub-block at the origin
_BLOCK4 = np.uint64(0x0F0F0F0F)
_LOW_HALF = np.uint64(0x0F0F0F0F0F0F0F0F)  # columns 0-3 of every row
# 3×3 blocks: bit 3·r + c.
_FULL3 = 0x1FF


# ---------------------------------------------------------------------------------------------
# The split of the windows between workers, and each worker's scratch arrays.


def _split_windows(indptr: np.ndarray, m: int, selected: np.ndarray, workers: int) -> np.ndarray:
    """Cut the windows into ``workers`` runs of consecutive windows of about equal work (every
    window's rows, and the selected windows' detail), at multiples of 3 windows (96 rows), so
    that no 3-row block row is cut."""
    if workers == 1:
        return np.array([0, selected.size])
    entries = np.diff(indptr[np.minimum(np.arange(selected.size + 1) * WINDOW_ROWS, m)])
    work = np.cumsum((1 + DETAIL_COST * selected.astype(np.int64)) * entries
                     + WINDOW_ROWS)
    cuts = np.searchsorted(work, work[-1] * np.arange(1, workers) / workers) // 3 * 3
    return np.concatenate([[0], cuts, [selected.size]])


SCRATCH_SHARE = 1.0
"""The workers' scratch arrays together stay below this share of the CSR arrays' bytes (or
one worker's, if more): each worker needs its own (about m + 7.3 n bytes), so a machine with
many threads would otherwise need many times the matrix (4 GB at 128 threads for a 153 MB
matrix). Fewer workers than threads only coarsens the work split."""


def _scratch_shapes(m: int, n: int, bins: int, detail: bool = True) -> list[tuple[int, type]]:
    """One worker's row of each scratch array: (length, dtype), in :func:`_scratch` order.
    The row-length histogram has ``bins`` columns
    (:func:`autospmv._decide.features.row_lengths.histogram_bins`: none when the lengths are sorted
    instead); the detail arrays (sectors, block masks) have none when no window is scanned in
    detail (``detail`` False)."""
    d = int(detail)
    return [
        (_N_SUMS, np.int64),
        (bins, np.int64),
        (max(m + n - 1, 0), np.uint8),  # occupied diagonals
        ((n + 7) // 8 * 2 * d, np.int32),  # last warp that read each sector
        ((n + 7) // 8 * d, np.uint64),  # 8×8 block masks, block columns
        (((n + 7) // 8 + 1) * d, np.int64),  # touched block columns
        ((n + 2) // 3 * d, np.uint16),  # 3×3 block masks
        (((n + 2) // 3 + 1) * d, np.int64),
    ]


def _worker_bytes(m: int, n: int, bins: int, detail: bool = True) -> int:
    """Bytes of one worker's scratch arrays (:func:`_scratch_shapes`)."""
    return sum(length * np.dtype(dtype).itemsize
               for length, dtype in _scratch_shapes(m, n, bins, detail))


def _workers(threads: int, m: int, n: int, bins: int, csr_bytes: int,
             detail: bool = True) -> int:
    """How many workers the scan splits into: ``threads``, but no more than the scratch
    budget (:data:`SCRATCH_SHARE`) allows, and at least one."""
    per_worker = _worker_bytes(m, n, bins, detail)
    return max(1, min(threads, int(SCRATCH_SHARE * csr_bytes) // max(per_worker, 1)))


SCRATCH_ALWAYS = 1 << 22
"""One worker's scratch arrays up to this many bytes are always accepted (see
:func:`scratch_fits`): a matrix of up to about 500,000 columns is scanned whatever its
nonzeros."""


def scratch_fits(m: int, n: int, bins: int, csr_bytes: int, detail: bool = True) -> bool:
    """Whether one worker's scratch arrays (about m + 7.3 n bytes) stay within
    :data:`SCRATCH_SHARE` of the CSR arrays' ``csr_bytes`` or :data:`SCRATCH_ALWAYS`. They do
    not when the matrix has far more columns than nonzeros (a 10 × 10⁹ matrix of 10⁵ nonzeros,
    1.2 MB, would need 7 GB); its counters are then counted over the nonzeros
    (:func:`nonzero_counters`, :func:`band_and_diagonals`)."""
    return _worker_bytes(m, n, bins, detail) <= max(SCRATCH_SHARE * csr_bytes, SCRATCH_ALWAYS)


def _scratch(workers: int, m: int, n: int, bins: int,
             detail: bool = True) -> tuple[np.ndarray, ...]:
    """Per-worker counters and work arrays (see :func:`_scratch_shapes`)."""
    return tuple(np.zeros((workers, length), dtype)
                 for length, dtype in _scratch_shapes(m, n, bins, detail))


# ---------------------------------------------------------------------------------------------
# Block masks: each b×b block of the current block row is a bit mask, filled row by row and
# counted when the block row ends.


@njit(cache=True)
def _popcount(x):
    """Set bits of a uint64 (LLVM turns this into one popcnt instruction)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True)
def _touched(mask, s, anchor):
    """Number of aligned s×s sub-blocks (s = 2, 4) of an 8×8 block mask with a cell set: ORing
    the mask with copies of itself moved by up to s − 1 columns and rows towards bit 0
    gathers each sub-block at its top-left cell (``anchor`` marks those cells)."""
    k = 1
    while k < s:
        mask |= mask >> np.uint64(k)
        k *= 2
    k = 8
    while k < 8 * s:
        mask |= mask >> np.uint64(k)
        k *= 2
    return _popcount(mask & anchor)


@njit(cache=True)
def _in_full(mask, padded, s, anchor, pattern):
    """Stored cells of ``mask`` inside aligned s×s sub-blocks (s = 2, 4) that are full in
    ``padded`` (the mask plus the cells outside the matrix, so a block cut by the border is
    full when all of its cells inside are stored). ANDing as in :func:`_touched` leaves the
    full sub-blocks' top-left cells; multiplying by the sub-block's cell ``pattern`` spreads
    them back over the sub-blocks (no carries: the copies do not overlap)."""
    k = 1
    while k < s:
        padded &= padded >> np.uint64(k)
        k *= 2
    k = 8
    while k < 8 * s:
        padded &= padded >> np.uint64(k)
        k *= 2
    return _popcount(mask & ((padded & anchor) * pattern))


@njit(cache=True)
def _edge_pads(m, n, first_row, b):
    """Bit masks of the cells outside the matrix in the b×b blocks of the block row starting
    at ``first_row`` (row pad) and of the last, cut block column (column pad); that column's
    index, or -1 when n is a multiple of b."""
    row_bits = np.uint64((1 << b) - 1)
    cols_in = n % b
    cut = row_bits ^ np.uint64((1 << cols_in) - 1) if cols_in else np.uint64(0)
    row_pad = col_pad = np.uint64(0)
    for r in range(b):
        at = np.uint64(r * b)
        if first_row + r >= m:
            row_pad |= row_bits << at
        col_pad |= cut << at
    return row_pad, col_pad, n // b if cols_in else -1


@njit(cache=True)
def _merge(masks, touched, count, c, bits):
    """OR one row's cells of block column c into its block mask, listing c when new (the
    list slot after the last is always written, so lists need one spare slot)."""
    old = masks[c]
    touched[count] = c
    masks[c] = old | bits
    return count + (old == 0)


@njit(cache=True)
def _flush8(masks, touched, count, row_pad, last_col, col_pad, stamp, warp_id, shift, sums):
    """Count the 2×2, 4×4 and 8×8 blocks of one finished 8-row block row, and the x sectors
    its warp reads for the first time, then reset its masks."""
    t2 = t4 = f2 = f4 = f8 = sectors = 0
    for k in range(count):
        c = touched[k]
        mask = masks[c]
        masks[c] = np.uint64(0)
        if shift == 3:  # float32: the 8 columns are one sector
            sectors += _stamp(stamp, c, warp_id, True)
        else:  # float64: columns 0-3 and 4-7 are two
            sectors += _stamp(stamp, 2 * c, warp_id, mask & _LOW_HALF != 0)
            sectors += _stamp(stamp, 2 * c + 1, warp_id, mask & ~_LOW_HALF != 0)
        padded = mask | row_pad
        if c == last_col:
            padded |= col_pad
        t2 += _touched(mask, 2, _ANCHOR2)
        t4 += _touched(mask, 4, _ANCHOR4)
        if _popcount(padded) >= 4:  # fewer cells fill no block
            f2 += _in_full(mask, padded, 2, _ANCHOR2, _BLOCK2)
            f4 += _in_full(mask, padded, 4, _ANCHOR4, _BLOCK4)
            if padded == _ALL:
                f8 += _popcount(mask)
    sums[_T2] += t2
    sums[_T4] += t4
    sums[_T8] += count
    sums[_F2] += f2
    sums[_F4] += f4
    sums[_F8] += f8
    sums[_WARP_SECTORS] += sectors


@njit(cache=True)
def _stamp(stamp, sector, warp_id, read):
    """1 if warp ``warp_id`` reads (``read``) x sector ``sector`` for the first time, else 0;
    branch-free, as ``read`` is unpredictable."""
    old = stamp[sector]
    stamp[sector] = warp_id if read else old
    return read & (old != warp_id)


@njit(cache=True)
def _flush3(masks, touched, count, row_pad, last_col, col_pad, sums):
    """Count the 3×3 blocks of one finished 3-row block row and reset it."""
    f3 = 0
    for k in range(count):
        c = touched[k]
        mask = np.int64(masks[c])
        masks[c] = 0
        padded = mask | row_pad
        if c == last_col:
            padded |= col_pad
        if padded == _FULL3:
            f3 += _popcount(np.uint64(mask))
    sums[_T3] += count
    sums[_F3] += f3


# ---------------------------------------------------------------------------------------------
# The scan: windows of WINDOW_ROWS rows, every row for lengths and diagonals, sampled windows
# also for blocks, x locality and the narrow band.


@njit(cache=True)
def _row_window(indptr, indices, m, lo, hi, flags, hist, sums):
    """Row-length histogram, bandwidth and occupied diagonals of the rows lo..hi-1 of one
    warp."""
    band = sums[_BAND]
    for i in range(lo, hi):
        a, b = indptr[i], indptr[i + 1]
        length = np.int64(b - a)
        if length < hist.size:
            hist[length] += 1
        if length:
            band = max(band, i - np.int64(indices[a]), np.int64(indices[b - 1]) - i)
        base = np.uint64(m - 1 - i)  # diagonal j - i is flag j - i + m - 1
        for p in range(a, b):
            flags[np.uint64(indices[p]) + base] = 1
    sums[_BAND] = band


@njit(cache=True)
def _detail_rows(indptr, indices, m, n, shift, narrow, lo, hi, stamp, masks8, list8, masks3,
                 list3, sums):  # fmt: skip
    """Block, x-sector and narrow-band counters of rows lo..hi-1 (lo a multiple of WARP; hi
    too, or m). 3×3 blocks count only in the whole 3-row block rows inside lo..hi-1.

    A row's cells in one block column are gathered in registers (indices are sorted), then
    ORed into the block row's mask, counted when the block row ends. A sector (4 or 8
    columns) lies inside one 8-column block, so sectors are counted per block, not per entry.
    """
    col_pad8, last8 = _edge_pads(m, n, lo, 8)[1:]
    col_pad3, last3 = _edge_pads(m, n, lo, 3)[1:]
    lo3 = -(-lo // 3) * 3
    hi3 = hi if hi == m else hi // 3 * 3
    row_sectors = near = n8 = n3 = 0
    for i in range(lo, hi):
        a, b = indptr[i], indptr[i + 1]
        in3 = lo3 <= i < hi3
        at8 = np.uint64(8 * (i & 7))
        at3 = 3 * (i % 3)
        c8 = c3 = -1
        bits8 = np.uint64(0)
        bits3 = 0
        for p in range(a, b):
            j = np.int64(indices[p])
            near += abs(j - i) <= narrow
            if j >> 3 != c8:
                if c8 >= 0:
                    n8 = _merge(masks8, list8, n8, c8, bits8 << at8)
                    row_sectors += _sectors(bits8, shift)
                c8 = j >> 3
                bits8 = np.uint64(0)
            bits8 |= _U1 << np.uint64(j & 7)
            if in3:
                q = np.int64(np.uint64(j) // np.uint64(3))
                if q != c3:
                    if c3 >= 0:
                        n3 = _merge(masks3, list3, n3, c3, bits3 << at3)
                    c3 = q
                    bits3 = 0
                bits3 |= 1 << (j - 3 * q)
        if b > a:
            n8 = _merge(masks8, list8, n8, c8, bits8 << at8)
            row_sectors += _sectors(bits8, shift)
            if in3:
                n3 = _merge(masks3, list3, n3, c3, bits3 << at3)
        sums[_SAMPLED_NNZ] += b - a
        if (i & 7) == 7 or i == m - 1:
            first = i & ~7
            row_pad = _edge_pads(m, n, first, 8)[0] if first + 8 > m else np.uint64(0)
            _flush8(masks8, list8, n8, row_pad, last8, col_pad8, stamp, (i >> 5) + 1, shift,
                    sums)  # fmt: skip
            n8 = 0
        if in3:
            sums[_SAMPLED_NNZ3] += b - a
            if i % 3 == 2 or i == m - 1:
                first = i - i % 3
                row_pad = _edge_pads(m, n, first, 3)[0] if first + 3 > m else np.uint64(0)
                _flush3(masks3, list3, n3, np.int64(row_pad), last3, np.int64(col_pad3), sums)
                n3 = 0
    sums[_ROW_SECTORS] += row_sectors
    sums[_NARROW] += near


@njit(cache=True)
def _sectors(bits, shift):
    """x sectors covered by one row's cells ``bits`` (8 bits) of an 8-column block."""
    if shift == 3:
        return 1
    return (bits & np.uint64(0x0F) != 0) + (bits & np.uint64(0xF0) != 0)


@njit(cache=True)
def _scan_windows(indptr, indices, m, n, shift, narrow, selected, first, last, flags, hist,
                  stamp, masks8, list8, masks3, list3, sums):  # fmt: skip
    """One worker's share, windows first..last-1: every row for lengths and diagonals, each
    run of consecutive selected windows for the rest."""
    for w in range(first, last):
        lo = w * WINDOW_ROWS
        _row_window(indptr, indices, m, lo, min(lo + WINDOW_ROWS, m), flags, hist, sums)
    w = first
    while w < last:
        start = w
        while w < last and selected[w]:
            w += 1
        if w > start:
            lo, hi = start * WINDOW_ROWS, min(w * WINDOW_ROWS, m)
            _detail_rows(indptr, indices, m, n, shift, narrow, lo, hi, stamp, masks8, list8,
                         masks3, list3, sums)  # fmt: skip
        else:
            w += 1


def _scan_workers(indptr, indices, m, n, shift, narrow, selected, bounds, sums, hist, flags,
                  stamp, masks8, list8, masks3, list3):  # fmt: skip
    """Run worker t's share of the windows, ``bounds[t]..bounds[t+1]-1``, for every t; each
    worker has its own row of every work array. The serial compilation runs the workers in
    turn on the calling thread, the parallel one on numba's threads."""
    for t in prange(bounds.size - 1):
        _scan_windows(indptr, indices, m, n, shift, narrow, selected, bounds[t], bounds[t + 1],
                      flags[t], hist[t], stamp[t], masks8[t], list8[t], masks3[t], list3[t],
                      sums[t])


scan_serial, scan_parallel = specialisations(_scan_workers)


# ---------------------------------------------------------------------------------------------
# The same counters over the nonzeros, for matrices whose scratch would outweigh them
# (:func:`scratch_fits`): every counter counts distinct keys (block, sector) in groups of rows,
# found by sorting each group's keys; memory in proportion to the largest group's entries.


@njit(cache=True)
def _group_counts(indptr, indices, m, n, lo, hi, rows, cols):
    """Over rows lo..hi-1 cut into groups of ``rows`` rows from lo (lo a multiple of
    ``rows``, hi too or m), the (row group, ``cols``-column group) cells that hold entries:
    how many there are, and the entries of those whose every position inside the matrix is
    stored (a full block)."""
    largest = 0
    for r0 in range(lo, hi, rows):
        largest = max(largest, np.int64(indptr[min(r0 + rows, hi)] - indptr[r0]))
    keys = np.empty(largest, dtype=np.int64)
    touched = full = 0
    for r0 in range(lo, hi, rows):
        a = indptr[r0]
        count = np.int64(indptr[min(r0 + rows, hi)] - a)
        for k in range(count):
            keys[k] = np.int64(indices[a + k]) // cols
        group = keys[:count]
        group.sort()
        height = min(rows, m - r0)
        k = 0
        while k < count:
            start = k
            while k < count and group[k] == group[start]:
                k += 1
            touched += 1
            if k - start == height * min(cols, n - group[start] * cols):
                full += k - start
    return touched, full


@njit(cache=True)
def _run_counters(indptr, indices, m, n, shift, narrow, lo, hi, sums):
    """What :func:`_detail_rows` adds to ``sums`` for the rows lo..hi-1 of a run of drawn
    windows, counted over their entries."""
    for i in range(lo, hi):
        for p in range(indptr[i], indptr[i + 1]):
            sums[_NARROW] += abs(np.int64(indices[p]) - i) <= narrow
    sums[_SAMPLED_NNZ] += indptr[hi] - indptr[lo]
    for b, t, f in ((2, _T2, _F2), (4, _T4, _F4), (8, _T8, _F8)):
        touched, full = _group_counts(indptr, indices, m, n, lo, hi, b, b)
        sums[t] += touched
        sums[f] += full
    sums[_ROW_SECTORS] += _group_counts(indptr, indices, m, n, lo, hi, 1, 1 << shift)[0]
    sums[_WARP_SECTORS] += _group_counts(indptr, indices, m, n, lo, hi, WARP, 1 << shift)[0]
    lo3 = -(-lo // 3) * 3  # 3×3 blocks: the whole 3-row block rows of the run
    hi3 = hi if hi == m else hi // 3 * 3
    if hi3 > lo3:
        touched, full = _group_counts(indptr, indices, m, n, lo3, hi3, 3, 3)
        sums[_T3] += touched
        sums[_F3] += full
        sums[_SAMPLED_NNZ3] += indptr[hi3] - indptr[lo3]


@njit(cache=True)
def nonzero_counters(indptr, indices, m, n, shift, narrow, selected):
    """The counters that the scan's detail pass (:func:`_detail_rows`) sums over the
    ``selected`` windows, with the same values, counted over their entries by
    :func:`_run_counters`, one run of consecutive drawn windows at a time: no scratch array
    over the columns."""
    sums = np.zeros(_N_SUMS, dtype=np.int64)
    w = 0
    while w < selected.size:
        start = w
        while w < selected.size and selected[w]:
            w += 1
        if w > start:
            _run_counters(indptr, indices, m, n, shift, narrow, start * WINDOW_ROWS,
                          min(w * WINDOW_ROWS, m), sums)
        else:
            w += 1
    return sums


@njit(cache=True)
def _diagonal_offsets(indptr, indices, m, offsets):
    """``offsets[p]`` = j − i of entry p (row i, column j); returns the largest |j − i|."""
    band = 0
    for i in range(m):
        for p in range(indptr[i], indptr[i + 1]):
            offsets[p] = np.int64(indices[p]) - i
            band = max(band, abs(offsets[p]))
    return band


def band_and_diagonals(indptr, indices, m) -> tuple[int, int]:
    """The bandwidth and the number of occupied diagonals that the scan counts in its flags
    over the m + n − 1 diagonals, from the entries' sorted offsets j − i (8 bytes a nonzero)."""
    offsets = np.empty(int(indptr[m]), dtype=np.int64)
    band = _diagonal_offsets(indptr, indices, m, offsets)
    offsets.sort()
    return int(band), int(offsets.size and 1 + np.count_nonzero(offsets[1:] != offsets[:-1]))


# ---------------------------------------------------------------------------------------------
# The scan as a whole, and what it returns.


@dataclasses.dataclass(frozen=True)
class Scan:
    """What a scan over a matrix's rows counts, on the host (:func:`scan_rows`) or on the GPU
    (:func:`autospmv._decide.features.device_scan.scan`): the same values either way."""

    sampled: dict[str, float] | None
    """The features estimated from the windows scanned in detail
    (:data:`autospmv._decide.features.extract.SAMPLED_FEATURES`, :func:`sampled_features`), or
    None when no window was."""
    band: int | None
    """The bandwidth: max |i - j| over the stored entries (None: not counted)."""
    diagonals: int | None
    """The number of occupied diagonals j - i (None: not counted)."""
    warp_sum: float
    """The sum over warps of max(len_i) / mean(len_i)."""
    values: np.ndarray
    """The distinct row lengths, ascending."""
    counts: np.ndarray
    """How many rows have each of :attr:`values`."""
    group_sums: dict | None = None
    """The cost quantities' sums over groups of rows, when the scan counted them
    (:attr:`autospmv._decide.features.quantities.CostInputs.group_sums`)."""


def safe_ratio(num, den, empty: float) -> float:
    """num / den, or ``empty`` when den is zero."""
    return num / den if den else empty


def sampled_features(sums) -> dict[str, float]:
    """The sampled features from the counters of the windows scanned in detail (a sequence in
    the order of a worker's ``sums``, as :func:`nonzero_counters` and the GPU's passes count
    them)."""
    nnz = sums[_SAMPLED_NNZ]
    out = {
        "narrow_band_share": safe_ratio(sums[_NARROW], nnz, 0.0),
        "x_sectors_per_nnz_row": safe_ratio(sums[_ROW_SECTORS], nnz, 0.0),
        "x_sectors_per_nnz_warp": safe_ratio(sums[_WARP_SECTORS], nnz, 0.0),
    }
    for b in BLOCK_SIZES:
        counted = sums[_SAMPLED_NNZ3] if b == 3 else nnz  # see _detail_rows
        out[f"block{b}_share"] = safe_ratio(sums[_FULL[b]], counted, 0.0)
        out[f"block{b}_fill"] = safe_ratio(sums[_TOUCHED[b]] * b * b, counted, 1.0)
    return out


def scan_rows(csr, selected: np.ndarray, shift: int, narrow: int, sampled: bool,
              parallel: bool) -> Scan:
    """The :class:`Scan` of a canonical host matrix: every row, and in detail the windows
    flagged in ``selected`` when ``sampled`` (x sectors of ``1 << shift`` columns, a narrow
    band of half-width ``narrow``), on numba's threads when ``parallel``. Counted by workers
    with scratch arrays where they fit (:func:`scratch_fits`), else over the nonzeros."""
    m, n = csr.shape
    indptr, indices = csr.indptr, csr.indices
    longest = row_length_moments(indptr, m, parallel)[1]
    bins = histogram_bins(longest, m)
    csr_bytes = indptr.nbytes + csr.nnz * (indptr.itemsize + np.dtype(csr.dtype).itemsize)
    if scratch_fits(m, n, bins, csr_bytes, sampled):
        threads = numba.get_num_threads() if parallel else 1
        workers = _workers(threads, m, n, bins, csr_bytes, sampled)
        bounds = _split_windows(indptr, m, selected, workers)
        sums, hist, flags, *work = _scratch(workers, m, n, bins, sampled)
        scan = scan_parallel if parallel else scan_serial
        scan(indptr, indices, m, n, shift, narrow, selected, bounds, sums, hist, flags, *work)
        counted = sums.sum(axis=0)
        occupied = flags[0] if workers == 1 else np.bitwise_or.reduce(flags, axis=0)
        band, diagonals = int(sums[:, _BAND].max()), int(np.count_nonzero(occupied))
    else:  # far more columns than nonzeros: the same values, counted over the nonzeros
        hist = None
        counted = (nonzero_counters(indptr, indices, m, n, shift, narrow, selected) if sampled
                   else None)
        band, diagonals = band_and_diagonals(indptr, indices, m)
    values, counts = length_histogram(indptr, m, longest, hist)
    warp_sum = warp_ratio_sum(indptr, m, parallel)
    return Scan(sampled_features(counted.tolist()) if sampled else None, band, diagonals,
                warp_sum, values, counts)
