"""Fitting: the cost model, the objectives and the tree over the cost model's estimates.

:func:`fit_cost_model` fits the per-kernel cost coefficients (non-negative least squares on
relative error); :func:`fit` fits, on its estimates, the tree of one :class:`Hyper` setting:
``correction`` (a correction per kernel of the estimate), ``fastest`` (a classifier of the
fastest kernel) or ``quality`` (leaf scores of selection quality). The objectives are described
in the :mod:`training.train` docstring; choosing among them is :mod:`training.crossval`'s work.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
from scipy.optimize import nnls
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from autospmv.cost import QUANTITY_NAMES
from autospmv.features import FEATURE_NAMES
from autospmv.model import CostModel, TreeModel
from training.dataset import Dataset


WEIGHTINGS = ("none", "log_ratio", "ratio")
OBJECTIVES = ("fastest", "quality", "correction")
QUALITY_FLOOR = 0.5
"""The ``quality`` objective's floor on q (see the :mod:`training.train` docstring)."""
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
    """A fitted ``quality`` tree (see the :mod:`training.train` docstring) read as a classifier.

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
    """A fitted ``correction`` tree (see the :mod:`training.train` docstring): a multi-output
    regression tree whose leaf holds, per kernel, the weighted mean of ``log2(t / t̂)`` over
    its training matrices. ``predict_proba`` returns those corrections (not probabilities: a
    matrix's kernels rank by log2 t̂ + correction, rising) and ``tree_`` is the view that
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
