"""Feed random, mostly malformed, CSR, CSC and DIA matrices to every kernel on the CPU and check
each outcome against an independent oracle; run in a subprocess by ``test_hostile_input.py``,
since a regression could crash the process.

Usage: ``python tests/fuzz_worker.py COUNT [SEED] [--without-validation]``. Prints one JSON
object on stdout: ``{"matrices": COUNT, "refused": n, "computed": n, "failures": [...]}``.

Every matrix goes through :func:`autospmv.features`, and, for the automatic choice and every
kernel, through :func:`autospmv.prepare` or the public ``SpMVOperator(A, decision, device)``
(in turn), then ``op @ x`` and ``op.T @ z``. A malformed matrix (by the oracle, NumPy over the
arrays, apart from autospmv's checks) must raise a ValueError starting with "malformed"; a
valid one must give SciPy's result to rounding (or, for ELL/HYB, the format's documented
FormatTooLargeError refusal). Most shapes have up to 8 rows and columns; some are wide or tall,
with one dimension of millions and a few nonzeros (where the features count over the nonzeros
and Aᵀ of a wide matrix runs on COO).

``--without-validation`` replaces autospmv's structure check with one that accepts anything:
the fuzz must then report failures (or the process crash), which shows that it would catch a
validation that lets malformed matrices through.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import autospmv  # noqa: E402
from autospmv.formats.base import FormatTooLargeError  # noqa: E402

MUTATIONS = (
    "none", "none", "none", "negative index", "index past the end", "huge index",
    "indptr decreasing", "indptr[0] not 0", "indptr past nnz", "indptr short of nnz",
    "indices too short", "data too short", "indptr too long", "indptr too short",
    "negative indptr", "unsorted with duplicates",
)
DIA_MUTATIONS = (
    "none", "none", "none", "offset past the end", "offset before the start", "huge offset",
    "repeated offset", "more offsets than diagonals", "float offsets", "1-D data",
)
HUGE = (2_200_000, 2_600_000)
"""The range of the long dimension of a wide or tall matrix: past the sizes from which the
features count over the nonzeros and Aᵀ of a wide matrix runs on COO."""
PARAMS = {"csr_vector": {"threads_per_row": 2}, "hyb": {"width": 2}, "csr5": {"sigma": 4}}
"""Parameters for the decisions handed to ``SpMVOperator`` (the choosers need a valid matrix)."""


def random_dims(rng) -> tuple[int, int]:
    """(major, minor) of the compressed arrays: mostly up to 8 each, sometimes one of them
    in :data:`HUGE` (a wide or a tall matrix) with the other up to 8."""
    kind = rng.random()
    small = int(rng.integers(0, 9))
    huge = int(rng.integers(*HUGE))
    if kind < 0.025:
        return max(small, 1), huge
    if kind < 0.05:
        return huge, max(small, 1)
    return small, int(rng.integers(0, 9))


def random_arrays(rng):
    """Valid compressed arrays (major x minor, at most 8 nonzero rows), then one random
    mutation."""
    major, minor = random_dims(rng)
    itype = np.int32 if rng.random() < 0.8 else np.int64
    lengths = np.zeros(major, np.int64)
    if minor:
        filled = rng.choice(major, min(major, 8), replace=False) if major else []
        lengths[filled] = rng.integers(0, min(minor, 8) + 1, len(filled))
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(itype)
    indices = np.concatenate([np.sort(rng.choice(minor, k, replace=False))
                              for k in lengths[lengths > 0]] + [np.zeros(0, np.int64)])
    indices = indices.astype(itype)
    dtype = np.float64 if rng.random() < 0.6 else np.float32
    data = rng.uniform(-1, 1, indices.size).astype(dtype)
    mutation = MUTATIONS[int(rng.integers(len(MUTATIONS)))]
    nnz = indices.size
    if mutation == "negative index" and nnz:
        indices[rng.integers(nnz)] = -int(rng.integers(1, 5))
    elif mutation == "index past the end" and nnz:
        indices[rng.integers(nnz)] = minor + int(rng.integers(0, 3))
    elif mutation == "huge index" and nnz:
        indices[rng.integers(nnz)] = np.iinfo(itype).max
    elif mutation == "indptr decreasing" and major >= 2 and nnz:
        i = int(rng.integers(1, major))
        indptr[i] = indptr[-1] if indptr[i] < indptr[-1] else indptr[i] + 1
    elif mutation == "indptr[0] not 0" and major:
        indptr[0] = 1
    elif mutation == "indptr past nnz":
        indptr[-1] += int(rng.integers(1, 4))
    elif mutation == "indptr short of nnz" and nnz:
        indptr[-1] -= 1
    elif mutation == "indices too short" and nnz:
        indices = indices[:-1]
    elif mutation == "data too short" and nnz:
        data = data[:-1]
    elif mutation == "indptr too long":
        indptr = np.append(indptr, indptr[-1])
    elif mutation == "indptr too short" and major:
        indptr = indptr[:-1]
    elif mutation == "negative indptr" and major >= 1:
        indptr[int(rng.integers(1, major + 1))] = -1
    elif mutation == "unsorted with duplicates" and nnz >= 2:
        indices[:] = rng.permutation(indices)
        indices[-1] = indices[0]
    return major, minor, data, indices, indptr, mutation


def compressed_oracle(major, minor, data, indices, indptr):
    """The entries (major index, minor index, value) the arrays describe, or None when they
    are malformed."""
    indptr = np.asarray(indptr, dtype=np.int64)
    if len(indptr) != major + 1 or len(indices) != len(data) or indptr[0] != 0:
        return None
    if indptr[-1] != len(data) or (np.diff(indptr) < 0).any():
        return None
    cols = np.asarray(indices, dtype=np.int64)
    if cols.size and (cols.min() < 0 or cols.max() >= minor):
        return None
    rows = np.repeat(np.arange(major), np.diff(indptr))
    return rows, cols, np.asarray(data, dtype=np.float64)


def random_dia(rng):
    """A DIA matrix of up to 8x8 built valid, then given one random mutation past SciPy's
    constructor; (matrix, mutation)."""
    m, n = (int(v) for v in rng.integers(0, 9, 2))
    count = int(rng.integers(0, 4))
    offsets = rng.choice(np.arange(-m, n + 1), min(count, m + n + 1), replace=False)
    dtype = np.float64 if rng.random() < 0.6 else np.float32
    data = rng.uniform(-1, 1, (offsets.size, int(rng.integers(0, n + 2)))).astype(dtype)
    A = sp.dia_matrix((data, offsets.astype(np.int32)), shape=(m, n))
    mutation = DIA_MUTATIONS[int(rng.integers(len(DIA_MUTATIONS)))]
    if mutation == "offset past the end" and offsets.size:
        A.offsets[rng.integers(offsets.size)] = n + int(rng.integers(1, 4))
    elif mutation == "offset before the start" and offsets.size:
        A.offsets[rng.integers(offsets.size)] = -m - int(rng.integers(1, 4))
    elif mutation == "huge offset" and offsets.size:
        A.offsets = A.offsets.astype(np.int64)
        A.offsets[rng.integers(offsets.size)] = 2**40
    elif mutation == "repeated offset" and offsets.size >= 2:
        A.offsets[-1] = A.offsets[0]
    elif mutation == "more offsets than diagonals":
        A.offsets = np.append(A.offsets, A.offsets[:1] + 1).astype(np.int32)
    elif mutation == "float offsets":
        A.offsets = A.offsets.astype(np.float64)
    elif mutation == "1-D data":
        A.data = A.data.ravel()
    return A, mutation


def dia_oracle(A):
    """The entries (row, column, value) of a DIA matrix: diagonal k holds ``data[d, j]`` at
    (j − k, j) for every column j inside the matrix and the data; None when malformed (data
    not 2-D, a count of offsets other than of diagonals, offsets not distinct integers in
    -m..n)."""
    m, n = A.shape
    data, offsets = A.data, A.offsets
    if data.ndim != 2 or offsets.ndim != 1 or len(offsets) != data.shape[0]:
        return None
    if offsets.dtype.kind not in "iu" or len(set(offsets.tolist())) != len(offsets):
        return None
    if any(not -m <= k <= n for k in offsets.tolist()):
        return None
    rows, cols, values = [], [], []
    for d, k in enumerate(offsets.tolist()):
        for j in range(min(n, data.shape[1])):
            if 0 <= j - k < m:
                rows.append(j - k)
                cols.append(j)
                values.append(float(data[d, j]))
    return np.array(rows, np.int64), np.array(cols, np.int64), np.array(values)


def product(entries, length: int, x, transposed: bool = False) -> np.ndarray:
    """``A @ x`` (``Aᵀ @ x``) from the oracle's entries (row, column, value), in float64."""
    rows, cols, values = entries
    if transposed:
        rows, cols = cols, rows
    y = np.zeros(length)
    np.add.at(y, rows, values * x[cols])
    return y


def build(major, minor, data, indices, indptr, csc: bool):
    """The matrix with exactly these arrays: built valid and empty, then filled, so that
    SciPy's constructor neither checks nor repairs them."""
    shape = (minor, major) if csc else (major, minor)
    A = (sp.csc_matrix if csc else sp.csr_matrix)(shape, dtype=data.dtype)
    A.data, A.indices, A.indptr = data, indices, indptr
    return A


def random_case(rng):
    """(a fresh copy of the matrix, its oracle's entries or None, its shape, its value dtype,
    a description)."""
    if rng.random() < 0.15:
        A, mutation = random_dia(rng)

        def make_dia():  # A's arrays copied past SciPy's constructor, which would check them
            copy = sp.dia_matrix(A.shape, dtype=A.dtype)
            copy.data, copy.offsets = A.data.copy(), A.offsets.copy()
            return copy

        return make_dia, dia_oracle(A), A.shape, A.data.dtype, f"DIA {A.shape}, {mutation}"
    major, minor, data, indices, indptr, mutation = random_arrays(rng)
    csc = bool(rng.random() < 0.25)
    entries = compressed_oracle(major, minor, data, indices, indptr)
    if entries is not None and csc:
        entries = (entries[1], entries[0], entries[2])
    shape = (minor, major) if csc else (major, minor)

    def make():
        return build(major, minor, data.copy(), indices.copy(), indptr.copy(), csc)

    return make, entries, shape, data.dtype, f"{'CSC' if csc else 'CSR'} {shape}, {mutation}"


def operator(A, kernel, public: bool):
    """The CPU operator of A: ``prepare`` (the automatic choice, or ``kernel=``), or, when
    ``public``, the public constructor with a decision for ``kernel``."""
    if kernel is None or not public:
        return autospmv.prepare(A, kernel=kernel, device="cpu")
    decision = autospmv.Decision(kernel, dict(PARAMS.get(kernel, {})), "fuzz")
    return autospmv.SpMVOperator(A, decision, "cpu")


def close(y, expected, dtype) -> bool:
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    scale = np.linalg.norm(expected)
    error = np.linalg.norm(y - expected) / scale if scale else np.linalg.norm(y)
    return bool(error <= tolerance)


def main(count: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    refused = computed = 0
    failures = []

    def refusal(where: str, error: Exception, valid: bool) -> None:
        nonlocal refused
        if valid or not isinstance(error, ValueError) or not str(error).startswith("malformed"):
            failures.append(f"{where}: {type(error).__name__} {error}")
        else:
            refused += 1

    for case in range(count):
        make, entries, shape, dtype, what = random_case(rng)
        valid = entries is not None
        x = rng.uniform(-1, 1, shape[1])
        z = rng.uniform(-1, 1, shape[0])
        try:
            values = autospmv.features(make(), device="cpu")
            if not valid:
                failures.append(f"case {case} ({what}), features: malformed, but computed")
            elif not all(math.isfinite(v) for v in values.values()):
                failures.append(f"case {case} ({what}), features: not finite: {values}")
        except Exception as error:  # noqa: BLE001 (any other exception is a failure)
            refusal(f"case {case} ({what}), features", error, valid)
        for kernel in (None, *autospmv.KERNELS):
            public = kernel is not None and case % 2 == 1
            where = (f"case {case} ({what}), {kernel}"
                     f"{' through SpMVOperator' if public else ''}")
            try:
                op = operator(make(), kernel, public)
                y, w = op @ x, op.T @ z
            except FormatTooLargeError:
                if not valid:
                    failures.append(f"{where}: malformed, but a format refused it for its size")
                continue
            except Exception as error:  # noqa: BLE001 (any other exception is a failure)
                refusal(where, error, valid)
                continue
            if not valid:
                failures.append(f"{where}: malformed, but computed {y!r}")
                continue
            if not close(y, product(entries, shape[0], x), dtype):
                failures.append(f"{where}: wrong A @ x")
            if not close(w, product(entries, shape[1], z, transposed=True), dtype):
                failures.append(f"{where}: wrong Aᵀ @ z ({op.T.kernel})")
            computed += 1
    return {"matrices": count, "refused": refused, "computed": computed, "failures": failures}


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--without-validation"]
    if "--without-validation" in sys.argv:
        autospmv._support.validation.check_structure = lambda A: None
    print(json.dumps(main(int(arguments[0]), int(arguments[1]) if len(arguments) > 1 else 0)))
