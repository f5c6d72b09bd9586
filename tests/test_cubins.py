"""The cubin cache of GPU kernels (:mod:`autospmv.kernels.cuda.cubins`).

Without a GPU: what names an entry; that the shipped archives hold every specialization under
the keys of the installed versions; and that a missing, damaged or hostile entry, archive or
file is never used (the kernel is compiled instead, with one warning), never crashes and is
never read beyond a cap. With a GPU: a second process runs its products from the entries the
first one stored, without numba-cuda compiling or loading anything, and gets the same results.
"""

from __future__ import annotations

import json
import os
import random
import re
import struct
import subprocess
import sys
import tracemalloc
import warnings
import zlib
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

from autospmv._support.cache import CacheWarning  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
ARGTYPES = (types.Array(types.int32, 1, "C"), types.Array(types.float32, 1, "C"))
ENTRIES = {"a" * 64: ("_Z1a", b"\x7fELF cubin a" * 100), "b" * 64: ("_Z1b", b"\x7fELF b" * 50),
           "c" * 64: ("_Z1c", b"")}
"""Entries of a small archive (key -> entry name, cubin)."""


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Each test starts with no archive or cache folder warned about and no archive read, and
    leaves no archive it made read."""
    monkeypatch.setattr(cubins, "_WARNED", set())
    cubins.shipped_archive.cache_clear()
    yield
    cubins.shipped_archive.cache_clear()


@pytest.fixture
def loads(monkeypatch) -> list:
    """The (name, image) of every entry handed to the driver in the test, instead of loading."""
    loaded = []

    def load(image, name, key, device_id):
        loaded.append((name, image))
        return image, name

    monkeypatch.setattr(cubins, "_module_function", load)
    return loaded


def archive_bytes(index, blobs: bytes = b"") -> bytes:
    """An archive's bytes with the index ``index`` (any JSON value, or bytes as they are)."""
    header = index if isinstance(index, bytes) else json.dumps(index).encode()
    return cubins.ARCHIVE_MAGIC + struct.pack("<Q", len(header)) + header + blobs


def split_archive(data: bytes) -> tuple[dict, bytes]:
    """The index and the compressed cubins of an archive's bytes."""
    start = len(cubins.ARCHIVE_MAGIC) + 8
    length, = struct.unpack_from("<Q", data, len(cubins.ARCHIVE_MAGIC))
    return json.loads(data[start:start + length]), data[start + length:]


def shipped_from(tmp_path, monkeypatch, data: bytes):
    """Make ``data`` the shipped archive for compute capability 9.0 (read anew)."""
    monkeypatch.setattr(cubins, "SHIPPED", tmp_path)
    cubins.shipped_archive.cache_clear()
    (tmp_path / "sm_90.cubins").write_bytes(data)


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
    assert [Path(f).name for f in files] == ["csr.py", "grid_dependency.py"]
    digest = cubins.kernel_digest(cuda_csr.csr_scalar_kernel.py_func)
    assert len(digest) == 64 and digest == cubins.kernel_digest(
        cuda_csr.csr_scalar_kernel.py_func)


def test_archives_round_trip_and_refuse_other_files(tmp_path):
    cubins.write_archive(tmp_path / "sm_90.cubins", ENTRIES)
    assert cubins.read_archive(tmp_path / "sm_90.cubins") == ENTRIES
    (tmp_path / "other.cubins").write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not an archive"):
        cubins.read_archive(tmp_path / "other.cubins")
    data = (tmp_path / "sm_90.cubins").read_bytes()
    (tmp_path / "short.cubins").write_bytes(data[:-10])
    with pytest.raises(ValueError, match="truncated"):
        cubins.read_archive(tmp_path / "short.cubins")
    earlier = b"autospmv-cubins 1\n" + data[len(cubins.ARCHIVE_MAGIC):]
    (tmp_path / "v1.cubins").write_bytes(earlier)
    with pytest.raises(ValueError, match="not an archive"):  # an earlier format
        cubins.read_archive(tmp_path / "v1.cubins")


def test_the_shipped_archive_is_used_after_the_cache_folder(tmp_path, monkeypatch, loads):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path / "empty")
    monkeypatch.setattr(cubins, "SHIPPED", tmp_path)
    cubins.write_archive(tmp_path / "sm_90.cubins", {"5" * 64: ("_Z6kernel", b"machine code")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cubins._load("5" * 64) is None
        assert cubins._load_shipped("5" * 64, (9, 0)) == (b"machine code", "_Z6kernel")
        assert cubins._load_shipped("6" * 64, (9, 0)) is None  # not shipped
        assert cubins._load_shipped("5" * 64, (8, 0)) is None  # no archive for 8.0 here


def test_the_shipped_set_covers_every_kernel_in_both_dtypes_and_vector_dtypes():
    from autospmv.kernels.cuda import ship

    found = ship.specializations()
    names = {dispatcher.py_func.__name__ for dispatcher, _ in found}
    assert names == {"coo_kernel", "csr_scalar_kernel", "csr_vector_kernel", "ell_kernel",
                     "jds_kernel", "csr5_kernel", "csr5_clear_tile_ends",
                     "spmm_few_columns_kernel", "spmm_eight_columns_kernel",
                     "spmm_many_columns_kernel",
                     "spmm_column_pairs_kernel", "spmm_column_pairs_wide_step_kernel",
                     "spmm_column_quads_kernel",
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


def test_cubin_bytes_are_taken_as_numba_cuda_returns_them():
    class ObjectCode:  # how numba-cuda returns a cubin when it links through cuda.core
        code = b"linked"

    assert cubins.cubin_bytes(b"linked") == cubins.cubin_bytes(ObjectCode()) == b"linked"
    assert cubins.cubin_bytes(object()) is None


def test_entries_are_written_whole(tmp_path, monkeypatch, loads):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path / "cubins")
    cubins._store("3" * 64, b"cubin bytes", "_Z6kernel")
    assert (tmp_path / "cubins" / ("3" * 64 + ".cubin")).read_bytes() == b"cubin bytes"
    meta = json.loads((tmp_path / "cubins" / ("3" * 64 + ".json")).read_text())
    assert meta == {"entry_name": "_Z6kernel",
                    "sha256": cubins.entry_checksum("3" * 64, "_Z6kernel", b"cubin bytes")}
    assert not list((tmp_path / "cubins").glob("*.tmp"))
    assert cubins._load("3" * 64) == (b"cubin bytes", "_Z6kernel")
    cubins._store("4" * 64, None, "_Z6kernel")  # no bytes at hand: nothing is written
    assert not list((tmp_path / "cubins").glob("4*"))


def test_a_missing_cache_entry_is_compiled_without_a_warning(tmp_path, monkeypatch, loads):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cubins._load("0" * 64) is None  # nothing stored
        (tmp_path / ("2" * 64 + ".json")).write_text(json.dumps({"entry_name": "k"}))
        assert cubins._load("2" * 64) is None  # no cubin beside it
    assert loads == []


KEY = "1" * 64
IMAGE = b"\x7fELF machine code"
GOOD_META = {"entry_name": "_Z1k", "sha256": cubins.entry_checksum(KEY, "_Z1k", IMAGE)}


@pytest.mark.parametrize("meta", [
    b"[]", b'"text"', b"null", b"123", b"{not json", b"{}", b"\xff\xfe", b"[" * 100_000,
    json.dumps({"entry_name": "_Z1k"}).encode(),  # no checksum
    json.dumps({**GOOD_META, "entry_name": 5}).encode(),
    json.dumps({**GOOD_META, "entry_name": "_Z1k\0"}).encode(),
    json.dumps({**GOOD_META, "entry_name": ["_Z1k"]}).encode(),
    json.dumps({**GOOD_META, "sha256": None}).encode(),
    json.dumps({**GOOD_META, "sha256": "0" * 64}).encode(),  # not this entry's
    json.dumps({**GOOD_META, "extra": 1}).encode(),
], ids=lambda meta: meta[:24].decode(errors="replace"))
def test_a_damaged_cache_entry_is_compiled_with_one_warning(tmp_path, monkeypatch, loads, meta):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path)
    (tmp_path / f"{KEY}.cubin").write_bytes(IMAGE)
    (tmp_path / f"{KEY}.json").write_bytes(meta)
    with pytest.warns(CacheWarning, match=f"{tmp_path}.*the entry {KEY}") as caught:
        assert cubins._load(KEY) is None
        assert cubins._load(KEY) is None  # once per folder
    assert len(caught) == 1 and loads == []
    (tmp_path / f"{KEY}.json").write_text(json.dumps(GOOD_META))  # as _store writes it
    assert cubins._load(KEY) == (IMAGE, "_Z1k")


def test_a_cache_entry_moved_to_another_key_is_refused(tmp_path, monkeypatch, loads):
    """Both files of one entry put in the place of another's: the checksum covers the key."""
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path)
    cubins._store(KEY, IMAGE, "_Z1k")
    other = "2" * 64
    for suffix in (".cubin", ".json"):
        (tmp_path / (other + suffix)).write_bytes((tmp_path / (KEY + suffix)).read_bytes())
    with pytest.warns(CacheWarning, match="checksum"):
        assert cubins._load(other) is None
    assert loads == []


def special_files(folder: Path) -> list[Path]:
    """Paths in ``folder`` (made) that are not regular files: a link to /dev/zero (endless), a
    pipe with no writer (a read would block), a folder."""
    folder.mkdir()
    paths = []
    if Path("/dev/zero").exists():
        (folder / "zero").symlink_to("/dev/zero")
        paths.append(folder / "zero")
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "pipe")
        paths.append(folder / "pipe")
    (folder / "folder").mkdir()
    return paths + [folder / "folder"]


@pytest.mark.parametrize("name", [f"{KEY}.cubin", f"{KEY}.json", "sm_90.cubins"])
def test_only_regular_files_are_read(tmp_path, monkeypatch, loads, name):
    """Each file of an entry replaced by a link to something else than a regular file: that
    place is not used, with one warning, and no read blocks or runs on."""
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path)
    monkeypatch.setattr(cubins, "SHIPPED", tmp_path)
    for special in special_files(tmp_path / "specials"):
        monkeypatch.setattr(cubins, "_WARNED", set())
        cubins.shipped_archive.cache_clear()
        cubins._store(KEY, IMAGE, "_Z1k")
        cubins.write_archive(tmp_path / "sm_90.cubins", {KEY: ("_Z1k", IMAGE)})
        (tmp_path / name).unlink()
        (tmp_path / name).symlink_to(special)
        with pytest.warns(CacheWarning, match="not a regular file"):
            found = (cubins._load_shipped(KEY, (9, 0)) if name.startswith("sm_")
                     else cubins._load(KEY))
        assert found is None and loads == []
        with pytest.raises(ValueError, match="not a regular file"):
            cubins.read_archive(special)


def test_files_above_the_caps_are_not_read(tmp_path, monkeypatch, loads):
    monkeypatch.setattr(cubins, "folder", lambda: tmp_path)
    cubins._store(KEY, IMAGE, "_Z1k")
    cubins.write_archive(tmp_path / "sm_90.cubins", {KEY: ("_Z1k", IMAGE)})
    monkeypatch.setattr(cubins, "MAX_IMAGE_BYTES", len(IMAGE) - 1)
    with pytest.warns(CacheWarning, match="larger than"):
        assert cubins._load(KEY) is None
    monkeypatch.setattr(cubins, "MAX_ARCHIVE_BYTES", 100)
    with pytest.raises(ValueError, match="larger than 100 bytes"):
        cubins.read_archive(tmp_path / "sm_90.cubins")
    assert loads == []


def test_archives_round_trip_lazily(tmp_path, monkeypatch):
    cubins.write_archive(tmp_path / "sm_90.cubins", ENTRIES)
    inflated = []
    real = zlib.decompressobj
    monkeypatch.setattr(cubins.zlib, "decompressobj", lambda: inflated.append(1) or real())
    archive = cubins.read_archive(tmp_path / "sm_90.cubins")
    assert len(archive) == 3 and "a" * 64 in archive and inflated == []
    assert archive["b" * 64] == ENTRIES["b" * 64] and len(inflated) == 1
    assert archive == ENTRIES and archive.get("d" * 64) is None


BAD_INDEXES = {
    "a list": [["a" * 64, "_Z1a", 0, 10, 10, "0" * 64]],
    "null": None,
    "a string": "index",
    "a number": 123,
    "float offsets": {"a" * 64: ["_Z1a", 0.0, 10, 10, "0" * 64]},
    "string offsets": {"a" * 64: ["_Z1a", "0", 10, 10, "0" * 64]},
    "null offsets": {"a" * 64: ["_Z1a", None, 10, 10, "0" * 64]},
    "bool offsets": {"a" * 64: ["_Z1a", False, 10, 10, "0" * 64]},
    "a negative offset": {"a" * 64: ["_Z1a", -5, 10, 10, "0" * 64]},
    "beyond the end": {"a" * 64: ["_Z1a", 0, 10 ** 30, 10, "0" * 64]},
    "a huge length": {"a" * 64: ["_Z1a", 0, 1, 10 ** 12, "0" * 64]},
    "an entry of four": {"a" * 64: ["_Z1a", 0, 1, 10]},
    "an entry object": {"a" * 64: {"name": "_Z1a"}},
    "a name of null": {"a" * 64: [None, 0, 1, 10, "0" * 64]},
    "a key that is not a hash": {"a": ["_Z1a", 0, 1, 10, "0" * 64]},
    "a checksum of null": {"a" * 64: ["_Z1a", 0, 1, 10, None]},
    "deeply nested": b"[" * 200_000 + b"]" * 200_000,
    "not JSON": b"{'a': 1}",
    "not UTF-8": b"\xff\xfe\xfa",
    "infinite": b'{"' + b"a" * 64 + b'": ["_Z1a", 0, 1, Infinity, "' + b"0" * 64 + b'"]}',
    "a number of 5,000 digits": b'{"' + b"a" * 64 + b'": ["_Z1a", ' + b"9" * 5000
    + b', 1, 1, "' + b"0" * 64 + b'"]}',
}


@pytest.mark.parametrize("index", BAD_INDEXES.values(), ids=BAD_INDEXES.keys())
def test_a_malformed_index_falls_back_to_compiling(tmp_path, monkeypatch, loads, index):
    shipped_from(tmp_path, monkeypatch, archive_bytes(index, zlib.compress(b"x" * 10)))
    with pytest.raises(ValueError, match="sm_90.cubins"):
        cubins.read_archive(tmp_path / "sm_90.cubins")
    with pytest.warns(CacheWarning, match="sm_90.cubins") as caught:
        assert cubins._load_shipped("a" * 64, (9, 0)) is None
        assert cubins._load_shipped("b" * 64, (9, 0)) is None
    assert len(caught) == 1 and loads == []


@pytest.mark.parametrize("length", [2 ** 64 - 1, 2 ** 40, (1 << 20) + 1])
def test_an_index_length_beyond_the_file_or_the_cap_is_refused(tmp_path, length):
    """The length field of the index beyond the file, or beyond the index's cap (1 MiB) in a
    file that holds that much: refused before parsing."""
    data = archive_bytes({})
    path = tmp_path / "sm_90.cubins"
    path.write_bytes(data[:len(cubins.ARCHIVE_MAGIC)] + struct.pack("<Q", length)
                     + data[len(cubins.ARCHIVE_MAGIC) + 8:] + b" " * 2 ** 21)
    with pytest.raises(ValueError, match="truncated or its index is too large"):
        cubins.read_archive(path)


def test_entries_swapped_consistently_are_refused(tmp_path, monkeypatch, loads):
    """Two entries' names, places and lengths exchanged in the index (each one's cubin now
    under the other's key): neither runs as the other."""
    cubins.write_archive(tmp_path / "whole.cubins", ENTRIES)
    index, blobs = split_archive((tmp_path / "whole.cubins").read_bytes())
    a, b = "a" * 64, "b" * 64
    swapped = {**index, a: index[b][:4] + index[a][4:], b: index[a][:4] + index[b][4:]}
    shipped_from(tmp_path, monkeypatch, archive_bytes(swapped, blobs))
    with pytest.warns(CacheWarning, match="does not match its checksum") as caught:
        assert cubins._load_shipped(a, (9, 0)) is None
        assert cubins._load_shipped(b, (9, 0)) is None
    assert len(caught) == 1
    assert cubins._load_shipped("c" * 64, (9, 0)) == (b"", "_Z1c")  # the intact one is used
    assert loads == [("_Z1c", b"")]


def test_a_zlib_bomb_is_inflated_no_further_than_its_stated_length(tmp_path, monkeypatch,
                                                                   loads):
    """A 64 MB inflation (64 KB compressed) stated as 1,000 bytes: refused after inflating at
    most 1,001 bytes; stated as more than the cap: the index is refused."""
    bomb = zlib.compress(bytes(64 << 20), 9)
    image = bytes(1000)
    index = {"a" * 64: ["_Z1a", 0, len(bomb), 1000, cubins.entry_checksum("a" * 64, "_Z1a",
                                                                           image)]}
    shipped_from(tmp_path, monkeypatch, archive_bytes(index, bomb))
    tracemalloc.start()
    try:
        with pytest.warns(CacheWarning, match="does not inflate to the 1,000 bytes"):
            assert cubins._load_shipped("a" * 64, (9, 0)) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20 and loads == []
    index["a" * 64][3] = 64 << 20
    shipped_from(tmp_path, monkeypatch, archive_bytes(index, bomb))
    with pytest.raises(ValueError, match="too large"):
        cubins.read_archive(tmp_path / "sm_90.cubins")


JSON_VALUES = [None, True, 0, -1, 1.5, 10 ** 20, "", "x" * 70, "f" * 64, [], {}, [[[]]],
               {"a": 1}, ["_Z1a", 0, 1, 1, "0" * 64]]
"""Values the fuzz test puts in an index's places."""


def corrupt(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one random corruption: bits flipped, a span overwritten, removed,
    duplicated or inserted, the file cut short, or a value of the index replaced by another
    JSON value (the index stays JSON, with its length field right)."""
    kind = rng.randrange(7)
    at = rng.randrange(len(data))
    span = rng.randrange(1, 64)
    if kind == 0:
        out = bytearray(data)
        for _ in range(rng.randrange(1, 9)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == 1:
        return data[:at] + rng.randbytes(span) + data[at + span:]
    if kind == 2:
        return data[:at] + data[at + span:]
    if kind == 3:
        return data[:at] + data[at:at + span] + data[at:]
    if kind == 4:
        return data[:at] + rng.randbytes(span) + data[at:]
    if kind == 5:
        return data[:at]
    index, blobs = split_archive(data)
    key = rng.choice(sorted(index))
    if rng.random() < 0.2:
        index[rng.choice(["", "0" * 64, key[::-1], key + "0"])] = index.pop(key)
    else:
        index[key][rng.randrange(5)] = rng.choice(JSON_VALUES + [rng.randrange(-3, 10 ** 4)])
    return archive_bytes(index, blobs)


def test_fuzzed_archives_fall_back_or_are_refused_never_crash_nor_mislead(tmp_path,
                                                                          monkeypatch, loads):
    """3,000 random corruptions of an archive (fixed seed): reading it either refuses it with a
    ValueError or gives an archive in which each entry is either the one written, absent, or
    refused with a ValueError; through the loader, every lookup gives the entry written or
    None, with at most one warning per archive."""
    cubins.write_archive(tmp_path / "whole.cubins", ENTRIES)
    whole = (tmp_path / "whole.cubins").read_bytes()
    rng = random.Random(20261201)
    outcomes = {"refused": 0, "entry refused": 0, "entry intact": 0}
    for trial in range(3000):
        data = corrupt(whole, rng)
        path = tmp_path / "sm_90.cubins"
        path.write_bytes(data)
        try:
            archive = cubins.read_archive(path)
        except ValueError:
            outcomes["refused"] += 1
            continue
        for key in set(archive) | set(ENTRIES):
            try:
                entry = archive.get(key)
            except ValueError:
                outcomes["entry refused"] += 1
                continue
            assert entry is None or entry == ENTRIES[key], (trial, key)
            outcomes["entry intact"] += entry is not None
        if trial % 10 == 0:  # the loader as a product meets it
            shipped_from(tmp_path, monkeypatch, data)
            monkeypatch.setattr(cubins, "_WARNED", set())
            loads.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for key in ENTRIES:
                    found = cubins._load_shipped(key, (9, 0))
                    assert found is None or found == ENTRIES[key][::-1], (trial, key)
            assert len(caught) <= 1 and all(w.category is CacheWarning for w in caught)
    assert all(outcomes.values()), outcomes  # every outcome occurs


PRODUCTS = """
import json, pathlib, sys
import numpy as np, scipy.sparse as sp
import autospmv
from autospmv._support.cache import compile_timer
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
    return {**json.loads(done.stdout.splitlines()[-1]), "stderr": done.stderr}


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


@pytest.mark.requires_gpu
def test_on_the_gpu_damaged_archives_and_cache_entries_are_compiled_instead(tmp_path):
    """The shipped archives with every cubin damaged: a first process compiles every kernel,
    warns once, and gets SciPy's products; with the cache entries it stored damaged too, a
    second process warns once per source and compiles again, loading nothing damaged."""
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for source in cubins.SHIPPED.glob("sm_*.cubins"):
        index, blobs = split_archive(source.read_bytes())
        (shipped / source.name).write_bytes(archive_bytes(index, bytes(b ^ 0x5A for b in blobs)))
    first = run_products(tmp_path, shipped)
    check_products(first)
    assert first["loaded"] == 0 and first["stderr"].count("CacheWarning") == 1, first["stderr"]
    stored = sorted((tmp_path / "cubins").glob("*.cubin"))
    assert stored
    for entry in stored:
        image = bytearray(entry.read_bytes())
        image[len(image) // 2] ^= 0xFF
        entry.write_bytes(bytes(image))
    second = run_products(tmp_path, shipped)
    check_products(second)
    assert second["loaded"] == 0 and second["stderr"].count("CacheWarning") == 2, \
        second["stderr"]


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
