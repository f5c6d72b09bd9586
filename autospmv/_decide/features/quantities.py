"""The kernels' cost quantities as features: every kernel of the registry with a cost function
(``KernelSpec.cost``, named as ``"module:attribute"``; the built-in ones in
:mod:`autospmv._decide.cost`, where the quantities are defined) called with one
:class:`CostInputs` per matrix, which the scan's row-length histogram fills."""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from ... import _registry as registry
from ..._support.devices import WARP


QUANTITIES = ("bytes", "work", "span", "atomics", "launches")
QUANTITY_NAMES = tuple(f"{kernel}_{q}" for kernel in registry.KERNELS for q in QUANTITIES)
"""Feature names of the built-in kernels' cost quantities, kernel by kernel in
:data:`autospmv.KERNELS` order (:func:`quantity_names` adds registered kernels')."""

INDEX_BYTES = 4
"""Bytes of a column index or row pointer as the kernels read them."""


def quantity_names() -> tuple[str, ...]:
    """The cost quantity names of every kernel in the registry that has a cost function
    (:data:`QUANTITY_NAMES` first when no kernel is registered besides the built-in ones)."""
    return tuple(f"{spec.name}_{q}" for spec in registry.specs() if spec.cost is not None
                 for q in QUANTITIES)


@dataclasses.dataclass(frozen=True)
class CostInputs:
    """What the per-kernel cost functions read, computed once per matrix (in the notation of
    :mod:`autospmv._decide.cost`)."""

    csr: sp.csr_matrix
    device: str
    m: int
    n: int
    nnz: int
    v: int
    """Bytes per value."""
    vectors: int
    """Bytes of x and y: v·(m + n)."""
    longest: int
    values: np.ndarray
    """The distinct row lengths, ascending."""
    counts: np.ndarray
    """How many rows have each of :attr:`values`."""
    parallel: bool = False
    """Whether the passes over the row pointer run on numba's threads (a large matrix)."""
    group_sums: dict | None = None
    """Σ over groups of rows of the group's longest ⌈len/lanes⌉, by (rows per group, lanes), when
    the feature passes counted them with the rest (on the GPU,
    :func:`autospmv._decide.features.device_scan.scan`)."""

    @property
    def csr_bytes(self) -> int:
        return self.nnz * (self.v + INDEX_BYTES) + INDEX_BYTES * (self.m + 1) + self.vectors

    @property
    def padded_rows(self) -> int:
        return WARP * -(-self.m // WARP)


def quantities(csr: sp.csr_matrix, device: str, values=None, counts=None,
               parallel: bool = False, group_sums: dict | None = None) -> dict[str, float]:
    """The cost quantities of a canonical CSR matrix on ``device`` ("cpu" or "cuda"), keyed by
    :func:`quantity_names`: every kernel of the registry with a cost function, in its order.

    ``values``/``counts``: the distinct row lengths (ascending) and their counts, when the
    caller has them (the feature scan does); computed otherwise. ``parallel``: run the passes
    over the row pointer on numba's threads (the feature scan's choice for a large matrix).
    ``group_sums``: :attr:`CostInputs.group_sums`, when the caller counted them.
    """
    m, n = csr.shape
    nnz = int(csr.nnz)
    if m == 0 or nnz == 0:
        return dict.fromkeys(quantity_names(), 0.0)
    if values is None:
        counts = np.bincount(np.diff(csr.indptr))
        values = np.flatnonzero(counts)
        counts = counts[values]
    v = csr.dtype.itemsize
    inputs = CostInputs(csr, device, m, n, nnz, v, v * (m + n), int(values[-1]), values, counts,
                        parallel, group_sums)
    out = {}
    for spec in registry.specs():
        function = spec.cost_function()
        if function is not None:
            values = tuple(function(inputs))
            if len(values) != len(QUANTITIES):
                raise ValueError(f"the cost function of kernel {spec.name!r} returned "
                                 f"{len(values)} numbers; it must return {len(QUANTITIES)}: "
                                 f"{', '.join(QUANTITIES)}")
            out.update({f"{spec.name}_{q}": float(value) for q, value in zip(QUANTITIES, values)})
    return out

