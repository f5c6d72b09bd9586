"""Matrices for the tests of the order of rows and columns (``test_ordering.py``, and the walk
on the GPU under numba-cuda's simulator, ``device_order_simulator_worker.py``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def grid_laplacian(side: int, shift: float = 0.05) -> sp.csr_matrix:
    """The 5-point Laplacian of a side × side grid, shifted to be definite."""
    eye = sp.eye(side)
    line = sp.diags([-1.0, 2.0 + shift / 2, -1.0], [-1, 0, 1], shape=(side, side))
    return (sp.kron(eye, line) + sp.kron(line, eye)).tocsr()


def numbered_at_random(A, seed: int = 0) -> sp.csr_matrix:
    """A with its rows and columns renumbered by one random permutation."""
    p = np.random.default_rng(seed).permutation(A.shape[0])
    B = A[p][:, p].tocsr()
    B.sort_indices()
    return B


def with_empty_rows(n: int = 120) -> sp.csr_matrix:
    A = sp.random(n, n, density=0.05, format="lil", random_state=3)
    A[::7, :] = 0
    A[5, :] = np.arange(n) + 1.0  # one long row
    return A.tocsr()


def walked_by_the_description(A) -> list[int]:
    """The order of :mod:`autospmv.kernels.cpu.ordering`'s module docstring, in plain Python."""
    n = A.shape[0]
    degree = np.diff(A.indptr)
    visited = [False] * n
    walk = []
    for start in sorted(range(n), key=lambda v: (degree[v], v)):
        if visited[start]:
            continue
        visited[start] = True
        walk.append(start)
        head = len(walk) - 1
        while head < len(walk):
            v = walk[head]
            head += 1
            reached = []
            for w in A.indices[A.indptr[v]:A.indptr[v + 1]]:
                if not visited[w]:
                    visited[w] = True
                    reached.append(int(w))
            walk += sorted(reached, key=lambda w: degree[w])  # stable: ties as stored
    return walk[::-1]


def star_with_extra_edges(n: int = 400) -> sp.csr_matrix:
    """Vertex 0 joined to every other (one vertex reaches many more than the insertion sort's
    limit at once), plus random edges that give the leaves different degrees."""
    star = sp.csr_matrix((np.ones(n - 1), (np.zeros(n - 1, int), np.arange(1, n))), shape=(n, n))
    extra = sp.random(n, n, density=3 / n, format="csr", random_state=8)
    A = (star + star.T + extra).tocsr()
    A.sort_indices()
    return A


WALKED = {
    "grid_at_random": lambda: numbered_at_random(grid_laplacian(20)),
    "nonsymmetric": lambda: sp.random(300, 300, density=0.01, format="csr", random_state=4),
    "empty_rows": with_empty_rows,
    "components": lambda: numbered_at_random(sp.block_diag(
        [grid_laplacian(6), sp.eye(5), grid_laplacian(4), sp.csr_matrix((7, 7))]).tocsr(), 2),
    "star": star_with_extra_edges,
    "unsorted_columns": lambda: unsorted(numbered_at_random(grid_laplacian(9), 3)),
}


def unsorted(A) -> sp.csr_matrix:
    """A with the columns of each row in reverse order (the same matrix, stored otherwise)."""
    B = A.copy()
    for r in range(B.shape[0]):
        a, b = B.indptr[r], B.indptr[r + 1]
        B.indices[a:b] = B.indices[a:b][::-1].copy()
        B.data[a:b] = B.data[a:b][::-1].copy()
    B.has_sorted_indices = False
    return B


def structure_of_a_plus_at(A) -> sp.csr_matrix:
    """The structure of A + Aᵀ (ones where either has an entry; rows sorted): the graph the
    bfs order's walk on the GPU walks."""
    pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    both = (pattern + pattern.T).tocsr()
    both.sort_indices()
    return both
