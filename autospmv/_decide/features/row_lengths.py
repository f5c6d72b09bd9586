"""The row lengths: the passes over a canonical matrix's row pointer and the statistics of
its row-length histogram.

The passes are compiled, one pass over the row pointer each, with no scratch sized by the
columns: the longest row and Σ len² (:func:`row_length_moments`), the histogram of the row
lengths (:func:`row_length_counts`, or the scan's, :func:`length_histogram`) and the warp
imbalance (:func:`warp_ratio_sum`). The choosers, the features and the scan read them; a matrix
on the GPU runs the same passes there (:mod:`autospmv._decide.features.device_scan`), with the same
values.

The statistics (:data:`LENGTH_NAMES`: mean, spread, percentiles, Gini coefficient, ELL fill, HYB
width, sorted warp imbalance, ...) are computed from the histogram alone: the distinct lengths
``values`` (ascending) and how many rows have each (``counts``), in O(number of distinct
lengths + m / 32).
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..._support.devices import WARP
from ..._support.jit import njit, specialisations



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


def lengths_counted(longest: int, m: int) -> bool:
    """Whether the row lengths of m rows, the longest ``longest``, are counted in a histogram
    of ``longest + 1`` bins; if not (the longest row is much longer than m), they are sorted
    instead, so that a few very long rows cannot make the histogram far larger than the row
    pointer. The one rule for the scan's histogram and the row-length passes on either side
    (the host's and :mod:`autospmv._decide.features.device_scan`)."""
    return longest <= 8 * m + 64


def histogram_bins(longest: int, m: int) -> int:
    """Columns of a histogram of the lengths of m rows, the longest ``longest``:
    ``longest + 1``, or none when :func:`lengths_counted` says they are sorted instead."""
    return longest + 1 if lengths_counted(longest, m) else 0


def length_histogram(indptr, m: int, longest: int, hist=None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct row lengths (ascending) and how many rows have each: from the scan's
    per-worker histograms ``hist`` (columns :func:`histogram_bins`), else counted in one pass
    over the row pointer (:func:`row_length_counts`); sorted instead when the longest row is
    much longer than m (:func:`lengths_counted`)."""
    if not lengths_counted(longest, m):
        return np.unique(np.diff(indptr).astype(np.int64), return_counts=True)
    counts = hist.sum(axis=0) if hist is not None else row_length_counts(indptr, m, longest)
    values = np.flatnonzero(counts)
    return values, counts[values]


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


HYB_COO_COST = 3
"""COO entry cost in ELL slots; the same as ``autospmv.formats.hyb.width_cost``'s."""

LENGTH_NAMES = (
    "row_mean", "row_std", "row_cv", "row_min", "row_max", "row_median", "row_p90", "row_p99",
    "row_max_over_mean", "row_gini", "row_skew", "empty_row_share", "top1pct_nnz_share",
    "ell_fill", "hyb_width", "hyb_coo_share", "warp_imbalance_sorted",
)  # fmt: skip
"""The order of the tuple :func:`length_features` returns."""


def length_features(values, counts, m: int, nnz: int) -> tuple:
    """The features of :data:`LENGTH_NAMES`, in that order, from the histogram (``values``
    ascending, ``counts`` of each, int64). NumPy over the distinct lengths: nothing to
    compile on a first run. Sums of floats run in the order of the lengths, one term after
    another (:func:`_ordered_sum`), and every quotient of integers is the quotient of the two
    converted to float64, so that the values are those the models were trained on, bit for
    bit."""
    if m == 0:
        return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0,
                1.0)  # fmt: skip
    values = np.asarray(values, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    mean = _divide(nnz, m)
    dev = values - mean
    var = _ordered_sum(counts * dev * dev)
    third = _ordered_sum(counts * dev * dev * dev)
    below = np.cumsum(counts) - counts  # rows shorter than each length
    gini = _ordered_sum(values.astype(np.float64) * counts * (2 * below + counts - m))
    std = math.sqrt(var / m)
    skew = third / m / (std * (std * std)) if std > 0 else 0.0  # std**3 as a product
    row_max = int(values[-1])
    width, overflow = _hyb_width(values, counts, m, nnz)
    return (
        mean, std, std / mean if mean else 0.0, float(values[0]), float(row_max),
        _percentile(values, counts, m, 0.5), _percentile(values, counts, m, 0.9),
        _percentile(values, counts, m, 0.99), row_max / mean if mean else 1.0,
        gini / float(m * nnz) if nnz else 0.0, skew,
        _divide(int(counts[0]), m) if values[0] == 0 else 0.0,
        _divide(_top_rows(values, counts, max(1, -(-m // 100))), nnz) if nnz else 0.0,
        _divide(m * row_max, nnz) if nnz else 1.0, float(width),
        _divide(overflow, nnz) if nnz else 0.0, _sorted_warp_imbalance(values, counts, m),
    )  # fmt: skip


def _divide(a: int, b: int) -> float:
    """``a / b`` for integers as compiled code divides them: both converted to float64 first
    (Python's own ``int / int`` rounds the exact quotient once, which differs when an operand
    is beyond 2⁵³)."""
    return float(a) / float(b)


def _ordered_sum(terms: np.ndarray) -> float:
    """``0.0 + terms[0] + terms[1] + ...`` added one after another, left to right: a running
    sum (NumPy's ``sum`` adds pairwise, which rounds differently)."""
    if terms.size == 0:
        return 0.0
    return float(np.cumsum(terms)[-1]) + 0.0  # + 0.0: a first term of -0.0 gives 0.0


def _percentile(values, counts, m: int, q: float) -> float:
    """q-quantile of the row lengths, with numpy's default linear interpolation."""
    pos = q * (m - 1)
    lo = int(pos)
    low = _value_at(values, counts, lo)
    high = _value_at(values, counts, min(lo + 1, m - 1))
    return low + (pos - lo) * (high - low)


def _value_at(values, counts, rank: int) -> float:
    """The row length at 0-based ``rank`` in ascending order."""
    k = int(np.searchsorted(np.cumsum(counts), rank, side="right"))
    return float(values[min(k, values.size - 1)])


def _top_rows(values, counts, rows: int) -> int:
    """Entries in the ``rows`` longest rows."""
    counts = counts[::-1]
    before = np.cumsum(counts) - counts  # rows longer than each length
    take = np.clip(rows - before, 0, counts)
    return int(np.dot(take, values[::-1]))


def _sorted_warp_imbalance(values, counts, m: int) -> float:
    """Mean over warps of max/mean row length once rows are sorted by length, descending.

    With the rows sorted, warp w holds ranks 32w … 32w + 31. A warp whose rows all have one
    length has ratio 1 (length·rows / (rows·length), or 1 for empty rows), so only the warps in
    which one length ends and another begins are computed; the ratios are then added in warp
    order (:func:`_ordered_sum`), as one pass over the warps adds them."""
    warps = -(-m // WARP)
    lengths, rows = values[::-1], counts[::-1]
    ends = np.cumsum(rows)  # the rank after each length's rows
    inner = ends[:-1]
    mixed = inner[inner % WARP != 0] // WARP  # ascending, with repeats
    mixed = mixed[np.concatenate(([True], mixed[1:] != mixed[:-1]))[:mixed.size]]
    ratios = np.ones(warps)
    if mixed.size:
        first = mixed * WARP
        last = np.minimum(first + WARP, m)
        entries = _entries_before(last, lengths, rows) - _entries_before(first, lengths, rows)
        longest = lengths[np.searchsorted(ends, first, side="right")]
        ratios[mixed] = np.where(entries > 0, longest * (last - first) / np.maximum(entries, 1),
                                 1.0)
    return _ordered_sum(ratios) / warps


def _entries_before(rank, lengths, rows):
    """Entries in the rows of ranks below ``rank`` when ``rows[g]`` rows of length
    ``lengths[g]`` come in that order."""
    starts = np.concatenate(([0], np.cumsum(rows)))  # the first rank of each length
    entries = np.concatenate(([0], np.cumsum(lengths * rows)))  # entries before it
    group = np.searchsorted(starts, rank, side="right") - 1  # the length at rank
    return entries[group] + (rank - starts[group]) * np.concatenate((lengths, [0]))[group]


def _hyb_width(values, counts, m: int, nnz: int) -> tuple[int, int]:
    """(K, overflow(K)) of the HYB width rule (module docstring). Must equal
    ``autospmv.formats.hyb.width_cost``: the cost is convex and piecewise linear in K
    with breaks at the row lengths, so its smallest minimiser is 0 or one of them."""
    shorter = np.cumsum(counts)  # rows of length ≤ values[k]
    entries = np.cumsum(counts * values)  # and their entries
    overflow = (nnz - entries) - values * (m - shorter)
    cost = m * values + HYB_COO_COST * overflow
    k = int(np.argmin(cost))  # the first smallest: the smallest K
    if cost[k] < HYB_COO_COST * nnz:
        return int(values[k]), int(overflow[k])
    return 0, nnz
