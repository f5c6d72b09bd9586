"""How rows and columns are cut into parts, and how a part splits into owned and ghost blocks.

NumPy and SciPy (and, for the ghost columns' renumbering, the compiled passes of
:mod:`._passes`), run on the client (bounds) and on the workers (splits).

Rank r owns rows ``row_bounds[r]:row_bounds[r + 1]`` of A and of y, and entries
``col_bounds[r]:col_bounds[r + 1]`` of x (for a square A the two bounds are the same). Its row
block splits as PETSc's MPIAIJ matrices and Ginkgo's distributed matrices do:

* the **owned block**: the entries whose columns rank r owns, with columns renumbered from 0;
  it multiplies rank r's own chunk of x;
* the **ghost block**: the entries whose columns other ranks own, kept only for the rows that
  have any (a band matrix has a few such rows at each end of its block), with columns renumbered
  to positions in the sorted list of distinct ghost columns. It multiplies the ghost entries of
  x, which the owners send before each product; its result is added to those rows of y.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .._support.validation import canonicalize
from ._passes import look_up, mark


def row_partition(indptr: np.ndarray, parts: int) -> np.ndarray:
    """Row boundaries (``parts + 1`` of them, from 0 to m) of contiguous blocks of about equal
    work, where a row's work is its nonzeros plus one (its entry of y, and so that rows without
    nonzeros are spread too).

    Boundary k is the row boundary whose cumulative work is nearest to k/parts of the total, so
    a row longer than a share gets a block of its own rather than joining its neighbours'.
    Blocks may be empty when a row holds more than a share or there are more parts than rows.
    """
    m = indptr.size - 1
    work = indptr.astype(np.int64) + np.arange(m + 1, dtype=np.int64)  # cumulative work
    targets = work[-1] * np.arange(1, parts, dtype=np.float64) / parts
    above = np.minimum(np.searchsorted(work, targets, side="left"), m)
    below = np.maximum(above - 1, 0)
    nearest = np.where(targets - work[below] < work[above] - targets, below, above)
    return np.concatenate(([0], nearest, [m])).astype(np.int64)


def even_bounds(size: int, parts: int) -> np.ndarray:
    """``parts + 1`` boundaries cutting ``range(size)`` into blocks whose lengths differ by at
    most one."""
    return (np.arange(parts + 1, dtype=np.int64) * size) // parts


def check_bounds(bounds, size: int, parts: int, name: str) -> np.ndarray:
    """``bounds`` as an int64 array, after checking that it cuts ``range(size)`` into
    ``parts`` contiguous blocks (non-decreasing, from 0 to size)."""
    bounds = np.asarray(bounds)
    if (bounds.ndim != 1 or bounds.size != parts + 1 or bounds.dtype.kind not in "iu"
            or bounds[0] != 0 or bounds[-1] != size or np.any(np.diff(bounds) < 0)):
        raise ValueError(f"{name} must be {parts + 1} non-decreasing integers from 0 to {size} "
                         f"(one block per worker); got {bounds.tolist()!r}")
    return bounds.astype(np.int64)


@dataclasses.dataclass(eq=False)
class Split:
    """A rank's row block cut into its owned and ghost blocks (see the module docs)."""

    owned: sp.csr_matrix
    """rows × owned columns, columns counted from the rank's first owned column."""
    ghost: sp.csr_matrix
    """``ghost_rows.size`` × ``ghost_columns.size``."""
    ghost_rows: np.ndarray
    """The block's rows (local numbers) that have ghost entries, increasing."""
    ghost_columns: np.ndarray
    """The distinct ghost columns (global numbers), increasing."""
    sources: dict
    """``{owner rank: (start, stop)}``: the ghost columns owner rank sends, as a slice of
    :attr:`ghost_columns` (contiguous, since ranks own contiguous columns)."""


def canonical_block(block, rows: int, n: int, where: str) -> sp.csr_matrix:
    """A row block as canonical CSR (sorted, summed indices; float32 or float64), checked as
    :func:`autospmv.prepare` checks a matrix (:func:`autospmv._support.validation.canonicalize`:
    every index in range, offsets consistent, a supported dtype) before anything splits it;
    ``where`` names the block (which rank's) in the ValueError or TypeError."""
    if not sp.issparse(block):
        raise TypeError(f"{where} must be a SciPy sparse matrix; got {type(block).__name__}")
    if block.shape != (rows, n):
        raise ValueError(f"{where}, for {rows} rows of a matrix with {n} columns, must have "
                         f"shape {(rows, n)}; got {block.shape}")
    try:
        return canonicalize(block)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{where}: {error}") from None


def _index_dtype(size: int):
    return np.int32 if size < 2**31 else np.int64


def _renumber(columns: np.ndarray, n: int) -> tuple:
    """``(distinct columns, increasing; each entry's position among them)``. A mark per column
    of A (linear in n and the entries) where n is not much larger than the entries; a sort
    otherwise."""
    if n <= 8 * columns.size + (1 << 20):
        marked = np.zeros(n, dtype=bool)
        mark(columns, marked)
        distinct = np.flatnonzero(marked)
        return distinct, look_up(columns, np.cumsum(marked, dtype=_index_dtype(n + 1)))
    distinct = np.unique(columns)
    return distinct, np.searchsorted(distinct, columns).astype(_index_dtype(distinct.size))


def split_block(block: sp.csr_matrix, col_bounds: np.ndarray, rank: int) -> Split:
    """Cut a canonical CSR row block into its owned and ghost blocks (see :class:`Split`).

    Vectorised over the nonzeros, with no per-row loop: the positions of the ghost entries,
    searched for each row's first entry, count the ghost entries before each row, which gives
    both blocks' row pointers (a pass over the few ghost entries of a band matrix, rather than
    a running count over all entries).
    """
    start, stop = int(col_bounds[rank]), int(col_bounds[rank + 1])
    indices, indptr = block.indices, block.indptr
    owned_mask = (indices >= start) & (indices < stop)
    ghost_positions = np.flatnonzero(~owned_mask)
    ghost_indptr = np.searchsorted(ghost_positions, indptr)  # ghost entries before each row
    owned_indptr = indptr - ghost_indptr
    owned_indices = indices[owned_mask]
    owned_indices -= owned_indices.dtype.type(start)
    owned = sp.csr_matrix((block.data[owned_mask],
                           owned_indices.astype(_index_dtype(stop - start), copy=False),
                           owned_indptr.astype(_index_dtype(owned_indptr[-1]), copy=False)),
                          shape=(block.shape[0], stop - start))
    del owned_mask, owned_indices, owned_indptr
    ghost_rows = np.flatnonzero(np.diff(ghost_indptr) > 0)
    ghost_columns, positions = _renumber(indices[ghost_positions], int(col_bounds[-1]))
    row_pointers = np.concatenate(([0], ghost_indptr[ghost_rows + 1]))
    ghost = sp.csr_matrix((block.data[ghost_positions], positions,
                           row_pointers.astype(_index_dtype(row_pointers[-1]))),
                          shape=(ghost_rows.size, ghost_columns.size))
    owners = np.searchsorted(col_bounds, ghost_columns, side="right") - 1
    sources = {}
    if ghost_columns.size:
        edges = np.flatnonzero(np.diff(owners)) + 1
        firsts = np.concatenate(([0], edges))
        lasts = np.concatenate((edges, [ghost_columns.size]))
        sources = {int(owners[a]): (int(a), int(b)) for a, b in zip(firsts, lasts)}
    return Split(owned, ghost, ghost_rows.astype(np.int64), ghost_columns.astype(np.int64),
                 sources)
