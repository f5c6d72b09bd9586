"""The cubin cache of GPU kernels (:mod:`autospmv.kernels.cuda.cubins`).

Without a GPU: what names an entry, and that a missing or damaged entry is not used. With a GPU:
a second process runs its products from the entries the first one stored, without numba-cuda
compiling or loading anything, and gets the same results.
"""

from __future__ import annotations

import json
import os
import re
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
from autospmv.kernels.cuda import csr5 as cuda_csr5  # noqa: E402
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


def test_an_entry_depends_on_the_kernels_sources_not_on_host_code():
    files, constants = cubins.kernel_sources(cuda_csr5.csr5_kernel.py_func)
    names = {Path(f).relative_to(REPO_ROOT / "autospmv").as_posix() for f in files}
    # its module, the device functions and intrinsics it calls, and the constants it reads
    assert names == {"kernels/cuda/csr5.py", "kernels/cuda/grid_dependency.py",
                     "kernels/cuda/matrix_loads.py"}
    assert "OMEGA=32" in constants
    files, _ = cubins.kernel_sources(cuda_csr.csr_scalar_kernel.py_func)
    assert [Path(f).name for f in files] == ["csr.py"]
    digest = cubins.kernel_digest(cuda_csr.csr_scalar_kernel.py_func)
    assert len(digest) == 64 and digest == cubins.kernel_digest(
        cuda_csr.csr_scalar_kernel.py_func)


def test_archives_round_trip_and_refuse_other_files(tmp_path):
    entries = {"a" * 64: ("_Z1a", b"cubin a" * 100), "b" * 64: ("_Z1b", b"")}
    cubins.write_archive(tmp_path / "sm_90.cubins", entries)
    assert cubins.read_archive(tmp_path / "sm_90.cubins") == entries
    (tmp_path / "other.cubins").write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not an archive"):
        cubins.read_archive(tmp_path / "other.cubins")
    data = (tmp_path / "sm_90.cubins").read_bytes()
    (tmp_path / "short.cubins").write_bytes(data[:-10])
    with pytest.raises(ValueError, match="truncated"):
        cubins.read_archive(tmp_path / "short.cubins")


def test_the_shipped_archive_is_used_after_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path / "empty")
    monkeypatch.setattr(cubins, "SHIPPED", tmp_path)
    cubins.shipped_archive.cache_clear()
    monkeypatch.setattr(cubins, "_module_function",
                        lambda image, name, key, device: (image, name))
    cubins.write_archive(tmp_path / "sm_90.cubins", {"5" * 64: ("_Z6kernel", b"machine code")})
    try:
        assert cubins._load("5" * 64) is None
        assert cubins._load_shipped("5" * 64, (9, 0)) == (b"machine code", "_Z6kernel")
        assert cubins._load_shipped("6" * 64, (9, 0)) is None  # not shipped
        assert cubins._load_shipped("5" * 64, (8, 0)) is None  # no archive for 8.0 here
    finally:
        cubins.shipped_archive.cache_clear()


def test_the_shipped_set_covers_every_kernel_in_both_dtypes_and_vector_dtypes():
    from autospmv.kernels.cuda import ship

    found = ship.specializations()
    names = {dispatcher.py_func.__name__ for dispatcher, _ in found}
    assert names == {"coo_kernel", "csr_scalar_kernel", "csr_vector_kernel", "ell_kernel",
                     "jds_kernel", "csr5_kernel", "csr5_clear_tile_ends",
                     "spmm_few_columns_kernel", "spmm_many_columns_kernel",
                     "row_pass_kernel", "length_count_kernel", "band_kernel",
                     "count_flags_kernel", "sample_detail_kernel", "longest_row_kernel",
                     "nonzero_rows_kernel", "ell_pad_kernel", "split_kernel"}
    scalar = [argtypes for dispatcher, argtypes in found
              if dispatcher.py_func.__name__ == "csr_scalar_kernel"]
    # (matrix, x, y): float32 with float32 or float64 vectors, float64 with either x
    assert sorted((str(a[2].dtype), str(a[3].dtype), str(a[4].dtype)) for a in scalar) == [
        ("float32", "float32", "float32"), ("float32", "float64", "float64"),
        ("float64", "float32", "float64"), ("float64", "float64", "float64")]
    assert len(found) == len({(d.py_func, a) for d, a in found})


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


PRODUCTS = """
import json, pathlib, sys
import numpy as np, scipy.sparse as sp
import autospmv
from autospmv._run.cache import compile_timer
from autospmv.kernels.cuda import cubins
if sys.argv[1:]:
    cubins.SHIPPED = pathlib.Path(sys.argv[1])  # no shipped archive
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
out["shipped"] = sum(len(cubins.shipped_archive(cc)) for cc in [(9, 0), (8, 0)])
print(json.dumps(out))
"""


def run_products(cache: Path, *argv) -> dict:
    env = dict(os.environ, AUTOSPMV_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    env.pop("NUMBA_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", PRODUCTS, *map(str, argv)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def check_products(run: dict, compiled: bool | None = None) -> None:
    for kernel in autospmv_kernels():
        assert run[kernel]["error"] <= 1e-12, kernel
        if compiled is False:
            assert run[kernel]["numba_cuda_s"] == 0.0, kernel


def autospmv_kernels():
    import autospmv

    return autospmv.KERNELS


@pytest.mark.requires_gpu
def test_a_new_process_runs_every_kernel_from_the_cubins_the_first_one_stored(tmp_path):
    first = run_products(tmp_path, tmp_path / "no-archives")
    second = run_products(tmp_path, tmp_path / "no-archives")
    assert list((tmp_path / "cubins").glob("*.cubin"))
    assert second["loaded"] > 0
    check_products(first)
    check_products(second, compiled=False)


@pytest.mark.requires_gpu
def test_with_an_empty_cache_the_shipped_cubins_serve_every_kernel(tmp_path):
    """Where the package ships an archive for this GPU and these numba versions, a first run
    compiles nothing; elsewhere it compiles as without archives."""
    run = run_products(tmp_path)
    matching = run["loaded"] > 0  # loaded from an archive (a compiled kernel is not counted)
    check_products(run, compiled=False if matching else None)
    if matching:
        assert not list((tmp_path / "cubins").glob("*.cubin"))  # nothing compiled, so stored


def test_the_shipped_archives_hold_every_specialization_under_the_installed_versions():
    """Every kernel and argument types a product reaches has its entry in each archive, under the
    key computed here, with the numba and numba-cuda versions installed: what a first run after
    ``pip install ".[cuda]"`` looks up. Fails when a kernel's source changes without the
    archives being rebuilt, and when an installed numba-cuda (or a numba that entered the keys)
    differs from the one the archives were built with: rebuild them with ``python -m
    autospmv.kernels.cuda.ship --build autospmv/kernels/cuda/shipped`` on a GPU."""
    from autospmv.kernels.cuda import ship

    folder = REPO_ROOT / "autospmv" / "kernels" / "cuda" / "shipped"
    built = json.loads((folder / ship.BUILT_WITH).read_text(encoding="utf-8"))
    assert built == ship.built_with(), "the archives were built with other versions"
    found = ship.specializations()
    for cc in ship.DEFAULT_CCS:
        archive = cubins.read_archive(folder / f"sm_{cc[0]}{cc[1]}.cubins")
        keys = {cubins.entry_key(d, argtypes, cc) for d, argtypes in found}
        stale = sorted({d.py_func.__name__ for d, argtypes in found
                        if cubins.entry_key(d, argtypes, cc) not in archive})
        assert not stale, f"sm_{cc[0]}{cc[1]}: no entry for the current sources of {stale}"
        assert set(archive) == keys, f"sm_{cc[0]}{cc[1]}: entries no product reaches"


def test_the_archives_are_built_with_the_numba_cuda_the_extras_pin():
    """The extras that install numba-cuda pin the version that enters every key, so that a pip
    install gets the archives' version whatever numba it resolves."""
    from autospmv.kernels.cuda import ship

    folder = REPO_ROOT / "autospmv" / "kernels" / "cuda" / "shipped"
    built = json.loads((folder / ship.BUILT_WITH).read_text(encoding="utf-8"))
    pins = re.findall(r'"numba-cuda(?:\[\w+\])?([^"]*)"',
                      (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert len(pins) >= 2 and set(pins) == {f"=={built['numba-cuda']}"}, pins


def test_numbas_version_is_not_part_of_an_entrys_key(monkeypatch):
    """numba-cuda generates the CUDA code: a numba release keeps every key, a numba-cuda
    release changes every one."""
    import numba

    key = cubins.entry_key(cuda_csr.csr_scalar_kernel, ARGTYPES, (9, 0))
    monkeypatch.setattr(numba, "__version__", "0.0.1")
    assert cubins.entry_key(cuda_csr.csr_scalar_kernel, ARGTYPES, (9, 0)) == key
    monkeypatch.setattr(cubins, "numba_cuda_version", "0.0.1")
    assert cubins.entry_key(cuda_csr.csr_scalar_kernel, ARGTYPES, (9, 0)) != key


def test_the_shipped_archives_hold_cubins():
    """Each entry reads back as the cubin it was built from (an ELF image), not as a cubin
    compressed more than once (an archive's entries read and written again without the
    matching decompression would be): the driver could load none of them, and every first
    run would compile every kernel."""
    from autospmv.kernels.cuda import ship

    folder = REPO_ROOT / "autospmv" / "kernels" / "cuda" / "shipped"
    for cc in ship.DEFAULT_CCS:
        archive = cubins.read_archive(folder / f"sm_{cc[0]}{cc[1]}.cubins")
        assert archive
        assert all(image.startswith(b"\x7fELF") for _, image in archive.values()), cc


def test_an_entrys_code_ignores_comments_docstrings_and_layout(tmp_path):
    def code(text):
        path = tmp_path / "kernel.py"
        path.write_text(text, encoding="utf-8")
        return cubins.source_code(path)

    plain = code('def k(a, x):\n    return a * x\n')
    assert code('"""Module."""\n# note\ndef k(a, x):\n    """Doc."""\n\n    return (a *\n'
                '            x)  # why\n') == plain
    assert code('def k(a, x):\n    return a + x\n') != plain
    assert code('def k(a, x):\n    "not a docstring" if a else 0\n    return a * x\n') != plain


def test_source_code_is_the_same_text_on_every_python_version(tmp_path):
    """Entry keys hash :func:`cubins.source_code`: it leaves out what Python versions dump
    differently (3.12's ``type_params`` on every function, None and empty fields that 3.13's
    ``ast.dump`` omits), so archives built on one Python version serve the others."""
    path = tmp_path / "kernel.py"
    path.write_text('"""Doc."""\n\ndef f(x, y=None):\n    """Doc."""\n    return x[0] + 1\n')
    assert cubins.source_code(path) == (
        "Module(body=[FunctionDef(name='f', args=arguments(args=[arg(arg='x'), arg(arg='y')], "
        "defaults=[Constant()]), body=[Return(value=BinOp(left=Subscript("
        "value=Name(id='x', ctx=Load()), slice=Constant(value=0), ctx=Load()), op=Add(), "
        "right=Constant(value=1)))])])")
