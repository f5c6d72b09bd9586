"""Where numba keeps autospmv's compiled kernels, and how long compiling took.

numba compiles a ``cache=True`` function on first use and stores the machine code on disk, by
default in a ``__pycache__`` folder beside the source file, i.e. inside site-packages: a
reinstall or upgrade empties it, and a read-only installation cannot be cached at all (numba then
refuses to define the function and the import fails). autospmv therefore points numba's cache at
a user cache folder, chosen in this order:

1. ``NUMBA_CACHE_DIR`` when the user has set it (numba's own setting; left as it is);
2. ``AUTOSPMV_CACHE_DIR``;
3. the platform's user cache folder: ``$XDG_CACHE_HOME/autospmv/numba-<numba version>``
   (``~/.cache/...`` when unset) on Linux, ``~/Library/Caches/autospmv/...`` on macOS,
   ``%LOCALAPPDATA%\\autospmv\\...`` on Windows.

numba names cache entries after the source file's path and checks a hash of its contents, so
reinstalling the same version finds its entries again; the numba version in the folder name
keeps the machine code of different numba versions apart.

:func:`configure` runs when ``autospmv`` is imported, before any kernel is defined. It sets
``NUMBA_CACHE_DIR`` in ``os.environ`` (read by numba and numba-cuda when they are imported, and
inherited by subprocesses) and, when numba is already imported, ``numba.config.CACHE_DIR``. numba
has one cache folder per process, so other libraries' ``cache=True`` functions defined afterwards
in the same process are cached there too. If the folder cannot be created or written, a
:class:`CacheWarning` says so and compiled code goes to a temporary folder removed at exit, or,
when no temporary folder can be created either, stays in memory: nothing persists, but
importing and running work.

:func:`compile_timer` measures the time spent in numba's compiler (compiling, or loading from
the on-disk cache) during a block of code, so that decisions can report it apart from the work
they time.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path


class CacheWarning(UserWarning):
    """Compiled code on disk cannot be used: the cache folder is unusable (compiled code will
    not persist), or compiled GPU kernels stored there or shipped with the package are damaged
    (:mod:`autospmv.kernels.cuda.cubins`; those kernels are compiled instead)."""


def _numba_version() -> str:
    module = sys.modules.get("numba")
    if module is not None:
        return module.__version__
    try:
        return metadata.version("numba")
    except metadata.PackageNotFoundError:  # pragma: no cover - numba is a dependency
        return "unknown"


def user_cache_root() -> Path:
    """The platform's per-user cache folder (not created)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local"
        return Path(base)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def default_cache_dir() -> Path:
    """The folder autospmv would use with neither ``NUMBA_CACHE_DIR`` nor
    ``AUTOSPMV_CACHE_DIR`` set."""
    return user_cache_root() / "autospmv" / f"numba-{_numba_version()}"


def requested_cache_dir() -> tuple[Path, str]:
    """The cache folder the environment asks for, and which setting chose it."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"]), "NUMBA_CACHE_DIR"
    if os.environ.get("AUTOSPMV_CACHE_DIR"):
        return Path(os.environ["AUTOSPMV_CACHE_DIR"]), "AUTOSPMV_CACHE_DIR"
    return default_cache_dir(), "the user cache folder"


@dataclasses.dataclass(frozen=True)
class CacheState:
    """The outcome of :func:`configure`."""

    path: Path
    """Where numba writes compiled code in this process (when not :attr:`persistent` and no
    temporary folder could be made, the unusable folder: nothing is written)."""
    source: str
    """Which setting chose it (``NUMBA_CACHE_DIR``, ``AUTOSPMV_CACHE_DIR``, the user cache
    folder), or why a temporary folder is used."""
    persistent: bool
    """False when the requested folder was unusable and a temporary one stands in."""


_state: CacheState | None = None


def _writable(path: Path) -> str | None:
    """None if ``path`` can be created and written, else the reason why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return None


def _apply(path: Path) -> None:
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    for name in ("numba.core.config", "numba.cuda.core.config"):
        config = sys.modules.get(name)
        if config is not None:
            config.CACHE_DIR = str(path)


def configure() -> CacheState:
    """Point numba's on-disk cache at the folder of :func:`requested_cache_dir` (see the module
    docstring); idempotent. Returns the folder used."""
    global _state
    if _state is not None:
        return _state
    path, source = requested_cache_dir()
    problem = _writable(path)
    if problem is None:
        _state = CacheState(path, source, True)
    else:
        _state = _stand_in(path, source, problem)
    _apply(_state.path)
    return _state


def _stand_in(path: Path, source: str, problem: str) -> CacheState:
    """The cache when the requested folder is unusable: a temporary folder removed at exit,
    or, when no temporary folder can be created either (read-only temporary folders), the
    unusable folder itself, which numba then skips for its other places (beside the package),
    compiling in memory when none is writable (:func:`autospmv._support.jit.cached`). Either way a
    :class:`CacheWarning` says so."""
    advice = "Set AUTOSPMV_CACHE_DIR to a writable folder to keep it."
    try:
        temporary = Path(tempfile.mkdtemp(prefix="autospmv-numba-"))
    except OSError as error:
        warnings.warn(
            f"autospmv cannot use {path} (chosen by {source}) for compiled kernels ({problem}), "
            f"nor a temporary folder ({type(error).__name__}: {error}); numba caches compiled "
            "code beside the package if that folder is writable, else keeps it in memory only, "
            f"and the next process compiles again. {advice}",
            CacheWarning, stacklevel=4)
        return CacheState(path, f"none: {source} {path} and the temporary folders are not "
                                "writable", False)
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)
    warnings.warn(
        f"autospmv cannot use {path} (chosen by {source}) for compiled kernels ({problem}); "
        f"compiled code is kept in {temporary} until this process exits, so the next "
        f"process compiles again. {advice}", CacheWarning, stacklevel=4)
    return CacheState(temporary, f"temporary: {source} {path} is not writable", False)


def cache_dir() -> Path:
    """The folder numba caches autospmv's compiled code in, in this process."""
    return configure().path


@dataclasses.dataclass
class CompileTime:
    """Seconds spent in numba's compilers during a :func:`compile_timer` block."""

    cpu: float = 0.0
    """Holding numba's compiler lock: compiling, and loading machine code from the cache."""
    compiling: float = 0.0
    """The part of :attr:`cpu` spent compiling (type inference, LLVM)."""
    cuda: float = 0.0
    """Holding numba-cuda's compiler lock (compiling or loading GPU kernels)."""
    spans: list = dataclasses.field(default_factory=list)
    """(start, end) of every hold of either lock, on ``time.perf_counter``'s clock."""

    @property
    def total(self) -> float:
        """Seconds during which either compiler lock was held: the union of :attr:`spans`.
        numba-cuda loads a kernel while holding numba's lock too, so :attr:`cpu` and
        :attr:`cuda` overlap and their sum would count that time twice."""
        covered, reached = 0.0, -math.inf
        for start, end in sorted(self.spans):
            if end > reached:
                covered += end - max(start, reached)
                reached = end
        return covered

    @property
    def loading(self) -> float:
        """Loading compiled CPU code from the on-disk cache (and the lock's other work)."""
        return max(0.0, self.cpu - self.compiling)

    def note(self, what: str) -> str | None:
        """``"compilation of <what> took 812.40 ms (...)"``, or None when none was needed."""
        if self.total <= 0:
            return None
        parts = [f"numba {self.compiling * 1e3:.2f} ms compiling, {self.loading * 1e3:.2f} ms "
                 "loading from its cache"]
        if self.cuda:
            overlap = " (while numba's lock was held too)" \
                if self.cpu + self.cuda > self.total + 1e-6 else ""
            parts.append(f"numba-cuda {self.cuda * 1e3:.2f} ms{overlap}")
        return (f"compilation of {what} took {self.total * 1e3:.2f} ms ({'; '.join(parts)}; "
                f"cache: {cache_dir()}); `python -m autospmv warmup` compiles ahead of time")


_EVENTS = {  # event module -> (compiler lock, compilation, CompileTime field of the lock)
    "numba.core.event": ("numba:compiler_lock", "numba:compile", "cpu"),
    "numba.cuda.core.event": ("numba-cuda:compiler_lock", None, "cuda"),
}


@contextlib.contextmanager
def compile_timer():
    """Measure the time numba (and numba-cuda, when imported) spends compiling in the block.

    Yields a :class:`CompileTime`, filled when the block ends. Nested compilations count once.
    numba's listeners are process-wide: compilations in other threads during the block count.
    """
    result = CompileTime()

    def adder(field):
        def add(seconds):
            setattr(result, field, getattr(result, field) + seconds)
            if field != "compiling":  # a lock hold: where it lay in time, for the union
                end = time.perf_counter()
                result.spans.append((end - seconds, end))
        return add

    with contextlib.ExitStack() as stack:
        for name, (lock, compile_kind, field) in _EVENTS.items():
            event = sys.modules.get(name)
            if event is None:
                continue
            stack.enter_context(event.install_timer(lock, adder(field)))
            if compile_kind:
                stack.enter_context(event.install_timer(compile_kind, adder("compiling")))
        yield result
