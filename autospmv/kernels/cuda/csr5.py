"""CSR5 kernel on the GPU (Liu & Vinter, ICS 2015): one warp per ω×σ tile.

Work split: warp ``w`` takes tile ``w`` (blocks of 256 threads = 8 tiles). Lane ``l`` reads its
σ nonzeros at ``tile_base + j·ω + l`` — for each j the warp reads 32 consecutive values and
indices (coalesced) — and sums them in registers, closing a segment at every set bit of its
``bit_flag`` word. The lane works in steps of four entries: the four products are loaded first,
then their flags are processed. Closing a segment stores into y, and a load that follows a store
in program order cannot be issued before it (the compiler cannot rule out that y aliases x or the
matrix), so a lane that loaded one entry at a time would wait for a full memory round trip per
entry; with four loads in flight it waits once per step (measured 25–30 % faster on an H200).
Positions past the lane's last entry reload that entry and are not added, so the loads carry no
branches.

Segments that start and end inside the lane are written at once; what the lane summed before its
first flag (its *head*) belongs to a segment opened by an earlier lane, and what it sums after its
last flag (its *tail*) to a segment that may continue in later lanes. A segmented suffix scan of
the heads across the warp (five ``shfl_down``; ``seg_offset`` tells each lane how far its run of
heads reaches, so no flags are exchanged) gives every lane the heads that follow it in its segment,
and the lane adds them to its tail and writes that segment's row once. Rows come from ``tile_ptr``
plus the segment number (``y_offset`` numbers a lane's segments), through ``empty_offset`` in tiles
that contain empty rows. The incomplete last tile is stored in CSR order; its warp runs the same
code with lane ``l`` reading ``tile_base + l·σ + j`` (strided, for that one tile only) and skipping
positions past ``nnz``.

Tiles inside one row (``tile_ptr`` equal for the tile and the next, complete tile) skip the
descriptors: the warp sums the tile, reduces it with five shuffles and adds it to the row with one
atomic. The test is the same for the whole warp, so the branch does not diverge.

Rows that cross tiles: only segment 0 of a tile (which may continue the previous tile's row) and
the tile's last segment (which may continue into the next tile) can be shared with other tiles.
Those two are added with ``atomic.add`` into y, cleared first by ``ZeroY`` (which also gives empty
rows their zeros); every other segment is a whole row owned by this warp and is stored plainly.
So a matvec is two steps: the memset and one kernel launch; no calibration pass is needed.

Weaknesses: a row spread over k tiles receives k atomic adds in no fixed order, so its last bits
may differ from call to call (rows inside one tile are always deterministic). Short rows make
lanes branch at many flags and store many scattered rows. The per-tile overhead — 12 bytes of
descriptors per lane (12/σ bytes per nonzero) and the six shuffles — weighs most at small σ, and
a σ that is not a multiple of 4 wastes part of the lane's last step.
Gathers of x are as irregular as the column pattern, as in every CSR-like kernel.

Warp-uniform discipline: the tile index is the same for the whole warp; warps past the last tile
carry zeros through the shuffles, and no thread leaves before the shuffles of a tile it shares.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...formats.csr5 import OMEGA
from . import jit
from .launch import X, Y, DeviceProgram, Launch, ZeroY

BLOCK = 256
"""Threads per block: eight warps, hence eight tiles."""

_FULL_MASK = 0xFFFFFFFF


@jit(cache=True)
def csr5_kernel(tile_ptr, bit_flag, y_offset, seg_offset, empty_ptr, empty_offset, indices, data,
                x, y, sigma):
    lane = cuda.threadIdx.x % OMEGA
    tile = cuda.grid(1) // OMEGA
    ntiles = tile_ptr.shape[0] - 1
    nnz = data.shape[0]
    zero = data.dtype.type(0)
    # Warps past the last tile read the last tile's descriptors but sum nothing (count = 0).
    active = tile < ntiles
    if not active:
        tile = ntiles - 1
    size = OMEGA * sigma
    base = tile * size
    row0 = tile_ptr[tile]
    dirty = row0 < 0
    if dirty:
        row0 = ~row0
    next_row0 = tile_ptr[tile + 1]
    if next_row0 < 0:
        next_row0 = ~next_row0
    if active and next_row0 == row0 and base + size <= nnz:  # a complete tile inside one row
        k = base + lane
        end = base + size
        acc = zero
        other = zero  # a second accumulator: two independent chains of adds
        while k + 3 * OMEGA < end:
            acc += data[k] * x[indices[k]] + data[k + OMEGA] * x[indices[k + OMEGA]]
            other += (data[k + 2 * OMEGA] * x[indices[k + 2 * OMEGA]]
                      + data[k + 3 * OMEGA] * x[indices[k + 3 * OMEGA]])
            k += 4 * OMEGA
        while k < end:
            acc += data[k] * x[indices[k]]
            k += OMEGA
        acc += other
        offset = OMEGA // 2
        while offset > 0:
            acc += cuda.shfl_down_sync(_FULL_MASK, acc, offset)
            offset //= 2
        if lane == 0:
            cuda.atomic.add(y, row0, acc)
        return
    empty_base = empty_ptr[tile]
    descriptor = tile * OMEGA + lane
    bits = bit_flag[descriptor]
    segment = y_offset[descriptor]
    next_start = seg_offset[descriptor]
    if base + size <= nnz:
        start = base + lane
        stride = OMEGA
        count = sigma
    else:  # the incomplete last tile, in CSR order
        start = base + lane * sigma
        stride = 1
        count = min(sigma, max(0, nnz - start))
    if not active:
        count = 0
    head = zero  # sum before the lane's first flag: belongs to an earlier lane's segment
    starts = False  # whether the lane starts a segment
    acc = zero
    j = 0
    while j < count:
        # Four products loaded before any flag of theirs is handled (see the module docstring);
        # past the lane's last entry the last entry is reloaded and not added.
        k = start + j * stride
        last = start + (count - 1) * stride
        k1 = min(k + stride, last)
        k2 = min(k + 2 * stride, last)
        k3 = min(k + 3 * stride, last)
        p0 = data[k] * x[indices[k]]
        p1 = data[k1] * x[indices[k1]]
        p2 = data[k2] * x[indices[k2]]
        p3 = data[k3] * x[indices[k3]]
        for step in range(4):  # a constant trip count, unrolled: p0..p3 stay in registers
            if j + step < count:
                if (bits >> (j + step)) & 1:
                    if starts:  # a segment that starts and ends in this lane
                        row = row0 + (empty_offset[empty_base + segment] if dirty else segment)
                        if segment == 0:  # may continue the previous tile's row
                            cuda.atomic.add(y, row, acc)
                        else:
                            y[row] = acc
                        segment += 1
                    else:
                        head = acc
                        starts = True
                    acc = zero
                acc += p0
            p0 = p1
            p1 = p2
            p2 = p3
        j += 4
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
    if starts:
        if lane == OMEGA - 1:
            following = zero
        total = acc + following
        row = row0 + (empty_offset[empty_base + segment] if dirty else segment)
        # Segment 0 and the tile's last segment (no later lane starts one) may be shared.
        if segment == 0 or lane + next_start == OMEGA:
            cuda.atomic.add(y, row, total)
        else:
            y[row] = total


def build(fmt, params, arrays) -> DeviceProgram:
    """ZeroY, then one launch of :func:`csr5_kernel` with a warp per tile (none for nnz = 0)."""
    m = fmt.shape[0]
    steps = [ZeroY(m, fmt.dtype.itemsize)] if m else []
    if fmt.ntiles:
        args = [arrays[name] for name in ("tile_ptr", "bit_flag", "y_offset", "seg_offset",
                                          "empty_ptr", "empty_offset", "indices", "data")]
        steps.append(Launch(csr5_kernel, -(-fmt.ntiles * OMEGA // BLOCK), BLOCK,
                            args + [X, Y, np.int32(fmt.sigma)], fmt.dtype))
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps)
