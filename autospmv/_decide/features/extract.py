"""Structural features of a sparse matrix: the fingerprint the kernel selector reads.

:func:`features` returns a dict whose keys are exactly :data:`FEATURE_NAMES`, in that order
(followed by the cost quantities of registered kernels, :func:`feature_names`),
and whose values are finite Python floats for every input, including empty matrices. It runs
inside every ``prepare()``, so on large matrices it costs at most a few SciPy ``A @ x``: one
numba pass over all rows (row lengths, diagonals) and one over a sample of them (blocks, x
locality), parallel over numba's threads on large matrices
(:func:`autospmv._support.threads.threaded_passes`).

This module defines the features and computes them in one pass of calls
(:func:`canonical_features_and_lengths`): the rows to sample
(:mod:`autospmv._decide.features.sampling`), the passes over the row pointer and the row-length
statistics (:mod:`autospmv._decide.features.row_lengths`), the scan over the rows (block masks,
sector stamps, the split between workers: :mod:`autospmv._decide.features.scan`), or all passes on
the GPU for a matrix there (:mod:`autospmv._decide.features.device_scan`), then the cost quantities
(:mod:`autospmv._decide.features.quantities`).

Notation: m rows, n columns, ``len_i`` the number of stored entries of row i (explicit zeros
count: the structure is what a kernel sees), "warp" a group of 32 consecutive rows (the last
one may be shorter), "sector" 32 bytes of x, i.e. ``32 / itemsize`` consecutive columns
(4 for float64, 8 for float32).

======================== ========================================================== ==========
name                     meaning                                                    empty case
======================== ========================================================== ==========
rows, cols, nnz          m, n, number of stored entries                             0
density                  nnz / (m n)                                                0
log10_rows, _cols, _nnz  log10(1 + x) of the sizes                                  0
row_mean                 mean of len_i (entries per row)                            0
row_std                  population standard deviation of len_i                     0
row_cv                   row_std / row_mean (coefficient of variation)              0
row_min, row_max         smallest / largest len_i                                   0
row_median, row_p90,     50th, 90th, 99th percentile of len_i (linear               0
row_p99                  interpolation, as ``numpy.percentile``)
row_max_over_mean        row_max / row_mean                                         1
row_gini                 Gini coefficient of len_i (0 = equal rows, → 1 = one row)  0
row_skew                 Fisher-Pearson skewness of len_i (biased, as SciPy)        0
empty_row_share          share of rows with len_i = 0                               0
top1pct_nnz_share        share of nnz in the ceil(1 % of m) longest rows (≥ 1 row)  0
ell_fill                 m·row_max / nnz: ELL storage per nonzero (1 = no padding)  1
hyb_width                HYB ELL width K of the cost model (entries, see below)     0
hyb_coo_share            share of nnz left to the COO part of HYB at that width     0
warp_imbalance           mean over warps of max(len_i) / mean(len_i); a warp of      1
                         empty rows counts as 1 (CSR scalar/vector divergence)
warp_imbalance_sorted    the same after sorting rows by length, descending (JDS)    1
block{b}_share *         share of nnz inside fully populated aligned b×b blocks,    0
                         b in 2, 3, 4, 8; a block cut by the matrix border is full
                         when all of its cells inside the matrix are stored
block{b}_fill *          BSR fill: (aligned b×b blocks touched)·b² / nnz            1
bandwidth                max |i − j| over stored entries (entries)                  0
bandwidth_rel            bandwidth / max(m, n)                                      0
narrow_band_share *      share of nnz with |i − j| ≤ max(1, 0.01·max(m, n))         0
diagonals                number of distinct occupied diagonals j − i                0
diagonals_per_row        diagonals / m (DIA storage per row; ≤ (m + n − 1) / m)     0
x_sectors_per_nnz_row *  Σ_i (distinct x sectors read by row i) / nnz: one row at a 0
                         time (CSR scalar); 1 = no reuse, 1/(sector width) = best
x_sectors_per_nnz_warp * Σ_warps (distinct x sectors read by the warp) / nnz:        0
                         coalescing when 32 rows run together
<kernel>_bytes, _work,   each kernel's cost quantities (:mod:`autospmv._decide.cost`):      0
_span, _atomics,         memory traffic, thread steps, longest thread loop, atomic
_launches                adds into one entry of y, device steps, with the device's
                         chooser parameters
======================== ========================================================== ==========

HYB width: the cost model ``autospmv.formats.hyb.width_cost`` (the K in 0..row_max
minimising ``m·K + 3·overflow(K)``, ``overflow(K) = Σ_i max(0, len_i − K)``, ties to the
smallest K), evaluated on the row-length histogram this module builds anyway: where the
typical row ends and the tail begins. (HYB's chooser uses CUSP's width, which is 0 below 4096
rows and so says little about small matrices.)

Sampling: the features marked * are ratios over nonzeros. When ``nnz > SAMPLE_THRESHOLD``
(and ``sample_rows`` is not given) they are estimated from a deterministic sample of rows
holding about ``max(SAMPLE_TARGET_NNZ, SAMPLE_SHARE·nnz)`` nonzeros: the rows are cut into
windows of ``WINDOW_ROWS`` = 32 consecutive rows (whole warps and 8-row block rows), the
windows into as many equal strata of consecutive windows as windows are wanted, and one
window per stratum is drawn by a fixed hash of (``SAMPLE_SEED``, stratum). Each feature is
the ratio of its sums over the drawn windows; the 3×3 block features count the whole 3-row
block rows inside each run of consecutive drawn windows (in an exact scan: all of them).
The error shrinks with the number of windows drawn. With a few hundred or more (as on
matrices of millions of short rows) the estimates stayed within ``SAMPLE_TOLERANCE``
(absolute for shares and sector ratios, relative for fills) of the exact values on the
structured, power-law and stencil matrices of the tests and benchmarks; with a few dozen
(a few 100k nonzeros) errors up to 0.05 absolute and 11 % relative were seen on real
matrices, and structure confined to a few rows can be missed. All other features are
always exact.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..._support.devices import target_device
from ..._support.threads import threaded_passes
from ..._support.validation import canonicalize
from ...formats.base import DeviceCSR
from . import device_scan
from .quantities import QUANTITY_NAMES, quantities, quantity_names
from .row_lengths import LENGTH_NAMES, WARP, length_features
from .sampling import sampled_windows, sector_shift_and_narrow, select_windows
from .scan import BLOCK_SIZES, Scan, safe_ratio, scan_rows

FEATURE_NAMES = (
    "rows", "cols", "nnz", "density", "log10_rows", "log10_cols", "log10_nnz",
    "row_mean", "row_std", "row_cv", "row_min", "row_max", "row_median", "row_p90", "row_p99",
    "row_max_over_mean", "row_gini", "row_skew", "empty_row_share", "top1pct_nnz_share",
    "ell_fill", "hyb_width", "hyb_coo_share",
    "warp_imbalance", "warp_imbalance_sorted",
    *(f"block{b}_{kind}" for b in BLOCK_SIZES for kind in ("share", "fill")),
    "bandwidth", "bandwidth_rel", "narrow_band_share", "diagonals", "diagonals_per_row",
    "x_sectors_per_nnz_row", "x_sectors_per_nnz_warp",
    *QUANTITY_NAMES,
)  # fmt: skip
"""Feature names in the fixed order of the dicts :func:`features` returns (with the built-in
kernels; :func:`feature_names` adds the cost quantities of registered kernels)."""


def feature_names() -> tuple[str, ...]:
    """The names :func:`features` returns now: :data:`FEATURE_NAMES`, then the cost quantities
    of kernels registered besides the built-in ones (:func:`autospmv.register`)."""
    return FEATURE_NAMES + tuple(name for name in quantity_names() if name not in QUANTITY_NAMES)

SAMPLED_FEATURES = (
    *(f"block{b}_{kind}" for b in BLOCK_SIZES for kind in ("share", "fill")),
    "narrow_band_share", "x_sectors_per_nnz_row", "x_sectors_per_nnz_warp",
)  # fmt: skip
"""The features estimated from a sample of rows on large matrices (see the module doc)."""

def features(A, sample_rows: int | None = None, device: str | None = None) -> dict[str, float]:
    """The structural features of A that the decision reads (see the module doc).

    Parameters
    ----------
    A : sparse matrix or array
        Anything :func:`autospmv.prepare` accepts on the host; a canonical float32 or float64
        ``scipy.sparse.csr_matrix`` is used as it is.
    sample_rows : int, optional
        None samples the features in :data:`SAMPLED_FEATURES` only when
        ``nnz > SAMPLE_THRESHOLD``; an integer samples about that many rows (whole windows of
        ``WINDOW_ROWS``); a value at least the number of rows computes everything exactly.
    device : {"cuda", "cpu"}, optional
        The device whose parameter choosers the cost quantities count with; None means the
        device :func:`autospmv.prepare` would use.

    Returns
    -------
    dict of str to float
        One value per name of :func:`feature_names`, in that order.

    Raises
    ------
    TypeError, ValueError
        For a matrix or option that :func:`autospmv.prepare` refuses, with its message.

    Examples
    --------
    >>> import scipy.sparse as sp, autospmv
    >>> f = autospmv.features(sp.eye(1000, format="csr"), device="cpu")
    >>> f["nnz"], f["row_max"]
    (1000.0, 1.0)
    """
    return features_and_lengths(A, sample_rows, device)[0]


def features_and_lengths(A, sample_rows: int | None = None, device: str | None = None
                         ) -> tuple[dict[str, float], tuple[np.ndarray, np.ndarray]]:
    """:func:`features` and the row-length histogram the scan built for them: the distinct row
    lengths (ascending) and how many rows have each, over every row whatever
    ``sample_rows``. An automatic decision hands the histogram to the chosen kernel's
    parameter chooser (:func:`autospmv._registry.choose_params`), so that the row lengths are
    not computed a second time."""
    return canonical_features_and_lengths(canonicalize(A), sample_rows, device)


def canonical_features_and_lengths(csr: sp.csr_matrix, sample_rows: int | None = None,
                                   device: str | None = None, uploaded=None, needed=None
                                   ) -> tuple[dict[str, float], tuple[np.ndarray, np.ndarray]]:
    """:func:`features_and_lengths` of a matrix that
    :func:`autospmv._support.validation.canonicalize` returned, without validating it again (the
    checks read every index: :func:`prepare` has just made them), or of a matrix on the GPU
    (:class:`autospmv.formats.base.DeviceCSR`), counted there, equal to those of the same matrix on
    the host: its nonzeros stay on the GPU. ``uploaded``: the same host matrix already on the GPU,
    where the passes run instead (the same features, see :func:`_scan`; :func:`autospmv.prepare`
    hands over the matrix it uploads). ``needed``: the names a caller reads (a model's
    :meth:`~autospmv._decide.model.tree.TreeModel.features_read`), or None for all; see
    :func:`passes_needed` for what is then left out."""
    if sample_rows is not None and sample_rows < 1:
        raise ValueError(
            f"sample_rows must be a positive number of rows or None; got {sample_rows}"
        )
    if isinstance(csr, DeviceCSR):  # its passes run there (the tests' NumPy stand-in: here)
        on_gpu = device_scan.runs_kernels(csr)
        csr, uploaded = (csr.structure(), csr) if on_gpu else (csr.to_host(), None)
    sampled, index_passes = passes_needed(needed)
    parallel = threaded_passes(csr.nnz)
    scanned = _scan(csr, sample_rows, uploaded, sampled=sampled, index_passes=index_passes,
                    parallel=parallel)
    return _assemble(csr, scanned, device, parallel, uploaded)


INDEX_PASS_FEATURES = ("bandwidth", "bandwidth_rel", "diagonals", "diagonals_per_row")
"""The features a matrix on the GPU needs a pass over every column index for (reduced there,
:func:`autospmv._decide.features.device_scan.scan`); on the host the scan's pass over every row
computes them anyway."""


def passes_needed(needed) -> tuple[bool, bool]:
    """Which of the costly passes the features ``needed`` (None: all) call for: the scan of the
    sampled windows (:data:`SAMPLED_FEATURES`), and the GPU's passes over every column index
    (:data:`INDEX_PASS_FEATURES`). A pass that is not called for is not run, and its features
    are left out of the dict. A decision by a model whose tree compares only row-length and
    size features, with a cost model over the row lengths, skips both: on a 2·10⁷-nonzero
    matrix on the GPU that is most of the decision's time."""
    if needed is None:
        return True, True
    needed = set(needed)
    return bool(needed & set(SAMPLED_FEATURES)), bool(needed & set(INDEX_PASS_FEATURES))


def _assemble(csr, scanned: Scan, device: str, parallel: bool, uploaded=None
              ) -> tuple[dict[str, float], tuple[np.ndarray, np.ndarray]]:
    """Every feature of ``csr`` (anything with ``shape``, ``nnz``, ``dtype`` and a host
    ``indptr``) from its :class:`~autospmv._decide.features.scan.Scan`, with the row-length
    histogram. ``parallel``:
    the passes over the row pointer on numba's threads; ``uploaded``: the matrix on the GPU,
    whose row structure the cost quantities' choosers read (their column indices there)."""
    device = target_device(device)
    if uploaded is not None:
        csr = uploaded.structure()
    m, n = csr.shape
    nnz = int(csr.nnz)
    band, diagonals, values, counts = (scanned.band, scanned.diagonals, scanned.values,
                                       scanned.counts)
    out = dict(zip(LENGTH_NAMES, length_features(values, counts, m, nnz), strict=True))
    out.update(
        rows=m, cols=n, nnz=nnz, density=safe_ratio(nnz, m * n, 0.0),
        log10_rows=math.log10(1 + m), log10_cols=math.log10(1 + n), log10_nnz=math.log10(1 + nnz),
        warp_imbalance=safe_ratio(scanned.warp_sum, -(-m // WARP), 1.0),
    )  # fmt: skip
    if band is not None:
        out.update(bandwidth=band, bandwidth_rel=safe_ratio(band, max(m, n), 0.0),
                   diagonals=diagonals, diagonals_per_row=safe_ratio(diagonals, m, 0.0))
    if scanned.sampled is not None:
        out.update(scanned.sampled)
    out.update(quantities(csr, device, values, counts, parallel, scanned.group_sums))
    return {name: float(out[name]) for name in feature_names() if name in out}, (values, counts)


def _scan(csr: sp.csr_matrix, sample_rows: int | None, uploaded=None, sampled: bool = True,
          index_passes: bool = True, *, parallel: bool) -> Scan:
    """The :class:`~autospmv._decide.features.scan.Scan` of a canonical matrix: on the host
    (:func:`~autospmv._decide.features.scan.scan_rows`), or, with ``uploaded``, the same matrix
    on the GPU (:class:`autospmv.formats.base.DeviceCSR`), there
    (:func:`autospmv._decide.features.device_scan.scan`, the same values).

    ``sampled`` False: no window is scanned in detail and the sampled features are None.
    ``index_passes`` False leaves out the GPU's pass over every column index, and the bandwidth
    and the diagonals are None (see :func:`passes_needed`); on the host the scan's pass over
    every row counts both anyway. ``parallel``: the host passes on numba's threads
    (:func:`autospmv._support.threads.threaded_passes`)."""
    m = csr.shape[0]
    windows = sampled_windows(m, csr.nnz, sample_rows) if sampled else 0
    selected = select_windows(m, windows)
    shift, narrow = sector_shift_and_narrow(csr)
    if uploaded is not None and device_scan.runs_kernels(uploaded):
        return device_scan.scan(uploaded, selected if sampled else None, shift, narrow,
                                index_passes)
    return scan_rows(csr, selected, shift, narrow, sampled, parallel)
