"""Multi-vector product (SpMM) on the CPU: ``Y = A @ X`` for a row-major X of k columns, in one
pass over A's CSR arrays.

Why one pass: k products ``A @ x`` read A k times; here each nonzero ``a = A[i, c]`` is read once
and multiplies the whole row ``X[c, :]`` into ``Y[i, :]``. Row-major (C-contiguous) X and Y make
both of those rows contiguous. Each task owns whole rows of Y (``prange`` over rows: no two
threads write one row). Two kernels:

* **k ≤ 4** (:func:`_spmm_few`): each column's sum in a register, the row's nonzeros in order
  (a loop over so few columns would cost more than its work).
* **k > 4** (:func:`_spmm`): Y's row is built in place by a vectorised loop over the columns,
  four nonzeros a step, ``(a₀x₀ + a₁x₁) + (a₂x₂ + a₃x₃)``: the row's first step stores (an empty
  row stores zeros), the others add, so that Y's row is loaded and stored once for every four
  nonzeros instead of once each.

The steps are helper functions inlined by numba (``inline="always"``): a call would count
references to its array arguments, atomically, on every row, which made the few-columns kernel
twice as slow as k separate products. Sums are accumulated in Y's dtype (the product's,
:func:`autospmv._support.validation.result_dtype`), which X also has; A's values may be float32 in
a float64 product.

Weak where k is 1 (a plain SpMV loop is leaner: the operator's own kernel runs then) and where A
has a few very long rows (one task walks each; the CSR product has the same limit).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import uint64

from ..._support.jit import specialisations
from ..._support.threads import choose_threads
from .. import njit, unsigned
from . import bind_threaded


@njit(inline="always")
def _four(y, out, x, data, indices, p, columns, add):
    """``Y[row] (+)= (a₀X[c₀] + a₁X[c₁]) + (a₂X[c₂] + a₃X[c₃])`` for the nonzeros p..p+3 (Y's
    row at ``out``; ``add``: accumulate, else store)."""
    a0, a1 = data[p], data[p + uint64(1)]
    a2, a3 = data[p + uint64(2)], data[p + uint64(3)]
    b0 = uint64(indices[p]) * columns
    b1 = uint64(indices[p + uint64(1)]) * columns
    b2 = uint64(indices[p + uint64(2)]) * columns
    b3 = uint64(indices[p + uint64(3)]) * columns
    if add:
        for j in range(columns):
            y[out + j] += (a0 * x[b0 + j] + a1 * x[b1 + j]) + (a2 * x[b2 + j] + a3 * x[b3 + j])
    else:
        for j in range(columns):
            y[out + j] = (a0 * x[b0 + j] + a1 * x[b1 + j]) + (a2 * x[b2 + j] + a3 * x[b3 + j])


@njit(inline="always")
def _one(y, out, x, data, indices, p, columns, add):
    """``Y[row] (+)= a·X[c]`` for the nonzero p (as :func:`_four`)."""
    a = data[p]
    b = uint64(indices[p]) * columns
    if add:
        for j in range(columns):
            y[out + j] += a * x[b + j]
    else:
        for j in range(columns):
            y[out + j] = a * x[b + j]


def _spmm(indptr, indices, data, x, y, k):
    # x: X flattened (n·k), y: Y flattened (m·k). Positions are unsigned: numba tests a signed
    # index for a negative value on every access, an unsigned one is a plain load.
    columns = uint64(k)
    for i in numba.prange(indptr.shape[0] - 1):
        out = uint64(i) * columns
        p = uint64(indptr[i])
        end = uint64(indptr[i + 1])
        if p + uint64(4) <= end:  # the row's first products are stored, the others added
            _four(y, out, x, data, indices, p, columns, False)
            p += uint64(4)
        elif p < end:
            _one(y, out, x, data, indices, p, columns, False)
            p += uint64(1)
        else:
            for j in range(columns):
                y[out + j] = 0
        while p + uint64(4) <= end:
            _four(y, out, x, data, indices, p, columns, True)
            p += uint64(4)
        while p < end:
            _one(y, out, x, data, indices, p, columns, True)
            p += uint64(1)


FEW_COLUMNS = 4
"""Products with at most this many columns sum each column in a register (:func:`_spmm_few`)."""


@njit(inline="always")
def _few_row(y, out, x, data, indices, start, end, columns):
    """``Y[row] = A[row] @ X`` for at most four columns, each summed in a register, nonzero by
    nonzero (Y's row at ``out``, the row's nonzeros ``start:end``)."""
    acc0 = acc1 = acc2 = acc3 = y.dtype.type(0)
    for p in range(start, end):
        a = data[p]
        b = uint64(indices[p]) * columns
        acc0 += a * x[b]
        if columns > 1:
            acc1 += a * x[b + uint64(1)]
        if columns > 2:
            acc2 += a * x[b + uint64(2)]
        if columns > 3:
            acc3 += a * x[b + uint64(3)]
    y[out] = acc0
    if columns > 1:
        y[out + uint64(1)] = acc1
    if columns > 2:
        y[out + uint64(2)] = acc2
    if columns > 3:
        y[out + uint64(3)] = acc3


def _spmm_few(indptr, indices, data, x, y, k):
    columns = uint64(k)
    for i in numba.prange(indptr.shape[0] - 1):
        _few_row(y, uint64(i) * columns, x, data, indices, uint64(indptr[i]),
                 uint64(indptr[i + 1]), columns)


_spmm_serial, _spmm_parallel = specialisations(_spmm)
_spmm_few_serial, _spmm_few_parallel = specialisations(_spmm_few)


def bind(fmt, params: dict, parallel: bool = False):
    """``run(X, Y)``: ``Y = A @ X`` from a CSR format's arrays, for C-contiguous X of shape
    (n, k) and Y of shape (m, k) of one dtype, ``k = params["columns"]`` (the ``bind`` of a CPU
    kernel module, so that :func:`autospmv.kernels.cpu.bind_threaded` spreads it over threads)."""
    k = np.int64(params["columns"])
    if k <= FEW_COLUMNS:
        kernel = _spmm_few_parallel if parallel else _spmm_few_serial
    else:
        kernel = _spmm_parallel if parallel else _spmm_serial
    indptr, indices, data = unsigned(fmt.indptr), unsigned(fmt.indices), fmt.data
    return lambda X, Y: kernel(indptr, indices, data, X.reshape(-1), Y.reshape(-1), k)


class MultiVector:
    """``Y = A @ X`` on the CPU for X of any column count, from a CSR format's arrays.

    The kernel is bound for each column count k at its first product, on the threads that
    :func:`autospmv._support.threads.choose_threads` gives a product of nnz·k nonzeros (the work of
    k products in one pass), with the operator's ``threads=`` request.
    """

    RUNS = 32
    """Column counts kept bound; the oldest gives way beyond this."""

    def __init__(self, fmt, threads=None):
        self.fmt = fmt
        self._threads = threads
        self._runs = {}

    def run(self, X: np.ndarray, Y: np.ndarray) -> None:
        """Y = A @ X for C-contiguous X (n, k) and Y (m, k) of one dtype, the product's."""
        k = X.shape[1]
        run = self._runs.get(k)
        if run is None:
            work = self.fmt.data.shape[0] * k
            threads, _ = choose_threads(work, self._threads, max(self.fmt.shape))
            run = bind_threaded(bind, self.fmt, {"columns": k}, threads)
            if len(self._runs) >= self.RUNS:
                self._runs.pop(next(iter(self._runs)), None)
            self._runs[k] = run
        run(X, Y)
