"""How numba-cuda's simulator runs a block once ``autospmv.kernels.cuda.simulator`` is
installed: its threads as greenlets from barrier to barrier, with the barriers, votes, shuffles
and shared arrays the kernels rely on."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("numba.cuda")

from simulator_run import run_simulator_worker  # noqa: E402

WORKER = pathlib.Path(__file__).with_name("simulator_blocks_worker.py")
THREADS = 64


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, 300)


def test_threads_that_reach_a_shared_array_together_share_it(simulated):
    assert simulated["block_sums"] == [64.0] * 3


def test_threads_that_return_leave_the_barrier_to_the_others(simulated):
    assert simulated["even_sum"] == [32.0]


def test_a_read_without_a_barrier_sees_the_write_stale_in_one_direction(simulated):
    """Turns alternate direction at each barrier: the next thread has written before the reader
    after one barrier (but for the wrapped-around last thread's read), and after the other not
    (but for the last thread's read of the first)."""
    assert sorted(simulated["reads_without_a_barrier"]) == [1.0, THREADS - 1.0]


def test_barrier_votes_count_every_thread(simulated):
    assert simulated["votes"] == [10, 1, 1, 0]


def test_a_shuffle_from_a_returned_lane_keeps_the_own_value(simulated):
    assert simulated["shuffle"] == [16.0, 17.0, 18.0, 19.0] + [float(i) for i in range(4, 20)]


def test_thread_indices_run_x_fastest(simulated):
    linear = [[[[x + 4 * y, (x + 4 * y) % 32] for x in range(4)] for y in range(3)]] * 2
    assert simulated["indices"] == linear


def test_a_failing_thread_is_named_and_stops_the_launch(simulated):
    assert "tid=[5, 0, 0] ctaid=[1, 0, 0]" in simulated["failure"]
    assert "out of bounds" in simulated["failure"] or "index" in simulated["failure"]


def test_without_greenlet_the_simulated_gpu_names_what_to_install():
    """The simulated CUDA kernels need greenlet; without it, importing them says so, and the
    CPU path keeps working."""
    code = ("import sys; sys.modules['greenlet'] = None\n"
            "import numpy as np, scipy.sparse as sp, autospmv\n"
            "op = autospmv.prepare(sp.identity(5, format='csr'), device='cpu')\n"
            "assert (op @ np.ones(5) == 1).all()\n"
            "import autospmv.kernels.cuda\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=pathlib.Path(__file__).resolve().parent.parent,
                          timeout=300)
    assert done.returncode != 0
    assert "ImportError" in done.stderr and "pip install greenlet" in done.stderr
