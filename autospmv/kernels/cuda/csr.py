"""CSR kernels on the GPU.

csr_scalar — one thread per row. Each thread walks its row sequentially, so neighbouring threads
read addresses a whole row apart: uncoalesced for rows longer than a few entries, and a warp waits
for its longest row. Good only for very short, regular rows.

csr_vector — a group of ``g`` = 2/4/8/16/32 consecutive threads per row (``g`` chosen from the
mean row length). Lane ``l`` reads entries ``l, l+g, ...`` (coalesced within the group) and the
group reduces with ``shfl_down_sync``. Weak when rows are much shorter than ``g`` (idle lanes) or
when a few rows are very long (one group does all their work).

Both kernels index with unsigned positions and uint32 columns: numba tests every signed index
for a negative value, while an unsigned one compiles to a plain load.
Both are launched as programmatic dependent launches (:mod:`.grid_dependency`): their blocks are
scheduled while the kernel before them ends (in a solver's iteration, the vector step that forms
x), and wait there before reading x or writing y.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float64, uint64

from .. import unsigned
from . import jit
from .grid_dependency import release_dependents, wait_for_previous
from .grid_sum import add_to_grid_sum
from .launch import X, Y, DeviceProgram, Launch

BLOCK = 256

BLOCKS_PER_SM = 8
"""csr_vector's launch bound: eight blocks of :data:`BLOCK` threads per SM, which holds it to
32 registers a thread (full occupancy); the float64 kernel with unsigned positions would
otherwise take 40 and lose occupancy."""


@jit(device=True)
def csr_scalar_row(indptr, indices, data, x, y, row):
    """Row ``row`` of the product, summed in y's dtype (float64 for a float32 matrix too)."""
    acc = y.dtype.type(0)
    # Unsigned positions (and uint32 columns, see build_scalar): numba tests every signed
    # index for a negative value, while an unsigned one compiles to a plain load. Four
    # entries per step while the row has that many left, so that four loads are in flight;
    # the adds keep the row's order.
    k = uint64(indptr[row])
    end = uint64(indptr[row + 1])
    while k + uint64(4) <= end:
        p0 = data[k] * x[indices[k]]
        p1 = data[k + uint64(1)] * x[indices[k + uint64(1)]]
        p2 = data[k + uint64(2)] * x[indices[k + uint64(2)]]
        p3 = data[k + uint64(3)] * x[indices[k + uint64(3)]]
        acc = acc + p0 + p1 + p2 + p3
        k += uint64(4)
    while k < end:
        acc += data[k] * x[indices[k]]
        k += uint64(1)
    return acc


@jit(cache=True)
def csr_scalar_kernel(indptr, indices, data, x, y):
    wait_for_previous()  # before x is read or y written: the kernel before may write x or read y
    release_dependents()
    row = cuda.grid(1)
    if row < y.shape[0]:
        y[row] = csr_scalar_row(indptr, indices, data, x, y, row)


@jit(cache=True)
def csr_scalar_dot_kernel(indptr, indices, data, x, y, partials, tickets, sums, slot):
    """:func:`csr_scalar_kernel` that also stores x · y in ``sums[slot]`` (a square matrix;
    :mod:`.grid_sum`), each thread taking rows a grid apart."""
    wait_for_previous()
    release_dependents()
    term = 0.0
    row = cuda.grid(1)
    while row < y.shape[0]:
        value = csr_scalar_row(indptr, indices, data, x, y, row)
        y[row] = value
        term += float64(x[row]) * float64(value)
        row += cuda.gridsize(1)
    add_to_grid_sum(term, partials, tickets, sums, slot)


@jit(cache=True, launch_bounds=(BLOCK, BLOCKS_PER_SM))
def csr_vector_kernel(indptr, indices, data, x, y, log_group):
    wait_for_previous()  # before x is read or y written: the kernel before may write x or read y
    release_dependents()
    # The group size is a power of two, passed as its logarithm: shifts and masks instead of
    # 64-bit integer division, which the GPU emulates in dozens of instructions.
    group = 1 << log_group
    thread = cuda.grid(1)
    row = thread >> log_group
    lane = thread & (group - 1)
    acc = y.dtype.type(0)
    if row < y.shape[0]:
        # Unsigned positions and (uint32) columns, as in csr_scalar_kernel.
        g = uint64(group)
        k = uint64(indptr[row]) + uint64(lane)
        end = uint64(indptr[row + 1])
        # Four entries per step while a lane has that many left: four loads in flight at once.
        while k + uint64(3) * g < end:
            acc += (data[k] * x[indices[k]] + data[k + g] * x[indices[k + g]]) + (
                data[k + uint64(2) * g] * x[indices[k + uint64(2) * g]]
                + data[k + uint64(3) * g] * x[indices[k + uint64(3) * g]])
            k += uint64(4) * g
        while k < end:
            acc += data[k] * x[indices[k]]
            k += g
    # Every thread of the warp takes part in the reduction, including those without a row.
    offset = group >> 1
    while offset > 0:
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, offset)
        offset >>= 1
    if row < y.shape[0] and lane == 0:
        y[row] = acc


def csr_scalar_launch(m: int, indptr, indices, data, dtype, dot: tuple = ()) -> Launch:
    """The launch that overwrites all m > 0 entries of ``y`` with the csr_scalar product; with
    ``dot`` (``(partials, tickets, sums, slot)``), the same launch of
    :func:`csr_scalar_dot_kernel`."""
    kernel = csr_scalar_dot_kernel if dot else csr_scalar_kernel
    return Launch(kernel, -(-m // BLOCK), BLOCK, [indptr, indices, data, X, Y, *dot], dtype,
                  overlaps_previous=True)


def build_scalar(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    if not m:
        return DeviceProgram(fmt.shape, fmt.dtype, arrays, [])
    launch = functools.partial(csr_scalar_launch, m, arrays["indptr"],
                               unsigned(arrays["indices"]), arrays["data"], fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch()], with_dot=launch)


def build_vector(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    group = params["threads_per_row"]
    launch = Launch(csr_vector_kernel, -(-m * group // BLOCK), BLOCK,
                    [arrays["indptr"], unsigned(arrays["indices"]), arrays["data"], X, Y,
                     np.int32(group.bit_length() - 1)],
                    fmt.dtype, overlaps_previous=True)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch] if m else [])
