"""Compiling with numba: :func:`njit` with an on-disk cache that never makes an import fail,
the serial and parallel specialisations of a function (:func:`specialisations`), and calling the
parallel one safely from any thread or process (:func:`guarded`).

Every compiled CPU function of autospmv (kernels, conversions, feature passes) is declared
through :func:`njit`, and every CUDA kernel through :func:`autospmv.kernels.cuda.jit`; both ask
numba to cache the machine code on disk (``cache=True``) and fall back to compiling in memory only
when numba finds no writable cache folder (a read-only install without a writable user cache):
importing autospmv must never fail because a cache cannot be written. The fallback warns once per
process.

Threads and processes. Every parallel specialisation is called through :func:`guarded`, so that
any number of Python threads may call kernels (and the feature scan) at once, and a forked
process can still compute:

* numba's ``workqueue`` threading layer (used when neither OpenMP nor TBB is available) aborts
  the process when two threads launch parallel work at once, so under it, and before the first
  parallel call has shown which layer numba picked, parallel calls take one process-wide lock
  in turn. The ``omp`` and ``tbb`` layers run concurrent calls as they come.
* GNU OpenMP cannot be used again in a process forked after it started (numba terminates such
  a child: a ``fork`` multiprocessing pool would hang). A child forked after the ``omp`` layer
  started with GNU OpenMP runs the serial specialisations instead, with a warning; the
  ``spawn`` and ``forkserver`` start methods, or the ``tbb`` layer, keep children parallel.
"""

from __future__ import annotations

import os
import threading
import types
import warnings

import numba
import numpy as np

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


def specialisations(kernel):
    """The serial and the parallel ``njit`` compilation of a kernel, each cached on disk.

    numba names a function's cache files after its qualified name and line, not after the
    compilation flags, so two dispatchers over one Python function share (and overwrite) one cache
    entry: a process could load the serial machine code for the parallel dispatcher. The parallel
    one therefore compiles a twin of the function under its own name, and is returned wrapped by
    :func:`guarded` (a plain function taking the same arguments).
    """
    twin = types.FunctionType(kernel.__code__, kernel.__globals__, kernel.__name__ + "_parallel",
                              kernel.__defaults__, kernel.__closure__)
    twin.__qualname__ = kernel.__qualname__ + "_parallel"
    serial = njit(kernel, cache=True, nogil=True)
    return serial, guarded(njit(twin, cache=True, nogil=True, parallel=True), serial)


_LOCK = threading.Lock()
"""Serialises parallel calls while the threading layer is ``workqueue`` or not yet known."""
_layer: str | None = None
"""numba's threading layer, once a parallel call has started it."""
_serial_only = False
"""True in a process forked after GNU OpenMP started (see the module docstring)."""


def guarded(parallel, serial):
    """``parallel`` called as the module docstring says: under a lock where the threading layer
    requires it, replaced by ``serial`` (same arguments) in a child forked after GNU OpenMP."""

    def call(*args):
        global _layer
        if _serial_only:
            _warn_serial_only()
            return serial(*args)
        if _layer is not None and _layer != "workqueue":
            return parallel(*args)
        with _LOCK:
            result = parallel(*args)
            _layer = numba.threading_layer()
        return result

    call.__wrapped__ = parallel
    return call


def _after_fork_in_child() -> None:
    global _serial_only
    try:
        layer = numba.threading_layer()  # ValueError: no parallel work has started numba's threads
    except ValueError:
        return
    if layer == "omp":
        from numba.np.ufunc import omppool

        _serial_only = omppool.openmp_vendor == "GNU"


_warned_serial_only = False


def _warn_serial_only() -> None:
    global _warned_serial_only
    if not _warned_serial_only:
        _warned_serial_only = True
        warnings.warn(
            "autospmv: this process was forked after numba started GNU OpenMP threads, which "
            "cannot be used again here; CPU kernels run on one thread in this process. Use the "
            "'spawn' or 'forkserver' start method (or numba's tbb threading layer) to keep them "
            "parallel.", RuntimeWarning, stacklevel=3)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
