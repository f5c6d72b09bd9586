"""SpMVOperator as a scipy LinearOperator, its attributes, and the decision it records."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import autospmv
from autospmv import _registry as registry
from autospmv._support.devices import resolve_device
from matrices import (
    FAMILY, assert_close, one_long_row, poisson2d, random_matrix, random_vector, reference,
    relative_error, signed_from_row_lengths,
)

KERNELS = autospmv.KERNELS


@pytest.fixture
def A():
    """Small enough that every padded format converts (below the fill limit's allowance)."""
    return FAMILY["odd_65x47"]()


@pytest.mark.parametrize("kernel", KERNELS)
def test_products_agree_with_scipy(kernel, A, rng):
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    assert isinstance(op, spla.LinearOperator)
    x = random_vector(rng, A.shape[1], np.float64)
    y_ref = reference(A, x)
    for y in (op @ x, op.matvec(x), op.dot(x), op(x)):
        assert y.shape == (A.shape[0],)
        assert_close(y, y_ref, np.float64)
    out = np.empty(A.shape[0])
    assert op.matvec(x, out=out) is out
    assert_close(out, y_ref, np.float64)


@pytest.mark.parametrize("kernel", KERNELS)
def test_column_vector_gives_column(kernel, A, rng):
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    x = random_vector(rng, A.shape[1], np.float64).reshape(-1, 1)
    for y in (op @ x, op.matvec(x)):
        assert y.shape == (A.shape[0], 1)
        assert_close(y.ravel(), reference(A, x.ravel()), np.float64)


@pytest.mark.parametrize("kernel", KERNELS)
def test_matmat(kernel, A, rng):
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    X = rng.random((A.shape[1], 3))
    Y_ref = A @ X
    for Y in (op.matmat(X), op @ X, op.matmat(np.asfortranarray(X))):
        assert Y.shape == (A.shape[0], 3) and Y.dtype == np.float64
        assert_close(Y, Y_ref, np.float64)


@pytest.mark.parametrize("kernel", KERNELS)
def test_transpose_and_adjoint(kernel, A, rng):
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    x = random_vector(rng, A.shape[0], np.float64)
    y_ref = A.T @ x
    assert op.T.shape == op.H.shape == (A.shape[1], A.shape[0])
    assert op.T.kernel == kernel and op.T.device == "cpu"
    for y in (op.rmatvec(x), op.T @ x, op.H @ x, op.T.matvec(x)):
        assert y.shape == (A.shape[1],)
        assert_close(y, y_ref, np.float64)
    X = rng.random((A.shape[0], 2))
    assert_close(op.rmatmat(X), A.T @ X, np.float64)
    assert op.T is op.T  # built once
    z = random_vector(rng, A.shape[1], np.float64)
    assert_close(op.T.T @ z, A @ z, np.float64)


@pytest.mark.parametrize("kernel", KERNELS)
def test_conjugate_gradient_reaches_scipy_solution(kernel, rng):
    A = poisson2d(13)
    b = rng.random(A.shape[0])
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    x, info = spla.cg(op, b, rtol=1e-12, maxiter=1000)
    assert info == 0
    x_ref = spla.spsolve(A.tocsc(), b)
    assert relative_error(x, x_ref) <= 1e-9
    x_scipy, _ = spla.cg(A, b, rtol=1e-12, maxiter=1000)
    assert relative_error(x, x_scipy) <= 1e-9


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_attributes(dtype):
    A = random_matrix(40, 30, 0.2, 3).astype(dtype)
    op = autospmv.prepare(A, kernel="csr_vector", device="cpu", params={"threads_per_row": 4})
    assert op.kernel == "csr_vector"
    assert op.params == {"threads_per_row": 4}
    assert op.device == "cpu"
    assert op.shape == (40, 30)
    assert op.dtype == np.dtype(dtype)
    assert isinstance(op.decision, autospmv.Decision)
    assert op.decision.kernel == "csr_vector" and op.decision.source == "forced"
    assert op.nbytes == sum(a.nbytes for a in op.format.arrays().values())
    itemsize = np.dtype(dtype).itemsize
    assert op.nbytes == A.nnz * (itemsize + 4) + 41 * 4  # CSR with int32 indices
    op.params["threads_per_row"] = 32  # a copy: the operator keeps its own
    assert op.params == {"threads_per_row": 4}
    assert "csr_vector" in repr(op) and "40x30" in repr(op)


@pytest.mark.parametrize("kernel", KERNELS)
def test_explain_names_the_kernel(kernel, A):
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    text = op.explain()
    assert text.startswith(f"kernel {kernel} (")
    assert text.splitlines()[0].endswith("), forced by the caller")
    assert "chosen by" not in text
    assert f"kernel={kernel!r} requested" in text
    assert str(op.decision) == text


def test_operator_keeps_its_own_copy_of_the_matrix(A, rng):
    x = random_vector(rng, A.shape[1], np.float64)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    y_before = op @ x
    A.data *= 2
    np.testing.assert_array_equal(op @ x, y_before)


def test_select_decides_without_converting(A, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("select() must not convert the matrix")

    monkeypatch.setattr(registry.KernelSpec, "convert", refuse)
    decision = autospmv.select(A)
    assert isinstance(decision, autospmv.Decision)
    assert decision.kernel in KERNELS
    forced = autospmv.select(A, kernel="hyb")
    assert forced.kernel == "hyb" and forced.source == "forced"
    assert forced.params == registry.choose_params("hyb", A.tocsr(),
                                                   resolve_device(None))


@pytest.fixture
def no_models(monkeypatch, tmp_path):
    """No model anywhere: none given, none in the environment, retrained or shipped."""
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path))
    monkeypatch.setattr("autospmv._decide.model.lookup.shipped_models", lambda: {})


@pytest.mark.parametrize("name", ["odd_65x47", "poisson2d_169", "huge_row_among_short_300x3000",
                                  "empty_0x0"])
def test_automatic_choice_without_a_model_uses_the_rule(name, no_models):
    A = FAMILY[name]()
    op = autospmv.prepare(A, device="cpu")
    decision = op.decision
    assert decision.source == "rule"
    assert decision.kernel in KERNELS and op.kernel == decision.kernel
    assert decision.path, "the rule records the comparisons it made"
    assert "chosen by rule" in op.explain()
    assert "built-in rule decided" in op.explain()
    selected = autospmv.select(A, device="cpu")
    assert (selected.kernel, selected.params) == (decision.kernel, decision.params)


@pytest.mark.parametrize("name", ["odd_65x47", "poisson2d_169", "huge_row_among_short_300x3000",
                                  "empty_0x0"])
def test_automatic_choice_on_cpu_is_the_cpu_rule(name, monkeypatch, tmp_path):
    """No CPU model ships, so without a retrained one the CPU rule decides."""
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path))
    A = FAMILY[name]()
    op = autospmv.prepare(A, device="cpu")
    assert (op.decision.source, op.kernel) == ("rule", "csr_scalar")
    assert "built-in rule decided" in op.explain()
    assert autospmv.select(A, device="cpu").kernel == op.kernel


def test_rule_sends_a_very_long_row_to_csr5(no_models):
    """selector.rule_decision on a GPU: longest row > LONG_ROW nonzeros -> csr5, otherwise
    csr_vector."""
    from autospmv._decide.selection import LONG_ROW, rule_decision

    long_row = one_long_row(50, LONG_ROW + 1, 3, 2, 1)
    short = one_long_row(50, LONG_ROW, 3, 2, 1)
    assert rule_decision(long_row, "cuda").kernel == "csr5"
    assert rule_decision(short, "cuda").kernel == "csr_vector"
    assert (f"max_row_length = {LONG_ROW + 1} > {LONG_ROW}"
            in rule_decision(long_row, "cuda").explain())


@pytest.mark.parametrize("borrowed", [True, False], ids=["canonical input", "copied input"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_pickled_operator_unpickles_to_the_same_products(kernel, borrowed, A, rng):
    """A CPU operator pickles as its matrix and decision: the unpickled one runs the same
    kernel with the same parameters, bit for bit, and is a snapshot like the original."""
    import pickle

    source = A if borrowed else A.tocoo()
    op = autospmv.prepare(source, kernel=kernel, device="cpu")
    copy = pickle.loads(pickle.dumps(op))
    assert (copy.kernel, copy.params, copy.shape, copy.dtype) == (op.kernel, op.params, op.shape,
                                                                  op.dtype)
    assert copy.decision.notes[:len(op.decision.notes)] == op.decision.notes
    x, z = random_vector(rng, A.shape[1], np.float64), random_vector(rng, A.shape[0], np.float64)
    np.testing.assert_array_equal(copy @ x, op @ x)
    np.testing.assert_array_equal(copy.rmatvec(z), op.rmatvec(z))
    if borrowed:
        A.data[:] = 0  # the caller's matrix changes; neither operator sees it
        np.testing.assert_array_equal(copy @ x, op @ x)
        assert np.any(copy @ x)


@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_a_torch_sparse_tensor_in_host_memory_is_a_host_matrix(layout, A, rng):
    """A torch sparse CSR or COO tensor on the CPU is prepared as the SciPy matrix over its
    arrays (before, NumPy's conversion of the tensor failed); other layouts are refused."""
    torch = pytest.importorskip("torch")
    dense = torch.from_numpy(A.toarray())
    tensor = dense.to_sparse_csr() if layout == "csr" else dense.to_sparse()
    op = autospmv.prepare(tensor, device="cpu")
    x = random_vector(rng, A.shape[1], np.float64)
    assert op.shape == A.shape and op.dtype == A.dtype
    assert_close(op @ x, reference(A, x), np.float64)
    with pytest.raises(TypeError, match="takes torch sparse COO and CSR tensors"):
        autospmv.prepare(dense.to_sparse_csc(), device="cpu")


def test_decision_notes_conversion_time(A):
    op = autospmv.prepare(A, kernel="ell", device="cpu")
    assert any(note.startswith("conversion to ell and set-up took") for note in op.decision.notes)


def test_empty_operator():
    for shape in [(0, 0), (5, 0), (0, 7)]:
        op = autospmv.prepare(sp.csr_matrix(shape), device="cpu")
        y = op @ np.zeros(shape[1])
        assert y.shape == (shape[0],)
        np.testing.assert_array_equal(y, 0)


@pytest.mark.parametrize("shape", [(30, 400), (400, 30), (1, 50), (50, 1), (0, 7), (7, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_serial_rmatvec_without_the_transpose_is_the_transposes_product(shape, dtype):
    """A serial CSR operator's rmatvec scatters from A's own arrays; each entry sums the same
    terms in the same order as SciPy's transposed product, so the two agree bit for bit (the
    product with the CSR of Aᵀ sums its rows of LONG_ROW or more terms in four partial sums)."""
    A = sp.random(*shape, density=0.3, format="csr", random_state=np.random.default_rng(5),
                  dtype=dtype)
    op = autospmv.prepare(A, device="cpu", kernel="csr_scalar", threads=1)
    assert op._backend.host_rmatvec is not None
    z = np.random.default_rng(6).standard_normal(shape[0]).astype(dtype)
    y = op.rmatvec(z)
    assert op._transposed is None, "rmatvec built no Aᵀ"
    assert y.shape == (shape[1],) and y.dtype == dtype
    np.testing.assert_array_equal(y, A.T @ z)
    np.testing.assert_allclose(y, op.T.matvec(z), rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-6)
    np.testing.assert_allclose(y, A.T.astype(np.float64) @ z.astype(np.float64),
                               rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)
    assert op.rmatvec(z.reshape(-1, 1)).shape == (shape[1], 1)
    with pytest.raises(ValueError):
        op.rmatvec(np.ones(shape[0] + 1, dtype=dtype))


def test_threaded_rmatvec_goes_through_the_transposed_operator():
    A = sp.random(300, 200, density=0.1, format="csr", random_state=np.random.default_rng(7))
    op = autospmv.prepare(A, device="cpu", kernel="csr_scalar", threads=2)
    if op.threads == 1:
        pytest.skip("numba's pool has one thread here")
    assert op._backend.host_rmatvec is None
    z = np.random.default_rng(8).standard_normal(300)
    np.testing.assert_allclose(op.rmatvec(z), A.T @ z, rtol=1e-12)
    assert op._transposed is not None


def test_short_rows_of_varied_lengths_on_one_thread_run_scipys_loop(rng):
    """A serial csr_scalar product over at least SCIPY_MIN_NNZ nonzeros of short rows whose
    lengths spread by SCIPY_MIN_SPREAD or more runs SciPy's compiled CSR loop, and explain()
    says so with the spread; a mixed-precision product runs the numba loop; two threads, rows
    of one length (a Poisson grid), long rows or a smaller matrix keep the numba kernel."""
    from autospmv.kernels.cpu import scipy_product

    varied = signed_from_row_lengths(np.tile([1, 3, 5, 7, 9], 8_000), 1_000, 0)  # 200,000 nonzeros
    assert varied.nnz >= scipy_product.SCIPY_MIN_NNZ
    assert scipy_product.length_spread(varied.indptr) == pytest.approx(np.sqrt(8))
    op = autospmv.prepare(varied, device="cpu", threads=1)
    assert op.kernel == "csr_scalar" and scipy_product.note(op.format) in op.explain()
    assert "spread by 2.83 ≥ 1.5" in op.explain()
    x = random_vector(rng, varied.shape[1], np.float64)
    out = np.full(varied.shape[0], np.nan)
    np.testing.assert_array_equal(op.matvec(x, out=out), varied @ x)  # SciPy's own loop
    rounded = varied.astype(np.float32)
    single = autospmv.prepare(rounded, device="cpu", threads=1)
    assert_close(single @ x, reference(rounded, x), np.float64)  # float64 x: the numba loop
    assert_close(single @ x.astype(np.float32), reference(rounded, x), np.float32)
    assert "SciPy's compiled" not in autospmv.prepare(varied, device="cpu", threads=2).explain()
    grid = poisson2d(200)  # 40,000 rows of 3 to 5 nonzeros, almost all 5: 199,200 nonzeros
    assert grid.nnz >= scipy_product.SCIPY_MIN_NNZ
    assert scipy_product.length_spread(grid.indptr) < scipy_product.SCIPY_MIN_SPREAD
    assert "SciPy's compiled" not in autospmv.prepare(grid, device="cpu", threads=1).explain()
    small = signed_from_row_lengths(np.tile([1, 3, 5, 7, 9], 4_000), 1_000, 0)
    assert "SciPy's compiled" not in autospmv.prepare(small, device="cpu", threads=1).explain()
    long_rows = sp.random(2_000, 2_000, density=0.05, format="csr", random_state=1)
    assert long_rows.nnz >= scipy_product.SCIPY_MIN_NNZ
    assert not scipy_product.scipy_applies(
        "csr_scalar", autospmv.prepare(long_rows, device="cpu", threads=1).format, 1)
