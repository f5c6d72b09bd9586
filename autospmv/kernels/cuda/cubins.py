"""Compiled GPU kernels kept as cubins in autospmv's cache folder and loaded without numba-cuda.

Why: numba-cuda caches compiled kernels too, but loading one goes through its dispatcher, which
first builds numba-cuda's CUDA target (its typing and lowering registries): about half a second
in every new process on an H200's host, before the first product can run
(``benchmarks/results/startup-cuda-h200-2026-11-26/``). The launch path
(:class:`autospmv.kernels.cuda.launch.Launch`) needs only the kernel's function handle, so the
cubin numba-cuda linked for it is stored once, with the kernel's entry name, and later
processes load it with the driver (``cuModuleLoadData``, ``cuModuleGetFunction``).

An entry is found by a hash of what decides its machine code: the kernel's module and name, its
argument types and compile options (launch bounds), the device's compute capability, the numba
and numba-cuda versions, and the contents of every source file of autospmv (a kernel reads
constants and device functions from other modules, so any change to the package retires every
entry). Files live in ``<cache folder>/cubins`` (:func:`autospmv.cache.cache_dir`), written
atomically; a missing, unreadable or unloadable entry is compiled again through numba-cuda and
rewritten. Kernels whose module needs set-up or tear-down functions (none of autospmv's) are
always loaded through numba-cuda. Entries of earlier sources are not removed;
deleting the folder is always safe.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numba
from cuda.bindings import driver
from numba import cuda
from numba_cuda import __version__ as numba_cuda_version

from ...cache import cache_dir

_LOADED = {}
"""(entry key, device id) -> (module, function): the driver modules loaded in this process, one
per device's context, kept alive for as long as the process runs (a kernel's function handle is
valid while its module is, and only in the context it was loaded into)."""


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of every ``.py`` file of the autospmv package (paths and contents, in order)."""
    package = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def entry_key(dispatcher, argtypes, cc) -> str:
    """The hash naming the cache entry of ``dispatcher`` compiled for ``argtypes`` on a device of
    compute capability ``cc`` (see the module docstring for what it covers)."""
    options = sorted((key, repr(value))
                     for key, value in getattr(dispatcher, "targetoptions", {}).items())
    parts = [dispatcher.py_func.__module__, dispatcher.py_func.__qualname__,
             repr(tuple(argtypes)), repr(options), repr(tuple(cc)), numba.__version__,
             numba_cuda_version, source_digest()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def folder() -> Path:
    """Where the entries live: ``cubins`` in the folder numba caches autospmv's code in."""
    return cache_dir() / "cubins"


def function_handle(dispatcher, argtypes) -> int:
    """The driver handle (``CUfunction``) of ``dispatcher`` compiled for ``argtypes`` on the
    current device: from the cubin cache when an entry exists, else compiled (or loaded) by
    numba-cuda and stored for the next process."""
    device = cuda.current_context().device  # creates the context the module is loaded into
    key = entry_key(dispatcher, argtypes, device.compute_capability)
    loaded = _LOADED.get((key, device.id)) or _load(key, device.id)
    if loaded is not None:
        return int(loaded[1])
    library = dispatcher.compile(argtypes)._codelibrary
    handle = int(library.get_cufunc().handle)
    if not library._setup_functions and not library._teardown_functions:
        _store(key, _image(library.get_cubin()), library._entry_name)
    return handle


def _image(cubin) -> bytes | None:
    """The bytes of a linked cubin: numba-cuda returns them as they are, or, linking through
    ``cuda.core``, inside an ``ObjectCode`` (its ``code``); None for anything else."""
    image = getattr(cubin, "code", cubin)
    return bytes(image) if isinstance(image, (bytes, bytearray, memoryview)) else None


def _load(key: str, device_id: int = 0):
    """The (module, function) of a stored entry, loaded into the current context (that of
    device ``device_id``); None when there is none or it cannot be used."""
    cubin, meta = folder() / f"{key}.cubin", folder() / f"{key}.json"
    try:
        name = json.loads(meta.read_text())["entry_name"]
        image = cubin.read_bytes()
    except (OSError, ValueError, KeyError):
        return None
    status, module = driver.cuModuleLoadData(image)
    if status != driver.CUresult.CUDA_SUCCESS:
        return None
    status, function = driver.cuModuleGetFunction(module, name.encode())
    if status != driver.CUresult.CUDA_SUCCESS:
        driver.cuModuleUnload(module)
        return None
    _LOADED[key, device_id] = (module, function)
    return _LOADED[key, device_id]


def _store(key: str, cubin: bytes | None, entry_name: str) -> None:
    """Write an entry atomically (the cubin first, then the file naming its entry point, which
    :func:`_load` reads first); a folder that cannot be written, or a cubin whose bytes are not
    at hand, only costs the next process a load through numba-cuda."""
    if cubin is None:
        return
    try:
        folder().mkdir(parents=True, exist_ok=True)
        _write_atomically(folder() / f"{key}.cubin", cubin)
        _write_atomically(folder() / f"{key}.json",
                          json.dumps({"entry_name": entry_name}).encode())
    except OSError:
        pass


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
