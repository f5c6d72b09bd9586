"""Runs every solver's GPU steps in numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``, set
by ``test_solvers_simulator.py``) and the same solves on the CPU; prints one JSON record per
case."""

from __future__ import annotations

import json

import numpy as np

import autospmv
from solver_cases import problems, right_hand_side

CASES = {("cg", "laplacian"): (None, "jacobi"), ("bicgstab", "convection"): (None, "jacobi"),
         ("gmres", "convection"): ("jacobi",), ("minres", "laplacian"): ("jacobi",),
         ("minres", "indefinite"): (None,)}
"""The preconditioners each case runs with (each simulated kernel launch takes about a second,
so every step runs at least once without repeating the slow cases)."""

records = []
for method, name, A in problems(3):
    b = right_hand_side(A.shape[0])
    options = {"restart": 4} if method == "gmres" else {}
    for M in CASES[method, name]:
        gpu = autospmv.prepare(A, device="cuda")
        cpu = autospmv.prepare(A, device="cpu")
        x_gpu, info_gpu = getattr(autospmv, method)(gpu, b, rtol=1e-8, M=M, **options)
        x_cpu, info_cpu = getattr(autospmv, method)(cpu, b, rtol=1e-8, M=M, **options)
        records.append({
            "case": f"{method}-{name}-{M}", "info": [int(info_gpu), int(info_cpu)],
            "iterations": [gpu.last_solve["iterations"], cpu.last_solve["iterations"]],
            "difference": float(np.linalg.norm(np.asarray(x_gpu) - x_cpu)
                                / np.linalg.norm(x_cpu)),
            "device": gpu.last_solve["device"]})
print(json.dumps(records))
