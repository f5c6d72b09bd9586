"""The ranks' small vector kernels: one pass each on a GPU (fused CuPy kernels, made once per
process), plain NumPy on the CPU.

Each scalar is rounded to the vectors' dtype before use, as NumPy does with a Python float, so
the arithmetic is the one the host-side versions do.
"""

from __future__ import annotations

import numpy as np

_CUPY: dict = {}

_BODIES = {
    "axpy": ("T x, T a", "T y", "y = y + a * x"),
    "xpay": ("T x, T a", "T y", "y = x + a * y"),
    "scatter_add": ("T value, int64 row", "raw T y", "y[row] += value"),
}


def _cupy_kernel(name):
    if name not in _CUPY:
        import cupy

        _CUPY[name] = cupy.ElementwiseKernel(*_BODIES[name], f"autospmv_{name}")
    return _CUPY[name]


def axpy(xp, a, x, y):
    """``y += a * x`` in place."""
    if xp is np:
        y += a * x
    else:
        _cupy_kernel("axpy")(x, y.dtype.type(a), y)


def xpay(xp, x, a, y):
    """``y = x + a * y`` in place."""
    if xp is np:
        y *= a
        y += x
    else:
        _cupy_kernel("xpay")(x, y.dtype.type(a), y)


def scatter_add(xp, values, rows, y):
    """``y[rows] += values`` in place (rows distinct)."""
    if xp is np:
        y[rows] += values
    else:
        _cupy_kernel("scatter_add")(values, rows, y)
