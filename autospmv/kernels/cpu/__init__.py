"""CPU kernels (numba ``njit``): each computes ``y = A @ x`` from its own storage format.

Every kernel module exposes ``spmv(fmt, x, y, params)`` which overwrites ``y``. Work is split over
threads with ``prange`` when the matrix is large enough for threading to pay
(:data:`PARALLEL_MIN_NNZ`); below that a serial specialisation avoids the thread-pool wake-up.
"""

PARALLEL_MIN_NNZ = 50_000
"""Smallest nnz for which the parallel specialisation is used (thread wake-up costs ~10 µs)."""


def use_parallel(nnz: int) -> bool:
    return nnz >= PARALLEL_MIN_NNZ
