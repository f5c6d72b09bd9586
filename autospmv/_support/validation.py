"""Input checking and canonicalisation: the one place where user data is inspected.

Every other module of autospmv receives a *canonical* CSR matrix and trusts it:

* a ``scipy.sparse.csr_matrix`` (the matrix class, not the array class),
* sorted column indices, duplicates summed, no explicit structure checks needed later,
* values float32 or float64 (integer and bool input becomes float64),
* ``int32`` index arrays when ``nnz`` and both dimensions fit, ``int64`` otherwise.

Before anything else looks at a scipy.sparse matrix (SciPy's compiled routines and numba code
index memory with its index arrays without bounds checks), :func:`check_structure` checks its
arrays in vectorised NumPy: lengths consistent with the shape, offsets starting at 0, monotone and
ending at nnz, every index inside the matrix. A malformed matrix raises a ValueError naming the
defect. Input already canonical is used as is, without a copy; the operator takes its own copy of
whatever it keeps (:class:`autospmv.SpMVOperator`), so that later changes to the user's
arrays never reach it.

Vectors handed to an operator are checked by :func:`check_vector` and :func:`check_out`; matrix
files (the command line's, the training corpus's) are read by :func:`load_matrix_file`.
"""

from __future__ import annotations

import copy
import operator
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from numba import prange

from .jit import njit, specialisations
from .threads import threaded_passes

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INT32_MAX = np.iinfo(np.int32).max


def value_dtype(dtype) -> np.dtype:
    """Map an input dtype to the dtype autospmv computes in, or raise TypeError. Byte order
    does not matter: big-endian values are computed in the native type, as SciPy does."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biuf":
        dtype = dtype.newbyteorder("=")
    if dtype in SUPPORTED_DTYPES:
        return dtype
    if dtype.kind in "iub":
        return np.dtype(np.float64)
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype.kind == "c":
        raise TypeError(f"autospmv does not support complex matrices ({dtype}): {COMPLEX_REASON}; "
                        "store the real and imaginary parts as two real matrices")
    raise TypeError(
        f"autospmv does not support dtype {dtype}; supported: float32, float64 "
        "(integer and bool matrices are converted to float64); convert the matrix first, e.g. "
        "A.astype(numpy.float64)"
    )


COMPLEX_REASON = ("its kernels are real-valued (the GPU kernels combine partial sums with warp "
                  "shuffles and atomic adds, which numba-cuda provides for real types only)")
"""Why complex matrices and vectors are refused (in each TypeError that refuses them)."""


def result_dtype(matrix_dtype, x_dtype, what: str = "x") -> np.dtype:
    """The dtype of ``A @ x``: ``numpy.result_type`` of the matrix's and the vector's dtypes,
    as SciPy gives it. A float32 matrix times a float64 vector is float64 (the kernels then
    accumulate in float64); times a float32 vector it stays float32. Raises TypeError for a
    complex or non-numeric vector, and for one whose result the kernels cannot compute in
    (``numpy.longdouble``: SciPy would compute in it, autospmv has no kernel for it); ``what``
    names the vector (``"X"`` for a block of vectors) in the message."""
    x_dtype = np.dtype(x_dtype)
    if x_dtype.kind == "c":
        raise TypeError(f"x has complex dtype {x_dtype}: autospmv does not support complex "
                        f"vectors, since {COMPLEX_REASON}; for a real matrix, multiply the parts: "
                        "op @ x.real + 1j * (op @ x.imag)")
    if x_dtype.kind not in "biuf":  # NumPy would parse strings and convert objects
        raise TypeError(f"x has dtype {x_dtype}; autospmv multiplies numbers (float32, "
                        "float64; integer and bool vectors are converted)")
    dtype = np.result_type(matrix_dtype, x_dtype)
    if dtype not in SUPPORTED_DTYPES:  # numpy.longdouble: no kernel is compiled for it
        raise TypeError(unsupported_vector(x_dtype, what))
    return dtype


def unsupported_vector(dtype, what: str) -> str:
    """The refusal of a vector (or block of vectors) ``what`` of a ``dtype`` the kernels cannot
    take (``numpy.longdouble``, for instance), with the fix."""
    return (f"{what} must have dtype float32 or float64; got {np.dtype(dtype)}, which "
            f"autospmv's kernels do not compute in; convert it first, e.g. "
            f"{what}.astype(numpy.float64)")


def index_dtype(nnz: int, shape: tuple[int, int]) -> np.dtype:
    """int32 when every index and offset fits, int64 otherwise."""
    if max(nnz, shape[0], shape[1]) <= _INT32_MAX:
        return np.dtype(np.int32)
    return np.dtype(np.int64)


def canonicalize(A) -> sp.csr_matrix:
    """Return A as canonical CSR (see the module docstring); never modifies A.

    Accepts any ``scipy.sparse`` matrix or array, a torch sparse COO or CSR tensor in host
    memory, or anything ``numpy.asarray`` turns into a 2-D numeric array (numpy arrays, nested
    lists). A canonical ``csr_matrix`` is returned
    itself (a ``csr_array`` as a ``csr_matrix`` over the same arrays); anything else is copied.
    Raises ValueError for a malformed sparse matrix (:func:`check_structure`).
    """
    A = _from_torch_sparse(A)
    if sp.issparse(A):
        if A.ndim != 2:
            raise ValueError(f"autospmv needs a 2-D matrix; got a {A.ndim}-D sparse array")
        check_structure(A)
        if is_canonical(A):
            if isinstance(A, sp.csr_matrix):
                return A
            csr = sp.csr_matrix((A.data, A.indices, A.indptr), shape=A.shape, copy=False)
            csr.has_sorted_indices = csr.has_canonical_format = True
            return csr
        csr = sp.csr_matrix(_with_native_values(A), dtype=value_dtype(A.dtype), copy=True)
        check_structure(csr)  # what SciPy built from a LIL or DOK matrix, before sum_duplicates
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


def borrows(A, csr) -> bool:
    """Whether the canonical ``csr`` that :func:`canonicalize` returned for A holds A's own arrays
    (A was canonical CSR already), which the caller may change later."""
    return sp.issparse(A) and A.format == "csr" and np.may_share_memory(csr.data, A.data)


def _with_native_values(A):
    """A, or a shallow copy of it whose values are in native byte order: SciPy multiplies with
    big-endian values but refuses to convert them (its dtype check knows native types only);
    index arrays of either order convert. A itself is not modified."""
    if A.dtype.isnative:
        return A
    native = copy.copy(A)
    native.data = A.data.astype(A.dtype.newbyteorder("="))
    return native


def _from_torch_sparse(A):
    """A torch sparse COO or CSR tensor in host memory as a SciPy matrix over its arrays (a
    COO tensor coalesced first); anything else as it is. Other sparse layouts are refused (a
    sparse tensor is no array NumPy could read), and so is a tensor on the GPU, which
    :func:`autospmv.prepare` takes on the device."""
    if type(A).__module__.split(".")[0] != "torch":
        return A
    import torch

    if not isinstance(A, torch.Tensor) or A.layout == torch.strided:
        return A
    if A.device.type != "cpu":
        raise ValueError(f"this torch sparse tensor lives on {A.device}; prepare it with "
                         "device='cuda' (or None), which takes it there")
    if A.ndim != 2:
        raise ValueError(f"autospmv needs a 2-D matrix; got a {A.ndim}-D sparse tensor")
    shape = tuple(A.shape)
    if A.layout == torch.sparse_csr:
        return sp.csr_matrix((A.values().numpy(), A.col_indices().numpy(),
                              A.crow_indices().numpy()), shape=shape)
    if A.layout == torch.sparse_coo:
        A = A.coalesce()
        rows, cols = A.indices().numpy()
        return sp.coo_matrix((A.values().numpy(), (rows, cols)), shape=shape)
    raise TypeError(f"autospmv takes torch sparse COO and CSR tensors; got layout {A.layout}: "
                    "convert it with .to_sparse_csr()")


def is_canonical(A) -> bool:
    """True for a CSR matrix (or array) that :func:`canonicalize` can use without a copy:
    float32/float64 values, index arrays of :func:`index_dtype`, contiguous arrays, sorted
    indices without duplicates. Call only after :func:`check_structure`: SciPy's test for
    sorted indices reads the index arrays without bounds checks."""
    if not (sp.issparse(A) and A.format == "csr" and A.ndim == 2):
        return False
    itype = index_dtype(A.data.shape[0], A.shape)
    arrays = (A.data, A.indices, A.indptr)
    return (A.data.dtype in SUPPORTED_DTYPES and A.indices.dtype == itype
            and A.indptr.dtype == itype and all(a.flags.c_contiguous for a in arrays)
            and bool(A.has_canonical_format))


def check_structure(A) -> None:
    """Check the arrays of a 2-D ``scipy.sparse`` matrix or array, or raise a ValueError
    naming the defect.

    SciPy checks a matrix's arrays when it is built, but only partly (not index ranges, nor
    that offsets are monotone), and not at all after its arrays are modified in place; its
    compiled routines and autospmv's kernels would then read and write out of bounds. CSR, CSC,
    COO, BSR and DIA matrices are checked here; LIL and DOK matrices are converted by SciPy's
    Python code, and :func:`canonicalize` checks the CSR matrix it gets from them. Costs a few
    vectorised passes over the index arrays: less than one SciPy ``A @ x``.
    """
    shape = _check_shape(A.shape)
    fmt = A.format
    if fmt in ("csr", "csc"):
        major, minor = shape if fmt == "csr" else shape[::-1]
        names = ("row", "column") if fmt == "csr" else ("column", "row")
        _check_compressed(fmt.upper(), A.indptr, A.indices, A.data, major, minor, names)
    elif fmt == "bsr":
        rows, cols = A.blocksize
        data = A.data
        if rows < 1 or cols < 1:
            raise ValueError(f"malformed BSR matrix: block size {(rows, cols)}")
        if not isinstance(data, np.ndarray) or data.ndim != 3 or data.shape[1:] != (rows, cols):
            raise ValueError(f"malformed BSR matrix: data has shape {np.shape(data)}; expected "
                             f"(blocks, {rows}, {cols})")
        if shape[0] % rows or shape[1] % cols:
            raise ValueError(f"malformed BSR matrix: shape {shape} is not a multiple of the "
                             f"block size {(rows, cols)}")
        # one value per block stands for the block in the length checks
        _check_compressed("BSR", A.indptr, A.indices, data[:, 0, 0], shape[0] // rows,
                          shape[1] // cols, ("block row", "block column"))
    elif fmt == "dia":
        data, offsets = A.data, A.offsets
        if not isinstance(data, np.ndarray) or data.ndim != 2:
            raise ValueError(f"malformed DIA matrix: data has shape {np.shape(data)}; expected "
                             "(diagonals, length)")
        if _vector_length(offsets, "DIA", "offsets") != data.shape[0]:
            raise ValueError(f"malformed DIA matrix: {offsets.shape[0]} offsets for "
                             f"{data.shape[0]} diagonals of data")
        if offsets.dtype.kind not in "iu":
            raise ValueError(f"malformed DIA matrix: offsets has dtype {offsets.dtype}; "
                             "expected integers")
        _check_offsets(offsets, shape)
    elif fmt == "coo":
        coords = A.coords if hasattr(A, "coords") else (A.row, A.col)
        if len(coords) != 2:
            raise ValueError(f"malformed COO matrix: {len(coords)} index arrays for a 2-D shape")
        nnz = _vector_length(A.data, "COO", "data")
        for name, index, size in zip(("row", "column"), coords, shape):
            _check_indices("COO", name, index, nnz, size)


def _check_offsets(offsets, shape: tuple[int, int]) -> None:
    """DIA offsets lie in ``-m..n`` (the range of SciPy's ``diags``), each once. SciPy's
    conversion casts them to its index type before its compiled loop, which writes out of
    bounds for an offset that does not fit; SciPy's constructor refuses repeated offsets."""
    if offsets.shape[0] == 0:
        return
    m, n = shape
    low, high = int(offsets.min()), int(offsets.max())
    if low < -m or high > n:
        bad = low if low < -m else high
        raise ValueError(f"malformed DIA matrix: offset {bad} lies outside the {m}x{n} matrix "
                         f"(valid: {-m}..{n})")
    distinct, counts = np.unique(offsets, return_counts=True)
    if distinct.shape[0] != offsets.shape[0]:
        raise ValueError(f"malformed DIA matrix: offset {int(distinct[counts > 1][0])} appears "
                         "more than once")


def _check_shape(shape) -> tuple[int, int]:
    try:
        m, n = (operator.index(s) for s in shape)
    except (TypeError, ValueError):
        raise ValueError(f"malformed sparse matrix: shape {shape!r} is not two integers") from None
    if m < 0 or n < 0:
        raise ValueError(f"malformed sparse matrix: negative dimension in shape {(m, n)}")
    return m, n


def _vector_length(array, fmt: str, name: str) -> int:
    """The length of a 1-D index or value array."""
    if not isinstance(array, np.ndarray):
        raise ValueError(f"malformed {fmt} matrix: {name} is a {type(array).__name__}, not a "
                         "NumPy array")
    if array.ndim != 1:
        raise ValueError(f"malformed {fmt} matrix: {name} has {array.ndim} dimensions; "
                         "expected 1")
    return array.shape[0]


COMPILED_MIN_SIZE = 1 << 20
"""Index arrays from this many entries get their range in one compiled pass (on numba's
threads by :func:`autospmv._support.threads.threaded_passes`) instead of NumPy's two; below,
NumPy's passes cost less than loading the compiled code."""


def _index_range(index):
    """(smallest, largest) entry of a non-empty index array, in one pass."""
    low = index[0]
    high = index[0]
    for k in prange(index.shape[0]):
        low = min(low, index[k])
        high = max(high, index[k])
    return low, high


_index_range_serial, _index_range_parallel = specialisations(_index_range)


def index_range(index) -> tuple:
    """(min, max) of a non-empty integer array: compiled for a large contiguous int32/int64
    array (the index arrays of every large matrix autospmv is given: a range check there cost
    more than an upload to the GPU), NumPy otherwise."""
    if (index.shape[0] < COMPILED_MIN_SIZE or index.dtype not in (np.int32, np.int64)
            or not index.flags.c_contiguous):
        return index.min(), index.max()
    parallel = threaded_passes(index.shape[0])
    return (_index_range_parallel if parallel else _index_range_serial)(index)


def _check_indices(fmt: str, name: str, index, nnz: int, size: int) -> None:
    """``index`` holds ``nnz`` integers in ``0..size-1``."""
    length = _vector_length(index, fmt, name)
    if index.dtype.kind not in "iu":
        raise ValueError(f"malformed {fmt} matrix: {name} has dtype {index.dtype}; "
                         "expected integers")
    if length != nnz:
        raise ValueError(f"malformed {fmt} matrix: {name} has {length} entries but data has "
                         f"{nnz}")
    if nnz == 0:
        return
    low, high = index_range(index)
    if low < 0:
        at = int(np.argmax(index < 0))
        raise ValueError(f"malformed {fmt} matrix: negative {name} index {int(low)} "
                         f"(first at entry {at})")
    if high >= size:
        at = int(np.argmax(index >= size))
        raise ValueError(f"malformed {fmt} matrix: {name} index {int(high)} out of range "
                         f"for {size} {name}s (first at entry {at}; valid: 0..{size - 1})")


def _check_compressed(fmt: str, indptr, indices, data, major: int, minor: int,
                      names: tuple[str, str]) -> None:
    """Compressed storage of ``major`` rows (CSR; columns for CSC, block rows for BSR) over
    ``minor`` positions: ``indptr`` of length major + 1, starting at 0, non-decreasing, ending
    at nnz = len(indices) = len(data); every index in ``0..minor-1``."""
    length = _vector_length(indptr, fmt, "indptr")
    if indptr.dtype.kind not in "iu":
        raise ValueError(f"malformed {fmt} matrix: indptr has dtype {indptr.dtype}; "
                         "expected integers")
    if length != major + 1:
        raise ValueError(f"malformed {fmt} matrix: indptr has {length} entries; expected "
                         f"{major + 1} ({major} {names[0]}s + 1)")
    nnz = _vector_length(data, fmt, "data")
    if indptr[0] != 0:
        raise ValueError(f"malformed {fmt} matrix: indptr[0] is {int(indptr[0])}; expected 0")
    if indptr[-1] != nnz:
        raise ValueError(f"malformed {fmt} matrix: indptr[-1] is {int(indptr[-1])} but data "
                         f"has {nnz} entries")
    decreasing = indptr[1:] < indptr[:-1]
    if decreasing.any():
        at = int(np.argmax(decreasing))
        raise ValueError(f"malformed {fmt} matrix: indptr decreases at {names[0]} {at} "
                         f"(indptr[{at}] = {int(indptr[at])} > indptr[{at + 1}] = "
                         f"{int(indptr[at + 1])})")
    _check_indices(fmt, f"{names[1]}", indices, nnz, minor)


def load_matrix_file(path):
    """The matrix stored in a ``.npz`` (``scipy.sparse.save_npz``) or ``.mtx`` (Matrix Market)
    file, as stored (a SciPy sparse matrix, or a dense array from a Matrix Market array file),
    its arrays checked by :func:`check_structure` before anything converts it: SciPy's
    conversions index memory with them unchecked. A ValueError names the file and what is
    wrong, also when the path is not a regular file (opening a FIFO would wait for a writer).
    ``allow_pickle`` stays off: loading executes nothing from the file."""
    path = Path(path)
    try:
        exists, regular = path.exists(), path.is_file()
    except OSError as error:  # a name too long for the file system, a folder it cannot read
        raise ValueError(f"cannot read {str(path)[:200]}: {error.strerror}") from None
    if not exists:
        raise ValueError(f"no such file: {path}")
    if not regular:
        raise ValueError(f"{path} is not a regular file")
    if path.suffix not in (".npz", ".mtx"):
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .npz or .mtx")
    if path.suffix == ".npz" and not zipfile.is_zipfile(path):
        # NumPy would read the bytes as a pickle and say that allow_pickle is off
        raise ValueError(f"cannot read a sparse matrix from {path}: not an .npz archive (the "
                         "zip file scipy.sparse.save_npz writes); the file is damaged or of "
                         "another kind")
    try:
        if path.suffix == ".npz":
            A = sp.load_npz(path)
        else:
            import scipy.io

            A = scipy.io.mmread(path)
    except Exception as error:  # any parse failure is the file's fault, named with it
        raise ValueError(f"cannot read a sparse matrix from {path}: {error}") from None
    if sp.issparse(A):
        try:
            check_structure(A)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
    return A


def check_vector(x, n: int, matrix_dtype: np.dtype) -> np.ndarray:
    """Return x as a contiguous 1-D numpy array of length n for a product with a matrix of
    ``matrix_dtype``, in the product's dtype (:func:`result_dtype`), or raise."""
    if (type(x) is np.ndarray and x.ndim == 1 and x.shape[0] == n and x.dtype == matrix_dtype
            and x.flags.c_contiguous):
        return x  # the common call, returned as it is without the general path's conversions
    arr = np.asarray(x)
    if arr.ndim == 2 and 1 in arr.shape and arr.size == n:
        arr = arr.reshape(n)
    if arr.ndim != 1:
        raise ValueError(f"x must be a vector of length {n}; got an array with shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"x has length {arr.shape[0]}, but the matrix has {n} columns")
    return np.ascontiguousarray(arr, dtype=result_dtype(matrix_dtype, arr.dtype))


OUT_OVERLAPS_X = ("out overlaps x: the kernel would overwrite x while reading it; pass a "
                  "separate output array")


OUT_OVERLAPS_MATRIX = ("out overlaps the operator's own arrays: the product would overwrite "
                       "the matrix; pass a separate output array")


def byte_ranges(arrays) -> np.ndarray:
    """The memory of each host array of ``arrays`` as a row ``[first byte, last byte + 1)``
    (an int64 array of shape (k, 2); empty arrays have none), what :func:`check_out` compares
    an ``out`` with."""
    rows = []
    for array in arrays:
        if array.size == 0:
            continue
        low = high = array.__array_interface__["data"][0]
        for length, stride in zip(array.shape, array.strides):
            reach = (length - 1) * stride
            low, high = (low + reach, high) if reach < 0 else (low, high + reach)
        rows.append((low, high + array.itemsize))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


@njit(cache=True, nogil=True)
def _overlap(out, x, ranges):
    # 1 when out's bytes meet x's, 2 when they meet a row of ``ranges``, else 0 (out and x are
    # contiguous vectors: their bytes are one interval each)
    low = np.int64(out.ctypes.data)
    high = low + np.int64(out.nbytes)
    if high == low:
        return 0
    x_low = np.int64(x.ctypes.data)
    if x_low < high and low < x_low + np.int64(x.nbytes):
        return 1
    for row in range(ranges.shape[0]):
        if ranges[row, 0] < high and low < ranges[row, 1]:
            return 2
    return 0


NO_RANGES = np.empty((0, 2), dtype=np.int64)
"""No arrays for :func:`check_out` to keep ``out`` apart from (beside x)."""


def check_out(out, m: int, dtype: np.dtype, x: np.ndarray, kept: np.ndarray = NO_RANGES) -> None:
    """Check a user-supplied output buffer for a host x (the array the kernel reads, a
    contiguous vector, as :func:`check_vector` returns it): a writable, contiguous numpy array
    of length m and exactly ``dtype``, sharing no memory with x (a kernel reads x while it
    writes out, so an overlap would give wrong results) nor with the arrays whose
    :func:`byte_ranges` are ``kept``, those the operator holds (writing there would change the
    matrix of every later product). The overlaps are found in compiled code, one call for all
    (``numpy.may_share_memory`` per array cost about 0.3 µs each, a product of 10⁴ nonzeros
    takes about 5 µs)."""
    shape = getattr(out, "shape", None)
    if shape != (m,):
        raise ValueError(f"out must have shape ({m},); got {shape}")
    out_dtype = out.dtype if isinstance(out, np.ndarray) else np.dtype(getattr(out, "dtype", None))
    if out_dtype != dtype:
        raise TypeError(f"out must have dtype {dtype}; got {out_dtype}")
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array like x; got {type(out).__name__}")
    flags = out.flags
    if not flags.c_contiguous:
        raise ValueError("out must be contiguous")
    if not flags.writeable:
        raise ValueError("out is read-only; pass a writable array")
    found = _overlap(out, x, kept)
    if found == 1:
        raise ValueError(OUT_OVERLAPS_X)
    if found == 2:
        raise ValueError(OUT_OVERLAPS_MATRIX)
