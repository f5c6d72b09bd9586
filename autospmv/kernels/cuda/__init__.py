"""CUDA kernels (numba-cuda). Everything that imports ``numba.cuda`` lives in this subpackage.

Importing it is cheap for CPU-only users because nothing outside imports it until a CUDA operator
is built. numba-cuda is imported through :func:`autospmv._support.devices.numba_cuda`, which first
applies a NumPy compatibility step.
"""

from ..._support.devices import numba_cuda
from ..._support.jit import cached as _cached

_cuda = numba_cuda()


def jit(function=None, **options):
    """``numba.cuda.jit`` with the cache fallback of :func:`autospmv._support.jit.cached`.
    ``launch_bounds`` (a hint to the compiler about registers) is dropped under numba-cuda's
    simulator, which does not take it. A device function (``device=True``) is inlined where a
    kernel calls it (``inline=True``, in numba's IR): numba-cuda compiles a device function of
    its own for the current GPU's compute capability, so a kernel calling one could not be
    compiled to PTX for another, or without a GPU."""
    if _cuda.config.ENABLE_CUDASIM:
        options.pop("launch_bounds", None)
    if options.get("device"):
        options.setdefault("inline", True)
    if function is None:
        return lambda f: _cached(_cuda.jit, f, options)
    return _cached(_cuda.jit, function, options)


if _cuda.config.ENABLE_CUDASIM:
    from .simulator import install as _install_simulator_additions

    _install_simulator_additions()
