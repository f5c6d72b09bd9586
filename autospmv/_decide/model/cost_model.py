"""The cost model a trained tree may carry: per kernel, a linear estimate of its time.

:class:`CostModel` lives apart from the tree (:mod:`autospmv._decide.model.tree`) because it is a
model of its own: it is fitted separately (``training/fitting.py``), the tree reads it only through
the estimates it derives from the features, and a model file stores it as the optional
``"cost_model"`` entry (the file layout is in :mod:`autospmv._decide.model.tree`'s docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ... import _registry as registry
from .check import float_array


ROW_LENGTH_CAP = 32
"""Where ``row_length`` stops growing with the mean row length: a warp's width."""


def x_sectors(nnz, per_nnz):
    """The ``x_sectors`` regressor: the 32-byte sectors of x the warps gather."""
    return nnz * per_nnz


def row_length(nnz, row_mean):
    """The ``row_length`` regressor: the nonzeros weighted by the mean row length, up to
    :data:`ROW_LENGTH_CAP`."""
    return nnz * np.minimum(row_mean, ROW_LENGTH_CAP)


class CostModel:
    """A per-kernel linear model of a kernel's time on one device, over the cost quantities of
    :mod:`autospmv._decide.cost`.

    The estimate for kernel k is ``t̂_k = Σ_r c_kr · x_r`` over :data:`REGRESSORS`: a constant
    (``"1"``: fixed latency), the matrix's ``rows``, ``nnz``, ``x_sectors`` and
    ``row_length``, and the kernel's own ``<kernel>_bytes``, ``_work``, ``_span``,
    ``_atomics`` and ``_launches``.
    ``x_sectors`` (``nnz × x_sectors_per_nnz_warp``, the 32-byte sectors of x that the warps
    gather) is the traffic the quantities' perfect cache for x leaves out: near ``nnz`` where
    columns are scattered, a small share of it where they are local; each kernel has its own
    coefficient because a kernel whose threads own whole rows (CSR-scalar) pays more for
    scattered gathers than one whose warps read the nonzeros in order. ``row_length``
    (``nnz × min(row_mean, 32)``) lets a kernel's time per nonzero grow with the rows' length
    at equal traffic: a CSR-scalar thread walks its row alone, with loads its warp cannot
    coalesce, so its time per nonzero rises with the row length, while kernels that split rows
    across lanes or tiles pay little for it. It saturates at 32, a warp's width: the longest
    rows are the quantities' ``work`` and ``span``. (For a kernel
    with a fixed number of device steps the constant and the launches say the same; HYB has one
    step or two depending on the matrix, and its launches are what tell them apart.) The
    coefficients are fitted on a device's labels (non-negative least squares on relative
    error, ``training/fitting.py``), so
    ``t̂_k`` is in the labels' unit, microseconds. The tree reads the estimates relative to the
    fastest one: ``est_<kernel> = log2(t̂_k / min_j t̂_j)``, 0 for the kernel the cost model
    expects to be fastest; a tree splitting on them can follow the cost model where it is right
    and overrule it where the labels showed it wrong.

    **Size regimes** (optional): with ``regimes``, a list of ``(from_nnz, coefficients)`` in
    increasing ``from_nnz``, a matrix is estimated with the table of the last regime whose
    ``from_nnz`` it reaches, and with ``coefficients`` below the first (``large_nnz`` and
    ``large_coefficients`` give the common single regime). Labels are timed per call below the
    size rule's threshold and back-to-back from it (``training/label.py``, ``target_mode``):
    per call, a launch and a synchronisation are a large part of a small matrix's time; back to
    back, a matrix that fits the GPU's L2 cache is bound by other costs than one streamed from
    memory. One linear model fitted to all fits none of them (``models/README.md`` has the
    cross-validated figures), so a model holds one coefficient table per regime.
    """

    REGRESSORS = ("1", "rows", "nnz", "x_sectors", "row_length", "bytes", "work", "span",
                  "atomics", "launches")
    MATRIX_REGRESSORS = 5
    """The first regressors, the matrix's own; the others are the kernel's quantities."""
    DERIVED = {"x_sectors": (("nnz", "x_sectors_per_nnz_warp"), x_sectors),
               "row_length": (("nnz", "row_mean"), row_length)}
    """Regressors computed from features rather than read: ``(the features, the function)``."""
    LATER_REGRESSORS = ("x_sectors", "row_length")
    """Regressors added after the first model files: a file without one reads as a coefficient
    0 for it (the model it was fitted as)."""
    MAX_COEFFICIENT = 1e9
    """Largest coefficient a model may hold (µs per unit). Fitted values are below 10⁴ (the
    constant, microseconds) and far below 1 for the counts; the bound keeps every estimate
    finite for any matrix (quantities stay below about 10²⁰, so estimates below 10³⁰)."""
    FLOOR_US = 1e-3
    """Smallest estimate, so that a kernel whose coefficients are all 0 still has a logarithm."""

    def __init__(self, coefficients: Mapping[str, list], known_kernels=None, *,
                 large_coefficients: Mapping[str, list] | None = None,
                 large_nnz: float | None = None, regimes=()):
        known_kernels = registry.names() if known_kernels is None else tuple(known_kernels)
        table = self._table(coefficients, known_kernels, "coefficients")
        self.kernels: tuple[str, ...] = tuple(table)
        self.coefficients = np.array([table[k] for k in self.kernels])
        """One row of :data:`REGRESSORS` coefficients per kernel (below the first regime)."""
        self.derived_names: tuple[str, ...] = tuple(f"est_{k}" for k in self.kernels)
        if (large_coefficients is None) != (large_nnz is None):
            raise ValueError("cost_model large_coefficients and large_nnz go together")
        regimes = list(regimes)
        if large_nnz is not None:
            regimes.insert(0, (large_nnz, large_coefficients))
        self.regimes: list[tuple[float, np.ndarray]] = []
        """``(from_nnz, coefficients)`` per regime above the first table, increasing."""
        for from_nnz, coefficients_from in regimes:
            if (isinstance(from_nnz, bool) or not isinstance(from_nnz, (int, float))
                    or not 0 < from_nnz < float("inf")):
                raise ValueError("cost_model large_nnz must be a positive number")
            if self.regimes and from_nnz <= self.regimes[-1][0]:
                raise ValueError("cost_model regimes must start at increasing nonzeros")
            other = self._table(coefficients_from, known_kernels, "large_coefficients")
            if set(other) != set(table):
                raise ValueError("cost_model large_coefficients must name the same kernels as "
                                 "its coefficients")
            self.regimes.append((float(from_nnz), np.array([other[k] for k in self.kernels])))

    @property
    def large_nnz(self) -> float | None:
        """Nonzeros from which the first regime's table estimates; None: one table for all."""
        return self.regimes[0][0] if self.regimes else None

    @property
    def large_coefficients(self) -> np.ndarray | None:
        """The first regime's table (None without regimes)."""
        return self.regimes[0][1] if self.regimes else None

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
            row = float_array(row, f"cost_model {what} of {kernel}")
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
        return (list(cls.REGRESSORS[:cls.MATRIX_REGRESSORS])
                + [f"{kernel}_{q}" for q in cls.REGRESSORS[cls.MATRIX_REGRESSORS:]])

    @classmethod
    def feature_names_of(cls, kernel: str) -> list[str]:
        """The features a kernel's regressors (but the constant) are computed from."""
        names = []
        for name in cls.regressor_names(kernel)[1:]:
            names += [n for n in cls._inputs_of(name) if n not in names]
        return names

    @classmethod
    def _inputs_of(cls, name: str) -> tuple[str, ...]:
        """The features regressor ``name`` is computed from (itself, where it is a feature)."""
        return cls.DERIVED[name][0] if name in cls.DERIVED else (name,)

    @classmethod
    def design(cls, X, feature_names, kernel: str) -> np.ndarray:
        """A kernel's regressors but the constant, for each row of X (columns in
        ``feature_names`` order): what its coefficients after the first multiply."""
        X = np.asarray(X, dtype=np.float64)
        column = {name: i for i, name in enumerate(feature_names)}
        missing = [n for n in cls.feature_names_of(kernel) if n not in column]
        if missing:
            raise ValueError(f"features missing for the cost model: {', '.join(missing)}")
        columns = []
        for name in cls.regressor_names(kernel)[1:]:
            if name in cls.DERIVED:
                inputs, function = cls.DERIVED[name]
                columns.append(function(*(X[:, column[n]] for n in inputs)))
            else:
                columns.append(X[:, column[name]])
        return np.column_stack(columns)

    def times(self, X, feature_names) -> np.ndarray:
        """Estimated µs per row of X (columns in ``feature_names`` order) and kernel, each row
        with the coefficients of its size regime."""
        designs = [self.design(X, feature_names, kernel) for kernel in self.kernels]
        out = np.column_stack([row[0] + design @ row[1:]
                               for design, row in zip(designs, self.coefficients)])
        if self.regimes:
            nnz = np.asarray(X, dtype=np.float64)[:, list(feature_names).index("nnz")]
            starts = self.regime_start(nnz)
            for from_nnz, table in self.regimes:
                rows = starts == from_nnz
                if rows.any():
                    out[rows] = np.column_stack([row[0] + design[rows] @ row[1:]
                                                 for design, row in zip(designs, table)])
        return np.maximum(out, self.FLOOR_US)

    def uses(self, regressor: str) -> bool:
        """Whether any table gives ``regressor`` a coefficient (models fitted before one of
        :data:`LATER_REGRESSORS` give it none)."""
        at = self.REGRESSORS.index(regressor)
        return bool(any((table[:, at] != 0).any()
                        for table in [self.coefficients] + [t for _, t in self.regimes]))

    def regime_start(self, nnz) -> np.ndarray:
        """Per matrix of ``nnz`` nonzeros, where its regime starts (0: the first table)."""
        nnz = np.asarray(nnz, dtype=np.float64)
        starts = np.zeros(nnz.shape)
        for from_nnz, _ in self.regimes:
            starts[nnz >= from_nnz] = from_nnz
        return starts

    def is_large(self, nnz) -> np.ndarray:
        """Whether matrices of ``nnz`` nonzeros are estimated with a regime's table rather
        than the first (all False without regimes)."""
        return self.regime_start(nnz) > 0

    def relative(self, times: np.ndarray) -> np.ndarray:
        """``log2(t̂_k / min_j t̂_j)`` per row: the ``est_<kernel>`` columns."""
        return np.log2(times / times.min(axis=1, keepdims=True))

    def input_names(self) -> list[str]:
        """The features the estimates are computed from (sorted)."""
        return sorted({n for k in self.kernels for n in self.feature_names_of(k)})

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
        for a tree that already holds the estimates
        (:meth:`autospmv._decide.model.tree.TreeModel.evaluate`), so that both give the tree the
        same values."""
        times = np.array([[estimates[kernel] for kernel in self.kernels]], dtype=np.float64)
        return dict(zip(self.derived_names, self.relative(times)[0].tolist()))

    def derived(self, features: Mapping) -> dict[str, float]:
        """The ``est_<kernel>`` values for one feature dict (:meth:`derived_of` its
        :meth:`estimates`)."""
        return self.derived_of(self.estimates(features))

    def to_dict(self) -> dict:
        doc = {"regressors": list(self.REGRESSORS),
               "coefficients": self._as_lists(self.coefficients)}
        if len(self.regimes) == 1:
            doc["large_nnz"] = self._number(self.large_nnz)
            doc["large_coefficients"] = self._as_lists(self.large_coefficients)
        elif self.regimes:
            doc["regimes"] = [{"from_nnz": self._number(from_nnz),
                               "coefficients": self._as_lists(table)}
                              for from_nnz, table in self.regimes]
        return doc

    def _as_lists(self, table) -> dict:
        return {k: table[j].tolist() for j, k in enumerate(self.kernels)}

    @staticmethod
    def _number(value: float):
        return int(value) if float(value).is_integer() else value

    @classmethod
    def from_dict(cls, doc, known_kernels=None) -> "CostModel":
        if not isinstance(doc, Mapping):
            raise ValueError("cost_model must be a JSON object")
        regressors = list(doc.get("regressors", ()))
        regimes = doc.get("regimes", [])
        if not isinstance(regimes, list) or not all(
                isinstance(r, Mapping) and {"from_nnz", "coefficients"} <= set(r) for r in regimes):
            raise ValueError("cost_model regimes must be a list of objects with from_nnz and "
                             "coefficients")
        if regimes and "large_nnz" in doc:
            raise ValueError("cost_model has regimes and large_nnz; a file holds one of them")
        tables = [doc.get("coefficients"), doc.get("large_coefficients")]
        tables += [r["coefficients"] for r in regimes]
        missing = [r for r in cls.REGRESSORS if r not in regressors]
        if (regressors != [r for r in cls.REGRESSORS if r not in missing]
                or not set(missing) <= set(cls.LATER_REGRESSORS)):
            raise ValueError(f"cost_model regressors must be {list(cls.REGRESSORS)}; found "
                             f"{doc.get('regressors')!r}")
        for regressor in missing:
            # A model fitted before this regressor: the same model with a coefficient 0 for it.
            tables = [cls._with_zero_column(t, regressor) for t in tables]
        return cls(tables[0], known_kernels, large_coefficients=tables[1],
                   large_nnz=doc.get("large_nnz"),
                   regimes=[(r["from_nnz"], t) for r, t in zip(regimes, tables[2:])])

    @classmethod
    def _with_zero_column(cls, coefficients, regressor: str):
        """A table without ``regressor``'s column, given a zero coefficient there (columns
        of regressors after it in :data:`REGRESSORS` that are missing too are added later, in
        order; tables that are not lists of numbers are left for :meth:`_table` to refuse)."""
        if not isinstance(coefficients, Mapping):
            return coefficients
        at = cls.REGRESSORS.index(regressor)
        return {k: (list(row[:at]) + [0.0] + list(row[at:]) if isinstance(row, list) else row)
                for k, row in coefficients.items()}
