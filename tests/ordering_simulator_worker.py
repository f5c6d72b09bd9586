"""Run operators stored in reverse Cuthill–McKee order in numba-cuda's CUDA simulator and print
the results as one JSON object (``test_ordering_simulator.py`` runs it in a subprocess; by
hand: ``PYTHONPATH=. python tests/ordering_simulator_worker.py``).

Output (stdout): ``{"kernel/dtype/case": {"error": float | null, "exception": str | null}}``:
for every kernel and both dtypes, ``op @ x`` with a host x and with a numba device x (also into
``out=``, and a float64 device x for a float32 matrix), a device block ``X`` (k = 3) and the
transpose of a device x, each against SciPy in float64; ``bfs/dtype/device_x``: the same
product of an operator in the bfs order (the automatic kernel); besides,
``method/dtype/solve`` solves a system in the permuted order with each solver. Timings go to stderr.
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import autospmv  # noqa: E402
from matrices import reference, relative_error  # noqa: E402

DTYPES = {"float32": np.float32, "float64": np.float64}

SHIFT = 40.0
"""The solves' matrix is ``A Aᵀ + SHIFT·I``: its eigenvalues lie in [40, 100], so cg reaches
``rtol=1e-10`` in 15 iterations (34 with a shift of 1)."""

SOLVERS = ("cg", "bicgstab", "gmres", "minres")


def matrix(dtype) -> sp.csr_matrix:
    """A 6 × 6 grid's Laplacian numbered at random, with an empty row."""
    side = 6
    eye = sp.eye(side)
    line = sp.diags([-1.0, 2.1, -1.0], [-1, 0, 1], shape=(side, side))
    A = (sp.kron(eye, line) + sp.kron(line, eye)).tolil()
    A[7, :] = 0
    p = np.random.default_rng(0).permutation(side * side)
    A = A.tocsr()[p][:, p].tocsr()
    A.sort_indices()
    return A.astype(dtype)


def main() -> None:
    from numba import cuda

    results = {}
    rng = np.random.default_rng(1)
    for dtype_name, dtype in DTYPES.items():
        A = matrix(dtype)
        n = A.shape[0]
        x = rng.standard_normal(n).astype(dtype)
        x64 = rng.standard_normal(n)
        X = rng.standard_normal((n, 3))
        for kernel in autospmv.KERNELS:
            started = time.perf_counter()

            def case(name, compute, ref):
                key = f"{kernel}/{dtype_name}/{name}"
                try:
                    results[key] = {"error": relative_error(compute(), ref), "exception": None}
                except Exception:  # noqa: BLE001 - reported to the test
                    results[key] = {"error": None, "exception": traceback.format_exc()}

            try:
                op = autospmv.prepare(A, kernel=kernel, device="cuda", order="rcm")
            except Exception:  # noqa: BLE001
                results[f"{kernel}/{dtype_name}/prepare"] = {
                    "error": None, "exception": traceback.format_exc()}
                continue
            case("host_x", lambda: op @ x, reference(A, x))
            case("device_x", lambda: (op @ cuda.to_device(x)).copy_to_host(), reference(A, x))
            case("device_x64", lambda: (op @ cuda.to_device(x64)).copy_to_host(),
                 reference(A, x64))

            def into_out():
                out = cuda.device_array(n, dtype=np.float64)
                assert op.matvec(cuda.to_device(x64), out=out) is out
                return out.copy_to_host()

            case("device_out", into_out, reference(A, x64))
            case("device_block", lambda: (op @ cuda.to_device(X)).copy_to_host(),
                 sp.csr_matrix(A, dtype=np.float64) @ X)
            case("host_block", lambda: op @ X, sp.csr_matrix(A, dtype=np.float64) @ X)
            case("transpose_device_x",
                 lambda: (op.T @ cuda.to_device(x64)).copy_to_host(), reference(A.T, x64))
            print(f"{kernel}/{dtype_name}: {time.perf_counter() - started:.1f} s",
                  file=sys.stderr)
        key = f"bfs/{dtype_name}/device_x"
        try:
            op = autospmv.prepare(A, device="cuda", order="bfs")
            assert op.order == "bfs", op.order
            results[key] = {"error": relative_error((op @ cuda.to_device(x)).copy_to_host(),
                                                    reference(A, x)), "exception": None}
        except Exception:  # noqa: BLE001
            results[key] = {"error": None, "exception": traceback.format_exc()}
        spd = (A @ A.T + SHIFT * sp.eye(n)).tocsr().astype(dtype)
        b = rng.standard_normal(n)
        for method in SOLVERS:
            key = f"{method}/{dtype_name}/solve"
            started = time.perf_counter()
            try:
                op = autospmv.prepare(spd, device="cuda", order="rcm")
                solution, info = getattr(autospmv, method)(op, b, rtol=1e-10, maxiter=500)
                residual = np.linalg.norm(spd.astype(np.float64) @ solution - b)
                results[key] = {"error": float(residual / np.linalg.norm(b)) if info == 0
                                else None, "exception": None if info == 0 else f"info {info}"}
            except Exception:  # noqa: BLE001
                results[key] = {"error": None, "exception": traceback.format_exc()}
            print(f"{key}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
