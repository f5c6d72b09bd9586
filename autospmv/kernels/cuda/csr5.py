"""CSR5 kernel on the GPU (Liu & Vinter, ICS 2015): one warp per ω×σ tile.

Work split: warp ``w`` takes tile ``w`` (blocks of 256 threads = 8 tiles). Lane ``l`` reads its
σ nonzeros at ``tile_base + j·ω + l`` (for each j the warp reads 32 consecutive values and
indices, coalesced) and sums them in registers, closing a segment at every set bit of its
``bit_flag`` word.

Instructions per nonzero, not bytes, bound this kernel, so the common path is short:

* a lane works in steps of eight entries, loading the eight products before it processes their
  flags (a store to y orders the loads after it, so one load at a time would wait a memory round
  trip per entry); a step without a flag is summed as a tree of adds;
* complete tiles whose σ is a multiple of 8 load at constant offsets from one unsigned position,
  and column indices are read as uint32, so no load carries numba's negative-index test; other
  steps (σ not a multiple of 8, the incomplete last tile) clamp their positions and add zeros;
* at a flag the lane's state is updated by selects and the row stored at an unsigned position;
  the lane's pass is compiled once with and once without placeholder tests (fixed per warp);
* values and columns are read with the L1 eviction hint ``evict_first`` (:mod:`.matrix_loads`),
  so that L1 keeps the pieces of x that nearby tiles gather again rather than the matrix, which
  is read once: in the lanes' passes in float32, in tiles inside one row in every dtype.

Segments: those that start and end inside a lane are whole rows and are written at once. What a
lane sums before its first flag (its *head*) belongs to a segment opened by an earlier lane, what
it sums after its last flag (its *tail*) to one that may continue in later lanes; lane 0 drops the
flag of the tile's first entry, so that segment 0 (which may continue an earlier tile's row) is
its head. A segmented suffix scan of the heads across the warp (five ``shfl_down``; the distance
to the next lane with a flag comes from one ballot of the lanes' flags,
:func:`_next_flagged_lane`) gives every lane the heads that follow it; the lane adds them to its
tail and writes that segment's row once, and lane 0 adds its head, with the heads that follow
it, to segment 0's row. A segment's row is the tile's first row (``tile_ptr``) plus the segment
number (``y_offset`` numbers a lane's segments). An empty row is a placeholder entry
(:mod:`autospmv.formats.csr5`): its segment stores the row's zero, and in tiles flagged as holding
one every product tests its column first, so x is not read there and NaN or Inf in x cannot
reach the row. The incomplete last tile is stored in CSR order; its warp runs the same code with
lane ``l`` reading ``tile_base + l·σ + j`` and skipping positions past ``nnz``.

Tiles inside one row (``tile_ptr`` equal for the tile and the next, complete tile) skip the
descriptors: the warp sums the tile, reduces it with five shuffles and adds it with one atomic
(a warp-uniform branch). Where a block's eight tiles lie in a row that also fills the next
:data:`CONTENDED_ROW_TILES` tiles, the block adds its warps' sums in shared memory first and makes
one atomic, since atomics on one address are served one at a time; rows of tens of tiles keep one
atomic per warp, where the barrier would cost more than it saves.

Clearing y: only segment 0 of a tile and its last segment can be shared with other tiles; those
two are added with ``atomic.add`` and every other row is stored plainly, so only those rows need
a zero first. A product is two steps, the clearing and one launch: ``ZeroY`` (all of y) when y is
small next to the tiles (:func:`clears_tile_ends`) or there are no tiles, else
:func:`csr5_clear_tile_ends`, one thread per tile zeroing its first and last rows, with the
kernel launched to overlap it (:mod:`.grid_dependency`): it waits for the clearing only before
its atomics.

Weaknesses: a row spread over k tiles receives k atomic adds in no fixed order, so its last bits
may differ from call to call (rows inside one tile are deterministic). Short rows give lanes a
flag at almost every position and many scattered rows to store. The per-tile overhead (8 bytes of
descriptors per lane, a ballot and six shuffles) weighs most at small σ, and a σ that is not a
multiple of 8 takes the slower clamped path. Gathers of x are as irregular as the column pattern.

Warp-uniform discipline: the tile index is the same for the whole warp; warps past the last tile
carry zeros through the shuffles, and no thread leaves before the shuffles of a tile it shares.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, uint32, uint64

from ...formats.csr5 import OMEGA, PLACEHOLDER
from .. import unsigned
from . import jit
from .grid_dependency import release_dependents, wait_for_previous
from .launch import X, Y, DeviceProgram, Launch, ZeroY
from .matrix_loads import matrix_entry, streamed_entry

BLOCK = 256
"""Threads per block: eight warps, hence eight tiles."""

STEP = 8
"""Entries a lane loads before it handles their flags (the unrolled step of its pass)."""

_FULL_MASK = 0xFFFFFFFF

TILES_PER_BLOCK = BLOCK // OMEGA

CONTENDED_ROW_TILES = 32
"""A block whose tiles lie in a row that also fills the next this-many tiles adds its eight
tiles' sums to y with one atomic instead of eight (see the module docstring)."""


@jit(cache=True)
def csr5_kernel(tile_ptr, bit_flag, y_offset, indices, data, x, y, sigma, placeholder):
    lane = cuda.threadIdx.x % OMEGA
    tile = cuda.grid(1) // OMEGA
    ntiles = tile_ptr.shape[0] - 1
    nnz = data.shape[0]
    zero = y.dtype.type(0)  # sums in y's dtype: float64 for a float32 matrix too
    # Warps past the last tile read the last tile's descriptors but sum nothing (count = 0).
    active = tile < ntiles
    if not active:
        tile = ntiles - 1
    size = OMEGA * sigma
    base = tile * size
    full = base + size <= nnz
    row0 = tile_ptr[tile]
    placeholders = row0 < 0
    if placeholders:
        row0 = ~row0
    next_row0 = tile_ptr[tile + 1]
    if next_row0 < 0:
        next_row0 = ~next_row0
    # Whether the block's tiles lie in a row that fills the next CONTENDED_ROW_TILES tiles too:
    # the same for the whole block. Loaded with the tile's own bounds, so that the latency of
    # these loads is not added at the end of the tile.
    first_tile = cuda.blockIdx.x * TILES_PER_BLOCK
    contended = tile_ptr[first_tile] == tile_ptr[min(first_tile + CONTENDED_ROW_TILES, ntiles)]
    if active and full and next_row0 == row0:  # a complete tile inside one row (no placeholder)
        # Unsigned positions index without numba's negative-index test.
        k = uint64(base + lane)
        stop = uint64(base + size)
        acc = zero
        other = zero  # a second accumulator: two independent chains of adds
        while k + uint64(7 * OMEGA) < stop:  # eight loads in flight per lane
            acc += (_streamed_product(data, indices, x, k)
                    + _streamed_product(data, indices, x, k + uint64(OMEGA))
                    + _streamed_product(data, indices, x, k + uint64(2 * OMEGA))
                    + _streamed_product(data, indices, x, k + uint64(3 * OMEGA)))
            other += (_streamed_product(data, indices, x, k + uint64(4 * OMEGA))
                      + _streamed_product(data, indices, x, k + uint64(5 * OMEGA))
                      + _streamed_product(data, indices, x, k + uint64(6 * OMEGA))
                      + _streamed_product(data, indices, x, k + uint64(7 * OMEGA)))
            k += uint64(8 * OMEGA)
        while k < stop:
            acc += _streamed_product(data, indices, x, k)
            k += uint64(OMEGA)
        acc += other
        offset = OMEGA // 2
        while offset > 0:
            acc += cuda.shfl_down_sync(_FULL_MASK, acc, offset)
            offset //= 2
        wait_for_previous()  # the rows the clearing zeroes, before adding to them
        # Every warp of a `contended` block takes this path (tile_ptr[ntiles] = m is no row),
        # so the barrier below is reached by the whole block or by none of it.
        if contended:
            sums = cuda.shared.array(TILES_PER_BLOCK, y.dtype)
            if lane == 0:
                sums[cuda.threadIdx.x // OMEGA] = acc
            cuda.syncthreads()
            if cuda.threadIdx.x == 0:
                total = zero
                for w in range(TILES_PER_BLOCK):
                    total += sums[w]
                cuda.atomic.add(y, row0, total)
            return
        if lane == 0:
            cuda.atomic.add(y, row0, acc)
        return
    descriptor = tile * OMEGA + lane
    bits = bit_flag[descriptor]
    segment = y_offset[descriptor]
    if lane == 0:
        # Segment 0 may continue an earlier tile's row: lane 0 sums it as a head (its flag is
        # dropped) and adds it to y with an atomic after the scan, so that every segment closed
        # inside a lane is a whole row, stored plainly.
        bits &= ~uint32(1)
        segment = 1
    # Complete tiles are transposed: the lane's j-th entry is at base + j·ω + lane. The
    # incomplete last tile is in CSR order: base + lane·σ + j, while below nnz.
    if full:
        start = base + lane
        stride = OMEGA
        count = sigma
    else:
        start = base + lane * sigma
        stride = 1
        count = min(sigma, max(0, nnz - start))
    if not active:
        count = 0
    whole = full and sigma % STEP == 0
    # `placeholders` is the same for the whole warp; each call is compiled with it constant.
    if placeholders:
        head, acc, starts, segment = _lane_segments(
            indices, data, x, y, bits, start, stride, count, whole, row0, segment, True,
            placeholder)
    else:
        head, acc, starts, segment = _lane_segments(
            indices, data, x, y, bits, start, stride, count, whole, row0, segment, False,
            placeholder)
    next_start = _next_flagged_lane(starts, lane)
    # From here on `acc` is the lane's tail. `reach`: how many following lanes' heads join this
    # lane's head in the scan (none after a lane that starts a segment).
    reach = 0
    if not starts:
        head = acc  # the whole lane continues an earlier lane's segment
        reach = min(next_start, OMEGA - 1 - lane)
    # Segmented suffix scan: afterwards `head` = heads of this lane up to the end of its run
    # (the next lane that starts a segment, included, or the last lane).
    offset = 1
    while offset < OMEGA:
        other = cuda.shfl_down_sync(_FULL_MASK, head, offset)
        if offset <= reach:
            head += other
        offset *= 2
    following = cuda.shfl_down_sync(_FULL_MASK, head, 1)
    wait_for_previous()  # the rows the clearing zeroes, before adding to them
    if starts:
        if lane == OMEGA - 1:
            following = zero
        total = acc + following
        row = uint64(row0 + segment)
        if lane + next_start == OMEGA:  # the tile's last segment: may continue in the next
            cuda.atomic.add(y, row, total)
        else:
            y[row] = total
    if lane == 0 and active:  # segment 0, from lane 0's head and the heads that follow it
        cuda.atomic.add(y, uint64(row0), head)


@cuda.jit(device=True, inline=True)
def _next_flagged_lane(starts, lane):
    """The distance from ``lane`` to the next lane of the warp that ``starts`` a segment, or
    ``OMEGA - lane`` when none does: one ballot of the lanes' flags, the lanes after this one
    shifted down, a stop bit for lane ``OMEGA`` added, and the lowest set bit found."""
    flagged = uint32(cuda.ballot_sync(_FULL_MASK, starts))
    later = ((flagged >> uint32(lane)) >> uint32(1)) | (uint32(1) << uint32(OMEGA - 1 - lane))
    return cuda.ffs(later)


@cuda.jit(device=True, inline=True)
def _lane_segments(indices, data, x, y, bits, start, stride, count, whole, row0, segment,
                   holds, placeholder):
    """One lane's pass over its ``count`` entries from ``start`` (``stride`` apart): stores the
    segments that start and end in the lane into y and returns ``(head, tail, starts,
    segment)``: the sum before its first flag, the sum after its last, whether it has a flag,
    and the number of its last segment.

    Whole steps (``whole``: a complete tile with σ a multiple of 8) load with unsigned
    positions at constant offsets; any other step clamps its positions to the lane's last entry
    and zeroes the products past it (their flag bits are clear, so they only add zeros). When
    the tile ``holds`` placeholders, products test their column (:func:`_product`). At a
    flag the segment closes (a plain store of a whole row) or, at the lane's first flag,
    becomes its head; the lane's state is updated by selects, so only the store is
    conditional."""
    zero = y.dtype.type(0)
    head = zero
    starts = False
    acc = zero
    k = uint64(start)
    last = start + (count - 1) * stride
    j = 0
    while j < count:
        if whole:
            q = k + uint64(j * OMEGA)
            p0 = _product(data, indices, x, q, holds, placeholder)
            p1 = _product(data, indices, x, q + uint64(OMEGA), holds, placeholder)
            p2 = _product(data, indices, x, q + uint64(2 * OMEGA), holds, placeholder)
            p3 = _product(data, indices, x, q + uint64(3 * OMEGA), holds, placeholder)
            p4 = _product(data, indices, x, q + uint64(4 * OMEGA), holds, placeholder)
            p5 = _product(data, indices, x, q + uint64(5 * OMEGA), holds, placeholder)
            p6 = _product(data, indices, x, q + uint64(6 * OMEGA), holds, placeholder)
            p7 = _product(data, indices, x, q + uint64(7 * OMEGA), holds, placeholder)
        else:
            q0 = start + j * stride
            q1 = min(q0 + stride, last)
            q2 = min(q0 + 2 * stride, last)
            q3 = min(q0 + 3 * stride, last)
            q4 = min(q0 + 4 * stride, last)
            q5 = min(q0 + 5 * stride, last)
            q6 = min(q0 + 6 * stride, last)
            q7 = min(q0 + 7 * stride, last)
            p0 = _product(data, indices, x, q0, holds, placeholder)
            p1 = _product(data, indices, x, q1, holds, placeholder) if j + 1 < count else zero
            p2 = _product(data, indices, x, q2, holds, placeholder) if j + 2 < count else zero
            p3 = _product(data, indices, x, q3, holds, placeholder) if j + 3 < count else zero
            p4 = _product(data, indices, x, q4, holds, placeholder) if j + 4 < count else zero
            p5 = _product(data, indices, x, q5, holds, placeholder) if j + 5 < count else zero
            p6 = _product(data, indices, x, q6, holds, placeholder) if j + 6 < count else zero
            p7 = _product(data, indices, x, q7, holds, placeholder) if j + 7 < count else zero
        flags = (bits >> j) & 0xFF
        if flags == 0:  # no row starts in this step: a tree of adds
            acc += ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
        else:
            for step in range(STEP):  # a constant trip count, unrolled: p0..p7 in registers
                flag = (flags >> step) & 1 != 0
                if flag and starts:  # a segment that starts and ends in this lane: a whole row
                    y[uint64(row0 + segment)] = acc
                    segment += 1
                if flag and not starts:
                    head = acc
                starts = starts or flag
                if flag:
                    acc = zero
                acc += p0
                p0 = p1
                p1 = p2
                p2 = p3
                p3 = p4
                p4 = p5
                p5 = p6
                p6 = p7
        j += STEP
    return head, acc, starts, segment


@cuda.jit(device=True, inline=True)
def _product(data, indices, x, q, holds, placeholder):
    """``data[q] * x[indices[q]]``; in a tile that ``holds`` placeholders, zero at an empty row's
    placeholder entry (column ``placeholder``, of the indices' type), without reading x there."""
    value, column = matrix_entry(data, indices, q)
    if holds:
        real = column != placeholder
        product = value * x[column if real else indices.dtype.type(0)]
        return product if real else data.dtype.type(0)
    return value * x[column]


@cuda.jit(device=True, inline=True)
def _streamed_product(data, indices, x, q):
    """``data[q] * x[indices[q]]`` in a tile inside one row (no placeholder), the entry read by
    :func:`~.matrix_loads.streamed_entry`."""
    value, column = streamed_entry(data, indices, q)
    return value * x[column]


@jit(cache=True)
def csr5_clear_tile_ends(tile_ptr, bit_flag, y_offset, y):
    """y = 0 on the rows :func:`csr5_kernel` adds to with atomics, and on no other: thread t
    clears tile t's first row (its segment 0) and its last row (its last segment: the first row
    plus the tile's segments, ``y_offset`` and the flags of its last lane, less one). The kernel
    stores every other row plainly, so it may start while this one runs
    (:mod:`.grid_dependency`): it waits for this kernel only before its atomics."""
    release_dependents()
    tile = cuda.grid(1)
    ntiles = tile_ptr.shape[0] - 1
    if tile < ntiles:
        first = tile_ptr[tile]
        if first < 0:
            first = ~first
        last_lane = tile * OMEGA + OMEGA - 1
        segments = y_offset[last_lane] + cuda.popc(bit_flag[last_lane])
        y[first] = 0
        y[first + segments - 1] = 0


CLEAR_ENDS_FROM = 4
"""y's bytes over the bytes that :func:`csr5_clear_tile_ends` touches (two 32-byte sectors per
tile) from which it replaces clearing all of y (:func:`clears_tile_ends`)."""


def clears_tile_ends(fmt) -> bool:
    """Whether y is cleared at the tiles' ends only (:func:`csr5_clear_tile_ends`) rather than
    in full: when there are tiles and y holds at least :data:`CLEAR_ENDS_FROM` times the bytes
    of the two sectors per tile that the clearing kernel writes (below, the tiles are short or
    hold few rows, and one pass over y costs less than a launch over the tiles).
    """
    y_bytes = fmt.shape[0] * fmt.dtype.itemsize
    return fmt.ntiles > 0 and y_bytes >= CLEAR_ENDS_FROM * 2 * 32 * fmt.ntiles


def build(fmt, params, arrays) -> DeviceProgram:
    """One launch of :func:`csr5_kernel` with a warp per tile (none for nnz = 0), after y is
    cleared (see :func:`clears_tile_ends`)."""
    m = fmt.shape[0]
    steps = []
    overlaps = clears_tile_ends(fmt)
    if overlaps:
        steps.append(Launch(csr5_clear_tile_ends, -(-fmt.ntiles // BLOCK), BLOCK,
                            [arrays[name] for name in ("tile_ptr", "bit_flag", "y_offset")] + [Y],
                            fmt.dtype))
    elif m:
        steps.append(ZeroY(m, fmt.dtype.itemsize))
    if fmt.ntiles:
        args = [arrays[name] for name in ("tile_ptr", "bit_flag", "y_offset")]
        indices = unsigned(arrays["indices"])
        # The placeholder column as the kernel reads it: 0xFFFFFFFF of a uint32 view, or -1.
        placeholder = unsigned(np.full(1, PLACEHOLDER, dtype=fmt.indices.dtype))[0]
        args += [indices, arrays["data"]]
        steps.append(Launch(csr5_kernel, -(-fmt.ntiles * OMEGA // BLOCK), BLOCK,
                            args + [X, Y, np.int32(fmt.sigma), placeholder], fmt.dtype,
                            overlaps_previous=overlaps))
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps)
