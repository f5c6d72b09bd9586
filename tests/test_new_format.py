"""A storage format autospmv does not ship, added as one format file, its kernels and one
registry entry (``toy_format.py``), runs on the CPU, converts on the device through the base
class, and runs under numba-cuda's CUDA simulator."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import toy_format
from matrices import (FAMILY, TINY, TOLERANCE, numpy_device_csr, random_vector, reference,
                      relative_error)
from simulator_run import run_simulator_worker

import autospmv
from autospmv._support.validation import canonicalize

WORKER = pathlib.Path(__file__).with_name("new_format_simulator_worker.py")


@pytest.fixture
def toy():
    autospmv.register(toy_format.SPEC)
    try:
        yield toy_format.SPEC
    finally:
        autospmv.unregister(toy_format.NAME)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(FAMILY))
def test_the_new_format_runs_on_the_cpu(toy, name, dtype, rng):
    A = FAMILY[name]().astype(dtype)
    op = autospmv.prepare(A, kernel=toy_format.NAME, device="cpu")
    assert isinstance(op.format, toy_format.ColumnTriples)
    x = random_vector(rng, A.shape[1], dtype)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(dtype)]


@pytest.mark.parametrize("name", sorted(TINY))
def test_the_new_format_converts_on_the_device_through_the_base_class(toy, name):
    """With NumPy standing in for CuPy: the base class builds the format from a matrix on the
    device (a host round trip) and rebuilds the CSR from it, with nothing in the format file."""
    A = canonicalize(TINY[name]())
    device = numpy_device_csr(A)
    fmt = toy.convert(device, {})
    host = toy.convert(A, {})
    for key, value in host.arrays().items():
        np.testing.assert_array_equal(fmt.arrays()[key], value, err_msg=key)
    back = fmt.to_device_csr(A.indptr.copy(), np)
    np.testing.assert_array_equal(back.indices, A.indices)
    np.testing.assert_array_equal(back.data, A.data)


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, timeout_s=600)


def test_the_new_format_runs_under_the_cuda_simulator(simulated):
    assert set(simulated) == {f"{name}/{dtype}" for name in TINY
                              for dtype in ("float32", "float64")}
    for case, error in simulated.items():
        dtype = np.dtype(case.rsplit("/", 1)[1])
        assert error <= TOLERANCE[dtype], (case, error)
