"""Kernel selection and its explanation.

:class:`Decision` records which kernel runs, with which parameters, and why: the steps taken (a
rule's comparisons, or a forced choice), the feature values they read, and any guardrail that
changed the outcome. ``str(decision)`` and ``op.explain()`` print it.

Until a trained model is installed, automatic selection uses :func:`rule_decision`, a documented
rule in the style of Ginkgo's default: a matrix with a very long row (more than
:data:`LONG_ROW` nonzeros) goes to ``csr5``, whose load balance does not depend on row lengths;
everything else goes to ``csr_vector``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from . import registry

LONG_ROW = 1024
"""Rows longer than this make the rule choose csr5."""


@dataclasses.dataclass
class Decision:
    """The kernel chosen for a matrix, its parameters, and the reasons."""

    kernel: str
    params: dict
    source: str
    """Who decided: ``"forced"`` (``kernel=`` argument) or ``"rule"``."""
    path: list[str] = dataclasses.field(default_factory=list)
    """The comparisons made, in order, e.g. ``"max_row_length = 2048 > 1024"``."""
    features: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    """Guardrails and conversion facts (e.g. conversion time)."""

    def explain(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items()) or "no parameters"
        lines = [f"kernel {self.kernel} ({params}), chosen by {self.source}"]
        if self.path:
            lines.append("  " + " → ".join(self.path + [self.kernel]))
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    __str__ = explain


def rule_decision(csr: sp.csr_matrix) -> Decision:
    """The built-in rule used while no trained model is available (see the module docstring)."""
    lengths = np.diff(csr.indptr)
    longest = int(lengths.max()) if lengths.size else 0
    if longest > LONG_ROW:
        kernel, step = "csr5", f"max_row_length = {longest} > {LONG_ROW}"
    else:
        kernel, step = "csr_vector", f"max_row_length = {longest} ≤ {LONG_ROW}"
    return Decision(
        kernel, registry.choose_params(kernel, csr), "rule", [step],
        {"max_row_length": float(longest)},
        ["no trained model is installed yet; the built-in rule decided"],
    )


def forced_decision(csr: sp.csr_matrix, kernel: str, params: dict | None = None) -> Decision:
    """The decision for an explicit ``kernel=`` (parameters tuned unless given in ``params``)."""
    return Decision(kernel, registry.choose_params(kernel, csr, params), "forced",
                    [f"kernel={kernel!r} requested"])
