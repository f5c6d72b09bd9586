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

SWITCH_INTERVAL_S = 0.001
"""The worker's thread switch interval (:func:`sys.setswitchinterval`; Python's default is
5 ms). The simulator runs each CUDA thread as a Python thread, and the manager of a block polls
them for ``cuda.syncthreads()`` while it holds the GIL: a thread released from a barrier waits
for the poller to give the GIL up, at the latest after a switch interval. At 1 ms a barrier of
one warp takes about a third of its time at 5 ms, and the workers whose kernels wait at
barriers and shuffle (every kernel's, the SpMM's, the solvers', the ordering's) run in half the
time or less; shorter intervals gain little more for a warp and slow the barriers of blocks of
256 threads down. Kernels that mostly contend for atomics (the feature passes') run slower at
1 ms and keep Python's default (``switch_interval_s=None``)."""

_RUN_AS_SCRIPT = (
    "import runpy, sys; sys.setswitchinterval(float(sys.argv[1])); sys.argv = sys.argv[2:]; "
    "sys.path[0] = __import__('os').path.dirname(sys.argv[0]); "
    "runpy.run_path(sys.argv[0], run_name='__main__')")
"""``python -c`` code that runs the script ``argv[2]`` (with the arguments after it) as
``python script`` would, at the switch interval ``argv[1]``."""


def run_simulator_worker(worker: pathlib.Path, timeout_s: float, *args: str,
                         switch_interval_s: float | None = SWITCH_INTERVAL_S):
    """The JSON the worker prints, run with ``NUMBA_ENABLE_CUDASIM=1`` from the repository
    root, with ``args`` on its command line, at the thread switch interval
    ``switch_interval_s`` (None: Python's default); the calling test fails with the worker's
    stderr when it fails or outlasts ``timeout_s``."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if switch_interval_s is None:
        command = [sys.executable, str(worker), *args]
    else:
        command = [sys.executable, "-c", _RUN_AS_SCRIPT, str(switch_interval_s), str(worker),
                   *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the simulator worker ran past {timeout_s} s; its stderr:\n{exc.stderr}")
    if done.returncode:
        pytest.fail(f"the simulator worker failed (exit {done.returncode}); its stderr:\n"
                    f"{done.stderr}")
    return json.loads(done.stdout)
