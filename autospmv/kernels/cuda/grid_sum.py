"""Sums of float64 terms over a whole grid, finished inside the kernel that makes the terms.

A product kernel that owns whole rows can also form ``x · y`` as it writes y (a solver's
``p · Ap``): each thread's term is its row's ``x[i] * y[i]``, and :func:`add_to_grid_sum` adds
the terms of the grid without another pass over x and y and without another launch. A solver's
fused vector steps (:mod:`autospmv._solve.steps`) sum two terms each by :func:`grid_sums`.

Each block adds its terms (shuffles within each warp, then thread 0 over the warps) and
publishes its sums in ``partials``; after a memory fence it takes a ticket from an atomic
counter, and the block that takes the last ticket adds the blocks' sums (each thread a stride
of them, then the block as before) and sets the ticket back to 0 for the next kernel. The
order of every addition is fixed, so the sums are the same from run to run (no floating-point
atomics).

The fence, the ticket and the last block's sum are a tail of a few microseconds that each block
waits through before its place on the multiprocessor frees, so a kernel that sums makes few
blocks, each taking many elements (a grid of one wave: :data:`BLOCKS_PER_SM` blocks per
multiprocessor).

Every thread of the block must call them (they synchronise the block), rows or not; blocks have
at most :data:`MAX_WARPS` warps.
"""

from __future__ import annotations

from numba import cuda, float64, int32

from . import jit

MAX_WARPS = 32
"""The most warps a block calling :func:`add_to_grid_sum` may have (1,024 threads)."""

BLOCKS_PER_SM = 4
"""The grid of a kernel that sums: at most this many blocks per multiprocessor (half of what
can be resident at once), fewer for short vectors. Each thread then takes several elements,
and the last block adds few blocks' sums."""

PER_WARP = 2 * MAX_WARPS
"""Shared float64 of :func:`block_sums`: two per warp."""


@jit(device=True)
def warp_sum(value):
    """The warp's sum of ``value``, in lane 0 (shuffles in a fixed order)."""
    offset = 16
    while offset > 0:
        value += cuda.shfl_down_sync(0xFFFFFFFF, value, offset)
        offset //= 2
    return value


@jit(device=True)
def block_sums(value0, value1, per_warp):
    """The block's sums of ``value0`` and ``value1``, in thread 0 (``per_warp``:
    :data:`PER_WARP` shared float64; the block is synchronised before and after it is
    written)."""
    tid = cuda.threadIdx.x
    value0 = warp_sum(value0)
    value1 = warp_sum(value1)
    if tid % 32 == 0:
        per_warp[tid // 32] = value0
        per_warp[MAX_WARPS + tid // 32] = value1
    cuda.syncthreads()
    total0 = 0.0
    total1 = 0.0
    if tid == 0:
        for warp in range((cuda.blockDim.x + 31) // 32):
            total0 += per_warp[warp]
            total1 += per_warp[MAX_WARPS + warp]
    cuda.syncthreads()  # per_warp is read before it is written again
    return total0, total1


def workspace(blocks: int) -> tuple[int, int]:
    """``(partials, tickets)``: the lengths of the float64 and int32 arrays that
    :func:`grid_sums` needs in a grid of ``blocks`` blocks (the ticket 0)."""
    return 2 * blocks, 1


@jit(device=True)
def grid_sums(term0, term1, partials, tickets):
    """The sums of ``term0`` and ``term1`` over every thread of the grid: ``(True, sum0,
    sum1)`` in thread 0 of the block that finishes last, ``(False, 0, 0)`` in every other
    thread (see the module docstring; ``partials`` and ``tickets`` of the lengths
    :func:`workspace` gives, the ticket 0 before the kernel and after it)."""
    per_warp = cuda.shared.array(PER_WARP, float64)
    last = cuda.shared.array(1, int32)
    tid = cuda.threadIdx.x
    block = cuda.blockIdx.x
    blocks = cuda.gridDim.x
    total0, total1 = block_sums(float64(term0), float64(term1), per_warp)
    if tid == 0:
        partials[2 * block] = total0
        partials[2 * block + 1] = total1
        cuda.threadfence()
        last[0] = cuda.atomic.add(tickets, 0, 1) == blocks - 1
    cuda.syncthreads()
    if last[0] == 0:
        return False, 0.0, 0.0
    cuda.threadfence()
    value0 = 0.0
    value1 = 0.0
    j = tid
    while j < blocks:
        value0 += partials[2 * j]
        value1 += partials[2 * j + 1]
        j += cuda.blockDim.x
    total0, total1 = block_sums(value0, value1, per_warp)
    if tid == 0:
        tickets[0] = 0
        return True, total0, total1
    return False, 0.0, 0.0


@jit(device=True)
def add_to_grid_sum(term, partials, tickets, sums, slot):
    """Add ``term`` of every thread of the grid into ``sums[slot]`` (:func:`grid_sums`)."""
    last, total, unused = grid_sums(term, 0.0, partials, tickets)
    if last:
        sums[slot] = total
