"""CPU kernels (numba ``njit``): each computes ``y = A @ x`` from its own storage format.

Every kernel module exposes ``bind(fmt, params, parallel=None) -> run``, where ``run(x, y)``
overwrites ``y`` with ``A @ x``. Binding does once what every call would otherwise repeat: choosing the serial or
the parallel specialisation, computing task counts, and taking unsigned views of the index arrays.

x and y have the product's dtype (:func:`autospmv._support.validation.result_dtype`): the matrix's,
or float64 for a float32 matrix and a float64 x. Every sum is accumulated in y's dtype, so that
mixed product reads the float32 values and computes in float64, as SciPy does; numba compiles
each kernel once per combination of argument types.

Work is split over threads with ``prange`` when the matrix is large enough for threading to pay;
below that a serial specialisation avoids the thread pool altogether. ``bind(fmt, params,
parallel)`` takes the choice from the caller (the operator, through :func:`bind_threaded` and the
policy of :mod:`autospmv._support.threads`); ``parallel=None`` decides by size alone
(:data:`PARALLEL_MIN_NNZ`). The serial and the parallel specialisation of each kernel come from
:func:`autospmv._support.jit.specialisations`, which also makes the parallel one safe to call
from any thread or forked process.
"""

import numba

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
