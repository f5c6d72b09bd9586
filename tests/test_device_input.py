"""Matrices on the GPU (autospmv/_prepare/device_input.py): conversions on the device, and prepare() on CuPy and
torch sparse input without device-to-host copies of the nonzeros.

The conversions are written for any array module; run with NumPy they must build exactly the
host formats, which checks their logic on every machine. The rest needs a GPU and CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv._support import threads as cpu_threads
from autospmv import _registry as registry
from autospmv._prepare.device_input import is_device_matrix
from autospmv._decide.features.sampling import SAMPLE_THRESHOLD
from autospmv.formats.base import FormatTooLargeError
from autospmv._support.validation import canonicalize
from autospmv.formats.csr import CSRFormat
from matrices import (FAMILY, TOLERANCE, numpy_device_csr, power_law, random_matrix,
                      random_vector, reference, relative_error)

DTYPES = [np.float32, np.float64]


def _convert_both(kernel, csr):
    params = registry.choose_params(kernel, csr, "cuda")
    try:
        host = registry.get(kernel).convert(csr, params)
    except FormatTooLargeError:
        with pytest.raises(FormatTooLargeError):
            registry.get(kernel).convert(numpy_device_csr(csr), params)
        return None, None
    return host, registry.get(kernel).convert(numpy_device_csr(csr), params)


@pytest.mark.parametrize("name", sorted(FAMILY))
@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_device_conversions_build_the_host_formats(kernel, name):
    csr = canonicalize(FAMILY[name]())
    host, device = _convert_both(kernel, csr)
    if host is None:
        return
    assert type(device) is type(host) and device.shape == host.shape
    host_arrays, device_arrays = host.arrays(), device.arrays()
    assert list(device_arrays) == list(host_arrays)
    for key, value in host_arrays.items():
        assert device_arrays[key].dtype == value.dtype, key
        np.testing.assert_array_equal(device_arrays[key], value, err_msg=key)
    for field in ("width", "sigma"):
        assert getattr(device, field, None) == getattr(host, field, None)


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_csr5_descriptors_built_on_the_device_are_the_host_format(name, monkeypatch):
    """From DEVICE_DESCRIPTORS_MIN_NNZ nonzeros (lowered here) a matrix without empty rows
    gets its CSR5 descriptors from array operations on the device: the same format as on the
    host, array for array, and the same flags."""
    from autospmv.formats import csr5

    monkeypatch.setattr(csr5, "DEVICE_DESCRIPTORS_MIN_NNZ", 0)
    csr = canonicalize(FAMILY[name]())
    host, device = _convert_both("csr5", csr)
    for key, value in host.arrays().items():
        assert device.arrays()[key].dtype == value.dtype, key
        np.testing.assert_array_equal(device.arrays()[key], value, err_msg=key)
    assert (device.sigma, device.has_empty_rows) == (host.sigma, host.has_empty_rows)


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cupy_csr5_with_descriptors_built_on_the_gpu(dtype, monkeypatch, rng):
    """The descriptors CuPy computes (threshold lowered) run the kernel to SciPy's result, on
    every family matrix without empty rows, for the σ of a large matrix and a small one."""
    cupy = _cupy()
    import cupyx.scipy.sparse as cusp

    from autospmv.formats import csr5

    monkeypatch.setattr(csr5, "DEVICE_DESCRIPTORS_MIN_NNZ", 0)
    for name, make in sorted(FAMILY.items()):
        A = canonicalize(make().astype(dtype))
        if not A.nnz or np.any(np.diff(A.indptr) == 0):
            continue
        x = rng.uniform(-1, 1, A.shape[1]).astype(dtype)
        for sigma in (3, 16, 32):
            op = autospmv.prepare(cusp.csr_matrix(A), kernel="csr5", params={"sigma": sigma})
            error = relative_error(cupy.asnumpy(op @ cupy.asarray(x)), reference(A, x))
            assert error <= TOLERANCE[np.dtype(dtype)], f"{name}, sigma={sigma}: {error:.3g}"


@pytest.mark.parametrize("kernel", ["hyb", "jds", "csr5"])
def test_device_conversions_on_a_larger_power_law_matrix(kernel):
    csr = canonicalize(power_law(5000, 4000, 1.8, 11).astype(np.float32))
    host, device = _convert_both(kernel, csr)
    for key, value in host.arrays().items():
        np.testing.assert_array_equal(device.arrays()[key], value, err_msg=key)


def test_host_matrices_are_not_device_matrices():
    assert not is_device_matrix(sp.random(5, 5, density=0.5, format="csr"))
    assert not is_device_matrix(np.eye(3))


# ------------------------------------------------------------------------ on a GPU with CuPy

def _cupy():
    return pytest.importorskip("cupy")


@pytest.fixture
def no_large_downloads(monkeypatch):
    """Fail on any CuPy device-to-host copy of at least ``limit`` elements (set per test)."""
    cupy = _cupy()
    state = {"limit": None, "seen": []}

    def guard(array):
        if state["limit"] is not None and array.size >= state["limit"]:
            state["seen"].append(array.size)
            raise AssertionError(f"device-to-host copy of {array.size} elements")

    original_get, original_asnumpy = cupy.ndarray.get, cupy.asnumpy

    def get(self, *args, **kwargs):
        guard(self)
        return original_get(self, *args, **kwargs)

    def asnumpy(a, *args, **kwargs):
        if isinstance(a, cupy.ndarray):
            guard(a)
        return original_asnumpy(a, *args, **kwargs)

    monkeypatch.setattr(cupy.ndarray, "get", get)
    monkeypatch.setattr(cupy, "asnumpy", asnumpy)
    return state


def _device_matrices(cupy):
    import cupyx.scipy.sparse as cusp

    A = canonicalize(power_law(3000, 2500, 2.0, 7))
    yield "csr", A, cusp.csr_matrix(A)
    B = sp.coo_matrix(A)
    yield "coo_with_duplicates", (B + B).tocsr(), cusp.coo_matrix(
        (cupy.asarray(np.concatenate([B.data, B.data])),
         (cupy.asarray(np.concatenate([B.row, B.row])),
          cupy.asarray(np.concatenate([B.col, B.col])))), shape=B.shape)
    yield "csc", A, cusp.csc_matrix(A.tocsc())


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("kernel", [*autospmv.KERNELS, None])
def test_cupy_input_never_downloads_the_nonzeros(kernel, dtype, no_large_downloads, rng):
    cupy = _cupy()
    for label, A_host, A_device in _device_matrices(cupy):
        A_host, A_device = A_host.astype(dtype), A_device.astype(dtype)
        no_large_downloads["limit"] = min(A_host.nnz, 4 * A_host.shape[0])  # indptr may go
        try:
            op = autospmv.prepare(A_device, kernel=kernel, device="cuda")
        except FormatTooLargeError:
            assert kernel in ("ell", "jds")
            continue
        x = rng.standard_normal(A_host.shape[1]).astype(dtype)
        y = op @ cupy.asarray(x)
        no_large_downloads["limit"] = None
        assert isinstance(y, cupy.ndarray)
        error = relative_error(cupy.asnumpy(y), reference(A_host, x))
        assert error <= TOLERANCE[np.dtype(dtype)], (label, error)
        assert op.memory["host"] == 0 and op.memory["device"] > 0
        if kernel is None:
            assert "device input" in op.explain()


@pytest.mark.requires_gpu
@pytest.mark.parametrize("kernel", ["csr_scalar", "csr_vector", "hyb"])
def test_an_operator_outlives_the_stream_current_when_it_was_prepared(kernel, rng):
    """A CuPy matrix prepared while a stream of the caller's was current (as a background
    decision's thread does), that stream then destroyed: the operator's later copies (the
    first 2-D product's set-up reads the row pointer) queue on no dead stream."""
    import gc

    cupy = _cupy()
    import cupyx.scipy.sparse as cusp

    A = random_matrix(3000, 2000, 0.004, 11)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        op = autospmv.prepare(cusp.csr_matrix(A), kernel=kernel, device="cuda")
    stream.synchronize()
    del stream
    gc.collect()
    X = rng.standard_normal((2000, 3))
    assert relative_error(op @ X, A @ X) <= TOLERANCE[np.dtype(np.float64)]
    x = rng.standard_normal(2000)
    assert relative_error(op @ x, A @ x) <= TOLERANCE[np.dtype(np.float64)]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_torch_sparse_cuda_input(layout, no_large_downloads, rng):
    _cupy()
    torch = pytest.importorskip("torch")
    A = canonicalize(power_law(2000, 1500, 2.0, 9))
    coo = A.tocoo()
    T = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, A.shape,
                                device="cuda")
    if layout == "csr":
        T = T.coalesce().to_sparse_csr()
    assert is_device_matrix(T)
    no_large_downloads["limit"] = A.nnz
    op = autospmv.prepare(T, kernel="hyb")
    x = torch.randn(A.shape[1], dtype=torch.float64, device="cuda")
    y = op @ x
    no_large_downloads["limit"] = None
    assert isinstance(y, torch.Tensor) and y.is_cuda
    error = relative_error(y.cpu().numpy(), reference(A, x.cpu().numpy()))
    assert error <= TOLERANCE[np.dtype(np.float64)]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype, computed", [("int32", np.float64), ("bool", np.float64),
                                             ("float16", np.float32)])
def test_torch_cuda_values_are_converted_as_on_the_host(dtype, computed, rng):
    """Integer, bool and float16 values of a torch sparse tensor on the GPU become float64,
    float64 and float32, as those of a host matrix do (CuPy's sparse matrices take neither)."""
    torch = pytest.importorskip("torch")
    dense = (rng.random((40, 30)) < 0.2) * rng.integers(1, 5, (40, 30))
    tensor = torch.from_numpy(dense).to(getattr(torch, dtype)).cuda().to_sparse()
    op = autospmv.prepare(tensor, device="cuda")
    assert op.dtype == computed
    x = rng.standard_normal(30).astype(computed)
    expected = sp.csr_matrix(dense.astype(dtype).astype(computed))
    assert relative_error(op @ x, reference(expected, x)) <= TOLERANCE[np.dtype(computed)]


@pytest.mark.requires_gpu
def test_device_input_transpose_and_refusals(rng):
    cupy = _cupy()
    import cupyx.scipy.sparse as cusp

    A = canonicalize(power_law(800, 600, 2.0, 3))
    op = autospmv.prepare(cusp.csr_matrix(A), kernel="csr5")
    x = rng.standard_normal(A.shape[0])
    y = op.transpose_operator() @ cupy.asarray(x)
    assert relative_error(cupy.asnumpy(y), A.T @ x) <= TOLERANCE[np.dtype(np.float64)]
    with pytest.raises(ValueError, match="lives on the GPU"):
        autospmv.prepare(cusp.csr_matrix(A), device="cpu")


@pytest.mark.requires_gpu
@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_host_input_on_the_gpu_is_a_snapshot_and_keeps_no_host_copy(kernel, rng):
    """Changing a canonical host A after prepare() changes neither op nor op.T on the GPU,
    though the operator keeps no copy of A's nonzeros: Aᵀ is rebuilt from the format on the GPU
    and a copy of the row pointer, the only host memory it holds."""
    _cupy()
    A = canonicalize(random_matrix(400, 300, 0.05, 4))
    B = A.copy()
    try:
        op = autospmv.prepare(B, kernel=kernel, device="cuda")
    except FormatTooLargeError:
        assert kernel in ("ell", "jds")
        return
    assert op.memory["host"] == A.indptr.nbytes, op.memory
    B.data *= 2
    B.indices[:] = 0
    B.indptr[1:] = B.indptr[-1]
    x, z = random_vector(rng, 300, np.float64), random_vector(rng, 400, np.float64)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    assert relative_error(op.T @ z, reference(A.T, z)) <= TOLERANCE[np.dtype(np.float64)]


@pytest.mark.parametrize("kernel", autospmv.KERNELS)
@pytest.mark.parametrize("name", ["odd_65x47", "half_rows_empty_200x150",
                                  "huge_row_among_short_300x3000", "empty_5x0", "empty_0x0"])
def test_csr_from_format_inverts_the_device_conversion(kernel, name):
    """A format's to_device_csr(from_device_csr(...)) gives back the CSR, for every format (with
    NumPy standing in for CuPy, the same array code)."""
    A = canonicalize(FAMILY[name]())
    csr = numpy_device_csr(A)
    params = registry.choose_params(kernel, A, "cuda")
    try:
        fmt = registry.get(kernel).convert(csr, params)
    except FormatTooLargeError:
        return
    back = fmt.to_device_csr(A.indptr.copy(), np)
    np.testing.assert_array_equal(back.indptr, A.indptr)
    np.testing.assert_array_equal(back.indices, A.indices)
    np.testing.assert_array_equal(back.data, A.data)


def _features_both_ways(csr, device):
    from autospmv._decide.features.extract import canonical_features_and_lengths

    host, host_lengths = canonical_features_and_lengths(csr, device=device)
    split, split_lengths = canonical_features_and_lengths(csr, device=device,
                                                          uploaded=numpy_device_csr(csr))
    assert split == host
    for a, b in zip(split_lengths, host_lengths):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(FAMILY))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_features_with_the_index_passes_on_the_device_are_the_host_features(name, device):
    # With the matrix uploaded, bandwidth and diagonals are reduced on the device and the
    # scan reads only the detail windows: every feature must come out the same.
    _features_both_ways(canonicalize(FAMILY[name]()), device)


@pytest.mark.parametrize("threaded", [False, True])
def test_sampled_features_with_the_index_passes_on_the_device(threaded, monkeypatch):
    # Above the sampling threshold (windows drawn for detail), serially and on threads.
    if threaded:
        monkeypatch.setattr(cpu_threads, "PASSES_PARALLEL_MIN_NNZ", 1)
        monkeypatch.setattr(cpu_threads, "PARALLEL_MIN_THREADS", 1)
    csr = canonicalize(power_law(100_000, 80_000, 1.6, 9).astype(np.float32))
    assert csr.nnz > SAMPLE_THRESHOLD
    _features_both_ways(csr, "cuda")


@pytest.mark.requires_gpu
def test_automatic_prepare_of_a_host_matrix_uploads_once_and_decides_as_select(monkeypatch):
    """prepare() uploads the host matrix before deciding, runs the feature passes that its
    model's features call for on the GPU, and the operator converts from that upload (a second
    would fail here)."""
    _cupy()
    import autospmv._prepare.operator

    A = canonicalize(power_law(40_000, 30_000, 1.8, 9))
    expected = autospmv.select(A, device="cuda")

    def no_second_upload(csr):
        raise AssertionError("the operator uploaded the matrix again")

    monkeypatch.setattr(autospmv._prepare.operator, "upload_csr", no_second_upload)
    op = autospmv.prepare(A, device="cuda")
    assert (op.kernel, op.params) == (expected.kernel, expected.params)
    assert any("counted on the GPU" in note for note in op.decision.notes), op.decision.notes
    x = np.random.default_rng(1).standard_normal(A.shape[1])
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]


def test_decision_notes_say_which_passes_ran_on_the_gpu():
    from autospmv._decide.selection import passes_note

    assert passes_note(["row_mean"]) == "row lengths counted on the GPU"
    assert passes_note(["row_mean", "diagonals"]) == (
        "row lengths and bandwidth and diagonals counted on the GPU")
    assert passes_note(None) == ("row lengths, bandwidth and diagonals and the sampled rows' "
                                  "blocks and x sectors counted on the GPU")


@pytest.mark.parametrize("threaded", [False, True])
def test_device_features_are_the_host_features(threaded, monkeypatch):
    # Above the sampling threshold a matrix on the device gets the host's features (counted
    # there: test_device_passes.py; a NumPy stand-in is scanned on the host).

    from autospmv._decide.features import extract as features_module
    if threaded:
        monkeypatch.setattr(cpu_threads, "PASSES_PARALLEL_MIN_NNZ", 1)
        monkeypatch.setattr(cpu_threads, "PARALLEL_MIN_THREADS", 1)
    for csr in (canonicalize(power_law(100_000, 80_000, 1.6, 9).astype(np.float32)),
                canonicalize(random_matrix(30_000, 40_000, 0.0002, 5))):
        assert csr.nnz > SAMPLE_THRESHOLD
        for device in ("cuda", "cpu"):
            host, host_lengths = features_module.canonical_features_and_lengths(csr,
                                                                                device=device)
            got, lengths = features_module.canonical_features_and_lengths(
                numpy_device_csr(csr), device=device)
            assert got == host
            for a, b in zip(lengths, host_lengths):
                np.testing.assert_array_equal(a, b)


@pytest.mark.requires_gpu
def test_large_cupy_input_is_decided_by_the_model_from_a_sample(no_large_downloads):
    """Above the sampling threshold a CuPy matrix is decided as its host copy would be, and no
    transfer to the host is larger than its row pointer or a quarter of its nonzeros."""
    cupy = _cupy()
    import cupyx.scipy.sparse as cusp

    A = canonicalize(power_law(100_000, 80_000, 1.6, 9).astype(np.float32))
    expected = autospmv.select(A, device="cuda")
    no_large_downloads["limit"] = max(A.nnz // 4, A.shape[0] + 2)  # the row pointer may go
    op = autospmv.prepare(cusp.csr_matrix(A), device="cuda")
    no_large_downloads["limit"] = None
    assert (op.kernel, op.params) == (expected.kernel, expected.params)
    assert any(note.startswith("device input: features and prediction took")
               for note in op.decision.notes), op.decision.notes
    x = np.random.default_rng(2).standard_normal(A.shape[1]).astype(np.float32)
    assert relative_error(cupy.asnumpy(op @ cupy.asarray(x)), reference(A, x)) \
        <= TOLERANCE[np.dtype(np.float32)]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("rows", [2_000, 100_000], ids=["rule", "model"])
def test_select_of_a_cupy_matrix_is_prepare_s_decision(rows, no_large_downloads):
    """select() of a matrix on the GPU decides as prepare() of it does, below the sampling
    threshold (the built-in rule) and above it (the model), without downloading its nonzeros."""
    _cupy()
    import cupyx.scipy.sparse as cusp

    A = cusp.csr_matrix(canonicalize(power_law(rows, rows, 1.6, 9).astype(np.float32)))
    no_large_downloads["limit"] = max(A.nnz // 4, A.shape[0] + 2)
    decision = autospmv.select(A, device="cuda")
    op = autospmv.prepare(A, device="cuda")
    assert (decision.kernel, decision.params) == (op.kernel, op.params)
    for notes in (decision.notes, op.decision.notes):
        assert any(note.startswith("device input:") for note in notes), notes


@pytest.mark.parametrize("m", [1, 31, 33, 300_000])
def test_the_row_pointer_passes_give_the_row_length_histogram(m):
    """The longest row, the length histogram and the warp imbalance sum from the host's passes
    over the row pointer: also over several of the imbalance sum's chunks (300,000 rows: three
    chunks of 4,096 warps, the same sum on numba's threads), with empty rows, a last warp that
    is not full, and a row much longer than the row count (the lengths then counted by
    sorting)."""
    from autospmv._decide.features.row_lengths import length_histogram, row_length_moments, warp_ratio_sum

    rng = np.random.default_rng(m)
    lengths = rng.integers(0, 9, m) * (rng.random(m) < 0.9)
    lengths[rng.integers(0, m)] = 40 if m > 1 else 200  # one row: a histogram too wide
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    nnz = int(indptr[-1])
    csr = sp.csr_matrix((np.ones(nnz), rng.integers(0, 50, nnz), indptr), shape=(m, 50))
    host_values, host_counts = np.unique(lengths, return_counts=True)
    longest = row_length_moments(csr.indptr, m)[1]
    assert longest == lengths.max()
    values, counts = length_histogram(csr.indptr, m, longest)
    np.testing.assert_array_equal(values, host_values)
    np.testing.assert_array_equal(counts, host_counts)
    assert values.dtype == counts.dtype == np.int64
    assert warp_ratio_sum(csr.indptr, m, parallel=True) == warp_ratio_sum(csr.indptr, m)


@pytest.mark.parametrize("needed, sampled, index_passes", [
    (["nnz", "row_mean"], False, False),
    (["nnz", "x_sectors_per_nnz_warp"], True, False),
    (["nnz", "x_sectors_per_nnz_warp", "block4_share"], True, False),
    (["diagonals", "row_std"], False, True),
    (None, True, True),
])
def test_features_leave_out_the_passes_a_caller_does_not_read(needed, sampled, index_passes):
    """Only the passes whose features are needed run (on the host, and for a matrix on the GPU:
    there the passes leave their features out, test_device_passes.py); every feature returned
    equals the full computation's."""
    from autospmv._decide.features import extract as features_module

    assert features_module.passes_needed(needed) == (sampled, index_passes)
    csr = canonicalize(power_law(100_000, 80_000, 1.6, 9).astype(np.float32))
    full, full_lengths = features_module.canonical_features_and_lengths(csr, device="cuda")
    results = [
        features_module.canonical_features_and_lengths(csr, device="cuda", needed=needed),
        features_module.canonical_features_and_lengths(
            csr, device="cuda", uploaded=numpy_device_csr(csr), needed=needed),
        features_module.canonical_features_and_lengths(numpy_device_csr(csr), device="cuda",
                                                       needed=needed),
    ]
    for got, lengths in results:
        assert set(got) <= set(full) and all(got[k] == full[k] for k in got)
        assert set(needed or full) <= set(got)
        for a, b in zip(lengths, full_lengths):
            np.testing.assert_array_equal(a, b)
    # The host's full scan returns the bandwidth and the diagonals whatever is needed.
    assert "diagonals" in results[0][0]
