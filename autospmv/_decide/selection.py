"""Kernel selection and its explanation.

:class:`Decision` records which kernel runs, with which parameters, and why: the model used and
why it was chosen, the comparisons on the tree's path with the feature values they read, the
leaf's training support, and any guardrail that changed the outcome. ``str(decision)`` and
``op.explain()`` print it.

Automatic selection (:func:`model_decision`) asks the trained
:class:`~autospmv._decide.model.tree.TreeModel` that
:func:`~autospmv._decide.model.lookup.find_model` finds for the device and the matrix's dtype.

When no model exists at all, :func:`rule_decision` applies a documented rule. On a GPU it is in
the style of Ginkgo's default: a matrix with a very long row (more than :data:`LONG_ROW` nonzeros)
goes to ``csr5``, whose load balance does not depend on row lengths; everything else to
``csr_vector``. On the CPU every matrix goes to :data:`RULE_CPU` (``csr_scalar``): no CPU model is
shipped, because on the CPU labels no trained tree was reliably better than that one kernel
(``models/README.md``, "CPU: one kernel"), so the CPU path is one kernel until a model retrained
on the machine passes the install guard.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import scipy.sparse as sp

from .. import _registry as registry
from .._support.cache import compile_timer
from ..formats.base import DeviceCSR, longest_row
from .features.extract import canonical_features_and_lengths, passes_needed
from .features.sampling import SAMPLE_THRESHOLD
from .model.lookup import ModelChoice, find_model, named_model, warn_skipped

LONG_ROW = 1024
"""Rows longer than this make the rule choose :data:`RULE_LONG` (also the row threshold of the
training reports' hand-rule baseline, ``training/metrics.py``, which adds a clause on nnz)."""

RULE_LONG, RULE_SHORT = "csr5", "csr_vector"
"""The rule's two kernels: for a matrix with a row longer than :data:`LONG_ROW`, and for the
rest. A fixed rule over two named kernels, so this is the one place outside the registry that
names kernels; the training reports' hand-rule baseline reads the same constants."""

RULE_CPU = "csr_scalar"
"""The CPU rule's one kernel: one row per task, the fastest fixed kernel on the CPU labels
(fastest on 93 of 115 matrices; cross-validated, a trained tree scored 0.977 against its 0.967
on one labelling run and 0.952 against its 0.964 on a second, ``models/README.md``)."""


@dataclasses.dataclass
class Decision:
    """The kernel chosen for a matrix, its parameters, and the reasons.

    :func:`autospmv.select` returns one, and every operator holds its own (``op.decision``);
    one written by hand builds an operator too (:class:`SpMVOperator`). Each parameter is kept
    as the attribute of the same name.

    Parameters
    ----------
    kernel : str
        The kernel, one of :data:`autospmv.KERNELS` or a registered one.
    params : dict
        The kernel's parameters (``{"width": 8}`` for hyb; ``{}`` for most).
    source : str
        Who decided: ``"forced"`` (``kernel=`` argument), ``"model <name>"`` or ``"rule"``.
    path : list of str, optional
        The comparisons made, in order, e.g. ``"max_row_length = 2048 > 1024"``.
    features : dict of str to float, optional
        The features those comparisons read, by name.
    notes : list of str, optional
        Guardrails and conversion facts (e.g. conversion time).
    candidates : list of str, optional
        Kernels to fall back to, in order, when the chosen one cannot be built.
    tuning : dict, optional
        With ``prepare(A, tune="measure")``: the predicted kernel, the measured candidates'
        times (µs, back-to-back and per call), the kept kernel and the cost of tuning.
    margins : dict of str to float, optional
        For a model's decision: how far the tree ranks each kernel behind its first choice
        (empty for a rule or a forced kernel). ``tune="measure"`` skips candidates far behind.
    estimates_us : dict of str to float, optional
        For a model with a cost model: each kernel's estimated µs per product (the leaf's
        corrected estimates where the tree corrects them); empty otherwise. The workload hint
        (``prepare(A, products=...)``) weighs the chosen kernel's estimate.
    order : {"keep", "rcm", "bfs"}, optional
        The order of rows and columns the kernel runs in: ``"keep"`` (A's own), ``"rcm"`` or
        ``"bfs"`` (:func:`autospmv.prepare`'s ``order=``); the kernel was chosen for A in that
        order.
    order_reason : str, optional
        Why that order (the cost rule's figures, the features before and after); empty for a
        decision made without considering the order (:func:`autospmv.select`).
    order_features : dict of str to float, optional
        The features the order's rule read (``x_sectors_per_nnz_warp_before``, ...).
    order_seconds : float, optional
        Seconds spent choosing the order: computing it, renumbering A and reading the
        features (0 where the order is kept at once).

    Examples
    --------
    >>> import scipy.sparse as sp, autospmv
    >>> decision = autospmv.select(sp.eye(1000, format="csr"), device="cpu")
    >>> decision.source in ("forced", "rule") or decision.source.startswith("model")
    True
    >>> autospmv.Decision("csr_scalar", {}, "forced").explain()
    'kernel csr_scalar (no parameters), forced by the caller'
    """

    kernel: str
    params: dict
    source: str
    path: list[str] = dataclasses.field(default_factory=list)
    features: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    candidates: list[str] = dataclasses.field(default_factory=list)
    tuning: dict = dataclasses.field(default_factory=dict)
    margins: dict[str, float] = dataclasses.field(default_factory=dict)
    estimates_us: dict[str, float] = dataclasses.field(default_factory=dict)
    order: str = "keep"
    order_reason: str = ""
    order_features: dict[str, float] = dataclasses.field(default_factory=dict)
    order_seconds: float = 0.0

    def explain(self) -> str:
        """A readable account of the decision.

        Returns
        -------
        str
            The kernel and its parameters, who chose it, the comparisons made (:attr:`path`)
            with the features they read, the order of rows and columns and why
            (:attr:`order_reason`), and the notes (guardrails, conversion, tuning).
        """
        params = ", ".join(f"{k}={v}" for k, v in self.params.items()) or "no parameters"
        who = "forced by the caller" if self.source == "forced" else f"chosen by {self.source}"
        lines = [f"kernel {self.kernel} ({params}), {who}"]
        if self.path:
            lines.append("  " + " → ".join(self.path + [self.kernel]))
        if self.order_reason:
            lines.append(f"  {self.order_reason}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    __str__ = explain


def rule_summary(device: str) -> str:
    """The built-in rule for ``device`` in words (what :func:`rule_decision` does)."""
    if device == "cpu":
        from ..kernels.cpu.scipy_product import (
            SCIPY_MAX_ROW_LENGTH, SCIPY_MIN_NNZ, SCIPY_MIN_SPREAD,
        )

        return (f"{RULE_CPU} for every matrix (its one-thread product through SciPy's compiled "
                f"CSR loop from {SCIPY_MIN_NNZ:,} nonzeros with at most {SCIPY_MAX_ROW_LENGTH:g} "
                f"per row, whose lengths spread by {SCIPY_MIN_SPREAD:g} or more)")
    return f"{RULE_LONG} when a row has more than {LONG_ROW} nonzeros, else {RULE_SHORT}"


def rule_decision(csr: sp.csr_matrix, device: str) -> Decision:
    """The built-in rule used while no trained model is available (see the module docstring)."""
    longest = longest_row(csr.indptr)
    note = "no trained model is installed yet; the built-in rule decided"
    if device == "cpu":
        kernel, step = RULE_CPU, "device = cpu"
        note = ("no CPU model is installed (none is shipped: on the CPU labels no trained tree "
                f"was reliably faster than {RULE_CPU}); the built-in rule decided")
    elif longest > LONG_ROW:
        kernel, step = RULE_LONG, f"max_row_length = {longest} > {LONG_ROW}"
    else:
        kernel, step = RULE_SHORT, f"max_row_length = {longest} ≤ {LONG_ROW}"
    return Decision(
        kernel, registry.choose_params(kernel, csr, device), "rule", [step],
        {"max_row_length": float(longest)}, [note],
    )


def trained_on(provenance: dict) -> str:
    """``"; trained on NVIDIA H200, 2026-11-22"`` from a model's provenance (empty if unknown)."""
    device = provenance.get("device")
    name = device.get("name") if isinstance(device, dict) else device
    date = str(provenance.get("trained", ""))[:10]
    facts = ", ".join(str(fact) for fact in (name, date) if fact)
    return f"; trained on {facts}" if facts else ""


def _comparison(step) -> str:
    """``value ≤ threshold`` (or ``>``) of a path step, with 4 significant digits, or as many
    more as it takes for the two to differ (``1000456 > 999999.5``, not ``1e+06 > 1e+06``)."""
    for digits in (4, 7, 10, 17):
        value, threshold = f"{step.value:.{digits}g}", f"{step.threshold:.{digits}g}"
        if value != threshold:
            break
    return f"{value} {'≤' if step.went_left else '>'} {threshold}"


def model_decision(csr: sp.csr_matrix, choice: ModelChoice, features: dict,
                   device: str, lengths: tuple[np.ndarray, np.ndarray] | None = None) -> Decision:
    """The tree's kernel for ``csr``, with its path, leaf support and fall-back order.

    Everything is read from one :meth:`~autospmv._decide.model.tree.TreeModel.evaluate` of
    ``features``: the cost model's estimates are computed and the tree is walked once per decision.
    ``features`` needs only those the model reads (its
    :meth:`~autospmv._decide.model.tree.TreeModel.features_read`).
    ``lengths``: the row-length histogram the feature scan built
    (:func:`autospmv._decide.features.extract.features_and_lengths`), from which the chosen
    kernel's parameters are chosen when its chooser reads only the row lengths."""
    model = choice.model
    evaluation, ranked, decided = model.decide(features, csr.nnz, only_read=True)
    leaf = evaluation.leaf
    path = [f"{step.feature} = {_comparison(step)}" for step in evaluation.path]
    notes = [f"model {choice.name} ({choice.reason}{trained_on(model.provenance)})"]
    matrix_dtype = np.dtype(csr.dtype).name
    estimates_us = dict(evaluation.estimates or {})
    corrects = evaluation.corrected is not None and model.corrects(leaf.node)
    if evaluation.corrected is not None:
        corrected = dict(zip(model.classes, np.exp2(evaluation.corrected).tolist()))
        estimates_us = corrected
        what = ("corrects the cost model's estimate of each kernel; the tree's kernel is the one "
                "with the smallest corrected estimate" if corrects else
                "keeps the cost model's estimates as they are; the tree's kernel is the one "
                "with the smallest estimate")
        notes.append(
            f"the path ends in leaf {leaf.node} ({leaf.samples} training matrices), which "
            f"{what} (µs, best first): "
            + ", ".join(f"{kernel} {corrected[kernel]:.3g}" for kernel in evaluation.ranked))
    else:
        top = evaluation.ranked[0]
        notes.append(f"the path ends in leaf {leaf.node} ({leaf.samples} training matrices); "
                     f"the tree's kernel is the one with the largest score there: score({top}) "
                     f"= {leaf.proba[top]:.2f} (the leaf's normalised class value)")
    if evaluation.estimates is not None:
        regime = _regime_words(model.cost_model, features["nnz"])
        when = "before the leaf's corrections " if corrects else ""
        notes.append(f"cost model estimates {when}(µs{regime}): "
                     + ", ".join(f"{kernel} {t:.3g}" for kernel, t in
                                 sorted(evaluation.estimates.items(), key=lambda e: e[1])))
    notes.append(f"a {choice.dtype} model, deciding for a {matrix_dtype} matrix")
    if decided is not None:
        notes.append(decided.note)
    used = {step.feature for step in evaluation.path}
    inputs = evaluation.inputs
    return Decision(ranked[0], registry.choose_params(ranked[0], csr, device, lengths=lengths),
                    f"model {choice.name}", path,
                    {name: inputs[name] for name in inputs if name in used}, notes, ranked[1:],
                    margins=model.margins(evaluation), estimates_us=estimates_us)


def model_may_decide(nnz: int, on_device: bool) -> bool:
    """Whether a trained model may decide for a matrix of ``nnz`` nonzeros: on the host always;
    on the GPU above :data:`~autospmv._decide.features.sampling.SAMPLE_THRESHOLD` nonzeros only,
    below which the built-in rule decides at once (:func:`decide`)."""
    return not on_device or nnz > SAMPLE_THRESHOLD


def decide(csr, kernel: str | None, device: str, model=None, params: dict | None = None,
           uploaded=None, *, start: str | None = None) -> Decision | None:
    """The decision for a canonical matrix: ``csr`` as
    :func:`~autospmv._support.validation.canonicalize` returned it, or a
    :class:`~autospmv.formats.base.DeviceCSR` for a matrix that lives on the GPU
    (:mod:`autospmv._prepare.device_input`). The one way in to deciding.

    ``kernel=`` decides (:func:`forced_decision`); else the model that :func:`find_model` finds
    decides from the features it reads (:func:`model_decision`), and without one the built-in
    rule (:func:`rule_decision`). A matrix on the GPU is decided by the model above
    :data:`~autospmv._decide.features.sampling.SAMPLE_THRESHOLD` nonzeros only, from the same
    features as on the host, counted there (:mod:`autospmv._decide.features.device_scan`), and by
    the rule below. A retrained model that loads but cannot decide is skipped with a warning (see
    the module docstring). ``uploaded``: the host ``csr`` already on the GPU, where the feature
    passes run.

    ``start=`` asks whether the decision is worth making later, on a thread (``prepare(A,
    background=True)``): it returns the decision to run ``start``'s kernel on meanwhile, or None
    where the decision is made at once anyway (on the GPU where the rule decides). The model
    that ``model=`` or ``AUTOSPMV_MODEL`` names is loaded first either way, so that a broken one
    raises now rather than on the thread."""
    on_device = isinstance(csr, DeviceCSR)
    structure = csr.structure() if on_device else csr
    if start is not None:
        return _start_of_later_decision(structure, start, device, model, uploaded)
    if kernel is not None:
        registry.get(kernel)  # validates the name
        return forced_decision(structure, kernel, device, params)
    if params:
        raise ValueError("params= needs kernel= (parameters belong to one kernel)")
    choice = None
    if model_may_decide(csr.nnz, on_device):
        choice = find_model(device, model, csr.dtype)
    if choice is None:
        return _rule(structure, device, on_device)
    # with the matrix on the GPU, a chooser that reads column indices reads them there
    read = structure if uploaded is None else uploaded.structure()
    values = None
    with compile_timer() as compiled:
        started = time.perf_counter()
        while True:
            needed = choice.model.features_read()
            if values is None or not needed <= values.keys():
                values, lengths = canonical_features_and_lengths(
                    csr, device=device, uploaded=uploaded, needed=needed)
            try:
                decision = model_decision(read, choice, values, device, lengths)
                break
            except ValueError as error:  # a model that loads but cannot decide (find_model)
                if not choice.retrained:
                    raise
                warn_skipped(error)  # and the shipped model decides
                choice = find_model(device, model, csr.dtype, retrained=False)
                if choice is None:
                    return _rule(structure, device, on_device)
        elapsed = time.perf_counter() - started
    took = f"features and prediction took {(elapsed - compiled.total) * 1e3:.2f} ms"
    if on_device or uploaded is not None:
        took += f" ({passes_note(needed)})"
    decision.notes.append(("device input: " if on_device else "") + took)
    if compiled.total:
        decision.notes.append(compiled.note("the feature scan"))
    return decision


def _start_of_later_decision(structure, start: str, device: str, model, uploaded
                             ) -> Decision | None:
    """:func:`decide`'s answer to ``start=``: on the GPU, deciding later needs the host matrix
    uploaded (CuPy present) and a model that may decide (:func:`model_may_decide`)."""
    named_model(model)
    if device == "cuda" and (uploaded is None or not model_may_decide(structure.nnz, True)):
        return None
    return dataclasses.replace(
        forced_decision(structure, start, device), source="the start of a background decision",
        path=[], notes=[f"background=True: products run {start} while the decision runs on a "
                        "thread (no kernel was requested); they switch to the decided kernel "
                        "when it is ready"])


def _rule(structure, device: str, on_device: bool) -> Decision:
    """:func:`rule_decision`, with the note that says why for a matrix on the GPU."""
    decision = rule_decision(structure, device)
    if on_device:
        decision.notes[:] = [f"device input: the built-in rule decided from the row lengths "
                             f"(below {SAMPLE_THRESHOLD:,} nonzeros the model's features read "
                             "every column index, which stay on the GPU); pass kernel= to choose"]
    return decision


def passes_note(needed) -> str:
    """What the features of a decision on a matrix on the GPU were computed from, for its
    notes: the passes that the model's features call for
    (:func:`~autospmv._decide.features.extract.passes_needed`), all run there
    (:mod:`autospmv._decide.features.device_scan`)."""
    sampled, index_passes = passes_needed(needed)
    passes = ["row lengths"] + ["bandwidth and diagonals"] * index_passes + [
        "the sampled rows' blocks and x sectors"] * sampled
    return ", ".join(passes[:-1]) + (" and " if len(passes) > 1 else "") + passes[-1] + \
        " counted on the GPU"


def forced_decision(csr: sp.csr_matrix, kernel: str, device: str,
                    params: dict | None = None) -> Decision:
    """The decision for an explicit ``kernel=`` (parameters tuned for ``device`` unless given in
    ``params``)."""
    return Decision(kernel, registry.choose_params(kernel, csr, device, params), "forced",
                    [f"kernel={kernel!r} requested"])


def _regime_words(cost_model, nnz) -> str:
    """Which of a cost model's coefficient tables estimated a matrix of ``nnz`` nonzeros, for
    explain() ("" with one table)."""
    if not cost_model.regimes:
        return ""
    start = float(cost_model.regime_start(nnz))
    ends = [from_nnz for from_nnz, _ in cost_model.regimes if from_nnz > start]
    if start == 0:
        return f"; its coefficients for matrices of fewer than {ends[0]:,.0f} nonzeros"
    if ends:
        return (f"; its coefficients for matrices of {start:,.0f} to fewer than "
                f"{ends[0]:,.0f} nonzeros")
    return f"; its coefficients for matrices of at least {start:,.0f} nonzeros"
