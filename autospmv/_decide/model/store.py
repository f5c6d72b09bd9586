"""Where autospmv keeps trained models, and how their files are named and written.

The model store: the per-user data folder (:func:`user_data_dir`), the file a retrained model
is installed as (:func:`user_model_path`, named ``<device slug>-<dtype>.json`` by
:func:`model_stem` and read back by :func:`split_stem`), the device slugs that name a machine's
models (:func:`device_slug`) and the atomic write every model file goes through
(:func:`write_atomically`). It knows nothing of what a model file holds, which is
:mod:`autospmv._decide.model.tree`'s business: finding and naming models needs no tree code.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on every platform: labels_lock then runs unlocked
    fcntl = None

from ..._support import devices


def write_atomically(path, text: str) -> None:
    """Write ``text`` to ``path`` so that no reader, and no crash or full disk, can leave a
    partial file: a temporary file in the same folder is written, flushed to disk and renamed
    over ``path`` (an atomic replacement); on any failure the old file stays as it was. The
    file gets the mode a newly created file gets (``0o666`` less the process's umask), as
    ``open(path, "w")`` would give it, not the temporary file's private ``0o600``."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(temporary, 0o666 & ~current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable, where folders sync
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def current_umask() -> int:
    """The process's umask: read from ``/proc/self/status`` where Linux gives it, else set and
    restored at once (``os.umask`` can only be read by changing it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def user_data_dir() -> Path:
    """autospmv's per-user data folder: ``$AUTOSPMV_HOME`` if set, else
    ``$XDG_DATA_HOME/autospmv`` (default ``~/.local/share/autospmv``).

    A setting whose ``~`` or ``~user`` cannot be expanded (an unknown user, no home folder)
    raises a ValueError naming it rather than standing for some other folder: retrain and the
    command line stop with that error, and automatic selection skips the retrained models with
    a warning (:func:`autospmv._decide.model.lookup.find_model`)."""
    home = os.environ.get("AUTOSPMV_HOME")
    if home:
        return _expanded(home, "AUTOSPMV_HOME")
    data = os.environ.get("XDG_DATA_HOME")
    if data:
        return _expanded(data, "XDG_DATA_HOME") / "autospmv"
    return _expanded("~/.local/share", "the default data folder") / "autospmv"


def _expanded(value: str, setting: str) -> Path:
    """``value`` with ``~`` expanded, or a ValueError naming ``setting``."""
    try:
        return Path(value).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        raise ValueError(f"cannot expand {setting}={value!r}: no home folder found for its "
                         "user; set AUTOSPMV_HOME to a folder path") from None


DTYPES = ("float64", "float32")
"""Value types a model is trained for; models are per (device, dtype)."""


def model_stem(slug: str, dtype: str | None = None) -> str:
    """A model file's name without ``.json``: ``<slug>-<dtype>``, or ``<slug>`` alone (the
    older name, which means float64) when ``dtype`` is None."""
    return slug if dtype is None else f"{slug}-{dtype}"


def split_stem(stem: str) -> tuple[str, str]:
    """(device slug, dtype) of a model file name: ``cuda-nvidia-h100-float32`` →
    ``("cuda-nvidia-h100", "float32")``; a name without a dtype suffix is a float64 model."""
    for dtype in DTYPES:
        if stem.endswith("-" + dtype):
            return stem[: -len(dtype) - 1], dtype
    return stem, "float64"


WRITTEN_STEM = re.compile(r"(cpu|cuda)-[a-z0-9]+(-[a-z0-9]+)*")
"""The stem of every file ``retrain`` writes: ``<device slug>-<dtype>`` (or the older
``<device slug>`` of a float64 model), the slug being :func:`device_slug`'s."""


def written_name(stem: str) -> bool:
    """Whether ``stem`` is a name ``retrain`` gives its files (:data:`WRITTEN_STEM`): only such
    files are listed as installed models and removed by ``autospmv models --remove``."""
    return WRITTEN_STEM.fullmatch(stem) is not None


def user_model_path(slug: str, dtype: str | None = None) -> Path:
    """Where a model retrained on this machine for device ``slug`` and value type ``dtype``
    is installed (``<slug>-<dtype>.json``; without ``dtype`` the older ``<slug>.json``, read
    as float64)."""
    return user_data_dir() / "models" / f"{model_stem(slug, dtype)}.json"


def model_dtype(model, path=None) -> str:
    """The value type a model (a :class:`~autospmv._decide.model.tree.TreeModel`) was trained for:
    its provenance's ``dtype``, else its file name's suffix, else float64 (models from before
    the distinction)."""
    dtype = model.provenance.get("dtype")
    if dtype in DTYPES:
        return dtype
    return split_stem(Path(path).stem)[1] if path is not None else "float64"


def retrained_paths(slug: str, dtype: str) -> list[Path]:
    """Where a model retrained for ``slug`` and ``dtype`` may be installed (the older name
    without a dtype too, for float64); none, with a warning, when the per-user data folder
    cannot be determined (:func:`user_data_dir`): automatic selection goes on with the shipped
    models."""
    try:
        return [user_model_path(slug, dtype)] + ([user_model_path(slug)]
                                                 if dtype == "float64" else [])
    except ValueError as error:
        warnings.warn(f"autospmv: models retrained on this machine are not looked for: {error}",
                      RuntimeWarning, stacklevel=5)
        return []


def slugify(text: str) -> str:
    """Lower-case words joined by hyphens: ``"NVIDIA H100 80GB"`` → ``"nvidia-h100-80gb"``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_slug(device: str | None = None) -> str:
    """A file-name-safe identifier of the device models are trained for.

    ``"cuda-<gpu name>"`` for the current CUDA GPU, ``"cpu-<cpu model>"`` for the CPU;
    ``device=None`` means CUDA when a usable GPU is present. ``"cuda"`` without a usable GPU
    (deciding for a GPU elsewhere) gives ``"cuda-no-gpu"``, which names no model, so that the
    nearest shipped GPU model decides.
    """
    if device is None:
        device = devices.default_device()
    if device == "cuda":
        if not devices.cuda_available():
            return "cuda-no-gpu"
        if devices.cuda_simulator():
            return "cuda-simulator"
        from numba import cuda

        name = cuda.get_current_device().name
        return "cuda-" + slugify(name.decode() if isinstance(name, bytes) else name)
    if device == "cpu":
        return "cpu-" + slugify(cpu_model())
    raise ValueError(f"unknown device {device!r}; valid devices: 'cuda', 'cpu' or None")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else :func:`platform.processor`."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


@contextlib.contextmanager
def labels_lock(path):
    """Hold an exclusive lock on the labels file ``path`` for the block: an advisory
    ``flock`` on ``<name>.lock`` beside it (its folder must exist). Two runs on one file take
    turns, the second saying on stderr that it waits, instead of labelling the same matrices
    into it twice (the trainer refuses duplicate records). The lock file is deleted when the
    block ends, also by an error: it is removed while still locked, and a run that was waiting
    on it locks a fresh file instead (it checks that the file it locked is still the one at
    the path). Where the platform has no ``fcntl`` the block runs unlocked."""
    path = Path(path)
    lock = path.with_name(path.name + ".lock")
    waited = False
    while True:
        handle = open(lock, "a", encoding="utf-8")
        if fcntl is None:
            break
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not waited:
                print(f"waiting for another run that writes {path} to finish", file=sys.stderr,
                      flush=True)
                waited = True
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino:
                break  # the file still at the path: the lock is ours
        except FileNotFoundError:
            pass
        handle.close()  # the run before deleted the file it locked: lock the path's new one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        handle.close()
