"""Run the GPU multi-vector product (SpMM) in numba-cuda's CUDA simulator and print the results
as one JSON object.

The simulator replaces ``numba.cuda`` process-wide and cannot share a process with real
compilation, so ``test_spmm_simulator.py`` runs this script once in a subprocess and asserts on
its output. Run by hand::

    PYTHONPATH=. python tests/spmm_simulator_worker.py

Output (stdout): ``{"kernel/dtype/matrix/k=K": {"error": float | null, "exception": str |
null}}`` for every case of :data:`spmm_cases.CASES` in both dtypes: ``op @ X`` with a host X,
against SciPy in float64. Besides, ``kernel/dtype/device_X`` multiplies a numba device X (k = 5;
a float32 X for a float64 matrix too, whose product is float64) and checks the result's kind,
shape and dtype, and ``kernel/dtype/nan_inf`` checks that NaN and ±Inf in X give SciPy's
pattern, for every kernel of :data:`spmm_cases.KERNELS`; ``passes/dtype/matrix/k=K`` runs the
few-columns kernel in passes of four columns on the cases of :data:`spmm_cases.PASSES`, and
``program/dtype/matrix/k=K`` the eight-columns kernel on those of :data:`spmm_cases.EIGHT` and
the other one-pass programs on those of :data:`spmm_cases.ONE_PASS`, and
``program/tiles_of_T/dtype/matrix/k=K`` the tiled programs on those of
:data:`spmm_cases.TILED`, and ``rule/dtype/k=K`` an operator whose model names a program
(:data:`spmm_cases.RULE_CASES`).
Timings go to stderr.
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numpy as np  # noqa: E402

import autospmv  # noqa: E402
from matrices import TINY, nonfinite_error, reference, relative_error  # noqa: E402
from spmm_cases import CASES, EIGHT, KERNELS, ONE_PASS, PASSES, RULE_CASES, TILED  # noqa: E402

DTYPES = {"float32": np.float32, "float64": np.float64}


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def block(rng, n: int, k: int, dtype) -> np.ndarray:
    """Positive values (see ``matrices``: no cancellation, so the tolerance measures rounding)."""
    return rng.uniform(0.5, 1.5, (n, k)).astype(dtype)


def host_case(op, A, rng, k: int) -> dict:
    X = block(rng, A.shape[1], k, op.dtype)
    Y = op @ X
    if not isinstance(Y, np.ndarray) or Y.dtype != op.dtype or Y.shape != (A.shape[0], k):
        raise TypeError(f"host X gave {type(Y).__name__} {getattr(Y, 'dtype', '')} "
                        f"{getattr(Y, 'shape', '')}")
    return {"error": relative_error(Y, reference(A, X)), "exception": None}


def device_case(op, A, rng) -> dict:
    from numba import cuda

    errors = []
    for x_dtype in (np.float32, op.dtype):
        X = block(rng, A.shape[1], 5, x_dtype)
        Y = op @ cuda.to_device(X)
        expected = np.result_type(op.dtype, x_dtype)
        if not hasattr(Y, "__cuda_array_interface__") or Y.shape != (A.shape[0], 5):
            raise TypeError(f"a device X gave a {type(Y).__name__} of shape {Y.shape}")
        if Y.dtype != expected:
            raise TypeError(f"a {np.dtype(x_dtype)} X gave {Y.dtype}; expected {expected}")
        errors.append(relative_error(Y.copy_to_host(), reference(A, X)))
    return {"error": max(errors), "exception": None}


def nan_case(op, A, rng) -> dict:
    n = A.shape[1]
    X = block(rng, n, 6, op.dtype)
    X[0, 1], X[n // 2, 3], X[n - 1, 5] = np.nan, np.inf, -np.inf
    with warnings.catch_warnings():  # inf - inf = nan, in SciPy and in the simulated threads
        warnings.simplefilter("ignore", RuntimeWarning)
        Y_ref = reference(A, X)
        Y = op @ X
    return {"error": nonfinite_error(Y, Y_ref), "exception": None}


def program_case(A, dtype, rng, k: int, program: str, tile: int = 0) -> dict:
    """A program of k > 4 columns that only a timed first product picks on a GPU (the
    few-columns kernel in passes of four columns, the eight-columns kernel, the one-pass
    programs besides the many-columns kernel, in tiles of ``tile`` columns where given),
    through its launches."""
    from numba import cuda

    from autospmv._support.validation import canonicalize
    from autospmv.kernels.cuda import spmm_programs

    A = canonicalize(A)
    m, n = A.shape
    arrays = {name: cuda.to_device(getattr(A, name)) for name in ("indptr", "indices", "data")}
    pieces = tuple(cuda.to_device(a) for a in spmm_programs.long_row_pieces(A.indptr))
    X = block(rng, n, k, dtype)
    x = cuda.to_device(X.reshape(n * k))
    y = cuda.device_array(m * k, dtype=dtype)
    steps = spmm_programs.launches(A.shape, arrays, pieces,
                                   spmm_programs.few_columns_group(A.shape, A.indptr), k, dtype,
                                   dtype, program, tile)
    for step in steps:
        step.closure(dtype, dtype)(x, y)
    return {"error": relative_error(y.copy_to_host().reshape(m, k), reference(A, X)),
            "exception": None}


def rule_case(A, dtype, rng, k: int) -> dict:
    """A product of k columns through an operator whose model carries an SpMM rule: nothing is
    timed under the simulator, so the rule's program runs (the passes up to 8 columns, the
    column pairs of eight nonzeros a step beyond), noted in the decision."""
    from autospmv._decide.model.spmm_rule import SpmmChoice, SpmmRule

    rule = SpmmRule((SpmmChoice(8, 1e9, "passes", "column_quads"),
                     SpmmChoice(64, None, "column_pairs_wide_step", "column_pairs_wide_step")),
                    labels=12)
    op = autospmv.prepare(A, kernel="csr_vector", device="cuda")
    op._spmm_rule = lambda: rule
    X = block(rng, A.shape[1], k, dtype)
    Y = op @ X
    notes = [n for n in op.decision.notes if "picked by the SpMM rule fitted to 12" in n]
    return {"error": relative_error(Y, reference(A, X)), "exception": None, "notes": notes}


def run(results: dict, key: str, case) -> None:
    try:
        results[key] = case()
    except Exception as exc:  # reported per case; the test shows the message
        results[key] = {"error": None, "exception": describe(exc)}


def main() -> dict:
    results = {}
    for kernel in KERNELS:
        started = time.perf_counter()
        columns = {}  # matrix -> the column counts of this kernel's cases on it
        for case_kernel, name, k in CASES:
            if case_kernel == kernel:
                columns.setdefault(name, []).append(k)
        for dtype_name, dtype in DTYPES.items():
            rng = np.random.default_rng(7)
            for name, counts in columns.items():
                A = TINY[name]().astype(dtype)
                op = autospmv.prepare(A, kernel=kernel, device="cuda")
                for k in counts:
                    run(results, f"{kernel}/{dtype_name}/{name}/k={k}",
                        lambda: host_case(op, A, rng, k))
            A = TINY["power_law_48"]().astype(dtype)
            op = autospmv.prepare(A, kernel=kernel, device="cuda")
            run(results, f"{kernel}/{dtype_name}/device_X", lambda: device_case(op, A, rng))
            run(results, f"{kernel}/{dtype_name}/nan_inf", lambda: nan_case(op, A, rng))
        print(f"{kernel}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    for dtype_name, dtype in DTYPES.items():
        rng = np.random.default_rng(11)
        for program, name, k in ([("passes", name, k) for name, k in PASSES]
                                 + [("eight_columns", name, k) for name, k in EIGHT]
                                 + ONE_PASS):
            A = TINY[name]().astype(dtype)
            run(results, f"{program}/{dtype_name}/{name}/k={k}",
                lambda: program_case(A, dtype, rng, k, program))
        for program, tile, name, k in TILED:
            A = TINY[name]().astype(dtype)
            run(results, f"{program}/tiles_of_{tile}/{dtype_name}/{name}/k={k}",
                lambda: program_case(A, dtype, rng, k, program, tile))
        for k, _ in RULE_CASES:
            A = TINY["power_law_48"]().astype(dtype)
            run(results, f"rule/{dtype_name}/k={k}", lambda: rule_case(A, dtype, rng, k))
    return results


if __name__ == "__main__":
    json.dump(main(), sys.stdout)
