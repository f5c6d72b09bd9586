"""The GPU multi-vector product's kernels compile to PTX for compute capability 9.0, without a
GPU, for every dtype pair and index width, with and without the launch of long-row pieces."""

from __future__ import annotations

import re

import numpy as np
import pytest

cuda = pytest.importorskip("numba.cuda")
if cuda.config.ENABLE_CUDASIM:
    pytest.skip("PTX compilation needs the real numba-cuda, not its simulator",
                allow_module_level=True)

from autospmv.kernels.cuda import spmm, spmm_programs  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from matrices import FAMILY, compiled_ptx  # noqa: E402

DTYPE_PAIRS = [(np.float32, np.float32), (np.float64, np.float64), (np.float32, np.float64)]
"""(matrix values, vectors): a float32 matrix in a float64 product too."""


def host_launches(name: str, values, vectors, k: int, index=np.int32, program="many_columns",
                  tile=0):
    """The launches for a FAMILY matrix, host arrays standing in for device arrays."""
    A = canonicalize(FAMILY[name]().astype(values))
    arrays = {"indptr": A.indptr.astype(index), "indices": A.indices.astype(index),
              "data": A.data}
    pieces = spmm_programs.long_row_pieces(arrays["indptr"])
    steps = spmm_programs.launches(A.shape, arrays, pieces, 4, k, vectors, vectors, program, tile)
    return A, pieces, steps


KERNELS = [(3, "many_columns", "spmm_few_columns_kernel"),
           (6, "eight_columns", "spmm_eight_columns_kernel"),
           *[(40, name, program.kernel.py_func.__name__)
             for name, program in spmm_programs.ONE_PASS.items()]]
"""(k, program, the kernel it runs): k ≤ FEW_COLUMNS runs the few-columns kernel whatever the
program."""


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("k, program, kernel", KERNELS, ids=[f"k{k}-{p}" for k, p, _ in KERNELS])
@pytest.mark.parametrize("values, vectors", DTYPE_PAIRS,
                         ids=[f"{np.dtype(a)}-{np.dtype(b)}" for a, b in DTYPE_PAIRS])
def test_kernels_compile_to_ptx(values, vectors, k, program, kernel, index):
    A, pieces, launches = host_launches("huge_row_among_short_300x3000", values, vectors, k,
                                        index, program)
    assert pieces[0].size, "the matrix has a row longer than a piece"
    assert len(launches) == 2, "a row launch and a piece launch"
    for (launch, first), items in zip(launches, (A.shape[0], pieces[0].size)):
        assert first == 0
        assert launch.block == spmm.BLOCK and launch.grid * launch.block >= items
        ptx = compiled_ptx(launch)
        entries = [line for line in ptx.splitlines() if ".entry" in line]
        assert len(entries) == 1 and kernel in entries[0]
        assert re.search(r"\batom\.global\.add\.f(32|64)\b", ptx), "pieces are added atomically"
        if np.dtype(vectors) == np.float32:
            float64_ops = sorted(set(re.findall(r"^\s*[a-z][\w.]*\.f64\b", ptx, re.MULTILINE)))
            assert not float64_ops, f"a float32 product computes in float64: {float64_ops}"


@pytest.mark.parametrize("k, firsts", [(5, [0, 4]), (8, [0, 4]), (13, [0, 4, 8, 12])])
def test_passes_run_the_few_columns_kernel_on_windows_of_four(k, firsts):
    A, pieces, launches = host_launches("huge_row_among_short_300x3000", np.float32,
                                        np.float64, k, program="passes")
    assert len(launches) == 2 * len(firsts), "a row launch and a piece launch per pass"
    assert [step.first for step in launches] == sorted(firsts * 2)
    widths = [min(spmm_programs.FEW_COLUMNS, k - first) for first in sorted(firsts * 2)]
    assert [int(step.launch.args[6]) for step in launches] == widths
    assert all(int(step.launch.args[5]) == k for step in launches), "rows k apart"
    assert [int(step.launch.args[-1]) for step in launches] == [0, 1] * len(firsts)
    ptx = compiled_ptx(launches[-1].launch)
    assert "spmm_few_columns_kernel" in next(l for l in ptx.splitlines() if ".entry" in l)


def test_a_matrix_without_long_rows_has_one_launch():
    _, pieces, launches = host_launches("poisson2d_169", np.float64, np.float64, 16)
    assert pieces[0].size == 0 and len(launches) == 1
    launch = launches[0].launch
    lanes = spmm_programs.lanes_per_row(16, spmm_programs.COLUMNS_PER_LANE)
    assert launch.grid * launch.block >= 169 * lanes


@pytest.mark.parametrize("k, lanes", [(5, 2), (8, 2), (9, 4), (16, 4), (17, 8), (64, 16),
                                      (65, 32), (128, 32), (200, 32)])
def test_many_columns_groups_cover_the_columns(k, lanes):
    _, _, launches = host_launches("poisson2d_169", np.float64, np.float64, k)
    log_group = launches[0].launch.args[7]
    assert 1 << int(log_group) == lanes


@pytest.mark.parametrize("program", spmm_programs.ONE_PASS)
@pytest.mark.parametrize("k", [5, 8, 9, 16, 17, 64, 65, 200])
def test_one_pass_groups_give_a_lane_its_columns(program, k):
    """The lanes per row: the smallest power of two from 2 to 32 whose lanes cover k columns
    at the program's columns a lane, or 32 (then the lanes cover the columns in passes)."""
    per_lane = spmm_programs.ONE_PASS[program].columns_per_lane
    _, _, launches = host_launches("poisson2d_169", np.float64, np.float64, k, program=program)
    lanes = 1 << int(launches[0].launch.args[7])
    assert 2 <= lanes <= 32 and launches[0].launch.grid * launches[0].launch.block >= 169 * lanes
    assert lanes == 32 or (lanes * per_lane >= k and (lanes == 2 or lanes * per_lane < 2 * k))


@pytest.mark.parametrize("program", spmm_programs.TILED)
@pytest.mark.parametrize("k, tile, widths", [(128, 64, [64, 64]), (100, 32, [32, 32, 32, 4]),
                                             (40, 64, [40])])
def test_tiles_run_the_program_on_windows_of_columns(program, k, tile, widths):
    """A tiled program: a row launch and a piece launch per tile, each handed X and Y from the
    tile's first column, rows k apart, the tile's columns, and lanes for a tile's columns."""
    _, pieces, launches = host_launches("huge_row_among_short_300x3000", np.float32,
                                        np.float32, k, program=program, tile=tile)
    firsts = [first for first in range(0, k, min(tile, k)) for _ in (0, 1)]
    assert [step.first for step in launches] == firsts
    assert all(int(step.launch.args[5]) == k for step in launches), "rows k apart"
    assert [int(step.launch.args[6]) for step in launches] == [w for w in widths for _ in (0, 1)]
    per_lane = spmm_programs.ONE_PASS[program].columns_per_lane
    lanes = spmm_programs.lanes_per_row(min(tile, k), per_lane)
    assert all(1 << int(step.launch.args[7]) == lanes for step in launches)
    assert [int(step.launch.args[-1]) for step in launches] == [0, 1] * len(widths)


MiB = 1 << 20


@pytest.mark.parametrize("k, n, itemsize, width", [
    (128, 175_000, 4, 64),    # X of 90 MB: tiles of 45 MB
    (64, 175_000, 4, 0),      # 45 MB fits the cache
    (64, 175_000, 8, 32),
    (100, 200_000, 4, 64),    # 64 columns of 200,000 rows: 51 MB of the 52 MB
    (128, 250_000, 4, 32),
    (128, 1_000, 4, 64),      # X fits, but more columns than the widest tile
    (256, 1_000, 8, 64),
    (64, 4_000_000, 8, 0)])   # a tile of 16 columns (512 MB) does not fit: no tiles
def test_tile_width_fits_the_cache(k, n, itemsize, width):
    cache = 50 * MiB
    assert spmm_programs.tile_width(k, n, itemsize, cache) == width
    if width:
        assert n * width * itemsize <= cache
        assert cache < n * 2 * width * itemsize or width == spmm_programs.MAX_TILE


def test_programs_add_the_tiled_programs_only_where_x_outgrows_the_cache():
    untiled = spmm_programs.programs_for(128)
    assert untiled == [(name, 0) for name in spmm_programs.ONE_PASS]
    tiled = spmm_programs.programs_for(128, 175_000, 4, 50 * MiB)
    assert tiled[:len(untiled)] == untiled
    assert tiled[len(untiled):] == [(name, 64) for name in spmm_programs.TILED]
    assert spmm_programs.programs_for(64, 1_000, 4, 50 * MiB) == untiled
    assert spmm_programs.programs_for(65, 1_000, 4, 50 * MiB)[len(untiled):] == [
        (name, 64) for name in spmm_programs.TILED]
    assert [name for name, _ in spmm_programs.programs_for(8)] == list(spmm_programs.PROGRAMS)


def test_the_timed_choice_note_names_the_tiles():
    key = (128, np.dtype(np.float32), np.dtype(np.float32))
    times = {("column_pairs", 0): 30.0, ("column_pairs", 64): 25.0}
    note = spmm_programs.timed_choice_note(key, times)
    assert ("run the column-pairs kernel in tiles of 64 columns (25 µs; the column-pairs "
            "kernel 30 µs)") in note


def test_a_tile_is_for_one_pass_programs():
    with pytest.raises(ValueError, match="tiles of columns are for the one-pass programs"):
        host_launches("poisson2d_169", np.float64, np.float64, 8, program="passes", tile=4)


def test_an_unknown_program_is_refused():
    with pytest.raises(ValueError, match="program must be one of"):
        host_launches("poisson2d_169", np.float64, np.float64, 16, program="pairs")
    with pytest.raises(ValueError, match="takes at most 8 columns; got 9"):
        host_launches("poisson2d_169", np.float64, np.float64, 9, program="eight_columns")


@pytest.mark.parametrize("k", [5, 8])
def test_the_eight_columns_kernel_runs_one_pass_of_k_sums(k):
    _, pieces, launches = host_launches("huge_row_among_short_300x3000", np.float32,
                                        np.float64, k, program="eight_columns")
    assert [step.first for step in launches] == [0, 0], "a row launch and a piece launch"
    assert [int(step.launch.args[6]) for step in launches] == [k, k]
    assert [int(step.launch.args[-1]) for step in launches] == [0, 1]


def test_kernels_carry_their_launch_bound():
    """Six blocks per SM hold the kernels to 40 registers (see spmm.BLOCKS_PER_SM); the
    column pairs of eight nonzeros a step get three (spmm.WIDE_STEP_BLOCKS_PER_SM)."""
    for k, program, _ in KERNELS:
        _, _, launches = host_launches("poisson2d_169", np.float32, np.float32, k,
                                       program=program)
        ptx = compiled_ptx(launches[0].launch)
        blocks = (spmm.WIDE_STEP_BLOCKS_PER_SM if program == "column_pairs_wide_step" and k > 4
                  else spmm.BLOCKS_PER_SM)
        assert re.search(rf"\.maxntid\s+{spmm.BLOCK}\b", ptx)
        assert re.search(rf"\.minnctapersm\s+{blocks}\b", ptx)
