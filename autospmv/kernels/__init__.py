"""SpMV kernels: ``cpu`` (numba njit, the embedded default) and ``cuda`` (numba-cuda)."""
