"""Which rows the features read when they are sampled, and x's locality from such a sample.

The rows are cut into windows of ``WINDOW_ROWS`` = 32 consecutive rows (whole warps and 8-row
block rows), the windows into as many equal strata of consecutive windows as windows are
wanted, and one window per stratum is drawn by a fixed hash of (``SAMPLE_SEED``, stratum): the
same windows for the same matrix, on the host and on the GPU. :func:`x_locality` reads a small
sample of this kind for a parameter chooser (CSR5's tile height) and the order's cost rule,
:func:`x_reach` the same sample for the rule.
"""

from __future__ import annotations

import math

import numpy as np

from ..._support.jit import njit
from ...formats.base import to_host
from . import device_scan
from .scan import WINDOW_ROWS, safe_ratio, sampled_features

SAMPLE_THRESHOLD = 1 << 17
"""Above this many nonzeros the sampled features are sampled by default."""
SAMPLE_TARGET_NNZ = 1 << 15
"""Default sample size in nonzeros, unless ``SAMPLE_SHARE * nnz`` is larger."""
SAMPLE_SHARE = 1 / 16
SAMPLE_SEED = 0
SAMPLE_TOLERANCE = 0.02
"""Stated accuracy of sampled features (see the module docstring)."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def small_sample(csr) -> np.ndarray | None:
    """The windows (ascending numbers) :func:`x_locality` and :func:`x_reach` read: about
    :data:`SAMPLE_TARGET_NNZ` nonzeros' worth drawn as for the features (:func:`drawn_windows`),
    every window of a smaller matrix; None for a matrix without rows or nonzeros."""
    m = csr.shape[0]
    nnz = int(csr.nnz)
    if m == 0 or nnz == 0:
        return None
    rows = math.ceil(SAMPLE_TARGET_NNZ * m / nnz)
    return drawn_windows(-(-m // WINDOW_ROWS), sampled_windows(m, nnz, rows))


def x_locality(csr) -> float:
    """``x_sectors_per_nnz_warp`` (see the module doc) estimated from about
    :data:`SAMPLE_TARGET_NNZ` nonzeros whatever the matrix's size: the locality of x for a
    parameter chooser (CSR5's tile height, :func:`autospmv.formats.csr5.choose_sigma`). The
    windows are drawn as for the features (:func:`drawn_windows`), fewer of them, and their
    sectors counted in a small hash table (:func:`window_sectors`):
    0.1–0.4 ms on a 2·10⁷-nonzero matrix, where the features' sixteenth of it takes tens of
    milliseconds. With at most :data:`SAMPLE_TARGET_NNZ` nonzeros every window is read and the
    value is the feature's. ``csr``: a canonical host matrix, or the
    :class:`autospmv.formats.base.RowStructure` of a matrix on the GPU, whose sampled windows are
    then counted there (:func:`autospmv._decide.features.device_scan.window_counters`)."""
    windows = small_sample(csr)
    if windows is None:
        return 0.0
    m = csr.shape[0]
    shift, narrow = sector_shift_and_narrow(csr)
    matrix = getattr(csr, "device_matrix", None)
    if matrix is not None and device_scan.runs_kernels(matrix):
        counters = to_host(device_scan.window_counters(matrix, windows, shift, narrow))
        return sampled_features(counters.tolist())["x_sectors_per_nnz_warp"]
    positions, offsets = window_positions(csr.indptr, windows, m)
    indices = (csr if matrix is None else matrix).indices[positions]
    return safe_ratio(window_sectors(indices, offsets, shift), positions.size, 0.0)


REACH_QUANTILE = 0.9
"""The share of a sample's entries that lie within :func:`x_reach` columns of their row."""


def x_reach(csr) -> float:
    """How far from its row a row's columns reach: the :data:`REACH_QUANTILE` quantile of
    ``|j - i|`` over the entries of the windows :func:`x_locality` samples (all of them for a
    small matrix). The x a band of consecutive rows reads lies within about twice this many
    columns, so it tells whether that part of x stays in a core's cache while the band is
    computed (a matrix as given by a mesh generator or an assembly: tens to thousands of
    columns) or spreads over all of x (numbered at random: a large share of n). ``csr``: a
    canonical host matrix, or the :class:`autospmv.formats.base.RowStructure` of a matrix on
    the GPU, whose sampled column indices are then copied to the host (well under a
    millisecond either way)."""
    windows = small_sample(csr)
    if windows is None:
        return 0.0
    indptr = np.asarray(csr.indptr)
    positions, _ = window_positions(indptr, windows, csr.shape[0])
    matrix = getattr(csr, "device_matrix", None)
    if matrix is not None and not isinstance(matrix.indices, np.ndarray):
        indices = to_host(matrix.indices[matrix.xp.asarray(positions)])
    else:
        indices = (csr if matrix is None else matrix).indices[positions]
    distance = np.abs(indices.astype(np.int64) - window_rows(indptr, windows, csr.shape[0]))
    return float(np.quantile(distance, REACH_QUANTILE))


def window_rows(indptr: np.ndarray, windows: np.ndarray, m: int) -> np.ndarray:
    """The row of each entry of some windows, in :func:`window_positions`' order (window after
    window, row after row): each row of the windows repeated for its entries. O(rows and
    entries of those windows)."""
    rows = (windows[:, None] * WINDOW_ROWS + np.arange(WINDOW_ROWS)).ravel()
    rows = rows[rows < m]
    return np.repeat(rows, indptr[rows + 1] - indptr[rows])


def sector_shift_and_narrow(csr) -> tuple[int, int]:
    """The scan's log2(columns of x per 32-byte sector) and its narrow-band half-width (1 % of
    max(m, n))."""
    m, n = csr.shape
    return 2 if np.dtype(csr.dtype).itemsize == 8 else 3, max(1, int(0.01 * max(m, n)))


def sampled_windows(m: int, nnz: int, sample_rows: int | None) -> int:
    """How many windows of WINDOW_ROWS rows to scan in detail (all of them: exact)."""
    windows = -(-m // WINDOW_ROWS)
    if sample_rows is None:
        if nnz <= SAMPLE_THRESHOLD:
            return windows
        sample_rows = math.ceil(max(SAMPLE_TARGET_NNZ, SAMPLE_SHARE * nnz) * m / nnz)
    return min(windows, -(-sample_rows // WINDOW_ROWS))


def select_windows(m: int, count: int) -> np.ndarray:
    """Flags of the windows scanned in detail: all, or ``count`` of them
    (:func:`drawn_windows`)."""
    total = -(-m // WINDOW_ROWS)
    if count >= total:
        return np.ones(total, np.uint8)
    selected = np.zeros(total, np.uint8)
    if count <= 0:
        return selected
    selected[drawn_windows(total, count)] = 1
    return selected


def drawn_windows(total: int, count: int) -> np.ndarray:
    """The numbers (ascending) of ``count`` of ``total`` windows, one per stratum of consecutive
    windows, drawn by a splitmix64 hash of (SAMPLE_SEED, stratum); every window when
    ``count >= total``."""
    if count >= total:
        return np.arange(total)
    edges = np.arange(count + 1) * total // count
    z = np.uint64(SAMPLE_SEED) + np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return edges[:-1] + (z % np.diff(edges).astype(np.uint64)).astype(np.int64)


@njit(cache=True)
def window_positions(indptr, windows, m):
    """The entries of some windows alone: their positions in the index array, window after
    window (``windows``: ascending window numbers), and where each window's entries start
    among them (``windows.size + 1`` offsets). O(entries of those windows)."""
    offsets = np.empty(windows.size + 1, dtype=np.int64)
    offsets[0] = 0
    for k in range(windows.size):
        lo = windows[k] * WINDOW_ROWS
        offsets[k + 1] = offsets[k] + indptr[min(lo + WINDOW_ROWS, m)] - indptr[lo]
    positions = np.empty(offsets[-1], dtype=np.int64)
    for k in range(windows.size):
        start = indptr[windows[k] * WINDOW_ROWS]
        for j in range(offsets[k + 1] - offsets[k]):
            positions[offsets[k] + j] = start + j
    return positions, offsets


@njit(cache=True)
def window_sectors(indices, offsets, shift):
    """Σ over windows of the distinct 32-byte sectors of x (column >> ``shift``) that the
    window's entries read: the scan's warp-sector counter (stamped in
    :func:`_flush8`), counted here in a hash table of twice the largest window's entries,
    stamped with the window's number, so that a sample of a few windows needs no scratch
    array over the columns (nor sorting)."""
    windows = offsets.size - 1
    longest = 0
    for k in range(windows):
        longest = max(longest, offsets[k + 1] - offsets[k])
    size = 64
    while size < 2 * longest:
        size *= 2
    mask = size - 1
    keys = np.empty(size, dtype=np.int64)
    owner = np.zeros(size, dtype=np.int64)
    total = 0
    for k in range(windows):
        stamp = k + 1
        for p in range(offsets[k], offsets[k + 1]):
            sector = np.int64(indices[p]) >> shift
            slot = (sector * 2654435761) & mask
            while owner[slot] == stamp and keys[slot] != sector:
                slot = (slot + 1) & mask
            if owner[slot] != stamp:
                owner[slot] = stamp
                keys[slot] = sector
                total += 1
    return total
