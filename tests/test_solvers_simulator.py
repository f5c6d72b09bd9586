"""The solvers' GPU steps (numba-cuda kernels: the fused passes, the last-block reductions and
the scalar logic) run in numba-cuda's simulator against the same solves on the CPU, and compile
to PTX for compute capability 9.0 without a GPU."""

from __future__ import annotations

import pathlib
import types

import numpy as np
import pytest

from simulator_run import run_simulator_worker

cuda = pytest.importorskip("numba.cuda")

# The simulator's worker process runs every solver step (about 45 s on two cores).
pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).with_name("solvers_simulator_worker.py")


@pytest.fixture(scope="module")
def simulated():
    return {record["case"]: record for record in run_simulator_worker(WORKER, timeout_s=600)}


PROBLEMS = ["cg-laplacian", "bicgstab-convection", "gmres-convection", "minres-laplacian",
            "minres-indefinite"]
CASES = [f"{problem}-{M}" for problem in PROBLEMS for M in ("None", "jacobi")]
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
"""How far the simulated GPU's x may lie from the CPU's, relative to it."""


def assert_the_cpu_iterates(record: dict, dtype: str = "float64"):
    """The simulated GPU solve converged as the CPU's: on the GPU, in as many iterations, to
    the same x up to :data:`TOLERANCE`."""
    assert record["device"] == "cuda"
    assert record["info"] == [0, 0]
    assert record["iterations"][0] == record["iterations"][1] > 0
    assert record["difference"] <= TOLERANCE[dtype]


@pytest.mark.parametrize("case", CASES + ["cg-laplacian-None-ell"])
def test_the_gpu_steps_give_the_cpu_iterates(simulated, case):
    assert_the_cpu_iterates(simulated[case])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", ["operator", "linear_operator"])
@pytest.mark.parametrize("problem", PROBLEMS)
def test_an_operator_as_m_gives_the_cpu_iterates(simulated, problem, kind, dtype):
    """M as an autospmv operator (its product in the iteration) and as a SciPy LinearOperator
    (called on the host, the iteration eager): the inverse diagonal, against the CPU's solve
    with the same M."""
    assert_the_cpu_iterates(
        simulated[f"{problem}-{kind}" + ("-float32" if dtype == "float32" else "")], dtype)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_a_callback_sees_the_cpu_iterates(simulated, problem):
    """With a callback the GPU iteration syncs at each step (gmres: each restart cycle) and
    hands it the iterate: as many calls as the CPU's solve makes, with the same iterates."""
    record = simulated[f"{problem}-callback"]
    assert_the_cpu_iterates(record)
    assert record["calls"][0] == record["calls"][1] > 0
    assert record["iterates_difference"] <= 1e-12


@pytest.mark.parametrize("case", CASES)
def test_the_float32_steps_give_the_cpu_iterates(simulated, case):
    """Each solve in float32 (GMRES's Gram-Schmidt kernels read four elements a load there)
    against the CPU's float32 solve."""
    assert_the_cpu_iterates(simulated[f"{case}-float32"], "float32")


@pytest.mark.parametrize("kernel", ["csr_scalar", "ell", "jds"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_product_with_its_dot_is_the_product_and_its_dot(simulated, kernel, dtype):
    """The kernels that own whole rows form x · y as they write y: y as the plain product's,
    bit for bit, and the sum (in float64) as NumPy's to rounding, in its slot alone."""
    record = simulated[f"dot-{kernel}-{dtype}"]
    assert record["fused"]
    assert record["y_equal"]
    assert record["dot_error"] <= 1e-13
    assert record["others_untouched"]


@pytest.mark.parametrize("kernel", ["csr_scalar", "ell", "jds"])
def test_threads_of_two_rows_form_the_product_and_its_dot(simulated, kernel):
    """A matrix of more rows than the summing grid has threads: the threads that take two rows
    (a grid apart) and those that take one give the plain product and its dot."""
    record = simulated[f"dot-{kernel}-long"]
    assert record["fused"]
    assert record["y_equal"]
    assert record["dot_error"] <= 1e-13


def steps():
    from autospmv._solve import bicgstab, cg, gmres, minres
    from autospmv._solve.steps import Step

    found = {step.name: step for step in gmres.gram_schmidt_steps(22)}
    for module in (cg, bicgstab, gmres, minres):
        for value in vars(module).values():
            if isinstance(value, Step):
                found[value.name] = value
    return [found[name] for name in sorted(found)]


@pytest.mark.skipif(cuda.config.ENABLE_CUDASIM, reason="PTX needs the real numba-cuda")
def test_every_step_compiles_to_ptx(dtype=np.float64):
    """float64 vectors here, and float32 for the basis steps, whose kernel is another (the GPU
    tests compile both dtypes on a real GPU)."""
    from numba import types as nt
    from numba.cuda import dispatcher
    from numba.np.numpy_support import from_dtype

    from autospmv._solve.steps import MultiStep, cuda_multi_step, cuda_step

    vector = nt.Array(from_dtype(np.dtype(dtype)), 1, "C")
    float64, int64 = nt.Array(nt.float64, 1, "C"), nt.Array(nt.int64, 1, "C")
    argtypes = (vector, nt.int64, nt.int64, float64, int64, vector, *[nt.int64] * 6, float64,
                nt.Array(nt.int32, 1, "C"))
    single = nt.Array(nt.float32, 1, "C")
    float32_argtypes = (single, nt.int64, nt.int64, float64, int64, single, *[nt.int64] * 6,
                        float64, nt.Array(nt.int32, 1, "C"), nt.Array(nt.complex128, 1, "C"))
    current = dispatcher.get_current_device  # device functions read the compute capability
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    try:
        for step in steps():
            if isinstance(step, MultiStep):
                kernel = cuda_multi_step(step, np.dtype(dtype).itemsize)
                ptx, _ = cuda.compile_ptx(kernel.py_func, argtypes + (vector,), cc=(9, 0))
                assert ".visible .entry" in ptx, step.name
                wide = cuda_multi_step(step, 4)  # float32's kernel reads 16 bytes a load
                ptx, _ = cuda.compile_ptx(wide.py_func, float32_argtypes, cc=(9, 0))
            else:
                ptx, _ = cuda.compile_ptx(cuda_step(step).py_func, argtypes, cc=(9, 0))
            assert ".visible .entry" in ptx, step.name
    finally:
        dispatcher.get_current_device = current
