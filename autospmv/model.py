"""Trained kernel-selection trees stored as JSON, and where autospmv keeps them.

A :class:`TreeModel` is a fitted scikit-learn ``DecisionTreeClassifier`` reduced to plain arrays.
It is written as JSON rather than pickled: a pickle executes code when loaded and does not
survive a scikit-learn upgrade, while JSON arrays are safe to load, diffable and version-free.
Loading validates everything a prediction relies on, so a damaged or foreign file fails with a
``ValueError`` that names the problem instead of mispredicting.

File layout (``schema_version`` 1)::

    {
      "format": "autospmv-tree",
      "schema_version": 1,
      "feature_names": ["row_max", ...],      # names from autospmv.features.FEATURE_NAMES
      "classes": ["csr_vector", ...],         # kernel names from the registry
      "tree": {                               # one entry per node; node 0 is the root
        "children_left":  [1, -1, ...],       # -1 marks a leaf (both children -1)
        "children_right": [2, -1, ...],
        "feature":        [4, -2, ...],       # index into feature_names; -2 at leaves
        "threshold":      [12.5, -2.0, ...],  # float32 values written exactly; -2.0 at leaves
        "value":          [[0.5, 0.5], ...],  # per class, proportional to the weighted
                                              # training samples of that class in the node
        "n_node_samples": [40, 25, ...],      # training matrices reaching the node (support)
        "weighted_n_node_samples": [40.0, ...]
      },
      "cost_model": {                         # optional (see CostModel)
        "regressors": ["1", "rows", "nnz", "bytes", "work", "span", "atomics"],
        "coefficients": {"coo": [11.5, 0.0, ...], ...}  # µs per unit, one list per kernel
      },
      "provenance": {...}                     # free-form: device, versions, date, data hash, scores
    }

With a cost model, the tree may also compare the *estimates* ``est_<kernel>`` it derives from
the features (:meth:`CostModel.derived`); they are computed before the tree is walked. An
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

import contextlib
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np

from . import devices, registry

FORMAT = "autospmv-tree"
SCHEMA_VERSION = 1
LEAF = -1
"""Child index marking a leaf (scikit-learn's ``TREE_LEAF``)."""
LEAF_FEATURE = -2
"""Feature index and threshold stored at leaves (scikit-learn's ``TREE_UNDEFINED``)."""

_TREE_KEYS = (
    "children_left", "children_right", "feature", "threshold", "value",
    "n_node_samples", "weighted_n_node_samples",
)  # fmt: skip
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


class CostModel:
    """A per-kernel linear model of a kernel's time on one device, over the cost quantities of
    :mod:`autospmv.cost`.

    The estimate for kernel k is ``t̂_k = Σ_r c_kr · x_r`` over :data:`REGRESSORS`: a constant
    (``"1"``: launches and fixed latency), the matrix's ``rows`` and ``nnz``, and the kernel's own
    ``<kernel>_bytes``, ``_work``, ``_span`` and ``_atomics``. The coefficients are fitted on a
    device's labels (non-negative least squares on relative error, ``training/train.py``), so
    ``t̂_k`` is in the labels' unit, microseconds. The tree reads the estimates relative to the
    fastest one: ``est_<kernel> = log2(t̂_k / min_j t̂_j)``, 0 for the kernel the cost model
    expects to be fastest; a tree splitting on them can follow the cost model where it is right
    and overrule it where the labels showed it wrong.
    """

    REGRESSORS = ("1", "rows", "nnz", "bytes", "work", "span", "atomics")
    MAX_COEFFICIENT = 1e9
    """Largest coefficient a model may hold (µs per unit). Fitted values are below 10⁴ (the
    constant, microseconds) and far below 1 for the counts; the bound keeps every estimate
    finite for any matrix (quantities stay below about 10²⁰, so estimates below 10³⁰)."""
    FLOOR_US = 1e-3
    """Smallest estimate, so that a kernel whose coefficients are all 0 still has a logarithm."""

    def __init__(self, coefficients: Mapping[str, list], known_kernels=None):
        known_kernels = registry.names() if known_kernels is None else tuple(known_kernels)
        if not isinstance(coefficients, Mapping) or not coefficients:
            raise ValueError("cost_model coefficients must be a non-empty object of kernel names")
        unknown = [k for k in coefficients if k not in known_kernels]
        if unknown:
            raise ValueError(f"unknown kernel names in the cost model: {', '.join(unknown)}")
        table = {}
        for kernel, row in coefficients.items():
            row = _array(row, f"cost_model coefficients of {kernel}")
            if (row.shape != (len(self.REGRESSORS),) or (row < 0).any()
                    or (row > self.MAX_COEFFICIENT).any()):
                raise ValueError(f"cost_model coefficients of {kernel} must be "
                                 f"{len(self.REGRESSORS)} non-negative numbers of at most "
                                 f"{self.MAX_COEFFICIENT:g}")
            table[kernel] = row
        self.kernels: tuple[str, ...] = tuple(table)
        self.coefficients = np.array([table[k] for k in self.kernels])
        self.derived_names: tuple[str, ...] = tuple(f"est_{k}" for k in self.kernels)

    @classmethod
    def regressor_names(cls, kernel: str) -> list[str]:
        """The feature names a kernel's regressors are read from (``"1"`` is the constant)."""
        return ["1", "rows", "nnz"] + [f"{kernel}_{q}" for q in cls.REGRESSORS[3:]]

    @classmethod
    def design(cls, X, feature_names, kernel: str) -> np.ndarray:
        """A kernel's regressors but the constant, for each row of X (columns in
        ``feature_names`` order): what its coefficients after the first multiply."""
        X = np.asarray(X, dtype=np.float64)
        column = {name: i for i, name in enumerate(feature_names)}
        names = cls.regressor_names(kernel)[1:]
        missing = [n for n in names if n not in column]
        if missing:
            raise ValueError(f"features missing for the cost model: {', '.join(missing)}")
        return X[:, [column[n] for n in names]]

    def times(self, X, feature_names) -> np.ndarray:
        """Estimated µs per row of X (columns in ``feature_names`` order) and kernel."""
        out = np.column_stack([row[0] + self.design(X, feature_names, kernel) @ row[1:]
                               for kernel, row in zip(self.kernels, self.coefficients)])
        return np.maximum(out, self.FLOOR_US)

    def relative(self, times: np.ndarray) -> np.ndarray:
        """``log2(t̂_k / min_j t̂_j)`` per row: the ``est_<kernel>`` columns."""
        return np.log2(times / times.min(axis=1, keepdims=True))

    def estimates(self, features: Mapping) -> dict[str, float]:
        """Estimated µs per kernel for one feature dict."""
        names = sorted({n for k in self.kernels for n in self.regressor_names(k)[1:]})
        missing = [n for n in names if n not in features]
        if missing:
            raise ValueError(f"features missing for the cost model: {', '.join(missing)}")
        row = np.array([[float(features[n]) for n in names]])
        return dict(zip(self.kernels, self.times(row, names)[0].tolist()))

    def derived(self, features: Mapping) -> dict[str, float]:
        """The ``est_<kernel>`` values for one feature dict."""
        times = np.array([list(self.estimates(features).values())])
        return dict(zip(self.derived_names, self.relative(times)[0].tolist()))

    def to_dict(self) -> dict:
        return {"regressors": list(self.REGRESSORS),
                "coefficients": {k: self.coefficients[j].tolist()
                                 for j, k in enumerate(self.kernels)}}

    @classmethod
    def from_dict(cls, doc, known_kernels=None) -> "CostModel":
        if not isinstance(doc, Mapping):
            raise ValueError("cost_model must be a JSON object")
        if list(doc.get("regressors", ())) != list(cls.REGRESSORS):
            raise ValueError(f"cost_model regressors must be {list(cls.REGRESSORS)}; "
                             f"found {doc.get('regressors')!r}")
        return cls(doc.get("coefficients"), known_kernels)


class TreeModel:
    """A validated decision tree over matrix features whose classes are kernel names.

    Build one with :meth:`from_sklearn`, :meth:`load` or :meth:`from_dict`; the constructor
    validates its arguments like :meth:`load` does (see :func:`_check`).
    """

    def __init__(self, feature_names, classes, tree: Mapping, provenance: Mapping | None = None,
                 *, cost_model: CostModel | None = None, ranking: str = "value",
                 known_features=None, known_kernels=None):
        if ranking not in RANKINGS:
            raise ValueError(f"unknown ranking {ranking!r}; expected one of {', '.join(RANKINGS)}")
        if ranking == "correction":
            if cost_model is None:
                raise ValueError("a correction ranking needs a cost_model")
            missing = [c for c in classes if c not in cost_model.kernels]
            if missing:
                raise ValueError(f"the cost model has no coefficients for {', '.join(missing)}")
        if known_features is None:
            known_features = _default_features()
        if known_features is not None and cost_model is not None:
            known_features = (*known_features, *cost_model.derived_names)
        _check(feature_names, classes, tree, provenance, known_features, known_kernels,
               negative_values=ranking == "correction")
        self.cost_model = cost_model
        self.ranking = ranking
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
                     known_features=None, known_kernels=None) -> "TreeModel":
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
                   ranking=ranking, known_features=known_features,
                   known_kernels=known_kernels)

    def to_dict(self) -> dict:
        """The JSON document as Python objects (floats keep their exact values)."""
        leaf = self.children_left == LEAF
        doc = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "feature_names": list(self.feature_names),
            "classes": list(self.classes),
            "tree": {
                "children_left": self.children_left.tolist(),
                "children_right": self.children_right.tolist(),
                "feature": self.feature.tolist(),
                "threshold": np.where(leaf, float(LEAF_FEATURE), self.threshold).tolist(),
                "value": self.value.tolist(),
                "n_node_samples": self.n_node_samples.tolist(),
                "weighted_n_node_samples": self.weighted_n_node_samples.tolist(),
            },
        }
        if self.cost_model is not None:
            doc["cost_model"] = self.cost_model.to_dict()
        if self.ranking != "value":
            doc["ranking"] = self.ranking
        doc["provenance"] = self.provenance
        return doc

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
        """Validate a parsed JSON document (see the module docstring) and build the model."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"a model file must hold a JSON object; found {type(doc).__name__}")
        if doc.get("format") != FORMAT:
            raise ValueError(
                f"not an autospmv tree model: 'format' is {doc.get('format')!r}, "
                f"expected {FORMAT!r}"
            )
        version = doc.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"unsupported schema_version {version!r}; this autospmv reads version "
                f"{SCHEMA_VERSION}"
            )
        for key in ("feature_names", "classes", "tree"):
            if key not in doc:
                raise ValueError(f"the model has no {key!r} entry")
        cost_model = doc.get("cost_model")
        if cost_model is not None:
            cost_model = CostModel.from_dict(cost_model, known_kernels)
        return cls(doc["feature_names"], doc["classes"], doc["tree"], doc.get("provenance"),
                   cost_model=cost_model, ranking=doc.get("ranking", "value"),
                   known_features=known_features, known_kernels=known_kernels)

    @classmethod
    def load(cls, source, *, known_features=None, known_kernels=None) -> "TreeModel":
        """Read a model from a path or a text/binary file object; never unpickles.

        ``known_features`` (default: :func:`autospmv.features.feature_names`) and
        ``known_kernels`` (default: the registry's, :func:`autospmv.registry.names`) are the
        names the file may use.
        Every failure, from an unreadable file to a document nested too deeply or numbers too
        large for a float, raises ValueError naming the file.
        """
        where = getattr(source, "name", "the model file") if hasattr(source, "read") \
            else os.fspath(source)
        try:
            if hasattr(source, "read"):
                text = source.read()
            else:
                with open(where, "rb") as handle:
                    text = handle.read()
        except OSError as err:
            raise ValueError(f"cannot read the model file {where}: {err}") from None
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        try:
            doc = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as err:
            raise ValueError(f"{where} is not a valid JSON model file: {err}") from None
        try:
            return cls.from_dict(doc, known_features=known_features, known_kernels=known_kernels)
        except _LOADER_ERRORS as err:
            raise ValueError(f"{where}: {err}") from None

    # -- prediction -------------------------------------------------------------------------

    def inputs(self, features: Mapping) -> dict[str, float]:
        """The feature dict with the cost model's ``est_<kernel>`` values added: everything
        the tree may compare."""
        if self.cost_model is None:
            return dict(features)
        return {**features, **self.cost_model.derived(features)}

    def _row(self, features: Mapping) -> np.ndarray:
        features = self.inputs(features)
        missing = [name for name in self.feature_names if name not in features]
        if missing:
            raise ValueError(f"features missing for the model: {', '.join(missing)}")
        row = np.array([float(features[name]) for name in self.feature_names])
        bad = [n for n, v in zip(self.feature_names, row) if not math.isfinite(v)]
        if bad:
            raise ValueError(f"feature values must be finite; not finite: {', '.join(bad)}")
        return row

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

    def _leaf(self, features: Mapping) -> int:
        return int(self.apply(self._row(features)[None, :])[0])

    def predict(self, features: Mapping) -> str:
        """The kernel name the tree picks for a feature dict (extra keys are ignored)."""
        return self.ranked(features)[0]

    def predict_proba(self, features: Mapping) -> dict[str, float]:
        """Class probabilities at the sample's leaf, as scikit-learn's ``predict_proba``
        (for a ``"correction"`` ranking: the leaf's corrections)."""
        return self._proba(self._leaf(features))

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
        if self.ranking == "correction":
            order = np.argsort(self.corrected(features), kind="stable")
        else:
            order = np.argsort(-self.value[self._leaf(features)], kind="stable")
        return [self.classes[i] for i in order]

    def corrected(self, features: Mapping) -> np.ndarray:
        """For a ``"correction"`` ranking: ``log2 t̂_k + c_k`` per class, in class order."""
        estimates = self.cost_model.estimates(features)
        value = self.value[self._leaf(features)]
        return np.log2([estimates[c] for c in self.classes]) + value

    def decision_path(self, features: Mapping) -> list[Step]:
        """The comparisons made from the root to the leaf, in order."""
        row = self._row(features)
        steps, node = [], 0
        while self.children_left[node] != LEAF:
            index = int(self.feature[node])
            threshold = self.threshold[node]
            left = bool(np.float32(row[index]) <= threshold)
            steps.append(Step(self.feature_names[index], float(row[index]), float(threshold), left))
            node = int(self.children_left[node] if left else self.children_right[node])
        return steps

    def leaf(self, features: Mapping) -> Leaf:
        """The leaf reached: its node index, training support and class probabilities."""
        node = self._leaf(features)
        return Leaf(node, int(self.n_node_samples[node]), self._proba(node))

    # -- inspection -------------------------------------------------------------------------

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
            if self.children_left[node] == LEAF:
                return 1
            return 1 + max(subtree_depth(self.children_left[node]),
                           subtree_depth(self.children_right[node]))

        def walk(node: int, depth: int) -> None:
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
                walk(int(self.children_left[node]), depth + 1)
                out.write(f"{indent} {name} >  {threshold}\n")
                walk(int(self.children_right[node]), depth + 1)

        walk(0, 1)
        return out.getvalue()

    def __repr__(self):
        return (f"<TreeModel {self.n_nodes} nodes, depth {self.depth}, "
                f"{len(self.feature_names)} features, classes {', '.join(self.classes)}>")


_LOADER_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                  RecursionError)
"""What validating a parsed document can raise for a malformed one (e.g. OverflowError for an
integer too large for a float); :meth:`TreeModel.load` reports each as a ValueError."""


def write_atomically(path, text: str) -> None:
    """Write ``text`` to ``path`` so that no reader, and no crash or full disk, can leave a
    partial file: a temporary file in the same folder is written, flushed to disk and renamed
    over ``path`` (an atomic replacement); on any failure the old file stays as it was."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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


def _float32_floor(values) -> np.ndarray:
    """For each float64, the largest float32 not above it (as float64)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        rounded = values.astype(np.float32)
    above = rounded.astype(np.float64) > values
    rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return rounded.astype(np.float64)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in a model file")


def _default_features() -> tuple[str, ...] | None:
    try:
        from .features import feature_names
    except ImportError:
        return None
    return feature_names()


def _names(value, what: str) -> list[str]:
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, str) for v in value)):
        raise ValueError(f"{what} must be a non-empty list of strings")
    if len(set(value)) != len(value):
        raise ValueError(f"{what} contains duplicates")
    return list(value)


def _check(feature_names, classes, tree, provenance, known_features, known_kernels,
           negative_values: bool = False) -> None:
    """Raise ValueError naming the first inconsistency a prediction could trip over."""
    features = _names(feature_names, "feature_names")
    classes = _names(classes, "classes")
    known_features = _default_features() if known_features is None else tuple(known_features)
    if known_features is not None:
        unknown = [f for f in features if f not in known_features]
        if unknown:
            raise ValueError(f"unknown feature names: {', '.join(unknown)}; this autospmv "
                             "computes the names in autospmv.features.FEATURE_NAMES")
    known_kernels = registry.names() if known_kernels is None else tuple(known_kernels)
    unknown = [c for c in classes if c not in known_kernels]
    if unknown:
        raise ValueError(f"unknown kernel names in classes: {', '.join(unknown)}; "
                         f"valid kernels: {', '.join(known_kernels)}")
    if provenance is not None and not isinstance(provenance, Mapping):
        raise ValueError("provenance must be a JSON object")
    if not isinstance(tree, Mapping):
        raise ValueError("'tree' must be a JSON object of node arrays")
    missing = [key for key in _TREE_KEYS if key not in tree]
    if missing:
        raise ValueError(f"the tree has no {', '.join(missing)} array")
    arrays = {key: _array(tree[key], key) for key in _TREE_KEYS if key != "value"}
    n = arrays["children_left"].shape[0]
    if n == 0:
        raise ValueError("the tree has no nodes")
    rows = tree["value"]
    if (not isinstance(rows, (list, tuple)) or
            not all(isinstance(r, (list, tuple)) and len(r) == len(classes) for r in rows)):
        raise ValueError(f"value must hold {len(classes)} numbers (one per class) for each node")
    arrays["value"] = value = _array(rows, "value")
    for key in _TREE_KEYS:
        if arrays[key].shape[0] != n:
            raise ValueError(f"tree arrays have inconsistent lengths: children_left has {n} "
                             f"nodes, {key} has {arrays[key].shape[0]}")
    if not negative_values and (value < 0).any():
        raise ValueError("value must not be negative")
    for key in ("children_left", "children_right", "feature", "n_node_samples"):
        if arrays[key].ndim != 1 or (arrays[key] != np.round(arrays[key])).any():
            raise ValueError(f"{key} must be a list of integers")
    if (arrays["n_node_samples"] < 1).any() or (arrays["weighted_n_node_samples"] < 0).any():
        raise ValueError("node sample counts must be positive")
    _check_structure(arrays, n, len(features))


def _array(values, key: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float
        raise ValueError(f"{key} must be an array of numbers") from None
    if arr.ndim == 0 or not np.isfinite(arr).all():
        raise ValueError(f"{key} must be an array of finite numbers")
    return arr


def _check_structure(arrays: dict, n: int, n_features: int) -> None:
    left = arrays["children_left"].astype(np.int64)
    right = arrays["children_right"].astype(np.int64)
    feature = arrays["feature"].astype(np.int64)
    threshold = arrays["threshold"]
    parents = np.zeros(n, dtype=np.int64)
    for node in range(n):
        if (left[node] == LEAF) != (right[node] == LEAF):
            raise ValueError(f"node {node}: a leaf must have both children -1")
        if left[node] == LEAF:
            continue
        for child in (left[node], right[node]):
            if not node < child < n:
                raise ValueError(f"node {node}: child index {child} out of range (children "
                                 f"come after their parent, below {n})")
            parents[child] += 1
        if not 0 <= feature[node] < n_features:
            raise ValueError(f"node {node}: feature index {feature[node]} out of range "
                             f"(the model has {n_features} features)")
        if np.float64(np.float32(threshold[node])) != threshold[node]:
            raise ValueError(
                f"node {node}: threshold {float(threshold[node])!r} is not a float32 value")
    orphans = np.flatnonzero(parents[1:] != 1) + 1
    if orphans.size:
        node = int(orphans[0])
        raise ValueError(f"node {node} is reached from {parents[node]} parents; every node but "
                         "the root must have exactly one")


# -- where models live ----------------------------------------------------------------------


def user_data_dir() -> Path:
    """autospmv's per-user data folder: ``$AUTOSPMV_HOME`` if set, else
    ``$XDG_DATA_HOME/autospmv`` (default ``~/.local/share/autospmv``)."""
    home = os.environ.get("AUTOSPMV_HOME")
    if home:
        return Path(home).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data).expanduser() / "autospmv"


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


def user_model_path(slug: str, dtype: str | None = None) -> Path:
    """Where a model retrained on this machine for device ``slug`` and value type ``dtype``
    is installed (``<slug>-<dtype>.json``; without ``dtype`` the older ``<slug>.json``, read
    as float64)."""
    return user_data_dir() / "models" / f"{model_stem(slug, dtype)}.json"


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
        from numba import cuda

        if cuda.config.ENABLE_CUDASIM:
            return "cuda-simulator"
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


def find_model(slug: str):
    """The model for device ``slug``: the user's retrained one, else one shipped in the
    ``autospmv.models`` package data, else None. Returns a path-like object."""
    user = user_model_path(slug)
    if user.is_file():
        return user
    from importlib import resources

    try:
        shipped = resources.files("autospmv.models") / f"{slug}.json"
    except ModuleNotFoundError:
        return None
    return shipped if shipped.is_file() else None
