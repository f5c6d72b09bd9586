"""Trained kernel-selection trees stored as JSON.

A :class:`TreeModel` is a fitted scikit-learn ``DecisionTreeClassifier`` reduced to plain arrays.
It is written as JSON rather than pickled: a pickle executes code when loaded and does not
survive a scikit-learn upgrade, while JSON arrays are safe to load, diffable and version-free.
Loading validates everything a prediction relies on, so a damaged or foreign file fails with a
``ValueError`` that names the problem instead of mispredicting.

This module holds the tree: prediction and :meth:`TreeModel.export_text`; its file format is
in :mod:`autospmv._decide.model.file`.
The cost model a tree may carry is in :mod:`autospmv._decide.model.cost_model`, the checks a model
passes in :mod:`autospmv._decide.model.check`, and where model files live and how they are named in
:mod:`autospmv._decide.model.store`.

With a cost model, the tree may also compare the *estimates* ``est_<kernel>`` it derives from
the features (:meth:`CostModel.derived`, which :meth:`TreeModel.evaluate` shares through
:meth:`CostModel.derived_of`); they are computed before the tree is walked. An
optional ``"ranking"`` says how a leaf orders the kernels: ``"value"`` (the default; the
classifier's largest value first) or ``"correction"`` (the leaf holds, per kernel, a
correction ``c_k`` to the cost model in log2 units, and kernels rank by ``log2 t̂_k + c_k``,
smallest first: the cost model's estimate as the tree's training matrices corrected it).

Prediction follows scikit-learn exactly: a sample goes left when
``float32(feature value) <= threshold``. scikit-learn casts inputs to float32 and compares
them with float64 thresholds (midpoints between float32 training values); a float32 ``v``
satisfies ``v <= t`` exactly when ``v <= t32``, where ``t32`` is the largest float32 not above
``t``. :meth:`TreeModel.from_sklearn` stores that ``t32``, whose decimal expansion is exact in
JSON, so float32 comparisons here reproduce scikit-learn's results bit for bit.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .check import LEAF, LEAF_FEATURE, check_tree, default_feature_names
from .cost_model import CostModel
from .default_policy import DefaultPolicy, Override, margins
from .file import LOADER_ERRORS, document, read_document, read_json
from .order_rule import OrderRule
from .spmm_rule import SpmmRule
from .store import write_atomically

RANKINGS = ("value", "correction")


class Step(NamedTuple):
    """One comparison on a decision path."""

    feature: str
    value: float
    threshold: float
    went_left: bool
    """True when ``float32(value) <= threshold``."""


class Leaf(NamedTuple):
    """The leaf a sample lands in."""

    node: int
    samples: int
    """Training matrices that reached this leaf (its support)."""
    proba: dict[str, float]
    """The leaf's value per class: normalised class values, or log2 corrections for a
    ``"correction"`` ranking."""


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluation:
    """What one pass of a tree over a feature dict yields (:meth:`TreeModel.evaluate`): the
    kernel ranking together with everything that explains it, computed from one inputs row,
    one set of cost-model estimates and one walk, so the parts always agree. Compared by
    identity (it holds an array)."""

    inputs: dict[str, float]
    """The features with the cost model's ``est_<kernel>`` values added
    (:meth:`TreeModel.inputs`)."""
    estimates: dict[str, float] | None
    """The cost model's estimated µs per kernel, before any correction; None without one."""
    corrected: np.ndarray | None
    """For a ``"correction"`` ranking, ``log2 t̂_k + c_k`` per class in class order (read-only);
    None for a ``"value"`` ranking."""
    leaf: Leaf
    path: tuple[Step, ...]
    """The comparisons from the root to :attr:`leaf`, in order."""
    ranked: tuple[str, ...]
    """All classes, best first (``ranked[0]`` is the prediction); ties keep class order."""


class TreeModel:
    """A validated decision tree over matrix features whose classes are kernel names.

    Build one with :meth:`from_sklearn`, :meth:`load` or :meth:`from_dict`; the constructor
    validates its arguments like :meth:`load` does (see
    :func:`autospmv._decide.model.check.check_tree`).
    """

    def __init__(self, feature_names, classes, tree: Mapping, provenance: Mapping | None = None,
                 *, cost_model: CostModel | None = None, ranking: str = "value",
                 defaults: DefaultPolicy | None = None, order_rule: OrderRule | None = None,
                 spmm_rule: SpmmRule | None = None, known_features=None, known_kernels=None):
        if ranking not in RANKINGS:
            raise ValueError(f"unknown ranking {ranking!r}; expected one of {', '.join(RANKINGS)}")
        if ranking == "correction":
            if cost_model is None:
                raise ValueError("a correction ranking needs a cost_model")
            missing = [c for c in classes if c not in cost_model.kernels]
            if missing:
                raise ValueError(f"the cost model has no coefficients for {', '.join(missing)}")
        if known_features is None:
            known_features = default_feature_names()
        if known_features is not None and cost_model is not None:
            known_features = (*known_features, *cost_model.derived_names)
        check_tree(feature_names, classes, tree, provenance, known_features, known_kernels,
               negative_values=ranking == "correction")
        if defaults is not None:
            unknown = [b.kernel for b in defaults.bands if b.kernel not in classes]
            if unknown:
                raise ValueError(f"a default kernel is not among the tree's classes: "
                                 f"{', '.join(unknown)}")
        self.cost_model = cost_model
        self.ranking = ranking
        self.defaults = defaults
        """The default kernel per size band, or None: the tree's first choice always stands."""
        self.order_rule = order_rule
        """The order's cost rule fitted on this model's device, or None: the built-in rule."""
        self.spmm_rule = spmm_rule
        """The multi-vector program per band of column counts fitted on this model's device, or
        None: where the first product of k columns cannot time the programs, the many-columns
        kernel runs."""
        self.feature_names: tuple[str, ...] = tuple(feature_names)
        self.classes: tuple[str, ...] = tuple(classes)
        self.provenance: dict = dict(provenance or {})
        self.children_left = np.asarray(tree["children_left"], dtype=np.int64)
        self.children_right = np.asarray(tree["children_right"], dtype=np.int64)
        self.feature = np.asarray(tree["feature"], dtype=np.int64)
        self.threshold = np.asarray(tree["threshold"], dtype=np.float64).astype(np.float32)
        self.value = np.asarray(tree["value"], dtype=np.float64)
        self.n_node_samples = np.asarray(tree["n_node_samples"], dtype=np.int64)
        self.weighted_n_node_samples = np.asarray(tree["weighted_n_node_samples"], np.float64)

    # -- construction and storage ---------------------------------------------------------

    @classmethod
    def from_sklearn(cls, clf, feature_names, provenance: Mapping | None = None, *,
                     cost_model: CostModel | None = None, ranking: str = "value",
                     defaults: DefaultPolicy | None = None,
                     order_rule: OrderRule | None = None, known_features=None,
                     known_kernels=None) -> "TreeModel":
        """Export a fitted single-output ``DecisionTreeClassifier`` trained on features in the
        order of ``feature_names``, with kernel names as class labels (``est_<kernel>`` names
        when ``cost_model`` derives them). ``ranking="correction"``: a regression tree whose
        outputs are the log2 corrections of :attr:`ranking`, one per class."""
        tree_ = clf.tree_
        if tree_.n_outputs != 1:
            raise ValueError("only single-output classifiers can be exported")
        if len(feature_names) != tree_.n_features:
            raise ValueError(
                f"the classifier was fitted on {tree_.n_features} features but "
                f"{len(feature_names)} feature names were given"
            )
        leaf = tree_.children_left == LEAF
        threshold = np.where(leaf, float(LEAF_FEATURE), _float32_floor(tree_.threshold))
        arrays = {
            "children_left": tree_.children_left.tolist(),
            "children_right": tree_.children_right.tolist(),
            "feature": np.where(leaf, LEAF_FEATURE, tree_.feature).tolist(),
            "threshold": threshold.tolist(),
            "value": tree_.value[:, 0, :].tolist(),
            "n_node_samples": tree_.n_node_samples.tolist(),
            "weighted_n_node_samples": tree_.weighted_n_node_samples.tolist(),
        }
        classes = [str(c) for c in clf.classes_]
        return cls(list(feature_names), classes, arrays, provenance, cost_model=cost_model,
                   ranking=ranking, defaults=defaults, order_rule=order_rule,
                   known_features=known_features, known_kernels=known_kernels)

    def to_dict(self) -> dict:
        """The JSON document as Python objects (floats keep their exact values; see
        :mod:`autospmv._decide.model.file`)."""
        return document(self)

    def to_json(self, path=None) -> str:
        """Serialise; also write to ``path`` (str, PathLike or text file object) when given.
        A path is written atomically (:func:`write_atomically`): a reader sees the old file or
        the new one, never a part."""
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"
        if hasattr(path, "write"):
            path.write(text)
        elif path is not None:
            write_atomically(path, text)
        return text

    @classmethod
    def from_dict(cls, doc, *, known_features=None, known_kernels=None) -> "TreeModel":
        """Validate a parsed JSON document (:mod:`autospmv._decide.model.file`) and build the
        model."""
        return cls(**read_document(doc, known_kernels), known_features=known_features,
                   known_kernels=known_kernels)

    @classmethod
    def load(cls, source, *, known_features=None, known_kernels=None) -> "TreeModel":
        """Read a model from a path or a text/binary file object; never unpickles.

        ``known_features`` (default: :func:`autospmv._decide.features.extract.feature_names`) and
        ``known_kernels`` (default: :func:`autospmv.kernel_names`) are the names the file may
        use. Every failure, from an unreadable file to a document nested too deeply or numbers
        too large for a float, raises ValueError naming the file.
        """
        doc, where = read_json(source)
        try:
            return cls.from_dict(doc, known_features=known_features, known_kernels=known_kernels)
        except LOADER_ERRORS as err:
            raise ValueError(f"{where}: {err}") from None

    # -- prediction -------------------------------------------------------------------------

    def features_read(self) -> frozenset[str]:
        """The features a decision reads: those the tree compares (but the ``est_<kernel>``
        values, which the cost model derives) and those the cost model's estimates are computed
        from. :func:`autospmv.prepare` computes only these (:meth:`evaluate` with
        ``only_read``)."""
        derived = set(self.cost_model.derived_names) if self.cost_model is not None else set()
        inputs = self.cost_model.input_names() if self.cost_model is not None else []
        return frozenset((self._compared() - derived) | set(inputs))

    def _compared(self) -> set[str]:
        """The features the tree's split nodes compare."""
        return {self.feature_names[i] for i, left in zip(self.feature, self.children_left)
                if left != LEAF}

    def evaluate(self, features: Mapping, only_read: bool = False) -> Evaluation:
        """One pass of the tree over a feature dict (extra keys are ignored): the inputs row and
        the cost model's estimates are computed once, the tree is walked once, and the ranking is
        read from the leaf reached. Everything a decision and its explanation need comes from
        this one pass, so they cannot disagree and a ``prepare()`` pays for the pass only once.

        ValueError when a feature of :attr:`feature_names` is missing or not finite; with
        ``only_read``, only the features the tree compares and those its cost model reads
        (:meth:`features_read`) are required, and the others may be absent."""
        inputs, estimates = self._inputs(features)
        required = self.feature_names
        if only_read:
            compared = self._compared()
            required = [name for name in self.feature_names if name in compared]
        missing = [name for name in required if name not in inputs]
        if missing:
            raise ValueError(f"features missing for the model: {', '.join(missing)}")
        row = np.array([float(inputs.get(name, math.nan)) for name in self.feature_names])
        bad = [n for n in required if not math.isfinite(float(inputs[n]))]
        if bad:
            raise ValueError(f"feature values must be finite; not finite: {', '.join(bad)}")
        node, path = self._walk(row)
        corrected = None
        if self.ranking == "correction":
            corrected = self._corrected(estimates, node)
            corrected.flags.writeable = False
            order = np.argsort(corrected, kind="stable")
        else:
            order = np.argsort(-self.value[node], kind="stable")
        return Evaluation(inputs, estimates, corrected,
                          Leaf(node, int(self.n_node_samples[node]), self._proba(node)),
                          tuple(path), tuple(self.classes[i] for i in order))

    def _inputs(self, features: Mapping) -> tuple[dict[str, float], dict[str, float] | None]:
        """The inputs dict of :meth:`inputs` and the cost model's estimates (µs per kernel) it
        was derived from, with the estimates computed once; None for the estimates without a
        cost model."""
        if self.cost_model is None:
            return dict(features), None
        estimates = self.cost_model.estimates(features)
        return {**features, **self.cost_model.derived_of(estimates)}, estimates

    def _walk(self, row: np.ndarray) -> tuple[int, list[Step]]:
        """Follow one sample (values in :attr:`feature_names` order) from the root: the leaf
        reached and the comparisons made on the way, as :meth:`apply` compares (float32)."""
        steps, node = [], 0
        while self.children_left[node] != LEAF:
            index = int(self.feature[node])
            threshold = self.threshold[node]
            left = bool(np.float32(row[index]) <= threshold)
            steps.append(Step(self.feature_names[index], float(row[index]), float(threshold), left))
            node = int(self.children_left[node] if left else self.children_right[node])
        return node, steps

    def inputs(self, features: Mapping) -> dict[str, float]:
        """The feature dict with the cost model's ``est_<kernel>`` values added: everything
        the tree may compare. Unlike :meth:`evaluate`, it neither needs the tree's features
        nor checks their values."""
        return self._inputs(features)[0]

    def apply(self, X) -> np.ndarray:
        """Leaf index for each row of X (columns in :attr:`feature_names` order)."""
        X = np.asarray(X, dtype=np.float64).astype(np.float32)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names):
            raise ValueError(
                f"X must have shape (k, {len(self.feature_names)}); got {np.shape(X)}"
            )
        node = np.zeros(X.shape[0], dtype=np.int64)
        rows = np.arange(X.shape[0])
        active = self.children_left[node] != LEAF
        while active.any():
            at = node[active]
            left = X[rows[active], self.feature[at]] <= self.threshold[at]
            node[active] = np.where(left, self.children_left[at], self.children_right[at])
            active = self.children_left[node] != LEAF
        return node

    def predict(self, features: Mapping) -> str:
        """The kernel name the tree picks for a feature dict (extra keys are ignored)."""
        return self.evaluate(features).ranked[0]

    def predict_proba(self, features: Mapping) -> dict[str, float]:
        """Class probabilities at the sample's leaf, as scikit-learn's ``predict_proba``
        (for a ``"correction"`` ranking: the leaf's corrections)."""
        return self.evaluate(features).leaf.proba

    def _proba(self, node: int) -> dict[str, float]:
        value = self.value[node]
        if self.ranking == "correction":
            return dict(zip(self.classes, value.tolist()))
        total = value.sum()
        proba = value / total if total else value
        return dict(zip(self.classes, proba.tolist()))

    def ranked(self, features: Mapping) -> list[str]:
        """All classes, most probable first; ties keep class order, so ``ranked()[0]`` equals
        :meth:`predict`. A caller whose first choice cannot be built falls back down this list."""
        return list(self.evaluate(features).ranked)

    def corrected(self, features: Mapping) -> np.ndarray:
        """For a ``"correction"`` ranking: ``log2 t̂_k + c_k`` per class, in class order."""
        if self.cost_model is None:
            raise AttributeError("the tree has no cost model, so no corrected estimates")
        evaluation = self.evaluate(features)
        if evaluation.corrected is not None:
            return np.array(evaluation.corrected)
        return self._corrected(evaluation.estimates, evaluation.leaf.node)

    def _corrected(self, estimates: Mapping[str, float], node: int) -> np.ndarray:
        """``log2 t̂_k + c_k`` per class (class order): the cost model's ``estimates`` corrected
        by leaf ``node``'s values."""
        return np.log2([estimates[c] for c in self.classes]) + self.value[node]

    def corrects(self, node: int) -> bool:
        """Whether leaf ``node`` of a ``"correction"`` tree changes the cost model's estimates:
        the leaves of a size regime fitted without corrections (the cost model alone) are all
        zeros."""
        return bool(np.any(self.value[node]))

    def decision_path(self, features: Mapping) -> list[Step]:
        """The comparisons made from the root to the leaf, in order."""
        return list(self.evaluate(features).path)

    def leaf(self, features: Mapping) -> Leaf:
        """The leaf reached: its node index, training support and class probabilities."""
        return self.evaluate(features).leaf

    # -- inspection -------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        """The oldest file layout that holds this model: 7 with an SpMM rule, 6 with an order
        rule, 5 with a cost
        model that reads ``row_length``, 4 with one that reads ``x_sectors`` or has more than two
        size regimes, 3 with defaults, 2 with a cost model of two size regimes, else 1 (readable
        by every autospmv that reads model files)."""
        cost = self.cost_model
        if self.spmm_rule is not None:
            return 7
        if self.order_rule is not None:
            return 6
        if cost is not None and cost.uses("row_length"):
            return 5
        if cost is not None and (cost.uses("x_sectors") or len(cost.regimes) > 1):
            return 4
        if self.defaults is not None:
            return 3
        return 2 if cost is not None and cost.large_nnz is not None else 1

    def decide(self, features: Mapping, nnz: int,
               only_read: bool = False) -> tuple[Evaluation, list[str], "Override | None"]:
        """The kernels in the order a matrix of ``nnz`` nonzeros tries them: the tree's
        ranking of :meth:`evaluate`, with the band's default first where it stands
        (:attr:`defaults`); also the evaluation and what the default policy did (None
        without one)."""
        evaluation = self.evaluate(features, only_read=only_read)
        ranked = list(evaluation.ranked)
        if self.defaults is None:
            return evaluation, ranked, None
        decided = self.defaults.decide(nnz, ranked, self.margins(evaluation))
        return evaluation, [decided.kernel] + [k for k in ranked if k != decided.kernel], decided

    def margins(self, evaluation: Evaluation) -> dict[str, float]:
        """The margin of ``evaluation``'s first-ranked kernel over each class, in the units
        :func:`autospmv._decide.model.default_policy.margins` describes."""
        scores = (evaluation.corrected if evaluation.corrected is not None
                  else [evaluation.leaf.proba[c] for c in self.classes])
        return margins(self.ranking, self.classes, scores)

    @property
    def n_nodes(self) -> int:
        return int(self.children_left.size)

    @property
    def depth(self) -> int:
        depth = np.zeros(self.n_nodes, dtype=np.int64)
        for node in range(self.n_nodes):  # children always follow their parent
            for child in (self.children_left[node], self.children_right[node]):
                if child != LEAF:
                    depth[child] = depth[node] + 1
        return int(depth.max())

    def export_text(self, *, max_depth: int = 10, spacing: int = 3, decimals: int = 2,
                    show_weights: bool = False) -> str:
        """The tree as indented text, in the layout of ``sklearn.tree.export_text``. A
        ``"correction"`` tree's leaves show their corrections (log2 of measured over estimated
        time, per kernel) instead of a class: the choice also depends on the estimates."""
        out = io.StringIO()

        def leaf(node: int, indent: str) -> None:
            value = self.value[node]
            if self.ranking == "correction":
                out.write(f"{indent} corrections: " + ", ".join(
                    f"{c} {v:+.{decimals}f}" for c, v in zip(self.classes, value)) + "\n")
                return
            text = f" class: {self.classes[int(np.argmax(value))]}"
            if show_weights:
                weights = value * self.weighted_n_node_samples[node] / (value.sum() or 1.0)
                text = " weights: [" + ", ".join(f"{w:.{decimals}f}" for w in weights) + "]" + text
            out.write(f"{indent}{text}\n")

        def subtree_depth(node: int) -> int:
            deepest, pending = 0, [(node, 1)]
            while pending:
                node, level = pending.pop()
                if self.children_left[node] == LEAF:
                    deepest = max(deepest, level)
                else:
                    pending += [(int(self.children_left[node]), level + 1),
                                (int(self.children_right[node]), level + 1)]
            return deepest

        # Depth first with a stack of (node, depth) to visit and lines to write (str), not
        # recursion: a loaded model may be deeper than Python's recursion limit.
        pending: list = [(0, 1)]
        while pending:
            item = pending.pop()
            if isinstance(item, str):
                out.write(item)
                continue
            node, depth = item
            indent = ("|" + " " * spacing) * depth
            indent = indent[:-spacing] + "-" * spacing
            if depth > max_depth + 1:
                below = subtree_depth(node)
                if below == 1:
                    leaf(node, indent)
                else:
                    out.write(f"{indent} truncated branch of depth {below}\n")
            elif self.children_left[node] == LEAF:
                leaf(node, indent)
            else:
                name = self.feature_names[self.feature[node]]
                threshold = f"{float(self.threshold[node]):.{decimals}f}"
                out.write(f"{indent} {name} <= {threshold}\n")
                pending += [(int(self.children_right[node]), depth + 1),
                            f"{indent} {name} >  {threshold}\n",
                            (int(self.children_left[node]), depth + 1)]
        return out.getvalue()

    def __repr__(self):
        return (f"<TreeModel {self.n_nodes} nodes, depth {self.depth}, "
                f"{len(self.feature_names)} features, classes {', '.join(self.classes)}>")


def _float32_floor(values) -> np.ndarray:
    """For each float64, the largest float32 not above it (as float64)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        rounded = values.astype(np.float32)
    above = rounded.astype(np.float64) > values
    rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return rounded.astype(np.float64)
