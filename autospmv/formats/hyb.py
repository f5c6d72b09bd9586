"""HYB: an ELL part of width K (the first K entries of every row) plus a COO part with the rest.

ELL is fast for the typical row and COO costs the same per entry whatever the row length, so HYB
takes the bulk of a matrix with uneven rows through ELL without padding every row to the longest.
The COO part keeps CSR order (sorted by row, then column), which the COO kernels rely on.

The width is a parameter: its strategies are pure functions of the row lengths, after
Ginkgo's ``hybrid.hpp`` (:func:`width_quantile`, :func:`width_cusp`, CUSP's rule, the default
one, and :func:`width_cost`, a time model that the features report as ``hyb_width``); the
parameter chooser (:mod:`autospmv._decide.choosers`) and the labeller pick among them. CUSP's width
never exceeds ELL's fill limit of 3: at least m/3 rows reach K and put K entries each in the ELL
part, so ``m*K <= 3 * nnz``.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np
import scipy.sparse as sp

from .base import SparseFormat, longest_row
from .coo import COOFormat
from .ell import (
    ELL_MAX_FILL, ELLFormat, fill_exceeded, split_at_width, split_at_width_on_device, too_large,
)



def _histogram(lengths) -> tuple[int, np.ndarray]:
    """Number of rows and ``count[k]`` = rows of length exactly k, for k = 0..max (int64)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and lengths.min() < 0:
        raise ValueError("row lengths must be non-negative")
    return lengths.size, np.bincount(lengths, minlength=1)


def _rows_reaching(count: np.ndarray) -> np.ndarray:
    """``reach[k]`` = rows of length >= k, for k = 0..max."""
    return np.cumsum(count[::-1])[::-1]


def width_quantile(row_lengths, q: float = 2 / 3) -> int:
    """The smallest K such that at least a fraction ``q`` of the rows have length <= K."""
    if not 0 <= q <= 1:
        raise ValueError(f"q must lie in [0, 1]; got {q}")
    m, count = _histogram(row_lengths)
    if m == 0:
        return 0
    return int(np.searchsorted(np.cumsum(count), q * m, side="left"))


def width_cusp(row_lengths) -> int:
    """CUSP's ELL width for HYB: the largest K that at least ``max(4096, m/3)`` rows reach.

    "Reach" means length >= K. 0 when no K > 0 qualifies (in particular below 4096 rows: CUSP
    then leaves everything to COO).
    """
    m, count = _histogram(row_lengths)
    reach = _rows_reaching(count)
    ok = (3 * reach >= m) & (reach >= 4096)
    ok[0] = True
    return int(np.flatnonzero(ok)[-1])


def width_cost(row_lengths, coo_cost: float = 3.0) -> int:
    """The K in 0..max minimising ``m*K + coo_cost * overflow(K)``; ties go to the smallest K.

    ``overflow(K) = sum(max(0, len - K))`` is the number of entries left to COO. Computed in
    O(m + max) from the histogram: ``overflow(K) = sum over j > K of rows reaching j``.
    """
    m, count = _histogram(row_lengths)
    reach = _rows_reaching(count)
    overflow = np.append(np.cumsum(reach[:0:-1])[::-1], 0)  # overflow[K], K = 0..max
    cost = m * np.arange(reach.size, dtype=np.float64) + coo_cost * overflow
    return int(np.argmin(cost))


def width_cusp_of_histogram(values, counts) -> int:
    """:func:`width_cusp` from the distinct row lengths (ascending) and their counts, the
    histogram the feature extractor builds anyway. Between two distinct lengths the number of
    rows reaching K does not change, so the largest qualifying K is one of the lengths."""
    values = np.asarray(values, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    reach = np.cumsum(counts[::-1])[::-1]  # rows of length >= values[j]
    ok = (3 * reach >= counts.sum()) & (reach >= 4096) & (values > 0)
    return int(values[ok][-1]) if ok.any() else 0


default_hyb_width = width_cusp
"""The width strategy the registry's parameter chooser uses."""
default_hyb_width_of_histogram = width_cusp_of_histogram
"""The same strategy from a row-length histogram (:mod:`autospmv._decide.cost`)."""


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
