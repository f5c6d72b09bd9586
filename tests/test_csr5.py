"""CSR5: the format (round trip, descriptors), the kernel against SciPy on each device.

Descriptors are checked twice: exactly on a small example worked out by hand, and against a
deliberately naive builder (one Python step per nonzero, straight from the definitions in
``autospmv/formats/csr5.py``) on every matrix of the family and of ``matrices.CSR5_CORNERS``.
One test body runs the kernel on the CPU and, on a real GPU (the ``device`` fixture), on CUDA;
the CUDA kernel is also compiled to PTX everywhere (no GPU needed). Simulator runs belong to the
simulator harness, not to this file.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv._decide.choosers import LONG_ROWS, SHORT_ROWS, structural_sigma
from autospmv.formats.csr5 import OMEGA, PLACEHOLDER, CSR5Format
from autospmv.kernels.cpu import csr5 as cpu_csr5
from autospmv._support.validation import canonicalize
from matrices import (
    CSR5_CORNERS, DTYPE_IDS, DTYPES, FAMILY, TOLERANCE, from_row_lengths, reference,
    relative_error,
)

SIGMAS = [2, 4, 7, 16, 32]

MATRICES = {**FAMILY, **CSR5_CORNERS}


def canonical(name: str, dtype=np.float64) -> sp.csr_matrix:
    return canonicalize(MATRICES[name]().astype(dtype))


def naive_descriptors(csr: sp.csr_matrix, sigma: int) -> dict:
    """The descriptors built one entry at a time, straight from their definitions: every empty
    row of a matrix with nonzeros holds one placeholder entry."""
    m = csr.shape[0]
    size = OMEGA * sigma
    lengths = np.diff(csr.indptr)
    padded = np.maximum(lengths, 1) if csr.nnz else lengths
    total = int(padded.sum())
    row_of = np.repeat(np.arange(m), padded)
    starts = np.concatenate([[0], np.cumsum(padded)])[:m]
    row_start = set(starts.tolist())
    placeholder_at = set(starts[padded > lengths].tolist())
    out = {key: [] for key in ("tile_ptr", "bit_flag", "y_offset")}
    for first in range(0, total, size):
        last = min(total, first + size) - 1
        row0 = int(row_of[first])
        bits = [0] * OMEGA
        segment_rows = []
        for position in range(first, last + 1):
            local = position - first
            if local == 0 or position in row_start:
                bits[local // sigma] |= 1 << (local % sigma)
                segment_rows.append(int(row_of[position]))
        assert segment_rows == list(range(row0, row0 + len(segment_rows)))
        counts = [bin(b).count("1") for b in bits]
        for lane in range(OMEGA):
            out["bit_flag"].append(bits[lane])
            out["y_offset"].append(sum(counts[:lane]))
        holds = any(first <= p <= last for p in placeholder_at)
        out["tile_ptr"].append(~row0 if holds else row0)
    out["tile_ptr"].append(m)
    out["has_empty_rows"] = bool(np.any(lengths == 0))
    return out


# --- the format -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MATRICES))
def test_round_trip_is_exact(name):
    csr = canonical(name)
    for sigma in SIGMAS:
        fmt = CSR5Format.from_csr(csr, sigma)
        back = fmt.to_csr()
        assert back.shape == csr.shape
        assert np.array_equal(back.indptr, csr.indptr)
        assert np.array_equal(back.indices, csr.indices)
        assert np.array_equal(back.data, csr.data)
        assert fmt.indices.dtype == csr.indices.dtype and fmt.tile_ptr.dtype == csr.indptr.dtype
        assert fmt.dtype == csr.dtype
        empty = int(np.count_nonzero(np.diff(csr.indptr) == 0)) if csr.nnz else 0
        assert fmt.ntiles == -(-(csr.nnz + empty) // (OMEGA * sigma))
        assert fmt.data.shape[0] == csr.nnz + empty
        placeholders = fmt.indices == PLACEHOLDER
        assert np.count_nonzero(placeholders) == empty and not fmt.data[placeholders].any()


@pytest.mark.parametrize("name", sorted(n for n in MATRICES if MATRICES[n]().nnz <= 20_000))
def test_descriptors_match_their_definitions(name):
    csr = canonical(name)
    for sigma in SIGMAS:
        fmt = CSR5Format.from_csr(csr, sigma)
        expected = naive_descriptors(csr, sigma)
        for key, values in expected.items():
            if isinstance(values, bool):
                assert getattr(fmt, key) is values, key
            else:
                assert np.array_equal(getattr(fmt, key), np.asarray(values, dtype=np.int64)), key
        assert fmt.bit_flag.dtype == np.uint32
        assert fmt.y_offset.dtype == np.int32


def test_descriptors_of_a_hand_checked_example():
    # σ = 2 (64 entries per tile); rows of 3, 0, 70, 0, 0, 1, 2 entries: 76 nonzeros and three
    # placeholders (rows 1, 3, 4), 79 entries.
    # Tile 0 (entries 0..63): row 0 at 0..2, row 1's placeholder at 3, row 2 from 4 on.
    # Tile 1 (64..78, incomplete, CSR order): row 2 continues to 73, the placeholders of rows 3
    # and 4 at 74 and 75, row 5 at 76, row 6 at 77..78. Both tiles hold placeholders.
    csr = canonicalize(from_row_lengths([3, 0, 70, 0, 0, 1, 2], 80, seed=3))
    fmt = CSR5Format.from_csr(csr, 2)
    assert fmt.tile_ptr.tolist() == [~0, ~2, 7]
    tile0, tile1 = fmt.bit_flag[:OMEGA], fmt.bit_flag[OMEGA:]
    assert tile0[:3].tolist() == [0b01, 0b10, 0b01] and not tile0[3:].any()  # entries 0, 3, 4
    assert tile1[[0, 5, 6]].tolist() == [0b01, 0b11, 0b11]  # local 0, 10, 11, 12, 13
    assert np.count_nonzero(tile1) == 3
    assert fmt.y_offset[:OMEGA].tolist() == [0, 1, 2] + [3] * 29
    assert fmt.y_offset[OMEGA:].tolist() == [0, 1, 1, 1, 1, 1, 3] + [5] * 25
    assert fmt.has_empty_rows
    # Tile 0 is transposed (entry 2l + j at j·32 + l); tile 1 stays in CSR order.
    assert fmt.data[0] == csr.data[0] and fmt.data[1] == csr.data[2]
    assert fmt.data[OMEGA] == csr.data[1] and fmt.data[2 * OMEGA - 1] == csr.data[62]
    assert fmt.indices[OMEGA + 1] == PLACEHOLDER and fmt.data[OMEGA + 1] == 0  # entry 3
    assert np.array_equal(fmt.data[64:74], csr.data[63:73])
    assert fmt.indices[74:76].tolist() == [PLACEHOLDER] * 2 and not fmt.data[74:76].any()
    assert np.array_equal(fmt.indices[76:], csr.indices[73:])


def test_placeholder_rows_widen_a_row_pointer_they_would_overflow():
    """Placeholders add entries: where nnz plus the empty rows passes int32, the padded row
    pointer is int64 (only the pointer is built here, no nonzeros)."""
    from autospmv.formats.csr5 import placeholder_rows

    top = np.iinfo(np.int32).max
    padded, positions = placeholder_rows(np.array([0, top - 1, top - 1, top - 1], np.int32))
    assert padded.dtype == np.int64 and padded.tolist() == [0, top - 1, top, top + 1]
    assert positions.tolist() == [top - 1, top]
    padded, positions = placeholder_rows(np.array([0, 5, 5, 7], np.int32))
    assert padded.dtype == np.int32 and padded.tolist() == [0, 5, 6, 8]
    assert positions.tolist() == [5]
    same = np.array([0, 2, 4], np.int32)
    padded, positions = placeholder_rows(same)
    assert padded is same and positions.size == 0


def test_empty_matrices_have_no_tiles():
    for shape in [(0, 0), (3, 0), (0, 4), (6, 5)]:
        fmt = CSR5Format.from_csr(canonicalize(sp.csr_matrix(shape)), 4)
        assert fmt.ntiles == 0
        assert fmt.tile_ptr.tolist() == [shape[0]]
        assert fmt.to_csr().shape == shape


@pytest.mark.parametrize("sigma", [1, 33, 4.0, True, "8", None])
def test_invalid_sigma_is_refused(sigma):
    with pytest.raises(ValueError, match=r"sigma must be an integer in \[2, 32\]"):
        CSR5Format.from_csr(canonical("rect_37x61"), sigma)


def test_structural_sigma_follows_the_mean_row_length():
    def with_mean(mean_length: int) -> sp.csr_matrix:
        return from_row_lengths(np.full(64, mean_length), 200, seed=5)

    assert structural_sigma(canonicalize(sp.csr_matrix((0, 0)))) == 12
    assert structural_sigma(canonicalize(sp.csr_matrix((5, 5)))) == 12
    assert [structural_sigma(with_mean(k)) for k in (1, 7, SHORT_ROWS, 9, 17, 100)] == [
        12, 12, 16, 16, 16, 16]
    long_rows = from_row_lengths(np.full(4, LONG_ROWS), 2 * LONG_ROWS, seed=5)
    assert structural_sigma(canonicalize(long_rows)) == 8
    assert autospmv.select(with_mean(5), kernel="csr5", device="cpu").params == {"sigma": 24}


# --- the kernel, on each device ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MATRICES))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_kernel_matches_scipy(name, dtype, device, rng):
    A = MATRICES[name]().astype(dtype)
    x = rng.uniform(-1, 1, A.shape[1]).astype(dtype)
    y_ref = reference(A, x)
    for sigma in SIGMAS:
        op = autospmv.prepare(A, kernel="csr5", device=device, params={"sigma": sigma})
        for _ in range(2):  # the second call must not accumulate onto the first
            y = op @ x
            assert y.dtype == np.dtype(dtype)
            error = relative_error(y, y_ref)
            assert error <= TOLERANCE[np.dtype(dtype)], f"sigma={sigma}: relative error {error:.3g}"


def test_cpu_kernel_with_int64_indices(rng):
    csr = canonical("long_rows_mid_tile_and_gaps")
    csr.indptr = csr.indptr.astype(np.int64)
    csr.indices = csr.indices.astype(np.int64)
    x = rng.uniform(-1, 1, csr.shape[1])
    for sigma in (2, 32):
        fmt = CSR5Format.from_csr(csr, sigma)
        assert fmt.tile_ptr.dtype == fmt.indices.dtype == np.int64
        y = np.full(csr.shape[0], np.nan)
        cpu_csr5.bind(fmt, {"sigma": sigma})(x, y)
        assert relative_error(y, reference(csr, x)) <= 1e-12


def test_cpu_parallel_and_serial_agree_bitwise(rng):
    """Rows crossing tiles are combined in a fixed order, whatever the threading."""
    csr = canonical("parallel_long_rows_24x40000")
    fmt = CSR5Format.from_csr(csr, 4)
    x = rng.uniform(-1, 1, csr.shape[1])
    tiles_per_task = max(1, 16384 // fmt.tile_size)
    results = []
    for kernel in (cpu_csr5._csr5_serial, cpu_csr5._csr5_parallel, cpu_csr5._csr5_parallel):
        y = np.empty(csr.shape[0])
        kernel(fmt.tile_ptr, fmt.bit_flag, fmt.y_offset, fmt.indices, fmt.data, x, y, fmt.sigma,
               tiles_per_task)
        results.append(y)
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[1], results[2])
    assert relative_error(results[0], reference(csr, x)) <= 1e-12


# --- the CUDA kernel (compiled, not run) ------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("dtype, itype", [(np.float32, np.int32), (np.float64, np.int32),
                                          (np.float64, np.int64)],
                         ids=["float32", "float64", "float64-int64"])
def test_cuda_program_compiles_to_ptx(dtype, itype):
    cuda_csr5 = pytest.importorskip("autospmv.kernels.cuda.csr5")
    from autospmv.kernels.cuda.launch import Launch, ZeroY

    csr = canonical("long_rows_mid_tile_and_gaps", dtype)
    csr.indptr = csr.indptr.astype(itype)
    csr.indices = csr.indices.astype(itype)
    fmt = CSR5Format.from_csr(csr, 7)
    program = cuda_csr5.build(fmt, {"sigma": 7}, fmt.arrays())
    zero, launch = program.steps
    assert isinstance(zero, ZeroY) and isinstance(launch, Launch)
    assert launch.grid * launch.block >= fmt.ntiles * OMEGA and launch.block % OMEGA == 0
    for step in program.steps:
        step.ptx((9, 0))
    ptx = launch.ptx((9, 0))
    suffix = "f32" if dtype == np.float32 else "f64"
    assert "shfl.sync.down" in ptx
    assert f"atom.global.add.{suffix}" in ptx  # a native atomic, not a compare-and-swap loop


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_cuda_kernel_overlaps_the_clearing_of_tile_ends(dtype):
    """Where only the tile ends of y are cleared, the kernel is launched to overlap that
    clearing: the clearing releases it at once, and the kernel waits for the clearing before
    its atomics. Where all of y is cleared (a memset), it is launched after it."""
    cuda_csr5 = pytest.importorskip("autospmv.kernels.cuda.csr5")
    from autospmv.kernels.cuda.launch import Launch, ZeroY

    short_rows = canonicalize(sp.diags([1.0, 2.0, 3.0], [-1, 0, 1], shape=(4096, 4096),
                                       format="csr", dtype=dtype))
    fmt = CSR5Format.from_csr(short_rows, 16)
    assert cuda_csr5.clears_tile_ends(fmt)
    clear, kernel = cuda_csr5.build(fmt, {"sigma": 16}, fmt.arrays()).steps
    assert clear.dispatcher is cuda_csr5.csr5_clear_tile_ends and not clear.overlaps_previous
    assert kernel.dispatcher is cuda_csr5.csr5_kernel and kernel.overlaps_previous
    assert "griddepcontrol.launch_dependents;" in clear.ptx((9, 0))
    assert "griddepcontrol.wait;" in kernel.ptx((9, 0))
    # Older GPUs have no such instructions: there the kernels do without them.
    assert "griddepcontrol" not in clear.ptx((8, 0)) + kernel.ptx((8, 0))

    long_rows = canonical("long_rows_mid_tile_and_gaps", dtype)
    fmt = CSR5Format.from_csr(long_rows, 7)
    zero, kernel = cuda_csr5.build(fmt, {"sigma": 7}, fmt.arrays()).steps
    assert isinstance(zero, ZeroY) and isinstance(kernel, Launch)
    assert not kernel.overlaps_previous


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_cuda_kernel_reads_the_matrix_with_the_evict_first_hint(dtype):
    """Values and their columns are read with L1::evict_first (x stays in the L1 cache): in
    float32 in every path that reads the matrix, in float64 in the path of tiles inside one row
    only (the lanes' passes read float64 plainly)."""
    cuda_csr5 = pytest.importorskip("autospmv.kernels.cuda.csr5")
    fmt = CSR5Format.from_csr(canonical("long_rows_mid_tile_and_gaps", dtype), 16)
    kernel = cuda_csr5.build(fmt, {"sigma": 16}, fmt.arrays()).steps[-1]
    ptx = kernel.ptx((9, 0))
    hinted_words = ptx.count("ld.global.L1::evict_first.b32")
    hinted_doubles = ptx.count("ld.global.L1::evict_first.b64")
    # Entries read: the one-row path's 8 + 1 (at least; its last loop may be unrolled), and the
    # lane passes' 8 + 8 for tiles with and without placeholders, whole or clamped.
    if dtype == np.float32:
        assert hinted_words >= 2 * (9 + 8 + 8)  # a value and a column per entry
        assert hinted_doubles == 0
    else:
        assert hinted_doubles == hinted_words  # a value and its column, as pairs
        assert 9 <= hinted_doubles < 9 + 8 + 8


def test_cuda_kernel_finds_the_next_flagged_lane_with_a_ballot():
    """The distance from a lane to the next lane with a flag comes from one ballot per tile, so
    the format stores two descriptor words per lane (``bit_flag``, ``y_offset``)."""
    cuda_csr5 = pytest.importorskip("autospmv.kernels.cuda.csr5")
    fmt = CSR5Format.from_csr(canonical("long_rows_mid_tile_and_gaps", np.float32), 16)
    assert set(fmt.arrays()) == {"tile_ptr", "bit_flag", "y_offset", "indices", "data"}
    ptx = cuda_csr5.build(fmt, {"sigma": 16}, fmt.arrays()).steps[-1].ptx((9, 0))
    assert ptx.count("vote.sync.ballot.b32") == 1


def test_cuda_program_steps_for_empty_matrices():
    cuda_csr5 = pytest.importorskip("autospmv.kernels.cuda.csr5")
    from autospmv.kernels.cuda.launch import ZeroY

    for shape, expected in [((0, 0), []), ((0, 4), []), ((3, 0), [ZeroY]), ((5, 6), [ZeroY])]:
        fmt = CSR5Format.from_csr(canonicalize(sp.csr_matrix(shape)), 4)
        program = cuda_csr5.build(fmt, {"sigma": 4}, fmt.arrays())
        assert [type(step) for step in program.steps] == expected


# --- the CUDA kernel on a real GPU --------------------------------------------------------------

@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_cuda_kernel_on_a_large_power_law_matrix(dtype, rng):
    """Millions of nonzeros: many blocks of tiles, rows crossing many tiles, dirty tiles."""
    m = 400_000
    lengths = np.minimum(np.floor(rng.pareto(1.1, m) * 3).astype(np.int64), m)
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    columns = rng.integers(0, m, indptr[-1])
    A = sp.csr_matrix((rng.uniform(0.5, 1.5, indptr[-1]), columns, indptr), shape=(m, m))
    A = canonicalize(A).astype(dtype)  # sorts and sums repeated columns
    x = rng.uniform(-1, 1, A.shape[1]).astype(dtype)
    y_ref = reference(A, x)
    for sigma in (4, structural_sigma(canonicalize(A)), 32):
        op = autospmv.prepare(A, kernel="csr5", device="cuda", params={"sigma": sigma})
        error = relative_error(op @ x, y_ref)
        assert error <= TOLERANCE[np.dtype(dtype)], f"sigma={sigma}: relative error {error:.3g}"


@pytest.mark.parametrize("matrix, dtype, sigma, steps", [
    # Rows of 2: a tile holds 16σ rows, so y has 16σ·v bytes per 64 bytes cleared: σ (float32)
    # or 2σ (float64) times as many.
    (np.full(4096, 2), np.float64, 8, ["csr5_clear_tile_ends", "csr5_kernel"]),
    (np.full(4096, 2), np.float32, 8, ["csr5_clear_tile_ends", "csr5_kernel"]),
    (np.full(4096, 2), np.float32, 2, ["ZeroY", "csr5_kernel"]),  # 2 < CLEAR_ENDS_FROM
    # An empty row: its placeholder gives it a segment, so the ends are enough there too.
    (np.r_[np.full(4095, 2), 0], np.float64, 8, ["csr5_clear_tile_ends", "csr5_kernel"]),
    (np.full(64, 32), np.float64, 4, ["ZeroY", "csr5_kernel"]),  # rows of 32: few per tile
])
def test_cuda_program_clears_tile_ends_only_where_y_is_large(matrix, dtype, sigma, steps):
    """Built without a GPU (nothing is compiled): y is cleared in full when y is small next to
    the tiles; otherwise a kernel clears only the rows at the tiles' ends."""
    pytest.importorskip("numba.cuda")
    from autospmv.kernels.cuda import csr5 as cuda_csr5

    fmt = CSR5Format.from_csr(canonicalize(from_row_lengths(matrix, 64, 50).astype(dtype)), sigma)
    assert fmt.has_empty_rows == (0 in matrix)
    program = cuda_csr5.build(fmt, {"sigma": sigma}, fmt.arrays())
    names = [step.dispatcher.py_func.__name__ if hasattr(step, "dispatcher")
             else type(step).__name__ for step in program.steps]
    assert names == steps
    from numba import cuda

    if not cuda.config.ENABLE_CUDASIM:  # the clearing kernel compiles, in the matrix's dtype
        for step in program.steps[:1]:
            if hasattr(step, "dispatcher"):
                assert ".entry" in step.ptx((9, 0)) and str(step.argtypes[-1].dtype) == fmt.dtype.name


@pytest.mark.parametrize("name", sorted(n for n in MATRICES
                                         if MATRICES[n]().nnz and not np.any(
                                             np.diff(canonical(n).indptr) == 0)))
def test_array_descriptors_equal_the_compiled_ones_without_empty_rows(name):
    """The descriptors the GPU computes with array operations (NumPy standing in for CuPy) are
    those of the host's compiled passes, values and dtypes, for int32 and int64 row pointers."""
    from autospmv.formats.csr5 import csr5_descriptors, descriptors_without_empty_rows

    for itype in (np.int32, np.int64):
        indptr = canonical(name).indptr.astype(itype)
        for sigma in SIGMAS:
            expected = csr5_descriptors(indptr, sigma)
            got = descriptors_without_empty_rows(indptr, sigma, np)
            assert got.keys() == expected.keys()
            for key, value in expected.items():
                if isinstance(value, np.ndarray):
                    assert got[key].dtype == value.dtype, key
                    np.testing.assert_array_equal(got[key], value, err_msg=key)
                else:
                    assert got[key] == value, key
