"""Fitting: the cost model, the objectives and the tree over the cost model's estimates.

:func:`fit_cost_model` fits the per-kernel cost coefficients (non-negative least squares on
relative error); :func:`fit` fits, on its estimates, the tree of one :class:`Hyper` setting:
``correction`` (a correction per kernel of the estimate), ``fastest`` (a classifier of the
fastest kernel) or ``quality`` (leaf scores of selection quality). The objectives are described
in the :mod:`training.train` docstring; choosing among them is :mod:`training.crossval`'s work.

**Size regimes.** When the labels time small matrices per call and large ones back-to-back
(timing mode ``auto``, :attr:`Dataset.large`), the two are different targets: per call, the
launch and the synchronisation are much of a small matrix's time; back to back, a large
matrix's time is its memory traffic and its longest loops. One cost model fitted to both fits
neither, and one tree spends its splits telling the two apart. So, where the rows hold enough
matrices of both (:func:`regimes`), each regime gets its own cost-model coefficients (one
:class:`CostModel` with a second table, ``large_coefficients``) and its own tree with its own
hyperparameters (:class:`RegimeHyper`); the two trees hang under a root that splits on ``nnz``
at the regime boundary (:class:`RegimeTree`), so the model stays one tree. The large regime is
split once more at :data:`STREAMED_NNZ` (the matrices streamed from memory rather than held in
the L2 cache), where the labels hold enough matrices on both sides (:func:`streamed_split`):
the cost model fits the streamed matrices a table of their own, and they get a tree of their
own, with hyperparameters chosen on them, under a second split on ``nnz``.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
from scipy.optimize import nnls
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from autospmv._decide.features.quantities import QUANTITY_NAMES
from autospmv._decide.features.extract import FEATURE_NAMES
from autospmv._decide.model.tree import CostModel, TreeModel
from .dataset import Dataset


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
STREAMED_NNZ = 10_000_000
"""Nonzeros from which a matrix no longer stays in the GPU's L2 cache between back-to-back
products (50 MB on an H100) and its time is the traffic streamed from memory: where the labels
hold enough such matrices, the cost model fits them a table of their own."""
MIN_REGIME_MATRICES = 20
"""Fewest training matrices of each size regime for the regimes to be fitted apart
(:func:`regimes`); with fewer on one side, one cost model and one tree are fitted on all."""
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
    corrected: bool = True
    """False (``correction`` objective at depth 0 only): a single leaf correcting nothing, i.e.
    the cost model's estimates as they are."""

    def __post_init__(self):
        if not self.corrected and (self.objective != "correction" or self.max_depth != 0):
            raise ValueError("an uncorrected tree is the correction objective at max_depth 0")

    def as_dict(self) -> dict:
        """The tree's hyperparameters as a model's provenance records them (the objective is
        recorded apart)."""
        return {"max_depth": self.max_depth, "min_samples_leaf": self.min_samples_leaf,
                "weighting": self.weighting, "corrected": self.corrected}


@dataclasses.dataclass(frozen=True)
class RegimeHyper:
    """Hyperparameters of a model fitted in size regimes (see the module docstring): one
    :class:`Hyper` for the matrices below :attr:`Dataset.large_nnz`, one for the rest, and,
    where the large regime is split at :data:`STREAMED_NNZ`, one for the matrices from there
    (``streamed``; None: ``large``'s). All have one objective: the model's leaves rank kernels
    one way."""

    small: Hyper
    large: Hyper
    streamed: Hyper | None = None

    def __post_init__(self):
        objectives = {h.objective for h in (self.small, self.large, self.streamed) if h}
        if len(objectives) > 1:
            raise ValueError("the size regimes' trees need one objective; got "
                             + " and ".join(sorted(objectives)))

    @property
    def objective(self) -> str:
        return self.small.objective

    @property
    def streamed_or_large(self) -> Hyper:
        """The hyperparameters of the streamed matrices' tree."""
        return self.streamed or self.large

    def as_dict(self) -> dict:
        """Per regime, :meth:`Hyper.as_dict`."""
        out = {"small": self.small.as_dict(), "large": self.large.as_dict()}
        if self.streamed is not None:
            out["streamed"] = self.streamed.as_dict()
        return out


def regimes(ds: Dataset, rows) -> tuple[np.ndarray, np.ndarray] | None:
    """(the small matrices of ``rows``, the large ones) when a model fitted on ``rows`` has two
    size regimes: the labels time the two differently (:attr:`Dataset.large_nnz`) and each
    regime holds at least :data:`MIN_REGIME_MATRICES` of the rows; else None."""
    if ds.large_nnz is None:
        return None
    rows = np.asarray(rows)
    large = ds.large[rows]
    if min(int(large.sum()), int((~large).sum())) < MIN_REGIME_MATRICES:
        return None
    return rows[~large], rows[large]


def streamed_split(ds: Dataset, large) -> tuple[np.ndarray, np.ndarray] | None:
    """(the matrices of the large regime's rows ``large`` below :data:`STREAMED_NNZ`
    nonzeros, those from it) when both hold at least :data:`MIN_REGIME_MATRICES`; else None."""
    large = np.asarray(large)
    streamed = ds.nnz[large] >= STREAMED_NNZ
    if (ds.large_nnz is None or STREAMED_NNZ <= ds.large_nnz
            or min(int(streamed.sum()), int((~streamed).sum())) < MIN_REGIME_MATRICES):
        return None
    return large[~streamed], large[streamed]


def fit_cost_model(ds: Dataset, rows) -> CostModel:
    """The cost model of ``ds`` rows ``rows``: one coefficient table
    (:func:`fit_coefficients`), or one per size regime where :func:`regimes` finds two; the
    large regime's matrices from :data:`STREAMED_NNZ` nonzeros get a table of their own where
    :func:`streamed_split` splits them."""
    parts = regimes(ds, rows)
    if parts is None:
        return CostModel(fit_coefficients(ds, rows))
    small, large = parts
    tables = [(ds.large_nnz, large)]
    split = streamed_split(ds, large)
    if split is not None:
        tables = [(ds.large_nnz, split[0]), (STREAMED_NNZ, split[1])]
    return CostModel(fit_coefficients(ds, small),
                     regimes=[(start, fit_coefficients(ds, part)) for start, part in tables])


def fit_coefficients(ds: Dataset, rows) -> dict[str, list[float]]:
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
    return coefficients


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

    def export(self, provenance: dict | None = None, defaults=None) -> TreeModel:
        """The model file's content: the tree, its cost model, how its leaves rank and the
        default kernels (:class:`autospmv._decide.model.default_policy.DefaultPolicy`) it may
        override."""
        return TreeModel.from_sklearn(
            self.tree, self.feature_names, provenance, cost_model=self.cost_model,
            ranking="correction" if self.objective == "correction" else "value",
            defaults=defaults)

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
    :meth:`autospmv._decide.model.tree.TreeModel.from_sklearn` exports: the same nodes and thresholds, one
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
    :meth:`autospmv._decide.model.tree.TreeModel.from_sklearn` exports."""

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


class RegimeTree:
    """The trees of two size regimes (see the module docstring) as one tree: a root that
    sends a matrix with fewer than ``large_nnz`` nonzeros to ``small``'s tree and the others to
    ``large``'s (itself a :class:`RegimeTree` where the large regime is split again). Both
    were fitted on the same input columns; ``nnz_column`` is the one holding ``nnz``.
    ``classes_`` are the kernels of either tree in ``kernels`` order (a value of 0 where a
    tree lacks one: a classifier fitted on a regime where a kernel never won); the root's
    value is the two trees' root values averaged over their matrices (it ranks nothing: every
    matrix goes on to a subtree). ``predict_proba`` and ``tree_`` are what the subtrees' are,
    routed as :class:`autospmv._decide.model.tree.TreeModel` routes: ``float32(nnz) <= large_nnz − ½``."""

    def __init__(self, small, large, kernels, nnz_column: int, large_nnz: float):
        self.parts = (small, large)
        present = set(small.classes_) | set(large.classes_)
        self.classes_ = np.array([k for k in kernels if k in present])
        self.column = nnz_column
        self.threshold = float(large_nnz) - 0.5
        """Between the largest integer below ``large_nnz`` and ``large_nnz``."""
        self._slots = [np.array([list(self.classes_).index(c) for c in part.classes_])
                       for part in self.parts]
        values = [self._widen(part.tree_.value[:, 0, :], slots)
                  for part, slots in zip(self.parts, self._slots)]
        trees = [part.tree_ for part in self.parts]
        counts = np.array([tree.n_node_samples[0] for tree in trees], dtype=np.float64)
        root_value = (counts[0] * values[0][0] + counts[1] * values[1][0]) / counts.sum()
        offsets = (1, 1 + trees[0].children_left.size)

        def shifted(key: str) -> list[np.ndarray]:
            """The subtrees' child indices in the joined arrays (leaves keep their -1)."""
            return [np.where(getattr(tree, key) < 0, getattr(tree, key),
                             getattr(tree, key) + offset) for tree, offset in zip(trees, offsets)]

        self.tree_ = types.SimpleNamespace(
            n_outputs=1, n_features=trees[0].n_features,
            children_left=np.concatenate([[offsets[0]], *shifted("children_left")]),
            children_right=np.concatenate([[offsets[1]], *shifted("children_right")]),
            feature=np.concatenate([[nnz_column]] + [tree.feature for tree in trees]),
            threshold=np.concatenate([[self.threshold]] + [tree.threshold for tree in trees]),
            value=np.concatenate([root_value[None]] + values)[:, None, :],
            n_node_samples=np.concatenate([[int(counts.sum())]]
                                          + [tree.n_node_samples for tree in trees]),
            weighted_n_node_samples=np.concatenate(
                [[sum(tree.weighted_n_node_samples[0] for tree in trees)]]
                + [tree.weighted_n_node_samples for tree in trees]))

    def _widen(self, values: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """A subtree's per-class ``values`` (rows × its classes) in :attr:`classes_` columns."""
        out = np.zeros((values.shape[0], self.classes_.size))
        out[:, slots] = values
        return out

    def predict_proba(self, X) -> np.ndarray:
        X = np.asarray(X)
        right = ~(X[:, self.column].astype(np.float32) <= self.threshold)
        out = np.zeros((X.shape[0], self.classes_.size))
        for part, slots, rows in zip(self.parts, self._slots, (~right, right)):
            if rows.any():
                out[rows] = self._widen(part.predict_proba(X[rows]), slots)
        return out


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


def fit(ds: Dataset, rows, hyper: Hyper | RegimeHyper,
        cost_model: CostModel | None = None) -> Fitted:
    """The cost model fitted on ``ds`` rows ``rows`` (unless given: it depends on the rows
    only) and, on its estimates, a tree for ``hyper``: a :class:`CorrectionTree` (objective
    ``correction``), a ``DecisionTreeClassifier`` (``fastest``) or a :class:`QualityTree`
    (``quality``); each has ``classes_``, ``predict_proba`` and the ``tree_`` that
    :meth:`TreeModel.from_sklearn` exports.

    Where :func:`regimes` finds two size regimes in ``rows``, one such tree per regime, fitted
    on its matrices with its hyperparameters (a plain :class:`Hyper` serves all), under the
    root of a :class:`RegimeTree`; where :func:`streamed_split` splits the large regime, its
    two parts get a tree each (``hyper.streamed`` from :data:`STREAMED_NNZ` nonzeros) under a
    :class:`RegimeTree` of their own. Where there are no regimes, a :class:`RegimeHyper` gives
    the one tree the hyperparameters of the regime that holds most of the rows."""
    rows = np.asarray(rows)
    cost_model = cost_model or fit_cost_model(ds, rows)
    parts = regimes(ds, rows)
    if parts is None:
        if isinstance(hyper, RegimeHyper):
            hyper = hyper.large if 2 * ds.large[rows].sum() > rows.size else hyper.small
        return _fit_tree(ds, rows, hyper, cost_model)
    if not isinstance(hyper, RegimeHyper):
        hyper = RegimeHyper(hyper, hyper)
    below = _fit_tree(ds, parts[0], hyper.small, cost_model)
    nnz_column = below.feature_names.index("nnz")
    split = streamed_split(ds, parts[1])
    if split is None:
        above = _fit_tree(ds, parts[1], hyper.large, cost_model).tree
    else:
        cached = _fit_tree(ds, split[0], hyper.large, cost_model)
        streamed = _fit_tree(ds, split[1], hyper.streamed_or_large, cost_model)
        above = RegimeTree(cached.tree, streamed.tree, ds.kernels, nnz_column, STREAMED_NNZ)
    return Fitted(cost_model, hyper.objective,
                  RegimeTree(below.tree, above, ds.kernels, nnz_column, ds.large_nnz))


def _fit_tree(ds: Dataset, rows: np.ndarray, hyper: Hyper, cost_model: CostModel) -> Fitted:
    """One tree for ``hyper`` on ``rows``, over the estimates of ``cost_model``."""
    if hyper.objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {hyper.objective!r}; choose one of "
                         f"{', '.join(OBJECTIVES)}")
    fitted = Fitted(cost_model, hyper.objective)
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
        if not hyper.corrected:
            targets = np.zeros_like(targets)
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
