"""Matrices that already live on the GPU: CuPy and torch sparse input, converted on the device.

:func:`prepare` accepts ``cupyx.scipy.sparse`` CSR, COO and CSC matrices and torch sparse COO and
CSR tensors on a CUDA device. Their nonzeros never travel to the host:

* **Canonical form on the device.** CuPy: ``tocsr()`` and ``sum_duplicates()`` (which also sorts
  the columns) when the matrix is not canonical yet, then the value and index dtypes of
  :mod:`autospmv.validation`. torch: ``coalesce()`` (sorted, summed) and ``to_sparse_csr()``,
  then the tensors are viewed as CuPy arrays through ``__cuda_array_interface__`` (no copy).
  CuPy is needed in both cases (the ``cuda`` extra's natural companion).
* **What goes to the host: the row pointer** (m + 1 integers, not nnz-sized). The parameter
  choosers and the fill limits depend on the row lengths alone and are computed from it on the
  host; the ELL width, the JDS row order and (for large matrices without empty rows) the CSR5
  tile descriptors are computed on the device.
* **The decision.** With ``kernel=`` the kernel is used as on host input. Automatic selection
  on a matrix of more than :data:`autospmv.features.SAMPLE_THRESHOLD` nonzeros uses the model,
  with the features a host matrix would get
  (:func:`autospmv.features.device_features_and_lengths`): bandwidth and occupied diagonals
  reduced on the GPU, row lengths from the row pointer, and the column indices of the rows
  drawn for the sampled features (a sixteenth of a large matrix's; no values) copied to the
  host, unless x's locality is the only sampled feature the model reads: then it is counted
  on the GPU from the same rows and nothing is copied. A smaller matrix, whose features are
  all exact and so read every index, is decided by the built-in rule of
  :func:`autospmv.selector.rule_decision` (row lengths only). The decision's notes say which.
* **Conversion on the device** (:func:`device_format`), with CuPy array operations from the
  uploaded CSR (also for host input on the GPU when CuPy is installed: :func:`upload_csr`):
  csr_scalar/csr_vector use the CSR arrays as they are; COO builds the row of every
  nonzero (a search in the row pointer); ELL/HYB scatter each entry to its slot; JDS sorts the
  rows by length on the device (a stable sort) and scatters each entry to its diagonal; CSR5
  transposes the tiles with one reshape and computes the tile descriptors there
  (:func:`autospmv.formats.csr5.descriptors_without_empty_rows`, from
  :data:`CSR5_DEVICE_DESCRIPTORS_MIN_NNZ` nonzeros) or, for a smaller matrix or one with empty
  rows (placeholders), uploads those the host's compiled passes compute.

Every function taking ``xp`` works with NumPy arrays too, which is how the tests prove on any
machine that the device conversions build exactly the host formats.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .formats.base import SparseFormat
from .validation import index_dtype, value_dtype


def is_device_matrix(A) -> bool:
    """True for a CuPy sparse matrix or a torch sparse CUDA tensor (the kinds :func:`prepare`
    takes on the device); False for anything else, without importing CuPy or torch."""
    module = type(A).__module__.split(".")[0]
    if module == "cupyx":
        return getattr(A, "format", None) in ("csr", "coo", "csc")
    if module == "torch":
        import torch

        return (isinstance(A, torch.Tensor) and A.is_cuda
                and A.layout in (torch.sparse_coo, torch.sparse_csr))
    return False


@dataclasses.dataclass(frozen=True, eq=False)
class DeviceCSR:
    """A canonical CSR matrix on the GPU (arrays of module ``xp``) and its row pointer on the
    host. Duck-types the parts of ``scipy.sparse.csr_matrix`` that the parameter choosers and the
    rule read (``shape``, ``nnz``, ``dtype``, ``indptr`` as ``host_indptr``)."""

    shape: tuple[int, int]
    indptr: object
    indices: object
    data: object
    host_indptr: np.ndarray
    xp: object = np

    @property
    def nnz(self) -> int:
        return int(self.host_indptr[-1])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data.dtype)

    def structure(self) -> "RowStructure":
        return RowStructure(self.shape, self.host_indptr, self.dtype, self)

    def sparse(self):
        """The same matrix as a ``cupyx.scipy.sparse.csr_matrix`` on these arrays (no copy)."""
        import cupyx.scipy.sparse as cusp

        return cusp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


@dataclasses.dataclass(frozen=True)
class RowStructure:
    """The row pointer of a matrix whose nonzeros are elsewhere: what choosers and the rule read
    (``shape``, ``indptr``, ``nnz``, ``dtype``), and the matrix on the GPU, from which a chooser
    that reads a sample of the column indices gathers them
    (:func:`autospmv.sampling.x_locality`)."""

    shape: tuple[int, int]
    indptr: np.ndarray
    dtype: np.dtype
    device_matrix: "DeviceCSR | None" = dataclasses.field(default=None, repr=False,
                                                          compare=False)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


def canonical_device_csr(A) -> DeviceCSR:
    """A as a canonical :class:`DeviceCSR` (see the module docstring), computed on the GPU."""
    try:
        import cupy
        import cupyx.scipy.sparse as cusp
    except ImportError:
        raise ImportError("autospmv needs CuPy to take matrices that live on the GPU; install "
                          "cupy (e.g. pip install cupy-cuda12x) or pass a SciPy matrix") from None
    module = type(A).__module__.split(".")[0]
    if module == "torch":
        import torch

        if A.layout == torch.sparse_csr:
            A = A.to_sparse_coo()
        if A.ndim != 2:
            raise ValueError(f"autospmv needs a 2-D matrix; got a {A.ndim}-D sparse tensor")
        A = A.coalesce().to_sparse_csr()
        shape = tuple(int(s) for s in A.shape)
        values = cupy.asarray(A.values())  # integer, bool and float16 values converted first,
        values = values.astype(value_dtype(values.dtype), copy=False)  # as on the host
        matrix = cusp.csr_matrix((values, cupy.asarray(A.col_indices()),
                                  cupy.asarray(A.crow_indices())), shape=shape)
        canonical = True  # coalesce() sorted and summed
    else:
        matrix = A.tocsr() if A.format != "csr" else A
        shape = tuple(int(s) for s in matrix.shape)
        canonical = matrix.has_canonical_format
    if not canonical:
        matrix = matrix.copy()
        matrix.sum_duplicates()  # also sorts the columns
    dtype = value_dtype(matrix.dtype)
    itype = index_dtype(int(matrix.nnz), shape)
    indptr = matrix.indptr.astype(itype, copy=False)
    return DeviceCSR(shape, indptr, matrix.indices.astype(itype, copy=False),
                     matrix.data.astype(dtype, copy=False), cupy.asnumpy(indptr), cupy)


def upload_csr(csr) -> DeviceCSR | None:
    """A canonical host CSR uploaded with CuPy (the same copy as
    ``cupyx.scipy.sparse.csr_matrix(csr)``), for conversion on the GPU; None without CuPy.

    This is how :func:`autospmv.prepare` builds GPU formats from host input: the host does no
    conversion and keeps no copy, and the GPU's conversion is a few passes at its bandwidth."""
    try:
        import cupy
    except ImportError:
        return None
    return DeviceCSR(csr.shape, cupy.asarray(csr.indptr), cupy.asarray(csr.indices),
                     cupy.asarray(csr.data), csr.indptr, cupy)


def row_of_each_nonzero(indptr, nnz: int, itype, xp=np):
    """The row of every nonzero (CSR order): a search in the row pointer (skips empty rows)."""
    positions = xp.arange(nnz, dtype=indptr.dtype)
    return (xp.searchsorted(indptr, positions, side="right") - 1).astype(itype)


CSR5_DEVICE_DESCRIPTORS_MIN_NNZ = 5_000_000
"""From this many nonzeros a matrix on the GPU without empty rows gets its CSR5 descriptors
computed there (:func:`autospmv.formats.csr5.descriptors_without_empty_rows`); below, the
host's compiled passes over the row pointer and one upload are faster. On the H200, a forced
csr5 prepare() of a CuPy matrix (a 2-D Laplacian and a power-law matrix, no empty rows, both
dtypes) took 6.7–9.1 ms with the device's descriptors against 8.7–12.6 ms with the host's at
1.5–2·10⁷ nonzeros, and 2.6–4.5 ms (median 4.0) against 2.3–3.0 ms (median 2.6) at 10⁶: the
dozens of small array operations cost about 1.5 ms whatever the size. Between those sizes
nothing was measured; the threshold lies where the host's share, about 0.2–0.3 ms per 10⁶
nonzeros, reaches that cost."""


def device_format(kernel: str, csr: DeviceCSR, params: dict) -> SparseFormat:
    """The storage format of ``kernel`` for a matrix on the device, built there (see the module
    docstring); its arrays are arrays of ``csr.xp``. Fill limits apply as on the host."""
    from . import registry
    from .formats import coo, csr5, csr as csr_module, ell, hyb, jds

    xp = csr.xp
    m, _ = csr.shape
    itype = csr.indices.dtype
    spec = registry.get(kernel)
    format_class = spec.format_class()
    structure = csr.structure()
    if format_class is csr_module.CSRFormat:
        return csr_module.CSRFormat(csr.shape, csr.indptr, csr.indices, csr.data)
    if format_class is coo.COOFormat:
        row = row_of_each_nonzero(csr.indptr, csr.nnz, itype, xp)
        return coo.COOFormat(csr.shape, row, csr.indices, csr.data)
    if format_class is ell.ELLFormat:
        longest = _longest_row(csr)
        ell.check_fill(m, longest, csr.nnz, ell.ELL_MAX_FILL)
        return split_at_width(csr, longest)[0]
    if format_class is hyb.HYBFormat:
        width = hyb.check_width(params["width"], structure.indptr, csr.nnz, ell.ELL_MAX_FILL,
                                longest=_longest_row(csr))
        ell_part, coo_part = split_at_width(csr, width)
        return hyb.HYBFormat(csr.shape, width, ell_part, coo_part)
    if format_class is jds.JDSFormat:
        perm_d, jd_ptr_d = jds_row_order(csr, ell.ELL_MAX_FILL)
        position_d = xp.empty(m, dtype=np.int64)
        position_d[perm_d] = xp.arange(m, dtype=np.int64)
        row = row_of_each_nonzero(csr.indptr, csr.nnz, np.int64, xp)
        diagonal = xp.arange(csr.nnz, dtype=np.int64) - csr.indptr[row].astype(np.int64)
        destination = jd_ptr_d[diagonal].astype(np.int64) + position_d[row]
        del row, diagonal
        col = xp.empty_like(csr.indices)
        data = xp.empty_like(csr.data)
        col[destination] = csr.indices
        data[destination] = csr.data
        return jds.JDSFormat(csr.shape, perm_d, jd_ptr_d, col, data)
    if format_class is csr5.CSR5Format:
        sigma = params["sigma"]
        indices, data = csr.indices, csr.data
        if (csr.nnz >= CSR5_DEVICE_DESCRIPTORS_MIN_NNZ
                and not bool((csr.indptr[1:] == csr.indptr[:-1]).any())):
            fields = csr5.descriptors_without_empty_rows(csr.indptr, sigma, xp)
        else:  # the host's compiled passes build the descriptors, and place the placeholders
            placeholders = csr5.placeholder_rows(structure.indptr)
            fields = csr5.csr5_descriptors(structure.indptr, sigma, placeholders=placeholders)
            fields = {k: (xp.asarray(v) if isinstance(v, np.ndarray) else v)
                      for k, v in fields.items()}
            positions = xp.asarray(placeholders[1])
            indices = csr5.insert_placeholders(indices, positions, csr5.PLACEHOLDER, xp)
            data = csr5.insert_placeholders(data, positions, 0, xp)
        return csr5.CSR5Format(csr.shape, indices=csr5.transpose_tiles(indices, sigma, xp),
                               data=csr5.transpose_tiles(data, sigma, xp), **fields)
    raise ValueError(f"no device conversion for kernel {kernel!r}")


def csr_from_format(fmt: SparseFormat, indptr, xp) -> DeviceCSR:
    """The CSR matrix a format built on the device holds, rebuilt there from its arrays and the
    row pointer (``indptr``, a host array; uploaded here): the inverse of :func:`device_format`,
    so that an operator prepared from a host matrix can keep nothing but the format it runs and
    still build Aᵀ later (:meth:`autospmv.operator.SpMVOperator.transpose_operator`). Every
    nonzero's row and position in the row follow from ``indptr``; each format then says where
    that nonzero is stored."""
    from .formats import coo, csr5, csr as csr_module, ell, hyb, jds

    m = fmt.shape[0]
    indptr_d = xp.asarray(indptr)
    nnz = int(indptr[-1])

    def csr_of(indices, data) -> DeviceCSR:
        return DeviceCSR(fmt.shape, indptr_d, indices, data, indptr, xp)

    if isinstance(fmt, csr_module.CSRFormat):
        return csr_of(fmt.indices, fmt.data)
    if isinstance(fmt, coo.COOFormat):  # row-sorted, in CSR order
        return csr_of(fmt.col, fmt.data)
    if isinstance(fmt, csr5.CSR5Format):
        indices = csr5.transpose_tiles(fmt.indices, fmt.sigma, xp, to_tiles=False)
        data = csr5.transpose_tiles(fmt.data, fmt.sigma, xp, to_tiles=False)
        if indices.shape[0] > nnz:  # drop the empty rows' placeholders
            real = xp.nonzero(indices != csr5.PLACEHOLDER)[0]
            indices, data = indices[real], data[real]
        return csr_of(indices, data)
    row = row_of_each_nonzero(indptr_d, nnz, np.int64, xp)
    position = xp.arange(nnz, dtype=np.int64) - indptr_d[row].astype(np.int64)
    if isinstance(fmt, ell.ELLFormat):  # column-major slots: position·m + row
        slot = position * m + row
        return csr_of(fmt.col[slot], fmt.data[slot])
    if isinstance(fmt, hyb.HYBFormat):  # the first `width` of a row in ELL, the rest in COO
        kept = position < fmt.width
        slot = position[kept] * m + row[kept]
        indices = xp.empty(nnz, dtype=fmt.ell.col.dtype)
        data = xp.empty(nnz, dtype=fmt.ell.data.dtype)
        indices[kept], data[kept] = fmt.ell.col[slot], fmt.ell.data[slot]
        indices[~kept], data[~kept] = fmt.coo.col, fmt.coo.data
        return csr_of(indices, data)
    if isinstance(fmt, jds.JDSFormat):  # nonzero k of row r at jd_ptr[k] + r's sorted place
        place = xp.empty(m, dtype=np.int64)
        place[fmt.perm] = xp.arange(m, dtype=np.int64)
        source = fmt.jd_ptr[position].astype(np.int64) + place[row]
        return csr_of(fmt.col[source], fmt.data[source])
    raise ValueError(f"no device CSR for the {fmt.name} format")


def _longest_row(csr: DeviceCSR) -> int:
    """The longest row's length, reduced on the device (one scalar comes back)."""
    return int(csr.xp.diff(csr.indptr).max()) if csr.shape[0] else 0


def jds_row_order(csr: DeviceCSR, max_fill: float):
    """:func:`autospmv.formats.jds.row_order` on the device: ``perm`` (rows by length,
    descending, stable: a stable sort of the negated lengths) and ``jd_ptr`` (diagonal k holds
    the rows longer than k), or FormatTooLargeError beyond the fill limit. Only the slot count
    and the longest row come back to the host."""
    from .formats import jds
    from .formats.ell import fill_exceeded, too_large

    xp = csr.xp
    m = csr.shape[0]
    itype = csr.indptr.dtype
    lengths = xp.diff(csr.indptr)
    longest = int(lengths.max()) if m else 0
    perm = xp.argsort(-lengths, kind="stable").astype(itype)
    rows_per_length = xp.bincount(lengths, minlength=longest + 1)
    longer_than = m - xp.cumsum(rows_per_length)[:longest]  # rows longer than k, k < longest
    jd_ptr = xp.zeros(longest + 1, dtype=itype)
    jd_ptr[1:] = xp.cumsum(longer_than)
    slots = jds.WARP * int(lengths[perm[::jds.WARP]].sum(dtype=np.int64))
    if fill_exceeded(slots, csr.nnz, max_fill):
        raise too_large(
            "JDS", slots, csr.nnz, max_fill,
            "GPU thread slots (32 x the longest row of each warp of sorted rows)",
            "a few rows are much longer than their neighbours; use kernel 'hyb' or 'csr5'",
        )
    return perm, jd_ptr


def split_at_width(csr: DeviceCSR, width: int):
    """:func:`autospmv.formats.ell.split_at_width` on the device: ELL with the first ``width``
    entries of every row (column-major, -1/0 padding) and COO with the rest, in CSR order.
    When no row is longer than ``width`` (ELL, and HYB without a COO part), every entry goes
    to its slot without the masks and compactions of a split."""
    from .formats.coo import COOFormat
    from .formats.ell import ELLFormat

    xp = csr.xp
    m = csr.shape[0]
    itype = csr.indices.dtype
    row = row_of_each_nonzero(csr.indptr, csr.nnz, np.int64, xp)
    position = xp.arange(csr.nnz, dtype=np.int64) - csr.indptr[row].astype(np.int64)
    col = xp.full(m * width, -1, dtype=itype)
    data = xp.zeros(m * width, dtype=csr.data.dtype)
    if width >= _longest_row(csr):
        slot = position * m + row
        col[slot] = csr.indices
        data[slot] = csr.data
        overflow = COOFormat(csr.shape, xp.empty(0, dtype=itype), xp.empty(0, dtype=itype),
                             xp.empty(0, dtype=csr.data.dtype))
        return ELLFormat(csr.shape, int(width), col, data), overflow
    kept = position < width
    slot = position[kept] * m + row[kept]
    col[slot] = csr.indices[kept]
    data[slot] = csr.data[kept]
    rest = ~kept
    overflow = COOFormat(csr.shape, row[rest].astype(itype), csr.indices[rest], csr.data[rest])
    return ELLFormat(csr.shape, int(width), col, data), overflow


def transposed(A):
    """Aᵀ of a device matrix, on the device (for :meth:`SpMVOperator.transpose_operator`)."""
    if type(A).__module__.split(".")[0] == "torch":
        import torch

        coo = A.to_sparse_coo() if A.layout == torch.sparse_csr else A
        return coo.t().coalesce()
    return A.T
