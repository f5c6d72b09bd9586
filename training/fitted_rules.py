"""A rule fitted to labels, and how it goes into model files: the order's cost rule
(:mod:`training.order_labels`) and the SpMM rule (:mod:`training.spmm_labels`) are fitted,
reported and guarded alike, and written only where their guard passed."""

from __future__ import annotations

import dataclasses
import sys


@dataclasses.dataclass
class Fit:
    """A fitted rule, the report of the fit, and its guard's verdict."""

    rule: object
    """The rule, as the model file's entry holds it (``to_dict``)."""
    report: str
    """The fit and how its decisions meet the labels."""
    passed: bool
    """Whether the guard passed: only then is the rule written into a model."""
    reason: str
    """The guard's reason, one line."""


def write_rule(model_path, attribute: str, rule, provenance_key: str, sources=()) -> None:
    """Put ``rule`` into the model file ``model_path`` as its ``attribute`` (rewritten
    atomically, in the schema version that holds it), with the files it was fitted to in the
    provenance (``provenance_key``: name and SHA-256 of each)."""
    from autospmv._decide.model.tree import TreeModel
    from .train import file_digest

    model = TreeModel.load(model_path)
    setattr(model, attribute, rule)
    model.provenance[provenance_key] = [file_digest(path) for path in sources]
    model.to_json(model_path)


def write_fit(fit: Fit, models, attribute: str, provenance_key: str, sources, what: str,
              log=None) -> None:
    """Write ``fit``'s rule into each of ``models`` where its guard passed (:func:`write_rule`),
    else leave them as they were; a line each way to ``log`` (None: standard error), naming the
    rule ``what``."""
    log = log or sys.stderr
    for path in models if fit.passed else ():
        write_rule(path, attribute, fit.rule, provenance_key, sources)
        print(f"wrote the fitted {what} into {path}", file=log)
    if models and not fit.passed:
        print(f"left {', '.join(map(str, models))} as they were: {fit.reason}", file=log)
