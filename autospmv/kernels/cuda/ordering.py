"""Reverse Cuthill–McKee on the GPU, for a matrix that is there: the order ``"bfs"`` of
:mod:`autospmv._decide.ordering` without copying the matrix's structure to the host.

The walk is the host's (:mod:`autospmv.kernels.cpu.ordering`) over the graph of A + Aᵀ, done
level by level: vertex i's neighbours are the columns of row i and the rows of column i, and its
degree is the number of distinct ones. For a structurally symmetric A that is the host's graph,
and the permutation is the host's, element for element; for any other square A it is the
host's walk of the structure of A + Aᵀ. The host walks A's rows alone, which a level-by-level
walk cannot: a vertex that no walked row reaches would need a walk of its own, one after another.

1. Parts: the connected parts of the graph, by propagating the least vertex number along the
   edges with atomic minima and following each vertex's label to its label's label
   (:func:`hook_kernel`, :func:`jump_kernel`), until a pass changes nothing. Each part's start
   is its vertex of least ``(degree, index)`` (:func:`least_key_kernel`), the vertex the host's
   walk starts that part from; the parts are walked in the order of their starts' keys, as the
   host walks them one after another.
2. Levels, every part at once: the frontier is a slice of ``order``, the vertices of one level
   of every part, by part and then in the host's queue order. Each unvisited neighbour of the
   frontier is claimed by its first frontier vertex (an atomic minimum of the frontier
   position: :func:`claim_kernel`), the vertex whose row the host's queue reaches it from; each
   frontier vertex counts what it claimed (:func:`count_kernel`); one block turns the counts
   into offsets (:func:`scan_kernel`); each frontier vertex writes its vertices after the
   frontier at its offset in ascending order (its row and its column merged, as the host reads
   a row of A + Aᵀ) and sorts them by degree, stably, as the host does
   (:func:`place_kernel`).
3. The visiting order is ``order`` grouped by part (levels and queue order kept within each);
   reversed, it is ``perm``.

Every kernel loops over its items with a grid stride, and the frontier's bounds live in a small
array on the device (``state``) that the scan advances, so the levels are queued back to back
without the host: it reads ``state`` every :data:`CHECK_EVERY` levels, to stop. A walk that takes
more passes and levels than its caller allows (a long thin graph, whose levels hold a few
vertices each) stops and returns None; the host's walk does those in O(n + nnz).

These kernels are not part of the shipped cubin archives (:mod:`.ship`): they compile on first
use and are cached on disk like every other kernel.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, int64

from ...formats.base import to_host
from . import jit
from .launch import Launch, repeatable_launch

BLOCK = 128
"""Threads per block of the grid-stride kernels."""
MAX_BLOCKS = 4096
"""The most blocks a grid-stride kernel is launched with."""
SCAN_THREADS = 256
"""Threads of the one block that turns a level's counts into offsets."""
INSERTION_SORT_MAX = 32
"""The longest run of vertices sorted by insertion (as on the host); longer runs are sorted by
merging runs of this length."""
CHECK_EVERY = 8
"""Levels queued between two reads of the frontier's bounds."""
NO_OWNER = np.iinfo(np.int64).max

# Entries of `state`.
LO, HI, PREVIOUS_LO, LEVELS = range(4)


@jit(device=True)
def _next_neighbour(indices, i, last, t_indices, j, t_last):
    """The next of the columns of ``indices[i:last]`` and ``t_indices[j:t_last]`` (both sorted)
    in ascending order, each once, and the positions after it: ``(w, i, j)``."""
    if j >= t_last or (i < last and indices[i] <= t_indices[j]):
        w = int64(indices[i])
        if j < t_last and t_indices[j] == w:
            j += 1
        return w, i + 1, j
    return int64(t_indices[j]), i, j + 1


@jit(device=True)
def _sort_by_degree(order, scratch, first, last, degree):
    """Sort ``order[first:last]`` by the degree of each vertex, stably, through
    ``scratch[first:last]``."""
    for start in range(first, last, INSERTION_SORT_MAX):
        end = min(start + INSERTION_SORT_MAX, last)
        for a in range(start + 1, end):
            v = order[a]
            key = degree[v]
            b = a - 1
            while b >= start and degree[order[b]] > key:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = v
    width = INSERTION_SORT_MAX
    in_order = True
    while first + width < last:
        source, target = (order, scratch) if in_order else (scratch, order)
        for start in range(first, last, 2 * width):
            middle = min(start + width, last)
            end = min(start + 2 * width, last)
            i = start
            j = middle
            for p in range(start, end):
                if j >= end or (i < middle and degree[source[i]] <= degree[source[j]]):
                    target[p] = source[i]
                    i += 1
                else:
                    target[p] = source[j]
                    j += 1
        in_order = not in_order
        width *= 2
    if not in_order:
        for p in range(first, last):
            order[p] = scratch[p]


@jit(cache=True)
def degree_kernel(indptr, indices, t_indptr, t_indices, degree):
    for v in range(cuda.grid(1), degree.shape[0], cuda.gridsize(1)):
        i, last = int64(indptr[v]), int64(indptr[v + 1])
        j, t_last = int64(t_indptr[v]), int64(t_indptr[v + 1])
        d = 0
        while i < last or j < t_last:
            w, i, j = _next_neighbour(indices, i, last, t_indices, j, t_last)
            d += 1
        degree[v] = d


@jit(cache=True)
def hook_kernel(indptr, indices, label, changed):
    for v in range(cuda.grid(1), label.shape[0], cuda.gridsize(1)):
        for k in range(indptr[v], indptr[v + 1]):
            j = int64(indices[k])
            a = label[v]
            b = label[j]
            if a < b:
                cuda.atomic.min(label, b, a)
                cuda.atomic.min(label, j, a)
                changed[0] = 1
            elif b < a:
                cuda.atomic.min(label, a, b)
                cuda.atomic.min(label, v, b)
                changed[0] = 1


@jit(cache=True)
def jump_kernel(label):
    for v in range(cuda.grid(1), label.shape[0], cuda.gridsize(1)):
        above = label[label[v]]
        if above < label[v]:
            label[v] = above


@jit(cache=True)
def least_key_kernel(label, degree, least):
    n = int64(label.shape[0])
    for v in range(cuda.grid(1), n, cuda.gridsize(1)):
        cuda.atomic.min(least, label[v], degree[v] * n + v)


@jit(cache=True)
def claim_kernel(indptr, indices, t_indptr, t_indices, order, state, visited, owner):
    lo = state[LO]
    for t in range(cuda.grid(1), state[HI] - lo, cuda.gridsize(1)):
        u = order[lo + t]
        for k in range(indptr[u], indptr[u + 1]):
            w = indices[k]
            if not visited[w]:
                cuda.atomic.min(owner, w, int64(t))
        for k in range(t_indptr[u], t_indptr[u + 1]):
            w = t_indices[k]
            if not visited[w]:
                cuda.atomic.min(owner, w, int64(t))


@jit(cache=True)
def count_kernel(indptr, indices, t_indptr, t_indices, order, state, visited, owner, counts):
    lo = state[LO]
    for t in range(cuda.grid(1), state[HI] - lo, cuda.gridsize(1)):
        u = order[lo + t]
        i, last = int64(indptr[u]), int64(indptr[u + 1])
        j, t_last = int64(t_indptr[u]), int64(t_indptr[u + 1])
        c = 0
        while i < last or j < t_last:
            w, i, j = _next_neighbour(indices, i, last, t_indices, j, t_last)
            if not visited[w] and owner[w] == t:
                c += 1
        counts[t] = c


@jit(cache=True)
def scan_kernel(counts, state):
    """One block: the level's counts become exclusive offsets, and ``state`` moves to the next
    level (its frontier: what this level places)."""
    partial = cuda.shared.array(SCAN_THREADS, int64)
    tid = cuda.threadIdx.x
    lo = state[LO]
    hi = state[HI]
    width = hi - lo
    chunk = (width + SCAN_THREADS - 1) // SCAN_THREADS
    first = min(tid * chunk, width)
    last = min(first + chunk, width)
    own = int64(0)
    for t in range(first, last):
        own += counts[t]
    partial[tid] = own
    cuda.syncthreads()
    step = 1
    while step < SCAN_THREADS:
        below = partial[tid - step] if tid >= step else int64(0)
        cuda.syncthreads()
        partial[tid] += below
        cuda.syncthreads()
        step *= 2
    running = partial[tid] - own
    for t in range(first, last):
        c = counts[t]
        counts[t] = running
        running += c
    cuda.syncthreads()
    if tid == 0:
        state[PREVIOUS_LO] = lo
        state[LO] = hi
        state[HI] = hi + partial[SCAN_THREADS - 1]
        if width:
            state[LEVELS] += 1


@jit(cache=True)
def place_kernel(indptr, indices, t_indptr, t_indices, order, state, visited, owner, offsets,
                 part, degree, scratch):
    lo = state[PREVIOUS_LO]
    hi = state[LO]
    for t in range(cuda.grid(1), hi - lo, cuda.gridsize(1)):
        u = order[lo + t]
        i, last = int64(indptr[u]), int64(indptr[u + 1])
        j, t_last = int64(t_indptr[u]), int64(t_indptr[u + 1])
        start = hi + offsets[t]
        end = start
        while i < last or j < t_last:
            w, i, j = _next_neighbour(indices, i, last, t_indices, j, t_last)
            if not visited[w] and owner[w] == t:
                order[end] = w
                end += 1
        for p in range(start, end):
            w = order[p]
            visited[w] = 1
            part[w] = part[u]
        _sort_by_degree(order, scratch, start, end, degree)


class DeviceWalk:
    """The arrays and launches of one walk (see the module docstring) over the structure of an
    n × n matrix on the device (arrays of the module ``xp``: CuPy, or NumPy under numba-cuda's
    simulator; the launches compile to PTX from NumPy arrays without a GPU).

    ``t_indptr``, ``t_indices``: Aᵀ's structure (sorted rows), or None where A's structure is
    symmetric (the columns of row i are then the rows of column i, and are walked once)."""

    def __init__(self, indptr, indices, t_indptr, t_indices, n: int, xp):
        self.n = n
        self.xp = xp
        if t_indptr is None:  # no column walked besides the rows
            t_indptr, t_indices = xp.zeros(n + 1, indptr.dtype), xp.zeros(1, indices.dtype)
        self.degree = xp.empty(n, np.int64)
        self.label = xp.arange(n, dtype=np.int64)
        self.changed = xp.zeros(1, np.int64)
        self.least = xp.full(n, NO_OWNER, np.int64)
        self.order = xp.empty(n, np.int64)
        self.visited = xp.zeros(n, np.uint8)
        self.part = xp.empty(n, np.int64)
        self.owner = xp.full(n, NO_OWNER, np.int64)
        self.counts = xp.empty(n, np.int64)
        self.scratch = xp.empty(n, np.int64)
        self.state = xp.zeros(4, np.int64)
        graph = [indptr, indices, t_indptr, t_indices]
        frontier = graph + [self.order, self.state, self.visited, self.owner]
        blocks = min(MAX_BLOCKS, -(-n // BLOCK))

        def grid_stride(kernel, args):
            return Launch(kernel, blocks, BLOCK, args, np.float64)

        self.launches = {
            "degree": grid_stride(degree_kernel, graph + [self.degree]),
            "hook": grid_stride(hook_kernel, [indptr, indices, self.label, self.changed]),
            "jump": grid_stride(jump_kernel, [self.label]),
            "least": grid_stride(least_key_kernel, [self.label, self.degree, self.least]),
            "claim": grid_stride(claim_kernel, frontier),
            "count": grid_stride(count_kernel, frontier + [self.counts]),
            "scan": Launch(scan_kernel, 1, SCAN_THREADS, [self.counts, self.state], np.float64),
            "place": grid_stride(place_kernel, frontier + [self.counts, self.part, self.degree,
                                                           self.scratch]),
        }

    def run(self, max_steps: int):
        """``perm`` (an int64 array of ``xp``: row i of ``P A Pᵀ`` is row ``perm[i]`` of A), or
        None where the parts and levels take more than ``max_steps`` passes."""
        xp, n = self.xp, self.n
        run = {name: repeatable_launch(launch, xp) for name, launch in self.launches.items()}
        run["degree"]()
        passes = 0
        while True:  # the parts
            self.changed[...] = 0
            run["hook"]()
            run["jump"]()
            passes += 1
            if not int(self.changed[0]):
                break
            if passes >= max_steps:
                return None
        run["least"]()
        key = self.degree * n + xp.arange(n, dtype=np.int64)
        starts = xp.flatnonzero(key == self.least[self.label])
        starts = starts[xp.argsort(key[starts])]
        parts = starts.shape[0]
        self.order[:parts] = starts
        self.visited[starts] = 1
        self.part[starts] = xp.arange(parts, dtype=np.int64)
        self.state[HI] = parts
        while True:  # the levels
            for _ in range(CHECK_EVERY):
                for name in ("claim", "count", "scan", "place"):
                    run[name]()
            state = [int(v) for v in to_host(self.state)]
            if state[HI] == n:
                break
            if state[LO] == state[HI]:
                raise RuntimeError(f"the walk on the device reached {state[HI]} of {n} vertices")
            if passes + state[LEVELS] >= max_steps:
                return None
        walk = self.order[xp.argsort(self.part[self.order] * n + xp.arange(n, dtype=np.int64))]
        return walk[::-1].copy()


def rows_rcm_on_device(indptr, indices, t_indptr, t_indices, n: int, xp, max_steps: int):
    """Reverse Cuthill–McKee order of the graph of A + Aᵀ of a square matrix on the device (see
    the module docstring).

    Parameters
    ----------
    indptr, indices : device arrays (CuPy; NumPy under numba-cuda's simulator)
        The row pointer and column indices of a canonical n × n CSR matrix (sorted rows).
    t_indptr, t_indices : device arrays or None
        The same of Aᵀ; None where A's structure is symmetric.
    n : int
        The matrix's order.
    xp : module
        The array module of the arrays.
    max_steps : int
        The most passes (of the parts' labels, and levels of the walk) to take before giving
        up.

    Returns
    -------
    device array or None
        ``perm`` (int64, of ``xp``): row i of ``P A Pᵀ`` is row ``perm[i]`` of A; None where
        the walk would take more than ``max_steps`` passes.

    Examples
    --------
    Under numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``), with NumPy arrays::

        >>> A = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0], [1, 0, 1]]))
        >>> rows_rcm_on_device(A.indptr, A.indices, None, None, 3, np, 100).tolist()
        [2, 0, 1]
    """
    if n == 0:
        return xp.empty(0, np.int64)
    return DeviceWalk(indptr, indices, t_indptr, t_indices, n, xp).run(max_steps)
