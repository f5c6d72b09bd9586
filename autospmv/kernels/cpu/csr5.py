"""CSR5 kernel on the CPU: the GPU's per-tile segmented sum, with lanes run one after another.

Tasks own contiguous runs of tiles (about 16k nonzeros each), so the work per task is the same
whatever the row lengths. Inside a tile, lane ``l`` walks its σ nonzeros (stride ω in the
transposed layout; the tile is a few KiB and stays in L1), closing a segment at every set bit of
its ``bit_flag`` word; ``y_offset`` numbers the lane's segments. A lane's *head* (the entries
before its first flag) belongs to the last segment opened in an earlier lane. One backward pass
over the lanes adds the heads to the segment that owns them; it is the serial form of the GPU's
segmented scan and finds the end of each run of heads itself.
In tiles flagged as holding an empty row's placeholder, entries whose column lies past x are
skipped.

Rows crossing tiles: a row's only segment that is not segment 0 of its tile is the one where the
row starts, so every row receives at most one store. Segment 0 of each tile (which may continue a
row of an earlier tile) goes to a per-tile carry instead, and the carries are added serially after
the parallel loop, in tile order: the result is deterministic and does not depend on the
threading. ``y`` is cleared first (a matrix without nonzeros has no tiles).
"""

from __future__ import annotations

import numba
import numpy as np

from ..._support.jit import specialisations
from ...formats.csr5 import OMEGA
from .. import unsigned
from . import NNZ_PER_TASK, use_parallel


def _csr5(tile_ptr, bit_flag, y_offset, indices, data, x, y, sigma, tiles_per_task):
    y[:] = 0
    columns = np.uint64(x.shape[0])
    ntiles = tile_ptr.shape[0] - 1
    nnz = data.shape[0]
    size = OMEGA * sigma
    zero = y.dtype.type(0)
    carry = np.zeros(ntiles, dtype=y.dtype)
    ntasks = (ntiles + tiles_per_task - 1) // tiles_per_task
    for task in numba.prange(ntasks):
        heads = np.empty(OMEGA, dtype=y.dtype)
        tails = np.empty(OMEGA, dtype=y.dtype)
        last_segment = np.empty(OMEGA, dtype=np.int64)  # -1: the lane starts no segment
        for tile in range(task * tiles_per_task, min(ntiles, (task + 1) * tiles_per_task)):
            base = tile * size
            row0 = tile_ptr[tile]
            placeholders = row0 < 0
            if placeholders:
                row0 = ~row0
            transposed = base + size <= nnz  # the incomplete last tile is in CSR order
            for lane in range(OMEGA):
                bits = bit_flag[tile * OMEGA + lane]
                segment = np.int64(y_offset[tile * OMEGA + lane])
                if transposed:
                    start, stride, count = base + lane, OMEGA, sigma
                else:
                    start, stride = base + lane * sigma, 1
                    count = min(sigma, max(0, nnz - start))
                acc = zero
                head = zero
                opened = False
                for j in range(count):
                    if (bits >> j) & 1:
                        if not opened:
                            head = acc
                            opened = True
                        else:  # a segment that starts and ends in this lane
                            if segment == 0:
                                carry[tile] = acc
                            else:
                                y[row0 + segment] = acc
                            segment += 1
                        acc = zero
                    k = start + j * stride
                    if not placeholders or np.uint64(indices[k]) < columns:
                        acc += data[k] * x[indices[k]]
                if opened:
                    heads[lane] = head
                    tails[lane] = acc
                    last_segment[lane] = segment
                else:
                    heads[lane] = acc
                    last_segment[lane] = -1
            # Backward over the lanes: `following` holds the heads that continue the segment
            # left open by the next lane to the left that starts one.
            following = zero
            for lane in range(OMEGA - 1, -1, -1):
                segment = last_segment[lane]
                if segment < 0:
                    following += heads[lane]
                    continue
                total = tails[lane] + following
                if segment == 0:
                    carry[tile] = total
                else:
                    y[row0 + segment] = total
                following = heads[lane]
    for tile in range(ntiles):
        row0 = tile_ptr[tile]
        y[~row0 if row0 < 0 else row0] += carry[tile]


_csr5_serial, _csr5_parallel = specialisations(_csr5)


def bind(fmt, params, parallel=None):
    """``run(x, y)``: y = A @ x from the CSR5 arrays of ``fmt`` (σ is ``fmt.sigma``)."""
    nnz = fmt.data.shape[0]
    if parallel is None:
        parallel = use_parallel(nnz)
    kernel = _csr5_parallel if parallel else _csr5_serial
    tiles_per_task = max(1, NNZ_PER_TASK // fmt.tile_size)
    arrays = (fmt.tile_ptr, fmt.bit_flag, fmt.y_offset, unsigned(fmt.indices), fmt.data)
    sigma = fmt.sigma
    return lambda x, y: kernel(*arrays, x, y, sigma, tiles_per_task)
