"""ELL variant: unsigned slots; x gathered with unsigned columns once they are known not padding."""
from __future__ import annotations
import numpy as np
from numba import cuda, uint32, uint64
from autospmv.kernels.cuda import jit
from autospmv.kernels.cuda.launch import X, Y, DeviceProgram, Launch

BLOCK = 256


@jit(cache=False)
def ell_u_kernel(col, data, width, x, y):
    row = cuda.grid(1)
    m = y.shape[0]
    if row < m:
        acc = data.dtype.type(0)
        step = uint64(m)
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
                acc += (v0 * x[uint32(c0)] + v1 * x[uint32(c1)] + v2 * x[uint32(c2)]
                        + v3 * x[uint32(c3)])
            else:
                if c0 >= 0:
                    acc += v0 * x[uint32(c0)]
                if c1 >= 0:
                    acc += v1 * x[uint32(c1)]
                if c2 >= 0:
                    acc += v2 * x[uint32(c2)]
                k = width
            k += 4
            slot += uint64(4) * step
        while k < width:
            c = col[slot]
            if c < 0:
                break
            acc += data[slot] * x[uint32(c)]
            k += 1
            slot += step
        y[row] = acc


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    steps = [Launch(ell_u_kernel, -(-m // BLOCK), BLOCK,
                    [arrays["col"], arrays["data"], np.int32(fmt.width), X, Y], fmt.dtype)] if m else []
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps)
