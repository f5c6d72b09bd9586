"""What every storage format provides, on the host and on the GPU.

A format is an immutable bundle of arrays built once from a canonical CSR matrix (see
:mod:`autospmv._support.validation`). On the host it holds NumPy arrays
(:meth:`SparseFormat.from_csr`); from a matrix on the GPU (:class:`DeviceCSR`) it is built there,
with the array operations of the matrix's array module ``xp`` (CuPy; NumPy in the tests, which is
how they prove that both conversions build the same arrays): :meth:`SparseFormat.from_device_csr`.
Kernels read the arrays; the operator uploads host arrays to the GPU with
:meth:`SparseFormat.arrays`. Every format converts back to CSR exactly, on the host
(:meth:`SparseFormat.to_csr`) and on the GPU (:meth:`SparseFormat.to_device_csr`), which is how the
tests prove that a conversion loses nothing.

A format that defines only the host conversions still runs on the GPU: the base class then
converts on the host and uploads the arrays (and back), at the cost of the round trip.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp


class FormatTooLargeError(ValueError):
    """A conversion would pad the matrix beyond the format's fill limit.

    A ValueError, so that code that catches ValueError for a refused matrix catches it too;
    :func:`autospmv.prepare` catches it to fall back down the decision's candidates, and
    raises it for a kernel the caller named. Its message names the padding, the limit and the
    kernels that take the matrix instead.

    Examples
    --------
    >>> import scipy.sparse as sp, autospmv
    >>> A = sp.lil_matrix((1000, 1000)); A[0, :] = 1.0; A.setdiag(1.0)
    >>> autospmv.prepare(A.tocsr(), kernel="ell", device="cpu")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    autospmv.formats.base.FormatTooLargeError: ELL would need ...
    """


def longest_row(indptr, xp=np) -> int:
    """The longest row's length from a row pointer of the array module ``xp`` (0 without
    rows)."""
    return int(xp.diff(indptr).max()) if len(indptr) > 1 else 0


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
    conversions: object = None
    """What runs the conversions that have GPU kernels of their own (the longest row, the row
    of every nonzero, the split at an ELL width) on arrays on the GPU: the module
    :mod:`autospmv.kernels.cuda.conversions`, handed in by the code that puts the matrix on
    the GPU. None: the array operations of ``xp`` run them (NumPy arrays standing in for
    device arrays in the tests, for one)."""

    @property
    def nnz(self) -> int:
        return int(self.host_indptr[-1])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data.dtype)

    def structure(self) -> "RowStructure":
        return RowStructure(self.shape, self.host_indptr, self.dtype, self)

    @property
    def on_gpu(self) -> bool:
        """Whether the arrays are on the GPU (NumPy arrays stand in for them in tests)."""
        return not isinstance(self.indices, np.ndarray)

    def longest_row(self) -> int:
        """The longest row's length, reduced on the device (one scalar comes back)."""
        if self.conversions is not None and self.shape[0]:
            return self.conversions.longest_row(self)
        return longest_row(self.indptr, self.xp)

    def rows_and_positions(self):
        """The row of every nonzero and its position in the row (int64 arrays of ``xp``)."""
        xp = self.xp
        row = row_of_each_nonzero(self.indptr, self.nnz, np.int64, xp)
        return row, xp.arange(self.nnz, dtype=np.int64) - self.indptr[row].astype(np.int64)

    def to_host(self) -> sp.csr_matrix:
        """The same matrix on the host (a copy of its indices and values), canonical as it is."""
        host = sp.csr_matrix((to_host(self.data), to_host(self.indices), self.host_indptr),
                             shape=self.shape, copy=False)
        host.has_sorted_indices = host.has_canonical_format = True
        return host

    def transposed_structure(self):
        """The row pointer and column indices of Aᵀ (rows sorted), arrays of ``xp``: computed
        on the GPU by cuSPARSE's transpose, or by SciPy's for NumPy arrays."""
        if self.on_gpu:
            transposed = self.sparse().T.tocsr()
        else:
            transposed = sp.csr_matrix((self.data, self.indices, self.host_indptr),
                                       shape=self.shape).T.tocsr()
        if not transposed.has_sorted_indices:
            transposed.sort_indices()
        return transposed.indptr, transposed.indices

    def sparse(self):
        """The same matrix as a ``cupyx.scipy.sparse.csr_matrix`` on these arrays (no copy)."""
        import cupyx.scipy.sparse as cusp

        return cusp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


@dataclasses.dataclass(frozen=True)
class RowStructure:
    """The row pointer of a matrix whose nonzeros are elsewhere: what choosers and the rule read
    (``shape``, ``indptr``, ``nnz``, ``dtype``), and the matrix on the GPU, from which a chooser
    that reads a sample of the column indices gathers them
    (:func:`autospmv._decide.features.sampling.x_locality`)."""

    shape: tuple[int, int]
    indptr: np.ndarray
    dtype: np.dtype
    device_matrix: "DeviceCSR | None" = dataclasses.field(default=None, repr=False,
                                                          compare=False)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


def row_of_each_nonzero(indptr, nnz: int, itype, xp=np):
    """The row of every nonzero (CSR order): a search in the row pointer (skips empty rows)."""
    positions = xp.arange(nnz, dtype=indptr.dtype)
    return (xp.searchsorted(indptr, positions, side="right") - 1).astype(itype)


def to_host(array) -> np.ndarray:
    """A device array copied to the host (a NumPy array as it is)."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


@dataclasses.dataclass(frozen=True, eq=False)
class SparseFormat:
    """Base class of a storage format: ``shape`` plus the format's arrays as dataclass
    fields (a registered kernel's format subclasses it; :doc:`/kernels` shows one).

    Parameters
    ----------
    shape : tuple of int
        ``(m, n)``, the matrix's shape; a subclass adds its arrays as further fields.
    """

    shape: tuple[int, int]

    name = "abstract"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix, **params) -> "SparseFormat":
        """The format of a canonical host CSR matrix (NumPy arrays)."""
        raise NotImplementedError

    def to_csr(self) -> sp.csr_matrix:
        """The host CSR matrix the format holds (of a format with NumPy arrays)."""
        raise NotImplementedError

    @classmethod
    def from_device_csr(cls, csr: DeviceCSR, **params) -> "SparseFormat":
        """The format of a canonical CSR matrix on the device, built there: its arrays are
        arrays of ``csr.xp``, equal to those :meth:`from_csr` builds on the host.

        This default converts on the host and uploads the arrays; a format overrides it with
        array operations of ``csr.xp``."""
        return cls.from_csr(csr.to_host(), **params).map_arrays(csr.xp.asarray)

    def csr_arrays(self, csr: DeviceCSR):
        """The column indices and values, in CSR order, of the matrix this format (built on the
        device) holds; ``csr`` carries the row pointer, on the device and on the host, and the
        array module (its ``indices`` and ``data`` are not read). The inverse of
        :meth:`from_device_csr`.

        This default copies the format to the host and converts it there; a format overrides it
        with array operations of ``csr.xp``."""
        host = self.map_arrays(to_host).to_csr()
        return csr.xp.asarray(host.indices), csr.xp.asarray(host.data)

    def to_device_csr(self, indptr: np.ndarray, xp, conversions=None) -> DeviceCSR:
        """The CSR matrix a format built on the device holds, rebuilt there from its arrays and
        the host row pointer ``indptr`` (uploaded here), so that an operator can keep nothing
        but the format it runs and still build Aᵀ later (``conversions``: as
        :attr:`DeviceCSR.conversions`)."""
        rows = DeviceCSR(self.shape, xp.asarray(indptr), None, None, indptr, xp, conversions)
        indices, data = self.csr_arrays(rows)
        return dataclasses.replace(rows, indices=indices, data=data)

    def map_arrays(self, function) -> "SparseFormat":
        """The same format with ``function`` applied to each of its arrays (those of the formats
        it holds too): ``xp.asarray`` uploads it, :func:`to_host` copies it back."""
        changes = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
                changes[field.name] = function(value)
            elif isinstance(value, SparseFormat):
                changes[field.name] = value.map_arrays(function)
        return dataclasses.replace(self, **changes)

    def arrays(self) -> dict[str, np.ndarray]:
        """The format's arrays by field name, in declaration order (what a GPU upload copies).

        NumPy arrays for a format built on the host; CUDA arrays (CuPy) for one built on the
        device, from a matrix given on the GPU."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
                out[field.name] = value
            elif isinstance(value, SparseFormat):
                out.update({f"{field.name}_{k}": v for k, v in value.arrays().items()})
        return out

    @property
    def nbytes(self) -> int:
        """Bytes held by the format's arrays."""
        return sum(a.nbytes for a in self.arrays().values())

    @property
    def dtype(self) -> np.dtype:
        """Value dtype (float32 or float64)."""
        return next(a.dtype for k, a in self.arrays().items() if k.endswith("data"))


def row_lengths(csr: sp.csr_matrix) -> np.ndarray:
    """Nonzeros per row of a CSR matrix, as int64."""
    return np.diff(csr.indptr).astype(np.int64, copy=False)
