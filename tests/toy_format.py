"""A storage format that autospmv does not ship, with its kernels and its registry entry.

``ColumnTriples`` stores one (row, column, value) triple per nonzero sorted by column, then row
(the order of CSC). Its CPU kernel adds each product into y with ``numpy.add.at``; its CUDA kernel
runs one thread per nonzero with an atomic add. The format defines only the host conversions
(``from_csr``, ``to_csr``): the base class builds it for a matrix on the GPU by converting on the
host and uploading the arrays. Nothing outside this file and the entry below knows the format.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from numba import cuda

import autospmv
from autospmv.formats.base import SparseFormat
from autospmv.kernels.cuda import jit
from autospmv.kernels.cuda.launch import X, Y, DeviceProgram, Launch, ZeroY

NAME = "column_triples"
BLOCK = 128


@dataclasses.dataclass(frozen=True, eq=False)
class ColumnTriples(SparseFormat):
    row: np.ndarray
    col: np.ndarray
    data: np.ndarray

    name = "column_triples"

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix) -> "ColumnTriples":
        row = np.repeat(np.arange(csr.shape[0], dtype=csr.indices.dtype), np.diff(csr.indptr))
        order = np.argsort(csr.indices, kind="stable")  # by column, then row
        return cls(csr.shape, row[order], csr.indices[order], csr.data[order])

    def to_csr(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.data, (self.row, self.col)), shape=self.shape)


def bind(fmt: ColumnTriples, params: dict, parallel=None):
    """``run(x, y)``: y = A @ x, one product per triple."""

    def run(x, y):
        y[:] = 0
        np.add.at(y, fmt.row, fmt.data * x[fmt.col])

    return run


@jit
def _triples_kernel(row, col, data, x, y):
    k = cuda.grid(1)
    if k < data.shape[0]:
        cuda.atomic.add(y, row[k], data[k] * x[col[k]])


def build(fmt: ColumnTriples, params: dict, arrays: dict) -> DeviceProgram:
    """Zero y, then one thread per nonzero."""
    m, nnz = fmt.shape[0], fmt.data.shape[0]
    steps = [ZeroY(m, np.dtype(fmt.dtype).itemsize)] if m else []
    if nnz:
        steps.append(Launch(_triples_kernel, -(-nnz // BLOCK), BLOCK,
                            [arrays["row"], arrays["col"], arrays["data"], X, Y], fmt.dtype))
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps)


def no_params(csr, device: str) -> dict:
    """The chooser: the format and its kernels take no parameters."""
    return {}


SPEC = autospmv.KernelSpec(NAME, ColumnTriples, bind, build, no_params)
"""The registry entry: the format, the two kernels and the chooser, as objects."""
