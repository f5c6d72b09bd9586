"""Compiled GPU kernels kept as cubins and loaded without numba-cuda: shipped with the package
for the GPUs the models are for, and cached in autospmv's cache folder for the others.

Why: numba-cuda caches compiled kernels too, but loading one goes through its dispatcher, which
first builds numba-cuda's CUDA target (its typing and lowering registries): about half a second
in every new process, before the first product can run; compiling a kernel takes seconds. The
launch path (:class:`autospmv.kernels.cuda.launch.Launch`) needs only the kernel's function
handle, so a cubin and its entry name are enough, loaded with the driver
(``cuModuleLoadData``, ``cuModuleGetFunction``).

An entry is found by a hash of what decides the kernel it holds (:func:`entry_key`): the kernel's
module and name, its argument types and compile options (launch bounds), the device's compute
capability, numba-cuda's version, and :func:`kernel_digest`: the code of the source files of the
kernel and of the device functions and autospmv modules it reaches (without comments and
docstrings), and the values of the constants it reads (host code, such as the launch layer, is
not part of it, so changing it keeps every entry).

numba's version is not part of it: numba-cuda types, lowers and generates the CUDA code itself
(``numba.cuda.core``, its own typing and lowering registries; it runs without numba installed),
and takes from an installed numba only third-party extensions registered there, which autospmv's
kernels do not use. A kernel that calls a numba-compiled function is compiled by numba-cuda from
that function's Python source, which :func:`kernel_sources` follows. So a numba release changes
no entry, and the archives built with one numba version serve every version the package allows.
The versions of llvmlite and of the CUDA compiler libraries (NVVM, nvJitLink) are not part of it
either: they choose the instructions, not what the kernel computes or how it takes its
arguments (numba-cuda's data model, hence its version, decides that, and the launch layer relies
on it); an entry they built is as correct as a new compilation, and one the driver cannot load is
compiled instead.

:func:`function_handle` looks in three places, in order: the cache folder
(``<cache folder>/cubins``, :func:`autospmv._run.cache.cache_dir`, one file per entry, written
atomically), the archives shipped in the package (``shipped/sm_<cc>.cubins``, built with
:mod:`autospmv.kernels.cuda.ship`; a first run on those GPUs compiles no kernel), and numba-cuda,
which compiles the kernel (or loads it from its own cache) and whose cubin is then stored in the
cache folder. A missing, unreadable or unloadable entry, or one of another numba-cuda version or
other sources, is never used: the kernel is compiled as if there were none. Kernels whose module
needs set-up or tear-down functions (none of autospmv's) are always loaded through numba-cuda.
Entries of earlier sources are not removed; deleting the folder is always safe.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import struct
import sys
import tempfile
import types
import zlib
from pathlib import Path

from cuda.bindings import driver
from numba import cuda
from numba_cuda import __version__ as numba_cuda_version

from ..._run.cache import cache_dir

SHIPPED = Path(__file__).resolve().parent / "shipped"
"""The folder of the archives of cubins shipped with the package, one per compute capability."""

ARCHIVE_MAGIC = b"autospmv-cubins 1\n"
"""The first bytes of an archive (:func:`write_archive`)."""

_LOADED = {}
"""(entry key, device id) -> (module, function): the driver modules loaded in this process, one
per device's context, kept alive for as long as the process runs (a kernel's function handle is
valid while its module is, and only in the context it was loaded into)."""


def _code_names(code: types.CodeType) -> set:
    """The global names a code object and the code objects nested in it read."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _code_names(constant)
    return names


def _module_file(name: str) -> str | None:
    module = sys.modules.get(name)
    return getattr(module, "__file__", None) if name.split(".")[0] == "autospmv" else None


def kernel_sources(py_func) -> tuple[list[str], list[str]]:
    """``(files, constants)`` that decide the machine code of the kernel ``py_func``: the source
    files of its module and of every autospmv function, device function, intrinsic and module
    it reads (followed through device functions), and ``name=value`` for the numbers, strings
    and tuples it reads as globals. Sorted."""
    files, constants, seen = set(), set(), set()

    def walk(function):
        if function in seen:
            return
        seen.add(function)
        files.add(_module_file(function.__module__))
        for name in _code_names(function.__code__):
            value = function.__globals__.get(name)
            if isinstance(value, (bool, int, float, str, bytes, tuple)):
                constants.add(f"{name}={value!r}")
            elif isinstance(value, types.ModuleType):
                files.add(_module_file(value.__name__))
            elif isinstance(getattr(value, "py_func", None), types.FunctionType):
                walk(value.py_func)  # a device function (numba-cuda dispatcher)
            elif isinstance(value, types.FunctionType):
                walk(value)
            elif isinstance(getattr(value, "_defn", None), types.FunctionType):
                files.add(_module_file(value._defn.__module__))  # an intrinsic

    walk(py_func)
    files.discard(None)
    return sorted(files), sorted(constants)


def source_code(path: Path) -> str:
    """The code of the Python file ``path`` without its comments, docstrings and layout: its
    syntax tree, docstrings removed, dumped without positions (:func:`_dump`). Two files with
    the same code give the same text, whatever their comments, docstrings, blank lines or line
    breaks, which do not change a kernel's machine code, and whatever the Python version."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return _dump(tree)


def _dump(node) -> str:
    """A syntax tree as text, without positions and without the fields that are None or empty:
    Python versions differ there (3.12 adds ``type_params`` to every function, 3.13's
    ``ast.dump`` omits empty fields), and an absent field means the same code as an empty one."""
    if isinstance(node, ast.AST):
        fields = [(name, getattr(node, name, None)) for name in node._fields]
        return type(node).__name__ + "(" + ", ".join(
            f"{name}={_dump(value)}" for name, value in fields
            if value is not None and value != []) + ")"
    if isinstance(node, list):
        return "[" + ", ".join(_dump(item) for item in node) + "]"
    return repr(node)


@functools.lru_cache(maxsize=None)
def kernel_digest(py_func) -> str:
    """SHA-256 of :func:`kernel_sources` of the kernel ``py_func``: the files' names (relative
    to the package) and code (:func:`source_code`), and the constants."""
    package = Path(__file__).resolve().parents[2]
    files, constants = kernel_sources(py_func)
    digest = hashlib.sha256()
    for name in files:
        path = Path(name).resolve()
        digest.update(str(path.relative_to(package)).encode())
        digest.update(source_code(path).encode())
    for constant in constants:
        digest.update(constant.encode())
    return digest.hexdigest()


def entry_key(dispatcher, argtypes, cc) -> str:
    """The hash naming the entry of ``dispatcher`` compiled for ``argtypes`` on a device of
    compute capability ``cc``.

    Parameters
    ----------
    dispatcher : numba.cuda.dispatcher.CUDADispatcher
        The kernel.
    argtypes : tuple of numba types
        Its argument types.
    cc : tuple of int
        The compute capability, e.g. ``(9, 0)``.

    Returns
    -------
    str
        SHA-256, in hexadecimal, of the kernel's module and qualified name, ``argtypes``, its
        compile options (launch bounds among them), ``cc``, numba-cuda's version and
        :func:`kernel_digest`; not numba's version (the module docstring says why).
    """
    options = sorted((key, repr(value))
                     for key, value in getattr(dispatcher, "targetoptions", {}).items())
    parts = [dispatcher.py_func.__module__, dispatcher.py_func.__qualname__,
             repr(tuple(argtypes)), repr(options), repr(tuple(cc)),
             f"numba-cuda {numba_cuda_version}", kernel_digest(dispatcher.py_func)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def folder() -> Path:
    """Where the cached entries live: ``cubins`` in the folder numba caches autospmv's code in."""
    return cache_dir() / "cubins"


def function_handle(dispatcher, argtypes) -> int:
    """The driver handle (``CUfunction``) of ``dispatcher`` compiled for ``argtypes`` on the
    current device: from the cache folder or the shipped archive when either has the entry,
    else compiled (or loaded) by numba-cuda and stored in the cache folder for the next
    process."""
    device = cuda.current_context().device  # creates the context the module is loaded into
    cc = device.compute_capability
    key = entry_key(dispatcher, argtypes, cc)
    loaded = (_LOADED.get((key, device.id)) or _load(key, device.id)
              or _load_shipped(key, cc, device.id))
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


def _module_function(image: bytes, name: str, key: str, device_id: int):
    """Load ``image`` into the current context and find its entry ``name``: the (module,
    function), remembered in :data:`_LOADED`; None when the driver refuses either."""
    status, module = driver.cuModuleLoadData(image)
    if status != driver.CUresult.CUDA_SUCCESS:
        return None
    status, function = driver.cuModuleGetFunction(module, name.encode())
    if status != driver.CUresult.CUDA_SUCCESS:
        driver.cuModuleUnload(module)
        return None
    _LOADED[key, device_id] = (module, function)
    return _LOADED[key, device_id]


def _load(key: str, device_id: int = 0):
    """The (module, function) of an entry of the cache folder, loaded into the current context
    (that of device ``device_id``); None when there is none or it cannot be used."""
    cubin, meta = folder() / f"{key}.cubin", folder() / f"{key}.json"
    try:
        name = json.loads(meta.read_text())["entry_name"]
        image = cubin.read_bytes()
    except (OSError, ValueError, KeyError):
        return None
    return _module_function(image, name, key, device_id)


def _load_shipped(key: str, cc, device_id: int = 0):
    """The (module, function) of an entry of the shipped archive for ``cc``, loaded into the
    current context; None when the archive or the entry is missing or cannot be used."""
    entry = shipped_archive(tuple(cc)).get(key)
    if entry is None:
        return None
    name, image = entry
    return _module_function(image, name, key, device_id)


@functools.lru_cache(maxsize=None)
def shipped_archive(cc: tuple) -> dict:
    """The shipped archive for compute capability ``cc`` (:func:`read_archive`); empty when
    there is none or it cannot be read."""
    try:
        return read_archive(SHIPPED / f"sm_{cc[0]}{cc[1]}.cubins")
    except (OSError, ValueError):
        return {}


def write_archive(path: Path, entries: dict) -> None:
    """Write ``entries`` (key -> (entry name, cubin bytes)) to ``path`` as one file: the magic
    line, the length of a JSON index (8 bytes, little-endian), the index (key -> entry name,
    offset, length), and the cubins, each compressed with zlib, in the index's order."""
    index, blobs, offset = {}, [], 0
    for key in sorted(entries):
        name, image = entries[key]
        blob = zlib.compress(image, 9)
        index[key] = [name, offset, len(blob)]
        blobs.append(blob)
        offset += len(blob)
    header = json.dumps(index, sort_keys=True).encode()
    _write_atomically(Path(path), ARCHIVE_MAGIC + struct.pack("<Q", len(header)) + header
                      + b"".join(blobs))


def read_archive(path: Path) -> dict:
    """The entries of an archive that :func:`write_archive` wrote, as it took them: key ->
    (entry name, cubin). ValueError when the file is not such an archive or an entry does not
    decompress."""
    data = Path(path).read_bytes()
    start = len(ARCHIVE_MAGIC) + 8
    if not data.startswith(ARCHIVE_MAGIC) or len(data) < start:
        raise ValueError(f"{path} is not an archive of cubins")
    length, = struct.unpack_from("<Q", data, len(ARCHIVE_MAGIC))
    index = json.loads(data[start:start + length])
    blobs = memoryview(data)[start + length:]
    entries = {}
    for key, (name, offset, size) in index.items():
        if offset + size > len(blobs):
            raise ValueError(f"{path} is truncated")
        try:
            entries[key] = (name, zlib.decompress(blobs[offset:offset + size]))
        except zlib.error:
            raise ValueError(f"{path}: the entry {key} does not decompress") from None
    return entries


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
