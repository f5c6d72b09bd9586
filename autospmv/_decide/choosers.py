"""Parameter choosers: the tuning parameters of each kernel, as pure functions of a matrix's
structure and the device kind.

A chooser reads a canonical CSR matrix (or anything with its ``shape``, ``nnz``, ``dtype`` and
host ``indptr``) and returns the kernel's parameters as a dict; the ``*_of_lengths`` variants
compute the same from the row-length histogram that the feature scan builds anyway. The
registry (:mod:`autospmv._registry`) names each kernel's chooser; the cost quantities
(:mod:`autospmv._decide.cost`) count each kernel's work with the parameters chosen here. This module
also holds CSR5's tile heights and the parameter variants the labeller times.

* CSR-vector's group size (:func:`choose_threads_per_row`);
* HYB's ELL width, one of the format's width strategies (:mod:`autospmv.formats.hyb`, CUSP's
  rule by default);
* CSR5's tile height σ (:func:`choose_sigma`).

The choosers stand below the features: they read the row pointer through the compiled passes
of :mod:`autospmv._decide.features.row_lengths` and x's locality through
:func:`autospmv._decide.features.sampling.x_locality`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from .._support.devices import CUDA_WARPS_IN_FLIGHT, check_device_name
from .._support.threads import threaded_passes
from ..formats.base import row_lengths
from ..formats.csr5 import OMEGA
from ..formats.hyb import (
    default_hyb_width_of_histogram, width_cost, width_cusp, width_quantile,
)
from .features.row_lengths import row_length_counts, row_length_moments
from .features.sampling import x_locality


# CSR5's tile height

LONG_ROWS = 1024
"""Mean row length from which most tiles lie inside one row (:func:`choose_sigma`)."""


SHORT_ROWS = 8
"""Mean row length below which σ = 12 beats σ = 16 (:func:`choose_sigma`)."""

VERY_SHORT_ROWS = 2
"""Mean row length below which the CUDA kernel runs faster with half the tile height."""

SCATTERED_X = 0.9
"""x locality (:func:`autospmv._decide.features.sampling.x_locality`, sectors of x per entry) from which the
GPU takes σ = 8 on a matrix with tiles enough: each entry gathers its own piece of x, and more,
shorter tiles keep more of those loads in flight (:func:`choose_sigma`)."""

LOCAL_X = 0.5
"""x locality below which the GPU takes σ = :data:`WIDE_SIGMA` on rows of :data:`SHORT_ROWS`
or more entries, with tiles enough: x comes from few sectors, the time is the stream of values
and indices, and longer tiles spend less on descriptors and carries (:func:`choose_sigma`)."""

WIDE_SIGMA = 24
"""The GPU's tile height for local x on rows that are not short (:data:`LOCAL_X`)."""

CUDA_LONG_ROW_SIGMA = {4: 16, 8: 8}
"""The GPU's tile height on rows of :data:`LONG_ROWS` or more entries on average, by the bytes
per value (see :func:`choose_sigma`)."""


CUDA_STEP = 8
"""The CUDA kernel walks a lane's entries in steps of this many; its fast path needs σ to be a
multiple of it (see ``autospmv.kernels.cuda.csr5``)."""


def choose_sigma(csr: sp.csr_matrix, device: str, x_locality: Callable[[], float]) -> int:
    """Tile height σ for ``device`` ("cpu" or "cuda"). ``x_locality()`` returns the matrix's
    locality of x (:func:`autospmv._decide.features.sampling.x_locality`, a sample of the column indices); it is
    called only where σ depends on it.

    CPU: twice the structural σ of :func:`structural_sigma`, since a CPU thread walks a tile's
    lanes in turn and longer tiles amortise the per-tile descriptors and carries.

    CUDA, in this order:

    1. the structural σ rounded up to a multiple of :data:`CUDA_STEP` (12 becomes 16: the
       kernel's fast path takes whole steps of eight entries); on rows of :data:`LONG_ROWS` or
       more the structural 8 in float64 but 16 in float32 (:data:`CUDA_LONG_ROW_SIGMA`: a
       lane's tile then carries 128 bytes of values and indices, against float64's 96);
    2. halved when the matrix has fewer tiles than :data:`~autospmv._support.devices.CUDA_WARPS_IN_FLIGHT`
       (each tile is one warp's work, so the lanes' σ-long loops then set the time, not the
       bandwidth) or rows shorter than :data:`VERY_SHORT_ROWS` on average (a lane then stores
       about σ row results, one per step);
    3. otherwise, below :data:`LONG_ROWS`, by the locality of x: 8 from :data:`SCATTERED_X`
       sectors of x per entry, :data:`WIDE_SIGMA` below :data:`LOCAL_X` on rows of
       :data:`SHORT_ROWS` or more when there are as many tiles of that height as warps in
       flight.

    The rules were fitted on the labeller's timings of every σ of :data:`CSR5_SIGMAS`
    (``models/labels``, both GPUs, both dtypes); the measurements are listed in
    ``benchmarks/results/README.md``.
    """
    sigma = structural_sigma(csr)
    if device == "cpu":
        return 2 * sigma
    mean = _mean_row_length(csr)
    if mean >= LONG_ROWS:
        sigma = CUDA_LONG_ROW_SIGMA[np.dtype(csr.dtype).itemsize]
    sigma = -(-sigma // CUDA_STEP) * CUDA_STEP
    if csr.nnz < OMEGA * sigma * CUDA_WARPS_IN_FLIGHT or mean < VERY_SHORT_ROWS:
        return sigma // 2
    if mean >= LONG_ROWS:
        return sigma
    locality = x_locality()
    if locality >= SCATTERED_X:
        return 8
    if (locality < LOCAL_X and mean >= SHORT_ROWS
            and csr.nnz >= OMEGA * WIDE_SIGMA * CUDA_WARPS_IN_FLIGHT):
        return WIDE_SIGMA
    return sigma


def structural_sigma(csr: sp.csr_matrix) -> int:
    """Tile height σ from the mean row length μ: 16; 12 when μ < :data:`SHORT_ROWS`; 8 when
    μ ≥ :data:`LONG_ROWS`.

    σ trades the per-tile work (8 bytes of descriptors per lane, the cross-lane scan, up to two
    atomics), paid once per σ multiply-adds per lane, against the length of the lanes' loops.
    With the GPU kernel loading four entries per step, long loops cost little, so 16 wins on most
    large matrices. Very short rows make every step branch at row starts and store rows, and
    there 12 is faster. When rows are much longer than a tile, tiles are summed by the kernel's
    one-row path and smaller tiles give more warps in flight. Multiples of 4, since a partial
    last step wastes loads (the halved σ = 6 of :func:`choose_sigma` serves where the lanes'
    loop latency, not their loads, sets the time).
    """
    mean = _mean_row_length(csr)
    if mean >= LONG_ROWS:
        return 8
    return 12 if mean < SHORT_ROWS else 16


def _mean_row_length(csr) -> float:
    m = csr.shape[0]
    return csr.nnz / m if m else 0.0


# The choosers the registry names


def no_params(csr: sp.csr_matrix, device: str) -> dict:
    return {}


def _power_of_two_at_most(x: float, low: int, high: int) -> int:
    """The largest power of two ≤ x, clipped to [low, high]."""
    value = low
    while value < high and 2 * value <= x:
        value *= 2
    return value


def choose_threads_per_row(csr: sp.csr_matrix, device: str) -> dict:
    """CSR-vector group size g (threads per row, a power of two in [2, 32]).

    CPU: 2. There a group's lanes are accumulators of one thread, and the reduction over more
    of them costs more than it saves.

    CUDA: the g ≥ g₀ that minimises ``rows·g / (8·W) + ⌈max row / g⌉`` (W:
    :data:`CUDA_WARPS_IN_FLIGHT`). g₀, the largest power of two ≤ L/4 with L = Σ len² / Σ len
    (the length of the row an average nonzero lies in), gives each lane about four entries of
    such a row, which amortises the group's shuffle reduction: the fastest g on regular matrices.
    Larger groups cost warps, rows·g/32 of about four steps each, shared among W warps in flight
    (the first term), and shorten the longest row's loop (the second term), which bounds the
    time when the matrix is small or has a few long rows.
    """
    if check_device_name(device) == "cpu":
        return {"threads_per_row": 2}
    m = csr.shape[0]
    squares, longest = (row_length_moments(csr.indptr, m, threaded_passes(csr.nnz)) if m
                        else (0.0, 0))
    return {"threads_per_row": _threads_per_row(m, csr.nnz, squares, int(longest))}


def choose_threads_per_row_of_lengths(values: np.ndarray, counts: np.ndarray,
                                      device: str) -> dict:
    """:func:`choose_threads_per_row` from the row-length histogram (the same group size)."""
    if check_device_name(device) == "cpu":
        return {"threads_per_row": 2}
    values = np.asarray(values, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    m, nnz = int(counts.sum()), int(np.dot(values, counts))
    squares = float(np.dot(values * values, counts))
    return {"threads_per_row": _threads_per_row(m, nnz, squares, int(values.max(initial=0)))}


def _threads_per_row(m: int, nnz: int, squares: float, longest: int) -> int:
    """The group size of :func:`choose_threads_per_row` from the row count, the nonzeros, Σ len²
    and the longest row."""
    if m == 0 or nnz == 0:
        return 2
    first = _power_of_two_at_most(squares / nnz / 4, 2, 32)
    candidates = [g for g in (2, 4, 8, 16, 32) if g >= first]
    cost = [m * g / (8 * CUDA_WARPS_IN_FLIGHT) + -(-longest // g) for g in candidates]
    return candidates[int(np.argmin(cost))]


def choose_hyb_width(csr: sp.csr_matrix, device: str) -> dict:
    """HYB's ELL width (CUSP's rule, :data:`autospmv.formats.hyb.default_hyb_width`), from the
    row-length histogram counted in two compiled passes over the row pointer."""
    m = csr.shape[0]
    if m == 0:
        return {"width": 0}
    _, longest = row_length_moments(csr.indptr, m, threaded_passes(csr.nnz))
    counts = row_length_counts(csr.indptr, m, int(longest))
    values = np.flatnonzero(counts)
    return choose_hyb_width_of_lengths(values, counts[values], device)


def choose_hyb_width_of_lengths(values: np.ndarray, counts: np.ndarray, device: str) -> dict:
    """:func:`choose_hyb_width` from the row-length histogram (the same width: CUSP's rule
    depends on the row lengths only)."""
    return {"width": int(default_hyb_width_of_histogram(values, counts))}


def choose_csr5_sigma(csr: sp.csr_matrix, device: str) -> dict:
    """CSR5's tile height (:func:`choose_sigma`), which on the GPU reads
    the locality of x from a sample of the column indices (:func:`autospmv._decide.features.sampling.x_locality`)
    when the matrix is large enough for it to matter."""
    sigma = choose_sigma(csr, check_device_name(device), lambda: x_locality(csr))
    return {"sigma": int(sigma)}


THREADS_PER_ROW_VARIANTS = (2, 4, 8, 16, 32)
"""The CSR-vector group sizes the labeller times."""
HYB_STRATEGIES = ("width_quantile", "width_cusp", "width_cost")
"""The HYB width strategies the labeller times."""
_WIDTH_STRATEGIES = {"width_quantile": width_quantile, "width_cusp": width_cusp,
                     "width_cost": width_cost}
CSR5_SIGMAS = (4, 6, 8, 12, 16, 24, 32)
"""The CSR5 tile heights the labeller times."""


def threads_per_row_variants(csr: sp.csr_matrix) -> list:
    return [(f"threads_per_row={t}", lambda t=t: {"threads_per_row": t})
            for t in THREADS_PER_ROW_VARIANTS]


def hyb_width_variants(csr: sp.csr_matrix) -> list:
    lengths = row_lengths(csr)
    return [(strategy, lambda strategy=strategy: {"width": int(_WIDTH_STRATEGIES[strategy](lengths))})
            for strategy in HYB_STRATEGIES]


def csr5_sigma_variants(csr: sp.csr_matrix) -> list:
    return [(f"sigma={sigma}", lambda sigma=sigma: {"sigma": sigma}) for sigma in CSR5_SIGMAS]
