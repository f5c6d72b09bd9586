"""The cost model a trained tree may carry: per kernel, a linear estimate of its time.

:class:`CostModel` lives apart from the tree (:mod:`autospmv._decide.model`) because it is a model of
its own: it is fitted separately (``training/fitting.py``), the tree reads it only through the
estimates it derives from the features, and a model file stores it as the optional
``"cost_model"`` entry (the file layout is in :mod:`autospmv._decide.model`'s docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import _registry as registry
from .model_check import _array


class CostModel:
    """A per-kernel linear model of a kernel's time on one device, over the cost quantities of
    :mod:`autospmv._decide.cost`.

    The estimate for kernel k is ``t̂_k = Σ_r c_kr · x_r`` over :data:`REGRESSORS`: a constant
    (``"1"``: fixed latency), the matrix's ``rows`` and ``nnz``, and the kernel's own
    ``<kernel>_bytes``, ``_work``, ``_span``, ``_atomics`` and ``_launches``. (For a kernel
    with a fixed number of device steps the constant and the launches say the same; HYB has one
    step or two depending on the matrix, and its launches are what tell them apart.) The
    coefficients are fitted on a device's labels (non-negative least squares on relative
    error, ``training/fitting.py``), so
    ``t̂_k`` is in the labels' unit, microseconds. The tree reads the estimates relative to the
    fastest one: ``est_<kernel> = log2(t̂_k / min_j t̂_j)``, 0 for the kernel the cost model
    expects to be fastest; a tree splitting on them can follow the cost model where it is right
    and overrule it where the labels showed it wrong.

    **Two size regimes** (optional): with ``large_coefficients`` and ``large_nnz``, a matrix of
    at least ``large_nnz`` nonzeros is estimated with ``large_coefficients`` (same kernels, same
    regressors) and a smaller one with ``coefficients``. Labels are timed per call below the
    size rule's threshold and back-to-back from it (``training/label.py``, ``target_mode``):
    per call, a launch and a synchronisation are a large part of a small matrix's time; back to
    back, a large matrix's time is its memory traffic. One linear model fitted to both fits
    neither (``models/README.md`` has the cross-validated figures), so a model trained on both
    timings holds one coefficient table per regime.
    """

    REGRESSORS = ("1", "rows", "nnz", "bytes", "work", "span", "atomics", "launches")
    MAX_COEFFICIENT = 1e9
    """Largest coefficient a model may hold (µs per unit). Fitted values are below 10⁴ (the
    constant, microseconds) and far below 1 for the counts; the bound keeps every estimate
    finite for any matrix (quantities stay below about 10²⁰, so estimates below 10³⁰)."""
    FLOOR_US = 1e-3
    """Smallest estimate, so that a kernel whose coefficients are all 0 still has a logarithm."""

    def __init__(self, coefficients: Mapping[str, list], known_kernels=None, *,
                 large_coefficients: Mapping[str, list] | None = None,
                 large_nnz: float | None = None):
        known_kernels = registry.names() if known_kernels is None else tuple(known_kernels)
        table = self._table(coefficients, known_kernels, "coefficients")
        self.kernels: tuple[str, ...] = tuple(table)
        self.coefficients = np.array([table[k] for k in self.kernels])
        """One row of :data:`REGRESSORS` coefficients per kernel (below ``large_nnz``, if set)."""
        self.derived_names: tuple[str, ...] = tuple(f"est_{k}" for k in self.kernels)
        if (large_coefficients is None) != (large_nnz is None):
            raise ValueError("cost_model large_coefficients and large_nnz go together")
        self.large_nnz: float | None = None
        """Nonzeros from which :attr:`large_coefficients` estimate; None: one table for all."""
        self.large_coefficients: np.ndarray | None = None
        if large_nnz is not None:
            if (isinstance(large_nnz, bool) or not isinstance(large_nnz, (int, float))
                    or not 0 < large_nnz < float("inf")):
                raise ValueError("cost_model large_nnz must be a positive number")
            large = self._table(large_coefficients, known_kernels, "large_coefficients")
            if set(large) != set(table):
                raise ValueError("cost_model large_coefficients must name the same kernels as "
                                 "its coefficients")
            self.large_nnz = float(large_nnz)
            self.large_coefficients = np.array([large[k] for k in self.kernels])

    @classmethod
    def _table(cls, coefficients, known_kernels, what: str) -> dict[str, np.ndarray]:
        """``{kernel: coefficients}`` checked: known kernels, one non-negative number of at most
        :data:`MAX_COEFFICIENT` per regressor."""
        if not isinstance(coefficients, Mapping) or not coefficients:
            raise ValueError(f"cost_model {what} must be a non-empty object of kernel names")
        unknown = [k for k in coefficients if k not in known_kernels]
        if unknown:
            raise ValueError(f"unknown kernel names in the cost model: {', '.join(unknown)}")
        table = {}
        for kernel, row in coefficients.items():
            row = _array(row, f"cost_model {what} of {kernel}")
            if (row.shape != (len(cls.REGRESSORS),) or (row < 0).any()
                    or (row > cls.MAX_COEFFICIENT).any()):
                raise ValueError(f"cost_model {what} of {kernel} must be "
                                 f"{len(cls.REGRESSORS)} non-negative numbers of at most "
                                 f"{cls.MAX_COEFFICIENT:g}")
            table[kernel] = row
        return table

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
        """Estimated µs per row of X (columns in ``feature_names`` order) and kernel, each row
        with the coefficients of its size regime."""
        designs = [self.design(X, feature_names, kernel) for kernel in self.kernels]
        out = np.column_stack([row[0] + design @ row[1:]
                               for design, row in zip(designs, self.coefficients)])
        if self.large_nnz is not None:
            nnz = np.asarray(X, dtype=np.float64)[:, list(feature_names).index("nnz")]
            large = self.is_large(nnz)
            if large.any():
                out[large] = np.column_stack([
                    row[0] + design[large] @ row[1:]
                    for design, row in zip(designs, self.large_coefficients)])
        return np.maximum(out, self.FLOOR_US)

    def is_large(self, nnz) -> np.ndarray:
        """Whether matrices of ``nnz`` nonzeros are estimated with :attr:`large_coefficients`
        (all False without them)."""
        nnz = np.asarray(nnz, dtype=np.float64)
        if self.large_nnz is None:
            return np.zeros(nnz.shape, dtype=bool)
        return nnz >= self.large_nnz

    def relative(self, times: np.ndarray) -> np.ndarray:
        """``log2(t̂_k / min_j t̂_j)`` per row: the ``est_<kernel>`` columns."""
        return np.log2(times / times.min(axis=1, keepdims=True))

    def input_names(self) -> list[str]:
        """The features the estimates are computed from (sorted)."""
        return sorted({n for k in self.kernels for n in self.regressor_names(k)[1:]})

    def estimates(self, features: Mapping) -> dict[str, float]:
        """Estimated µs per kernel for one feature dict."""
        names = self.input_names()
        missing = [n for n in names if n not in features]
        if missing:
            raise ValueError(f"features missing for the cost model: {', '.join(missing)}")
        row = np.array([[float(features[n]) for n in names]])
        return dict(zip(self.kernels, self.times(row, names)[0].tolist()))

    def derived_of(self, estimates: Mapping[str, float]) -> dict[str, float]:
        """The ``est_<kernel>`` values from the estimates of one feature dict (µs per kernel, as
        :meth:`estimates` returns them): the one place they are derived, for :meth:`derived` and
        for a tree that already holds the estimates (:meth:`autospmv._decide.model.TreeModel.evaluate`),
        so that both give the tree the same values."""
        times = np.array([[estimates[kernel] for kernel in self.kernels]], dtype=np.float64)
        return dict(zip(self.derived_names, self.relative(times)[0].tolist()))

    def derived(self, features: Mapping) -> dict[str, float]:
        """The ``est_<kernel>`` values for one feature dict (:meth:`derived_of` its
        :meth:`estimates`)."""
        return self.derived_of(self.estimates(features))

    def to_dict(self) -> dict:
        doc = {"regressors": list(self.REGRESSORS),
               "coefficients": {k: self.coefficients[j].tolist()
                                for j, k in enumerate(self.kernels)}}
        if self.large_nnz is not None:
            doc["large_nnz"] = int(self.large_nnz) if self.large_nnz.is_integer() \
                else self.large_nnz
            doc["large_coefficients"] = {k: self.large_coefficients[j].tolist()
                                         for j, k in enumerate(self.kernels)}
        return doc

    @classmethod
    def from_dict(cls, doc, known_kernels=None) -> "CostModel":
        if not isinstance(doc, Mapping):
            raise ValueError("cost_model must be a JSON object")
        regressors = list(doc.get("regressors", ()))
        if regressors != list(cls.REGRESSORS):
            raise ValueError(f"cost_model regressors must be {list(cls.REGRESSORS)}; found "
                             f"{doc.get('regressors')!r}")
        return cls(doc.get("coefficients"), known_kernels,
                   large_coefficients=doc.get("large_coefficients"), large_nnz=doc.get("large_nnz"))
