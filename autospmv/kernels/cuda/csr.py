"""CSR kernels on the GPU.

csr_scalar — one thread per row. Each thread walks its row sequentially, so neighbouring threads
read addresses a whole row apart: uncoalesced for rows longer than a few entries, and a warp waits
for its longest row. Good only for very short, regular rows.

csr_vector — a group of ``g`` = 2/4/8/16/32 consecutive threads per row (``g`` chosen from the
mean row length). Lane ``l`` reads entries ``l, l+g, ...`` (coalesced within the group) and the
group reduces with ``shfl_down_sync``. Weak when rows are much shorter than ``g`` (idle lanes) or
when a few rows are very long (one group does all their work).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import jit
from .launch import X, Y, DeviceProgram, Launch

BLOCK = 256


@jit(cache=True)
def csr_scalar_kernel(indptr, indices, data, x, y):
    row = cuda.grid(1)
    if row < y.shape[0]:
        acc = data.dtype.type(0)
        for k in range(indptr[row], indptr[row + 1]):
            acc += data[k] * x[indices[k]]
        y[row] = acc


@jit(cache=True)
def csr_vector_kernel(indptr, indices, data, x, y, log_group):
    # The group size is a power of two, passed as its logarithm: shifts and masks instead of
    # 64-bit integer division, which the GPU emulates in dozens of instructions.
    group = 1 << log_group
    thread = cuda.grid(1)
    row = thread >> log_group
    lane = thread & (group - 1)
    acc = data.dtype.type(0)
    if row < y.shape[0]:
        k = indptr[row] + lane
        end = indptr[row + 1]
        # Four entries per step while a lane has that many left: four loads in flight at once.
        while k + 3 * group < end:
            acc += (data[k] * x[indices[k]] + data[k + group] * x[indices[k + group]]) + (
                data[k + 2 * group] * x[indices[k + 2 * group]]
                + data[k + 3 * group] * x[indices[k + 3 * group]])
            k += 4 * group
        while k < end:
            acc += data[k] * x[indices[k]]
            k += group
    # Every thread of the warp takes part in the reduction, including those without a row.
    offset = group >> 1
    while offset > 0:
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, offset)
        offset >>= 1
    if row < y.shape[0] and lane == 0:
        y[row] = acc


def build_scalar(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    launch = Launch(csr_scalar_kernel, -(-m // BLOCK), BLOCK,
                    [arrays["indptr"], arrays["indices"], arrays["data"], X, Y], fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch] if m else [])


def build_vector(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    group = params["threads_per_row"]
    launch = Launch(csr_vector_kernel, -(-m * group // BLOCK), BLOCK,
                    [arrays["indptr"], arrays["indices"], arrays["data"], X, Y,
                     np.int32(group.bit_length() - 1)],
                    fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch] if m else [])
