"""Kernel selection and its explanation.

:class:`Decision` records which kernel runs, with which parameters, and why: the model used and
why it was chosen, the comparisons on the tree's path with the feature values they read, the
leaf's training support, and any guardrail that changed the outcome. ``str(decision)`` and
``op.explain()`` print it.

Automatic selection (:func:`model_decision`) asks a trained :class:`~autospmv.model.TreeModel`,
found by :func:`find_model` in this order:

1. the ``model=`` argument (a path or a loaded model);
2. the ``AUTOSPMV_MODEL`` environment variable (a path);
3. a model retrained on this machine for this device (``python -m training retrain``);
4. the shipped model for this device (by GPU or CPU name), else the nearest shipped model of the
   same kind of device (another GPU's for a GPU, another CPU's for a CPU).

A retrained model that cannot be loaded or cannot decide (a damaged or foreign file) is skipped
with a warning, so that automatic selection never fails because of it; a model named by
``model=`` or ``AUTOSPMV_MODEL`` raises instead, as the caller asked for that one.

When no model exists at all, :func:`rule_decision` applies a documented rule in the style of
Ginkgo's default: a matrix with a very long row (more than :data:`LONG_ROW` nonzeros) goes to
``csr5``, whose load balance does not depend on row lengths; everything else to ``csr_vector``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import registry
from .model import TreeModel, device_slug, user_model_path

LONG_ROW = 1024
"""Rows longer than this make the rule choose csr5."""


@dataclasses.dataclass
class Decision:
    """The kernel chosen for a matrix, its parameters, and the reasons."""

    kernel: str
    params: dict
    source: str
    """Who decided: ``"forced"`` (``kernel=`` argument), ``"model <name>"`` or ``"rule"``."""
    path: list[str] = dataclasses.field(default_factory=list)
    """The comparisons made, in order, e.g. ``"max_row_length = 2048 > 1024"``."""
    features: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    """Guardrails and conversion facts (e.g. conversion time)."""
    candidates: list[str] = dataclasses.field(default_factory=list)
    """Kernels to fall back to, in order, when the chosen one cannot be built."""

    def explain(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items()) or "no parameters"
        lines = [f"kernel {self.kernel} ({params}), chosen by {self.source}"]
        if self.path:
            lines.append("  " + " → ".join(self.path + [self.kernel]))
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    __str__ = explain


def rule_decision(csr: sp.csr_matrix, device: str) -> Decision:
    """The built-in rule used while no trained model is available (see the module docstring)."""
    lengths = np.diff(csr.indptr)
    longest = int(lengths.max()) if lengths.size else 0
    if longest > LONG_ROW:
        kernel, step = "csr5", f"max_row_length = {longest} > {LONG_ROW}"
    else:
        kernel, step = "csr_vector", f"max_row_length = {longest} ≤ {LONG_ROW}"
    return Decision(
        kernel, registry.choose_params(kernel, csr, device), "rule", [step],
        {"max_row_length": float(longest)},
        ["no trained model is installed yet; the built-in rule decided"],
    )


@dataclasses.dataclass(frozen=True)
class ModelChoice:
    """A loaded model, where it came from (None for an object passed in) and why it was picked."""

    model: TreeModel
    path: Path | None
    reason: str
    retrained: bool = False
    """Found as the model retrained on this machine (skipped, with a warning, when broken)."""

    @property
    def name(self) -> str:
        return self.path.name if self.path else "given"


@functools.lru_cache(maxsize=16)
def _load_cached(path: str, mtime: float) -> TreeModel:
    return TreeModel.load(path)


def load_model(path) -> TreeModel:
    """Load (and cache, until the file changes) a model file; ValueError if it is invalid."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"model file {str(path)!r} does not exist")
    return _load_cached(str(path), path.stat().st_mtime)


def shipped_models() -> dict[str, Path]:
    """The models shipped with autospmv, by device slug (``cuda-…`` or ``cpu-…``)."""
    from importlib import resources

    try:
        folder = resources.files("autospmv.models")
    except ModuleNotFoundError:  # running from a source tree: models/ beside the package
        folder = Path(__file__).resolve().parent.parent / "models"
    if not folder.is_dir():
        return {}
    return {Path(item.name).stem: Path(str(item)) for item in folder.iterdir()
            if item.name.endswith(".json") and item.name.startswith(("cuda-", "cpu-"))}


def find_model(device: str, model=None, *, retrained: bool = True) -> ModelChoice | None:
    """The model to decide with on ``device`` (see the module docstring for the order);
    ``retrained=False`` skips the model retrained on this machine."""
    if isinstance(model, TreeModel):
        return ModelChoice(model, None, "passed as model=")
    if model is not None:
        return ModelChoice(load_model(model), Path(model), "passed as model=")
    env = os.environ.get("AUTOSPMV_MODEL")
    if env:
        return ModelChoice(load_model(env), Path(env), "from AUTOSPMV_MODEL")
    slug = device_slug(device)
    user = user_model_path(slug)
    if retrained and user.is_file():
        try:
            return ModelChoice(load_model(user), user, "retrained on this machine", True)
        except ValueError as error:
            warn_skipped(error)
    shipped = shipped_models()
    if slug in shipped:
        return ModelChoice(load_model(shipped[slug]), shipped[slug], "shipped for this device")
    kind = slug.split("-")[0] + "-"
    same_kind = sorted(name for name in shipped if name.startswith(kind))
    if same_kind:
        path = shipped[same_kind[0]]
        return ModelChoice(load_model(path), path,
                           f"shipped for {same_kind[0]}, the nearest to this device ({slug})")
    return None


def warn_skipped(error: Exception) -> None:
    """Warn that the model retrained on this machine is skipped because of ``error``."""
    warnings.warn(f"autospmv: the model retrained on this machine is skipped: {error}; the "
                  "shipped model decides instead (retrain to replace the file)", RuntimeWarning,
                  stacklevel=4)


def trained_on(provenance: dict) -> str:
    """``"; trained on NVIDIA H200, 2026-11-22"`` from a model's provenance (empty if unknown)."""
    device = provenance.get("device")
    name = device.get("name") if isinstance(device, dict) else device
    date = str(provenance.get("trained", ""))[:10]
    facts = ", ".join(str(fact) for fact in (name, date) if fact)
    return f"; trained on {facts}" if facts else ""


def model_decision(csr: sp.csr_matrix, choice: ModelChoice, features: dict,
                   device: str) -> Decision:
    """The tree's kernel for ``csr``, with its path, leaf support and fall-back order."""
    model = choice.model
    ranked = model.ranked(features)
    path = [f"{step.feature} = {step.value:.4g} {'≤' if step.went_left else '>'} "
            f"{step.threshold:.4g}" for step in model.decision_path(features)]
    leaf = model.leaf(features)
    notes = [f"model {choice.name} ({choice.reason}{trained_on(model.provenance)})"]
    if model.ranking == "correction":
        corrected = dict(zip(model.classes, np.exp2(model.corrected(features)).tolist()))
        notes += [f"leaf {leaf.node}: {leaf.samples} training matrices; its corrections turn "
                  "the cost model's estimates into",
                  "estimated µs: " + ", ".join(f"{kernel} {corrected[kernel]:.3g}"
                                               for kernel in ranked)]
    else:
        notes.append(f"leaf {leaf.node}: {leaf.samples} training matrices, score({ranked[0]}) "
                     f"= {leaf.proba[ranked[0]]:.2f} (the leaf's normalised class value)")
    if model.cost_model is not None:
        estimates = model.cost_model.estimates(features)
        notes.append("cost model estimates (µs): " + ", ".join(
            f"{kernel} {t:.3g}" for kernel, t in sorted(estimates.items(), key=lambda e: e[1])))
    used = {step.split(" = ")[0] for step in path}
    inputs = model.inputs(features)
    return Decision(ranked[0], registry.choose_params(ranked[0], csr, device),
                    f"model {choice.name}", path,
                    {name: inputs[name] for name in inputs if name in used}, notes, ranked[1:])


def forced_decision(csr: sp.csr_matrix, kernel: str, device: str,
                    params: dict | None = None) -> Decision:
    """The decision for an explicit ``kernel=`` (parameters tuned for ``device`` unless given in
    ``params``)."""
    return Decision(kernel, registry.choose_params(kernel, csr, device, params), "forced",
                    [f"kernel={kernel!r} requested"])
