"""The labeller's side of the timer: :mod:`autospmv._support.timing` plus what only labelling
needs.

The timer itself (the clocks, ``TimingOptions``, ``summary``, ``relative_error``, ``Bench``
with its interleaved rounds and contention check, ``noise_ratio``) lives in
:mod:`autospmv._support.timing`, which the command line and ``prepare(..., tune="measure")`` use too
(autospmv cannot import this optional package); its module doc gives the measurement method.
This module adds:

* :data:`TOLERANCE`: the relative error a label accepts against SciPy;
* :data:`QUICK`: the short timings of ``--quick`` (tests and smoke runs);
* the refusal to time numba-cuda's simulator (:func:`require_real_gpu`), which this module's
  :class:`Bench` applies on CUDA: labels and benchmark figures taken there would time a Python
  interpreter, not a GPU;
* :func:`device_info`, what a labelling run records about the device it timed.
"""

from __future__ import annotations

import os
import platform

import numpy as np

from autospmv._support import timing as _timing
from autospmv._support.timing import TimingOptions

TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
"""Largest accepted ‖y − y_ref‖ / ‖y_ref‖ against SciPy in float64, per value dtype."""

QUICK = TimingOptions(warmup=1, repeats=10, min_repeats=3, max_seconds=0.02, b2b_calls=10,
                      b2b_repeats=3, vectors=2, rounds=1)
"""Short timings for tests and smoke runs (the figures are noisy)."""


def require_real_gpu() -> None:
    """Raise unless numba-cuda drives a real GPU (not its simulator, not absent), as
    :func:`autospmv._support.devices.real_gpu_available` tells; the error says which of the two is
    missing."""
    from autospmv._support import devices

    if devices.cuda_simulator():
        raise RuntimeError(
            "GPU timing under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1) would time a "
            "Python interpreter, not a GPU; unset NUMBA_ENABLE_CUDASIM or label with device='cpu'"
        )
    if not devices.real_gpu_available():
        raise RuntimeError("no usable CUDA GPU was found; label with device='cpu' instead")


class Bench(_timing.Bench):
    """:class:`autospmv._support.timing.Bench` that refuses to time CUDA without a real GPU
    (:func:`require_real_gpu`), for labels and benchmark figures."""

    def __init__(self, device: str, x: np.ndarray, m: int, options: TimingOptions):
        if device == "cuda":
            require_real_gpu()
        super().__init__(device, x, m, options)


def device_info(device: str) -> dict:
    """What the timings were taken on: GPU name, compute capability and driver, or CPU model."""
    from autospmv._decide.model.store import cpu_model

    info = {"device": device, "cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "platform": platform.platform()}
    if device == "cuda":
        from numba import cuda
        from numba.cuda.cudadrv import driver

        gpu = cuda.get_current_device()
        name = gpu.name.decode() if isinstance(gpu.name, bytes) else str(gpu.name)
        total = cuda.current_context().get_memory_info()[1]
        info.update({
            "name": name,
            "compute_capability": ".".join(map(str, gpu.compute_capability)),
            "driver_version": ".".join(map(str, driver.get_version())),
            "runtime_version": ".".join(map(str, cuda.runtime.get_version())),
            "memory_bytes": int(total),
        })  # fmt: skip
    else:
        import numba

        info.update({"name": info["cpu"], "threads": numba.get_num_threads()})
    return info
