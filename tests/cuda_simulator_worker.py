"""Run every CUDA kernel in numba-cuda's CUDA simulator and print the results as one JSON object.

The simulator replaces ``numba.cuda`` process-wide and cannot share a process with real
compilation, so ``test_cuda_simulator.py`` runs this script once in a subprocess and asserts on
its output. Run by hand::

    PYTHONPATH=. python tests/cuda_simulator_worker.py [KERNEL ...]

Output (stdout): ``{"kernel/dtype/case": {"error": float | null, "exception": str | null}}`` where
``dtype`` is the matrix's and ``case`` is a name from ``matrices.TINY`` (host vectors,
``prepare(A, kernel=K, device="cuda")``),
``device_out`` (numba device vectors, with and without ``out=``, then a host vector, which
allocates the staging buffers: ``op.memory`` must grow by them then and not before),
``nan_inf`` (NaN and ±Inf in x: any difference from SciPy's NaN/Inf pattern is reported as an
exception) or a parameter case
from ``matrices.TINY_PARAMETER_CASES`` (``matrix[name=value]``); ``mixed/<case>`` runs a matrix of
``matrices.TINY_MIXED_MATRICES`` or a case of ``matrices.TINY_MIXED_PARAMETER_CASES`` with x of
the other dtype (:func:`mixed_case`). ``error`` is the relative error against SciPy in float64.
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
from matrices import (  # noqa: E402
    TINY, TINY_EXTRA_CASES, TINY_MIXED_MATRICES, TINY_MIXED_PARAMETER_CASES,
    TINY_PARAMETER_CASES, nonfinite_error, parameter_case_name, random_vector, reference,
    relative_error,
)

DTYPES = {"float32": np.float32, "float64": np.float64}


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def host_case(kernel: str, dtype, A, rng, params=None) -> dict:
    op = autospmv.prepare(A, kernel=kernel, device="cuda", params=params)
    x = random_vector(rng, A.shape[1], dtype)
    y = op @ x
    if not isinstance(y, np.ndarray) or y.dtype != dtype or y.shape != (A.shape[0],):
        raise TypeError(f"host x gave {type(y).__name__} {getattr(y, 'dtype', '')} "
                        f"{getattr(y, 'shape', '')}")
    return {"error": relative_error(y, reference(A, x)), "exception": None}


def device_case(kernel: str, dtype, A, rng, params=None) -> dict:
    from numba import cuda

    op = autospmv.prepare(A, kernel=kernel, device="cuda", params=params)
    errors = []
    out = cuda.device_array(A.shape[0], dtype=dtype)
    for _ in range(2):  # the second call overwrites the first result
        x = random_vector(rng, A.shape[1], dtype)
        returned = op.matvec(cuda.to_device(x), out=out)
        if returned is not out:
            raise AssertionError("op.matvec(x, out=out) did not return out")
        errors.append(relative_error(out.copy_to_host(), reference(A, x)))
    x = random_vector(rng, A.shape[1], dtype)
    y = op @ cuda.to_device(x)
    if not hasattr(y, "__cuda_array_interface__"):
        raise TypeError(f"a device x gave a {type(y).__name__}, not a device array")
    errors.append(relative_error(y.copy_to_host(), reference(A, x)))
    held = op.memory["device"]  # the format only: device vectors need no staging buffers
    x = random_vector(rng, A.shape[1], dtype)
    errors.append(relative_error(op @ x, reference(A, x)))
    staging = sum(A.shape) * np.dtype(dtype).itemsize
    if op.memory["device"] != held + staging:
        raise AssertionError(f"device bytes {held} before the first host product and "
                             f"{op.memory['device']} after it; expected {staging} more, the "
                             "staging buffers of x and y")
    return {"error": max(errors), "exception": None}


def nan_case(kernel: str, dtype, A, rng, params=None) -> dict:
    op = autospmv.prepare(A, kernel=kernel, device="cuda", params=params)
    n = A.shape[1]
    x = random_vector(rng, n, dtype)
    x[0], x[n // 2], x[n - 1] = np.nan, np.inf, -np.inf
    with warnings.catch_warnings():  # inf - inf = nan, in SciPy and in the simulated threads
        warnings.simplefilter("ignore", RuntimeWarning)
        y_ref = reference(A, x)
        y = op @ x
    return {"error": nonfinite_error(y, y_ref), "exception": None}


def mixed_case(kernel: str, dtype, A, rng, params=None) -> dict:
    """x of the other dtype than the matrix's: the result must be float64 (numpy.result_type
    of float32 and float64), accumulated in float64, so its error is measured against
    float64's tolerance: x on the host and on the device, with and without ``out=``, with the
    tuned parameters and with the others (the kernel's other paths)."""
    from numba import cuda

    op = autospmv.prepare(A, kernel=kernel, device="cuda", params=params)
    other = np.float64 if dtype == np.float32 else np.float32
    x = random_vector(rng, A.shape[1], other)
    out = cuda.device_array(A.shape[0], dtype=np.float64)
    op.matvec(cuda.to_device(x), out=out)
    results = [out, op @ x, op @ cuda.to_device(x)]
    for result in results:
        if result.dtype != np.float64:
            raise TypeError(f"{np.dtype(dtype)} A times {np.dtype(other)} x gave {result.dtype}")
    y_ref = reference(A, x)
    hosted = [r if isinstance(r, np.ndarray) else r.copy_to_host() for r in results]
    return {"error": max(relative_error(y, y_ref) for y in hosted), "exception": None}


EXTRA_RUNNERS = {"device_out": device_case, "nan_inf": nan_case}


def cases(kernel: str) -> list:
    """(case name, runner, TINY matrix, params) for one kernel."""
    found = [(name, host_case, name, None) for name in TINY]
    found += [(case, EXTRA_RUNNERS[case], matrix, None)
              for case, matrix in TINY_EXTRA_CASES.items()]
    found += [(parameter_case_name(matrix, params), host_case, matrix, params)
              for name, matrix, params in TINY_PARAMETER_CASES if name == kernel]
    mixed = [(name, name, None) for name in TINY_MIXED_MATRICES]
    mixed += [(parameter_case_name(matrix, params), matrix, params)
              for name, matrix, params in TINY_MIXED_PARAMETER_CASES if name == kernel]
    found += [(f"mixed/{case}", mixed_case, matrix, params) for case, matrix, params in mixed]
    return found


def main(kernels) -> dict:
    results = {}
    for kernel in kernels:
        started = time.perf_counter()
        for dtype_name, dtype in DTYPES.items():
            rng = np.random.default_rng(7)
            for case, run, matrix, params in cases(kernel):
                try:
                    result = run(kernel, dtype, TINY[matrix]().astype(dtype), rng, params)
                except Exception as exc:  # reported per case; the test shows the message
                    result = {"error": None, "exception": describe(exc)}
                results[f"{kernel}/{dtype_name}/{case}"] = result
        print(f"{kernel}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return results


if __name__ == "__main__":
    json.dump(main(sys.argv[1:] or autospmv.KERNELS), sys.stdout)
