"""CPU kernels (numba ``njit``): each computes ``y = A @ x`` from its own storage format.

Every kernel module exposes ``bind(fmt, params, parallel=None) -> run``, where ``run(x, y)``
overwrites ``y`` with ``A @ x``. Binding does once what every call would otherwise repeat: choosing the serial or
the parallel specialisation, computing task counts, and taking unsigned views of the index arrays.

x and y have the product's dtype (:func:`autospmv._support.validation.result_dtype`): the matrix's, or
float64 for a float32 matrix and a float64 x. Every sum is accumulated in y's dtype, so that
mixed product reads the float32 values and computes in float64, as SciPy does; numba compiles
each kernel once per combination of argument types.

Work is split over threads with ``prange`` when the matrix is large enough for threading to pay;
below that a serial specialisation avoids the thread pool altogether. ``bind(fmt, params,
parallel)`` takes the choice from the caller (the operator, through :func:`bind_threaded` and the
policy of :mod:`autospmv._support.threads`); ``parallel=None`` decides by size alone
(:data:`PARALLEL_MIN_NNZ`).


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

import os
import threading
import types
import warnings

import numba

from .. import njit
from ..._support.threads import NNZ_PER_THREAD

ROWS_PER_TASK = 256
"""Rows per task of the CPU kernels that split the rows (csr, ell, jds)."""

NNZ_PER_TASK = 16384
"""Nonzeros per task of the CPU kernels that split the nonzeros (coo, csr5)."""

PARALLEL_MIN_NNZ = 2 * NNZ_PER_THREAD
"""Smallest nnz for which ``parallel=None`` picks the parallel specialisation: where the size
rule of :mod:`autospmv._support.threads` first gives two threads (waking them costs ~15-20 µs)."""


def use_parallel(nnz: int) -> bool:
    return nnz >= PARALLEL_MIN_NNZ


def bind_threaded(bind, fmt, params: dict, threads: int):
    """``run(x, y)`` for a kernel's ``bind`` that uses at most ``threads`` threads per call.

    One thread binds the serial specialisation only: no thread pool is touched. More bind the
    parallel one; each call then runs on ``min(threads, numba.get_num_threads())`` threads (the
    caller's own ``numba.set_num_threads`` is honoured), switching to the serial specialisation
    when that is one, and leaves numba's thread count as it found it.
    """
    serial = bind(fmt, params, False)
    if threads <= 1:
        return serial
    parallel = bind(fmt, params, True)

    def run(x, y):
        current = numba.get_num_threads()
        count = min(threads, current)
        if count == 1:
            serial(x, y)
        elif count == current:
            parallel(x, y)
        else:
            numba.set_num_threads(count)
            try:
                parallel(x, y)
            finally:
                numba.set_num_threads(current)

    return run


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


_warned = False


def _warn_serial_only() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "autospmv: this process was forked after numba started GNU OpenMP threads, which "
            "cannot be used again here; CPU kernels run on one thread in this process. Use the "
            "'spawn' or 'forkserver' start method (or numba's tbb threading layer) to keep them "
            "parallel.", RuntimeWarning, stacklevel=3)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
