"""Shared pytest set-up: the ``gpu`` marker and small fixtures.

The matrix family lives in :mod:`matrices` (importable by benchmarks too); this file only wires it
into pytest. GPU-only tests carry ``@pytest.mark.gpu`` and skip themselves without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest


def pytest_configure(config):
    # Also declared in pyproject.toml; registering here keeps `--strict-markers` happy either way.
    config.addinivalue_line("markers", "gpu: needs a real CUDA GPU (skipped without one)")


@pytest.fixture
def rng() -> np.random.Generator:
    """A generator with a fixed seed, fresh for every test."""
    return np.random.default_rng(20240611)
