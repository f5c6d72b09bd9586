"""SciPy's compiled CSR product as the CPU's serial ``csr_scalar`` product where it is faster.

``csr_scalar`` on one thread is the plain CSR loop, the loop SciPy's C++ ``csr_matvec``
(``scipy.sparse._sparsetools``) runs too, summing each row's terms in the same order. The two
compile differently: SciPy's is one loop per row, left as written; numba's (LLVM) is unrolled by
eight, with a loop for the ``length mod 8`` first terms and one for the groups of eight, so a
row takes one of several paths by its length. Where short rows vary in length, numba's loop
mispredicts more branches per row than SciPy's; where they do not, it is the faster one (and
SciPy's call also has to zero y first, since its loop adds A @ x to y).

Both products were timed alone, interleaved, as the operator binds them (SciPy's with its
zeroing of y), on the demo's matrices, the 31 of the shared test folder and four generated ones
on the 2-core development machine, repeats disturbed by other processes taken again (``python
benchmarks/cpu_scipy_product.py --matrices DIR``, results in
``benchmarks/results/cpu-scipy-product.json``). Below :data:`SCIPY_MIN_NNZ` nonzeros, and over
rows of more than :data:`SCIPY_MAX_ROW_LENGTH` nonzeros on average, numba's product ran at
0.98-2.2 times the speed of SciPy's (SciPy's call costs a few µs more, which makes up the 0.98
per call). At and above it, over short rows, numba's ran at 0.97-1.08 of SciPy's speed where the
row lengths (each counted up to :data:`SPREAD_CAP`) spread by at most 1.35 (standard deviation:
a 2-D Poisson grid, a Delaunay mesh, rows of 4) and at 0.85-0.98 where they spread by 1.73 or
more (rows of 1 + Poisson(3), of 1 to 12 and of power-law lengths, a random geometric graph, 3
dense rows among short ones). So the operator runs SciPy's loop on matrices of at least
:data:`SCIPY_MIN_NNZ` nonzeros of short rows whose lengths spread by at least
:data:`SCIPY_MIN_SPREAD`, and the numba kernel elsewhere. Where it runs SciPy's loop, a product
is SciPy's own product with a little less Python around it: per call about as fast as
``A @ x`` (1.00-1.01 times, ``benchmarks/results/cpu-default-vs-scipy.json``), not faster.

:func:`scipy_applies` is that rule; :func:`bind_scipy` binds the product. A serial ``csr_scalar``
operator (:class:`autospmv.kernels.cpu.backend.CpuBackend`) on a matrix the rule selects runs
SciPy's loop for vectors of the matrix's own dtype (the numba loop otherwise), and its decision's
``explain()`` says so.
"""

from __future__ import annotations

import numpy as np

from ..._support.jit import njit

SCIPY_MIN_NNZ = 150_000
"""Fewest nonzeros for which SciPy's loop runs the serial ``csr_scalar`` product."""

SCIPY_MAX_ROW_LENGTH = 10.0
"""Most nonzeros per row, on average, for which SciPy's loop runs it."""

SPREAD_CAP = 16
"""Row lengths count up to this many nonzeros in :func:`length_spread`: longer rows are the
unrolled loop's long path, whatever their length."""

SCIPY_MIN_SPREAD = 1.5
"""Smallest :func:`length_spread` for which SciPy's loop runs the product."""

KERNEL = "csr_scalar"
"""The kernel whose serial product SciPy's loop replaces (the same row-by-row loop)."""


def length_spread(indptr) -> float:
    """The standard deviation of the row lengths of a CSR matrix's ``indptr``, each length
    counted up to :data:`SPREAD_CAP` (0 for a matrix without rows)."""
    if indptr.shape[0] < 2:
        return 0.0
    lengths = np.minimum(np.diff(indptr), SPREAD_CAP)
    return float(lengths.std())


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
        row lengths spread by at least :data:`SCIPY_MIN_SPREAD` (:func:`length_spread`), and
        whose index arrays SciPy's loop takes (one integer type for both).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from autospmv.formats.csr import CSRFormat
    >>> lengths = np.tile([1, 3, 5, 7], 50_000)  # 800,000 nonzeros in rows of 1 to 7
    >>> rows = np.repeat(np.arange(lengths.size), lengths)
    >>> columns = np.arange(rows.size) % 1000
    >>> A = sp.csr_matrix((np.ones(rows.size), (rows, columns)), shape=(lengths.size, 1000))
    >>> fmt = CSRFormat.from_csr(A)
    >>> scipy_applies("csr_scalar", fmt, threads=1), scipy_applies("csr_scalar", fmt, threads=2)
    (True, False)
    >>> scipy_applies("csr_scalar", CSRFormat.from_csr(sp.identity(200_000, format="csr")), 1)
    False
    """
    if kernel != KERNEL or threads != 1:
        return False
    rows, nnz = fmt.shape[0], fmt.data.shape[0]
    return (nnz >= SCIPY_MIN_NNZ and nnz <= SCIPY_MAX_ROW_LENGTH * max(rows, 1)
            and fmt.indptr.dtype == fmt.indices.dtype
            and fmt.indices.dtype in (np.int32, np.int64)
            and length_spread(fmt.indptr) >= SCIPY_MIN_SPREAD)


@njit(cache=True, nogil=True)
def _zero(y):
    # compiled to a memset: 0.7 of the time of y.fill(0) from 30,000 entries on
    y[:] = 0


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
        _zero(y)  # SciPy's loop adds A @ x to y
        csr_matvec(m, n, indptr, indices, data, x, y)

    return run


NOTE = ("products run SciPy's compiled CSR loop (scipy.sparse's csr_matvec), the faster of the "
        "two serial csr_scalar loops on this matrix: one thread, at least {min_nnz:,} nonzeros, "
        "at most {max_row:g} per row on average, row lengths that spread by {spread:.2f} ≥ "
        "{min_spread:g} (their standard deviation, each counted up to {cap}; vectors of another "
        "dtype than the matrix's run the numba loop)")
"""The decision's note for an operator whose products run SciPy's loop."""


def note(fmt) -> str:
    """The sentence ``explain()`` shows for an operator over ``fmt`` whose products run SciPy's
    loop."""
    return NOTE.format(min_nnz=SCIPY_MIN_NNZ, max_row=SCIPY_MAX_ROW_LENGTH,
                       spread=length_spread(fmt.indptr), min_spread=SCIPY_MIN_SPREAD,
                       cap=SPREAD_CAP)
