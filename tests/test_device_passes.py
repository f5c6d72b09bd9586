"""The feature passes on the GPU (:mod:`autospmv._decide.features.device_scan`, kernels in
:mod:`autospmv.kernels.cuda.feature_passes`) give the host scan's features bit for bit.

Without a GPU the kernels run in numba-cuda's simulator (``device_passes_simulator_worker.py``,
in a subprocess of its own), on the matrix family, on samples of windows and with the passes a
caller's features call for. With a GPU the same comparison runs on the uploaded matrix, and a
new process decides with nothing compiled where the package ships the kernels.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

from autospmv._decide.features import device_scan as device_passes, scan as feature_scan  # noqa: E402
from autospmv._decide.features import extract as features_module  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from matrices import FAMILY, numpy_device_csr, power_law  # noqa: E402
from simulator_run import run_simulator_worker  # noqa: E402

WORKER = pathlib.Path(__file__).with_name("device_passes_simulator_worker.py")
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TIMEOUT_S = 900
"""The worker takes about a minute on two cores; the limit only stops a hang."""


def _case_names() -> list[str]:
    import device_passes_cases as worker

    names = []
    for dtype in ("float32", "float64"):
        names += [f"family/{name}/{dtype}" for name in worker.SIMULATED_FAMILY]
        for name in worker.SAMPLED:
            names += [f"sampled/{name}/{rows}/{dtype}" for rows in worker.SAMPLE_ROWS]
        names += [f"x_locality/{name}/{dtype}" for name in worker.LOCALITY]
    return names + [f"needed/{name}" for name in worker.NEEDED]


@pytest.fixture(scope="module")
def simulated():
    return run_simulator_worker(WORKER, TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.parametrize("case", _case_names())
def test_simulated_device_passes_give_the_host_features(simulated, case):
    assert simulated[case]["diff"] is None, simulated[case]["diff"]


def test_the_counters_come_in_the_host_scans_order():
    from autospmv.kernels.cuda import feature_passes as kernels

    for b in feature_scan.BLOCK_SIZES:
        assert getattr(kernels, f"T{b}") == feature_scan._TOUCHED[b]
        assert getattr(kernels, f"F{b}") == feature_scan._FULL[b]
    for name in ("NARROW", "ROW_SECTORS", "WARP_SECTORS", "SAMPLED_NNZ", "SAMPLED_NNZ3"):
        assert getattr(kernels, name) == getattr(feature_scan, f"_{name}"), name
    assert kernels.COUNTERS == feature_scan._N_SUMS
    assert kernels.WINDOW_ROWS == feature_scan.WINDOW_ROWS


def test_the_shipped_kernels_cover_every_launch_of_the_passes(monkeypatch):
    """Every launch the passes make on a matrix with 32-bit indices has its argument types
    among those the archives are built for (:func:`feature_passes.shipped_launches`), so a
    first decision on a GPU of the shipped architectures compiles nothing."""
    from autospmv.kernels.cuda.feature_passes import shipped_launches
    from autospmv.kernels.cuda.launch import Launch

    launched = set()

    def recording_launcher(csr):
        def launch(kernel, threads, args):
            launched.add((kernel.py_func.__name__, Launch(kernel, 1, 32, args,
                                                          np.float64).argtypes))
        return launch

    monkeypatch.setattr(device_passes, "launcher", recording_launcher)
    csr = canonicalize(power_law(300, 200, 1.6, 1))
    stand_in = numpy_device_csr(csr)
    selected = np.ones(-(-csr.shape[0] // 32), np.uint8)
    device_passes.scan(stand_in, selected, 3, 2)
    shipped = {(kernel.py_func.__name__, argtypes) for kernel, argtypes in shipped_launches()}
    assert {name for name, _ in launched} == {name for name, _ in shipped}
    assert launched <= shipped


def test_numpy_arrays_run_the_kernels_only_in_the_simulator():
    csr = canonicalize(FAMILY["odd_33x33"]())
    stand_in = numpy_device_csr(csr)
    assert not device_passes.runs_kernels(stand_in)  # this process does not simulate


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_features_of_an_uploaded_matrix_are_the_host_features(dtype):
    from autospmv._decide.features.sampling import x_locality, x_reach
    from autospmv._prepare.device_input import upload_csr

    pytest.importorskip("cupy")
    matrices = [FAMILY[name]() for name in sorted(FAMILY)]
    matrices += [power_law(100_000, 80_000, 1.6, 9), power_law(60_000, 2_000_000, 1.3, 2)]
    for A in matrices:
        csr = canonicalize(A.astype(dtype))
        uploaded = upload_csr(csr)
        host, host_lengths = features_module.canonical_features_and_lengths(csr, device="cuda")
        got, lengths = features_module.canonical_features_and_lengths(csr, device="cuda",
                                                                      uploaded=uploaded)
        assert got == host
        for a, b in zip(lengths, host_lengths):
            np.testing.assert_array_equal(a, b)
        assert x_locality(uploaded.structure()) == x_locality(csr)
        assert x_reach(uploaded.structure()) == x_reach(csr)


FIRST_DECISION = """
import json, os, pathlib, re
import numpy as np, scipy.sparse as sp
import autospmv
from autospmv._support.cache import compile_timer
T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(300, 300))
A = sp.kronsum(T, T, format="csr").astype(np.float32)
x = np.ones(A.shape[1], dtype=np.float32)
cupy_cache = pathlib.Path(os.environ["CUPY_CACHE_DIR"])
seen, steps = set(), {}

def step(name, kernel=None):
    # numba's compile time and the kernels CuPy compiled (it saves their sources beside them)
    with compile_timer() as compiled:
        op = autospmv.prepare(A, kernel=kernel, device="cuda")
        op @ x
    new = set(cupy_cache.rglob("*.cu")) - seen
    seen.update(new)
    names = re.findall(r"__global__\\s+void\\s+(\\w+)",
                       "".join(p.read_text(errors="replace") for p in new))
    steps[name] = {"kernel": op.kernel, "numba_s": compiled.total, "cupy": sorted(set(names)),
                   "notes": op.decision.notes}

step("automatic")
for kernel in ("coo", "csr_scalar", "ell", "csr_vector", "hyb"):
    step(kernel, kernel)
print(json.dumps(steps))
"""


@pytest.mark.requires_gpu
def test_a_first_automatic_prepare_on_the_gpu_compiles_nothing(tmp_path):
    """With empty caches, deciding and running on a GPU of the shipped architectures compiles
    nothing: not numba or numba-cuda, on the host or the device, and not CuPy (nothing enters
    its kernel cache), also for every kernel chosen by hand whose conversion on the GPU runs
    shipped kernels. (Chosen by hand, csr_vector's and hyb's parameters come from the row
    lengths counted by compiled host passes, which compile on first use.)"""
    from numba import cuda

    from autospmv.kernels.cuda import cubins

    pytest.importorskip("cupy")
    if not cubins.shipped_archive(tuple(cuda.get_current_device().compute_capability)):
        pytest.skip("no shipped archive for this GPU")
    cupy_cache = tmp_path / "cupy"
    env = dict(os.environ, AUTOSPMV_CACHE_DIR=str(tmp_path), CUPY_CACHE_DIR=str(cupy_cache),
               CUPY_CACHE_SAVE_CUDA_SOURCE="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", FIRST_DECISION], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads(done.stdout.splitlines()[-1])
    for name, run in steps.items():
        assert not run["cupy"], (name, run["cupy"])
        if name not in ("csr_vector", "hyb"):
            assert run["numba_s"] == 0.0, (name, run["notes"])
    automatic = steps["automatic"]["notes"]
    assert any("counted on the GPU" in note for note in automatic), automatic
    left = sorted(p.name for p in cupy_cache.rglob("*") if p.is_file())
    assert not left, left
