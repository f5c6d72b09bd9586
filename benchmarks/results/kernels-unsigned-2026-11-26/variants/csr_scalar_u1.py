"""csr_scalar variant: unsigned positions, uint32 columns, one entry per step."""
from __future__ import annotations
from numba import cuda, uint64
from autospmv.kernels.cuda import jit
from autospmv.kernels.cuda.launch import X, Y, DeviceProgram, Launch, unsigned

BLOCK = 256


@jit(cache=False)
def csr_scalar_u1_kernel(indptr, indices, data, x, y):
    row = cuda.grid(1)
    if row < y.shape[0]:
        acc = data.dtype.type(0)
        k = uint64(indptr[row])
        end = uint64(indptr[row + 1])
        while k < end:
            acc += data[k] * x[indices[k]]
            k += uint64(1)
        y[row] = acc


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    launch = Launch(csr_scalar_u1_kernel, -(-m // BLOCK), BLOCK,
                    [arrays["indptr"], unsigned(arrays["indices"]), arrays["data"], X, Y], fmt.dtype)
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, [launch] if m else [])
