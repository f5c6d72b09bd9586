"""The cost model a trained tree may carry: per kernel, a linear estimate of its time.

:class:`CostModel` lives apart from the tree (:mod:`autospmv.model`) because it is a model of
its own: it is fitted separately (``training/fitting.py``), the tree reads it only through the
estimates it derives from the features, and a model file stores it as the optional
``"cost_model"`` entry (the file layout is in :mod:`autospmv.model`'s docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import registry
from .model_check import _array


class CostModel:
    """A per-kernel linear model of a kernel's time on one device, over the cost quantities of
    :mod:`autospmv.cost`.

    The estimate for kernel k is ``t̂_k = Σ_r c_kr · x_r`` over :data:`REGRESSORS`: a constant
    (``"1"``: launches and fixed latency), the matrix's ``rows`` and ``nnz``, and the kernel's own
    ``<kernel>_bytes``, ``_work``, ``_span`` and ``_atomics``. The coefficients are fitted on a
    device's labels (non-negative least squares on relative error, ``training/fitting.py``), so
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

    def derived_of(self, estimates: Mapping[str, float]) -> dict[str, float]:
        """The ``est_<kernel>`` values from the estimates of one feature dict (µs per kernel, as
        :meth:`estimates` returns them): the one place they are derived, for :meth:`derived` and
        for a tree that already holds the estimates (:meth:`autospmv.model.TreeModel.evaluate`),
        so that both give the tree the same values."""
        times = np.array([[estimates[kernel] for kernel in self.kernels]], dtype=np.float64)
        return dict(zip(self.derived_names, self.relative(times)[0].tolist()))

    def derived(self, features: Mapping) -> dict[str, float]:
        """The ``est_<kernel>`` values for one feature dict (:meth:`derived_of` its
        :meth:`estimates`)."""
        return self.derived_of(self.estimates(features))

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
