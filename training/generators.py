"""The synthetic matrix generators: one function per structure family, seeded by the name.

Each generator takes the entry's name (the seed: the same name always gives the same matrix),
a target number of nonzeros and its family's parameters, and returns a CSR matrix with random
values. :data:`GENERATORS` names them for :data:`training.corpus.VARIANTS`, which lists the
variants a corpus is built from; corpus.py keeps the presets, the files and the grown copies.
"""

from __future__ import annotations

import math
import zlib
from typing import Callable

import numpy as np
import scipy.sparse as sp


def seeded_rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _with_values(A: sp.spmatrix, rng) -> sp.csr_matrix:
    """A's structure as CSR with values uniform in [-1, 1) (no exact zeros)."""
    A = sp.csr_matrix(A)
    A.sum_duplicates()
    A.data = rng.uniform(-1.0, 1.0, A.nnz)
    A.data[A.data == 0.0] = 0.5
    return A


def _from_rows(lengths: np.ndarray, columns: np.ndarray, n: int, rng) -> sp.csr_matrix:
    """CSR from row lengths and the concatenated (unsorted, possibly repeated) columns."""
    indptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    A = sp.csr_matrix((np.ones(columns.size), columns, indptr), shape=(lengths.size, n))
    return _with_values(A, rng)


def _tridiagonal_pattern(k: int) -> sp.csr_matrix:
    return sp.diags_array([np.ones(k - 1), np.ones(k), np.ones(k - 1)], offsets=[-1, 0, 1],
                          shape=(k, k), format="csr")


def _stencil_pattern(points: int, k: int) -> sp.csr_matrix:
    """Pattern of a 5/9-point (2-D, k² unknowns) or 7/27-point (3-D, k³ unknowns) stencil."""
    T, I = _tridiagonal_pattern(k), sp.identity(k, format="csr")
    if points == 5:
        return sp.kron(I, T) + sp.kron(T, I)
    if points == 9:
        return sp.kron(T, T)
    if points == 7:
        return sp.kron(I, sp.kron(I, T)) + sp.kron(I, sp.kron(T, I)) + sp.kron(T, sp.kron(I, I))
    if points == 27:
        return sp.kron(T, sp.kron(T, T))
    raise ValueError(f"no {points}-point stencil; choose 5, 9 (2-D) or 7, 27 (3-D)")


def _side(unknowns: float, dims: int) -> int:
    return max(2, math.ceil(unknowns ** (1 / dims)))


def stencil(name: str, nnz: int, points: int) -> sp.csr_matrix:
    dims = 2 if points in (5, 9) else 3
    return _with_values(_stencil_pattern(points, _side(nnz / points, dims)), seeded_rng(name))


def banded(name: str, nnz: int, half_width: int) -> sp.csr_matrix:
    m = max(2 * half_width + 1, nnz // (2 * half_width + 1))
    offsets = list(range(-half_width, half_width + 1))
    pattern = sp.diags_array([np.ones(m - abs(o)) for o in offsets], offsets=offsets,
                             shape=(m, m), format="csr")
    return _with_values(pattern, seeded_rng(name))


def block_fem(name: str, nnz: int, block: int, mesh_points: int) -> sp.csr_matrix:
    """A mesh graph (a stencil pattern) with every node carrying ``block`` unknowns."""
    dims = 2 if mesh_points in (5, 9) else 3
    mesh = _stencil_pattern(mesh_points, _side(nnz / (mesh_points * block * block), dims))
    return _with_values(sp.kron(mesh, np.ones((block, block)), format="csr"), seeded_rng(name))


def uniform_random(name: str, nnz: int, mean: float) -> sp.csr_matrix:
    rng = seeded_rng(name)
    m = max(1, round(nnz / mean))
    lengths = rng.poisson(mean, m)
    return _from_rows(lengths, rng.integers(0, m, lengths.sum()), m, rng)


def _pareto_lengths(rng, alpha: float, count: int, cap: int) -> np.ndarray:
    """Discrete Pareto lengths ≥ 1 with tail exponent ``alpha``, at most ``cap``."""
    u = 1.0 - rng.random(count)
    return np.minimum(np.floor(u ** (-1.0 / (alpha - 1.0))), cap).astype(np.int64)


def _rows_for(rng, nnz: int, draw: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """Row lengths summing to about ``nnz`` for square matrices whose length cap is m itself:
    estimate m from a first draw, then draw again with that m."""
    m = max(16, nnz // 4)
    for _ in range(3):
        lengths = draw(m, m)
        m = max(16, round(m * nnz / max(lengths.sum(), 1)))
    return draw(m, m)


def power_law(name: str, nnz: int, alpha: float) -> sp.csr_matrix:
    rng = seeded_rng(name)
    lengths = _rows_for(rng, nnz, lambda count, cap: _pareto_lengths(rng, alpha, count, cap))
    m = lengths.size
    hot = np.floor(m * rng.random(lengths.sum()) ** 2.5).astype(np.int64)  # popular columns
    return _from_rows(lengths, rng.permutation(m)[hot], m, rng)


def dense_rows(name: str, nnz: int, dense: int, fraction: float) -> sp.csr_matrix:
    """Short rows (1 + Poisson(3)) and ``dense`` rows with ``fraction``·n entries each."""
    rng = seeded_rng(name)
    m = max(dense + 8, round(nnz / (4 + dense * fraction)))
    lengths = 1 + rng.poisson(3.0, m)
    long_rows = rng.choice(m, dense, replace=False)
    lengths[long_rows] = max(1, round(fraction * m))
    columns = rng.integers(0, m, lengths.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for row in long_rows:  # distinct, evenly spread columns
        columns[starts[row]:starts[row + 1]] = rng.choice(m, lengths[row], replace=False)
    return _from_rows(lengths, columns, m, rng)


def road(name: str, nnz: int) -> sp.csr_matrix:
    """1–4 entries per row; 95 % of them within ±64 of the diagonal, the rest anywhere."""
    rng = seeded_rng(name)
    m = max(2, round(nnz / 2.5))
    lengths = rng.integers(1, 5, m)
    rows = np.repeat(np.arange(m), lengths)
    columns = np.clip(rows + rng.integers(-64, 65, rows.size), 0, m - 1)
    far = rng.random(rows.size) < 0.05
    columns[far] = rng.integers(0, m, far.sum())
    return _from_rows(lengths, columns, m, rng)


def lp(name: str, nnz: int, aspect: float) -> sp.csr_matrix:
    """An m × (aspect·m) matrix: log-normal row lengths (mean ≈ 10) plus a few linking rows
    that together hold a tenth of the nonzeros."""
    rng = seeded_rng(name)
    m = max(8, round(0.9 * nnz / 10.5))
    n = max(1, round(aspect * m))
    lengths = np.minimum(1 + np.floor(rng.lognormal(1.8, 1.0, m)), n).astype(np.int64)
    linking = rng.choice(m, min(50, max(1, m // 1000)), replace=False)
    lengths[linking] = min(n, max(1, round(0.1 * nnz / linking.size)))
    return _from_rows(lengths, rng.integers(0, n, lengths.sum()), n, rng)


def long_rows(name: str, nnz: int, mean: int) -> sp.csr_matrix:
    """Few rows of about ``mean`` entries each (uniform in [mean/2, 3·mean/2]) over 2·mean
    columns: the shape of wide LP blocks (FIT2D-like), where each row spans many GPU tiles."""
    rng = seeded_rng(name)
    m = max(1, round(nnz / mean))
    n = 2 * mean
    lengths = rng.integers(mean // 2, 3 * mean // 2 + 1, m)
    return _from_rows(lengths, rng.integers(0, n, lengths.sum()), n, rng)


def diagonal(name: str, nnz: int) -> sp.csr_matrix:
    return _with_values(sp.identity(max(1, nnz), format="csr"), seeded_rng(name))


def block_diagonal(name: str, nnz: int, block: int) -> sp.csr_matrix:
    """Dense diagonal blocks with sizes uniform in [b/2, 3·b/2], b = min(block, √nnz)."""
    rng = seeded_rng(name)
    block = max(1, min(block, math.isqrt(nnz)))
    sizes = rng.integers(max(1, block // 2), 3 * block // 2 + 1, 2 * (nnz // block**2) + 2)
    count = np.searchsorted(np.cumsum(sizes.astype(np.int64) ** 2), nnz) + 1
    sizes = sizes[:count]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    lengths = np.repeat(sizes, sizes)  # each row of a block spans the block
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    within = np.arange(lengths.sum()) - np.repeat(starts, lengths)
    columns = np.repeat(np.repeat(offsets, sizes), lengths) + within
    return _from_rows(lengths, columns, int(sizes.sum()), rng)


def permuted(name: str, nnz: int, base: str, **params) -> sp.csr_matrix:
    """``base`` (a generator name in :data:`GENERATORS`) under a random symmetric permutation."""
    A = GENERATORS[base](name, nnz, **params).tocoo()
    inverse = np.argsort(seeded_rng(name + "/perm").permutation(A.shape[0]))
    return _with_values(sp.coo_matrix((A.data, (inverse[A.row], inverse[A.col])), A.shape),
                        seeded_rng(name))


GENERATORS: dict[str, Callable[..., sp.csr_matrix]] = {
    "stencil": stencil, "banded": banded, "block_fem": block_fem,
    "uniform_random": uniform_random, "power_law": power_law, "dense_rows": dense_rows,
    "road": road, "lp": lp, "long_rows": long_rows, "diagonal": diagonal,
    "block_diagonal": block_diagonal, "permuted": permuted,
}  # fmt: skip
