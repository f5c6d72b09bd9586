"""COO: one (row, col, value) triple per nonzero, sorted by row then column.

Sorted rows let the GPU kernel reduce runs of equal rows inside a warp before one atomic add.
That order is CSR's, so the column and value arrays are the CSR arrays themselves (no copy; the
canonical CSR is never modified) and only the row array is built.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .._support.validation import index_dtype
from . import convert
from .base import SparseFormat, row_of_each_nonzero


@dataclasses.dataclass(frozen=True, eq=False)
class COOFormat(SparseFormat):
    row: np.ndarray
    col: np.ndarray
    data: np.ndarray

    name = "coo"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix) -> "COOFormat":
        row = np.empty(csr.nnz, dtype=csr.indices.dtype)
        if csr.nnz:
            convert.coo_rows(csr.indptr, convert.row_tasks(csr.indptr), row)
        return cls(csr.shape, row, csr.indices, csr.data)

    @classmethod
    def from_device_csr(cls, csr) -> "COOFormat":
        """The row of every nonzero from a search in the row pointer, on the device (on the GPU
        by a shipped kernel, :attr:`~autospmv.formats.base.DeviceCSR.conversions`)."""
        if csr.conversions is not None:
            return cls(csr.shape, csr.conversions.nonzero_rows(csr, csr.indices.dtype),
                       csr.indices, csr.data)
        row = row_of_each_nonzero(csr.indptr, csr.nnz, csr.indices.dtype, csr.xp)
        return cls(csr.shape, row, csr.indices, csr.data)

    def csr_arrays(self, csr):
        return self.col, self.data  # row-sorted: CSR order

    @classmethod
    def transposed(cls, csr: sp.csr_matrix) -> "COOFormat":
        """Aᵀ of a canonical CSR matrix A, from A's arrays: a stable sort of A's column indices
        orders the triples by Aᵀ's row, then column. Nothing is sized by A's columns (Aᵀ's
        rows), as Aᵀ's CSR row pointer would be: memory in proportion to the nonzeros,
        whatever the shape."""
        order = np.argsort(csr.indices, kind="stable")
        row = np.empty(csr.nnz, dtype=csr.indices.dtype)  # A's rows: Aᵀ's columns
        if csr.nnz:
            convert.coo_rows(csr.indptr, convert.row_tasks(csr.indptr), row)
        return cls(csr.shape[::-1], csr.indices[order], row[order], csr.data[order])

    @property
    def nnz(self) -> int:
        return self.data.shape[0]

    def to_csr(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.data, (self.row, self.col)), shape=self.shape)


TALL_TRANSPOSE_BYTES = 1 << 23
"""Below this many bytes, Aᵀ's CSR row pointer is always built (see :func:`tall_transpose`)."""


def tall_transpose(csr) -> bool:
    """Whether Aᵀ of the canonical host matrix ``csr`` is stored as COO
    (:meth:`COOFormat.transposed`) rather than in its operator's format: when the row pointer
    of Aᵀ as CSR (one index per column of A, plus one) would take more bytes than A's own
    arrays and than :data:`TALL_TRANSPOSE_BYTES`. Every row-based format of Aᵀ needs memory in
    proportion to its rows; COO only to the nonzeros (SciPy's ``A.T`` likewise keeps A's
    arrays)."""
    n = csr.shape[1]
    row_pointer = (n + 1) * index_dtype(csr.nnz, csr.shape).itemsize
    matrix = csr.data.nbytes + csr.indices.nbytes + csr.indptr.nbytes
    return row_pointer > max(matrix, TALL_TRANSPOSE_BYTES)
