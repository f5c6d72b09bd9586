"""Multi-vector products (``op @ X`` for a 2-D X, SpMM) against SciPy in float64.

Host X runs on the CPU and, through the ``device`` fixture, on a real GPU; CuPy, PyTorch and
numba device X need a real GPU (the simulator runs the GPU kernels in
``test_spmm_simulator.py``). Covered: every matrix of the family on the CSR arrays the product
runs on, every kernel's operator (whose CSR arrays are its format's or derived from what it
keeps), column counts of both GPU kernels, the result's dtype and layout, X of any layout, NaN
and ±Inf, the memory the operator keeps for the product, its note in ``explain()``, the
transpose's product (``rmatmat``), threads sharing an operator, and a block solver.
"""

from __future__ import annotations

import concurrent.futures
import warnings

import numpy as np
import pytest
from scipy.sparse.linalg import lobpcg

import autospmv
from matrices import (
    DTYPE_IDS, DTYPES, FAMILY, assert_close, matrix, one_long_row, poisson2d, power_law,
    prepare_or_refuse, random_matrix, reference,
)

COLUMNS = (0, 2, 4, 5, 16, 33, 130)
"""No columns; the GPU's few-columns kernel (k ≤ 4) and its many-columns kernel with groups of
2, 4, 16 and 32 lanes (some lanes' last columns idle at 5 and 33, a second pass at 130)."""

NOTE = "multi-vector products (A @ X"


def block(rng, n: int, k: int, dtype=np.float64) -> np.ndarray:
    return rng.random((n, k)).astype(dtype)


@pytest.mark.parametrize("k", COLUMNS)
@pytest.mark.parametrize("name", sorted(FAMILY))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_product_matches_scipy_on_every_matrix(device, dtype, name, k, rng):
    """On csr_scalar, whose format holds the CSR arrays the product runs on."""
    A = matrix(name, dtype)
    op = prepare_or_refuse(A, "csr_scalar", device)
    X = block(rng, A.shape[1], k, dtype)
    Y = op @ X
    assert isinstance(Y, np.ndarray) and Y.shape == (A.shape[0], k) and Y.dtype == dtype
    assert Y.flags.c_contiguous
    assert_close(Y, reference(A, X), dtype)


@pytest.mark.parametrize("name", ["huge_row_among_short_300x3000", "half_rows_empty_200x150",
                                  "duplicates_coo_60x50", "rect_37x61"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_every_kernels_operator_multiplies_blocks(device, kernel, dtype, name, rng):
    A = matrix(name, dtype)
    op = prepare_or_refuse(A, kernel, device)
    if op is None:
        return
    for k in (3, 7):
        X = block(rng, A.shape[1], k, dtype)
        for Y in (op @ X, op.matmat(X), op.dot(X)):
            assert Y.shape == (A.shape[0], k) and Y.dtype == dtype
            assert_close(Y, reference(A, X), dtype)


@pytest.mark.parametrize("x_dtype", [np.float32, np.float64, np.int64, np.int8, np.bool_])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_result_has_scipys_dtype_and_accuracy(device, dtype, x_dtype, rng):
    """numpy.result_type(A, X), as SciPy gives it, accumulated in that dtype: a float32 matrix
    with float64 X is exact to float64 rounding of the float32 values."""
    A = matrix("power_law_500", dtype)
    op = autospmv.prepare(A, kernel="csr_scalar", device=device)
    X = (rng.random((A.shape[1], 6)) * 3).astype(x_dtype)
    Y = op @ X
    assert Y.dtype == np.result_type(dtype, x_dtype) == (A @ X).dtype
    assert_close(Y, reference(A, X), Y.dtype)


def test_complex_X_is_refused_with_the_reason():
    op = autospmv.prepare(random_matrix(6, 4, 0.5, 1), device="cpu")
    with pytest.raises(TypeError, match="complex"):
        op @ np.ones((4, 3), dtype=np.complex128)


def test_X_of_any_layout(device, rng):
    A = matrix("rect_61x37", np.float64)
    op = autospmv.prepare(A, kernel="csr_vector", device=device)
    wide = block(rng, 2 * A.shape[1], 10)
    for X in (np.asfortranarray(wide[:A.shape[1]]), wide[::2, ::3], wide[1::2].T.copy().T):
        assert_close(op @ X, reference(A, X), np.float64)


def test_nan_and_inf_follow_scipy(device, rng):
    A = matrix("power_law_500", np.float64)
    op = autospmv.prepare(A, kernel="csr_scalar", device=device)
    X = block(rng, A.shape[1], 6)
    X[3, 0], X[70, 2], X[-1, 5] = np.nan, np.inf, -np.inf
    with warnings.catch_warnings():  # inf - inf = nan
        warnings.simplefilter("ignore", RuntimeWarning)
        Y, Y_ref = op @ X, reference(A, X)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(Y), test(Y_ref))
    finite = np.isfinite(Y_ref)
    assert_close(Y[finite], Y_ref[finite], np.float64)


def test_one_column_runs_the_operators_own_kernel(rng):
    A = matrix("power_law_500", np.float64)
    op = autospmv.prepare(A, kernel="csr_vector", device="cpu")
    X = block(rng, A.shape[1], 1)
    Y = op.matmat(X)
    assert Y.shape == (A.shape[0], 1)
    np.testing.assert_array_equal(Y[:, 0], op @ X[:, 0])
    assert NOTE not in op.explain()


def csr_bytes(A) -> int:
    return A.data.nbytes + A.indices.nbytes + A.indptr.nbytes


@pytest.mark.parametrize("kernel", ["csr_scalar", "csr_vector"])
def test_csr_kernels_multiply_on_their_own_arrays(kernel, rng):
    A = matrix("power_law_500", np.float64)
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    held = op.memory
    op @ block(rng, A.shape[1], 4)
    assert op.memory == held
    assert "CSR arrays (the format's own)" in op.explain()


@pytest.mark.parametrize("kernel", ["ell", "hyb", "jds", "csr5"])
def test_other_formats_keep_csr_arrays_counted_in_memory(kernel, rng):
    A = random_matrix(300, 200, 0.05, 4)  # canonical CSR: the operator keeps only its format
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    held = op.memory["host"]
    assert NOTE not in op.explain()
    X = block(rng, A.shape[1], 5)
    assert_close(op @ X, reference(A, X), np.float64)
    assert op.memory["host"] == held + csr_bytes(A)
    assert op.explain().count(NOTE) == 1
    op @ X  # set up once
    assert op.memory["host"] == held + csr_bytes(A) and op.explain().count(NOTE) == 1


def test_a_kept_csr_serves_the_product_without_more_memory(rng):
    A = random_matrix(300, 200, 0.05, 4).tocoo()  # canonicalised into a copy the operator keeps
    op = autospmv.prepare(A, kernel="ell", device="cpu")
    held = op.memory["host"]
    op @ block(rng, A.shape[1], 5)
    assert op.memory["host"] == held


@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_rmatmat_is_the_transposes_multi_vector_product(kernel, rng):
    A = matrix("rect_37x61", np.float64)
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    Z = block(rng, A.shape[0], 6)
    for Y in (op.rmatmat(Z), op.T @ Z, op.H.matmat(Z)):
        assert Y.shape == (A.shape[1], 6)
        assert_close(Y, reference(A.T, Z), np.float64)
    assert NOTE in op.T.explain()


def test_threads_share_an_operator(rng):
    A = power_law(3000, 3000, 1.1, 6)
    op = autospmv.prepare(A, kernel="hyb", device="cpu")
    blocks = [block(rng, A.shape[1], k) for k in (2, 3, 5, 8) * 4]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(op.matmat, blocks))
    for X, Y in zip(blocks, results):
        assert_close(Y, reference(A, X), np.float64)
    assert op.explain().count(NOTE) == 1


def test_lobpcg_finds_scipys_eigenvalues(rng):
    A = poisson2d(20)
    op = autospmv.prepare(A, device="cpu")
    X = block(rng, A.shape[0], 4)
    values, _ = lobpcg(op, X, largest=False, tol=1e-9, maxiter=500)
    expected, _ = lobpcg(A, X, largest=False, tol=1e-9, maxiter=500)
    np.testing.assert_allclose(np.sort(values), np.sort(expected), rtol=1e-7)


def test_long_row_pieces():
    from autospmv.kernels.cuda.spmm_programs import long_row_pieces

    lengths = [0, 3, 9, 4, 0, 10, 1]
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    rows, starts = long_row_pieces(indptr, piece=4)
    expected = [(row, indptr[row] + offset) for row, length in enumerate(lengths)
                for offset in range(4, length, 4)]
    assert list(zip(rows.tolist(), starts.tolist())) == expected
    assert rows.dtype == starts.dtype == np.int32
    rows, starts = long_row_pieces(np.array([0, 2, 4], dtype=np.int64), piece=4)
    assert rows.size == starts.size == 0


def test_few_columns_group_follows_the_pieces_not_the_long_rows():
    """A few rows far longer than a piece are split among many groups, so they must not give
    every short row a whole warp: the group is csr_vector's for the work items as cut."""
    import scipy.sparse as sp

    from autospmv import _registry as registry
    from autospmv.formats.base import RowStructure
    from autospmv.kernels.cuda.spmm import PIECE
    from autospmv.kernels.cuda.spmm_programs import few_columns_group, long_row_pieces

    n = 20_000
    dense = np.arange(3)
    rows = np.concatenate([np.arange(n), np.repeat(dense, n), np.tile(np.arange(n), 3)])
    cols = np.concatenate([np.arange(n), np.tile(np.arange(n), 3), np.repeat(dense, n)])
    A = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    whole_rows = registry.choose_params(
        "csr_vector", RowStructure(A.shape, A.indptr, np.dtype(np.float64)), "cuda")
    assert whole_rows["threads_per_row"] == 32  # what the row lengths alone would give
    assert few_columns_group(A.shape, A.indptr) < 32
    assert few_columns_group(A.shape, A.indptr, long_row_pieces(A.indptr)) == few_columns_group(
        A.shape, A.indptr)  # the pieces the program has already cut give the same group
    # Without rows longer than a piece, the items are the rows: csr_vector's own group.
    B = sp.random(500, 500, density=0.05, format="csr", random_state=1)
    assert np.diff(B.indptr).max() <= PIECE
    assert few_columns_group(B.shape, B.indptr) == registry.choose_params(
        "csr_vector", RowStructure(B.shape, B.indptr, np.dtype(np.float64)),
        "cuda")["threads_per_row"]


# --- device arrays on a real GPU --------------------------------------------------------------

def numba_blocks():
    from numba import cuda

    return cuda.to_device, lambda a: a.copy_to_host(), cuda.devicearray.DeviceNDArray


def cupy_blocks():
    cupy = pytest.importorskip("cupy")
    return cupy.asarray, cupy.asnumpy, cupy.ndarray


def torch_blocks():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return lambda a: torch.from_numpy(a).cuda(), lambda t: t.cpu().numpy(), torch.Tensor


LIBRARIES = {"numba": numba_blocks, "cupy": cupy_blocks, "torch": torch_blocks}


@pytest.mark.requires_gpu
@pytest.mark.parametrize("library", list(LIBRARIES))
@pytest.mark.parametrize("name", ["power_law_500", "huge_row_among_short_300x3000",
                                  "all_rows_empty_9x11"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", ["csr_scalar", "csr5"])
def test_device_blocks(kernel, dtype, name, library, rng):
    to_device, to_host, kind = LIBRARIES[library]()
    A = matrix(name, dtype)
    op = autospmv.prepare(A, kernel=kernel, device="cuda")
    for k in (1, 3, 4, 5, 16, 33, 64):
        for x_dtype in DTYPES:
            X = block(rng, A.shape[1], k, x_dtype)
            Y = op @ to_device(X)
            assert isinstance(Y, kind) and tuple(Y.shape) == (A.shape[0], k)
            result = to_host(Y)
            assert result.dtype == np.result_type(dtype, x_dtype)
            assert_close(result, reference(A, X), result.dtype)


@pytest.mark.requires_gpu
def test_device_blocks_of_any_layout(rng):
    cupy = pytest.importorskip("cupy")
    A = matrix("rect_61x37", np.float64)
    op = autospmv.prepare(A, kernel="ell", device="cuda")
    X = block(rng, A.shape[1], 6)
    assert_close(cupy.asnumpy(op @ cupy.asfortranarray(cupy.asarray(X))), reference(A, X),
                 np.float64)
    torch = pytest.importorskip("torch")
    Y = op @ torch.from_numpy(X.T.copy()).cuda().T
    assert_close(Y.cpu().numpy(), reference(A, X), np.float64)


@pytest.mark.requires_gpu
def test_repeated_products_keep_their_launch_parameters(rng):
    """The launches of a column count, made at its first product, serve every later one: their
    parameter buffers (which the driver reads at each launch) live with the operator. Python
    objects made and freed between the products would overwrite a buffer that was let go."""
    import ctypes
    import gc

    cupy = pytest.importorskip("cupy")
    A = matrix("huge_row_among_short_300x3000", np.float64)  # a row launch and a piece launch
    op = autospmv.prepare(A, kernel="coo", device="cuda")
    for k in (3, 10):
        X = block(rng, A.shape[1], k)
        expected = reference(A, X)
        for _ in range(5):
            litter = [ctypes.c_uint64(i) for i in range(20_000)]
            del litter
            gc.collect()
            assert_close(op @ X, expected, np.float64)
            assert_close(cupy.asnumpy(op @ cupy.asarray(X)), expected, np.float64)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("name", ["huge_row_among_short_300x3000", "poisson2d_169"])
def test_column_counts_above_4_keep_the_fastest_program_and_say_so(name, rng):
    """For k > FEW_COLUMNS the first product times the many-columns kernel, the column-pairs
    kernel and, up to MEASURED_UP_TO, the few-columns kernel in passes; every product is right
    whichever is kept, and the choice is noted once per column count."""
    from autospmv.kernels.cuda.spmm_programs import FEW_COLUMNS, MEASURED_UP_TO

    A = matrix(name, np.float64)
    op = autospmv.prepare(A, device="cuda")
    for k in sorted({FEW_COLUMNS, 5, MEASURED_UP_TO, MEASURED_UP_TO + 1, 64}):
        X = block(rng, A.shape[1], k)
        for _ in range(2):
            assert_close(op @ X, reference(A, X), np.float64)
        lines = [line for line in op.explain().splitlines()
                 if f"multi-vector products of {k} columns (float64 X, float64 Y)" in line]
        if k <= FEW_COLUMNS:
            assert not lines
            continue
        assert len(lines) == 1 and "timed at the first one" in lines[0]
        assert "many-columns kernel" in lines[0] and "column-pairs kernel" in lines[0]
        assert ("few-columns kernel in" in lines[0]) == (k <= MEASURED_UP_TO)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_x_beyond_the_cache_times_the_tiled_programs(dtype, rng):
    """Where X outgrows the L2 cache (here a cache taken to hold 24 columns of X), the first
    product of k columns also times the column pairs and quads in tiles of X's columns; the
    product is SciPy's whichever is kept, and each tiled program, run on its own, is SciPy's
    too."""
    from autospmv.kernels.cuda import spmm_programs

    A = matrix("huge_row_among_short_300x3000", dtype)  # a row launch and a piece launch
    op = autospmv.prepare(A, device="cuda", order="keep")
    k = 67
    op @ block(rng, A.shape[1], 2).astype(dtype)  # sets up the multi-vector product
    multi = op._runner.multi
    multi.cache_bytes = 24 * A.shape[1] * np.dtype(dtype).itemsize
    tile = spmm_programs.tile_width(k, A.shape[1], np.dtype(dtype).itemsize, multi.cache_bytes)
    assert tile == 16
    X = block(rng, A.shape[1], k).astype(dtype)
    assert_close(op @ X, reference(A, X), dtype)
    line = next(line for line in op.explain().splitlines()
                if f"multi-vector products of {k} columns" in line)
    for name in spmm_programs.TILED:
        assert f"{spmm_programs.ONE_PASS[name].name} in tiles of {tile} columns" in line
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(X)
    for name in spmm_programs.TILED:
        y = cupy.full((A.shape[0], k), np.nan, dtype=dtype)
        _, fires = multi.build(k, x.dtype, y.dtype, (name, tile))
        for fire in fires:
            fire(x.data.ptr, y.data.ptr, cupy.cuda.get_current_stream().ptr)
        assert_close(cupy.asnumpy(y), reference(A, X), dtype)


@pytest.mark.requires_gpu
def test_device_blocks_are_checked():
    from numba import cuda

    op = autospmv.prepare(random_matrix(6, 4, 0.5, 1), kernel="csr_scalar", device="cuda")
    with pytest.raises(ValueError, match=r"X must have shape \(4, k\); got \(5, 2\)"):
        op @ cuda.to_device(np.ones((5, 2)))
    with pytest.raises(ValueError, match="row-major"):
        op @ cuda.to_device(np.ones((2, 4)).T)
    with pytest.raises(TypeError, match="X must have dtype float32 or float64; got int64"):
        op @ cuda.to_device(np.ones((4, 2), dtype=np.int64))


@pytest.mark.requires_gpu
def test_device_memory_counts_the_products_arrays(rng):
    A = random_matrix(300, 200, 0.05, 4)  # no row longer than a piece: no piece list
    for kernel, extra in (("csr_scalar", 0), ("ell", csr_bytes(A))):
        op = autospmv.prepare(A, kernel=kernel, device="cuda")
        held = op.memory["device"]
        op @ block(rng, A.shape[1], 5)
        assert op.memory["device"] == held + extra
        assert NOTE in op.explain()


@pytest.mark.requires_gpu
@pytest.mark.parametrize("kernel", ["coo", "ell", "hyb", "jds", "csr5"])
def test_device_blocks_from_every_source_of_csr_arrays(kernel, rng):
    """A format that is not CSR gets its CSR arrays from what the operator keeps: the format
    and row pointer (rebuilt on the GPU), after Aᵀ took those the transposed operator's matrix,
    or a matrix that lives on the GPU. Each matrix has a row longer than a piece (spmm.PIECE);
    ELL and JDS refuse the 3000-long row among short ones (fill limit), so they get one of 300
    among 200 rows, which they take."""
    cupy = pytest.importorskip("cupy")
    import cupyx.scipy.sparse as csp

    A = (one_long_row(200, 300, 77, 3, 5) if kernel in ("ell", "jds")
         else matrix("huge_row_among_short_300x3000", np.float64))
    X = block(rng, A.shape[1], 6)
    fresh = autospmv.prepare(A, kernel=kernel, device="cuda")
    transposed_first = autospmv.prepare(A, kernel=kernel, device="cuda")
    transposed_first.transpose_operator()  # built before the first block
    on_device = autospmv.prepare(csp.csr_matrix(A), kernel=kernel, device="cuda")
    for op in (fresh, transposed_first, on_device):
        assert_close(cupy.asnumpy(op @ cupy.asarray(X)), reference(A, X), np.float64)


@pytest.mark.requires_gpu
def test_a_first_product_captured_in_a_cuda_graph_runs_the_models_program(rng):
    """Where the first product of k columns is captured into a CUDA graph, nothing can be
    timed: the program the model's SpMM rule names runs, noted, and replaying the graph gives
    SciPy's product."""
    import cupy

    from autospmv._decide.model.spmm_rule import SpmmChoice, SpmmRule

    A = matrix("poisson2d_169", np.float64)
    op = autospmv.prepare(A, kernel="csr_vector", device="cuda")
    rule = SpmmRule((SpmmChoice(64, None, "column_pairs_wide_step", "column_pairs_wide_step"),),
                    labels=3)
    op._spmm_rule = lambda: rule
    X = cupy.asarray(block(rng, A.shape[1], 16))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        op @ cupy.asarray(block(rng, A.shape[1], 4))  # sets the multi-vector product up outside
        stream.begin_capture(mode=cupy.cuda.runtime.streamCaptureModeRelaxed)
        Y = op @ X
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
    assert_close(cupy.asnumpy(Y), reference(A, cupy.asnumpy(X)), np.float64)
    lines = [line for line in op.explain().splitlines()
             if "multi-vector products of 16 columns" in line]
    assert len(lines) == 1 and "the column-pairs kernel of eight nonzeros a step" in lines[0]
    assert "picked by the SpMM rule fitted to 3 labelled products" in lines[0]
    assert "captured into a CUDA graph" in lines[0]
