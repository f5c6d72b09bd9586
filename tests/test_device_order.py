"""The bfs order walked on the GPU (:mod:`autospmv.kernels.cuda.ordering`): the host's walk of
the graph of A + Aᵀ, element for element, on the walked matrices of ``test_ordering.py`` with
both index dtypes; the host's walk of A where the device gives up; and ``prepare``'s choice
walking there for a matrix on the GPU.

``device_order_simulator_worker.py`` runs every case once in numba-cuda's simulator, in a
subprocess (the simulator cannot share a process with real compilation), and each result is
asserted here; ``test_cuda_ptx.py`` compiles the kernels to PTX.
"""

from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("numba.cuda")

from simulator_run import run_simulator_worker  # noqa: E402
from ordering_cases import WALKED  # noqa: E402

pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).with_name("device_order_simulator_worker.py")
TIMEOUT_S = 900
"""The worker takes about 25 s on two cores; the limit only stops a hang."""

NAMES = [name for name in WALKED if name != "unsorted_columns"]
SYMMETRIC = ["grid_at_random", "components"]


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, TIMEOUT_S)


def assert_same(simulated, case: str) -> None:
    assert case in simulated, f"the worker ran no case {case}"
    assert simulated[case]["diff"] is None, simulated[case]["diff"]


@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("name", NAMES)
def test_the_walk_on_the_gpu_is_the_hosts_walk_of_a_plus_at(simulated, name, index):
    assert_same(simulated, f"walk/{name}/{index}")


@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("name", SYMMETRIC)
def test_a_symmetric_structure_is_walked_without_its_transpose(simulated, name, index):
    assert_same(simulated, f"symmetric/{name}/{index}")


@pytest.mark.parametrize("name", NAMES)
def test_the_bfs_order_of_a_gpu_matrix_is_walked_there(simulated, name):
    assert_same(simulated, f"bfs/{name}")


def test_a_vertex_reaching_many_is_sorted_by_merging(simulated):
    assert_same(simulated, "star_reaches_beyond_two_merged_runs")


@pytest.mark.parametrize("n", [0, 1, 5])
def test_the_walk_of_a_matrix_without_nonzeros(simulated, n):
    assert_same(simulated, f"no_nonzeros/{n}")


def test_a_walk_the_gpu_gives_up_is_the_hosts(simulated):
    assert_same(simulated, "the_host_walks_what_the_device_gives_up")


def test_prepares_choice_of_a_gpu_matrix_walks_there_and_says_so(simulated):
    assert_same(simulated, "prepare_s_choice_walks_on_the_device")


def test_a_host_matrix_for_the_gpu_is_walked_on_its_copy_there(simulated):
    assert_same(simulated, "a_host_matrix_walked_on_its_copy_on_the_device")


@pytest.mark.parametrize("wrong", ["repeated", "short", "beyond", "negative"])
def test_a_walk_that_gives_no_permutation_raises(simulated, wrong):
    assert_same(simulated, f"refused/{wrong}")
