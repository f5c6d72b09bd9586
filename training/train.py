"""Training: fit the kernel-selection tree on label records, cross-validate it, export it.

Times come from the chosen timing mode: ``auto`` (default) takes each matrix's time by the
size rule of :func:`training.label.target_mode` (back-to-back from 10⁶ nonzeros, what an
iterative solver sees on a large matrix; per call below, where launch and synchronisation
dominate); ``per_call`` or ``b2b`` take one mode for every matrix. A kernel whose status is not
``ok`` counts as infinitely slow. A label row whose timings stayed disturbed
(:func:`training.label.is_noisy`) is left out and counted in the report. The tree names a
kernel only: its parameters come from the registry's choosers when the model is used.

Selection quality of a policy on a matrix is ``q = t(best kernel) / t(chosen kernel)`` (1 is
perfect, 0 when the policy chose an infinitely slow kernel). Over a set of matrices:

================ ===========================================================================
geomean          geometric mean of q; 0 as soon as one choice is infeasible (a *miss*)
geomean_feasible geometric mean of q over the matrices the policy did not miss
within_10pct     share of matrices with t(chosen) ≤ 1.1 · t(best)
worst            smallest q
top1             share with t(chosen) = t(best) (the label itself, or an exact tie)
top1_tie5        share with t(chosen) ≤ 1.05 · t(best): top-1 accuracy counting 5 % ties
misses           matrices where the policy's kernel was infeasible, incorrect or failed
================ ===========================================================================

Policies compared: the tree, every fixed kernel ("always csr_vector", no fallback), and a
Ginkgo-style hand rule (``nnz > 10⁶ or longest row > 1024 → csr5, else csr_vector``). The tree
falls back: when its predicted kernel is infeasible for a matrix, the next class by predicted
value is used (ties in class order), as ``TreeModel.ranked`` orders them; it misses only when
every class it knows is infeasible.

The cost model: before any tree, :func:`fit_cost_model` fits, per kernel, a linear model of
its time over the matrix's cost quantities (:mod:`autospmv.cost`: bytes moved, thread steps,
the longest thread's loop, atomics into one entry, plus a constant, rows and nnz) by
non-negative least squares on relative error. The quantities are structural counts (for the
parameters the device's choosers pick); the coefficients are this device's (µs per byte, per
step, per launch…). Its estimates reach the tree as ``est_<kernel> = log2(t̂_k / min_j t̂_j)``
(0 for the kernel it expects fastest). The tree reads them next to the sizes (``fastest``, ``quality``) or next to every
structural feature (``correction``), and can so follow the cost model where it is right and
overrule it where the labels showed it wrong. The cost model is fitted on each training part
of the cross-validation like the tree, and its own out-of-fold choices are reported as the
policy "cost model alone".

Objectives (what a tree is fitted to):

``correction``
    a multi-output regression tree predicting, for every kernel, how far its time lies from
    the cost model's estimate: ``log2(t / t̂)``, clipped to ±:data:`CORRECTION_CLIP`. A
    matrix's kernels rank by the corrected estimate ``log2 t̂ + correction``, smallest first.
    Depth 0 (a single leaf) is the cost model with one correction per kernel.
``fastest``
    a classification tree whose label is the fastest kernel. Near-ties are decided by timing
    noise (two kernels within 2 % get different labels on similar matrices), and a wrong label
    costs the same whether the kernel chosen instead is 3 % or 3× slower.
``quality``
    a multi-output regression tree predicting, for every kernel, ``log max(q, QUALITY_FLOOR)``;
    a leaf picks the kernel with the highest mean, i.e. the best geometric-mean quality over its
    training matrices. This fits the selection criterion itself: near-ties have nearly equal
    targets, and the cost of a mistake is its slowdown. The floor (½) says that a kernel at
    half the best speed is a wrong choice however slow it is, so that the 100–1000× slowdowns
    of one-thread-per-row kernels on long rows do not dominate the squared error.
    It is exported in the classifier layout of :class:`autospmv.model.TreeModel`: a node's
    value for kernel k is ``Σ w_i · log(max(q_ik, floor) / floor)`` over its training
    matrices (w_i their sample weight), normalised to sum to 1, a non-negative score whose
    argmax is the leaf's choice and whose order is the fallback order.

Model selection: cross-validation grouped by (family, synthetic or real), so no family is in
both the training and the test part, chooses among :func:`hyper_grid` the objective,
``max_depth``, ``min_samples_leaf`` and the sample weighting (``none``; ``ratio`` = t(worst ok
kernel)/t(best); ``log_ratio`` = 1 + ln of that ratio: how much is at stake on a matrix) by
the mean log q of the out-of-fold choices (a miss scores as the worst ok kernel); ties go to
the simpler tree.
The reported per-fold scores come from nested cross-validation (the hyperparameters of each
outer fold are chosen on its training part alone), so they are not biased by that choice. The
exported model uses the hyperparameters chosen by cross-validation on all matrices and is
fitted on all of them. Real matrices are also evaluated family by family, each family left
out of training and of the hyperparameter choice for its model.

The grid is small on purpose. With about 20 groups, choosing among many objectives, depths and
leaf sizes fits the inner folds' noise (the outer folds each picked a different objective and
depth). On three H200 labellings of one corpus, searching only ``correction`` trees of depth
≤ 4 with leaves of ≥ 4 matrices, instead of all three objectives at any depth and leaf size,
raised the nested-CV geometric mean on all three and the share within 10 % of the best on
two (``models/README.md`` has the figures). ``--objectives`` widens the search.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
import types
from pathlib import Path

import numpy as np
from scipy.optimize import nnls
from sklearn.model_selection import GroupKFold
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

import autospmv
from autospmv.cost import QUANTITY_NAMES
from autospmv.features import FEATURE_NAMES
from autospmv.model import CostModel, TreeModel
from autospmv.selector import LONG_ROW
from training.label import (LARGE_NNZ, NOISE_LIMIT, TRAINING_MODES, is_noisy, read_records,
                            target_mode)

WEIGHTINGS = ("none", "log_ratio", "ratio")
OBJECTIVES = ("fastest", "quality", "correction")
QUALITY_FLOOR = 0.5
"""The ``quality`` objective's floor on q (see the module docstring)."""
RULE_ROW = LONG_ROW
"""The hand rule's row threshold, the library rule's (:data:`autospmv.selector.LONG_ROW`)."""
RULE_NNZ = 1_000_000
"""The hand rule's size threshold. The library's fallback rule (``selector.rule_decision``)
has no such clause: it reads the row lengths only, so that it also decides for matrices that
stay on the GPU. Both rules are kept as they are; the policy here is the baseline the trained
models were compared with in their reports."""
TREE_BASE_FEATURES = ("rows", "nnz")
"""What a ``fastest`` or ``quality`` tree reads next to the cost model's ``est_<kernel>``
values: the sizes, which say how full the device is. (A tree is invariant to monotone
transforms: log sizes add nothing.)"""
CORRECTION_FEATURES = tuple(f for f in FEATURE_NAMES if f not in QUANTITY_NAMES)
"""What a ``correction`` tree reads next to the ``est_<kernel>`` values: the structural
features (the cost quantities enter through the estimates)."""
CORRECTION_CLIP = 3.0
"""The ``correction`` objective's targets, log2(t / t̂), are clipped to ±3: a kernel 8× off
its estimate is wrong there, however far; a kernel that did not run counts as +3."""


@dataclasses.dataclass(frozen=True)
class Hyper:
    """Tree hyperparameters chosen by cross-validation."""

    max_depth: int | None
    min_samples_leaf: int
    weighting: str
    objective: str = "quality"


DEFAULT_OBJECTIVES = ("correction",)
"""The objectives cross-validation searches unless told otherwise (see "Model selection")."""


def hyper_grid(objectives=DEFAULT_OBJECTIVES) -> tuple[Hyper, ...]:
    """The hyperparameters cross-validation chooses among for ``objectives``: depth up to 4
    (0 too for ``correction``), leaves of at least 4 matrices, every weighting. Simplest first
    (shallow, large leaves, unweighted): the first of equal scores wins."""
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown or not objectives:
        raise ValueError(f"objectives must be among {', '.join(OBJECTIVES)}; got "
                         f"{', '.join(map(str, objectives)) or 'none'}")
    return tuple(
        Hyper(depth, leaf, weighting, objective)
        for objective in objectives
        for depth in ((0,) if objective == "correction" else ()) + (1, 2, 3, 4)
        for leaf in (8, 4)
        for weighting in WEIGHTINGS
    )


GRID = hyper_grid()
FALLBACK_HYPER = Hyper(4, 2, "log_ratio")
"""Used when the data has fewer than two groups, so that nothing can be cross-validated."""


@dataclasses.dataclass
class Dataset:
    """Label records as arrays: one row per matrix, one time column per kernel."""

    names: list[str]
    families: np.ndarray
    real: np.ndarray
    feature_names: tuple[str, ...]
    X: np.ndarray
    times: np.ndarray
    """Microseconds by the timing mode; inf where the kernel is not ``ok``."""
    nnz: np.ndarray
    row_max: np.ndarray
    grown: np.ndarray
    """Copies of a real file (1: the file as given, or synthetic)."""
    kernels: tuple[str, ...] = autospmv.KERNELS
    noisy: list[str] = dataclasses.field(default_factory=list)
    """Names of the records left out because their timings stayed disturbed."""

    def __post_init__(self):
        self.groups = np.array([f"{f}/{'real' if r else 'synthetic'}"
                                for f, r in zip(self.families, self.real)])
        """CV groups: family and whether the matrix is real or synthetic."""
        self.labels = np.array(self.kernels)[np.argmin(self.times, axis=1)]
        """The fastest kernel of each matrix."""
        self.as_given = self.real & (self.grown == 1)
        """Real matrices as their files hold them: the set the real-matrix figures are on."""

    def __len__(self) -> int:
        return len(self.names)


def dataset(records, mode: str = "auto") -> tuple[Dataset, list[str]]:
    """(the usable records as a Dataset, names of records dropped because no kernel was ok).

    Each record's times are taken in ``target_mode(nnz, mode)``; records whose timings stayed
    disturbed in that mode (:func:`training.label.is_noisy`) are left out and listed in
    ``Dataset.noisy``."""
    if mode not in TRAINING_MODES:
        raise ValueError(f"unknown timing mode {mode!r}; choose one of "
                         f"{', '.join(TRAINING_MODES)}")
    records = list(records)
    if not records:
        raise ValueError("no label records to train on")
    seen, feature_names = set(), tuple(records[0]["features"])
    kept, dropped, noisy = [], [], []
    for record in records:
        if record["name"] in seen:
            raise ValueError(f"matrix {record['name']!r} appears in more than one label record")
        seen.add(record["name"])
        if tuple(record["features"]) != feature_names:
            raise ValueError(f"record {record['name']!r} has different feature names than "
                             f"{records[0]['name']!r}; label all matrices with one autospmv")
        if is_noisy(record, mode):
            noisy.append(record["name"])
            continue
        row_mode = target_mode(record["nnz"], mode)
        times = [_time(record["kernels"].get(k), row_mode) for k in autospmv.KERNELS]
        (kept if np.isfinite(times).any() else dropped).append((record, times))
    if not kept:
        raise ValueError("no record has a kernel that ran correctly and steady timings; "
                         f"nothing to train on ({len(noisy)} noisy, {len(dropped)} without an "
                         "ok kernel)")
    missing = [f for f in FEATURE_NAMES if f not in feature_names]
    if missing:
        shown = ", ".join(missing[:4]) + (", …" if len(missing) > 4 else "")
        raise ValueError(f"the label records lack features this trainer needs ({shown}); "
                         "relabel with this autospmv")
    recs = [r for r, _ in kept]
    return Dataset(
        names=[r["name"] for r in recs],
        families=np.array([r["family"] for r in recs]),
        real=np.array([r["source"] != "synthetic" for r in recs]),
        feature_names=feature_names,
        X=np.array([[r["features"][f] for f in feature_names] for r in recs], dtype=np.float64),
        times=np.array([t for _, t in kept], dtype=np.float64),
        nnz=np.array([r["nnz"] for r in recs], dtype=np.float64),
        row_max=np.array([r["features"].get("row_max", np.inf) for r in recs], np.float64),
        grown=np.array([r.get("grown", 1) for r in recs], dtype=np.int64),
        noisy=noisy,
    ), [r["name"] for r, _ in dropped]


def _time(result: dict | None, mode: str) -> float:
    if not result or result["status"] != "ok":
        return math.inf
    return float(result[f"time_{mode}_us"])


# -- metrics --------------------------------------------------------------------------------


def selection_metrics(times: np.ndarray, chosen: np.ndarray) -> dict:
    """The metrics of the module docstring; ``chosen`` is a kernel column per row, -1 for none."""
    times = np.asarray(times, dtype=np.float64)
    chosen = np.asarray(chosen)
    n = len(chosen)
    if n == 0:
        return {"n": 0}
    best = times.min(axis=1)
    t = np.where(chosen >= 0, times[np.arange(n), np.maximum(chosen, 0)], np.inf)
    miss = ~np.isfinite(t)
    q = np.where(miss, 0.0, best / np.where(miss, 1.0, t))
    hit = q[~miss]
    return {
        "n": int(n),
        "geomean": float(np.exp(np.log(hit).mean())) if not miss.any() else 0.0,
        "geomean_feasible": float(np.exp(np.log(hit).mean())) if hit.size else None,
        "within_10pct": float(np.mean(t <= 1.1 * best)),
        "worst": float(q.min()),
        "top1": float(np.mean(t == best)),
        "top1_tie5": float(np.mean(t <= 1.05 * best)),
        "misses": int(miss.sum()),
    }


def selection_score(times: np.ndarray, chosen: np.ndarray) -> float:
    """Mean log q, a miss scoring as the slowest ok kernel (the model-selection criterion)."""
    n = len(chosen)
    best = times.min(axis=1)
    worst = np.where(np.isfinite(times), times, -np.inf).max(axis=1)
    t = np.where(chosen >= 0, times[np.arange(n), np.maximum(chosen, 0)], np.inf)
    return float(np.mean(np.log(best / np.where(np.isfinite(t), t, worst))))


def fixed_policy(ds: Dataset, kernel: str) -> np.ndarray:
    return np.full(len(ds), ds.kernels.index(kernel))


def rule_policy(ds: Dataset) -> np.ndarray:
    """The Ginkgo-style hand rule of the module docstring."""
    long = (ds.nnz > RULE_NNZ) | (ds.row_max > RULE_ROW)
    return np.where(long, ds.kernels.index("csr5"), ds.kernels.index("csr_vector"))


def first_feasible(times: np.ndarray, ranking: np.ndarray) -> np.ndarray:
    """Per row, the first kernel column of ``ranking`` with a finite time, else -1."""
    finite = np.isfinite(np.take_along_axis(times, ranking, axis=1))
    first = np.argmax(finite, axis=1)
    return np.where(finite.any(axis=1), ranking[np.arange(len(ranking)), first], -1)


def tree_policy(fitted: "Fitted", ds: Dataset, rows) -> np.ndarray:
    """The choices of a fitted model (see :func:`fit`), with fallback (see the module
    docstring), for ``ds`` rows ``rows``."""
    return first_feasible(ds.times[rows], fitted.ranking(ds, rows))


def cost_policy(cost_model: CostModel, ds: Dataset, rows) -> np.ndarray:
    """The cost model alone: the kernel with the smallest estimate that ran, per row."""
    estimates = cost_model.times(ds.X[rows], ds.feature_names)
    columns = np.array([ds.kernels.index(k) for k in cost_model.kernels])
    return first_feasible(ds.times[rows], columns[np.argsort(estimates, axis=1, kind="stable")])


def fit_cost_model(ds: Dataset, rows) -> CostModel:
    """Per kernel, the non-negative coefficients minimising Σ (t̂/t − 1)² over the rows where
    the kernel ran: relative error, so that a 10 µs matrix counts as much as a 10 ms one.
    Regressor columns are scaled to a maximum of 1 for the solver and the scale undone. A
    kernel that ran on none of the rows is estimated at a constant, the slowest time of any
    kernel on them: a last resort."""
    times = ds.times[rows]
    slowest = float(np.max(times[np.isfinite(times)]))
    coefficients = {}
    for j, kernel in enumerate(ds.kernels):
        ran = np.asarray(rows)[np.isfinite(ds.times[rows, j])]
        if ran.size == 0:
            coefficients[kernel] = [slowest] + [0.0] * (len(CostModel.REGRESSORS) - 1)
            continue
        design = np.column_stack([np.ones(ran.size),
                                  CostModel.design(ds.X[ran], ds.feature_names, kernel)])
        design /= ds.times[ran, j][:, None]
        scale = design.max(axis=0)
        scale[scale == 0] = 1.0
        solution, _ = nnls(design / scale, np.ones(ran.size))
        coefficients[kernel] = (solution / scale).tolist()
    return CostModel(coefficients)


# -- fitting and cross-validation -----------------------------------------------------------


def sample_weights(times: np.ndarray, weighting: str) -> np.ndarray:
    best = times.min(axis=1)
    worst = np.where(np.isfinite(times), times, -np.inf).max(axis=1)
    if weighting == "none":
        return np.ones(len(times))
    if weighting == "ratio":
        return worst / best
    if weighting == "log_ratio":
        return 1.0 + np.log(worst / best)
    raise ValueError(f"unknown weighting {weighting!r}; choose one of {', '.join(WEIGHTINGS)}")


@dataclasses.dataclass
class Fitted:
    """A cost model and the tree over its estimates."""

    cost_model: CostModel
    objective: str
    tree: object = None
    """A ``DecisionTreeClassifier``, a :class:`QualityTree` or a :class:`CorrectionTree`."""

    @property
    def _base_features(self) -> tuple[str, ...]:
        return CORRECTION_FEATURES if self.objective == "correction" else TREE_BASE_FEATURES

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The tree's input columns."""
        return self._base_features + self.cost_model.derived_names

    def estimates(self, ds: Dataset, rows) -> np.ndarray:
        """The cost model's µs for ``ds`` rows ``rows``, one column per kernel."""
        return self.cost_model.times(ds.X[rows], ds.feature_names)

    def inputs(self, ds: Dataset, rows, estimates: np.ndarray | None = None) -> np.ndarray:
        """The tree's input matrix for ``ds`` rows ``rows`` (``estimates``: theirs, when the
        caller has them)."""
        if estimates is None:
            estimates = self.estimates(ds, rows)
        columns = ds.X[rows][:, [ds.feature_names.index(f) for f in self._base_features]]
        return np.hstack([columns, self.cost_model.relative(estimates)])

    def export(self, provenance: dict | None = None) -> TreeModel:
        """The model file's content: the tree, its cost model and how its leaves rank."""
        return TreeModel.from_sklearn(
            self.tree, self.feature_names, provenance, cost_model=self.cost_model,
            ranking="correction" if self.objective == "correction" else "value")

    def ranking(self, ds: Dataset, rows) -> np.ndarray:
        """Kernel columns of ``ds`` per row, best first, as :meth:`TreeModel.ranked` orders
        them: by falling leaf value, or for a correction tree by rising corrected estimate."""
        estimates = self.estimates(ds, rows)
        values = self.tree.predict_proba(self.inputs(ds, rows, estimates))
        if self.objective == "correction":
            values = -(np.log2(estimates) + values)
        order = np.argsort(-values, axis=1, kind="stable")
        return np.array([ds.kernels.index(c) for c in self.tree.classes_])[order]


class QualityTree:
    """A fitted ``quality`` tree (see the module docstring) read as a classifier.

    ``predict_proba`` returns each sample's leaf value (the normalised kernel scores) and
    ``tree_`` is the classifier view of the regression tree that
    :meth:`autospmv.model.TreeModel.from_sklearn` exports: the same nodes and thresholds, one
    output whose values are the kernel scores, ``n_node_samples`` the training matrices.
    """

    def __init__(self, regressor: DecisionTreeRegressor, classes, X, gains, weights):
        self.regressor = regressor
        self.classes_ = np.asarray(classes)
        nodes = regressor.decision_path(X.astype(np.float32))  # rows × nodes indicator
        score = np.asarray(nodes.T @ (weights[:, None] * gains))
        self.value = score / score.sum(axis=1, keepdims=True)
        tree = regressor.tree_
        self.tree_ = types.SimpleNamespace(
            n_outputs=1, n_features=tree.n_features, children_left=tree.children_left,
            children_right=tree.children_right, feature=tree.feature,
            threshold=tree.threshold, value=self.value[:, None, :],
            n_node_samples=tree.n_node_samples,
            weighted_n_node_samples=tree.weighted_n_node_samples)

    def predict_proba(self, X) -> np.ndarray:
        return self.value[self.regressor.apply(np.asarray(X, dtype=np.float32))]


class CorrectionTree:
    """A fitted ``correction`` tree (see the module docstring): a multi-output regression
    tree whose leaf holds, per kernel, the weighted mean of ``log2(t / t̂)`` over its training
    matrices. ``predict_proba`` returns those corrections (not probabilities: a matrix's
    kernels rank by log2 t̂ + correction, rising) and ``tree_`` is the view that
    :meth:`autospmv.model.TreeModel.from_sklearn` exports."""

    def __init__(self, regressor: DecisionTreeRegressor, classes):
        self.regressor = regressor
        self.classes_ = np.asarray(classes)
        tree = regressor.tree_
        self.tree_ = types.SimpleNamespace(
            n_outputs=1, n_features=tree.n_features, children_left=tree.children_left,
            children_right=tree.children_right, feature=tree.feature,
            threshold=tree.threshold, value=tree.value[:, :, 0][:, None, :],
            n_node_samples=tree.n_node_samples,
            weighted_n_node_samples=tree.weighted_n_node_samples)

    def predict_proba(self, X) -> np.ndarray:
        return self.regressor.predict(np.asarray(X, dtype=np.float32))


def correction_targets(times: np.ndarray, log_estimates: np.ndarray) -> np.ndarray:
    """``log2(t / t̂)`` clipped to ±:data:`CORRECTION_CLIP`; +clip where the kernel did not
    run."""
    with np.errstate(invalid="ignore"):
        target = np.log2(times) - log_estimates
    return np.clip(np.where(np.isfinite(times), target, CORRECTION_CLIP),
                   -CORRECTION_CLIP, CORRECTION_CLIP)


def quality_gains(times: np.ndarray) -> np.ndarray:
    """``log(max(q, QUALITY_FLOOR) / QUALITY_FLOOR)`` per matrix and kernel: ≥ 0, ln 2 for
    the best kernel, 0 from half the best speed down (infeasible kernels included)."""
    q = times.min(axis=1, keepdims=True) / times
    return np.log(np.maximum(q, QUALITY_FLOOR) / QUALITY_FLOOR)


def fit(ds: Dataset, rows, hyper: Hyper, cost_model: CostModel | None = None) -> Fitted:
    """The cost model fitted on ``ds`` rows ``rows`` (unless given: it depends on the rows
    only) and, on its estimates, a tree for ``hyper``: a :class:`CorrectionTree` (objective
    ``correction``), a ``DecisionTreeClassifier`` (``fastest``) or a :class:`QualityTree`
    (``quality``); each has ``classes_``, ``predict_proba`` and the ``tree_`` that
    :meth:`TreeModel.from_sklearn` exports."""
    rows = np.asarray(rows)
    if hyper.objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {hyper.objective!r}; choose one of "
                         f"{', '.join(OBJECTIVES)}")
    fitted = Fitted(cost_model or fit_cost_model(ds, rows), hyper.objective)
    estimates = fitted.estimates(ds, rows)
    X = fitted.inputs(ds, rows, estimates)
    weights = sample_weights(ds.times[rows], hyper.weighting)
    if hyper.max_depth == 0:  # a single leaf: the cost model with one correction per kernel
        if hyper.objective != "correction":
            raise ValueError("max_depth 0 is only meaningful for the correction objective")
        regressor = DecisionTreeRegressor(min_samples_split=rows.size + 1, random_state=0)
    else:
        regressor = DecisionTreeRegressor(max_depth=hyper.max_depth,
                                          min_samples_leaf=hyper.min_samples_leaf,
                                          random_state=0)
    if hyper.objective == "correction":
        targets = correction_targets(ds.times[rows], np.log2(estimates))
        fitted.tree = CorrectionTree(regressor.fit(X, targets, sample_weight=weights),
                                     ds.kernels)
        return fitted
    if hyper.objective == "fastest":
        clf = DecisionTreeClassifier(max_depth=hyper.max_depth,
                                     min_samples_leaf=hyper.min_samples_leaf, random_state=0)
        fitted.tree = clf.fit(X, ds.labels[rows], sample_weight=weights)
        return fitted
    gains = quality_gains(ds.times[rows])
    regressor.fit(X, gains, sample_weight=weights)
    fitted.tree = QualityTree(regressor, ds.kernels, X, gains, weights)
    return fitted


def group_splits(groups: np.ndarray, n_splits: int,
                 seed: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Grouped k-fold splits (positions into ``groups``); none when there are fewer than 2
    groups. ``seed`` None: scikit-learn's GroupKFold (deterministic, balanced by size); else
    the groups in an order shuffled by ``seed``, each put into the fold with the fewest rows so
    far, so that repeated splits differ while folds stay balanced."""
    unique = np.unique(groups)
    k = min(n_splits, len(unique))
    if k < 2:
        return []
    if seed is None:
        return list(GroupKFold(n_splits=k).split(np.zeros(len(groups)), groups=groups))
    fold_of, sizes = {}, np.zeros(k, dtype=np.int64)
    for group in np.random.default_rng(seed).permutation(unique):
        fold = int(np.argmin(sizes))
        fold_of[group] = fold
        sizes[fold] += int(np.sum(groups == group))
    folds = np.array([fold_of[g] for g in groups])
    return [(np.flatnonzero(folds != f), np.flatnonzero(folds == f)) for f in range(k)]


def select_hyper(ds: Dataset, rows: np.ndarray, n_splits: int, grid=GRID) -> tuple[Hyper, float]:
    """The grid point with the best pooled out-of-fold selection score on ``rows``."""
    splits = group_splits(ds.groups[rows], n_splits)
    if not splits:
        return FALLBACK_HYPER, math.nan
    chosen = {hyper: np.empty(len(rows), dtype=np.int64) for hyper in grid}
    for train, test in splits:
        cost_model = fit_cost_model(ds, rows[train])
        for hyper in grid:
            fitted = fit(ds, rows[train], hyper, cost_model)
            chosen[hyper][test] = tree_policy(fitted, ds, rows[test])
    scores = {hyper: selection_score(ds.times[rows], chosen[hyper]) for hyper in grid}
    best = grid[0]
    for hyper in grid[1:]:
        if scores[hyper] > scores[best] + 1e-12:
            best = hyper
    return best, scores[best]


@dataclasses.dataclass
class Fold:
    test: np.ndarray
    hyper: Hyper
    chosen: np.ndarray
    """The tree's choices for the test rows."""
    cost_chosen: np.ndarray
    """The choices of the fold's cost model alone."""


def nested_cv(ds: Dataset, n_splits: int, grid=GRID, seed: int | None = None) -> list[Fold]:
    """Outer grouped folds (shuffled by ``seed``, see :func:`group_splits`); each fold's
    hyperparameters are chosen on its training rows."""
    folds = []
    for train, test in group_splits(ds.groups, n_splits, seed):
        hyper, _ = select_hyper(ds, train, n_splits, grid)
        fitted = fit(ds, train, hyper)
        folds.append(Fold(test, hyper, tree_policy(fitted, ds, test),
                          cost_policy(fitted.cost_model, ds, test)))
    return folds


# -- the whole job --------------------------------------------------------------------------


@dataclasses.dataclass
class TrainResult:
    model: TreeModel
    report: str
    """Markdown."""
    scores: dict


def policies(ds: Dataset) -> dict[str, np.ndarray]:
    """The baseline policies' choices on every row."""
    out = {"hand rule": rule_policy(ds)}
    out.update({f"always {k}": fixed_policy(ds, k) for k in ds.kernels})
    return out


REPEATS = 3
"""Repetitions of the nested cross-validation: GroupKFold's folds, then shuffled grouped folds
(:func:`group_splits`). One split decides which families are left out together; on the H200
labels the worst case ranged 0.56-0.66 over shuffled splits, so one split says little."""
BANDS = (("< 100K", 0, 100_000), ("100K-1M", 100_000, 1_000_000), ("≥ 1M", 1_000_000, math.inf))
"""Size bands (nonzeros) the evaluation is reported in; the last is :data:`LARGE_NNZ` up."""


def band_rows(ds: Dataset, band) -> np.ndarray:
    """Rows of ``ds`` whose nonzeros fall in ``band`` (a :data:`BANDS` entry)."""
    _, low, high = band
    return np.flatnonzero((ds.nnz >= low) & (ds.nnz < high))


def mean_metrics(runs: list[dict]) -> dict:
    """The per-key mean of several :func:`selection_metrics` results on the same rows."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if key != "n" and all(isinstance(r[key], (int, float)) for r in runs):
            out[key] = float(np.mean([r[key] for r in runs]))
    return out


def guard(cv: dict) -> dict:
    """Whether the tree's cross-validated geometric mean q beats the best fixed kernel's on the
    same labels: the condition for installing a model (``retrain``) and for shipping one.
    Returns ``{"passed", "tree", "best_fixed", "best_fixed_geomean", "reason"}``."""
    fixed = {name[len("always "):]: m for name, m in cv.items() if name.startswith("always ")}
    best = max(fixed, key=lambda k: (fixed[k]["geomean"], fixed[k]["within_10pct"]))
    best_q = fixed[best]["geomean"]
    tree = cv.get("tree")
    if tree is None:
        return {"passed": False, "tree": None, "best_fixed": best, "best_fixed_geomean": best_q,
                "reason": "the labels have fewer than two groups, so the tree could not be "
                          "cross-validated"}
    passed = tree["geomean"] > best_q
    return {"passed": passed, "tree": tree["geomean"], "best_fixed": best,
            "best_fixed_geomean": best_q,
            "reason": f"cross-validated geomean q {tree['geomean']:.4f} "
                      f"{'>' if passed else '≤'} always {best} {best_q:.4f}"}


def split_holdout(records, names) -> tuple[list[dict], list[dict]]:
    """(records to train on, held-out records). A record is held out when its name, or for a
    real matrix its file's name (so that grown and permuted copies go with it), is in
    ``names``."""
    names = set(names or ())
    train_part, held = [], []
    for record in records:
        source = record.get("source", "synthetic")
        stem = Path(source).stem if source != "synthetic" else None
        (held if record["name"] in names or stem in names else train_part).append(record)
    return train_part, held


def read_holdout(path) -> list[str]:
    """Matrix names from a held-out list: one a line; blank lines and ``#`` comments ignored."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def train(records, *, mode: str = "auto", n_splits: int = 5, grid=GRID,
          label_files: list[dict] | None = None, repeats: int = REPEATS,
          holdout=()) -> TrainResult:
    """Cross-validate, fit the final tree and build the report (see the module docstring).

    ``label_files``: ``[{"file", "sha256", "records"}]`` for the provenance. ``repeats``:
    nested cross-validations, the first on scikit-learn's size-balanced grouped folds, the
    others on grouped folds shuffled by their seed; the tree's figures are their mean.
    ``holdout``: names of matrices (or real files) kept out of everything (cross-validation,
    hyperparameters, the final fit) and scored separately at the end.
    """
    records = list(records)
    devices = {(r.get("device") or {}).get("name") for r in records}
    if len(devices) > 1:
        raise ValueError(f"the labels come from different devices ({', '.join(map(str, devices))});"
                         " train one model per device")
    dtypes = {r.get("dtype", "float64") for r in records}
    if len(dtypes) > 1:
        raise ValueError(f"the labels mix value types ({', '.join(sorted(dtypes))}); models "
                         "are per (device, dtype): train one per dtype")
    records, held = split_holdout(records, holdout)
    ds, dropped = dataset(records, mode)
    runs = [nested_cv(ds, n_splits, grid, seed) for seed in [None] + list(range(1, repeats))]
    folds = runs[0]
    oofs, cost_oofs = [], []
    for run in runs:
        oof, cost_oof = np.full(len(ds), -1), np.full(len(ds), -1)
        for fold in run:
            oof[fold.test] = fold.chosen
            cost_oof[fold.test] = fold.cost_chosen
        oofs.append(oof)
        cost_oofs.append(cost_oof)
    hyper, score = select_hyper(ds, np.arange(len(ds)), n_splits, grid)
    fitted = fit(ds, np.arange(len(ds)), hyper)
    baselines = policies(ds)
    chosen = {"tree": oofs, "cost model alone": cost_oofs} if folds else {}
    chosen.update({name: [c] for name, c in baselines.items()})
    cv = {"tree": None, "cost model alone": None}
    cv.update({name: mean_metrics([selection_metrics(ds.times, c) for c in cs])
               for name, cs in chosen.items()})
    bands = {band[0]: {name: mean_metrics([selection_metrics(ds.times[rows], c[rows])
                                           for c in cs])
                       for name, cs in chosen.items()}
             for band in BANDS if (rows := band_rows(ds, band)).size}
    verdict = guard(cv)
    lofo, lofo_chosen = leave_one_family_out(ds, n_splits, grid)
    real = np.flatnonzero(ds.as_given)
    lofo_all = selection_metrics(ds.times[real], lofo_chosen[real]) if lofo else None
    held_out = evaluate_holdout(fitted, held, mode) if held else None
    provenance = {
        "trained": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "timing_mode": mode,
        "large_nnz": LARGE_NNZ if mode == "auto" else None,
        "dtype": dtypes.pop(),
        "device": records[0].get("device") if records else None,
        "label_versions": records[0].get("versions") if records else None,
        "training_versions": _versions(),
        "labels": label_files or [],
        "matrices": len(ds),
        "noisy_excluded": len(ds.noisy),
        "held_out": len(held),
        "families": sorted(set(ds.groups.tolist())),
        "objective": hyper.objective,
        "quality_floor": QUALITY_FLOOR if hyper.objective == "quality" else None,
        "hyperparameters": {"max_depth": hyper.max_depth,
                            "min_samples_leaf": hyper.min_samples_leaf,
                            "weighting": hyper.weighting},
        "cv_selection_score": None if math.isnan(score) else score,
        "cv_repeats": len(runs) if folds else 0,
        "cv": {name: cv[name] for name in ("tree", "cost model alone", "hand rule")},
        "cv_by_size": {band: {name: m[name] for name in ("tree", "cost model alone")
                              if name in m}
                       for band, m in bands.items()},
        "guard": verdict,
        "real_leave_one_family_out": lofo_all,
        "held_out_scores": held_out["all"]["tree"] if held_out else None,
        "in_sample": selection_metrics(ds.times, tree_policy(fitted, ds, np.arange(len(ds)))),
    }
    model = fitted.export(provenance)
    scores = {"hyper": hyper, "grid": grid, "cv": cv, "folds": folds, "lofo": lofo,
              "lofo_all": lofo_all, "lofo_chosen": lofo_chosen, "dropped": dropped,
              "noisy": ds.noisy, "repeats": [selection_metrics(ds.times, o) for o in oofs]
              if folds else [], "bands": bands, "guard": verdict, "held_out": held_out}
    report = _report(ds, model, scores, records, mode)
    return TrainResult(model, report, scores)


def evaluate_holdout(fitted: "Fitted", records, mode: str) -> dict:
    """The fitted tree on held-out records, next to the hand rule and every fixed kernel:
    ``{"all" | band: {policy: metrics}}`` (noisy held-out records left out as in training)."""
    ds, _ = dataset(records, mode)
    choices = {"tree": tree_policy(fitted, ds, np.arange(len(ds))),
               "cost model alone": cost_policy(fitted.cost_model, ds, np.arange(len(ds)))}
    choices.update(policies(ds))
    out = {"all": {name: selection_metrics(ds.times, c) for name, c in choices.items()}}
    for band in BANDS:
        rows = band_rows(ds, band)
        if rows.size:
            out[band[0]] = {name: selection_metrics(ds.times[rows], c[rows])
                            for name, c in choices.items()}
    out["names"] = ds.names
    out["noisy"] = ds.noisy
    return out


def leave_one_family_out(ds: Dataset, n_splits: int,
                         grid=GRID) -> tuple[dict[str, dict], np.ndarray]:
    """Per real family: a tree whose hyperparameters are chosen (grouped CV) and which is fitted
    on everything but that family, evaluated on it, next to the hand rule and the best fixed
    kernel on the same matrices.

    Returns (``{family: {"tree", "hand rule", "best fixed"}}``, the tree's choice per row of
    ``ds``: a kernel column on the real matrices, -1 elsewhere).
    """
    out, chosen = {}, np.full(len(ds), -1)
    for family in sorted(set(ds.families[ds.as_given].tolist())):
        test = np.flatnonzero(ds.as_given & (ds.families == family))
        train = np.flatnonzero(~(ds.real & (ds.families == family)))
        if train.size == 0:
            continue
        hyper, _ = select_hyper(ds, train, n_splits, grid)
        chosen[test] = tree_policy(fit(ds, train, hyper), ds, test)
        sub = ds.times[test]
        fixed = {k: selection_metrics(sub, fixed_policy(ds, k)[test]) for k in ds.kernels}
        best_fixed = max(fixed, key=lambda k: (fixed[k]["geomean"], fixed[k]["within_10pct"]))
        out[family] = {
            "tree": selection_metrics(sub, chosen[test]),
            "hand rule": selection_metrics(sub, rule_policy(ds)[test]),
            "best fixed": dict(fixed[best_fixed], kernel=best_fixed),
        }
    return out, chosen


def chooser_quality(records, mode: str = "auto") -> dict[str, dict]:
    """For kernels with parameter variants: how close each strategy (the chooser, each
    variant's strategy) comes to the best variant timed on the same matrix.

    Returns ``{kernel: {strategy: {"n", "geomean", "within_10pct"}}}`` with q = t(best variant)
    / t(strategy), over the matrices where every strategy of the kernel ran ``ok``.
    """
    per_kernel: dict[str, dict[str, list]] = {}
    for record in records:
        by_kernel: dict[str, dict[str, float]] = {}
        row_mode = target_mode(record["nnz"], mode)
        for variant in record.get("variants", []):
            by_kernel.setdefault(variant["kernel"], {})[variant["strategy"]] = \
                _time(variant, row_mode)
        for kernel, strategies in by_kernel.items():
            strategies["chooser"] = _time(record["kernels"].get(kernel), row_mode)
            times = np.array(list(strategies.values()))
            if not np.isfinite(times).all():
                continue
            for strategy, t in strategies.items():
                per_kernel.setdefault(kernel, {}).setdefault(strategy, []).append(
                    times.min() / t)
    return {
        kernel: {s: {"n": len(q), "geomean": float(np.exp(np.mean(np.log(q)))),
                     "within_10pct": float(np.mean(np.array(q) >= 1 / 1.1))}
                 for s, q in strategies.items()}
        for kernel, strategies in per_kernel.items()
    }


def _versions() -> dict:
    import sklearn

    return {"autospmv": autospmv.__version__, "scikit-learn": sklearn.__version__,
            "numpy": np.__version__}


def file_digest(path) -> dict:
    data = Path(path).read_bytes()
    return {"file": Path(path).name, "sha256": hashlib.sha256(data).hexdigest()}


def train_files(paths, out=None, report=None, *, mode: str = "auto", n_splits: int = 5,
                objectives=DEFAULT_OBJECTIVES, repeats: int = REPEATS,
                holdout=None) -> TrainResult:
    """Train on label files, write the model JSON to ``out`` (unless None) and the report to
    ``report``; cross-validation searches :func:`hyper_grid` of ``objectives``. ``holdout``:
    a file listing held-out matrices (:func:`read_holdout`), or None."""
    records, files = [], []
    for path in paths:
        recs = read_records(path)
        records += recs
        files.append(dict(file_digest(path), records=len(recs)))
    held = read_holdout(holdout) if holdout else ()
    result = train(records, mode=mode, n_splits=n_splits, grid=hyper_grid(objectives),
                   label_files=files, repeats=repeats, holdout=held)
    if holdout:
        result.model.provenance["holdout_file"] = file_digest(holdout)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        result.model.to_json(out)
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        Path(report).write_text(result.report, encoding="utf-8")
    return result


# -- the report -----------------------------------------------------------------------------


def _table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _metric_cells(m: dict) -> list[str]:
    return [str(m["n"]), _fmt(m["geomean"]), _fmt(m["geomean_feasible"]),
            _pct(m["within_10pct"]), _fmt(m["worst"]), _pct(m["top1"]), _pct(m["top1_tie5"]),
            str(m["misses"])]


METRIC_HEADERS = ["n", "geomean q", "geomean q (not missed)", "within 10 %", "worst q",
                  "top-1", "top-1 (5 % ties)", "misses"]


_MODE_WORDS = {"auto": f"back-to-back from {LARGE_NNZ:,} nonzeros, per call below",
               "per_call": "per call", "b2b": "back-to-back"}


def _band_table(bands: dict) -> str:
    """One row per (size band, policy): geomean q, within 10 %, worst q; per band the tree,
    the cost model alone, the hand rule and the fixed kernels by falling geomean."""
    rows = []
    for band, by_policy in bands.items():
        learned = [p for p in ("tree", "cost model alone") if p in by_policy]
        fixed = sorted((p for p in by_policy if p not in learned),
                       key=lambda p: -by_policy[p]["geomean"])
        for policy in learned + fixed:
            m = by_policy[policy]
            rows.append([band, policy, m["n"], _fmt(m["geomean"]), _pct(m["within_10pct"]),
                         _fmt(m["worst"]), int(m["misses"])])
    return _table(["nonzeros", "policy", "n", "geomean q", "within 10 %", "worst q", "misses"],
                  rows)


def _describe(hyper: Hyper) -> str:
    return (f"{hyper.objective}/{hyper.max_depth}/{hyper.min_samples_leaf}/"
            f"{hyper.weighting}")


def _all_real_row(ds: Dataset, tree: dict) -> list:
    """The pooled row of the leave-one-family-out table."""
    real = np.flatnonzero(ds.as_given)
    sub = ds.times[real]
    fixed = {k: selection_metrics(sub, fixed_policy(ds, k)[real]) for k in ds.kernels}
    best = max(fixed, key=lambda k: (fixed[k]["geomean"], fixed[k]["within_10pct"]))
    rule = selection_metrics(sub, rule_policy(ds)[real])
    return ["**all real**", tree["n"], f"**{_fmt(tree['geomean'])}**",
            _pct(tree["within_10pct"]), _fmt(tree["worst"]), _fmt(rule["geomean"]),
            f"{best} {_fmt(fixed[best]['geomean'])}"]


def _real_matrix_table(ds: Dataset, chosen: np.ndarray) -> str:
    """One row per real matrix: the tree's choice (trained without its family) and the best."""
    rows = []
    for i in np.flatnonzero(ds.as_given):
        best, pick = int(np.argmin(ds.times[i])), int(chosen[i])
        q = ds.times[i, best] / ds.times[i, pick] if pick >= 0 else 0.0
        rows.append([ds.names[i], ds.families[i], int(ds.nnz[i]),
                     ds.kernels[pick] if pick >= 0 else "none", ds.kernels[best],
                     f"{ds.times[i, best]:.1f}", _fmt(q)])
    return _table(["matrix", "family", "nnz", "tree's kernel", "fastest kernel",
                   "fastest µs", "q"], rows)


def _real_counts(ds: Dataset) -> str:
    real, grown = int(ds.real.sum()), int((ds.real & ~ds.as_given).sum())
    if not grown:
        return f"{real} real"
    return f"{real} real: {real - grown} as given, {grown} grown copies"


def _cost_model_table(cost_model: CostModel) -> str:
    """The exported cost model's coefficients, one row per kernel."""
    rows = []
    for kernel, (constant, per_row, per_nnz, per_byte, per_step, per_span, per_atomic) in zip(
            cost_model.kernels, cost_model.coefficients):
        rows.append([kernel, _fmt(constant, 2), _fmt(per_row * 1e3), _fmt(per_nnz * 1e3),
                     _fmt(1e-3 / per_byte, 0) if per_byte else "–", _fmt(per_step * 1e6),
                     _fmt(per_span * 1e3), _fmt(per_atomic * 1e3)])
    return ("## Cost model (fitted on all matrices)\n\nt̂ = constant + Σ coefficient × quantity "
            "(`autospmv/cost.py`); \"bytes\" as the bandwidth it implies.\n\n"
            + _table(["kernel", "constant µs", "ns per row", "ns per nonzero", "bytes: GB/s",
                      "ps per thread step", "ns per span step", "ns per atomic"], rows))


def _report(ds: Dataset, model: TreeModel, scores: dict, records, mode: str) -> str:
    hyper, cv, folds = scores["hyper"], scores["cv"], scores["folds"]
    device = (records[0].get("device") or {}).get("name", "unknown device")
    labels, counts = np.unique(ds.labels, return_counts=True)
    parts = [
        "# autospmv selection tree: training report",
        f"{len(ds)} matrices ({_real_counts(ds)}) in {len(set(ds.groups))} groups "
        f"(family × synthetic/real), labelled on {device} in "
        f"{(records[0].get('dtype', 'float64') if records else 'float64')}; times: "
        f"{_MODE_WORDS[mode]}. q = t(best)/t(chosen); misses count as q = 0.",
    ]
    if scores["dropped"]:
        parts.append(f"Dropped (no kernel ran correctly): {', '.join(scores['dropped'])}.")
    parts.append(f"Left out as noisy (a kernel's median time above {NOISE_LIMIT} × its minimum "
                 f"after re-timing): {len(ds.noisy)} matrices"
                 + (f" ({', '.join(ds.noisy)})." if ds.noisy else "."))
    verdict = scores["guard"]
    parts.append(f"Guard (install only if the tree beats the best fixed kernel): "
                 f"{'passed' if verdict['passed'] else 'FAILED'}: {verdict['reason']}.")
    parts.append("Fastest kernel: " + ", ".join(f"{k} {c}" for k, c in zip(labels, counts))
                 + " matrices.")
    searched = ", ".join(dict.fromkeys(h.objective for h in scores["grid"]))
    parts.append(f"Chosen by grouped CV on all matrices among {len(scores['grid'])} settings "
                 f"(objectives: {searched}): objective={hyper.objective}"
                 + (f" (floor {QUALITY_FLOOR})" if hyper.objective == "quality" else "")
                 + f", max_depth={hyper.max_depth}, min_samples_leaf={hyper.min_samples_leaf}, "
                 f"weighting={hyper.weighting}; tree: {model.n_nodes} nodes, depth "
                 f"{model.depth}.")
    if folds:
        parts.append("## Nested cross-validation, per outer fold")
        rows = []
        for i, fold in enumerate(folds, start=1):
            m = selection_metrics(ds.times[fold.test], fold.chosen)
            rule = selection_metrics(ds.times[fold.test], rule_policy(ds)[fold.test])
            rows.append([i, ", ".join(sorted(set(ds.groups[fold.test]))), m["n"],
                         _fmt(m["geomean"]), _pct(m["within_10pct"]), _fmt(m["worst"]),
                         _pct(m["top1_tie5"]), _fmt(rule["geomean"]),
                         _describe(fold.hyper)])
        parts.append(_table(["fold", "test groups", "n", "tree geomean q", "within 10 %",
                             "worst q", "top-1 (5 % ties)", "hand rule geomean q",
                             "objective/depth/leaf/weighting"], rows))
    repeats = scores["repeats"]
    parts.append(f"## All policies (tree: out-of-fold choices of the nested CV, mean of "
                 f"{len(repeats)} repeats on shuffled grouped folds)")
    parts.append(_table(["policy"] + METRIC_HEADERS,
                        [[name] + _metric_cells(m) for name, m in cv.items() if m]))
    if len(repeats) > 1:
        parts.append("Per repeat, tree: " + "; ".join(
            f"{_fmt(m['geomean'])} / {_pct(m['within_10pct'])} / worst {_fmt(m['worst'])}"
            for m in repeats) + " (geomean q / within 10 % / worst q).")
    parts.append("## By size (nonzeros), out of fold\n\n" + _band_table(scores["bands"]))
    held = scores["held_out"]
    if held:
        parts.append(f"## Held-out matrices ({len(held['names'])}; never used for training "
                     "or tuning)\n\n" + _band_table(
                         {k: v for k, v in held.items() if k not in ("names", "noisy")})
                     + (f"\n\nLeft out as noisy: {', '.join(held['noisy'])}."
                        if held["noisy"] else ""))
    if scores["lofo"]:
        parts.append("## Real matrices, each family left out of training\n\n"
                     "Each family's tree has its hyperparameters chosen and is fitted without "
                     "that family.")
        rows = [[family, r["tree"]["n"], _fmt(r["tree"]["geomean"]),
                 _pct(r["tree"]["within_10pct"]), _fmt(r["tree"]["worst"]),
                 _fmt(r["hand rule"]["geomean"]),
                 f"{r['best fixed']['kernel']} {_fmt(r['best fixed']['geomean'])}"]
                for family, r in scores["lofo"].items()]
        rows.append(_all_real_row(ds, scores["lofo_all"]))
        parts.append(_table(["family", "n", "tree geomean q", "within 10 %", "worst q",
                             "hand rule geomean q", "best fixed kernel, geomean q"], rows))
        parts.append(_real_matrix_table(ds, scores["lofo_chosen"]))
    if model.cost_model is not None:
        parts.append(_cost_model_table(model.cost_model))
    quality = chooser_quality(records, mode)
    if quality:
        parts.append("## Parameter choosers against the best timed variant")
        rows = [[kernel, strategy, m["n"], _fmt(m["geomean"]), _pct(m["within_10pct"])]
                for kernel, strategies in quality.items()
                for strategy, m in sorted(strategies.items())]
        parts.append(_table(["kernel", "strategy", "n", "geomean q", "within 10 %"], rows))
    parts.append("## Tree\n\n```\n" + model.export_text() + "```")
    return "\n\n".join(parts) + "\n"
