"""Operators stored in reverse Cuthill–McKee order on the GPU, run in numba-cuda's CUDA
simulator against SciPy: the gathers of :mod:`autospmv.kernels.cuda.permute` around every
kernel, for device vectors, ``out=``, blocks, transposes and a solve.

``ordering_simulator_worker.py`` runs every case once, in a subprocess (the simulator cannot
share a process with real compilation), and each result is asserted here.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

from simulator_run import run_simulator_worker  # noqa: E402
from matrices import TOLERANCE  # noqa: E402

import autospmv  # noqa: E402

pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).with_name("ordering_simulator_worker.py")
TIMEOUT_S = 900
"""The worker takes about 10 s on two cores; the limit only stops a hang."""

CASES = ["host_x", "device_x", "device_x64", "device_out", "device_block", "host_block",
         "transpose_device_x"]
MIXED = {"device_x64", "device_out", "device_block", "host_block", "transpose_device_x"}
"""Cases with float64 vectors: computed in float64 for a float32 matrix too."""


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, TIMEOUT_S)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", list(autospmv.KERNELS))
def test_simulated_rcm_order_matches_scipy(simulated, kernel, dtype, case):
    assert f"{kernel}/{dtype}/prepare" not in simulated, simulated.get(f"{kernel}/{dtype}/prepare")
    result = simulated[f"{kernel}/{dtype}/{case}"]
    assert result["exception"] is None, result["exception"]
    tolerance = 1e-12 if case in MIXED else TOLERANCE[np.dtype(dtype)]
    assert result["error"] <= tolerance, f"relative error {result['error']:.3g}"


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres", "minres"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_simulated_solve_in_rcm_order(simulated, dtype, method):
    result = simulated[f"{method}/{dtype}/solve"]
    assert result["exception"] is None, result["exception"]
    assert result["error"] <= (1e-4 if dtype == "float32" else 1e-8)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_simulated_bfs_order_matches_scipy(simulated, dtype):
    result = simulated[f"bfs/{dtype}/device_x"]
    assert result["exception"] is None, result["exception"]
    assert result["error"] <= TOLERANCE[np.dtype(dtype)], f"relative error {result['error']:.3g}"
