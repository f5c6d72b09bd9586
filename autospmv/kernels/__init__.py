"""SpMV kernels: ``cpu`` (numba njit, the embedded default) and ``cuda`` (numba-cuda).

Every compiled function is declared through :func:`autospmv._support.jit.njit` (CPU) or
:func:`autospmv.kernels.cuda.jit` (CUDA), with an on-disk cache that never makes an import fail.
The kernel modules read :data:`WARP`, :func:`unsigned` and :func:`njit` from this package.
"""

from .._support.devices import WARP
from .._support.jit import njit, unsigned

__all__ = ["WARP", "njit", "unsigned"]
