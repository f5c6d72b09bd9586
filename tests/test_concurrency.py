"""Concurrent use of CPU operators under numba's threading layers, and fork after a parallel
call, each in a subprocess (a failure can abort or hang the process): see
``concurrency_worker.py``."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

WORKER = pathlib.Path(__file__).with_name("concurrency_worker.py")
LAYERS = ["omp", "workqueue"]


def run_worker(mode: str, layer: str) -> dict:
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer, NUMBA_NUM_THREADS="4")
    try:
        done = subprocess.run([sys.executable, str(WORKER), mode], capture_output=True,
                              text=True, env=env, timeout=300)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the {mode} worker under {layer} hung; its stderr:\n{exc.stderr}")
    if done.returncode == 3:
        pytest.skip(f"numba's {layer} threading layer is not available here")
    assert done.returncode == 0, (f"the {mode} worker under {layer} failed (exit "
                                  f"{done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout)
    assert result["layer"] == layer
    return result


@pytest.mark.parametrize("layer", LAYERS)
def test_eight_threads_share_operators_without_a_wrong_result(layer):
    result = run_worker("threads", layer)
    assert result["calls"] == 8 * 25 * 7 * 3
    assert result["wrong"] == 0


@pytest.mark.parametrize("layer", LAYERS)
def test_fork_pool_after_a_parallel_call_computes(layer):
    result = run_worker("fork", layer)
    assert result["results"] == pytest.approx(result["expected"], rel=1e-12)
