"""csr_vector variant: unsigned positions, uint32 columns."""
from __future__ import annotations
import numpy as np
from numba import cuda, uint64
from autospmv.kernels.cuda import jit
from autospmv.kernels.cuda.launch import X, Y, DeviceProgram, Launch, unsigned

BLOCK = 256


@jit(cache=False)
def csr_vector_u_kernel(indptr, indices, data, x, y, log_group):
    group = 1 << log_group
    thread = cuda.grid(1)
    row = thread >> log_group
    lane = thread & (group - 1)
    acc = data.dtype.type(0)
    if row < y.shape[0]:
        g = uint64(group)
        k = uint64(indptr[row]) + uint64(lane)
        end = uint64(indptr[row + 1])
        while k + uint64(3) * g < end:
            acc += (data[k] * x[indices[k]] + data[k + g] * x[indices[k + g]]) + (
                data[k + uint64(2) * g] * x[indices[k + uint64(2) * g]]
                + data[k + uint64(3) * g] * x[indices[k + uint64(3) * g]])
            k += uint64(4) * g
        while k < end:
            acc += data[k] * x[indices[k]]
            k += g
    offset = group >> 1
    while offset > 0:
        acc += cuda.shfl_down_sync(0xFFFFFFFF, acc, offset)
        offset >>= 1
    if row < y.shape[0] and lane == 0:
        y[row] = acc


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    group = params["threads_per_row"]
    launch = Launch(csr_vector_u_kernel, -(-m * group // BLOCK), BLOCK,
                    [arrays["indptr"], unsigned(arrays["indices"]), arrays["data"], X, Y,
                     np.int32(group.bit_length() - 1)], fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch] if m else [])
