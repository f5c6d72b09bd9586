"""CSR5 kernel on the GPU (Liu & Vinter, ICS 2015): one warp per ω×σ tile.

Work split: warp ``w`` takes tile ``w`` (blocks of 128 threads = 4 tiles). Lane ``l`` reads its
σ nonzeros at ``tile_base + j·ω + l`` — for each j the warp reads 32 consecutive values and
indices (coalesced) — and sums them in registers, closing a segment at every set bit of its
``bit_flag`` word. Segments that start and end inside the lane are written at once; what the lane
summed before its first flag (its *head*) belongs to a segment opened by an earlier lane, and what
it sums after its last flag (its *tail*) to a segment that may continue in later lanes. A
segmented suffix scan of the heads across the warp (five ``shfl_down``; ``seg_offset`` tells each
lane how far its run of heads reaches, so no flags are exchanged) gives every lane the heads that
follow it in its segment, and the lane adds them to its tail and writes that segment's row once.
Rows come from ``tile_ptr`` plus the segment number (``y_offset`` numbers a lane's segments),
through ``empty_offset`` in tiles that contain empty rows. The incomplete last tile is stored in
CSR order; its warp runs the same code with lane ``l`` reading ``tile_base + l·σ + j`` (strided,
for that one tile only) and skipping positions past ``nnz``.

Rows that cross tiles: only segment 0 of a tile (which may continue the previous tile's row) and
the tile's last segment (which may continue into the next tile) can be shared with other tiles.
Those two are added with ``atomic.add`` into y, cleared first by ``ZeroY`` (which also gives empty
rows their zeros); every other segment is a whole row owned by this warp and is stored plainly.
So a matvec is two steps: the memset and one kernel launch; no calibration pass is needed.

Weaknesses: a row spread over k tiles receives k atomic adds in no fixed order, so its last bits
may differ from call to call (rows inside one tile are always deterministic). Short rows make
lanes branch at many flags and store many scattered rows. The per-tile overhead — 12 bytes of
descriptors per lane (12/σ bytes per nonzero) and the six shuffles — weighs most at small σ.
Gathers of x are as irregular as the column pattern, as in every CSR-like kernel.

Warp-uniform discipline: the tile index is the same for the whole warp; warps past the last tile
carry zeros through the shuffles, and no thread returns early.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ...formats.csr5 import OMEGA
from .launch import X, Y, DeviceProgram, Launch, ZeroY

BLOCK = 128
"""Threads per block: four warps, hence four tiles."""

_FULL_MASK = 0xFFFFFFFF


@cuda.jit(cache=True)
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
    for j in range(count):
        if (bits >> j) & 1:
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
        k = start + j * stride
        acc += data[k] * x[indices[k]]
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
