"""Running a worker script in numba-cuda's CUDA simulator, in a subprocess of its own.

The simulator cannot share a process with real compilation (``test_cuda_ptx.py``), so the
simulator tests run their cases in a worker and assert each result in a test of its own.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_simulator_worker(worker: pathlib.Path, timeout_s: float, *args: str):
    """The JSON the worker prints, run with ``NUMBA_ENABLE_CUDASIM=1`` from the repository
    root, with ``args`` on its command line; the calling test fails with the worker's stderr
    when it fails or outlasts ``timeout_s``."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, str(worker), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the simulator worker ran past {timeout_s} s; its stderr:\n{exc.stderr}")
    if done.returncode:
        pytest.fail(f"the simulator worker failed (exit {done.returncode}); its stderr:\n"
                    f"{done.stderr}")
    return json.loads(done.stdout)
