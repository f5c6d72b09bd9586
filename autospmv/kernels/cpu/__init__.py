"""CPU kernels (numba ``njit``): each computes ``y = A @ x`` from its own storage format.

Every kernel module exposes ``bind(fmt, params) -> run``, where ``run(x, y)`` overwrites ``y``
with ``A @ x``. Binding does once what every call would otherwise repeat: choosing the serial or
the parallel specialisation, computing task counts, and taking unsigned views of the index arrays.

Work is split over threads with ``prange`` when the matrix is large enough for threading to pay
(:data:`PARALLEL_MIN_NNZ`); below that a serial specialisation avoids the thread-pool wake-up.
"""

import types

import numpy as np

from .. import njit

PARALLEL_MIN_NNZ = 50_000
"""Smallest nnz for which the parallel specialisation is used (thread wake-up costs ~10 µs)."""


def use_parallel(nnz: int) -> bool:
    return nnz >= PARALLEL_MIN_NNZ


def unsigned(indices: np.ndarray) -> np.ndarray:
    """A uint32 view of an int32 index array (int64 arrays are returned unchanged).

    numba supports negative indices, so every ``a[i]`` with a signed ``i`` carries a wrap-around
    test; with unsigned indices it compiles to a plain load, which made the CSR loop ~30 % faster.
    Only int32 arrays are viewed: numba types ``uint64 + int64`` as float64, while ``uint32``
    mixes safely with int64 arithmetic.
    """
    return indices.view(np.uint32) if indices.dtype == np.int32 else indices


def specialisations(kernel):
    """The serial and the parallel ``njit`` compilation of a kernel, each cached on disk.

    numba names a function's cache files after its qualified name and line, not after the
    compilation flags, so two dispatchers over one Python function share (and overwrite) one cache
    entry: a process could load the serial machine code for the parallel dispatcher. The parallel
    one therefore compiles a twin of the function under its own name.
    """
    twin = types.FunctionType(kernel.__code__, kernel.__globals__, kernel.__name__ + "_parallel",
                              kernel.__defaults__, kernel.__closure__)
    twin.__qualname__ = kernel.__qualname__ + "_parallel"
    return (njit(kernel, cache=True, nogil=True),
            njit(twin, cache=True, nogil=True, parallel=True))
