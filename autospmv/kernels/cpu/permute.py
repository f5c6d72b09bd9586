"""Permutations on the CPU: the passes that carry vectors between the caller's order and the
order an operator's matrix is stored in, and the permuted copy of a CSR matrix.

An operator whose matrix runs in another order (``P A Pᵀ``, :mod:`autospmv._decide.ordering`)
computes ``y = A @ x`` as ``x_p = x[perm]``, ``y_p = (P A Pᵀ) @ x_p``, ``y = y_p[inverse]``:
two permutations of a vector (one pass over it each) around the kernel's own product.
:class:`PermutedCpuBackend` wraps the CPU backend of the permuted matrix with them; its
workspaces are allocated once per dtype.

A permutation ``dst = src[perm]`` runs in one of two forms that give the same vector
(:func:`permute`): the gather ``dst[i] = src[perm[i]]`` (reads scattered, writes in order) or the
scatter ``dst[inverse[j]] = src[j]`` (reads in order, writes scattered). A core waits for a
scattered read that misses the cache but not for a scattered write, so for a vector larger than
:data:`SCATTER_CACHE_SHARE` of the last-level cache the scatter is faster: 7.4 against 11.3 ms for
3.7·10⁶ float64 elements, 4.6 against 5.7 ms in float32, 2.5 against 3.5 ms for 2·10⁶ float64;
and slower within it (1.6 against 1.2 ms for 2·10⁶ float32, 8 MB), on two threads of a 2-core
AMD EPYC with 32 MiB of L3. The same holds for the rows of a block (float64, 3.7·10⁶ rows: 21.5
against 32.0 ms at 2 columns, 29.5 against 37.8 at 4, 58.6 against 64.2 at 16).
"""

from __future__ import annotations

import threading

import numba
import numpy as np

from ..._support.devices import cpu_cache_bytes
from ..._support.jit import specialisations
from .sorting import sort_run

PARALLEL_MIN_ROWS = 1 << 16
"""Shortest vector whose gathers run on the product's threads (shorter ones run serially)."""


def _gather(index, src, dst):
    for i in numba.prange(dst.shape[0]):
        dst[i] = src[index[i]]


def _scatter(index, src, dst):
    for j in numba.prange(src.shape[0]):
        dst[index[j]] = src[j]


def _scatter_rows(index, src, dst):
    for j in numba.prange(src.shape[0]):
        row = index[j]
        for c in range(src.shape[1]):
            dst[row, c] = src[j, c]


def _gather_rows(index, src, dst):
    for i in numba.prange(dst.shape[0]):
        row = index[i]
        for c in range(dst.shape[1]):
            dst[i, c] = src[row, c]


gather_serial, gather_parallel = specialisations(_gather)
scatter_serial, scatter_parallel = specialisations(_scatter)
gather_rows_serial, gather_rows_parallel = specialisations(_gather_rows)
scatter_rows_serial, scatter_rows_parallel = specialisations(_scatter_rows)


def gather(index: np.ndarray, src: np.ndarray, dst: np.ndarray, parallel: bool = False) -> None:
    """``dst[i] = src[index[i]]`` for every i (``dst[i, :] = src[index[i], :]`` for 2-D arrays),
    each element of dst written once, in order; on numba's threads when ``parallel``."""
    if dst.ndim == 2:
        (gather_rows_parallel if parallel else gather_rows_serial)(index, src, dst)
    else:
        (gather_parallel if parallel else gather_serial)(index, src, dst)


SCATTER_CACHE_SHARE = 0.25
"""An array of more bytes than this part of the last-level cache is permuted by the scatter
form (see the module docstring)."""


def permute(perm: np.ndarray, inverse: np.ndarray, src: np.ndarray, dst: np.ndarray,
            parallel: bool = False) -> None:
    """``dst = src[perm]`` (``inverse`` is perm's inverse), elements of vectors or rows of 2-D
    arrays, in the faster of the two forms of the module docstring: an array larger than
    :data:`SCATTER_CACHE_SHARE` of the last-level cache by the scatter, a smaller one by the
    gather. On numba's threads when ``parallel``; the result is the same either way."""
    if dst.nbytes <= SCATTER_CACHE_SHARE * cpu_cache_bytes():
        gather(perm, src, dst, parallel)
    elif dst.ndim == 2:
        (scatter_rows_parallel if parallel else scatter_rows_serial)(inverse, src, dst)
    else:
        (scatter_parallel if parallel else scatter_serial)(inverse, src, dst)


def _permuted_rows(indptr, indices, data, inverse, out_indptr, out_indices, out_data):
    # A's row r becomes row inverse[r] of the result (its place in out_indptr already known),
    # each column renumbered: A is read in order and the rows written where they go (a
    # scatter, whose writes a core does not wait for); then each row is sorted again. Every
    # row is written and sorted by one thread.
    n = indptr.shape[0] - 1
    for row in numba.prange(n):
        start = out_indptr[inverse[row]]
        source = indptr[row]
        for k in range(indptr[row + 1] - source):
            out_indices[start + k] = inverse[indices[source + k]]
            out_data[start + k] = data[source + k]
    for i in numba.prange(n):
        sort_run(out_indices, out_data, out_indptr[i], out_indptr[i + 1])


permuted_rows_serial, permuted_rows_parallel = specialisations(_permuted_rows)

PARALLEL_MIN_NNZ = 1 << 18
"""Fewest nonzeros whose permuted copy (:func:`permuted_csr`) is built on numba's threads."""


def permuted_csr(indptr, indices, data, perm, inverse, parallel: bool | None = None):
    """The arrays of ``P A Pᵀ`` for a canonical square CSR matrix (sorted columns, no
    duplicates): row i is A's row ``perm[i]`` with each column j renumbered ``inverse[j]`` and
    sorted again, so the result is canonical, with the input's index dtype. A's rows are read
    in order and written to their new places (a scatter of rows, whose writes a core does not
    wait for, where reading A's rows in the new order would wait on each). The rows are built
    on numba's threads where ``parallel`` (default: from :data:`PARALLEL_MIN_NNZ` nonzeros),
    each row by one thread, so the result does not depend on it.

    Returns
    -------
    tuple of numpy.ndarray
        ``(indptr, indices, data)``, new arrays.
    """
    perm = perm.astype(indptr.dtype, copy=False)
    out_indptr = np.empty_like(indptr)
    out_indptr[0] = 0
    np.cumsum(np.diff(indptr)[perm], out=out_indptr[1:])
    out_indices = np.empty_like(indices)
    out_data = np.empty_like(data)
    if parallel is None:
        parallel = indices.shape[0] >= PARALLEL_MIN_NNZ
    build = permuted_rows_parallel if parallel else permuted_rows_serial
    build(indptr, indices, data, inverse.astype(indices.dtype, copy=False), out_indptr,
          out_indices, out_data)
    return out_indptr, out_indices, out_data


class PermutedCpuBackend:
    """The CPU backend of ``P A Pᵀ`` seen in the caller's order: every product gathers x into
    the matrix's order, runs the inner backend, and gathers the result back (see the module
    docstring). The workspaces of one-vector products are allocated once per dtype; a call
    that finds them in use by another thread takes vectors of its own for that call."""

    def __init__(self, inner, perm: np.ndarray, inverse: np.ndarray):
        self.inner = inner
        self.perm = perm
        self.inverse = inverse
        self._parallel = perm.shape[0] >= PARALLEL_MIN_ROWS and (inner.threads or 1) > 1
        self._workspaces = {}  # dtype -> (x_p, y_p)
        self._lock = threading.Lock()
        self.host_rmatvec = None
        """As the inner backend's (Aᵀ z in the caller's order), or None where it has none."""
        if inner.host_rmatvec is not None:
            self.host_rmatvec = self._rmatvec

    def __getattr__(self, name):  # threads, threads_reason, engine_note, multi
        return getattr(self.inner, name)

    @property
    def workspace_nbytes(self) -> int:
        """Bytes of the workspaces allocated so far."""
        return sum(a.nbytes + b.nbytes for a, b in self._workspaces.values())

    def _through(self, run, x: np.ndarray, y: np.ndarray) -> None:
        n, m = x.shape[0], y.shape[0]
        own = self._lock.acquire(blocking=False)
        try:
            if own:
                work = self._workspaces.get(x.dtype)
                if work is None:
                    work = self._workspaces[x.dtype] = (np.empty(n, x.dtype),
                                                        np.empty(m, y.dtype))
                x_p, y_p = work
            else:
                x_p, y_p = np.empty(n, x.dtype), np.empty(m, y.dtype)
            permute(self.perm, self.inverse, x, x_p, self._parallel)
            run(x_p, y_p)
            permute(self.inverse, self.perm, y_p, y, self._parallel)
        finally:
            if own:
                self._lock.release()

    def host_matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        if y.shape[0]:
            self._through(self.inner.host_matvec, x, y)

    def _rmatvec(self, z: np.ndarray, y: np.ndarray) -> None:
        if y.shape[0]:
            self._through(self.inner.host_rmatvec, z, y)

    def set_up_multi(self, matrix_csr, notes: list | None = None, spmm_rule=None
                     ) -> tuple[str, tuple]:
        return self.inner.set_up_multi(matrix_csr, notes, spmm_rule)

    def host_matmat(self, X: np.ndarray, Y: np.ndarray) -> None:
        """Y = A @ X for C-contiguous X and Y: the rows of X gathered into the matrix's order
        and those of the result back, through arrays made for the call."""
        X_p = np.empty_like(X)
        Y_p = np.empty_like(Y)
        permute(self.perm, self.inverse, X, X_p, self._parallel)
        self.inner.host_matmat(X_p, Y_p)
        permute(self.inverse, self.perm, Y_p, Y, self._parallel)

    def device_matmat(self, X):
        return self.inner.device_matmat(X)

    def device_matvec(self, x, out):
        return self.inner.device_matvec(x, out)
