"""Concurrent use of CPU operators under numba's threading layers, and fork after a parallel
call, each in a subprocess (a failure can abort or hang the process): see
``concurrency_worker.py``."""

from __future__ import annotations
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
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


# --- the feature scan's scratch memory ----------------------------------------------------------

def test_feature_scan_scratch_is_bounded_at_128_threads():
    """The issue's case: a 153 MB matrix (1M x 1M, 12.5M nonzeros) at 128 threads."""
    from autospmv._decide.features import scan as feature_scan

    m = n = 1_000_000
    csr_bytes = 12_500_000 * (8 + 4) + 4 * (m + 1)
    workers = feature_scan._workers(128, m, n, 40, csr_bytes)
    per_worker = sum(length * np.dtype(dtype).itemsize
                     for length, dtype in feature_scan._scratch_shapes(m, n, 40))
    assert 1 <= workers < 128
    assert workers * per_worker <= 2 * csr_bytes


def test_feature_scan_with_many_threads_keeps_its_memory_and_its_values(monkeypatch):
    """128 workers' worth of threads: the scan splits into fewer workers, within the budget,
    and computes the same features. The workers run one after another (the serial
    specialisation runs the same split as the parallel one, without its long compilation). The
    measured call follows a first one, so that compiling the threaded passes over the row pointer
    (numba's own allocations) is not counted as the scan's memory."""
    import tracemalloc

    import numba

    from autospmv._support.validation import canonicalize
    from matrices import random_matrix

    from autospmv._decide.features import extract as features
    from autospmv._decide.features import sampling, scan
    A = canonicalize(random_matrix(20_000, 20_000, 5e-4, 1))
    serial = features.features(A, device="cpu", sample_rows=20_000)
    from autospmv._support import threads as cpu_threads

    monkeypatch.setattr(cpu_threads, "PASSES_PARALLEL_MIN_NNZ", 0)
    monkeypatch.setattr(cpu_threads, "PARALLEL_MIN_THREADS", 1)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 128)
    monkeypatch.setattr(scan, "scan_parallel", scan.scan_serial)
    m = A.shape[0]
    selected = sampling.select_windows(m, sampling.sampled_windows(m, A.nnz, 20_000))
    shift, narrow = sampling.sector_shift_and_narrow(A)
    scan.scan_rows(A, selected, shift, narrow, True, True)  # compiles the threaded row-pointer passes outside the measurement
    tracemalloc.start()
    try:
        scan.scan_rows(A, selected, shift, narrow, True, True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    csr_bytes = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
    assert peak <= 2 * csr_bytes
    assert features.features(A, device="cpu", sample_rows=20_000) == pytest.approx(serial,
                                                                                rel=1e-12)
