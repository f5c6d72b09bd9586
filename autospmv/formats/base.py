"""What every storage format provides.

A format is an immutable bundle of numpy arrays built once from a canonical CSR matrix
(see :mod:`autospmv.validation`). Kernels read the arrays; the operator uploads them to the GPU
with :meth:`SparseFormat.arrays`. Every format converts back to CSR exactly, which is how the
tests prove that a conversion loses nothing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp


class FormatTooLargeError(ValueError):
    """A conversion would pad the matrix beyond the format's fill limit."""


@dataclasses.dataclass(frozen=True, eq=False)
class SparseFormat:
    """Base class: ``shape`` plus the format's arrays as dataclass fields."""

    shape: tuple[int, int]

    name = "abstract"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix, **params) -> "SparseFormat":
        raise NotImplementedError

    def to_csr(self) -> sp.csr_matrix:
        raise NotImplementedError

    def arrays(self) -> dict[str, np.ndarray]:
        """The format's arrays by field name, in declaration order (what a GPU upload copies).

        NumPy arrays for a format built on the host; CUDA arrays (CuPy) for one built on the
        device by :mod:`autospmv.device`."""
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
