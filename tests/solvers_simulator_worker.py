"""Runs every solver's GPU steps in numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``, set
by ``test_solvers_simulator.py``) and the same solves on the CPU; prints one JSON record per
case."""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

import autospmv
from solver_cases import problems, right_hand_side

PRECONDITIONERS = (None, "jacobi")
"""Every problem runs without a preconditioner and with the diagonal, in both dtypes."""

LONG_ROWS = 1500
"""Rows of the matrix whose product with its dot gives some threads two rows (the simulated
summing grid has 4 blocks of 256 threads) and others one."""

FUSED_KERNELS = ("csr_scalar", "ell", "jds", "hyb")
"""Kernels whose product can also form x · y (``SpMVOperator.product_with_dot``): each runs a
product with its dot, and cg runs on ell's (the update then takes p·q from the product)."""


def product_with_dot_case(kernel, A, dtype, case=None):
    """The product with its dot (A and x of ``dtype``) against the plain product and float64
    NumPy's dot (``case``: the record's name, by default from the kernel and dtype)."""
    from numba import cuda

    op = autospmv.prepare(A.astype(dtype), kernel=kernel, device="cuda")
    x = right_hand_side(A.shape[0], seed=1).astype(dtype)
    case = case or f"dot-{kernel}-{np.dtype(dtype)}"
    sums = np.zeros(3)
    run = op.product_with_dot(dtype, sums, 2)
    if run is None:
        return {"case": case, "fused": False}
    x_device = cuda.to_device(x)
    y_device = cuda.device_array(A.shape[0], dtype=dtype)
    run(x_device, y_device, 0)
    y = y_device.copy_to_host()
    expected = float(np.dot(x.astype(np.float64), y.astype(np.float64)))
    return {"case": case, "fused": True,
            "y_equal": bool(np.array_equal(y, op @ x)),
            "dot_error": abs(sums[2] - expected) / abs(expected),
            "others_untouched": bool(sums[0] == 0 and sums[1] == 0)}


def solved_both_ways(case, method, A, b, rtol=1e-8, M_on=lambda device: None, kernel=None,
                     callback=False) -> dict:
    """``method`` on the simulated GPU (with ``kernel`` where given) and on the CPU, with the M
    that ``M_on(device)`` gives: the two solves' info, iteration counts, and how far apart the
    returned x are; with ``callback``, also how many calls each made and how far apart the
    iterates it was given are."""
    options = {"restart": 4} if method == "gmres" else {}
    solves = {}
    for device in ("cuda", "cpu"):
        op = autospmv.prepare(A, device=device, kernel=kernel if device == "cuda" else None)
        iterates = []
        if callback:
            options["callback"] = lambda xk: iterates.append(np.array(xk, np.float64))
        x, info = getattr(autospmv, method)(op, b, rtol=rtol, M=M_on(device), **options)
        solves[device] = (np.asarray(x, np.float64), int(info), op.last_solve, iterates)
    (x_gpu, info_gpu, gpu, calls_gpu), (x_cpu, info_cpu, cpu, calls_cpu) = solves.values()
    record = {"case": case, "info": [info_gpu, info_cpu],
              "iterations": [gpu["iterations"], cpu["iterations"]],
              "difference": float(np.linalg.norm(x_gpu - x_cpu) / np.linalg.norm(x_cpu)),
              "device": gpu["device"]}
    if callback:
        record["calls"] = [len(calls_gpu), len(calls_cpu)]
        pairs = zip(calls_gpu, calls_cpu)
        record["iterates_difference"] = max(
            (float(np.linalg.norm(g - c) / np.linalg.norm(c)) for g, c in pairs), default=0.0)
    return record


records = []
laplacian_matrix = problems(3)[0][2]
for kernel in FUSED_KERNELS:
    for dtype in (np.float32, np.float64):
        records.append(product_with_dot_case(kernel, laplacian_matrix, dtype))
long_matrix = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(LONG_ROWS, LONG_ROWS),
                                  format="csr")
for kernel in FUSED_KERNELS[:3]:
    records.append(product_with_dot_case(kernel, long_matrix, np.float64, f"dot-{kernel}-long"))
records.append(solved_both_ways("cg-laplacian-None-ell", "cg", laplacian_matrix,
                                right_hand_side(laplacian_matrix.shape[0]), kernel="ell"))
for method, name, A in problems(3):
    for dtype, rtol, suffix in ((np.float64, 1e-8, ""), (np.float32, 1e-5, "-float32")):
        A_typed = A.astype(dtype)
        b = right_hand_side(A.shape[0]).astype(dtype)
        for M in PRECONDITIONERS:
            records.append(solved_both_ways(f"{method}-{name}-{M}{suffix}", method, A_typed, b,
                                            rtol, lambda device, M=M: M))
        # M as an autospmv operator (its product runs in the iteration) and as a SciPy
        # LinearOperator (called on the host, the iteration then runs eagerly): the inverse
        # diagonal.
        inverse_diagonal = scipy.sparse.diags(1.0 / A.diagonal()).tocsr().astype(dtype)
        records.append(solved_both_ways(
            f"{method}-{name}-operator{suffix}", method, A_typed, b, rtol,
            lambda device: autospmv.prepare(inverse_diagonal, device=device)))
        records.append(solved_both_ways(
            f"{method}-{name}-linear_operator{suffix}", method, A_typed, b, rtol,
            lambda device: scipy.sparse.linalg.aslinearoperator(inverse_diagonal)))
    # A callback: the iteration syncs at each step and calls it with the iterate.
    records.append(solved_both_ways(f"{method}-{name}-callback", method, A,
                                    right_hand_side(A.shape[0]), callback=True))
print(json.dumps(records))
