"""Cost quantities: what each kernel's time depends on, counted for one matrix.

For every kernel, run with the parameters its chooser picks for the device
(:mod:`autospmv._registry`), five numbers describe the work its GPU mapping does on the matrix.
They are structural counts, which depend on the device only through those parameters; a
trained model turns them into a time estimate per kernel with a linear cost model fitted on its
device's labels (``training/fitting.py``, :class:`autospmv._decide.model.cost_model.CostModel`),
and its tree reads the estimates. They are features like the others
(:mod:`autospmv._decide.features.extract`), named ``<kernel>_<quantity>``:

========= =======================================================================================
bytes     memory traffic: the format's arrays once, x once per column and y once per row
          (values of the matrix's itemsize, indices of 4 bytes; a perfect cache for x)
work      thread steps: Σ over warps of 32 × the warp's longest loop, the issue slots the
          kernel occupies (a warp runs as long as its longest thread)
span      the longest loop of one thread (steps): the chain of dependent loads that bounds the
          kernel's time when the GPU is not full
atomics   the most atomic additions into one entry of y (serialised by the memory system)
launches  the device steps of one product (kernel launches and memsets): each costs a launch
          and a ramp-up and drain of the GPU, several microseconds back to back, which near 10⁶
          nonzeros is as much as the memory traffic
========= =======================================================================================

Per kernel (m rows, n columns, ``len_i`` the row lengths, K the longest, v the value size;
g is CSR-vector's group size, w HYB's ELL width and σ CSR5's tile height, all from the
device's choosers; o = Σ max(0, len_i − w) the entries HYB leaves to COO; tiles = ⌈nnz/(32σ)⌉;
every kernel's bytes also count v·(m + n) for x and y; kernels not listed with atomics have 0;
launches are 1 where not listed):

============ ==============================================================================
coo          bytes nnz·(v+8); work nnz; span 1; atomics ⌈K/32⌉; launches 2 (zero y, add)
csr_scalar   bytes nnz·(v+4) + 4(m+1); work Σ over warps of 32 × the warp's longest row;
             span K
csr_vector   bytes as csr_scalar; a warp holds 32/g rows and runs ⌈len/g⌉ steps for its
             longest plus log₂ g reduction steps: work 32 × the sum of those, span ⌈K/g⌉ + log₂ g
ell          bytes m·K·(v+4); work 32·⌈m/32⌉·K; span K
hyb          bytes m·w·(v+4) + o·(v+8); work 32·⌈m/32⌉·w + o; span w, plus 1 with a COO part;
             atomics ⌈(K − w)/32⌉; launches 1 (the ELL part, or zeroing y when w = 0) plus 1
             with a COO part
jds          bytes nnz·(v+4) + 4(m + K + 1); work as csr_scalar once rows are sorted by
             length; span K
csr5         bytes nnz·(v+4) + tiles·(32·12 + 4); work 32·σ·tiles; span σ;
             atomics ⌈K/(32σ)⌉ + 1; launches 2 (clearing y, the tiles)
============ ==============================================================================

A matrix with no entries has zeros everywhere. Each kernel's registry entry names its function
here (``KernelSpec.cost``); the feature extraction calls them all with one :class:`CostInputs`
(:func:`autospmv._decide.features.quantities.quantities`), through the registry.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from .. import _registry as registry
from .._support.devices import WARP
from .._support.jit import specialisations
from ..formats.csr5 import OMEGA
from ..formats.hyb import default_hyb_width_of_histogram
from . import choosers
from .features.quantities import INDEX_BYTES, CostInputs

CSR5_DESCRIPTOR_BYTES = 8
"""Per lane and tile: its ``bit_flag`` and ``y_offset`` words."""

def hyb_launches(overflow: int) -> int:
    """HYB's device steps (:mod:`autospmv.kernels.cuda.hyb`): the ELL part (or zeroing y when
    its width is 0), then the COO part when it has entries (``overflow`` > 0). The one built-in
    kernel whose count depends on the matrix."""
    return 2 if overflow > 0 else 1


FIXED_LAUNCHES = {"coo": 2, "csr_scalar": 1, "csr_vector": 1, "ell": 1, "jds": 1, "csr5": 2}
"""Device steps of the built-in kernels whose count does not depend on the matrix."""


def launches_of_features(features) -> dict[str, float]:
    """The built-in kernels' ``<kernel>_launches`` quantities from a matrix's other features
    (its size, and HYB's atomics: positive exactly when a row is longer than HYB's width, i.e.
    when it has a COO part), as :func:`quantities` counts them: for label records taken before
    launches were counted."""
    if features["rows"] == 0 or features["nnz"] == 0:
        return {f"{kernel}_launches": 0.0 for kernel in registry.KERNELS}
    counts = dict(FIXED_LAUNCHES, hyb=hyb_launches(features["hyb_atomics"] > 0))
    return {f"{kernel}_launches": float(counts[kernel]) for kernel in registry.KERNELS}


def coo(c: CostInputs) -> tuple:
    return (c.nnz * (c.v + 2 * INDEX_BYTES) + c.vectors, c.nnz, 1, -(-c.longest // WARP),
            FIXED_LAUNCHES["coo"])


def csr_scalar(c: CostInputs) -> tuple:
    return (c.csr_bytes, WARP * _group_max_sum(c, WARP, 1), c.longest, 0,
            FIXED_LAUNCHES["csr_scalar"])


def csr_vector(c: CostInputs) -> tuple:
    group = choosers.choose_threads_per_row_of_lengths(c.values, c.counts,
                                                        c.device)["threads_per_row"]
    reduction = math.log2(group)
    warps = -(-c.m // (WARP // group))
    work = WARP * (_group_max_sum(c, WARP // group, group) + reduction * warps)
    return (c.csr_bytes, work, -(-c.longest // group) + reduction, 0,
            FIXED_LAUNCHES["csr_vector"])


def ell(c: CostInputs) -> tuple:
    return (c.m * c.longest * (c.v + INDEX_BYTES) + c.vectors, c.padded_rows * c.longest,
            c.longest, 0, FIXED_LAUNCHES["ell"])


def hyb(c: CostInputs) -> tuple:
    width = default_hyb_width_of_histogram(c.values, c.counts)  # = the registry's chooser
    overflow = _overflow(c.values, c.counts, width)
    return (c.m * width * (c.v + INDEX_BYTES) + overflow * (c.v + 2 * INDEX_BYTES) + c.vectors,
            c.padded_rows * width + overflow, width + (1 if overflow else 0),
            -(-max(c.longest - width, 0) // WARP), hyb_launches(overflow))


def jds(c: CostInputs) -> tuple:
    return (c.nnz * (c.v + INDEX_BYTES) + INDEX_BYTES * (c.m + c.longest + 1) + c.vectors,
            WARP * _sorted_warp_max_sum(c.values, c.counts), c.longest, 0,
            FIXED_LAUNCHES["jds"])


def csr5(c: CostInputs) -> tuple:
    sigma = choosers.choose_csr5_sigma(c.csr, c.device)["sigma"]
    tiles = -(-c.nnz // (OMEGA * sigma))
    return (c.nnz * (c.v + INDEX_BYTES) + tiles * (OMEGA * CSR5_DESCRIPTOR_BYTES + INDEX_BYTES)
            + c.vectors, OMEGA * sigma * tiles, sigma, -(-c.longest // (OMEGA * sigma)) + 1,
            FIXED_LAUNCHES["csr5"])


def _overflow(values, counts, width: int) -> int:
    """Σ over rows of max(0, len − width): the entries HYB leaves to its COO part."""
    return int(np.sum(np.maximum(values - width, 0) * counts))


def _group_max_sum_of(indptr, m, rows_per_group, lanes):
    """Σ over groups of ``rows_per_group`` consecutive rows of the group's longest
    ⌈len/lanes⌉: the loop a warp runs when each row has ``lanes`` threads (an integer sum:
    the same in any order)."""
    total = 0
    for group in prange(-(-m // rows_per_group)):
        start = group * rows_per_group
        longest = 0
        for i in range(start, min(start + rows_per_group, m)):
            longest = max(longest, np.int64(indptr[i + 1] - indptr[i]))
        total += -(-longest // lanes)
    return total


_group_max_sum_serial, _group_max_sum_parallel = specialisations(_group_max_sum_of)


def _group_max_sum(c: CostInputs, rows_per_group: int, lanes: int) -> int:
    """:func:`_group_max_sum_of` of the matrix of ``c``: counted already
    (:attr:`CostInputs.group_sums`), or on numba's threads if ``c.parallel``."""
    if c.group_sums is not None:
        return c.group_sums[rows_per_group, lanes]
    run = _group_max_sum_parallel if c.parallel else _group_max_sum_serial
    return run(c.csr.indptr, c.m, rows_per_group, lanes)


def _sorted_warp_max_sum(values, counts) -> int:
    """Σ over warps of the longest row once rows are sorted by length, descending (JDS): each
    warp starts at a rank that is a multiple of 32 and its longest row is the length at that
    rank, so each length counts once for every warp start among its rows' ranks."""
    lengths, rows = np.asarray(values)[::-1], np.asarray(counts)[::-1]
    ends = np.cumsum(rows)  # the rank after each length's rows
    starts = ends - rows
    warp_starts = -(-ends // WARP) - -(-starts // WARP)  # multiples of 32 in [start, end)
    return int(np.dot(lengths, warp_starts))
