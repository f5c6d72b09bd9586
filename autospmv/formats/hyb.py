"""HYB: an ELL part of width K (the first K entries of every row) plus a COO part with the rest.

ELL is fast for the typical row and COO costs the same per entry whatever the row length, so HYB
takes the bulk of a matrix with uneven rows through ELL without padding every row to the longest.
The COO part keeps CSR order (sorted by row, then column), which the COO kernels rely on.

The width is a parameter: its strategies are pure functions of the row lengths
(:mod:`autospmv._decide.choosers`, CUSP's rule by default). CUSP's width never exceeds ELL's fill limit
of 3: at least m/3 rows reach K and put K entries each in the ELL part, so ``m*K <= 3 * nnz``.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np
import scipy.sparse as sp

from .._decide.choosers import default_hyb_width
from .base import SparseFormat, longest_row
from .coo import COOFormat
from .ell import (
    ELL_MAX_FILL, ELLFormat, fill_exceeded, split_at_width, split_at_width_on_device, too_large,
)


def check_width(width, indptr: np.ndarray, nnz: int, max_fill: float = ELL_MAX_FILL,
                longest: int | None = None) -> int:
    """The ELL width HYB uses for a requested ``width`` on the matrix with row pointer
    ``indptr`` (on the host): clamped to the longest row (wider slots would be all padding);
    ValueError if negative, FormatTooLargeError beyond the fill limit.

    Only the longest row is needed: ``longest`` when the caller has it (reduced on the GPU
    for a matrix there), else computed here; the chooser's width, which the error suggests, is
    computed only when the width is refused."""
    width = operator.index(width)
    if width < 0:
        raise ValueError(f"the HYB width must be >= 0; got {width}")
    m = len(indptr) - 1
    if longest is None:
        longest = longest_row(indptr)
    width = min(width, longest)
    if fill_exceeded(m * width, nnz, max_fill):
        raise too_large(
            "HYB", m * width, nnz, max_fill, f"ELL slots ({m:,} rows x width {width:,})",
            f"choose a smaller width (the default is {default_hyb_width(np.diff(indptr))}) "
            "or use kernel 'csr5'",
        )
    return width


@dataclasses.dataclass(frozen=True, eq=False)
class HYBFormat(SparseFormat):
    width: int
    """K, the ELL part's width (at most the longest row)."""
    ell: ELLFormat
    """The first K entries of every row."""
    coo: COOFormat
    """The entries beyond the first K of their row, sorted by row, then column."""

    name = "hyb"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix, width: int,
                 max_fill: float = ELL_MAX_FILL) -> "HYBFormat":
        """Split at ``width`` (clamped to the longest row: wider slots would be all padding).

        FormatTooLargeError when the ELL part exceeds the fill limit (see
        :mod:`autospmv.formats.ell`); :func:`default_hyb_width` never does.
        """
        width = check_width(width, csr.indptr, csr.nnz, max_fill)
        ell, coo = split_at_width(csr, width)
        return cls(csr.shape, width, ell, coo)

    @classmethod
    def from_device_csr(cls, csr, width: int, max_fill: float = ELL_MAX_FILL) -> "HYBFormat":
        """:meth:`from_csr` on the device; the width is checked against the host's row
        pointer and the longest row reduced on the device."""
        longest = csr.longest_row()
        width = check_width(width, csr.host_indptr, csr.nnz, max_fill, longest=longest)
        ell, coo = split_at_width_on_device(csr, width, longest)
        return cls(csr.shape, width, ell, coo)

    def csr_arrays(self, csr):
        """The first ``width`` entries of a row from the ELL part, the rest from the COO part."""
        xp = csr.xp
        row, position = csr.rows_and_positions()
        kept = position < self.width
        slot = position[kept] * self.shape[0] + row[kept]
        indices = xp.empty(csr.nnz, dtype=self.ell.col.dtype)
        data = xp.empty(csr.nnz, dtype=self.ell.data.dtype)
        indices[kept], data[kept] = self.ell.col[slot], self.ell.data[slot]
        indices[~kept], data[~kept] = self.coo.col, self.coo.data
        return indices, data

    def to_csr(self) -> sp.csr_matrix:
        ell = self.ell.to_csr()
        ell_row = np.repeat(np.arange(self.shape[0]), np.diff(ell.indptr))
        # Within a row the ELL entries precede the overflow, so a stable sort by row restores CSR.
        row = np.concatenate([ell_row, self.coo.row])
        order = np.argsort(row, kind="stable")
        indptr = np.zeros(self.shape[0] + 1, dtype=self.ell.col.dtype)
        np.cumsum(np.bincount(row, minlength=self.shape[0]), out=indptr[1:])
        return sp.csr_matrix(
            (np.concatenate([ell.data, self.coo.data])[order],
             np.concatenate([ell.indices, self.coo.col])[order], indptr),
            shape=self.shape,
        )
