"""The CUDA backend's checks of x and out, run in numba-cuda's CUDA simulator (which cannot share
a process with real compilation); ``test_cuda_backend_checks.py`` runs it in a subprocess.

Prints one JSON object: case name -> ``"ok"``, or the exception as ``"Type: message"``.
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from numba import cuda  # noqa: E402

import autospmv  # noqa: E402
from read_only_vector import ReadOnly  # noqa: E402


def outcome(action) -> str:
    try:
        action()
    except Exception as error:  # noqa: BLE001 (reported to the test)
        return f"{type(error).__name__}: {error}"
    return "ok"


def main() -> dict:
    A = sp.random(6, 6, density=0.5, format="csr", random_state=0)
    A.setdiag(1.0)
    A = sp.csr_matrix(A)
    x_host = np.arange(1.0, 7.0)
    results = {}
    for kernel in autospmv.KERNELS:
        op = autospmv.prepare(A, kernel=kernel, device="cuda")
        x = cuda.to_device(x_host)
        buffer = cuda.to_device(np.concatenate([x_host, np.zeros(6)]))

        def neighbours():
            op.matvec(buffer[:6], out=buffer[6:])
            if not np.allclose(buffer.copy_to_host()[6:], A @ x_host):
                raise AssertionError("wrong result into the neighbouring half")

        def host():
            if not np.allclose(op @ x_host, A @ x_host):
                raise AssertionError("wrong host result")

        results[f"{kernel}/out=x"] = outcome(lambda: op.matvec(x, out=x))
        results[f"{kernel}/overlap"] = outcome(lambda: op.matvec(buffer[:6], out=buffer[3:9]))
        results[f"{kernel}/neighbours"] = outcome(neighbours)
        results[f"{kernel}/read-only out"] = outcome(
            lambda: op.matvec(x, out=ReadOnly(cuda.device_array(6))))
        results[f"{kernel}/host"] = outcome(host)
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
