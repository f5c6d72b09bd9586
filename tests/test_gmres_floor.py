"""The gmres floor of ``benchmarks/solvers_gpu.py``: the bytes it counts, and the run whose copy
bandwidth prices each solve of a results file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def solvers_gpu():
    spec = importlib.util.spec_from_file_location("solvers_gpu",
                                                  REPO / "benchmarks" / "solvers_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_floor_counts_the_products_and_one_gram_schmidt_pass(solvers_gpu):
    n, nnz, itemsize = 1000, 5000, 8
    product = nnz * (8 + 4) + (n + 1) * 4 + 2 * n * 8
    # restart 3, 7 columns: two cycles of columns 0, 1, 2 and one of columns 0: (2c + 5) passes
    passes = 2 * (5 + 7 + 9) + 5
    expected = (7 * product + passes * n * itemsize) / 1e12
    assert solvers_gpu.gmres_floor_seconds(n, nnz, itemsize, 7, 1e12, restart=3) == (
        pytest.approx(expected, rel=1e-12))


def test_each_solve_is_priced_at_the_bandwidth_of_its_run(solvers_gpu):
    solve = {"method": "gmres", "iterations": 30}
    results = {"runs": {"a": {"copy_bandwidth": 1e12}, "b": {"copy_bandwidth": 2e12}},
               "laplacians": [
                   {"run": "a", "n": 100, "nnz": 500, "dtype": "float32",
                    "solves": [dict(solve), {"method": "cg", "iterations": 5}]},
                   {"run": "a", "n": 100, "nnz": 500, "dtype": "float32",
                    "solves": [dict(solve, run="b")]}]}
    rows = solvers_gpu.add_gmres_floors(results)["laplacians"]
    first, second = rows[0]["solves"][0]["floor_seconds"], rows[1]["solves"][0]["floor_seconds"]
    assert first == pytest.approx(solvers_gpu.gmres_floor_seconds(100, 500, 4, 30, 1e12))
    assert second == pytest.approx(first / 2)
    assert "floor_seconds" not in rows[0]["solves"][1]
