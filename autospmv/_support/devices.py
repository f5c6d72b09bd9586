"""Devices: their names, whether CUDA is usable, the device used automatically, the GPU's size,
the CPU's last-level cache.

The one place that answers these questions for the rest of autospmv. It is the ground floor of
the package: it imports no other autospmv module, so every module may import it without forming
an import cycle; numba-cuda is imported only inside the functions that probe it, through
:func:`numba_cuda`, as the kernels import it.

A device is ``"cuda"`` or ``"cpu"``; ``None`` asks for the automatic choice, CUDA when a usable
GPU (or numba-cuda's simulator) is present, else the CPU. Deciding for a device (choosing a
kernel and its parameters) needs no such device; running on CUDA does. Timing a GPU needs a real
one (:func:`real_gpu_available`): the simulator runs kernels correctly, but in Python.
"""

from __future__ import annotations

import functools

DEVICES = ("cuda", "cpu")

WARP = 32
"""Threads of a CUDA warp: the unit the GPU kernels, the formats padded to warps (JDS) and the
cost estimates of the decision share."""

CUDA_WARPS_IN_FLIGHT = 4096
"""Warps a large GPU runs at once, as the CUDA choosers count them: an H100/H200 holds 132 SMs ×
64 = 8448; the choosers' quality is flat over a wide range of this value, so one number serves
every large GPU."""


DEFAULT_CPU_CACHE_BYTES = 32 << 20
"""The last-level cache assumed where the operating system does not report one."""


CPU_CACHE_FOLDER = "/sys/devices/system/cpu/cpu0/cache"
"""Where Linux describes CPU 0's caches, one ``index*`` folder each."""


@functools.cache
def cpu_cache_bytes(folder: str = CPU_CACHE_FOLDER) -> int:
    """The CPU's largest data cache in bytes (the last level, shared by the cores), as Linux
    describes it in ``folder`` (the highest level listed); else
    :data:`DEFAULT_CPU_CACHE_BYTES`."""
    import pathlib

    best = (0, 0)
    for index in pathlib.Path(folder).glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            kind = (index / "type").read_text().strip()
            size = int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0)
        except (OSError, ValueError):
            continue
        if kind != "Instruction":
            best = max(best, (level, size))
    return best[1] or DEFAULT_CPU_CACHE_BYTES


def check_device(device) -> str | None:
    """Validate a device name ("cuda", "cpu" or None for automatic)."""
    if device is None or device in DEVICES:
        return device
    raise ValueError(f"unknown device {device!r}; valid devices: 'cuda', 'cpu' or None (automatic)")


def check_device_name(device) -> str:
    """``device`` if it names a device, else a ValueError: :func:`check_device`, without its
    None (automatic), since choosers tune for one device."""
    if check_device(device) is None:
        raise ValueError(f"parameters are chosen for a device in {DEVICES}; got None")
    return device


def numba_cuda():
    """``numba.cuda``, imported after one compatibility step: numba-cuda up to 0.30 registers an
    overload for ``np.row_stack``, which NumPy 2.5 removed, so compiling any kernel fails with
    NumPy >= 2.5. The function was an alias of ``np.vstack``; restoring the alias (only when it
    is missing) lets the unmodified numba-cuda compile with NumPy 2.5 without changing NumPy's
    behaviour otherwise. An ImportError when numba-cuda is not installed."""
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from numba import cuda

    return cuda


@functools.cache
def cuda_available() -> bool:
    """Whether the GPU path can run here.

    Returns
    -------
    bool
        True when numba-cuda is installed and sees a usable GPU, or runs its simulator
        (``NUMBA_ENABLE_CUDASIM=1``); :func:`autospmv.prepare` then defaults to
        ``device="cuda"``. Asked once per process.

    Examples
    --------
    >>> import autospmv
    >>> device = "cuda" if autospmv.cuda_available() else "cpu"
    """
    try:
        cuda = numba_cuda()
    except ImportError:
        return False
    return cuda_simulator() or cuda.is_available()


def cuda_simulator() -> bool:
    """True when numba-cuda is installed and its simulator is on (``NUMBA_ENABLE_CUDASIM=1``):
    CUDA kernels then run, but in the Python interpreter. Read at each call, not cached, since
    the setting is numba's configuration, not a property of the machine."""
    try:
        from numba import cuda
    except ImportError:
        return False
    return bool(cuda.config.ENABLE_CUDASIM)


def real_gpu_available() -> bool:
    """True when CUDA is usable (:func:`cuda_available`) on a real GPU, not on numba-cuda's
    simulator: what measuring GPU times needs (the simulator would time an interpreter).

    The simulator is asked first, so that with it on, :func:`cuda_available` (cached for the
    process) is neither called nor made to import the CUDA kernels under the simulator."""
    return not cuda_simulator() and cuda_available()


def default_device() -> str:
    """The device used when none is named: CUDA when a GPU is usable, else the CPU."""
    return "cuda" if cuda_available() else "cpu"


def resolve_device(device) -> str:
    """A device name, or for None the one used automatically (CUDA when a GPU is usable); a
    RuntimeError when CUDA is named but no GPU is usable."""
    device = check_device(device)
    if device is None:
        return default_device()
    if device == "cuda" and not cuda_available():
        raise RuntimeError(
            "device='cuda' was requested but no usable CUDA GPU was found "
            "(install the 'cuda' extra and check the driver), or use device='cpu'"
        )
    return device


def target_device(device) -> str:
    """The device to decide for: ``device`` as given (a GPU need not be present), or for None
    the one :func:`autospmv.prepare` would use."""
    return check_device(device) or resolve_device(None)
