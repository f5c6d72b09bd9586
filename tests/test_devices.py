"""Device resolution lives in ``autospmv._support.devices``: whether a real GPU (not numba-cuda's
simulator) is present is answered there, and the training pipeline asks it."""

from __future__ import annotations

import pytest

from autospmv._support import devices


@pytest.fixture
def simulator(monkeypatch):
    """Set numba-cuda's simulator flag for the test (``NUMBA_ENABLE_CUDASIM``), read at call
    time; ``cuda_available`` refuses to be asked, so a test shows it is not."""
    from numba import cuda

    def set_to(on: bool) -> None:
        monkeypatch.setattr(cuda.config, "ENABLE_CUDASIM", on)

    return set_to


def test_the_simulator_is_no_real_gpu_and_cuda_is_not_probed(simulator, monkeypatch):
    def refuse():
        raise AssertionError("cuda_available was asked under the simulator")

    simulator(True)
    monkeypatch.setattr(devices, "cuda_available", refuse)
    assert devices.cuda_simulator()
    assert not devices.real_gpu_available()


@pytest.mark.parametrize("usable", [True, False])
def test_without_the_simulator_a_real_gpu_is_a_usable_one(simulator, monkeypatch, usable):
    simulator(False)
    monkeypatch.setattr(devices, "cuda_available", lambda: usable)
    assert not devices.cuda_simulator()
    assert devices.real_gpu_available() is usable


@pytest.mark.parametrize("real, expected", [(True, "cuda"), (False, "cpu")])
def test_training_labels_for_the_device_devices_reports(monkeypatch, real, expected):
    from autospmv.training.__main__ import _default_device

    monkeypatch.setattr(devices, "real_gpu_available", lambda: real)
    assert _default_device() == expected


def test_gpu_timing_asks_devices_whether_a_real_gpu_is_present(simulator, monkeypatch):
    from autospmv.training.timing import require_real_gpu

    simulator(False)
    monkeypatch.setattr(devices, "real_gpu_available", lambda: True)
    require_real_gpu()
    monkeypatch.setattr(devices, "real_gpu_available", lambda: False)
    with pytest.raises(RuntimeError, match="no usable CUDA GPU was found"):
        require_real_gpu()
    simulator(True)
    with pytest.raises(RuntimeError, match="simulator .* would time a Python interpreter"):
        require_real_gpu()
