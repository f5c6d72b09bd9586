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
(``<cache folder>/cubins``, :func:`autospmv._support.cache.cache_dir`, one file per entry, written
atomically), the archives shipped in the package (``shipped/sm_<cc>.cubins``, built with
:mod:`autospmv.kernels.cuda.ship`; a first run on those GPUs compiles no kernel), and numba-cuda,
which compiles the kernel (or loads it from its own cache) and whose cubin is then stored in the
cache folder. A missing or unloadable entry, or one of another numba-cuda version or other
sources, is never used: the kernel is compiled as if there were none. Kernels whose module needs
set-up or tear-down functions (none of autospmv's) are always loaded through numba-cuda. Entries
of earlier sources are not removed; deleting the folder is always safe.

Both places are checked before anything in them is used, since either may be damaged or
replaced: only regular files are read (a device or a pipe named like an entry is not), each no
larger than a cap (:data:`MAX_ARCHIVE_BYTES`, :data:`MAX_IMAGE_BYTES`); an archive's index and
a cache entry's metadata must have exactly the expected types; an archive's entry is inflated
only when it is loaded, to no more than the length its index states; and every entry carries a
SHA-256 over its key, entry name and cubin (:func:`entry_checksum`), so an entry that is damaged,
or moved to another key, is refused. Anything refused is compiled instead, with one
:class:`~autospmv._support.cache.CacheWarning` per archive or cache folder.
"""

from __future__ import annotations

import ast
import collections.abc
import functools
import hashlib
import json
import os
import stat
import struct
import sys
import tempfile
import types
import warnings
import zlib
from pathlib import Path

from cuda.bindings import driver
from numba import cuda
from numba_cuda import __version__ as numba_cuda_version

from ..._support.cache import cache_dir

SHIPPED = Path(__file__).resolve().parent / "shipped"
"""The folder of the archives of cubins shipped with the package, one per compute capability."""

ARCHIVE_MAGIC = b"autospmv-cubins 2\n"
"""The first bytes of an archive (:func:`write_archive`)."""

MAX_ARCHIVE_BYTES = 64 << 20
"""The largest archive file read (the shipped ones hold about 200 KB)."""

MAX_INDEX_BYTES = 1 << 20
"""The largest index of an archive read (the shipped ones hold about 25 KB)."""

MAX_IMAGE_BYTES = 16 << 20
"""The largest cubin read or inflated (autospmv's are below 64 KB)."""

MAX_NAME_LENGTH = 4096
"""The longest entry name (a kernel's mangled name; autospmv's are below 500 characters)."""

_WARNED = set()
"""The archives and cache folders a warning has been given for in this process (one each)."""

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
        _store(key, cubin_bytes(library.get_cubin()), library._entry_name)
    return handle


def cubin_bytes(cubin) -> bytes | None:
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


def entry_checksum(key: str, name: str, image: bytes) -> str:
    """The SHA-256, in hexadecimal, that an entry of an archive or of the cache folder carries:
    over its key, its entry name and its cubin, so that an entry is refused when any of them
    changed, and when it is found under another key than it was stored under."""
    digest = hashlib.sha256(key.encode() + b"\0" + name.encode() + b"\0")
    digest.update(image)
    return digest.hexdigest()


def _refuse(source, problem: str) -> None:
    """Warn, once per ``source`` (an archive, or the cache folder), that what it holds is not
    used and its kernels are compiled instead."""
    from ..._support.cache import CacheWarning

    if source in _WARNED:
        return
    _WARNED.add(source)
    warnings.warn(f"autospmv does not use the compiled GPU kernels of {source} ({problem}); "
                  "the kernels are compiled instead (seconds on their first use)",
                  CacheWarning, stacklevel=2)


def _read_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes (a symbolic
    link to one is followed). ValueError for another kind of file, such as a device or a pipe,
    which is opened without blocking and not read, or for a larger file; OSError when it cannot
    be opened (FileNotFoundError when there is none)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    handle = os.open(path, flags)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            data = stream.read(min(info.st_size, limit) + 1)
    finally:
        os.close(handle)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit:,} bytes")
    return data


def _checked_name(name) -> str:
    """``name`` when it can be an entry name: printable ASCII, at most
    :data:`MAX_NAME_LENGTH` characters; else ValueError."""
    if (not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH
            or not name.isascii() or not name.isprintable()):
        raise ValueError(f"the entry name {str(name)[:80]!r} is not a kernel's name")
    return name


def _is_hex_digest(text) -> bool:
    return (isinstance(text, str) and len(text) == 64
            and all(char in "0123456789abcdef" for char in text))


def _is_count(value, limit: int) -> bool:
    """True for an int (not a bool) in ``[0, limit]``."""
    return type(value) is int and 0 <= value <= limit


def _load(key: str, device_id: int = 0):
    """The (module, function) of an entry of the cache folder, loaded into the current context
    (that of device ``device_id``); None when there is none or it cannot be used (a damaged one
    with a warning, and the compilation that follows replaces it)."""
    try:
        name, image = _cached_entry(key)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        _refuse(folder(), f"the entry {key}: {error}")
        return None
    return _module_function(image, name, key, device_id)


def _cached_entry(key: str) -> tuple[str, bytes]:
    """``(entry name, cubin)`` of the cache folder's entry ``key``, checked: its metadata is an
    object naming the entry and its :func:`entry_checksum`, which its cubin matches.
    FileNotFoundError when either file is missing; ValueError or OSError when it is damaged."""
    meta = _read_file(folder() / f"{key}.json", MAX_NAME_LENGTH + 1024)
    image = _read_file(folder() / f"{key}.cubin", MAX_IMAGE_BYTES)
    try:
        fields = json.loads(meta)
    except (ValueError, RecursionError):
        raise ValueError("its metadata is not JSON") from None
    if (not isinstance(fields, dict) or set(fields) != {"entry_name", "sha256"}
            or not _is_hex_digest(fields["sha256"])):
        raise ValueError("its metadata is not an object with entry_name and sha256")
    name = _checked_name(fields["entry_name"])
    if entry_checksum(key, name, image) != fields["sha256"]:
        raise ValueError("its checksum does not match")
    return name, image


def _load_shipped(key: str, cc, device_id: int = 0):
    """The (module, function) of an entry of the shipped archive for ``cc``, loaded into the
    current context; None when the archive or the entry is missing or cannot be used (a damaged
    one with a warning)."""
    archive = shipped_archive(tuple(cc))
    try:
        entry = archive.get(key)
    except ValueError as error:
        _refuse(archive.path, str(error))
        return None
    if entry is None:
        return None
    name, image = entry
    return _module_function(image, name, key, device_id)


@functools.lru_cache(maxsize=None)
def shipped_archive(cc: tuple) -> Archive | dict:
    """The shipped archive for compute capability ``cc`` (:func:`read_archive`); empty when
    there is none, and, with a warning, when it cannot be read."""
    path = SHIPPED / f"sm_{cc[0]}{cc[1]}.cubins"
    try:
        return read_archive(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        _refuse(path, str(error))
        return {}


def write_archive(path: Path, entries: dict) -> None:
    """Write ``entries`` (key -> (entry name, cubin bytes)) to ``path`` as one file.

    The file holds :data:`ARCHIVE_MAGIC`, the length of a JSON index (8 bytes, little-endian),
    the index, and the cubins, each compressed with zlib, in the index's order. The index maps
    each key to ``[entry name, offset, compressed length, length, checksum]``: the compressed
    cubin's place after the index, the cubin's length and its :func:`entry_checksum`.

    Parameters
    ----------
    path : pathlib.Path
        Where to write, atomically.
    entries : dict
        Key (64 hexadecimal digits) -> ``(entry name, cubin)``.
    """
    index, blobs, offset = {}, [], 0
    for key in sorted(entries):
        name, image = entries[key]
        blob = zlib.compress(image, 9)
        index[key] = [name, offset, len(blob), len(image), entry_checksum(key, name, image)]
        blobs.append(blob)
        offset += len(blob)
    header = json.dumps(index, sort_keys=True).encode()
    _write_atomically(Path(path), ARCHIVE_MAGIC + struct.pack("<Q", len(header)) + header
                      + b"".join(blobs))


class Archive(collections.abc.Mapping):
    """The entries of an archive, as :func:`read_archive` found them: key -> ``(entry name,
    cubin)``. The index is checked when the archive is read; an entry is inflated and checked
    each time it is looked up (``archive[key]``, ``archive.get(key)``), and a damaged one raises
    ValueError."""

    def __init__(self, path: Path, index: dict, blobs: memoryview):
        self.path = path
        """The archive's file."""
        self._index = index
        self._blobs = blobs

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self):
        return iter(self._index)

    def __contains__(self, key) -> bool:
        return key in self._index

    def __getitem__(self, key: str) -> tuple[str, bytes]:
        name, offset, size, length, checksum = self._index[key]
        inflater = zlib.decompressobj()
        try:  # at most one byte more than the index states, however well the blob compresses
            image = inflater.decompress(self._blobs[offset:offset + size], length + 1)
        except zlib.error:
            raise ValueError(f"the entry {key} does not decompress") from None
        if len(image) != length or not inflater.eof or inflater.unused_data:
            raise ValueError(f"the entry {key} does not inflate to the {length:,} bytes its "
                             "index states")
        if entry_checksum(key, name, image) != checksum:
            raise ValueError(f"the entry {key} does not match its checksum")
        return name, image


def read_archive(path: Path) -> Archive:
    """The archive that :func:`write_archive` wrote to ``path``, its index checked.

    Parameters
    ----------
    path : pathlib.Path
        The archive: a regular file of at most :data:`MAX_ARCHIVE_BYTES`.

    Returns
    -------
    Archive
        Key -> ``(entry name, cubin)``, each entry inflated and checked when looked up.

    Raises
    ------
    ValueError
        When the file is not such an archive: another kind of file, too large, another magic,
        or an index that is not JSON of the expected types and places.
    OSError
        When it cannot be read.
    """
    path = Path(path)
    data = _read_file(path, MAX_ARCHIVE_BYTES)
    start = len(ARCHIVE_MAGIC) + 8
    if not data.startswith(ARCHIVE_MAGIC) or len(data) < start:
        raise ValueError(f"{path} is not an archive of cubins of this version")
    length, = struct.unpack_from("<Q", data, len(ARCHIVE_MAGIC))
    if length > min(MAX_INDEX_BYTES, len(data) - start):
        raise ValueError(f"{path} is truncated or its index is too large")
    blobs = memoryview(data)[start + length:]
    try:
        index = json.loads(data[start:start + length])
    except (ValueError, RecursionError):
        raise ValueError(f"{path}: its index is not JSON") from None
    try:
        _check_index(index, len(blobs))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return Archive(path, index, blobs)


def _check_index(index, blobs_length: int) -> None:
    """ValueError unless ``index`` is an archive's index (:func:`write_archive`) whose entries
    lie within the ``blobs_length`` bytes that follow it."""
    if not isinstance(index, dict):
        raise ValueError("its index is not an object")
    for key, entry in index.items():
        if not (_is_hex_digest(key) and isinstance(entry, list) and len(entry) == 5):
            raise ValueError(f"the index's entry {key[:80]!r} is malformed")
        name, offset, size, length, checksum = entry
        _checked_name(name)
        if not (_is_count(offset, blobs_length) and _is_count(size, blobs_length - offset)
                and _is_count(length, MAX_IMAGE_BYTES) and _is_hex_digest(checksum)):
            raise ValueError(f"the index's entry {key} is malformed, too large or beyond the "
                             "end of the file (truncated)")


def _store(key: str, cubin: bytes | None, entry_name: str) -> None:
    """Write an entry atomically (the cubin first, then the file naming its entry point and its
    :func:`entry_checksum`, which :func:`_load` reads first); a folder that cannot be written,
    or a cubin whose bytes are not at hand, only costs the next process a load through
    numba-cuda."""
    if cubin is None:
        return
    try:
        folder().mkdir(parents=True, exist_ok=True)
        _write_atomically(folder() / f"{key}.cubin", cubin)
        _write_atomically(folder() / f"{key}.json", json.dumps(
            {"entry_name": entry_name, "sha256": entry_checksum(key, entry_name, cubin)}
        ).encode())
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
