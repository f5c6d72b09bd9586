"""CSR5 kernel on the GPU (Liu & Vinter, ICS 2015): one warp per ω×σ tile.

Work split: warp ``w`` takes tile ``w`` (blocks of 256 threads = 8 tiles). Lane ``l`` reads its
σ nonzeros at ``tile_base + j·ω + l`` — for each j the warp reads 32 consecutive values and
indices (coalesced) — and sums them in registers, closing a segment at every set bit of its
``bit_flag`` word. The lane works in steps of eight entries: the eight products are loaded first,
then their flags are processed. Closing a segment stores into y, and a load that follows a store
in program order cannot be issued before it (the compiler cannot rule out that y aliases x or the
matrix), so a lane that loaded one entry at a time would wait for a full memory round trip per
entry; with eight loads in flight it waits once per step. A step whose eight flag bits are all
clear (no row starts in it: most steps of rows longer than a few dozen entries) is summed as a
tree of adds without testing bits one by one.

With eight loads in flight, instructions per nonzero, not bytes, limited the float32 kernel
(Nsight Compute on an H100: SM throughput 65–77 %, DRAM 52–57 %; see
``benchmarks/results/kernel-profile-h100-2026-11-23.md``), so the common path is kept short:
complete tiles whose σ is a multiple of 8 load at constant offsets from one unsigned position
(numba tests every signed index for a negative value; unsigned ones compile to plain loads), and
column indices are read as uint32 so the gathers of x carry no such test either.
Other steps (σ not a multiple of 8, the incomplete last tile) clamp their positions to the lane's
last entry and add zeros past it, so the loads carry no branches. At a flag, the lane's state is
updated by selects and the row is stored plainly at an unsigned position; whether the tile holds
a placeholder (below) is fixed for the warp, and the lane's pass is compiled once for each case.
That cut a flag's handling from about 58 instructions to about 21 (sm_90, float32) and made the
kernel 1–2 % faster back-to-back in geometric mean, up to 7 % on short-row matrices
(``benchmarks/results/csr5-flags-2026-11-26.md``). With counters, the float32 kernel on short
rows now waits on memory (long-scoreboard stalls, about half the issue slots used) with 32 of
the SM's 64 warps resident (56 registers); more loads in flight per warp or smaller blocks did
not make it faster there.

Values and columns are read with the L1 eviction hint ``evict_first``
(:mod:`.matrix_loads`), so that the SM's L1 cache keeps the pieces of x that nearby tiles gather
again rather than the matrix, which is read once: in the lanes' passes in float32 only
(:func:`~.matrix_loads.matrix_entry`), in tiles inside one row in every dtype
(:func:`~.matrix_loads.streamed_entry`). Back-to-back at 2·10⁷ nonzeros on an H200, float32
csr5 ran 4 % faster with it in geometric mean (up to 12 %, on PILOT87 grown), and the kernel
needs 48 registers instead of 56; in float64 the lanes' passes ran 1 % faster with plain loads
(``benchmarks/results/csr5-evict-first-2026-11-27.md``), while the tiles inside one row ran 3 %
faster with the hint on FIT2D grown and 4 % on the dense_rows family
(``benchmarks/results/csr5-ballot-2026-11-27.md``).

Segments that start and end inside the lane are written at once; what the lane summed before its
first flag (its *head*) belongs to a segment opened by an earlier lane, and what it sums after its
last flag (its *tail*) to a segment that may continue in later lanes. Lane 0 drops the flag of
the tile's first entry, so that segment 0 (which may continue an earlier tile's row) is its
head: every segment closed inside a lane is then a whole row. A segmented suffix scan of
the heads across the warp (five ``shfl_down``; how far each lane's run of heads reaches, the
distance to the next lane with a flag, comes from one ballot of the lanes' flags:
:func:`_next_flagged_lane`) gives every lane the heads that follow it in its segment, and the
lane adds them to its tail and writes that segment's row once; lane 0 adds its head, with the
heads that follow it, to segment 0's row. The ballot replaced a third descriptor word per lane
(4 bytes, stored): back-to-back at 2·10⁷ nonzeros, float32 csr5 ran 2 % faster with it on an
H200 and an H100 in geometric mean (up to 6 %), float64 equal
(``benchmarks/results/csr5-ballot-2026-11-27.md``). A segment's row is the tile's first row
(``tile_ptr``) plus the segment number (``y_offset`` numbers a lane's segments). An empty row is
a placeholder entry (:mod:`autospmv.formats.csr5`): its segment stores the row's zero, and in
tiles flagged as holding one, every product tests its column first (the placeholder column is
read as a uint32 0xFFFFFFFF, or -1 for int64 indices, and compared in the indices' own type):
x is not read there and the product is zero, so NaN or Inf in x cannot reach the row. The
incomplete last tile is stored in CSR order; its warp runs the same code with lane ``l`` reading
``tile_base + l·σ + j`` (strided, for that one tile only) and skipping positions past ``nnz``.

Tiles inside one row (``tile_ptr`` equal for the tile and the next, complete tile) skip the
descriptors: the warp sums the tile, reduces it with five shuffles and adds it to the row with one
atomic. The test is the same for the whole warp, so the branch does not diverge. A row that spans
thousands of tiles would have thousands of warps, all in flight together, add to one address of
y, and atomics on one address are served one at a time; so where a block's eight tiles lie in a
row that also fills the next :data:`CONTENDED_ROW_TILES` tiles, the block adds its warps' sums in
shared memory and makes one atomic. Back-to-back at 2·10⁷ nonzeros, that made the dense_rows
family (eight rows of 1.25·10⁶ entries) 19 % (float32) and 10 % (float64) faster on an H200, 14 %
and 7 % on an H100 (``benchmarks/results/csr5-contended-rows-2026-11-27.md``). Rows of tens of
tiles (FIT2D's) keep one atomic per warp: there the barrier cost more than the atomics it saved.

Rows that cross tiles: only segment 0 of a tile (which may continue the previous tile's row) and
the tile's last segment (which may continue into the next tile) can be shared with other tiles.
Those two are added with ``atomic.add`` into y; every other segment is a whole row owned by this
warp and is stored plainly. So only those rows need a zero first. A matvec is two steps, the
clearing and one kernel launch; no calibration pass is needed. The clearing is one of:

* ``ZeroY``, all of y: when y is small next to the tiles (see :func:`clears_tile_ends`), or the
  matrix has no nonzeros (no tiles);
* :func:`csr5_clear_tile_ends`, one thread per tile, which zeroes the tile's first and last rows
  and no other: where y has many rows per tile, this saves most of a write of y per call
  (``benchmarks/results/csr5-clear-2026-11-26.md``). Since the kernel stores every other row
  plainly, it is launched to overlap this one (:mod:`.grid_dependency`): it starts while the
  clearing runs and waits for it only before its atomics. Back-to-back at 2·10⁷ nonzeros on
  an H100 and an H200, that made csr5 1–4 % faster where the tile ends are cleared, against
  the kernel launched after the clearing had ended
  (``benchmarks/results/csr5-overlap-2026-11-27.md``).

Weaknesses: a row spread over k tiles receives k atomic adds in no fixed order, so its last bits
may differ from call to call (rows inside one tile are always deterministic). Short rows give
lanes a flag at almost every position and many scattered rows to store. The per-tile overhead —
8 bytes of descriptors per lane (8/σ bytes per nonzero), a ballot and six shuffles — weighs
most at small σ, and a σ that is not a multiple of 8 takes the slower clamped path.
Gathers of x are as irregular as the column pattern, as in every CSR-like kernel.

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
    of the two sectors per tile that the clearing kernel writes.

    Measured back-to-back at 2·10⁷ nonzeros on an H200 (``csr5-clear-2026-11-26.md``): on the
    matrices at 4 or more, the kernel with the clearing ran 0.7–5.8 % faster than with all of y
    cleared (most in float64, where y is twice the bytes); at 2.7 or less, where the tiles are
    short (σ = 8) or hold few rows, 0.2–2 % slower.
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
