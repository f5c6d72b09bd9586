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

import autospmv  # noqa: E402
from matrices import random_matrix, relative_error  # noqa: E402
from product_forms import DEVICE_FORMS, expected_products, to_host  # noqa: E402

KERNELS = ("csr_vector", "hyb")
"""The kernels tried: the refusal happens in code every CUDA operator shares (the vector
checks and the CUDA backend), so a CSR kernel and one of another format (two launches) stand
for all; each simulated product costs seconds (``test_dtypes.py`` tries every kernel on the
CPU)."""


def outcome(call) -> str:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - reported to the test
        return f"{type(error).__name__}: {error}"
    return "no error"


def main() -> dict:
    A = random_matrix(12, 9, 0.3, 5)
    rng = np.random.default_rng(1)
    x, z = rng.uniform(0.5, 1, A.shape[1]), rng.uniform(0.5, 1, A.shape[0])
    X = rng.uniform(0.5, 1, (A.shape[1], 2))
    expected = expected_products(A, x, X, z)
    wide = [v.astype(np.longdouble) for v in (x, X, z)]
    results = {}
    for kernel in KERNELS:
        op = autospmv.prepare(A, kernel=kernel, device="cuda")
        for form, call in DEVICE_FORMS.items():
            try:
                control = relative_error(to_host(call(op, x, X, z)), expected[form])
            except Exception as error:  # noqa: BLE001 - reported to the test
                control = f"{type(error).__name__}: {error}"
            results[f"{kernel}/{form}"] = {"refused": outcome(lambda: call(op, *wide)),
                                           "control": control}
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
