"""SpMV kernels: ``cpu`` (numba njit, the embedded default) and ``cuda`` (numba-cuda).

Every compiled function of autospmv is declared through :func:`njit` (CPU) or
:func:`autospmv.kernels.cuda.jit` (CUDA), which ask numba to cache the machine code on disk
(``cache=True``) and fall back to compiling in memory only when numba finds no writable cache
folder (a read-only install without a writable user cache): importing autospmv must never fail
because a cache cannot be written. The fallback warns once per process.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np

WARP = 32
"""Threads of a CUDA warp: the unit the GPU kernels, the formats padded to warps (JDS) and the
cost estimates of the decision share."""

_warned = False


def cached(decorator, function, options: dict):
    """``decorator(**options)(function)``; when ``options`` asks for ``cache=True`` and numba
    finds no place to cache ``function`` (it raises RuntimeError "cannot cache function ...")
    the same without the cache, with a warning."""
    try:
        return decorator(**options)(function)
    except RuntimeError as error:
        if not options.get("cache") or "cannot cache" not in str(error):
            raise
        reason = str(error)
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"autospmv: numba cannot cache compiled kernels on disk ({reason}); they are compiled "
            "for this process only. Set NUMBA_CACHE_DIR to a writable folder to keep them.",
            RuntimeWarning, stacklevel=3,
        )
    return decorator(**{**options, "cache": False})(function)


def njit(function=None, **options):
    """``numba.njit`` with the cache fallback of :func:`cached`; used as ``@njit(cache=True)``
    or ``njit(function, cache=True, ...)``."""
    if function is None:
        return lambda f: cached(numba.njit, f, options)
    return cached(numba.njit, function, options)


def unsigned(indices):
    """A uint32 view of an int32 index array, on the host or the device (int64 arrays are
    returned as they are).

    numba supports negative indices, so every ``a[i]`` with a signed ``i`` carries a wrap-around
    test; with an unsigned ``i`` it compiles to a plain load (the CPU's CSR loop runs about 30 %
    faster). Only int32 arrays are viewed: numba types ``uint64 + int64`` as float64, while
    ``uint32`` mixes safely with int64 arithmetic.
    """
    return indices.view(np.uint32) if indices.dtype == np.int32 else indices
