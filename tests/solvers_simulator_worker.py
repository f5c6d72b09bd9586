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


records = []
laplacian_matrix = problems(3)[0][2]
for kernel in FUSED_KERNELS:
    for dtype in (np.float32, np.float64):
        records.append(product_with_dot_case(kernel, laplacian_matrix, dtype))
long_matrix = scipy.sparse.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(LONG_ROWS, LONG_ROWS),
                                  format="csr")
for kernel in FUSED_KERNELS[:3]:
    records.append(product_with_dot_case(kernel, long_matrix, np.float64, f"dot-{kernel}-long"))
b = right_hand_side(laplacian_matrix.shape[0])
fused = autospmv.prepare(laplacian_matrix, kernel="ell", device="cuda")
cpu = autospmv.prepare(laplacian_matrix, device="cpu")
x_fused, info_fused = autospmv.cg(fused, b, rtol=1e-8)
x_cpu, info_cpu = autospmv.cg(cpu, b, rtol=1e-8)
records.append({"case": "cg-laplacian-None-ell", "info": [int(info_fused), int(info_cpu)],
                "iterations": [fused.last_solve["iterations"], cpu.last_solve["iterations"]],
                "difference": float(np.linalg.norm(x_fused - x_cpu) / np.linalg.norm(x_cpu)),
                "device": fused.last_solve["device"]})
for method, name, A in problems(3):
    options = {"restart": 4} if method == "gmres" else {}
    for dtype, rtol, suffix in ((np.float64, 1e-8, ""), (np.float32, 1e-5, "-float32")):
        A_typed = A.astype(dtype)
        b = right_hand_side(A.shape[0]).astype(dtype)
        for M in PRECONDITIONERS:
            gpu = autospmv.prepare(A_typed, device="cuda")
            cpu = autospmv.prepare(A_typed, device="cpu")
            x_gpu, info_gpu = getattr(autospmv, method)(gpu, b, rtol=rtol, M=M, **options)
            x_cpu, info_cpu = getattr(autospmv, method)(cpu, b, rtol=rtol, M=M, **options)
            records.append({
                "case": f"{method}-{name}-{M}{suffix}", "info": [int(info_gpu), int(info_cpu)],
                "iterations": [gpu.last_solve["iterations"], cpu.last_solve["iterations"]],
                "difference": float(np.linalg.norm(np.asarray(x_gpu, np.float64) - x_cpu)
                                    / np.linalg.norm(x_cpu)),
                "device": gpu.last_solve["device"]})
for method, name, A in problems(3):
    # M as an autospmv operator (its product runs in the iteration) and as a SciPy
    # LinearOperator (called on the host, the iteration then runs eagerly): the inverse diagonal.
    options = {"restart": 4} if method == "gmres" else {}
    for dtype, rtol, suffix in ((np.float64, 1e-8, ""), (np.float32, 1e-5, "-float32")):
        A_typed = A.astype(dtype)
        b = right_hand_side(A.shape[0]).astype(dtype)
        inverse_diagonal = scipy.sparse.diags(1.0 / A.diagonal()).tocsr().astype(dtype)
        for kind in ("operator", "linear_operator"):
            solves = []
            for device in ("cuda", "cpu"):
                op = autospmv.prepare(A_typed, device=device)
                M = (autospmv.prepare(inverse_diagonal, device=device) if kind == "operator"
                     else scipy.sparse.linalg.aslinearoperator(inverse_diagonal))
                x, info = getattr(autospmv, method)(op, b, rtol=rtol, M=M, **options)
                solves.append((np.asarray(x, np.float64), int(info), op.last_solve))
            (x_gpu, info_gpu, gpu), (x_cpu, info_cpu, cpu) = solves
            records.append({
                "case": f"{method}-{name}-{kind}{suffix}", "info": [info_gpu, info_cpu],
                "iterations": [gpu["iterations"], cpu["iterations"]],
                "difference": float(np.linalg.norm(x_gpu - x_cpu) / np.linalg.norm(x_cpu)),
                "device": gpu["device"]})
for method, name, A in problems(3):
    # A callback: the iteration syncs at each step and calls it with the iterate.
    options = {"restart": 4} if method == "gmres" else {}
    b = right_hand_side(A.shape[0])
    solves = []
    for device in ("cuda", "cpu"):
        op = autospmv.prepare(A, device=device)
        iterates = []
        x, info = getattr(autospmv, method)(
            op, b, rtol=1e-8, callback=lambda xk: iterates.append(np.array(xk, np.float64)),
            **options)
        solves.append((np.asarray(x, np.float64), int(info), op.last_solve, iterates))
    (x_gpu, info_gpu, gpu, calls_gpu), (x_cpu, info_cpu, cpu, calls_cpu) = solves
    records.append({
        "case": f"{method}-{name}-callback", "info": [info_gpu, info_cpu],
        "iterations": [gpu["iterations"], cpu["iterations"]],
        "calls": [len(calls_gpu), len(calls_cpu)],
        "iterates_difference": max((float(np.linalg.norm(g - c) / np.linalg.norm(c))
                                    for g, c in zip(calls_gpu, calls_cpu)), default=0.0),
        "difference": float(np.linalg.norm(x_gpu - x_cpu) / np.linalg.norm(x_cpu)),
        "device": gpu["device"]})
print(json.dumps(records))
