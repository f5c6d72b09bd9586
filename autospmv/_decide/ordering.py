"""The order of the rows and columns as part of the decision: keep A's own, or renumber a square
A by a bandwidth-reducing order and run ``P A Pᵀ``.

Why: SpMV gathers x by column index. A matrix numbered at random (graph or mesh data as they
arrive) makes every entry of a warp read its own 32-byte sector of x, where a bandwidth-reducing
order lets the rows of a warp share sectors; no storage format recovers that, the order does.
The operator applies the order inside itself (:mod:`autospmv.kernels.cpu.permute`,
:mod:`autospmv.kernels.cuda.permute`), so the caller never sees it.

The candidates (:data:`ORDERS`): ``"keep"``; ``"rcm"``, SciPy's
``scipy.sparse.csgraph.reverse_cuthill_mckee`` on the structure of A + Aᵀ; ``"bfs"``, reverse
Cuthill–McKee over the graph of A's rows (:func:`autospmv.kernels.cpu.ordering.rows_rcm`, a
breadth-first walk in numba that needs no A + Aᵀ): for a structurally symmetric A the same kind
of order (a start of least degree, neighbours by degree), for any square A one that places the
columns each row reads next to it. Its x locality matches RCM's on the shared matrices numbered
at random (within 0.91–1.17), at a third of RCM's cost in geometric mean (1.3–5.5× less), so it
is the order ``"auto"`` computes.
``"auto"`` chooses between keeping the order and ``"bfs"`` by a cost rule over features of x's
locality (:func:`choose_order`), whose constants order labels timed on the device fit.

The features (:func:`order_features`): ``x_sectors_per_nnz_warp`` (the 32-byte sectors of x
that 32 consecutive rows read, per nonzero; sampled,
:func:`autospmv._decide.features.sampling.x_locality`, well under a millisecond), ``x_reach``
(how far from its row a row's columns lie, 90 % of them; the same sample,
:func:`autospmv._decide.features.sampling.x_reach`), and, once an order is computed, the
``bandwidth`` (largest ``|i - j|``) and ``profile`` (mean over rows of ``i - min j`` where
positive) before and after.

The cost rule (:func:`product_seconds`): a product moves the matrix's bytes (values, column indices,
row pointers), writes y, and reads x in 32-byte sectors, ``nnz × x_sectors_per_nnz_warp`` of them.
The rows computed together read x within their reach, a window of about ``2 × x_reach`` columns; the
share of that window beyond the rule's ``window_bytes`` (the caches nearest the cores) is the share
of the sectors that cost their bytes (:func:`window_miss`): a matrix whose rows read x near their
own index gathers from the cache however those few columns are numbered, so an order gains it
nothing. The product takes its bytes over the rule's bandwidth, but never less than its latency. On
the CPU a sector read from memory rather than the last-level cache costs the rule's
``miss_seconds`` more (a core waits for it): of the sectors that cost, a share misses with the
chance that the window's bytes exceed the rule's ``cache_share`` of the last-level cache
(:func:`cpu_miss_seconds`). The constants (:class:`OrderRule`) are the built-in
ones (:data:`BUILT_IN_RULES`), or those fitted to order labels timed on the device
(:mod:`training.order_labels`) where the model file for the device and dtype carries them. The gain
of an order per product is the difference of the two times less the two gathers of x and y
(:func:`permutation_seconds`), which a product in the caller's order pays and a solver's iteration
does not (the solvers iterate in the stored order and permute b and x once per solve:
``gathers=False``); over the expected products (the ``products=`` hint, or a solver's iterations) it
must exceed what the order costs to compute and apply (:func:`ordering_seconds`, estimated from
nnz), and be at least :data:`MIN_RELATIVE_GAIN` of a product. "auto" decides in two steps, so that
the common case costs nothing:

1. Without a hint, or for a non-square matrix, the order is kept at once (no feature is read).
2. With one, the sampled x locality and reach are read and compared with the best any order
   could reach for these row lengths (:func:`sector_floor`, and a reach of one mean row length):
   if even that would not pay for the order, or would gain less than :data:`MIN_FLOOR_GAIN` of a
   product, the order is kept without computing one.
3. Otherwise the order is computed, the permuted matrix built and its locality read; the order
   is used when the rule, with the locality measured after and the cost measured, says it pays.

A matrix on the GPU is renumbered on its device, and its bfs order walked there
(:func:`bfs_on_device`) unless the walk would take many levels of a few vertices each; SciPy's
RCM, and a walk the device gives up, run on the host on its column indices copied there once
(nnz integers). The estimate of an order's cost (:func:`ordering_seconds`) is that of the walk
and the renumbering where they will run.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import numpy as np

from .._support.devices import cpu_cache_bytes
from ..formats.base import DeviceCSR, to_host
from ..kernels.cpu.ordering import rows_rcm
from ..kernels.cpu.permute import permuted_csr
from .features.device_scan import runs_kernels
from .features.sampling import x_locality, x_reach
from .model.lookup import find_model
from .model.order_rule import OrderRule

ORDERS = ("auto", "keep", "rcm", "bfs")
"""The values of ``prepare(A, order=...)``."""

SECTOR_BYTES = 32
"""The GPU's unit of a gather from memory (and a cache line's quarter on the CPU)."""

CPU_MISS_SECONDS = 8e-9
"""What a sector of x read from memory costs the CPU beyond its bytes (a core waits for it), in
the built-in CPU rule. Measured as the product of a shared matrix grown to 10⁷ nonzeros and
numbered at random less the same product in the bfs order, per sector saved, on a 2-core AMD
EPYC with 32 MiB of L3: 5.0 and 6.6 ns with x of 23 and 30 MB, 0.6–4 ns with x of 4–17 MB, where
the share of the cache a product keeps depends on what else the machine runs. A sector's bytes
at the rule's bandwidth take 1.6 ns."""

CPU_CACHE_SHARE = 0.25
"""The part of the last-level cache the built-in CPU rule counts on to hold x while the matrix
streams through it. With :data:`CPU_MISS_SECONDS`, chosen on the 21 square shared matrices grown
to 10⁷ nonzeros and numbered at random, in both dtypes (2-core AMD EPYC, 32 MiB of L3): the rule
then predicts a gain of at least :data:`MIN_RELATIVE_GAIN` wherever the bfs order measured one
(37 of 42 products; with half the cache it missed 4, which measured 1.4–2.0× faster renumbered),
and the timing that follows a chosen order (``prepare``) discards the 5 it predicts wrongly."""

GPU_WINDOW_BYTES = 256 * 1024
"""The built-in GPU rule's ``window_bytes``: an SM's combined L1 cache and shared memory on an
H100 or H200. On the order labels of eight shared matrices grown to 10⁷ nonzeros (H200) the
product as given, whose rows reach 30–5,100 columns (a window of at most 80 KB in float64),
ran as fast in the bfs order (0.98–1.13 of A's own order, 16 products); numbered at random
(a window of all of x, 0.66–16 MB) it ran 1.5–2.7× faster in the bfs order."""

CPU_WINDOW_BYTES = 32 * 1024
"""The built-in CPU rule's ``window_bytes``: a core's L1 data cache. On the same matrices as
given, on a 2-core AMD EPYC, only fe_4elt2, whose rows reach 5,100 columns (80 KB in float64),
ran faster in the bfs order (1.3×); the rest reach at most 1,240 columns (20 KB) and ran within
0.94–1.05."""

BUILT_IN_RULES = {"cuda": OrderRule(bytes_per_second=3.0e12, latency_seconds=5e-6,
                                    window_bytes=GPU_WINDOW_BYTES),
                  "cpu": OrderRule(bytes_per_second=2.0e10, latency_seconds=1e-6,
                                   miss_seconds=CPU_MISS_SECONDS, cache_share=CPU_CACHE_SHARE,
                                   window_bytes=CPU_WINDOW_BYTES)}
"""The rule without order labels: on the GPU about two thirds of an H200's bandwidth (4.8 TB/s),
a launch's 5 µs and :data:`GPU_WINDOW_BYTES`; on the CPU a few cores' share of a server's
bandwidth, a thread pool's wake-up, :data:`CPU_MISS_SECONDS` and :data:`CPU_WINDOW_BYTES`."""

ORDER_SECONDS_PER_NNZ = {"rcm": 2e-7, "bfs": 1e-7}
"""Computing each order per nonzero of A on the host. ``"rcm"``: SciPy's
``reverse_cuthill_mckee`` of A + Aᵀ with the symmetrisation, 0.2–1.8e-7 s on a 2-core x86
machine for the shared square matrices grown to 10⁷ nonzeros and numbered at random.
``"bfs"`` (:func:`autospmv.kernels.cpu.ordering.rows_rcm`): 0.04–0.9e-7 s on the same; both
rounded up to the slowest."""

PERMUTE_SECONDS_PER_NNZ = 5e-8
"""Building ``P A Pᵀ`` (:func:`autospmv.kernels.cpu.permute.permuted_csr`) per nonzero:
1.7–3.9e-8 s on the same machine's two threads for five shared matrices grown to 10⁷ nonzeros
and numbered at random (its reads of A's renumbered columns are scattered), rounded up; less
with more cores."""

GPU_WALK_SECONDS = (0.025, 3e-9)
"""The bfs walk on the GPU (:func:`bfs_on_device`): a fixed part (the launches of the parts'
labelling passes and of the levels, a few microseconds each) and a part per nonzero of A (the
transposed structure, the passes over A). On an H200 the walk of ten shared matrices grown to
10⁵, 10⁶ and 10⁷ nonzeros and numbered at random took 0.004–0.015 s, 0.007–0.025 s and
0.013–0.043 s (5–98 levels), rounded up to the slowest at each size."""

GPU_PERMUTE_SECONDS_PER_NNZ = 1.1e-8
"""Building ``P A Pᵀ`` on the GPU (``autospmv._prepare.device_input.permuted_device_csr``) and
reading the renumbered matrix's features, per nonzero (for a host matrix, its copy renumbered
there and copied back): with the walk, the order of a CuPy matrix of 10⁷ nonzeros cost
``prepare`` 0.025–0.154 s on an H200 and 0.02–0.09 s on an H100, and that of a host matrix
0.04–0.16 s on the H100 (21 shared and 21 corpus matrices grown to 10⁷ nonzeros and numbered at
random, but for the first, which compiled the kernels), which the two estimates' 0.165 s
cover on those machines; on a slower one it is an underestimate for the slowest orders (the
benchmarks page gives them)."""

MIN_RELATIVE_GAIN = 0.05
"""The least gain per product, relative to a product in A's own order, that the rule must
estimate before "auto" considers an order. Its estimate is rough (the caches hold much of x
on a GPU), so ``prepare`` then times the product in both orders and keeps the faster."""

MIN_FLOOR_GAIN = 0.15
"""Step 2's threshold: the gain the best conceivable order would bring, relative to a product,
below which no order is computed (a matrix as given by a mesh generator or a solver's assembly
is close to banded already)."""


def rule_for(device: str, model=None, dtype=None) -> OrderRule:
    """The cost rule's constants for ``device`` and a matrix of ``dtype``: those fitted to the
    device's order labels where the model that decides there (``model=`` as
    :func:`autospmv.prepare` takes it, else :func:`~autospmv._decide.model.lookup.find_model`'s)
    carries them, else the built-in ones."""
    choice = find_model(device, model, dtype)
    fitted = choice.model.order_rule if choice is not None else None
    return fitted or BUILT_IN_RULES[device]


def check_order(order) -> str:
    """``order`` as :func:`autospmv.prepare` takes it, or ValueError."""
    if order not in ORDERS:
        raise ValueError(f"unknown order={order!r}; valid: " + ", ".join(map(repr, ORDERS)))
    return order


@dataclasses.dataclass
class OrderChoice:
    """The order an operator runs in, and why."""

    order: str
    """``"keep"``, ``"rcm"`` or ``"bfs"``."""
    reason: str
    """One line for ``explain()``."""
    perm: np.ndarray | None = None
    """Row (and column) i of the operator's matrix is row ``perm[i]`` of A; None when kept."""
    inverse: np.ndarray | None = None
    """``inverse[perm[i]] = i``; None when kept."""
    features: dict = dataclasses.field(default_factory=dict)
    """The features the rule read (``..._before``, ``..._after``)."""
    seconds: float = 0.0
    """What choosing the order took, computing it and permuting A included."""
    kept_matrix: object = dataclasses.field(default=None, repr=False)
    """For an order the cost rule chose: A in its own order, so that ``prepare`` can time the
    product in both orders and keep the faster (the rule's gain is an estimate); else None."""

    @property
    def kept(self) -> bool:
        return self.perm is None


def sector_floor(nnz: int, rows: int, itemsize: int) -> float:
    """The fewest x sectors per nonzero any order could give 32 consecutive rows of this mean
    row length L: a perfectly banded warp reads about 32 + 2L consecutive entries of x."""
    if not nnz or not rows:
        return 0.0
    length = nnz / rows
    per_sector = SECTOR_BYTES / itemsize
    return (32 + 2 * length) / (per_sector * 32 * length)


class Locality(NamedTuple):
    """How a product reads x: ``sectors_per_nnz`` (``x_sectors_per_nnz_warp``) and ``reach``
    (``x_reach``, in columns; None: x as a whole, the window of a matrix whose reach is not
    known)."""

    sectors_per_nnz: float
    reach: float | None = None


def window_bytes(csr, reach: float | None) -> float:
    """The bytes of x that rows within ``reach`` columns of each other read: ``2 × reach + 1``
    columns, at most all of x."""
    n = csr.shape[1]
    columns = n if reach is None else min(n, 2 * reach + 1)
    return columns * np.dtype(csr.dtype).itemsize


def window_miss(csr, reach: float | None, rule: OrderRule) -> float:
    """The share of a product's x sectors that cost their bytes: the share of its x window
    (:func:`window_bytes`) beyond the rule's ``window_bytes`` (all of them where that is 0)."""
    window = window_bytes(csr, reach)
    if not rule.window_bytes:
        return 1.0
    return max(0.0, 1.0 - rule.window_bytes / window) if window else 0.0


def miss_chance(x_bytes: int, cache_share: float = CPU_CACHE_SHARE) -> float:
    """The chance that a sector of an x of ``x_bytes`` is not in ``cache_share`` of the CPU's
    last-level cache (a uniform spread of reads)."""
    cached = cache_share * cpu_cache_bytes()
    return max(0.0, 1.0 - cached / x_bytes) if x_bytes else 0.0


def cpu_miss_seconds(x_bytes: float, rule: OrderRule | None = None) -> float:
    """The rule's extra time of a sector of x on the CPU, read within ``x_bytes`` of x (its
    window): :func:`miss_chance` times the rule's ``miss_seconds``."""
    rule = rule or BUILT_IN_RULES["cpu"]
    return rule.miss_seconds * miss_chance(x_bytes, rule.cache_share)


def product_traffic(csr, sectors_per_nnz: float) -> tuple[float, float]:
    """``(bytes, x sectors)`` of one product: the matrix's values and column indices, the row
    pointer and y, and the sectors of x it gathers."""
    m = csr.shape[0]
    itemsize = np.dtype(csr.dtype).itemsize
    index = 4 if csr.nnz < 2**31 else 8
    sectors = csr.nnz * sectors_per_nnz
    return csr.nnz * (itemsize + index) + m * (index + itemsize) + sectors * SECTOR_BYTES, sectors


def product_seconds(csr, locality: Locality, device: str,
                    rule: OrderRule | None = None) -> float:
    """The cost rule's time of one product that reads x with ``locality`` (see the module
    docstring), with ``rule``'s constants (None: the device's built-in ones)."""
    rule = rule or BUILT_IN_RULES[device]
    costly = locality.sectors_per_nnz * window_miss(csr, locality.reach, rule)
    traffic, sectors = product_traffic(csr, costly)
    seconds = traffic / rule.bytes_per_second
    if rule.miss_seconds:
        seconds += sectors * cpu_miss_seconds(window_bytes(csr, locality.reach), rule)
    return max(rule.latency_seconds, seconds)


def permutation_traffic(csr) -> float:
    """The bytes of the two gathers around a product in the caller's order: each reads an index
    and a scattered element (a sector) and writes an element, per row."""
    return 2 * csr.shape[0] * (4 + SECTOR_BYTES + np.dtype(csr.dtype).itemsize)


def permutation_seconds(csr, device: str, rule: OrderRule | None = None) -> float:
    """The rule's time of the two gathers around a product in the caller's order."""
    rule = rule or BUILT_IN_RULES[device]
    return max(2 * rule.latency_seconds, permutation_traffic(csr) / rule.gather_bytes_per_second)


def gain_per_product(csr, before: Locality, after: Locality, device: str,
                     rule: OrderRule | None = None, gathers: bool = True) -> tuple[float, float]:
    """``(gain, now)``: the rule's time ``now`` of a product that reads x with locality
    ``before``, and what an order that gives ``after`` gains on it, less the two gathers of a
    product in the caller's order where ``gathers``."""
    now = product_seconds(csr, before, device, rule)
    gain = now - product_seconds(csr, after, device, rule)
    if gathers:
        gain -= permutation_seconds(csr, device, rule)
    return gain, now


def ordering_seconds(nnz: int, order: str = "bfs", walked_on_gpu: bool = False,
                     permuted_on_gpu: bool = False) -> float:
    """The rule's estimate of computing ``order`` (walked on the GPU where ``walked_on_gpu``:
    :data:`GPU_WALK_SECONDS`; else on the host: :data:`ORDER_SECONDS_PER_NNZ`) and building
    ``P A Pᵀ`` (on the GPU where ``permuted_on_gpu``: :data:`GPU_PERMUTE_SECONDS_PER_NNZ`; else
    on the host: :data:`PERMUTE_SECONDS_PER_NNZ`)."""
    if walked_on_gpu:
        fixed, per_nnz = GPU_WALK_SECONDS
        walk = fixed + nnz * per_nnz
    else:
        walk = nnz * ORDER_SECONDS_PER_NNZ[order]
    return walk + nnz * (GPU_PERMUTE_SECONDS_PER_NNZ if permuted_on_gpu
                         else PERMUTE_SECONDS_PER_NNZ)


def bandwidth_and_profile(csr) -> tuple[float, float]:
    """The largest ``|i - j|`` over the entries of a canonical CSR matrix (host, or a
    :class:`~autospmv.formats.base.DeviceCSR`, computed on its device), and the mean over rows
    of ``i - (first column of row i)`` where positive (the envelope per row)."""
    m = csr.shape[0]
    if m == 0 or csr.nnz == 0:
        return 0.0, 0.0
    xp = csr.xp if isinstance(csr, DeviceCSR) else np
    indptr = csr.indptr
    nonempty = indptr[1:] > indptr[:-1]
    rows = xp.arange(m, dtype=np.int64)[nonempty]
    first = csr.indices[indptr[:-1][nonempty]].astype(np.int64)
    last = csr.indices[indptr[1:][nonempty] - 1].astype(np.int64)
    below, above = rows - first, last - rows
    bandwidth = max(float(below.max()), float(above.max()), 0.0)
    return bandwidth, float(xp.maximum(below, 0).sum()) / m


def sampled_locality(structure) -> Locality:
    """The sampled :class:`Locality` of a canonical host matrix or of the
    :class:`~autospmv.formats.base.RowStructure` of one on the GPU."""
    return Locality(float(x_locality(structure)), x_reach(structure))


def order_features(csr, suffix: str = "", locality: Locality | None = None) -> dict:
    """The order's features of a canonical matrix (host, or a
    :class:`~autospmv.formats.base.DeviceCSR`; see the module docstring), names ending in
    ``suffix``; ``locality``: its :func:`sampled_locality` where already read."""
    bandwidth, profile = bandwidth_and_profile(csr)
    structure = csr.structure() if isinstance(csr, DeviceCSR) else csr
    locality = locality or sampled_locality(structure)
    return {"x_sectors_per_nnz_warp" + suffix: locality.sectors_per_nnz,
            "x_reach" + suffix: locality.reach,
            "bandwidth" + suffix: bandwidth, "profile" + suffix: profile}


def locality_of(features: dict, suffix: str) -> Locality:
    """The :class:`Locality` in an order's features (``..._before``, ``..._after``; a reach
    missing from them counts as all of x)."""
    return Locality(features["x_sectors_per_nnz_warp" + suffix], features.get("x_reach" + suffix))


def host_structure(csr) -> tuple[np.ndarray, np.ndarray]:
    """The row pointer and column indices of a canonical host matrix, or of a
    :class:`~autospmv.formats.base.DeviceCSR` (its column indices copied to the host)."""
    if isinstance(csr, DeviceCSR):
        indices = csr.xp.asnumpy(csr.indices) if csr.on_gpu else np.asarray(csr.indices)
        return csr.host_indptr, indices
    return csr.indptr, csr.indices


def rcm(csr) -> np.ndarray:
    """SciPy's reverse Cuthill–McKee order of the structure of A + Aᵀ (a square canonical
    host matrix, or a :class:`~autospmv.formats.base.DeviceCSR`, whose column indices are
    copied to the host for it): ``perm``, the old index of each new row."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    indptr, indices = host_structure(csr)
    structure = csr_matrix((np.ones(indices.shape[0], dtype=np.int8), indices, indptr),
                           shape=csr.shape)
    # SciPy returns a reversed view; a copy has positive strides even where NumPy calls a
    # one-element view contiguous (numba-cuda's upload refuses a negative stride there)
    return reverse_cuthill_mckee(structure, symmetric_mode=False).copy()


def bfs(csr) -> np.ndarray:
    """Reverse Cuthill–McKee order of the graph of A's rows
    (:func:`autospmv.kernels.cpu.ordering.rows_rcm`) of a square canonical host matrix, or of a
    :class:`~autospmv.formats.base.DeviceCSR` (its column indices copied to the host; see
    :func:`bfs_on_device` for the walk on its device): ``perm``, the old index of each new
    row."""
    indptr, indices = host_structure(csr)
    return rows_rcm(indptr, indices, csr.shape[0])


DEVICE_STEP_SECONDS = 2e-5
"""A pass of the walk on the GPU (:mod:`autospmv.kernels.cuda.ordering`: four kernels a level,
queued back to back), estimated from a launch's few microseconds each."""

MIN_DEVICE_STEPS = 1000
"""The fewest passes a walk on the GPU is allowed before the host takes over."""


def bfs_on_device(csr) -> np.ndarray | None:
    """The bfs order of a :class:`~autospmv.formats.base.DeviceCSR` walked on its device
    (:func:`autospmv.kernels.cuda.ordering.rows_rcm_on_device`: over A + Aᵀ, the host's order
    where A's structure is symmetric), or None where the walk would take more passes than half
    the host's estimated time (:data:`ORDER_SECONDS_PER_NNZ`) allows at
    :data:`DEVICE_STEP_SECONDS` each (at least :data:`MIN_DEVICE_STEPS`): a graph whose levels
    hold a few vertices each, which the host walks in O(n + nnz). Any permutation renumbers A
    into a matrix with the same products; one that is not a permutation raises RuntimeError."""
    from ..kernels.cuda.ordering import rows_rcm_on_device

    xp, n = csr.xp, csr.shape[0]
    t_indptr, t_indices = csr.transposed_structure()
    if bool(xp.array_equal(t_indptr, csr.indptr)) and bool(xp.array_equal(t_indices,
                                                                           csr.indices)):
        t_indptr = t_indices = None  # symmetric: the rows are the columns
    budget = ORDER_SECONDS_PER_NNZ["bfs"] * csr.nnz / (2 * DEVICE_STEP_SECONDS)
    perm = rows_rcm_on_device(csr.indptr, csr.indices, t_indptr, t_indices, n, xp,
                              max(MIN_DEVICE_STEPS, int(budget)))
    if perm is None:
        return None
    perm = to_host(perm)
    if not is_permutation(perm, n):
        raise RuntimeError(f"the bfs walk on the GPU returned no permutation of {n} rows")
    return perm


COMPUTE = {"rcm": rcm, "bfs": bfs}
"""The function that computes each order's ``perm`` on the host."""


def walks_on_gpu(order: str, csr) -> bool:
    """Whether ``order`` of ``csr`` is walked on its GPU (:func:`computed_order`): the bfs order
    of a :class:`~autospmv.formats.base.DeviceCSR` whose arrays the kernels run on."""
    return order == "bfs" and isinstance(csr, DeviceCSR) and runs_kernels(csr)


def computed_order(csr, order: str, walk_on=None) -> tuple[np.ndarray, str]:
    """``(perm, where it was computed)`` of ``order`` for a square canonical matrix: the bfs
    order of a :class:`~autospmv.formats.base.DeviceCSR` (``csr``, or ``walk_on``: a host
    matrix's copy on the GPU) walked on its device where the walk takes few enough levels
    (:func:`bfs_on_device`), everything else on the host (:data:`COMPUTE`)."""
    on_device = walk_on if walk_on is not None else csr
    if walks_on_gpu(order, on_device):
        perm = bfs_on_device(on_device)
        if perm is not None:
            return perm, "on the GPU"
        return COMPUTE[order](csr), "on the host (its walk on the GPU would take too many levels)"
    return COMPUTE[order](csr), "on the host"


def is_permutation(perm: np.ndarray, n: int) -> bool:
    """Whether the host array ``perm`` holds each of ``0 .. n-1`` once."""
    if perm.shape != (n,):
        return False
    if not n:
        return True
    if perm.min() < 0 or perm.max() >= n:
        return False
    return int(np.bincount(perm, minlength=n).max()) == 1


def inverse_of(perm: np.ndarray) -> np.ndarray:
    """``inverse[perm[i]] = i``, in perm's dtype."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.shape[0], dtype=perm.dtype)
    return inverse


def apply_order(csr, perm: np.ndarray, inverse: np.ndarray):
    """``P A Pᵀ`` of a canonical host matrix (canonical again, a new matrix)."""
    import scipy.sparse as sp

    indptr, indices, data = permuted_csr(csr.indptr, csr.indices, csr.data, perm, inverse)
    out = sp.csr_matrix((data, indices, indptr), shape=csr.shape, copy=False)
    out.has_sorted_indices = out.has_canonical_format = True
    return out


def choose_order(csr, order: str, products: int | None, device: str, permute=apply_order,
                 gathers: bool = True, model=None, rule: OrderRule | None = None,
                 walk_on=None):
    """The order for a canonical matrix and ``prepare``'s ``order=``: ``(OrderChoice, the
    matrix in that order)`` (``csr`` itself when kept). See the module docstring for "auto";
    ``"rcm"`` or ``"bfs"`` on a non-square matrix raises ValueError. ``csr``: a canonical host
    matrix, or a :class:`~autospmv.formats.base.DeviceCSR`, which ``permute(csr, perm,
    inverse)`` (the caller's) renumbers on its device. ``gathers``: whether the products pay
    the gathers of x and y (in the caller's order), or run in the stored order (inside the
    solvers). ``rule``: the cost rule's constants (None: :func:`rule_for` the device, ``model``
    and A's dtype, read only where "auto" weighs a hint). ``walk_on``: a host ``csr``'s copy
    on the GPU (a :class:`~autospmv.formats.base.DeviceCSR`), where its bfs order is walked
    (:func:`computed_order`) and where ``permute`` renumbers it, as "auto" estimates (the
    matrix in its new order is then the copy's, a DeviceCSR)."""
    m, n = csr.shape
    if order == "keep":
        return OrderChoice("keep", "order kept (order='keep')"), csr
    if m != n:
        if order != "auto":
            raise ValueError(f"order={order!r} renumbers the rows and columns of a square "
                             f"matrix; A is {m}x{n} (use order='keep' or 'auto', which keeps "
                             "the order of a rectangular matrix)")
        return OrderChoice("keep", f"order kept: A is {m}x{n}, and only a square matrix is "
                           "renumbered"), csr
    started = time.perf_counter()
    if order == "auto" and products is not None:
        rule = rule or rule_for(device, model, csr.dtype)
    rule = rule or BUILT_IN_RULES[device]
    counted = "products" if gathers else "products in the stored order (inside the solvers)"
    structure = csr.structure() if isinstance(csr, DeviceCSR) else csr
    computed = "bfs" if order == "auto" else order
    features, before = {}, None
    if order == "auto":
        if products is None:
            return OrderChoice("keep", "order kept: without a products= hint, renumbering "
                               "(which costs about as much as 10³–10⁴ products on a GPU) is not "
                               "considered"), csr
        if not csr.nnz:
            return OrderChoice("keep", "order kept: A has no nonzeros"), csr
        before = sampled_locality(structure)
        itemsize = np.dtype(csr.dtype).itemsize
        floor = Locality(min(before.sectors_per_nnz, sector_floor(csr.nnz, m, itemsize)),
                         min(before.reach, csr.nnz / m))
        best, now = gain_per_product(csr, before, floor, device, rule, gathers)
        walked_on_gpu = walks_on_gpu(computed, walk_on if walk_on is not None else csr)
        estimate = ordering_seconds(csr.nnz, computed, walked_on_gpu,
                                    isinstance(csr, DeviceCSR) or walk_on is not None)
        features = {"x_sectors_per_nnz_warp_before": before.sectors_per_nnz,
                    "x_reach_before": before.reach, "x_sectors_floor": floor.sectors_per_nnz,
                    "x_reach_floor": floor.reach}
        if best < MIN_FLOOR_GAIN * now or products * best <= estimate:
            why = (f"even an ideal order ({floor.sectors_per_nnz:.3g} x sectors per nonzero "
                   f"within {floor.reach:,.0f} columns of the row, against "
                   f"{before.sectors_per_nnz:.3g} within {before.reach:,.0f} now) would gain "
                   f"{max(best, 0) / now:.0%} of a product"
                   f"{' after the gathers of x and y around it' if gathers else ''}, less than "
                   f"{MIN_FLOOR_GAIN:.0%}" if best < MIN_FLOOR_GAIN * now else
                   f"even an ideal order would gain at most {products:,} {counted} × "
                   f"{best * 1e6:.3g} µs = {products * best:.3g} s, less than the "
                   f"{computed} order's estimated {estimate:.3g} s"
                   f"{' (walked on the GPU)' if walked_on_gpu else ''}")
            return OrderChoice("keep", f"order kept by {rule.describe()}: {why}", features=features,
                               seconds=time.perf_counter() - started), csr
    if m:
        perm, where = computed_order(csr, computed, walk_on)
        perm = perm.astype(structure.indptr.dtype, copy=False)
        inverse = inverse_of(perm)
        ordered = permute(csr, perm, inverse)
    else:  # nothing to renumber (SciPy's RCM reduces over the rows and fails on none)
        perm = inverse = np.empty(0, dtype=structure.indptr.dtype)
        ordered, where = csr, "on the host"
    seconds = time.perf_counter() - started
    features.update(order_features(csr, "_before", before))
    features.update(order_features(ordered, "_after"))
    before, after = locality_of(features, "_before"), locality_of(features, "_after")
    summary = (f"x sectors per nonzero {before.sectors_per_nnz:.3g} → "
               f"{after.sectors_per_nnz:.3g}, reach {before.reach:,.0f} → {after.reach:,.0f} "
               f"columns, bandwidth "
               f"{features['bandwidth_before']:,.0f} → {features['bandwidth_after']:,.0f}, "
               f"profile {features['profile_before']:,.1f} → {features['profile_after']:,.1f}; "
               f"computing the order ({where}) and permuting A took {seconds:.3g} s")
    if order != "auto":
        return OrderChoice(order, f"order {order} (order={order!r}): {summary}", perm, inverse,
                           features, seconds), ordered
    gain, now = gain_per_product(csr, before, after, device, rule, gathers)
    seconds = time.perf_counter() - started  # the order's features are part of its cost
    if gain >= MIN_RELATIVE_GAIN * now and products * gain > seconds:
        return OrderChoice(
            computed, f"order {computed}, chosen by {rule.describe()}: {products:,} {counted} × "
            f"{gain * 1e6:.3g} µs gained ({gain / now:.0%} of a product) exceed its cost; "
            f"{summary}", perm, inverse, features, time.perf_counter() - started,
            kept_matrix=csr), ordered
    return OrderChoice(
        "keep", f"order kept by {rule.describe()}: the {computed} order would gain {products:,} "
        f"{counted} × {gain * 1e6:.3g} µs ({gain / now:.0%} of a product), not enough for its "
        f"cost; {summary}", features=features, seconds=time.perf_counter() - started), csr
