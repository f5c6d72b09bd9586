"""SciPy's compiled CSR product as the CPU's serial ``csr_scalar`` product where it is faster.

``csr_scalar`` on one thread is the plain CSR loop, the loop SciPy's C++ ``csr_matvec``
(``scipy.sparse._sparsetools``) runs too. Both loops were timed alone, interleaved, on the demo's
matrices and the 31 of the shared test folder on the 2-core development machine
(``python benchmarks/cpu_scipy_product.py --matrices DIR``, results in
``benchmarks/results/cpu-scipy-product.json``, a shared machine): on matrices of at least
:data:`SCIPY_MIN_NNZ` nonzeros with at most :data:`SCIPY_MAX_ROW_LENGTH` per row on average the
two are within noise of each other (SciPy's median time 0.89-1.10 of numba's, five matrices);
everywhere else the numba loop is as fast or faster (0.97-2.5: SciPy's call costs a few µs more,
and the numba loop vectorises longer rows). Short rows are where the C++ loop has been seen
ahead (0.87-0.95 in earlier runs on the demo's Poisson, power-law and dense-row matrices), so
the operator uses it there, and the numba kernel elsewhere.

:func:`scipy_applies` is that rule; :func:`bind_scipy` binds the product. A serial ``csr_scalar``
operator (:class:`autospmv.kernels.cpu.backend.CpuBackend`) on a matrix the rule selects runs
SciPy's loop for vectors of the matrix's own dtype (the numba loop otherwise), and its decision's
``explain()`` says so.
"""

from __future__ import annotations

import numpy as np

SCIPY_MIN_NNZ = 150_000
"""Fewest nonzeros for which SciPy's loop runs the serial ``csr_scalar`` product."""

SCIPY_MAX_ROW_LENGTH = 10.0
"""Most nonzeros per row, on average, for which SciPy's loop runs it."""

KERNEL = "csr_scalar"
"""The kernel whose serial product SciPy's loop replaces (the same row-by-row loop)."""


def scipy_applies(kernel: str, fmt, threads: int) -> bool:
    """Whether the serial product of ``kernel`` on ``fmt`` runs SciPy's compiled CSR loop.

    Parameters
    ----------
    kernel : str
        The operator's kernel.
    fmt : SparseFormat
        Its CPU format (a :class:`~autospmv.formats.csr.CSRFormat` for ``csr_scalar``).
    threads : int
        The most threads one product uses.

    Returns
    -------
    bool
        True for ``csr_scalar`` on one thread over a matrix of at least :data:`SCIPY_MIN_NNZ`
        nonzeros with at most :data:`SCIPY_MAX_ROW_LENGTH` of them per row on average, whose
        index arrays SciPy's loop takes (one integer type for both).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from autospmv.formats.csr import CSRFormat
    >>> fmt = CSRFormat.from_csr(sp.identity(200_000, format="csr"))
    >>> scipy_applies("csr_scalar", fmt, threads=1), scipy_applies("csr_scalar", fmt, threads=2)
    (True, False)
    """
    if kernel != KERNEL or threads != 1:
        return False
    rows, nnz = fmt.shape[0], fmt.data.shape[0]
    return (nnz >= SCIPY_MIN_NNZ and nnz <= SCIPY_MAX_ROW_LENGTH * max(rows, 1)
            and fmt.indptr.dtype == fmt.indices.dtype
            and fmt.indices.dtype in (np.int32, np.int64))


def bind_scipy(fmt, numba_run):
    """``run(x, y)``: y = A @ x by SciPy's compiled CSR loop over ``fmt``'s arrays for x and y of
    the matrix's dtype, by ``numba_run`` (the numba loop) for a mixed-precision product.

    Parameters
    ----------
    fmt : CSRFormat
        The matrix, as :func:`scipy_applies` accepted it.
    numba_run : callable
        ``run(x, y)`` of the numba kernel, for x and y of another dtype than the matrix's.

    Returns
    -------
    callable
        ``run(x, y)``, overwriting y.
    """
    from scipy.sparse._sparsetools import csr_matvec

    m, n = fmt.shape
    indptr, indices, data = fmt.indptr, fmt.indices, fmt.data

    def run(x, y):
        if y.dtype != data.dtype or x.dtype != data.dtype:
            numba_run(x, y)
            return
        y.fill(0)  # SciPy's loop adds A @ x to y
        csr_matvec(m, n, indptr, indices, data, x, y)

    return run


NOTE = ("products run SciPy's compiled CSR loop (scipy.sparse's csr_matvec), the faster of the "
        "two serial csr_scalar loops on this matrix: one thread, at least {min_nnz:,} nonzeros, "
        "at most {max_row:g} per row on average (vectors of another dtype than the matrix's run "
        "the numba loop)")
"""The decision's note for an operator whose products run SciPy's loop."""


def note() -> str:
    """The sentence ``explain()`` shows for an operator whose products run SciPy's loop."""
    return NOTE.format(min_nnz=SCIPY_MIN_NNZ, max_row=SCIPY_MAX_ROW_LENGTH)
