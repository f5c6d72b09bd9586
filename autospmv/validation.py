"""Input checking and canonicalisation: the one place where user data is inspected.

Every other module of autospmv receives a *canonical* CSR matrix and trusts it:

* a ``scipy.sparse.csr_matrix`` (the matrix class, not the array class),
* sorted column indices, duplicates summed, no explicit structure checks needed later,
* values float32 or float64 (integer and bool input becomes float64),
* ``int32`` index arrays when ``nnz`` and both dimensions fit, ``int64`` otherwise.

Vectors handed to an operator are checked by :func:`check_vector` and :func:`check_out`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
DEVICES = ("cuda", "cpu")

_INT32_MAX = np.iinfo(np.int32).max


def value_dtype(dtype) -> np.dtype:
    """Map an input dtype to the dtype autospmv computes in, or raise TypeError."""
    dtype = np.dtype(dtype)
    if dtype in SUPPORTED_DTYPES:
        return dtype
    if dtype.kind in "iub":
        return np.dtype(np.float64)
    if dtype == np.float16:
        return np.dtype(np.float32)
    raise TypeError(
        f"autospmv does not support dtype {dtype}; supported: float32, float64 "
        "(integer and bool matrices are converted to float64)"
    )


def index_dtype(nnz: int, shape: tuple[int, int]) -> np.dtype:
    """int32 when every index and offset fits, int64 otherwise."""
    if max(nnz, shape[0], shape[1]) <= _INT32_MAX:
        return np.dtype(np.int32)
    return np.dtype(np.int64)


def canonicalize(A) -> sp.csr_matrix:
    """Return A as canonical CSR (see the module docstring); never modifies A.

    Accepts any ``scipy.sparse`` matrix or array, or anything ``numpy.asarray`` turns into a
    2-D numeric array (numpy arrays, nested lists).
    """
    if sp.issparse(A):
        if A.ndim != 2:
            raise ValueError(f"autospmv needs a 2-D matrix; got a {A.ndim}-D sparse array")
        csr = sp.csr_matrix(A, dtype=value_dtype(A.dtype), copy=True)
    elif isinstance(A, (list, tuple)) or hasattr(A, "__array__"):
        dense = np.asarray(A)
        if dense.dtype.kind not in "biufc":  # complex is refused, with its own message, below
            raise TypeError(
                f"autospmv cannot build a matrix from {type(A).__name__} with {dense.dtype} dtype; "
                "pass a scipy.sparse matrix or a 2-D numeric array"
            )
        if dense.ndim != 2:
            raise ValueError(f"autospmv needs a 2-D matrix; got an array with shape {dense.shape}")
        csr = sp.csr_matrix(dense.astype(value_dtype(dense.dtype), copy=False))
    else:
        raise TypeError(
            f"autospmv needs a scipy.sparse matrix/array or a 2-D numpy array; got {type(A).__name__}"
        )
    csr.sum_duplicates()  # also sorts indices
    itype = index_dtype(csr.nnz, csr.shape)
    csr.indptr = csr.indptr.astype(itype, copy=False)
    csr.indices = csr.indices.astype(itype, copy=False)
    return csr


def check_device(device) -> str | None:
    """Validate a device name ("cuda", "cpu" or None for automatic)."""
    if device is None or device in DEVICES:
        return device
    raise ValueError(f"unknown device {device!r}; valid devices: 'cuda', 'cpu' or None (automatic)")


def check_vector(x, n: int, dtype: np.dtype) -> np.ndarray:
    """Return x as a contiguous 1-D numpy array of ``dtype`` and length n, or raise."""
    arr = np.asarray(x)
    if arr.ndim == 2 and 1 in arr.shape and arr.size == n:
        arr = arr.reshape(n)
    if arr.ndim != 1:
        raise ValueError(f"x must be a vector of length {n}; got an array with shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"x has length {arr.shape[0]}, but the matrix has {n} columns")
    if arr.dtype.kind == "c":
        raise TypeError(f"x has complex dtype {arr.dtype}; supported: float32, float64")
    return np.ascontiguousarray(arr, dtype=dtype)


def check_out(out, m: int, dtype: np.dtype) -> None:
    """Check a user-supplied output buffer: 1-D, length m, exactly ``dtype``, contiguous."""
    shape = getattr(out, "shape", None)
    if shape != (m,):
        raise ValueError(f"out must have shape ({m},); got {shape}")
    out_dtype = np.dtype(getattr(out, "dtype", None))
    if out_dtype != dtype:
        raise TypeError(f"out must have dtype {dtype}; got {out_dtype}")
    if isinstance(out, np.ndarray) and not out.flags.c_contiguous:
        raise ValueError("out must be contiguous")
