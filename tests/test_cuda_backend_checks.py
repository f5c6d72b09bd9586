"""The CUDA backend refuses an out that overlaps x or is read-only, in numba-cuda's simulator
(``cuda_checks_worker.py``, in a subprocess: the simulator cannot share a process with real
compilation). The GPU-only checks (streams, threads, devices) are in ``test_gpu_concurrency.py``."""

from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("numba.cuda")

import autospmv  # noqa: E402
from simulator_run import run_simulator_worker  # noqa: E402

WORKER = pathlib.Path(__file__).with_name("cuda_checks_worker.py")


@pytest.fixture(scope="module")
def outcomes():
    return run_simulator_worker(WORKER, 600)


OVERLAP = "ValueError: out overlaps x: the kernel would overwrite x while reading it"


@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_simulated_backend_checks(outcomes, kernel):
    assert outcomes[f"{kernel}/out=x"].startswith(OVERLAP)
    assert outcomes[f"{kernel}/overlap"].startswith(OVERLAP)
    assert outcomes[f"{kernel}/neighbours"] == "ok"
    assert outcomes[f"{kernel}/read-only out"].startswith("ValueError: out is read-only")
    assert outcomes[f"{kernel}/host"] == "ok"
