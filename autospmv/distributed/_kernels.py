"""The ranks' small vector kernels: one pass each on a GPU (fused CuPy kernels, made once per
process), plain NumPy on the CPU.

The ``*_unless`` kernels read their scalars from device memory (``raw`` one-element arrays) and
do nothing once ``stop[0]`` is set, so a solver can queue iteration after iteration without the
host waiting for a dot product (see :func:`._solvers.cg_on`). Each scalar is rounded to the
vectors' dtype before use, as NumPy does with a Python float, so the arithmetic is the one the
host-side versions do.
"""

from __future__ import annotations

import numpy as np

_CUPY: dict = {}

_BODIES = {
    "axpy": ("T x, T a", "T y", "y = y + a * x"),
    "xpay": ("T x, T a", "T y", "y = x + a * y"),
    "scatter_add": ("T value, int64 row", "raw T y", "y[row] += value"),
    "copy_unless": ("T x, raw int64 stop", "T y", "if (stop[0] == 0) y = x"),
    "xpay_ratio_unless": ("T x, raw float64 num, raw float64 den, raw int64 stop", "T y",
                          "if (stop[0] == 0) y = x + (T)(num[0] / den[0]) * y"),
    "cg_step_unless": ("T p, T q, raw float64 num, raw float64 den, raw int64 stop", "T x, T r",
                       "if (stop[0] == 0) { T alpha = (T)(num[0] / den[0]); "
                       "x = x + alpha * p; r = r - alpha * q; }"),
    "stop_below": ("raw float64 value, float64 tol, int64 iteration", "raw int64 stop",
                   "if (stop[0] == 0 && sqrt(value[0]) < tol) { stop[0] = 1; "
                   "stop[1] = iteration; }"),
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


def copy_unless(xp, stop, x, y):
    """``y[:] = x`` unless ``stop[0]``."""
    if xp is np:
        if not stop[0]:
            y[...] = x
    else:
        _cupy_kernel("copy_unless")(x, stop, y)


def xpay_ratio_unless(xp, stop, x, num, den, y):
    """``y = x + (num[0] / den[0]) * y`` in place unless ``stop[0]``."""
    if xp is np:
        if not stop[0]:
            y *= y.dtype.type(num[0] / den[0])
            y += x
    else:
        _cupy_kernel("xpay_ratio_unless")(x, num, den, stop, y)


def cg_step_unless(xp, stop, num, den, p, q, x, r):
    """With ``alpha = num[0] / den[0]``: ``x += alpha * p`` and ``r -= alpha * q`` in place,
    unless ``stop[0]``."""
    if xp is np:
        if not stop[0]:
            alpha = x.dtype.type(num[0] / den[0])
            x += alpha * p
            r -= alpha * q
    else:
        _cupy_kernel("cg_step_unless")(p, q, num, den, stop, x, r)


def stop_below(xp, stop, value, tol, iteration):
    """Unless ``stop[0]`` is set already: when ``sqrt(value[0]) < tol``, set ``stop[0] = 1``
    and ``stop[1] = iteration``."""
    if xp is np:
        if not stop[0] and np.sqrt(value[0]) < tol:
            stop[0], stop[1] = 1, iteration
    else:
        _cupy_kernel("stop_below")(value, float(tol), int(iteration), stop, size=1)
