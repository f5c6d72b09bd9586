"""Every CUDA kernel, run in numba-cuda's CUDA simulator, against SciPy (no GPU needed).

The simulator cannot share a process with real compilation (``test_cuda_ptx.py``), so
``cuda_simulator_worker.py`` runs every kernel x dtype x tiny matrix once, in a subprocess, and each
of its results is asserted here by its own test.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

import autospmv  # noqa: E402
from simulator_run import run_simulator_worker  # noqa: E402
from matrices import (  # noqa: E402
    TINY, TINY_EXTRA_CASES, TINY_MIXED_MATRICES, TINY_MIXED_PARAMETER_CASES,
    TINY_PARAMETER_CASES, TOLERANCE, conversion_refused, parameter_case_name,
)

# The simulator's worker process runs every kernel (about 20 s on two cores).
pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).with_name("cuda_simulator_worker.py")
TIMEOUT_S = 900
"""The worker takes about 20 s on two cores; the limit only stops a hang."""

CASES = [*TINY, *TINY_EXTRA_CASES]


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, TIMEOUT_S)


def check(result: dict, dtype: str, refused: bool):
    if refused:
        assert result["exception"] is not None
        assert result["exception"].startswith("FormatTooLargeError:")
        return
    assert result["exception"] is None, result["exception"]
    assert result["error"] <= TOLERANCE[np.dtype(dtype)], f"relative error {result['error']:.3g}"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_simulated_kernel_matches_scipy(simulated, kernel, dtype, case):
    A = TINY[TINY_EXTRA_CASES.get(case, case)]()
    check(simulated[f"{kernel}/{dtype}/{case}"], dtype, conversion_refused(kernel, A))


PARAMETER_IDS = [f"{k}-{parameter_case_name(m, p)}" for k, m, p in TINY_PARAMETER_CASES]


@pytest.mark.parametrize("kernel, matrix, params", TINY_PARAMETER_CASES, ids=PARAMETER_IDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_simulated_kernel_with_parameters(simulated, dtype, kernel, matrix, params):
    result = simulated[f"{kernel}/{dtype}/{parameter_case_name(matrix, params)}"]
    check(result, dtype, conversion_refused(kernel, TINY[matrix](), params))


MIXED_CASES = [*[(kernel, name, {}) for kernel in autospmv.KERNELS
                 for name in TINY_MIXED_MATRICES], *TINY_MIXED_PARAMETER_CASES]
MIXED_IDS = [f"{k}-{parameter_case_name(m, p)}" for k, m, p in MIXED_CASES]


@pytest.mark.parametrize("kernel, matrix, params", MIXED_CASES, ids=MIXED_IDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_simulated_kernel_with_x_of_the_other_dtype(simulated, dtype, kernel, matrix, params):
    """A float32 matrix with float64 x, and a float64 matrix with float32 x: a float64 result
    within float64's tolerance (so a float32 matrix's product is accumulated in float64)."""
    result = simulated[f"{kernel}/{dtype}/mixed/{parameter_case_name(matrix, params)}"]
    check(result, "float64", conversion_refused(kernel, TINY[matrix](), params or None))
