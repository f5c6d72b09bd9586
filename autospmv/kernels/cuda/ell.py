"""ELL kernel on the GPU: one thread per row, reading the column-major slots.

At step ``k`` the threads of a warp read slot ``k`` of 32 consecutive rows, which are consecutive
words of ``col``/``data``: fully coalesced, and no row pointers to load. A thread stops at its
row's first padding slot (``col < 0``), so padding never multiplies ``x``.

Weak where row lengths vary: a warp runs as long as its longest row, and the padding still costs
memory (bounded by the fill limit of :mod:`autospmv.formats.ell`). Reads of ``x`` are gathers, as
in every SpMV kernel.

Slots are indexed at unsigned positions (a plain load, without numba's negative-index test);
the gathers of ``x`` keep signed columns, since negative marks padding and unsigned columns as
well cost the float64 kernel registers.

It is launched as a programmatic dependent launch (:mod:`.grid_dependency`): its blocks are
scheduled while the kernel before it ends (in a solver's iteration, the vector step that forms
x), and wait there before reading x or writing y.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float64, uint64

from . import jit
from .grid_dependency import release_dependents, wait_for_previous
from .grid_sum import add_to_grid_sum
from .launch import X, Y, DeviceProgram, Launch

BLOCK = 256


@jit(device=True)
def ell_row(col, data, width, x, y, row):
    """Row ``row`` of the product, summed in y's dtype (float64 for a float32 matrix too)."""
    acc = y.dtype.type(0)
    # Four slots per step: their loads are independent, so four are in flight at once
    # instead of one (padding sits at the end of a row, so a negative column ends the row).
    # Slots are unsigned: numba tests every signed index for a negative value, and an
    # unsigned one compiles to a plain load.
    step = uint64(y.shape[0])
    k = 0
    slot = uint64(row)
    while k + 4 <= width:
        c0 = col[slot]
        c1 = col[slot + step]
        c2 = col[slot + uint64(2) * step]
        c3 = col[slot + uint64(3) * step]
        v0 = data[slot]
        v1 = data[slot + step]
        v2 = data[slot + uint64(2) * step]
        v3 = data[slot + uint64(3) * step]
        if c3 >= 0:
            acc += v0 * x[c0] + v1 * x[c1] + v2 * x[c2] + v3 * x[c3]
        else:
            if c0 >= 0:
                acc += v0 * x[c0]
            if c1 >= 0:
                acc += v1 * x[c1]
            if c2 >= 0:
                acc += v2 * x[c2]
            k = width
        k += 4
        slot += uint64(4) * step
    while k < width:
        c = col[slot]
        if c < 0:
            break
        acc += data[slot] * x[c]
        k += 1
        slot += step
    return acc


@jit(cache=True)
def ell_kernel(col, data, width, x, y):
    wait_for_previous()  # before x is read or y written: the kernel before may write x or read y
    release_dependents()
    row = cuda.grid(1)
    if row < y.shape[0]:
        y[row] = ell_row(col, data, width, x, y, row)


@jit(cache=True)
def ell_dot_kernel(col, data, width, x, y, partials, tickets, sums, slot):
    """:func:`ell_kernel` that also stores x · y in ``sums[slot]`` (a square matrix;
    :mod:`.grid_sum`), each thread taking rows a grid apart."""
    wait_for_previous()
    release_dependents()
    term = 0.0
    row = cuda.grid(1)
    while row < y.shape[0]:
        value = ell_row(col, data, width, x, y, row)
        y[row] = value
        term += float64(x[row]) * float64(value)
        row += cuda.gridsize(1)
    add_to_grid_sum(term, partials, tickets, sums, slot)


def ell_launch(m: int, width: int, col, data, dtype, dot: tuple = ()) -> Launch:
    """The launch that overwrites all m > 0 entries of ``y`` with the ELL product; with ``dot``
    (``(partials, tickets, sums, slot)``), the same launch of :func:`ell_dot_kernel`."""
    kernel = ell_dot_kernel if dot else ell_kernel
    return Launch(kernel, -(-m // BLOCK), BLOCK, [col, data, np.int32(width), X, Y, *dot],
                  dtype, overlaps_previous=True)


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    if not m:
        return DeviceProgram(fmt.shape, fmt.dtype, arrays, [])
    launch = functools.partial(ell_launch, m, fmt.width, arrays["col"], arrays["data"],
                               fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch()], with_dot=launch)
