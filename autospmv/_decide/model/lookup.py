"""Which trained model decides: :func:`find_model` takes, in this order,

1. the ``model=`` argument (a path or a loaded model);
2. the ``AUTOSPMV_MODEL`` environment variable (a path), for the kind of device its model was
   trained for (its provenance's ``device``): a CPU model there does not decide for a GPU, nor a
   GPU model for the CPU (a warning says so, once), and one whose provenance does not say
   decides everywhere;
3. models are per (device, dtype): first for the matrix's dtype, then, only when no model of
   that dtype exists for this kind of device, for the other one:

   a. a model retrained on this machine for this device (``python -m autospmv.training retrain``,
      ``<slug>-<dtype>.json``; an older ``<slug>.json`` counts as float64);
   b. the shipped model for this device (by GPU or CPU name);
   c. the nearest shipped model of the same kind of device (another GPU's for a GPU, another
      CPU's for a CPU, never across), by :func:`nearest_model`: the longest common start of the
      device names (the same maker and product family: ``nvidia-h100`` is nearer to
      ``nvidia-h200`` than to ``nvidia-a100``), ties going to the most recently trained.

Shipped file names are ``<slug>-<dtype>.json``; a name without a dtype is a float64 model.

A retrained model that cannot be loaded (a damaged or foreign file) is skipped with a warning
(:func:`warn_skipped`), as is one that loads but cannot decide
(:func:`autospmv._decide.selection.decide` asks again with ``retrained=False``), so that automatic
selection never fails because of it; a model named by ``model=`` or ``AUTOSPMV_MODEL`` raises
instead, as the caller asked for that one.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import stat
import warnings
from pathlib import Path

import numpy as np

from .store import (
    DTYPES, device_slug, model_dtype, retrained_paths, split_stem, user_data_dir, written_name,
)
from .tree import TreeModel


@dataclasses.dataclass(frozen=True)
class ModelChoice:
    """A loaded model, where it came from (None for an object passed in) and why it was picked."""

    model: TreeModel
    path: Path | None
    reason: str
    dtype: str = "float64"
    """The value type the model was trained for."""
    retrained: bool = False
    """Found as the model retrained on this machine (skipped, with a warning, when broken)."""

    @property
    def name(self) -> str:
        return self.path.name if self.path else "given"


@functools.lru_cache(maxsize=16)
def _load_cached(path: str, identity: tuple[int, int, int, int]) -> TreeModel:
    return TreeModel.load(path)


def load_model(path) -> TreeModel:
    """Load a model file; ValueError if it is missing, not a regular file, invalid, or
    cannot be read (also when another process removes or replaces it while it is read).

    Loaded models are cached by path and the file's identity (device, inode, size and mtime in
    nanoseconds), so that a file replaced or rewritten in place is read again even when its
    mtime is unchanged (a copy that keeps the mtime, or a file system with a coarse clock)."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError:
        raise ValueError(f"model file {str(path)!r} does not exist") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"model file {str(path)!r} is not a regular file")
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    try:
        return _load_cached(str(path), identity)
    except OSError as error:
        raise ValueError(f"model file {str(path)!r} could not be read: "
                         f"{error.strerror or error}") from None


def shipped_models() -> dict[str, Path]:
    """The models shipped with autospmv, by device slug (``cuda-…`` or ``cpu-…``). The
    installed package's files do not change while it runs, so the folder is listed once per
    process rather than at every automatic decision."""
    return dict(_shipped_listing())


@functools.lru_cache(maxsize=1)
def _shipped_listing() -> dict[str, Path]:
    from importlib import resources

    try:
        folder = resources.files("autospmv.models")
    except ModuleNotFoundError:  # running from a source tree: models/ beside the package
        folder = Path(__file__).resolve().parents[3] / "models"
    if not folder.is_dir():
        return {}
    return {Path(item.name).stem: Path(str(item)) for item in folder.iterdir()
            if item.name.endswith(".json") and item.name.startswith(("cuda-", "cpu-"))}


def installed_models() -> dict[str, Path]:
    """The models ``retrain`` installed on this machine (the user data folder of
    :func:`autospmv._decide.model.store.user_data_dir`), by file stem (``<device>-<dtype>``):
    the ``.json`` files named as ``retrain`` names them
    (:func:`~autospmv._decide.model.store.written_name`; other files there are not models)."""
    folder = user_data_dir() / "models"
    if not folder.is_dir():
        return {}
    return {path.stem: path for path in sorted(folder.glob("*.json")) if written_name(path.stem)}


def _choice(path: Path, reason: str) -> ModelChoice:
    model = load_model(path)
    return ModelChoice(model, path, reason, model_dtype(model, path))


def named_model(model=None, device: str | None = None) -> ModelChoice | None:
    """The model that the caller names, loaded: ``model`` (a path or a loaded model), else the
    ``AUTOSPMV_MODEL`` environment variable when its model was trained for ``device`` (or
    ``device`` is None); None when neither names one. ValueError when the
    named file is missing or invalid: the caller asked for that model, so nothing replaces it.
    :func:`autospmv.prepare` with ``background=True`` calls it before the decision's thread
    starts, so that a broken model raises there as it does without ``background``."""
    if isinstance(model, TreeModel):
        return ModelChoice(model, None, "passed as model=", model_dtype(model))
    if model is not None:
        return _choice(Path(model), "passed as model=")
    env = os.environ.get("AUTOSPMV_MODEL")
    if env:
        choice = _choice(Path(env), "from AUTOSPMV_MODEL")
        kind = trained_for(choice.model)
        if device is None or kind in (None, device):
            return choice
        _warn_once(f"autospmv: AUTOSPMV_MODEL={env} is a model for {kind}, so it does not "
                   f"decide for {device}; the {device} model or rule decides there (pass "
                   "model= to use it anyway)")
    return None


def find_model(device: str, model=None, dtype=None, *,
               retrained: bool = True) -> ModelChoice | None:
    """The model to decide with on ``device`` for a matrix of ``dtype`` (None: float64); see
    the module docstring for the order. ``retrained=False`` skips the models retrained on this
    machine."""
    named = named_model(model, device)
    if named is not None:
        return named
    dtype = np.dtype(dtype or "float64").name
    slug = device_slug(device)
    shipped = shipped_models()
    for wanted in [dtype] + [d for d in DTYPES if d != dtype]:
        choice = _find_for_dtype(slug, wanted, shipped, retrained)
        if choice is not None:
            if wanted != dtype:
                choice = dataclasses.replace(
                    choice, reason=f"{choice.reason}; no {dtype} model exists for this kind of "
                                   "device")
            return choice
    return None


def _find_for_dtype(slug: str, dtype: str, shipped: dict[str, Path],
                    retrained: bool = True) -> ModelChoice | None:
    """Steps a-c of the module docstring for one dtype."""
    for user in retrained_paths(slug, dtype) if retrained else []:
        if user.is_file():
            try:
                return dataclasses.replace(_choice(user, "retrained on this machine"),
                                           retrained=True)
            except ValueError as error:
                warn_skipped(error)
    # A name with its dtype (``<slug>-float64``) before an older one without (``<slug>``).
    by_device = {stem: path for stem, path in sorted(shipped.items(), key=lambda s: s[0] ==
                                                     split_stem(s[0])[0])
                 if split_stem(stem)[1] == dtype}
    for stem, path in by_device.items():
        if split_stem(stem)[0] == slug:
            return _choice(path, "shipped for this device")
    kind = slug.split("-")[0] + "-"
    same_kind = {}
    for stem, path in by_device.items():
        if stem.startswith(kind):
            same_kind.setdefault(split_stem(stem)[0], (stem, path))
    same_kind = dict(same_kind.values())
    if not same_kind:
        return None
    stem = nearest_model(slug, same_kind)
    return _choice(same_kind[stem], f"shipped for {split_stem(stem)[0]}, the nearest to this "
                                    f"device ({slug})")


def nearest_model(slug: str, candidates: dict[str, Path]) -> str:
    """The name (stem) among ``candidates`` (shipped models of one dtype and kind of device)
    whose device is nearest to ``slug``: the longest common start of the device slugs (same
    maker, then same product family: ``cuda-nvidia-h100`` shares ``cuda-nvidia-h`` with
    ``cuda-nvidia-h200`` but only ``cuda-nvidia-`` with ``cuda-nvidia-a100``); among equals the
    most recently trained (provenance ``trained``), then the name."""
    def closeness(stem: str) -> tuple[int, str, str]:
        device = split_stem(stem)[0]
        common = len(os.path.commonprefix([slug, device]))
        trained = str(load_model(candidates[stem]).provenance.get("trained", ""))
        return common, trained, stem

    return max(candidates, key=closeness)


_warned: set[str] = set()
"""The warnings about models given in this process (each is given once)."""


def _warn_once(message: str) -> None:
    """A RuntimeWarning of ``message``, once per process (a loop of prepare() calls gets one)."""
    if message in _warned:
        return
    _warned.add(message)
    warnings.warn(message, RuntimeWarning, stacklevel=5)


def warn_skipped(error: Exception) -> None:
    """Warn that the model retrained on this machine is skipped because of ``error``, once per
    process for each distinct reason."""
    _warn_once(f"autospmv: the model retrained on this machine is skipped: {error}; the "
               "shipped model decides instead (retrain to replace the file)")


def trained_for(model: TreeModel) -> str | None:
    """The kind of device (``"cuda"`` or ``"cpu"``) a model's labels were timed on, from its
    provenance; None when the provenance does not say.

    Parameters
    ----------
    model : TreeModel
        A loaded model.

    Returns
    -------
    str or None
        ``"cuda"``, ``"cpu"`` or None.
    """
    device = model.provenance.get("device")
    kind = device.get("device") if isinstance(device, dict) else None
    return kind if kind in ("cuda", "cpu") else None
