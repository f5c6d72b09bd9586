"""Feed random, mostly malformed, CSR and CSC matrices to every kernel on the CPU and check each
outcome against an independent oracle; run in a subprocess by ``test_hostile_input.py``, since a
regression could crash the process.

Usage: ``python tests/fuzz_worker.py COUNT [SEED]``. Prints one JSON object on stdout:
``{"matrices": COUNT, "refused": n, "computed": n, "failures": [...]}``. A malformed matrix
(by the oracle, a plain Python loop over the arrays) must raise a ValueError starting with
"malformed"; a valid one must give SciPy's result to rounding (or, for ELL/HYB, the format's
documented FormatTooLargeError refusal).
"""

from __future__ import annotations

import json
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


def random_arrays(rng):
    """Valid compressed arrays (major x minor), then one random mutation."""
    major, minor = int(rng.integers(0, 9)), int(rng.integers(0, 9))
    itype = np.int32 if rng.random() < 0.8 else np.int64
    lengths = rng.integers(0, minor + 1, major) if minor else np.zeros(major, np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(itype)
    indices = np.concatenate([np.sort(rng.choice(minor, k, replace=False)) for k in lengths]
                             + [np.zeros(0, np.int64)]).astype(itype)
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


def oracle(major, minor, data, indices, indptr):
    """The dense matrix (major x minor) the arrays describe, or None when malformed."""
    if len(indptr) != major + 1 or len(indices) != len(data) or indptr[0] != 0:
        return None
    if int(indptr[-1]) != len(data):
        return None
    for i in range(major):
        if indptr[i + 1] < indptr[i]:
            return None
    dense = np.zeros((major, minor))
    for i in range(major):
        for p in range(int(indptr[i]), int(indptr[i + 1])):
            if not 0 <= int(indices[p]) < minor:
                return None
            dense[i, int(indices[p])] += float(data[p])
    return dense


def build(major, minor, data, indices, indptr, csc: bool):
    """The matrix with exactly these arrays: built valid and empty, then filled, so that
    SciPy's constructor neither checks nor repairs them."""
    shape = (minor, major) if csc else (major, minor)
    A = (sp.csc_matrix if csc else sp.csr_matrix)(shape, dtype=data.dtype)
    A.data, A.indices, A.indptr = data, indices, indptr
    return A


def main(count: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    refused = computed = 0
    failures = []
    for case in range(count):
        major, minor, data, indices, indptr, mutation = random_arrays(rng)
        csc = bool(rng.random() < 0.25)
        dense = oracle(major, minor, data, indices, indptr)
        if dense is not None and csc:
            dense = dense.T
        shape = (minor, major) if csc else (major, minor)
        x = rng.uniform(-1, 1, shape[1])
        for kernel in (None, *autospmv.KERNELS):
            A = build(major, minor, data.copy(), indices.copy(), indptr.copy(), csc)
            where = f"case {case} ({'CSC' if csc else 'CSR'} {shape}, {mutation}), {kernel}"
            try:
                y = autospmv.prepare(A, kernel=kernel, device="cpu") @ x
            except FormatTooLargeError:
                if dense is None:
                    failures.append(f"{where}: malformed, but a format refused it for its size")
                continue
            except ValueError as error:
                if dense is not None or not str(error).startswith("malformed"):
                    failures.append(f"{where}: ValueError {error}")
                else:
                    refused += 1
                continue
            except Exception as error:  # noqa: BLE001 (any other exception is a failure)
                failures.append(f"{where}: {type(error).__name__} {error}")
                continue
            if dense is None:
                failures.append(f"{where}: malformed, but computed {y!r}")
                continue
            expected = dense @ x
            tolerance = 1e-5 if data.dtype == np.float32 else 1e-12
            scale = np.linalg.norm(expected)
            error = np.linalg.norm(y - expected) / scale if scale else np.linalg.norm(y)
            if not error <= tolerance:
                failures.append(f"{where}: relative error {error:.3g}")
            computed += 1
    return {"matrices": count, "refused": refused, "computed": computed, "failures": failures}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)))
