"""Shared pytest set-up: the one GPU requirement, the device parametrization, small fixtures.

The matrix families live in :mod:`matrices` (importable by benchmarks too); this file only wires
them into pytest.

A test that needs a real CUDA GPU carries ``@pytest.mark.requires_gpu`` (or
``pytestmark = pytest.mark.requires_gpu`` for a whole module): it is skipped without a real GPU,
and under numba-cuda's simulator, and it also carries the ``gpu`` mark, so that
``python -m pytest -m gpu`` selects it. A test that takes the :func:`device` fixture runs once on
the CPU and once on CUDA, the CUDA case marked ``requires_gpu``. The simulator runs in a
subprocess of its own (``test_cuda_simulator.py``), since it cannot share a process with real
compilation.

A test that takes 20 s or more on two cores (or shares a module fixture that does, such as a
simulator's worker process) carries ``@pytest.mark.slow``. Every test runs by default, as CI
runs them; ``python -m pytest -m "not slow"`` is the quick run.
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest

GPU_SKIP_REASON = "needs a real CUDA GPU (none found, or numba-cuda's simulator is on)"


def pytest_configure(config):
    # Also declared in pyproject.toml; registering here keeps `--strict-markers` happy either way.
    config.addinivalue_line("markers", "gpu: needs a real CUDA GPU (skipped without one)")
    config.addinivalue_line(
        "markers", "slow: takes 20 s or more on two cores (a simulator's worker, PTX compiles, a "
                   "retrain); runs by default, `-m \"not slow\"` leaves it out")
    config.addinivalue_line(
        "markers", "requires_gpu: needs a real CUDA GPU: skipped without one or under the CUDA "
                   "simulator, and marked gpu")


@functools.cache
def real_gpu_present() -> bool:
    """True when numba-cuda sees a usable CUDA GPU and is not its simulator
    (:func:`autospmv._support.devices.real_gpu_available`)."""
    from autospmv._support.devices import real_gpu_available

    return real_gpu_available()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Give every ``requires_gpu`` (or ``gpu``) test both marks, and skip it without a real GPU.

    Runs before pytest's own ``-m`` selection, so ``-m gpu`` sees the added marks.
    """
    for item in items:
        if not (item.get_closest_marker("requires_gpu") or item.get_closest_marker("gpu")):
            continue
        for name in ("requires_gpu", "gpu"):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
        if not real_gpu_present():
            item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))


DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.requires_gpu),
]
"""The devices a kernel runs on, as parameters: the CUDA case needs a real GPU."""


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """``"cpu"``, then ``"cuda"`` (marked ``requires_gpu``): one test body for both devices."""
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    """A generator with a fixed seed, fresh for every test."""
    return np.random.default_rng(20240611)


@pytest.fixture
def row_length_passes(monkeypatch) -> collections.Counter:
    """Counts the row-length computations of the test's calls, by number of rows: every
    ``np.diff`` of a one-dimensional array, counted under its length less one (a row pointer of
    m rows has m + 1 entries), so ``passes[m]`` is how often the row lengths of an m-row
    matrix were computed. Every route to the row lengths (``formats.base.row_lengths``, the
    HYB width check, the rule) goes through ``np.diff``."""
    passes = collections.Counter()
    diff = np.diff

    def counted(a, *args, **kwargs):
        if np.ndim(a) == 1:
            passes[np.shape(a)[0] - 1] += 1
        return diff(a, *args, **kwargs)

    monkeypatch.setattr(np, "diff", counted)
    return passes


@pytest.fixture(autouse=True)
def fresh_skip_warnings():
    """Each test sees the warnings for a skipped retrained model anew (autospmv gives each
    reason once per process)."""
    from autospmv._decide.model import lookup as model_lookup

    model_lookup._warned.clear()
    yield
