"""JDS kernel on the GPU: one thread per sorted row, walking the jagged diagonals.

Thread ``i`` handles sorted row ``i`` (original row ``perm[i]``): entry ``d`` of that row is at
``jd_ptr[d] + i``, so a warp reads consecutive words in every diagonal (coalesced), and
``jd_ptr[d]`` is one broadcast load per warp and step. The thread stops at the first diagonal too
short to reach it, then writes ``y[perm[i]]``; rows past the last diagonal write 0.

Sorting by length gives each warp rows of similar length (little idle time, bounded by the fill
limit of :mod:`autospmv.formats.jds`). Weak points: the scattered write through ``perm``, one
extra ``jd_ptr`` load per step, and a few very long rows, which keep the first warp busy alone.
Positions are unsigned, so loads carry no negative-index test.

It is launched as a programmatic dependent launch (:mod:`.grid_dependency`): its blocks are
scheduled while the kernel before it ends (in a solver's iteration, the vector step that forms
x), and wait there before reading x or writing y.
"""

from __future__ import annotations

import functools

from numba import cuda, float64, uint64

from .. import unsigned
from . import jit
from .grid_dependency import release_dependents, wait_for_previous
from .grid_sum import add_to_grid_sum
from .launch import X, Y, DeviceProgram, Launch

BLOCK = 256


@jit(device=True)
def jds_row(jd_ptr, col, data, x, y, i):
    """Sorted row ``i`` of the product, summed in y's dtype (float64 for a float32 matrix
    too)."""
    acc = y.dtype.type(0)
    # Unsigned positions and (uint32) columns: plain loads, without numba's test of a
    # signed index for a negative value.
    row = uint64(i)
    start = uint64(jd_ptr[0])
    for d in range(jd_ptr.shape[0] - 1):
        end = uint64(jd_ptr[d + 1])
        if end - start <= row:
            break
        k = start + row
        acc += data[k] * x[col[k]]
        start = end
    return acc


@jit(cache=True)
def jds_kernel(perm, jd_ptr, col, data, x, y):
    wait_for_previous()  # before x is read or y written: the kernel before may write x or read y
    release_dependents()
    i = cuda.grid(1)
    if i < y.shape[0]:
        y[perm[uint64(i)]] = jds_row(jd_ptr, col, data, x, y, i)


@jit(cache=True)
def jds_dot_kernel(perm, jd_ptr, col, data, x, y, partials, tickets, sums, slot):
    """:func:`jds_kernel` that also stores x · y in ``sums[slot]`` (a square matrix;
    :mod:`.grid_sum`), each thread taking rows a grid apart."""
    wait_for_previous()
    release_dependents()
    term = 0.0
    i = cuda.grid(1)
    while i < y.shape[0]:
        value = jds_row(jd_ptr, col, data, x, y, i)
        row = perm[uint64(i)]
        y[row] = value
        term += float64(x[row]) * float64(value)
        i += cuda.gridsize(1)
    add_to_grid_sum(term, partials, tickets, sums, slot)


def jds_launch(m: int, perm, jd_ptr, col, data, dtype, dot: tuple = ()) -> Launch:
    """The launch that overwrites all m > 0 entries of ``y`` with the JDS product; with ``dot``
    (``(partials, tickets, sums, slot)``), the same launch of :func:`jds_dot_kernel`."""
    kernel = jds_dot_kernel if dot else jds_kernel
    return Launch(kernel, -(-m // BLOCK), BLOCK, [perm, jd_ptr, col, data, X, Y, *dot], dtype,
                  overlaps_previous=True)


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    if not m:
        return DeviceProgram(fmt.shape, fmt.dtype, arrays, [])
    launch = functools.partial(jds_launch, m, arrays["perm"], arrays["jd_ptr"],
                               unsigned(arrays["col"]), arrays["data"], fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch()], with_dot=launch)
