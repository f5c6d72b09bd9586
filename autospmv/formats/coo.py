"""COO: one (row, col, value) triple per nonzero, sorted by row then column.

Sorted rows let the GPU kernel reduce runs of equal rows inside a warp before one atomic add.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .base import SparseFormat


@dataclasses.dataclass(frozen=True, eq=False)
class COOFormat(SparseFormat):
    row: np.ndarray
    col: np.ndarray
    data: np.ndarray

    name = "coo"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix) -> "COOFormat":
        lengths = np.diff(csr.indptr)
        row = np.repeat(np.arange(csr.shape[0], dtype=csr.indices.dtype), lengths)
        return cls(csr.shape, row, csr.indices.copy(), csr.data.copy())

    def to_csr(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.data, (self.row, self.col)), shape=self.shape)
