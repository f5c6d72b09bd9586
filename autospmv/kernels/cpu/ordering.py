"""Orders of rows and columns computed on the CPU with numba: reverse Cuthill–McKee over the graph
of A's rows (:func:`rows_rcm`), the order ``"bfs"`` of :mod:`autospmv._decide.ordering`.

The graph: vertex i's neighbours are the columns of row i, the entries of x that the product
reads for row i. Walking them needs no ``A + Aᵀ``, which SciPy's ``reverse_cuthill_mckee`` forms
first (about half its time on a 10⁷-nonzero matrix). For a structurally symmetric A the graph
is the one RCM walks; for any other square A the order still places the columns each row reads
next to the rows that read them, which is what a product's gathers of x need.

The walk, in full (so that it is reproducible from this description):

1. Each vertex's degree is its row's length. The vertices sorted by degree (ties: lowest index
   first; a counting sort, O(n)) give the starts.
2. The first unvisited vertex of that list starts a breadth-first walk. Each vertex taken from
   the queue appends its unvisited neighbours to the queue, in order of degree (ties: the order
   of the row's columns as stored, ascending in a canonical matrix). When the queue empties and
   vertices remain, the next start is again the first unvisited vertex of the sorted list: each
   weakly reachable part gets its own walk, from a vertex of least degree.
3. The visiting order reversed is ``perm``: row i of ``P A Pᵀ`` is row ``perm[i]`` of A.

The cost is O(n + nnz) besides the sorts of each vertex's newly reached neighbours
(:func:`.sorting.sort_run`, on their degrees read once as they are queued); it is sequential (a
breadth-first walk in this order is), and its reads of the visited flags and degrees follow the
columns.
"""

from __future__ import annotations

import numpy as np

from ..._support.jit import njit
from .sorting import sort_run


@njit(cache=True)
def _vertices_by_degree(degree):
    """The vertices sorted by degree, ties by index: a counting sort."""
    n = degree.shape[0]
    top = 0
    for v in range(n):
        if degree[v] > top:
            top = degree[v]
    start = np.zeros(top + 2, np.int64)
    for v in range(n):
        start[degree[v] + 1] += 1
    for d in range(top + 1):
        start[d + 1] += start[d]
    ordered = np.empty(n, np.int64)
    for v in range(n):
        ordered[start[degree[v]]] = v
        start[degree[v]] += 1
    return ordered


@njit(cache=True)
def _rows_rcm(indptr, indices, n):
    degree = np.empty(n, np.int64)
    for v in range(n):
        degree[v] = indptr[v + 1] - indptr[v]
    starts = _vertices_by_degree(degree)
    queue = np.empty(n, np.int64)
    keys = np.empty(n, np.int64)  # the degree of queue[i], read when it was queued
    visited = np.zeros(n, np.bool_)
    head = 0
    tail = 0
    scan = 0
    while tail < n:
        while visited[starts[scan]]:
            scan += 1
        s = starts[scan]
        visited[s] = True
        queue[tail] = s
        tail += 1
        while head < tail:
            v = queue[head]
            head += 1
            first = tail
            for k in range(indptr[v], indptr[v + 1]):
                w = indices[k]
                if not visited[w]:
                    visited[w] = True
                    queue[tail] = w
                    keys[tail] = indptr[w + 1] - indptr[w]
                    tail += 1
            sort_run(keys, queue, first, tail)
    return queue[::-1].copy()


def rows_rcm(indptr: np.ndarray, indices: np.ndarray, n: int) -> np.ndarray:
    """Reverse Cuthill–McKee order of the graph of a square matrix's rows (see the module
    docstring).

    Parameters
    ----------
    indptr, indices : numpy.ndarray
        The row pointer and column indices of an n × n CSR matrix (int32 or int64; the columns
        of a row need not be sorted, but duplicates are walked once).
    n : int
        The matrix's order.

    Returns
    -------
    numpy.ndarray
        ``perm`` (int64): row i of ``P A Pᵀ`` is row ``perm[i]`` of A; a permutation of
        ``range(n)``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0], [1, 0, 1]]))
    >>> rows_rcm(A.indptr, A.indices, 3).tolist()
    [2, 0, 1]
    """
    if n == 0:
        return np.empty(0, np.int64)
    return _rows_rcm(indptr, indices, np.int64(n))
