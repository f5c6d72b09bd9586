"""The file format of a trained tree: JSON, validated when read.

File layout (``schema_version`` 1 to 7)::

    {
      "format": "autospmv-tree",
      "schema_version": 2,                    # 1 when nothing of version 2 is used
      "feature_names": ["row_max", ...],      # names from autospmv._decide.features.extract.FEATURE_NAMES
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
        "regressors": ["1", "rows", "nnz", "x_sectors", "row_length", "bytes", "work",
                       "span", "atomics", "launches"],  # without "x_sectors" or
                                              # "row_length": read as 0 for it
        "coefficients": {"coo": [11.5, ...], ...},  # µs per unit, one list per kernel
        "large_nnz": 1000000,                 # version 2, optional: from this many nonzeros
        "large_coefficients": {"coo": [...], ...}, # on, these coefficients estimate instead
        "regimes": [{"from_nnz": 1000000, "coefficients": {...}}, ...]  # version 4, instead
      },                                      # of large_*: one table per further size regime
      "defaults": {"bands": [...]},           # version 3, optional: a default kernel per size
                                              # band
                                              (autospmv._decide.model.default_policy.DefaultPolicy)
      "order_rule": {"bytes_per_second": 2.9e12, ...},  # version 6, optional: the order's cost
                                              # rule fitted to order labels
                                              (autospmv._decide.model.order_rule.OrderRule)
      "spmm_rule": {"choices": [...], ...},   # version 7, optional: the multi-vector program
                                              # per band of column counts
                                              (autospmv._decide.model.spmm_rule.SpmmRule)
      "provenance": {...}                     # free-form: device, versions, date, data hash, scores
    }

Version 2 added the cost model's second coefficient table, for matrices of at least
``large_nnz`` nonzeros (:class:`CostModel`, "two size regimes"); a file is written as version
1 when it has none, so that such a model stays readable by an autospmv that reads version 1
only. Version 3 added ``defaults``: per size band a default kernel that the tree's choice
replaces only when the tree's margin for it reaches the band's calibrated threshold
(:mod:`autospmv._decide.model.default_policy`). Version 4 added the cost model's ``x_sectors``
regressor and ``regimes``, any number of further coefficient tables (a file without
``x_sectors`` in its regressors reads as a coefficient 0 for it). Version 5 added the cost
model's ``row_length`` regressor (likewise 0 where a file's regressors lack it). Version 6 added
``order_rule``: the constants of the cost rule that decides a matrix's order
(:mod:`autospmv._decide.ordering`), fitted to products timed in each order on the device.
Version 7 added ``spmm_rule``: the multi-vector program a product of k columns runs where none
can be timed, per band of column counts, fitted to the programs' times on the device. An
autospmv refuses a file of a version it does not know, rather than ignoring entries it would not
understand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np

from .check import LEAF, LEAF_FEATURE
from .cost_model import CostModel
from .default_policy import DefaultPolicy
from .order_rule import OrderRule
from .spmm_rule import SpmmRule

FORMAT = "autospmv-tree"
SCHEMA_VERSION = 7
"""The newest file layout this autospmv reads and writes (see the module docstring)."""
SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7)
"""The layouts it reads."""

LOADER_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                 RecursionError)
"""What validating a parsed document can raise for a malformed one (e.g. OverflowError for an
integer too large for a float); :meth:`~autospmv._decide.model.tree.TreeModel.load` reports each as
a ValueError."""


def document(model) -> dict:
    """The JSON document as Python objects (floats keep their exact values)."""
    leaf = model.children_left == LEAF
    doc = {
        "format": FORMAT,
        "schema_version": model.schema_version,
        "feature_names": list(model.feature_names),
        "classes": list(model.classes),
        "tree": {
            "children_left": model.children_left.tolist(),
            "children_right": model.children_right.tolist(),
            "feature": model.feature.tolist(),
            "threshold": np.where(leaf, float(LEAF_FEATURE), model.threshold).tolist(),
            "value": model.value.tolist(),
            "n_node_samples": model.n_node_samples.tolist(),
            "weighted_n_node_samples": model.weighted_n_node_samples.tolist(),
        },
    }
    if model.cost_model is not None:
        doc["cost_model"] = model.cost_model.to_dict()
    if model.ranking != "value":
        doc["ranking"] = model.ranking
    if model.defaults is not None:
        doc["defaults"] = model.defaults.to_dict()
    if model.order_rule is not None:
        doc["order_rule"] = model.order_rule.to_dict()
    if model.spmm_rule is not None:
        doc["spmm_rule"] = model.spmm_rule.to_dict()
    doc["provenance"] = model.provenance
    return doc


def read_document(doc, known_kernels=None) -> dict:
    """A parsed JSON document validated: the arguments of :class:`TreeModel` it gives."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"a model file must hold a JSON object; found {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise ValueError(
            f"not an autospmv tree model: 'format' is {doc.get('format')!r}, "
            f"expected {FORMAT!r}"
        )
    version = doc.get("schema_version")
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        raise ValueError(
            f"unsupported schema_version {version!r}; this autospmv reads versions "
            f"{', '.join(map(str, SCHEMA_VERSIONS))}"
        )
    for key in ("feature_names", "classes", "tree"):
        if key not in doc:
            raise ValueError(f"the model has no {key!r} entry")
    cost_model = doc.get("cost_model")
    if cost_model is not None:
        cost_model = CostModel.from_dict(cost_model, known_kernels)
        if cost_model.large_nnz is not None and version < 2:
            raise ValueError("the cost model's large_coefficients need schema_version 2; "
                             f"the file says {version}")
        if (cost_model.uses("x_sectors") or len(cost_model.regimes) > 1) and version < 4:
            raise ValueError("the cost model's x_sectors and regimes need schema_version 4; "
                             f"the file says {version}")
        if cost_model.uses("row_length") and version < 5:
            raise ValueError("the cost model's row_length needs schema_version 5; "
                             f"the file says {version}")
    defaults = _optional(doc, "defaults", version, 3,
                         lambda entry: DefaultPolicy.from_dict(entry, known_kernels))
    order_rule = _optional(doc, "order_rule", version, 6, OrderRule.from_dict)
    spmm_rule = _optional(doc, "spmm_rule", version, 7, SpmmRule.from_dict)
    return dict(feature_names=doc["feature_names"], classes=doc["classes"], tree=doc["tree"],
                provenance=doc.get("provenance"), cost_model=cost_model,
                ranking=doc.get("ranking", "value"), defaults=defaults, order_rule=order_rule,
                spmm_rule=spmm_rule)


def _optional(doc: Mapping, key: str, version: int, since: int, read):
    """The optional entry ``key`` of a document of schema ``version`` read by ``read``, or
    None where the document has none; ValueError where it has one but its version is older
    than ``since``, the version that added it."""
    entry = doc.get(key)
    if entry is None:
        return None
    if version < since:
        noun = "need" if key.endswith("s") else "needs"
        raise ValueError(f"the model's {key} {noun} schema_version {since}; the file says "
                         f"{version}")
    return read(entry)


MAX_MODEL_BYTES = 64 << 20
"""The largest model file read (64 MiB): a trained tree of 100,000 nodes takes about 10 MB, so
a larger file is not a model, and reading it whole would hold it in memory."""


def read_json(source) -> tuple[object, str]:
    """The parsed JSON document of a path or a text/binary file object (never unpickled) and
    the name to report it by; ValueError when it cannot be read, is larger than
    :data:`MAX_MODEL_BYTES`, or is not JSON. At most one byte beyond the cap is read."""
    where = getattr(source, "name", "the model file") if hasattr(source, "read") \
        else os.fspath(source)
    try:
        if hasattr(source, "read"):
            text = source.read(MAX_MODEL_BYTES + 1)
        else:
            with open(where, "rb") as handle:
                text = handle.read(MAX_MODEL_BYTES + 1)
    except OSError as err:
        raise ValueError(f"cannot read the model file {where}: {err}") from None
    if len(text) > MAX_MODEL_BYTES:
        raise ValueError(f"{where} is larger than {MAX_MODEL_BYTES:,} bytes, the most a model "
                         "file may take; it is not a model file")
    try:
        # bytes are parsed as they are (UTF-8, -16 or -32), without a decoded copy
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{where} is not a valid JSON model file: {err}") from None
    return doc, where


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed in a model file")
