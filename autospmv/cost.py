"""Cost quantities: what each kernel's time depends on, counted for one matrix.

For every kernel, run with the parameters its chooser picks for the device
(:mod:`autospmv.registry`), four numbers describe the work its GPU mapping does on the matrix.
They are structural counts, which depend on the device only through those parameters; a
trained model turns them into a time estimate per kernel with a linear cost model fitted on its
device's labels (``training/train.py``, :class:`autospmv.model.CostModel`),
and its tree reads the estimates. They are features like the others (:mod:`autospmv.features`),
named ``<kernel>_<quantity>``:

========= =======================================================================================
bytes     memory traffic: the format's arrays once, x once per column and y once per row
          (values of the matrix's itemsize, indices of 4 bytes; a perfect cache for x)
work      thread steps: Σ over warps of 32 × the warp's longest loop, the issue slots the
          kernel occupies (a warp runs as long as its longest thread)
span      the longest loop of one thread (steps): the chain of dependent loads that bounds the
          kernel's time when the GPU is not full
atomics   the most atomic additions into one entry of y (serialised by the memory system)
========= =======================================================================================

Per kernel (m rows, n columns, ``len_i`` the row lengths, K the longest, v the value size;
g is CSR-vector's group size, w HYB's ELL width and σ CSR5's tile height, all from the
device's choosers; o = Σ max(0, len_i − w) the entries HYB leaves to COO; tiles = ⌈nnz/(32σ)⌉;
every kernel's bytes also count v·(m + n) for x and y; kernels not listed with atomics have 0):

============ ==============================================================================
coo          bytes nnz·(v+8); work nnz; span 1; atomics ⌈K/32⌉
csr_scalar   bytes nnz·(v+4) + 4(m+1); work Σ over warps of 32 × the warp's longest row;
             span K
csr_vector   bytes as csr_scalar; a warp holds 32/g rows and runs ⌈len/g⌉ steps for its
             longest plus log₂ g reduction steps: work 32 × the sum of those, span ⌈K/g⌉ + log₂ g
ell          bytes m·K·(v+4); work 32·⌈m/32⌉·K; span K
hyb          bytes m·w·(v+4) + o·(v+8); work 32·⌈m/32⌉·w + o; span w, plus 1 with a COO part;
             atomics ⌈(K − w)/32⌉
jds          bytes nnz·(v+4) + 4(m + K + 1); work as csr_scalar once rows are sorted by
             length; span K
csr5         bytes nnz·(v+4) + tiles·(32·12 + 4); work 32·σ·tiles; span σ;
             atomics ⌈K/(32σ)⌉ + 1
============ ==============================================================================

A matrix with no entries has zeros everywhere.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from .formats.csr5 import OMEGA
from .formats.hyb import default_hyb_width_of_histogram
from .kernels import njit
from .registry import KERNELS, choose_csr5_sigma, choose_threads_per_row

QUANTITIES = ("bytes", "work", "span", "atomics")
QUANTITY_NAMES = tuple(f"{kernel}_{q}" for kernel in KERNELS for q in QUANTITIES)
"""Feature names of the cost quantities, kernel by kernel in :data:`autospmv.KERNELS` order."""

WARP = 32
INDEX_BYTES = 4
CSR5_DESCRIPTOR_BYTES = 12
"""Per lane and tile: its ``bit_flag``, ``y_offset`` and ``seg_offset`` words."""


def quantities(csr: sp.csr_matrix, device: str, values=None, counts=None) -> dict[str, float]:
    """The cost quantities of a canonical CSR matrix on ``device`` ("cpu" or "cuda"), keyed by
    :data:`QUANTITY_NAMES`.

    ``values``/``counts``: the distinct row lengths (ascending) and their counts, when the
    caller has them (the feature scan does); computed otherwise.
    """
    m, n = csr.shape
    nnz = int(csr.nnz)
    if m == 0 or nnz == 0:
        return dict.fromkeys(QUANTITY_NAMES, 0.0)
    indptr = csr.indptr
    if values is None:
        counts = np.bincount(np.diff(indptr))
        values = np.flatnonzero(counts)
        counts = counts[values]
    v = csr.dtype.itemsize
    vectors = v * (m + n)
    longest = int(values[-1])
    csr_bytes = nnz * (v + INDEX_BYTES) + INDEX_BYTES * (m + 1) + vectors
    out = {}

    def put(kernel, bytes_, work, span, atomics=0.0):
        out.update({f"{kernel}_bytes": bytes_, f"{kernel}_work": work,
                    f"{kernel}_span": span, f"{kernel}_atomics": atomics})

    put("coo", nnz * (v + 2 * INDEX_BYTES) + vectors, nnz, 1, -(-longest // WARP))
    put("csr_scalar", csr_bytes, WARP * _group_max_sum(indptr, m, WARP, 1), longest)
    group = choose_threads_per_row(csr, device)["threads_per_row"]
    reduction = math.log2(group)
    warps = -(-m // (WARP // group))
    put("csr_vector", csr_bytes,
        WARP * (_group_max_sum(indptr, m, WARP // group, group) + reduction * warps),
        -(-longest // group) + reduction)
    padded_rows = WARP * -(-m // WARP)
    put("ell", m * longest * (v + INDEX_BYTES) + vectors, padded_rows * longest, longest)
    width = default_hyb_width_of_histogram(values, counts)  # = the registry's chooser
    overflow = _overflow(values, counts, width)
    put("hyb", m * width * (v + INDEX_BYTES) + overflow * (v + 2 * INDEX_BYTES) + vectors,
        padded_rows * width + overflow, width + (1 if overflow else 0),
        -(-max(longest - width, 0) // WARP))
    put("jds", nnz * (v + INDEX_BYTES) + INDEX_BYTES * (m + longest + 1) + vectors,
        WARP * _sorted_warp_max_sum(values, counts), longest)
    sigma = choose_csr5_sigma(csr, device)["sigma"]
    tiles = -(-nnz // (OMEGA * sigma))
    put("csr5", nnz * (v + INDEX_BYTES) + tiles * (OMEGA * CSR5_DESCRIPTOR_BYTES + INDEX_BYTES)
        + vectors, OMEGA * sigma * tiles, sigma, -(-longest // (OMEGA * sigma)) + 1)
    return {name: float(out[name]) for name in QUANTITY_NAMES}


def _overflow(values, counts, width: int) -> int:
    """Σ over rows of max(0, len − width): the entries HYB leaves to its COO part."""
    return int(np.sum(np.maximum(values - width, 0) * counts))


@njit(cache=True)
def _group_max_sum(indptr, m, rows_per_group, lanes):
    """Σ over groups of ``rows_per_group`` consecutive rows of the group's longest
    ⌈len/lanes⌉: the loop a warp runs when each row has ``lanes`` threads."""
    total = 0
    for start in range(0, m, rows_per_group):
        longest = 0
        for i in range(start, min(start + rows_per_group, m)):
            longest = max(longest, indptr[i + 1] - indptr[i])
        total += -(-longest // lanes)
    return total


@njit(cache=True)
def _sorted_warp_max_sum(values, counts):
    """Σ over warps of the longest row once rows are sorted by length, descending (JDS)."""
    total = 0
    placed = 0  # rows in the warp being filled
    for k in range(values.size - 1, -1, -1):
        left = counts[k]
        if placed:  # top up the warp being filled, whose longest row came earlier
            take = min(left, WARP - placed)
            placed = (placed + take) % WARP
            left -= take
        if left:
            total += values[k] * -(-left // WARP)  # warps that start with this length
            placed = left % WARP
    return total
