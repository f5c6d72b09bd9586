"""Runs every solver's GPU steps in numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``, set
by ``test_solvers_simulator.py``) and the same solves on the CPU; prints one JSON record per
case."""

from __future__ import annotations

import json

import numpy as np

import autospmv
from solver_cases import problems, right_hand_side

records = []
for method, name, A in problems(3):
    b = right_hand_side(A.shape[0])
    for M in (None, "jacobi"):
        if name == "indefinite" and M is not None:
            continue
        gpu = autospmv.prepare(A, device="cuda")
        cpu = autospmv.prepare(A, device="cpu")
        x_gpu, info_gpu = getattr(autospmv, method)(gpu, b, rtol=1e-8, M=M)
        x_cpu, info_cpu = getattr(autospmv, method)(cpu, b, rtol=1e-8, M=M)
        records.append({
            "case": f"{method}-{name}-{M}", "info": [int(info_gpu), int(info_cpu)],
            "iterations": [gpu.last_solve["iterations"], cpu.last_solve["iterations"]],
            "difference": float(np.linalg.norm(np.asarray(x_gpu) - x_cpu)
                                / np.linalg.norm(x_cpu)),
            "device": gpu.last_solve["device"]})
print(json.dumps(records))
