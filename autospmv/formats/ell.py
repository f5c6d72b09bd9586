"""ELL (ELLPACK): every row padded to the same width K, stored column-major.

Entry ``k`` of row ``r`` lives at slot ``k * m + r`` of ``col``/``data`` (``m`` rows), so the GPU
threads of consecutive rows read consecutive words at every step ``k``. A row's entries fill its
slots ``0 .. len-1`` in column order; the remaining slots are padding with ``col = -1`` and
``data = 0``. Kernels stop at the first padding slot of a row and never multiply padding by ``x``,
so NaN and Inf in ``x`` propagate exactly as in SciPy.

Fill limit. ELL stores ``m * K`` slots for ``nnz`` entries, which explodes when a few rows are much
longer than the rest. Like CUSP (``max_fill = 3``), :meth:`ELLFormat.from_csr` refuses with
:class:`~autospmv.formats.base.FormatTooLargeError` when the padded size exceeds
``ELL_MAX_FILL * nnz`` *and* ``ELL_SMALL`` slots; the absolute allowance lets small matrices
convert whatever their shape (their padding costs nothing that matters). The same rule bounds the
idle GPU thread slots of JDS (see :mod:`autospmv.formats.jds`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from . import convert
from .base import FormatTooLargeError, SparseFormat, row_lengths
from .coo import COOFormat

ELL_MAX_FILL = 3.0
"""Largest accepted ratio of padded slots to nonzeros (CUSP's default ``max_fill``)."""

ELL_SMALL = 1 << 16
"""Padded sizes up to this many slots are always accepted, whatever the ratio."""


def fill_exceeded(padded: int, nnz: int, max_fill: float) -> bool:
    """True when ``padded`` slots exceed both ``max_fill * nnz`` and :data:`ELL_SMALL`."""
    return padded > max_fill * nnz and padded > ELL_SMALL


def too_large(format_name: str, padded: int, nnz: int, max_fill: float, what: str,
              advice: str) -> FormatTooLargeError:
    """The error for a conversion over the fill limit: sizes, the limit, and ``advice``."""
    ratio = padded / nnz if nnz else float("inf")
    return FormatTooLargeError(
        f"{format_name} would need {padded:,} {what} for {nnz:,} nonzeros ({ratio:.1f}x), "
        f"above the fill limit of {max_fill:g}x nnz (max_fill; at most {ELL_SMALL:,} slots "
        f"are always accepted); {advice}"
    )


def split_at_width(csr: sp.csr_matrix, width: int) -> tuple["ELLFormat", COOFormat]:
    """ELL holding the first ``width`` entries of every row, and COO holding the rest.

    The COO part keeps CSR order (sorted by row, then column); it is empty when ``width`` is at
    least the longest row. HYB is exactly this pair. One compiled pass over the rows
    (:func:`autospmv.formats.convert.split_at_width`) writes both.
    """
    m = csr.shape[0]
    itype = csr.indices.dtype
    width = int(width)
    overflow_ptr = np.empty(m + 1, dtype=np.int64)
    overflow = convert.overflow_pointer(csr.indptr, width, overflow_ptr) if m else 0
    col = np.empty(m * width, dtype=itype)
    data = np.empty(m * width, dtype=csr.data.dtype)
    coo_row = np.empty(overflow, dtype=itype)
    coo_col = np.empty(overflow, dtype=itype)
    coo_data = np.empty(overflow, dtype=csr.data.dtype)
    if m:
        tasks = convert.row_tasks(csr.indptr, convert.ROWS_PER_BLOCK)
        convert.split_at_width(csr.indptr, csr.indices, csr.data, width, tasks, overflow_ptr,
                               col, data, coo_row, coo_col, coo_data)
    return (ELLFormat(csr.shape, width, col, data),
            COOFormat(csr.shape, coo_row, coo_col, coo_data))


def split_at_width_on_device(csr, width: int, longest: int) -> tuple["ELLFormat", COOFormat]:
    """:func:`split_at_width` of a matrix on the device (:class:`~autospmv.formats.base.DeviceCSR`),
    whose longest row is ``longest`` (the callers have reduced it), on the GPU by the shipped
    kernels of :attr:`csr.conversions <autospmv.formats.base.DeviceCSR.conversions>`,
    elsewhere with array operations of ``csr.xp``: every entry scattered to its slot. When no
    row is longer than ``width`` (ELL, and HYB without a COO part) that needs none of the masks
    and compactions of a split."""
    if csr.conversions is not None:
        arrays = csr.conversions.split_at_width(csr, int(width), int(longest))
        col, data, coo_row, coo_col, coo_data = arrays
        return (ELLFormat(csr.shape, int(width), col, data),
                COOFormat(csr.shape, coo_row, coo_col, coo_data))
    xp = csr.xp
    m = csr.shape[0]
    itype = csr.indices.dtype
    row, position = csr.rows_and_positions()
    col = xp.full(m * width, -1, dtype=itype)
    data = xp.zeros(m * width, dtype=csr.data.dtype)
    if width >= longest:
        slot = position * m + row
        col[slot] = csr.indices
        data[slot] = csr.data
        overflow = COOFormat(csr.shape, xp.empty(0, dtype=itype), xp.empty(0, dtype=itype),
                             xp.empty(0, dtype=csr.data.dtype))
        return ELLFormat(csr.shape, int(width), col, data), overflow
    kept = position < width
    slot = position[kept] * m + row[kept]
    col[slot] = csr.indices[kept]
    data[slot] = csr.data[kept]
    rest = ~kept
    overflow = COOFormat(csr.shape, row[rest].astype(itype), csr.indices[rest], csr.data[rest])
    return ELLFormat(csr.shape, int(width), col, data), overflow


def check_fill(m: int, width: int, nnz: int, max_fill: float = ELL_MAX_FILL) -> None:
    """FormatTooLargeError when ELL of ``m`` rows and ``width`` slots exceeds the fill limit."""
    if fill_exceeded(m * width, nnz, max_fill):
        raise too_large(
            "ELL", m * width, nnz, max_fill, f"padded slots ({m:,} rows x width {width:,})",
            "rows are too uneven for ELL; use kernel 'hyb' (ELL for the typical row length "
            "plus COO for the rest) or 'csr5'",
        )


@dataclasses.dataclass(frozen=True, eq=False)
class ELLFormat(SparseFormat):
    width: int
    """K, the number of slots per row."""
    col: np.ndarray
    """Column of slot ``k * m + r`` (entry k of row r), or -1 for padding; length ``m * K``."""
    data: np.ndarray
    """Value of each slot (0 for padding)."""

    name = "ell"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix, max_fill: float = ELL_MAX_FILL) -> "ELLFormat":
        """ELL with K = the longest row; FormatTooLargeError beyond the fill limit."""
        m = csr.shape[0]
        width = int(row_lengths(csr).max()) if m else 0
        check_fill(m, width, csr.nnz, max_fill)
        return split_at_width(csr, width)[0]

    @classmethod
    def from_device_csr(cls, csr, max_fill: float = ELL_MAX_FILL) -> "ELLFormat":
        """:meth:`from_csr` on the device; only the longest row comes back to the host."""
        longest = csr.longest_row()
        check_fill(csr.shape[0], longest, csr.nnz, max_fill)
        return split_at_width_on_device(csr, longest, longest)[0]

    def csr_arrays(self, csr):
        row, position = csr.rows_and_positions()
        slot = position * self.shape[0] + row  # column-major slots
        return self.col[slot], self.data[slot]

    def to_csr(self) -> sp.csr_matrix:
        m = self.shape[0]
        col = self.col.reshape(self.width, m).T  # (m, K) view: row r's slots in order
        data = self.data.reshape(self.width, m).T
        stored = col >= 0
        indptr = np.zeros(m + 1, dtype=self.col.dtype)
        np.cumsum(stored.sum(axis=1), out=indptr[1:])
        return sp.csr_matrix((data[stored], col[stored], indptr), shape=self.shape)
