"""The row-length features: the passes over a matrix's row lengths and the statistics of
their histogram.

The passes (the longest row, the histogram of the row lengths and the warp imbalance) read only
the row pointer: on the host, compiled passes of :mod:`autospmv._decide.row_passes`; for a matrix
on the GPU, its kernels (:mod:`autospmv._decide.device_passes`), with the same values. The
statistics (:data:`LENGTH_NAMES`: mean,
spread, percentiles, Gini coefficient, ELL fill, HYB width, sorted warp imbalance, ...) are
computed from the histogram alone: the distinct lengths ``values`` (ascending) and how many rows
have each (``counts``), in O(number of distinct lengths + m / 32).
"""

from __future__ import annotations

import math

import numpy as np

from .._run.threads import threaded_passes
from .feature_scan import lengths_counted
from .row_passes import WARP, row_length_counts, row_length_moments, warp_ratio_sum

HYB_COO_COST = 3
"""COO entry cost in ELL slots; the same as ``autospmv.formats.hyb.width_cost``'s."""

LENGTH_NAMES = (
    "row_mean", "row_std", "row_cv", "row_min", "row_max", "row_median", "row_p90", "row_p99",
    "row_max_over_mean", "row_gini", "row_skew", "empty_row_share", "top1pct_nnz_share",
    "ell_fill", "hyb_width", "hyb_coo_share", "warp_imbalance_sorted",
)  # fmt: skip
"""The order of the tuple :func:`length_features` returns."""


def host_length_passes(indptr, m: int) -> tuple[int, np.ndarray, np.ndarray, float]:
    """The longest row, the distinct row lengths with their counts, and the warp imbalance sum,
    from the row pointer (:func:`row_length_moments`, :func:`row_length_counts`,
    :func:`warp_ratio_sum`); the lengths are sorted instead of counted when the longest row is
    much longer than m (:func:`autospmv._decide.feature_scan.lengths_counted`), as in the scan."""
    if m == 0:
        return 0, np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0
    parallel = threaded_passes(int(indptr[m] - indptr[0]))
    longest = int(row_length_moments(indptr, m, parallel)[1])
    if not lengths_counted(longest, m):
        values, counts = np.unique(np.diff(indptr).astype(np.int64), return_counts=True)
    else:
        counts = row_length_counts(indptr, m, longest)
        values = np.flatnonzero(counts)
        counts = counts[values]
    return longest, values, counts, warp_ratio_sum(indptr, m, parallel)


def length_histogram(hist: np.ndarray, indptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct row lengths (ascending) and their counts, from the workers' histograms; they
    have no columns when the longest row is much longer than m: then the lengths are sorted."""
    if hist.shape[1] == 0:
        return np.unique(np.diff(indptr).astype(np.int64), return_counts=True)
    total = hist.sum(axis=0)
    values = np.flatnonzero(total)
    return values, total[values]


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
