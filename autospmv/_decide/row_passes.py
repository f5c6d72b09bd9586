"""Compiled passes over a canonical CSR matrix's rows, apart from the feature scan: the row
lengths' moments and histogram, the warp imbalance, and the bandwidth and occupied diagonals
counted from the sorted diagonal offsets. The choosers, the row-length features and the scan
read them; each is one pass in O(m) or O(nnz) with no scratch sized by the columns.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..kernels import njit
from ..kernels.cpu import specialisations

WARP = 32
"""Rows per warp of the GPU kernels: the unit of the warp imbalance."""


def _row_length_moments(indptr, m):
    """Σ len² over the rows (float64: a sum of integers, exact below 2⁵³ in any order) and
    the longest row's length, in one pass over the row pointer."""
    squares = 0.0
    longest = 0
    for i in prange(m):
        length = np.int64(indptr[i + 1] - indptr[i])
        squares += float(length) * float(length)
        longest = max(longest, length)
    return squares, longest


_moments_serial, _moments_parallel = specialisations(_row_length_moments)


def row_length_moments(indptr, m, parallel: bool = False):
    """Σ len² over the rows and the longest row's length (on numba's threads if
    ``parallel``): both set CSR-vector's group size
    (:func:`autospmv._decide.choosers.choose_threads_per_row`); the longest row also sizes the scan's
    row-length histogram."""
    return (_moments_parallel if parallel else _moments_serial)(indptr, m)


@njit(cache=True)
def row_length_counts(indptr, m, longest):
    """``counts[k]`` = rows of length exactly k, for k = 0..``longest`` (the longest row's
    length, from :func:`row_length_moments`), in one pass over the row pointer: no nnz- or
    m-sized temporary, for the choosers that read the row-length histogram.

    Four histograms take the rows in turn and are added at the end. With one, a run of rows
    of equal length (a stencil's) makes each increment wait for the store of the one before
    to the same counter; on the Intel hosts of the GPUs that took 10 ms for 4M rows."""
    partial = np.zeros((4, longest + 1), dtype=np.int64)
    whole = m - m % 4
    for i in range(0, whole, 4):
        partial[0, indptr[i + 1] - indptr[i]] += 1
        partial[1, indptr[i + 2] - indptr[i + 1]] += 1
        partial[2, indptr[i + 3] - indptr[i + 2]] += 1
        partial[3, indptr[i + 4] - indptr[i + 3]] += 1
    for i in range(whole, m):
        partial[0, indptr[i + 1] - indptr[i]] += 1
    return partial[0] + partial[1] + partial[2] + partial[3]


@njit(cache=True)
def _diagonal_offsets(indptr, indices, m, offsets):
    """``offsets[p]`` = j − i of entry p (row i, column j); returns the largest |j − i|."""
    band = 0
    for i in range(m):
        for p in range(indptr[i], indptr[i + 1]):
            offsets[p] = np.int64(indices[p]) - i
            band = max(band, abs(offsets[p]))
    return band


@njit(cache=True)
def _distinct_sorted(values):
    """The number of distinct values of a sorted array."""
    count = min(values.size, 1)
    for k in range(1, values.size):
        count += values[k] != values[k - 1]
    return count


def band_and_diagonals(indptr, indices, m) -> tuple[int, int]:
    """The bandwidth and the number of occupied diagonals that the full scan counts in its
    flags over the m + n − 1 diagonals, from the entries' sorted offsets j − i: 8 bytes per
    nonzero."""
    offsets = np.empty(int(indptr[m]), dtype=np.int64)
    band = _diagonal_offsets(indptr, indices, m, offsets)
    offsets.sort()
    return int(band), int(_distinct_sorted(offsets))


RATIO_CHUNK = 4096
"""Warps per partial sum of :func:`chunked_ratio_sum`: the order in which the warp imbalance
ratios are added (partial sums over this many warps, then the partial sums), the same wherever
the ratios were computed, so that the feature has the same value on every path."""


def _warp_ratios(indptr, m):
    """Per warp of 32 rows, (longest row · rows) / entries (1 for a warp of empty rows), from
    the row pointer alone."""
    warps = -(-m // WARP)
    ratios = np.empty(warps)
    for w in prange(warps):
        lo = w * WARP
        hi = min(lo + WARP, m)
        longest = entries = 0
        for i in range(lo, hi):
            length = np.int64(indptr[i + 1] - indptr[i])
            entries += length
            longest = max(longest, length)
        ratios[w] = longest * (hi - lo) / entries if entries else 1.0
    return ratios


_ratios_serial, _ratios_parallel = specialisations(_warp_ratios)


def chunked_ratio_sum(ratios) -> float:
    """The sum of per-warp ratios in the order of :data:`RATIO_CHUNK`, whether the ratios were
    computed on the host (:func:`warp_ratio_sum`) or on the GPU: each chunk's running sum,
    then the running sum of the chunks' sums (NumPy's running sums add one term after another,
    as a loop does; its ``sum`` adds pairwise, which rounds differently). The ratios are
    positive, so no sum starts from -0.0."""
    ratios = np.asarray(ratios, dtype=np.float64)
    whole = ratios.size // RATIO_CHUNK
    totals = np.cumsum(ratios[:whole * RATIO_CHUNK].reshape(whole, RATIO_CHUNK), axis=1)[:, -1]
    if ratios.size > whole * RATIO_CHUNK:
        totals = np.append(totals, np.cumsum(ratios[whole * RATIO_CHUNK:])[-1])
    return float(np.cumsum(totals)[-1]) if totals.size else 0.0


def warp_ratio_sum(indptr, m, parallel: bool = False) -> float:
    """The warp imbalance sum: the ratios of :func:`_warp_ratios` (on numba's threads if
    ``parallel``) added by :func:`chunked_ratio_sum`, with the same result either way;
    computed apart from the scan, so that the ``warp_imbalance`` feature does not depend on how
    the scan's windows are split between threads."""
    return chunked_ratio_sum((_ratios_parallel if parallel else _ratios_serial)(indptr, m))
