"""CUDA kernels (numba-cuda). Everything that imports ``numba.cuda`` lives in this subpackage.

Importing it is cheap for CPU-only users because nothing outside imports it until a CUDA operator
is built. One compatibility step runs first: numba-cuda up to 0.30 registers an overload for
``np.row_stack``, which NumPy 2.5 removed, so compiling any kernel fails with NumPy ≥ 2.5. The
function was an alias of ``np.vstack``; restoring the alias (only when it is missing) lets the
unmodified numba-cuda compile with NumPy 2.5 without changing NumPy's behaviour otherwise.
"""

import numpy as _np

if not hasattr(_np, "row_stack"):
    _np.row_stack = _np.vstack

from numba import cuda as _cuda  # noqa: E402

from .. import cached as _cached  # noqa: E402


def jit(function=None, **options):
    """``numba.cuda.jit`` with the cache fallback of :func:`autospmv.kernels.cached`.
    ``launch_bounds`` (a hint to the compiler about registers) is dropped under numba-cuda's
    simulator, which does not take it."""
    if _cuda.config.ENABLE_CUDASIM:
        options.pop("launch_bounds", None)
    if function is None:
        return lambda f: _cached(_cuda.jit, f, options)
    return _cached(_cuda.jit, function, options)


if _cuda.config.ENABLE_CUDASIM:
    from .simulator import install as _install_simulator_shuffles

    _install_simulator_shuffles()
