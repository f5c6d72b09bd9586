"""JDS (jagged diagonal storage): rows sorted by length, stored diagonal by diagonal.

Rows are sorted by length, longest first (a stable sort: equal rows keep their order);
``perm[i]`` is the original row at sorted position ``i``. Jagged diagonal ``d`` holds entry ``d``
(in column order) of every row longer than ``d``, in sorted order, at ``jd_ptr[d] : jd_ptr[d+1]``.
Because lengths decrease, those rows are exactly the sorted positions ``0 .. jd_ptr[d+1] -
jd_ptr[d] - 1``: entry ``d`` of sorted row ``i`` is at ``jd_ptr[d] + i``. Consecutive sorted rows
read consecutive words in every diagonal, and no padding is stored.

Fill limit (GPU only). The GPU kernel runs one thread per sorted row, so each warp of 32 sorted
rows is busy for as many steps as its longest row: it occupies ``32 * len(sorted row 32w)`` thread
slots. For the GPU (``device="cuda"``, the default) JDS refuses with
:class:`~autospmv.formats.base.FormatTooLargeError` when the sum of those slots over all warps
exceeds ELL's limit (``ELL_MAX_FILL * nnz``, and :data:`~autospmv.formats.ell.ELL_SMALL` slots are
always accepted). Sorting makes this rare: it takes rows much longer than their 31 neighbours in
sorted order, i.e. a few very long rows in a small matrix. JDS stores no padding, and the CPU
kernel (:mod:`autospmv.kernels.cpu.jds`) stops each row at its last entry, so for the CPU
(``device="cpu"``) no limit applies.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .base import SparseFormat, row_lengths
from .ell import ELL_MAX_FILL, entry_positions, fill_exceeded, too_large

WARP = 32


def warp_slots(sorted_lengths: np.ndarray) -> int:
    """Thread slots the GPU kernel occupies: 32 x the longest row of each warp of sorted rows."""
    return WARP * int(np.asarray(sorted_lengths, dtype=np.int64)[::WARP].sum())


@dataclasses.dataclass(frozen=True, eq=False)
class JDSFormat(SparseFormat):
    perm: np.ndarray
    """Original row of each sorted position (rows by length, descending, stable)."""
    jd_ptr: np.ndarray
    """Start of each jagged diagonal in ``col``/``data``, plus the end (length max_len + 1)."""
    col: np.ndarray
    data: np.ndarray

    name = "jds"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix, max_fill: float = ELL_MAX_FILL,
                 device: str = "cuda") -> "JDSFormat":
        """JDS of canonical ``csr``; for ``device="cuda"`` within the fill limit (see the module
        docstring), for ``device="cpu"`` always."""
        m = csr.shape[0]
        itype = csr.indices.dtype
        lengths = row_lengths(csr)
        perm = np.argsort(-lengths, kind="stable")
        sorted_lengths = lengths[perm]
        slots = warp_slots(sorted_lengths)
        if device != "cpu" and fill_exceeded(slots, csr.nnz, max_fill):
            raise too_large(
                "JDS", slots, csr.nnz, max_fill,
                "GPU thread slots (32 x the longest row of each warp of sorted rows)",
                "a few rows are much longer than their neighbours; use kernel 'hyb' or 'csr5'",
            )
        max_len = int(sorted_lengths[0]) if m else 0
        # Diagonal d holds the rows longer than d: rows_reaching[d + 1].
        rows_reaching = np.cumsum(np.bincount(lengths, minlength=max_len + 1)[::-1])[::-1]
        jd_ptr = np.zeros(max_len + 1, dtype=itype)
        np.cumsum(rows_reaching[1:], out=jd_ptr[1:])
        sorted_position = np.empty(m, dtype=np.int64)
        sorted_position[perm] = np.arange(m)
        row, position = entry_positions(csr)
        destination = jd_ptr[position].astype(np.int64) + sorted_position[row]
        col = np.empty(csr.nnz, dtype=itype)
        data = np.empty(csr.nnz, dtype=csr.data.dtype)
        col[destination] = csr.indices
        data[destination] = csr.data
        return cls(csr.shape, perm.astype(itype), jd_ptr, col, data)

    def to_csr(self) -> sp.csr_matrix:
        m = self.shape[0]
        diagonal_lengths = np.diff(self.jd_ptr).astype(np.int64)
        diagonal = np.repeat(np.arange(diagonal_lengths.size), diagonal_lengths)
        sorted_position = np.arange(self.data.size) - self.jd_ptr[:-1].astype(np.int64)[diagonal]
        row = self.perm.astype(np.int64)[sorted_position]
        lengths = np.bincount(row, minlength=m)
        indptr = np.zeros(m + 1, dtype=self.col.dtype)
        np.cumsum(lengths, out=indptr[1:])
        destination = indptr[row].astype(np.int64) + diagonal
        indices = np.empty_like(self.col)
        data = np.empty_like(self.data)
        indices[destination] = self.col
        data[destination] = self.data
        return sp.csr_matrix((data, indices, indptr), shape=self.shape)
