"""The cubin cache of GPU kernels (:mod:`autospmv.kernels.cuda.cubins`).

Without a GPU: what names an entry, and that a missing or damaged entry is not used. With a GPU:
a second process runs its products from the entries the first one stored, without numba-cuda
compiling or loading anything, and gets the same results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

cuda = pytest.importorskip("numba.cuda")
if cuda.config.ENABLE_CUDASIM:
    pytest.skip("the cubin cache serves the real driver, not numba-cuda's simulator",
                allow_module_level=True)

from numba import types  # noqa: E402

from autospmv.kernels.cuda import csr as cuda_csr  # noqa: E402
from autospmv.kernels.cuda import cubins  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
ARGTYPES = (types.Array(types.int32, 1, "C"), types.Array(types.float32, 1, "C"))


def test_an_entry_is_named_by_kernel_types_options_device_and_source():
    kernel = cuda_csr.csr_scalar_kernel
    key = cubins.entry_key(kernel, ARGTYPES, (9, 0))
    assert key == cubins.entry_key(kernel, ARGTYPES, (9, 0))
    assert len(key) == 64
    others = {
        cubins.entry_key(kernel, ARGTYPES[::-1], (9, 0)),
        cubins.entry_key(kernel, ARGTYPES, (8, 0)),
        cubins.entry_key(cuda_csr.csr_vector_kernel, ARGTYPES, (9, 0)),
    }
    assert key not in others and len(others) == 3


def test_the_source_digest_covers_every_source_file_of_the_package():
    package = REPO_ROOT / "autospmv"
    assert len(cubins.source_digest()) == 64
    assert cubins.source_digest() == cubins.source_digest()
    # It reads the files themselves: the kernels' modules and the formats they take constants
    # from are among them.
    read = sorted(str(p.relative_to(package)) for p in package.rglob("*.py"))
    assert "kernels/cuda/csr5.py" in read and "formats/csr5.py" in read


def test_missing_or_damaged_entries_are_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path)
    assert cubins._load("0" * 64) is None  # nothing stored
    (tmp_path / ("1" * 64 + ".json")).write_text("{not json")
    (tmp_path / ("1" * 64 + ".cubin")).write_bytes(b"\0")
    assert cubins._load("1" * 64) is None
    (tmp_path / ("2" * 64 + ".json")).write_text(json.dumps({"entry_name": "k"}))
    assert cubins._load("2" * 64) is None  # no cubin beside it


def test_cubin_bytes_are_taken_as_numba_cuda_returns_them():
    class ObjectCode:  # how numba-cuda returns a cubin when it links through cuda.core
        code = b"linked"

    assert cubins._image(b"linked") == cubins._image(ObjectCode()) == b"linked"
    assert cubins._image(object()) is None


def test_entries_are_written_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path / "cubins")
    cubins._store("3" * 64, b"cubin bytes", "_Z6kernel")
    assert (tmp_path / "cubins" / ("3" * 64 + ".cubin")).read_bytes() == b"cubin bytes"
    meta = json.loads((tmp_path / "cubins" / ("3" * 64 + ".json")).read_text())
    assert meta == {"entry_name": "_Z6kernel"}
    assert not list((tmp_path / "cubins").glob("*.tmp"))
    cubins._store("4" * 64, None, "_Z6kernel")  # no bytes at hand: nothing is written
    assert not list((tmp_path / "cubins").glob("4*"))


SECOND_PROCESS = """
import json, sys
import numpy as np, scipy.sparse as sp
import autospmv
from autospmv.cache import compile_timer
from autospmv.kernels.cuda import cubins
A = sp.random(3000, 2000, density=0.004, random_state=1, format="csr", dtype=np.float64)
x = np.random.default_rng(2).standard_normal(2000)
out = {}
for kernel in autospmv.KERNELS:
    with compile_timer() as compiled:
        op = autospmv.prepare(A, kernel=kernel, device="cuda")
        y = op @ x
    out[kernel] = {"error": float(np.abs(y - A @ x).max() / np.abs(A @ x).max()),
                   "numba_cuda_s": compiled.cuda}
out["loaded"] = len(cubins._LOADED)
print(json.dumps(out))
"""


@pytest.mark.requires_gpu
def test_a_new_process_runs_every_kernel_from_the_cubins_the_first_one_stored(tmp_path):
    env = dict(os.environ, AUTOSPMV_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("NUMBA_CACHE_DIR", None)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", SECOND_PROCESS], capture_output=True,
                              text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    first, second = runs
    assert list((tmp_path / "cubins").glob("*.cubin"))
    assert second["loaded"] > 0
    for kernel in first:
        if kernel == "loaded":
            continue
        assert max(first[kernel]["error"], second[kernel]["error"]) <= 1e-12, kernel
        assert second[kernel]["numba_cuda_s"] == 0.0, kernel
