"""What a valid tree model is: the checks a model's parts pass before it may predict.

:class:`autospmv._decide.model.tree.TreeModel` runs :func:`check_tree` on every construction (from
a fitted classifier, a file or a dict), and :class:`autospmv._decide.model.cost_model.CostModel`
checks its coefficients with :func:`float_array`. They live apart from the tree's prediction code
so that both models share one set of checks and one set of error messages; the file layout they
enforce is described in :mod:`autospmv._decide.model.tree`'s docstring. Every check raises
ValueError naming the first problem found.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ... import _registry as registry

LEAF = -1
"""Child index marking a leaf (scikit-learn's ``TREE_LEAF``)."""
LEAF_FEATURE = -2
"""Feature index and threshold stored at leaves (scikit-learn's ``TREE_UNDEFINED``)."""

_TREE_KEYS = (
    "children_left", "children_right", "feature", "threshold", "value",
    "n_node_samples", "weighted_n_node_samples",
)  # fmt: skip


def default_feature_names() -> tuple[str, ...] | None:
    try:
        from ..features.extract import feature_names
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


def check_tree(feature_names, classes, tree, provenance, known_features, known_kernels,
           negative_values: bool = False) -> None:
    """Raise ValueError naming the first inconsistency a prediction could trip over."""
    features = _names(feature_names, "feature_names")
    classes = _names(classes, "classes")
    known_features = default_feature_names() if known_features is None else tuple(known_features)
    if known_features is not None:
        unknown = [f for f in features if f not in known_features]
        if unknown:
            raise ValueError(f"unknown feature names: {', '.join(unknown)}; this autospmv "
                             "computes the names in autospmv._decide.features.extract.FEATURE_NAMES")
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
    arrays = {key: float_array(tree[key], key) for key in _TREE_KEYS if key != "value"}
    n = arrays["children_left"].shape[0]
    if n == 0:
        raise ValueError("the tree has no nodes")
    rows = tree["value"]
    if (not isinstance(rows, (list, tuple)) or
            not all(isinstance(r, (list, tuple)) and len(r) == len(classes) for r in rows)):
        raise ValueError(f"value must hold {len(classes)} numbers (one per class) for each node")
    arrays["value"] = value = float_array(rows, "value")
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



def float_array(values, key: str) -> np.ndarray:
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
