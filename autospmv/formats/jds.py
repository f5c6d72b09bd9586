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

from .._support.devices import WARP
from . import convert
from .base import SparseFormat
from .ell import ELL_MAX_FILL, fill_exceeded, too_large


def warp_slots(sorted_lengths: np.ndarray) -> int:
    """Thread slots the GPU kernel occupies: 32 x the longest row of each warp of sorted rows."""
    return WARP * int(np.asarray(sorted_lengths, dtype=np.int64)[::WARP].sum())


def row_order(indptr: np.ndarray, nnz: int,
              max_fill: float = ELL_MAX_FILL) -> tuple[np.ndarray, np.ndarray]:
    """``perm`` and ``jd_ptr`` of JDS from the row pointer alone (a compiled counting sort),
    or FormatTooLargeError beyond the fill limit."""
    m = indptr.shape[0] - 1
    lengths = np.diff(indptr)
    max_len = int(lengths.max()) if m else 0
    perm = np.empty(m, dtype=indptr.dtype)
    jd_ptr = np.empty(max_len + 1, dtype=indptr.dtype)
    convert.sort_rows_by_length(indptr, max_len, perm, jd_ptr)
    _check_slots(lengths, perm, nnz, max_fill)
    return perm, jd_ptr


def row_order_on_device(csr, max_fill: float = ELL_MAX_FILL):
    """:func:`row_order` of a matrix on the device (:class:`~autospmv.formats.base.DeviceCSR`):
    ``perm`` by a stable sort of the negated lengths and ``jd_ptr`` from the rows longer than
    each k, with array operations of ``csr.xp``. Only the slot count and the longest row come
    back to the host."""
    xp = csr.xp
    m = csr.shape[0]
    itype = csr.indptr.dtype
    lengths = xp.diff(csr.indptr)
    longest = int(lengths.max()) if m else 0
    perm = xp.argsort(-lengths, kind="stable").astype(itype)
    rows_per_length = xp.bincount(lengths, minlength=longest + 1)
    longer_than = m - xp.cumsum(rows_per_length)[:longest]  # rows longer than k, k < longest
    jd_ptr = xp.zeros(longest + 1, dtype=itype)
    jd_ptr[1:] = xp.cumsum(longer_than)
    _check_slots(lengths, perm, csr.nnz, max_fill)
    return perm, jd_ptr


def _check_slots(lengths, perm, nnz: int, max_fill: float) -> None:
    """FormatTooLargeError when the GPU thread slots (:func:`warp_slots` of the sorted lengths,
    read from the rows that lead a warp) exceed the fill limit."""
    slots = WARP * int(lengths[perm[::WARP]].sum(dtype=np.int64))
    if fill_exceeded(slots, nnz, max_fill):
        raise too_large(
            "JDS", slots, nnz, max_fill,
            "GPU thread slots (32 x the longest row of each warp of sorted rows)",
            "a few rows are much longer than their neighbours; use kernel 'hyb' or 'csr5'",
        )


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
        """Sort the rows by length (a compiled counting sort) and scatter each row's entries to
        the diagonals (one compiled pass over blocks of sorted rows); for ``device="cuda"``
        FormatTooLargeError beyond the fill limit (see the module docstring), for
        ``device="cpu"`` no limit."""
        m = csr.shape[0]
        itype = csr.indices.dtype
        perm, jd_ptr = row_order(csr.indptr, csr.nnz,
                                 max_fill if device != "cpu" else float("inf"))
        col = np.empty(csr.nnz, dtype=itype)
        data = np.empty(csr.nnz, dtype=csr.data.dtype)
        if m:
            tasks = convert.sorted_tasks(csr.indptr, perm)
            convert.gather_diagonals(csr.indptr, csr.indices, csr.data, perm, tasks, jd_ptr,
                                     col, data)
        return cls(csr.shape, perm, jd_ptr, col, data)

    @classmethod
    def from_device_csr(cls, csr, max_fill: float = ELL_MAX_FILL,
                        device: str = "cuda") -> "JDSFormat":
        """:meth:`from_csr` on the device: the rows sorted there (:func:`row_order_on_device`)
        and each entry scattered to its diagonal."""
        xp = csr.xp
        m = csr.shape[0]
        perm, jd_ptr = row_order_on_device(csr, max_fill if device != "cpu" else float("inf"))
        position = xp.empty(m, dtype=np.int64)
        position[perm] = xp.arange(m, dtype=np.int64)
        row, diagonal = csr.rows_and_positions()
        destination = jd_ptr[diagonal].astype(np.int64) + position[row]
        del row, diagonal
        col = xp.empty_like(csr.indices)
        data = xp.empty_like(csr.data)
        col[destination] = csr.indices
        data[destination] = csr.data
        return cls(csr.shape, perm, jd_ptr, col, data)

    def csr_arrays(self, csr):
        """Nonzero k of row r is at ``jd_ptr[k]`` + r's sorted place."""
        xp = csr.xp
        m = self.shape[0]
        row, position = csr.rows_and_positions()
        place = xp.empty(m, dtype=np.int64)
        place[self.perm] = xp.arange(m, dtype=np.int64)
        source = self.jd_ptr[position].astype(np.int64) + place[row]
        return self.col[source], self.data[source]

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
