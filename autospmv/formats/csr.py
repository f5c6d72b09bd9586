"""CSR: the canonical format. ``indptr[i]:indptr[i+1]`` delimits row i in ``indices``/``data``."""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .base import SparseFormat


@dataclasses.dataclass(frozen=True, eq=False)
class CSRFormat(SparseFormat):
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    name = "csr"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix) -> "CSRFormat":
        return cls(csr.shape, csr.indptr, csr.indices, csr.data)

    @classmethod
    def from_device_csr(cls, csr) -> "CSRFormat":
        return cls(csr.shape, csr.indptr, csr.indices, csr.data)

    def csr_arrays(self, csr):
        return self.indices, self.data

    def to_csr(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)
