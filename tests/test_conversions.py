"""The conversion kernels of autospmv/kernels/cuda/conversions.py (COO rows, ELL and HYB split on
the GPU): the host conversion's arrays exactly, in numba-cuda's simulator (a worker process)
and on a real GPU, and every launch among the shipped cubins' argument types."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import autospmv
from autospmv import _registry as registry
from autospmv._support.validation import canonicalize
from autospmv.formats.base import DeviceCSR, FormatTooLargeError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from conversions_cases import CASES, widths  # noqa: E402
from matrices import FAMILY, numpy_device_csr, power_law  # noqa: E402
from simulator_run import run_simulator_worker  # noqa: E402

WORKER = pathlib.Path(__file__).with_name("conversions_simulator_worker.py")
TIMEOUT_S = 600
"""The worker takes well under a minute on two cores; the limit only stops a hang."""


def _case_names() -> list[str]:
    names = []
    for name, (build, dtype) in CASES.items():
        csr = canonicalize(build().astype(dtype))
        names += [f"{name}/{width}" for width in widths(csr)]
    return names


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.parametrize("case", _case_names())
def test_simulated_conversion_kernels_build_the_host_arrays(simulated, case):
    assert simulated[case]["diff"] is None, simulated[case]["diff"]


def test_every_launch_has_a_shipped_cubin(monkeypatch):
    """On a matrix with 32-bit indices, in either dtype, every launch's argument types are among
    :func:`conversions.shipped_launches`, so a first conversion on a GPU of the shipped
    architectures compiles nothing."""
    from autospmv.kernels.cuda import conversions
    from autospmv.kernels.cuda.launch import Launch

    launched = set()

    def record(csr, kernel, threads, args):
        launched.add((kernel.py_func.__name__, Launch(kernel, 1, 32, args, np.float64).argtypes))

    monkeypatch.setattr(conversions, "_launch", record)
    for dtype in (np.float32, np.float64):
        csr = canonicalize(power_law(300, 200, 1.6, 1).astype(dtype))
        assert csr.indices.dtype == np.int32
        stand_in = numpy_device_csr(csr)
        conversions.split_at_width(stand_in, 2, int(np.diff(csr.indptr).max()))
        conversions.split_at_width(stand_in, 2, 2)  # the branch without a COO part (recorded)
        conversions.nonzero_rows(stand_in, csr.indices.dtype)
        conversions.longest_row(stand_in)
    shipped = {(kernel.py_func.__name__, argtypes)
               for kernel, argtypes in conversions.shipped_launches()}
    assert {name for name, _ in launched} == {name for name, _ in shipped}
    assert launched == shipped


class RecordingConversions:
    """Stands in for the GPU's conversion kernels: does what the array operations do (the
    host's results) and records each call."""

    def __init__(self):
        self.calls = []

    def longest_row(self, csr):
        self.calls.append("longest_row")
        return int(np.diff(csr.host_indptr).max())

    def nonzero_rows(self, csr, itype):
        self.calls.append("nonzero_rows")
        return np.repeat(np.arange(csr.shape[0]), np.diff(csr.host_indptr)).astype(itype)

    def split_at_width(self, csr, width, longest):
        from autospmv.formats.ell import split_at_width

        self.calls.append("split_at_width")
        ell, coo = split_at_width(csr.to_host(), width)
        return ell.col, ell.data, coo.row, coo.col, coo.data


@pytest.mark.parametrize("kernel, calls", [("coo", ["nonzero_rows"]),
                                           ("ell", ["longest_row", "split_at_width"]),
                                           ("hyb", ["longest_row", "split_at_width"])])
def test_a_matrix_on_the_gpu_converts_with_the_conversions_it_carries(kernel, calls):
    """The formats run the conversions that have GPU kernels through the matrix's own
    ``conversions`` (what put it on the GPU hands them in), and give the host format."""
    csr = canonicalize(power_law(300, 200, 1.6, 1))
    conversions = RecordingConversions()
    stand_in = DeviceCSR(csr.shape, csr.indptr, csr.indices, csr.data, csr.indptr.copy(), np,
                         conversions)
    params = registry.choose_params(kernel, csr, "cuda")
    spec = registry.get(kernel)
    device, host = spec.convert(stand_in, params), spec.convert(csr, params)
    assert conversions.calls == calls
    for key, value in host.arrays().items():
        np.testing.assert_array_equal(device.arrays()[key], value, err_msg=key)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel", ["coo", "ell", "hyb"])
def test_gpu_conversions_build_the_host_formats(kernel, dtype):
    """Uploaded with CuPy and converted by the kernels, every family matrix and a power-law one
    give the host format's arrays exactly."""
    pytest.importorskip("cupy")
    from autospmv._prepare.device_input import upload_csr
    from autospmv.kernels.cuda import conversions

    matrices = [FAMILY[name]() for name in sorted(FAMILY)] + [power_law(20_000, 15_000, 1.6, 4)]
    for A in matrices:
        csr = canonicalize(A.astype(dtype))
        params = registry.choose_params(kernel, csr, "cuda")
        spec = registry.get(kernel)
        try:
            host = spec.convert(csr, params)
        except FormatTooLargeError:
            with pytest.raises(FormatTooLargeError):
                spec.convert(upload_csr(csr), params)
            continue
        uploaded = upload_csr(csr)
        assert uploaded.on_gpu and uploaded.conversions is conversions
        device = spec.convert(uploaded, params)
        host_arrays, device_arrays = host.arrays(), device.arrays()
        assert list(device_arrays) == list(host_arrays)
        for key, value in host_arrays.items():
            got = device_arrays[key].get()
            assert got.dtype == value.dtype, key
            np.testing.assert_array_equal(got, value, err_msg=key)
        assert getattr(device, "width", None) == getattr(host, "width", None)

