"""Vectors of a dtype the kernels cannot take (``numpy.longdouble``) given to CUDA operators
in numba-cuda's CUDA simulator, in every product form; prints one JSON
object. ``test_dtypes.py`` runs it in a subprocess (the simulator replaces ``numba.cuda``
process-wide) and asserts that each form is refused with a TypeError naming the dtype and the
fix, while a float64 vector of the same form gives SciPy's result.

Output: ``{"kernel/form": {"refused": "TypeError: ..." | "<other outcome>", "control": error}}``
where ``control`` is the relative error of the same form with float64 vectors (None when the
form failed).
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent),
                str(pathlib.Path(__file__).resolve().parent)]

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import autospmv  # noqa: E402
from matrices import random_matrix, relative_error  # noqa: E402

KERNELS = ("csr_vector", "hyb")
"""The kernels tried: the refusal happens in code every CUDA operator shares (the vector
checks and the CUDA backend), so a CSR kernel and one of another format (two launches) stand
for all; each simulated product costs seconds (``test_dtypes.py`` tries every kernel on the
CPU)."""

FORMS = {
    "host x": lambda op, x, X, z: op @ x,
    "host out=": lambda op, x, X, z: op.matvec(x, out=np.empty(op.shape[0], x.dtype)),
    "host X": lambda op, x, X, z: op @ X,
    "host rmatvec": lambda op, x, X, z: op.rmatvec(z),
    "device x": lambda op, x, X, z: op @ cuda.to_device(x),
    "device out=": lambda op, x, X, z: op.matvec(
        cuda.to_device(x), out=cuda.device_array(op.shape[0], x.dtype)),
    "device X": lambda op, x, X, z: op @ cuda.to_device(X),
    "device rmatvec": lambda op, x, X, z: op.rmatvec(cuda.to_device(z)),
}


def outcome(call) -> str:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - reported to the test
        return f"{type(error).__name__}: {error}"
    return "no error"


def host(y) -> np.ndarray:
    return y.copy_to_host() if hasattr(y, "copy_to_host") else np.asarray(y)


def main() -> dict:
    A = random_matrix(12, 9, 0.3, 5)
    rng = np.random.default_rng(1)
    x, z = rng.uniform(0.5, 1, A.shape[1]), rng.uniform(0.5, 1, A.shape[0])
    X = rng.uniform(0.5, 1, (A.shape[1], 2))
    expected = {"host x": A @ x, "host out=": A @ x, "host X": A @ X, "host rmatvec": A.T @ z,
                "device x": A @ x, "device out=": A @ x, "device X": A @ X,
                "device rmatvec": A.T @ z}
    wide = [v.astype(np.longdouble) for v in (x, X, z)]
    results = {}
    for kernel in KERNELS:
        op = autospmv.prepare(A, kernel=kernel, device="cuda")
        for form, call in FORMS.items():
            try:
                control = relative_error(host(call(op, x, X, z)), expected[form])
            except Exception as error:  # noqa: BLE001 - reported to the test
                control = f"{type(error).__name__}: {error}"
            results[f"{kernel}/{form}"] = {"refused": outcome(lambda: call(op, *wide)),
                                           "control": control}
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
