"""The GPU multi-vector product (SpMM), run in numba-cuda's CUDA simulator, against SciPy (no
GPU needed).

The simulator cannot share a process with real compilation (``test_cuda_ptx.py``), so
``spmm_simulator_worker.py`` runs every case once, in a subprocess, and each of its results is
asserted here by its own test.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

from simulator_run import run_simulator_worker  # noqa: E402
from matrices import TOLERANCE  # noqa: E402
from spmm_cases import (CASES, EIGHT, KERNELS, ONE_PASS, PASSES, RULE_CASES,  # noqa: E402
                        TILED)

# The simulator's worker process runs every kernel (about 35 s on two cores).
pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).with_name("spmm_simulator_worker.py")
TIMEOUT_S = 600
"""The worker takes about 35 s on two cores; the limit only stops a hang."""

DTYPES = ["float32", "float64"]


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, TIMEOUT_S)


def check(result: dict, dtype: str):
    assert result["exception"] is None, result["exception"]
    assert result["error"] <= TOLERANCE[np.dtype(dtype)], f"relative error {result['error']:.3g}"


@pytest.mark.parametrize("kernel, matrix, k", CASES,
                         ids=[f"{kernel}-{matrix}-k{k}" for kernel, matrix, k in CASES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_simulated_spmm_matches_scipy(simulated, dtype, kernel, matrix, k):
    check(simulated[f"{kernel}/{dtype}/{matrix}/k={k}"], dtype)


@pytest.mark.parametrize("case", ["device_X", "nan_inf"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_simulated_spmm_device_and_special_values(simulated, kernel, dtype, case):
    check(simulated[f"{kernel}/{dtype}/{case}"], dtype)


@pytest.mark.parametrize("matrix, k", PASSES, ids=[f"{matrix}-k{k}" for matrix, k in PASSES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_simulated_spmm_in_passes_matches_scipy(simulated, dtype, matrix, k):
    check(simulated[f"passes/{dtype}/{matrix}/k={k}"], dtype)


@pytest.mark.parametrize("program, matrix, k", ONE_PASS,
                         ids=[f"{program}-{matrix}-k{k}" for program, matrix, k in ONE_PASS])
@pytest.mark.parametrize("dtype", DTYPES)
def test_simulated_spmm_one_pass_programs_match_scipy(simulated, dtype, program, matrix, k):
    check(simulated[f"{program}/{dtype}/{matrix}/k={k}"], dtype)


@pytest.mark.parametrize("matrix, k", EIGHT, ids=[f"{matrix}-k{k}" for matrix, k in EIGHT])
@pytest.mark.parametrize("dtype", DTYPES)
def test_simulated_spmm_eight_columns_matches_scipy(simulated, dtype, matrix, k):
    check(simulated[f"eight_columns/{dtype}/{matrix}/k={k}"], dtype)


@pytest.mark.parametrize("program, tile, matrix, k", TILED,
                         ids=[f"{program}-tiles{tile}-{matrix}-k{k}"
                              for program, tile, matrix, k in TILED])
@pytest.mark.parametrize("dtype", DTYPES)
def test_simulated_spmm_tiled_programs_match_scipy(simulated, dtype, program, tile, matrix, k):
    check(simulated[f"{program}/tiles_of_{tile}/{dtype}/{matrix}/k={k}"], dtype)


@pytest.mark.parametrize("k, program", RULE_CASES, ids=[f"k{k}" for k, _ in RULE_CASES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_simulated_spmm_runs_the_rules_program_where_nothing_is_timed(simulated, dtype, k,
                                                                      program):
    result = simulated[f"rule/{dtype}/k={k}"]
    check(result, dtype)
    note, = result["notes"]
    assert f"multi-vector products of {k} columns" in note and f"run {program}, picked" in note
    assert "nothing is timed under numba-cuda's simulator" in note
