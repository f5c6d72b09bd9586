"""The feature passes over a matrix on the GPU: the host scan's counts
(:mod:`autospmv._decide.features.scan`), computed there by the kernels of
:mod:`autospmv.kernels.cuda.feature_passes`.

What comes back to the host is a few totals, one imbalance ratio per warp of rows and the
row-length histogram; the nonzeros stay on the GPU. The kernels ship compiled for the GPUs the
models are for, so a first :func:`autospmv.prepare` there compiles nothing to decide (the host
scan is numba code, compiled on a first run). Every value equals the host scan's: the counters
are integers, and the warp ratios are divided as on the host and summed on the host in its
order (:func:`autospmv._decide.features.row_lengths.chunked_ratio_sum`).

A matrix whose arrays are NumPy arrays (the tests' stand-in for a matrix on the GPU, see
:class:`autospmv.formats.base.DeviceCSR`) runs the kernels only under numba-cuda's simulator
(:func:`runs_kernels`); elsewhere its caller scans it on the host.
"""

from __future__ import annotations

import numpy as np

from ..._support.devices import cuda_simulator
from ...formats.base import to_host
from .row_lengths import chunked_ratio_sum, lengths_counted
from .scan import WINDOW_ROWS, Scan, sampled_features

FLAG_THREADS = 1 << 16
"""Threads counting the diagonal flags (each adds a strided share of them)."""


def runs_kernels(csr) -> bool:
    """Whether the kernels run on the arrays of ``csr`` (a :class:`~autospmv.formats.base.DeviceCSR`):
    arrays on the GPU, or NumPy arrays under numba-cuda's simulator."""
    return not isinstance(csr.indices, np.ndarray) or cuda_simulator()


def scan(csr, selected: np.ndarray | None, shift: int, narrow: int, index_passes: bool = True
         ) -> Scan:
    """The :class:`~autospmv._decide.features.scan.Scan` of ``csr``, counted on the GPU: what
    the host's :func:`~autospmv._decide.features.scan.scan_rows` returns for the same matrix.
    The windows flagged in ``selected`` (None: no detail) are counted in detail, for x sectors
    of ``1 << shift`` columns and a narrow band of half-width ``narrow``; the bandwidth and the
    number of occupied diagonals are None when not ``index_passes``; the cost quantities' sums
    over groups of rows (:attr:`autospmv._decide.features.quantities.CostInputs.group_sums`)
    come with the rest."""
    from ...kernels.cuda import feature_passes as kernels

    m, n = csr.shape
    nnz = csr.nnz
    groups = [(WINDOW_ROWS >> k, 1 << k) for k in range(kernels.GROUP_SIZES)]
    if m == 0:
        none = np.zeros(0, np.int64)
        return Scan(sampled_features([0] * kernels.COUNTERS) if selected is not None else None,
                    *((0, 0) if index_passes else (None, None)), 0.0, none, none,
                    dict.fromkeys(groups, 0))
    xp, launch = csr.xp, launcher(csr)
    warps = -(-m // WINDOW_ROWS)
    stats = xp.zeros(kernels.STATS, np.int64)
    ratios = xp.empty(warps, np.float64)
    launch(kernels.row_pass_kernel, warps, [csr.indptr, np.int64(m), ratios, stats])
    if index_passes and nnz:
        flags = xp.zeros(m + n - 1, np.uint8)
        launch(kernels.band_kernel, -(-nnz // kernels.CHUNK),
               [csr.indptr, csr.indices, np.int64(m), np.int64(nnz), flags, stats])
        launch(kernels.count_flags_kernel, min(FLAG_THREADS, flags.size), [flags, stats])
    counters = None
    if selected is not None:
        counters = window_counters(csr, np.flatnonzero(selected), shift, narrow, selected)
    totals = to_host(stats)  # waits for the kernels
    longest = int(totals[kernels.LONGEST])
    if lengths_counted(longest, m):
        histogram = xp.zeros(longest + 1, np.int64)
        launch(kernels.length_count_kernel, warps, [csr.indptr, np.int64(m), histogram])
        histogram = to_host(histogram)
        values = np.flatnonzero(histogram)
        counts = histogram[values]
    else:  # a few rows far longer than m: the lengths sorted, as on the host
        values, counts = np.unique(np.diff(csr.host_indptr).astype(np.int64), return_counts=True)
    band = int(totals[kernels.BAND]) if index_passes else None
    diagonals = int(totals[kernels.DIAGONALS]) if index_passes else None
    group_sums = {group: int(totals[kernels.GROUP_SUMS + k]) for k, group in enumerate(groups)}
    sampled = None if counters is None else sampled_features(to_host(counters).tolist())
    return Scan(sampled, band, diagonals, chunked_ratio_sum(to_host(ratios)), values, counts,
                group_sums)


def window_counters(csr, windows: np.ndarray, shift: int, narrow: int,
                    selected: np.ndarray | None = None):
    """The host scan's detail counters (in the order of its sums) of the ``windows`` (numbers,
    ascending) of a matrix on the GPU, as an int64 array on the device (see :func:`scan` for
    ``shift`` and ``narrow``); ``selected`` flags every drawn window (default: those of
    ``windows``), which decides the 3-row block rows that cross from one window into the
    next."""
    from ...kernels.cuda import feature_passes as kernels

    m = csr.shape[0]
    xp = csr.xp
    if selected is None:
        selected = np.zeros(-(-m // WINDOW_ROWS), np.uint8)
        selected[windows] = 1
    counters = xp.zeros(kernels.COUNTERS, np.int64)
    first = windows.astype(np.int64) * WINDOW_ROWS
    entries = csr.host_indptr[np.minimum(first + WINDOW_ROWS, m)] - csr.host_indptr[first]
    offsets = np.concatenate(([0], np.cumsum(entries, dtype=np.int64)))
    if offsets[-1]:
        launcher(csr)(kernels.sample_detail_kernel, -(-int(offsets[-1]) // kernels.CHUNK), [
            csr.indptr, csr.indices, np.int64(m), np.int64(csr.shape[1]), np.int64(shift),
            np.int64(narrow), xp.asarray(first // WINDOW_ROWS), xp.asarray(offsets),
            xp.asarray(selected), counters])
    return counters


def launcher(csr):
    """``launch(kernel, threads, args)``: the kernel on ``threads`` threads (blocks of
    :data:`~autospmv.kernels.cuda.feature_passes.BLOCK`), queued on CuPy's current stream, or
    run by numba-cuda's simulator."""
    from ...kernels.cuda import feature_passes as kernels
    from ...kernels.cuda.launch import launch_once

    def launch(kernel, threads: int, args: list) -> None:
        launch_once(kernel, threads, kernels.BLOCK, args, csr.xp)

    return launch
