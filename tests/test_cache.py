"""The compiled-code cache folder (autospmv/_support/cache.py), compile-time notes and the warm-up.

The folder tests run ``import autospmv`` in a fresh interpreter, since the folder is fixed when
autospmv is first imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numba
import numpy as np
import pytest

from autospmv._support import cache
from autospmv.__main__ import build_parser
from autospmv._tools.warmup import warmup

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str, **env) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the repository importable and ``env`` applied
    (a value of None removes the variable)."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for key, value in env.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = str(value)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=environment, timeout=600)


REPORT = """
    import os, numba
    import autospmv
    state = autospmv._support.cache.configure()
    print(state.path, state.persistent, sep="|")
    print(numba.config.CACHE_DIR, os.environ["NUMBA_CACHE_DIR"], sep="|")
"""


def test_autospmv_cache_dir_is_used_and_holds_compiled_conversions(tmp_path):
    folder = tmp_path / "compiled"
    done = _python(REPORT + """
    import scipy.sparse as sp
    op = autospmv.prepare(sp.random(50, 40, density=0.1, format="csr", random_state=1),
                          kernel="coo", device="cpu")
    print(op.explain())
    """, AUTOSPMV_CACHE_DIR=folder, NUMBA_CACHE_DIR=None)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{folder}|True"
    assert lines[1] == f"{folder}|{folder}"
    # The COO conversion was compiled in this empty folder: its cache entry is there, and the
    # decision reports the compilation apart from the conversion time.
    assert any(path.name.startswith("convert.coo_rows") for path in folder.rglob("*.nbi"))
    assert "compilation of the conversion to coo and the set-up took" in done.stdout
    assert "conversion to coo and set-up took" in done.stdout


def test_numba_cache_dir_set_by_the_user_is_left_alone(tmp_path):
    done = _python(REPORT, NUMBA_CACHE_DIR=tmp_path, AUTOSPMV_CACHE_DIR=tmp_path / "other")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{tmp_path}|True", f"{tmp_path}|{tmp_path}"]


def test_default_folder_is_the_user_cache_folder(tmp_path):
    done = _python(REPORT, NUMBA_CACHE_DIR=None, AUTOSPMV_CACHE_DIR=None,
                   XDG_CACHE_HOME=tmp_path, HOME=tmp_path)
    assert done.returncode == 0, done.stderr
    expected = (tmp_path / "Library" / "Caches" if sys.platform == "darwin" else tmp_path)
    if sys.platform != "win32":
        folder = expected / "autospmv" / f"numba-{numba.__version__}"
        assert done.stdout.splitlines()[0] == f"{folder}|True"


def test_an_unusable_folder_warns_and_autospmv_still_works(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = _python("""
    import warnings
    warnings.simplefilter("always")
    import numpy as np, scipy.sparse as sp
    import autospmv
    state = autospmv._support.cache.configure()
    print(state.persistent, state.path.is_dir(), sep="|")
    A = sp.random(30, 20, density=0.2, format="csr", random_state=2)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    print(np.allclose(op @ np.ones(20), A @ np.ones(20)))
    """, AUTOSPMV_CACHE_DIR=blocker / "cache", NUMBA_CACHE_DIR=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False|True", "True"]
    assert "CacheWarning" in done.stderr and "AUTOSPMV_CACHE_DIR" in done.stderr


def test_import_works_when_no_temporary_folder_can_be_created_either(tmp_path):
    # As with read-only temporary folders: tempfile finds no usable one (its tempdir is set
    # below a plain file here, since chmod does not stop root). Compiled code then stays in
    # memory or goes beside the package, wherever numba finds a writable place.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = _python(f"""
    import tempfile, warnings
    tempfile.tempdir = {str(blocker / "tmp")!r}
    warnings.simplefilter("always")
    import numpy as np, scipy.sparse as sp
    import autospmv
    state = autospmv._support.cache.configure()
    print(state.persistent, state.source.startswith("none: "), sep="|")
    A = sp.random(30, 20, density=0.2, format="csr", random_state=2)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    print(np.allclose(op @ np.ones(20), A @ np.ones(20)))
    """, AUTOSPMV_CACHE_DIR=blocker / "cache", NUMBA_CACHE_DIR=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False|True", "True"]
    assert "CacheWarning" in done.stderr and "nor a temporary folder" in done.stderr


def test_compile_timer_separates_compiling_from_other_work():
    @numba.njit  # not cached: compiled in this test
    def add(a, b):
        return a + b

    with cache.compile_timer() as compiled:
        started = time.perf_counter()
        assert add(1.5, 2.0) == 3.5
        elapsed = time.perf_counter() - started
    assert 0 < compiled.compiling <= compiled.total <= elapsed
    assert compiled.note("a test").startswith("compilation of a test took ")
    with cache.compile_timer() as again:
        add(1.5, 2.0)
    assert again.total == 0 and again.note("a test") is None


def test_warmup_compiles_and_reports_each_kernel():
    steps = warmup("cpu", ["float64"], kernels=["csr_scalar", "coo"])
    assert [step.name for step in steps] == [
        "index range check (large matrices)", "features and prediction (float64)",
        "csr_scalar (float64)", "coo (float64)", "multi-vector products (float64)"]
    assert all(step.error is None and step.seconds >= step.compile_seconds >= 0
               for step in steps)
    # Everything is compiled now: a second warm-up compiles nothing.
    steps = warmup("cpu", ["float64"], kernels=["csr_scalar", "coo"])
    assert all(step.compile_seconds == 0 for step in steps)


def test_warmup_compiles_a_float32_matrixs_products_with_float64_x():
    """SciPy's solvers hand a float32 operator float64 vectors: warm-up compiles that too."""
    warmup("cpu", ["float32"], kernels=["csr_scalar"])
    from autospmv import prepare
    from autospmv._tools.warmup import warmup_matrices

    for A in warmup_matrices(np.float32):
        op = prepare(A, kernel="csr_scalar", device="cpu")
        with cache.compile_timer() as compiled:
            assert (op @ np.ones(A.shape[1])).dtype == np.float64
        assert compiled.total == 0


def test_warmup_command_line():
    args = build_parser().parse_args(["warmup", "--device", "cpu", "--dtype", "float32"])
    assert (args.command, args.device, args.dtype) == ("warmup", "cpu", ["float32"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["warmup", "--dtype", "float16"])


def test_compile_time_counts_overlapping_lock_holds_once():
    # numba-cuda loads a kernel while holding numba's lock too: the two holds are one time.
    compiled = cache.CompileTime(cpu=0.30, cuda=0.25, spans=[(1.0, 1.30), (1.05, 1.30)])
    assert compiled.total == pytest.approx(0.30)
    assert "(while numba's lock was held too)" in compiled.note("a kernel")
    apart = cache.CompileTime(cpu=0.2, cuda=0.1, spans=[(0.0, 0.2), (0.5, 0.6)])
    assert apart.total == pytest.approx(0.3)
    assert "held too" not in apart.note("a kernel")
