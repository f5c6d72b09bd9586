"""``cuda.shared.array`` under numba-cuda's simulator gives every thread of a block the same
array, also to threads that reach it together (``autospmv.kernels.cuda.simulator``), so that
the simulator tests of the kernels that sum through shared memory cannot lose a warp's sum."""

from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("numba.cuda")

from simulator_run import run_simulator_worker  # noqa: E402

WORKER = pathlib.Path(__file__).with_name("shared_array_simulator_worker.py")


def test_threads_that_reach_a_shared_array_together_share_it():
    result = run_simulator_worker(WORKER, 300)
    assert result["sums"] == [64.0] * 3
