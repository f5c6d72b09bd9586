"""The order of rows and columns (``prepare(A, order=...)``): every kernel in both orders
against SciPy, the order invisible to the caller (vectors, blocks, transposes, the diagonal,
pickling, the solvers), the cost rule of "auto", and the options' checks.

The CUDA cases run on a real GPU (``device`` fixture); ``test_ordering_simulator.py`` runs the
GPU gathers under numba-cuda's simulator.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv._decide import ordering
from matrices import TOLERANCE, numpy_device_csr, reference, relative_error
from ordering_cases import (WALKED, grid_laplacian, numbered_at_random, structure_of_a_plus_at,
                            walked_by_the_description, with_empty_rows)

KERNELS = list(autospmv.KERNELS)


SQUARE = {
    "grid_at_random": lambda: numbered_at_random(grid_laplacian(12)),
    "empty_rows": with_empty_rows,
    "no_nonzeros": lambda: sp.csr_matrix((20, 20)),
    "empty_0x0": lambda: sp.csr_matrix((0, 0)),
    "one_by_one": lambda: sp.csr_matrix(np.array([[3.0]])),
}


ORDERS = ["rcm", "bfs"]
"""The orders that renumber."""


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name", list(SQUARE))
def test_every_kernel_in_every_order_matches_scipy(device, name, kernel, dtype, order, rng):
    A = SQUARE[name]().astype(dtype)
    try:
        op = autospmv.prepare(A, kernel=kernel, device=device, order=order)
    except autospmv.FormatTooLargeError:
        pytest.skip(f"{kernel} refuses {name}")
    n = A.shape[0]
    assert op.order == order and sorted(op.permutation) == list(range(n))
    tolerance = TOLERANCE[np.dtype(dtype)]
    x = rng.standard_normal(n).astype(dtype)
    assert relative_error(op @ x, reference(A, x)) <= tolerance
    x64 = rng.standard_normal(n)  # a float64 x: computed in float64 whatever A's dtype
    y = op @ x64
    assert y.dtype == np.float64 and relative_error(y, reference(A, x64)) <= 1e-12
    out = np.empty(n, dtype=np.float64)
    assert op.matvec(x64, out=out) is out and relative_error(out, reference(A, x64)) <= 1e-12
    X = rng.standard_normal((n, 3))
    assert relative_error(op @ X, sp.csr_matrix(A, dtype=np.float64) @ X) <= 1e-12
    assert relative_error(op.T @ x64, reference(A.T, x64)) <= 1e-12
    assert relative_error(op.rmatvec(x64), reference(A.T, x64)) <= 1e-12
    assert relative_error(op.T.T @ x64, reference(A, x64)) <= 1e-12
    np.testing.assert_array_equal(op.diagonal(), A.diagonal())


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_pickled_operator_keeps_its_order(kernel, order, rng):
    A = numbered_at_random(grid_laplacian(10))
    op = autospmv.prepare(A, kernel=kernel, device="cpu", order=order)
    again = pickle.loads(pickle.dumps(op))
    assert again.order == order and again.kernel == kernel
    np.testing.assert_array_equal(again.permutation, op.permutation)
    x = rng.standard_normal(A.shape[0])
    assert relative_error(again @ x, reference(A, x)) <= 1e-12


def test_in_own_order_is_the_permuted_matrix(rng):
    A = numbered_at_random(grid_laplacian(10))
    op = autospmv.prepare(A, device="cpu", order="rcm")
    p = op.permutation
    x = rng.standard_normal(A.shape[0])
    inner = op.in_own_order()
    assert inner is op.in_own_order() and inner.order == "keep"
    assert relative_error(inner @ x, reference(A[p][:, p], x)) <= 1e-12
    np.testing.assert_array_equal(inner.diagonal(), A.diagonal()[p])
    keep = autospmv.prepare(A, device="cpu", order="keep")
    assert keep.in_own_order() is keep and keep.permutation is None


@pytest.mark.parametrize("order", ORDERS)
def test_explain_and_repr_name_the_order(order):
    A = numbered_at_random(grid_laplacian(10))
    op = autospmv.prepare(A, device="cpu", order=order)
    text = op.explain()
    assert f"order {order}" in text and "bandwidth" in text and "x sectors" in text
    assert f"order={order}" in repr(op)
    assert op.decision.order == order
    assert {"x_sectors_per_nnz_warp_before", "x_sectors_per_nnz_warp_after", "bandwidth_before",
            "bandwidth_after", "profile_before", "profile_after"} <= set(
        op.decision.order_features)
    assert op.decision.order_features["bandwidth_after"] < op.decision.order_features[
        "bandwidth_before"]
    assert op.decision.order_seconds > 0
    kept = autospmv.prepare(A, device="cpu", order="keep")
    assert kept.decision.order_seconds == 0.0


@pytest.mark.parametrize("order", ["auto", "keep"])
def test_rectangular_matrices_keep_their_order(device, order, rng):
    A = sp.random(30, 50, density=0.1, format="csr", random_state=2)
    op = autospmv.prepare(A, device=device, order=order, products=10**9)
    assert op.order == "keep" and op.permutation is None
    x = rng.standard_normal(50)
    assert relative_error(op @ x, reference(A, x)) <= 1e-12
    assert "order kept" in op.explain()


@pytest.mark.parametrize("order", ORDERS)
def test_renumbering_a_rectangular_matrix_is_refused(order):
    A = sp.random(30, 50, density=0.1, format="csr", random_state=2)
    with pytest.raises(ValueError, match=f"order='{order}' renumbers .* square matrix; A is "
                                         "30x50"):
        autospmv.prepare(A, device="cpu", order=order)


@pytest.mark.parametrize("order", ["RCM", "reverse", None, 1])
def test_unknown_order_is_refused(order):
    with pytest.raises(ValueError, match="unknown order"):
        autospmv.prepare(sp.eye(4, format="csr"), device="cpu", order=order)


@pytest.mark.parametrize("order", ORDERS)
def test_background_refuses_an_order(order):
    with pytest.raises(ValueError, match=f"order='{order}'"):
        autospmv.prepare(sp.eye(4, format="csr"), device="cpu", background=True, order=order)


def test_auto_without_a_hint_computes_nothing(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("computed without a products= hint")

    for order in ORDERS:
        monkeypatch.setitem(ordering.COMPUTE, order, refused)
    monkeypatch.setattr(ordering, "x_locality", refused)
    op = autospmv.prepare(numbered_at_random(grid_laplacian(10)), device="cpu")
    assert op.order == "keep" and "without a products= hint" in op.explain()


def test_auto_reorders_a_large_matrix_numbered_at_random_when_it_pays():
    A = numbered_at_random(grid_laplacian(300))  # 9·10⁴ rows
    choice, ordered = ordering.choose_order(A, "auto", 10**7, "cpu")
    assert choice.order == "bfs" and "chosen by the built-in cost rule" in choice.reason
    assert ordered.nnz == A.nnz and choice.features["x_sectors_per_nnz_warp_after"] < \
        choice.features["x_sectors_per_nnz_warp_before"]
    choice, ordered = ordering.choose_order(A, "auto", 10, "cpu")
    assert choice.kept and ordered is A and "less than the bfs order's estimated" in choice.reason


def test_auto_weighs_an_order_walked_on_the_gpu_at_the_walks_own_cost(monkeypatch):
    # Between the estimated cost of the walk and the renumbering on the GPU and the host's, a
    # products= hint pays for the one order and not for the other: "auto" computes the order
    # only where it is walked on the GPU. (Inside the solvers, without the gathers around each
    # product, which on a GPU eat the gain at this size.)
    A = numbered_at_random(grid_laplacian(400))
    monkeypatch.setattr(ordering, "runs_kernels", lambda csr: True)
    monkeypatch.setattr(ordering, "bfs_on_device", lambda csr: ordering.bfs(A))
    built_in = ordering.BUILT_IN_RULES["cuda"]  # not the rule a local GPU's model may carry
    on_gpu = numpy_device_csr(A)
    choice, _ = ordering.choose_order(A, "auto", 1, "cuda", gathers=False,
                                       rule=built_in, walk_on=on_gpu)
    walked = ordering.ordering_seconds(A.nnz, "bfs", walked_on_gpu=True, permuted_on_gpu=True)
    host = ordering.ordering_seconds(A.nnz, "bfs")
    assert choice.kept and f"estimated {walked:.3g} s (walked on the GPU)" in choice.reason
    features = choice.features
    best, _ = ordering.gain_per_product(
        A, ordering.Locality(features["x_sectors_per_nnz_warp_before"],
                             features["x_reach_before"]),
        ordering.Locality(features["x_sectors_floor"], features["x_reach_floor"]), "cuda",
        gathers=False)
    products = int(1.2 * walked / best) + 1
    assert walked < products * best < host
    host_choice, ordered = ordering.choose_order(A, "auto", products, "cuda",
                                                     gathers=False, rule=built_in)
    assert host_choice.kept and ordered is A and f"estimated {host:.3g} s" in host_choice.reason
    choice, _ = ordering.choose_order(A, "auto", products, "cuda", gathers=False,
                                       rule=built_in, walk_on=on_gpu)
    assert "computing the order (on the GPU)" in choice.reason


def test_auto_for_the_solvers_weighs_the_product_without_the_gathers():
    # On a GPU the two gathers around a product in A's own order eat the gain of RCM on this
    # grid; the solvers, iterating in the stored order, keep the gain.
    A = numbered_at_random(grid_laplacian(400))
    built_in = ordering.BUILT_IN_RULES["cuda"]  # not the rule a local GPU's model may carry
    choice, ordered = ordering.choose_order(A, "auto", 10**9, "cuda", rule=built_in)
    assert choice.kept and "after the gathers of x and y" in choice.reason
    choice, ordered = ordering.choose_order(A, "auto", 10**9, "cuda", gathers=False,
                                            rule=built_in)
    assert choice.order == "bfs" and "chosen by the built-in cost rule" in choice.reason
    assert "products in the stored order (inside the solvers)" in choice.reason
    assert ordered.nnz == A.nnz


def test_an_operator_for_the_solvers_times_the_product_in_its_stored_order(rng):
    A = numbered_at_random(grid_laplacian(300))
    op = autospmv.prepare(A, device="cpu", products=10**7, solver=True)
    timed = next(note for note in op.decision.notes if note.startswith("order: timed"))
    assert "bfs without the gathers, as inside the solvers" in timed
    x = rng.standard_normal(A.shape[0])
    assert relative_error(op @ x, reference(A, x)) <= 1e-12


def test_solver_must_be_a_bool():
    with pytest.raises(TypeError, match="solver must be True or False"):
        autospmv.prepare(sp.eye(4, format="csr"), device="cpu", solver=1)


def test_the_solvers_prepare_a_matrix_for_their_own_order(monkeypatch, rng):
    from autospmv._solve import driver

    seen = {}
    real = driver.prepare

    def recording(A, **options):
        seen.update(options)
        return real(A, **options)

    monkeypatch.setattr(driver, "prepare", recording)
    A = grid_laplacian(8)
    x, info = autospmv.cg(A, rng.standard_normal(A.shape[0]), rtol=1e-10)
    assert info == 0 and seen["solver"] is True and seen["products"] > 0


@pytest.mark.parametrize("gathers", [True, False])
def test_auto_computes_no_order_for_a_matrix_already_in_a_good_order(monkeypatch, gathers):
    for order in ORDERS:
        monkeypatch.setitem(ordering.COMPUTE, order, lambda *a: pytest.fail("an order computed"))
    A = grid_laplacian(300)
    choice, ordered = ordering.choose_order(A, "auto", 10**9, "cuda", gathers=gathers,
                                            rule=ordering.BUILT_IN_RULES["cuda"])
    assert choice.kept and ordered is A and "ideal order" in choice.reason


def test_auto_with_a_hint_on_the_cpu_matches_scipy(rng):
    A = numbered_at_random(grid_laplacian(150))
    op = autospmv.prepare(A, device="cpu", products=10**7)
    x = rng.standard_normal(A.shape[0])
    assert relative_error(op @ x, reference(A, x)) <= 1e-12
    assert op.decision.order_reason.startswith("order")


def test_the_permuted_copy_is_canonical():
    A = with_empty_rows(200)
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    perm = np.random.default_rng(5).permutation(200).astype(np.int32)
    inverse = ordering.inverse_of(perm)
    B = ordering.apply_order(A, perm, inverse)
    assert B.has_sorted_indices and np.all(np.diff(B.indices[B.indptr[5]:B.indptr[6]]) > 0)
    assert (B != A[perm][:, perm]).nnz == 0


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_the_permuted_copy_is_scipys_on_threads_or_not(parallel, index):
    """Rows short enough for insertion sort and longer ones, empty rows, both index widths;
    on numba's threads or not, the same arrays as SciPy's P A Pᵀ."""
    from autospmv.kernels.cpu.permute import permuted_csr
    from autospmv.kernels.cpu.sorting import INSERTION_SORT_MAX

    rng = np.random.default_rng(6)
    m = 3000
    A = sp.random(m, m, density=4 / m, format="csr", random_state=7)
    long_rows = sp.csr_matrix((np.ones(3 * INSERTION_SORT_MAX),
                               ([11] * INSERTION_SORT_MAX + [12] * 2 * INSERTION_SORT_MAX,
                                rng.choice(m, 3 * INSERTION_SORT_MAX, replace=False))),
                              shape=(m, m))
    keep = np.ones(m)
    keep[40:60] = 0  # empty rows
    A = (sp.diags(keep) @ (A + long_rows)).tocsr()
    A.eliminate_zeros()
    A.sort_indices()
    assert np.diff(A.indptr)[40:60].max() == 0 and np.diff(A.indptr).max() > INSERTION_SORT_MAX
    perm = rng.permutation(m).astype(index)
    inverse = ordering.inverse_of(perm)
    indptr, indices, data = permuted_csr(A.indptr.astype(index), A.indices.astype(index),
                                         A.data, perm, inverse, parallel=parallel)
    expected = A[perm][:, perm].tocsr()
    expected.sort_indices()
    assert indptr.dtype == indices.dtype == index
    np.testing.assert_array_equal(indptr, expected.indptr)
    np.testing.assert_array_equal(indices, expected.indices)
    np.testing.assert_array_equal(data, expected.data)


def test_features_of_a_band():
    A = sp.diags([1.0, 2.0, 3.0], [-2, 0, 1], shape=(10, 10), format="csr")
    assert ordering.bandwidth_and_profile(A) == (2.0, 16 / 10)


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres", "minres"])
@pytest.mark.parametrize("M", [None, "jacobi", "operator"])
def test_solvers_in_the_permuted_order_match_the_kept_order(method, M, rng):
    if method == "minres" and M is not None:
        pytest.skip("minres takes no preconditioner here")
    A = numbered_at_random(grid_laplacian(12))
    b = rng.standard_normal(A.shape[0])
    x0 = rng.standard_normal(A.shape[0])
    results = []
    for order in ("keep", *ORDERS):
        op = autospmv.prepare(A, device="cpu", order=order)
        precondition = (autospmv.prepare(sp.diags(1 / A.diagonal(), format="csr"),
                                         device="cpu") if M == "operator" else M)
        seen = []
        solve = getattr(autospmv, method)
        callback = None if method == "gmres" else seen.append
        x, info = solve(op, b, x0=x0, rtol=1e-10, M=precondition, callback=callback,
                        maxiter=500)
        assert info == 0
        assert np.linalg.norm(A @ x - b) <= 1e-8 * np.linalg.norm(b)
        if seen:  # callbacks see x in the caller's order
            assert np.linalg.norm(A @ seen[-1] - b) <= 1e-8 * np.linalg.norm(b)
        results.append(x)
    for result in results[1:]:
        assert relative_error(result, results[0]) <= 1e-6


def test_solver_preparing_a_matrix_itself(rng):
    A = numbered_at_random(grid_laplacian(12))
    b = rng.standard_normal(A.shape[0])
    x, info = autospmv.cg(A, b, rtol=1e-10)
    assert info == 0 and np.linalg.norm(A @ x - b) <= 1e-8 * np.linalg.norm(b)


def test_an_order_the_rule_chose_is_timed_against_the_matrix_as_given(rng):
    A = numbered_at_random(grid_laplacian(300))
    op = autospmv.prepare(A, device="cpu", order="auto", products=10**7)
    assert "timed back to back in both orders" in op.explain()
    timed = next(note for note in op.decision.notes if note.startswith("order: timed"))
    assert f"kept the {op.order} order" in timed and (op.permutation is None) == (
        op.order == "keep")
    x = rng.standard_normal(A.shape[0])
    assert relative_error(op @ x, reference(A, x)) <= 1e-12


def test_the_matrix_as_given_is_kept_where_its_product_times_faster(monkeypatch, rng):
    import autospmv._prepare.tuning as tuning

    monkeypatch.setattr(tuning, "faster_order", lambda in_order, kept, gathers=True: kept)
    A = numbered_at_random(grid_laplacian(300))
    op = autospmv.prepare(A, device="cpu", order="auto", products=10**9)
    assert op.order == "keep" and op.permutation is None
    assert "timed faster than in the order the cost rule chose" in op.explain()
    X = rng.standard_normal((A.shape[0], 3))
    assert relative_error(op @ X, reference(A, X)) <= 1e-12
    assert relative_error(op.T @ X[:, 0], reference(A.T.tocsr(), X[:, 0])) < \
        1e-12


def test_an_iteration_of_your_own_in_the_stored_order_gives_a_s_own_result():
    # The user guide's recipe: iterate on op.in_own_order(), permute in once and out once.
    A = numbered_at_random(grid_laplacian(15))
    op = autospmv.prepare(A, device="cpu", order="rcm")
    inner = op.in_own_order()
    perm, inverse = op.order_arrays(np)
    v = np.ones(A.shape[0])[perm]
    w = np.ones(A.shape[0])
    for _ in range(20):
        v = inner @ v
        v /= np.linalg.norm(v)
        w = A @ w
        w /= np.linalg.norm(w)
    assert relative_error(v[inverse], w) <= 1e-12


@pytest.mark.parametrize("index", [np.int32, np.int64])
@pytest.mark.parametrize("name", list(WALKED))
def test_the_bfs_order_is_the_walk_its_description_gives(name, index):
    from autospmv.kernels.cpu.ordering import rows_rcm
    from autospmv.kernels.cpu.sorting import INSERTION_SORT_MAX

    A = WALKED[name]()
    if name == "star":
        assert np.diff(A.indptr)[0] > INSERTION_SORT_MAX  # the argsort branch runs
    perm = rows_rcm(A.indptr.astype(index), A.indices.astype(index), A.shape[0])
    assert perm.dtype == np.int64
    assert perm.tolist() == walked_by_the_description(A)
    assert sorted(perm.tolist()) == list(range(A.shape[0]))


@pytest.mark.parametrize("n", [0, 1, 5])
def test_the_bfs_order_of_a_matrix_without_nonzeros(n):
    from autospmv.kernels.cpu.ordering import rows_rcm

    A = sp.csr_matrix((n, n))
    assert rows_rcm(A.indptr, A.indices, n).tolist() == list(range(n))[::-1]


def test_the_bfs_order_narrows_a_grid_numbered_at_random_as_rcm_does():
    side = 60
    A = numbered_at_random(grid_laplacian(side))
    features = {}
    for order in ORDERS:
        perm = ordering.COMPUTE[order](A).astype(A.indptr.dtype)
        B = ordering.apply_order(A, perm, ordering.inverse_of(perm))
        features[order] = ordering.order_features(B)
    assert ordering.bandwidth_and_profile(A)[0] > side * side / 2
    assert features["bfs"]["bandwidth"] <= side + 2  # a corner start: one diagonal per level
    assert features["bfs"]["x_sectors_per_nnz_warp"] <= \
        1.1 * features["rcm"]["x_sectors_per_nnz_warp"]


@pytest.mark.parametrize("order", ORDERS)
def test_an_order_of_a_gpu_matrix_is_computed_from_its_column_indices(order):
    A = numbered_at_random(grid_laplacian(12))
    stand_in = numpy_device_csr(A)
    np.testing.assert_array_equal(ordering.COMPUTE[order](stand_in),
                                  ordering.COMPUTE[order](A))


@pytest.mark.requires_gpu
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_cupy_matrix_is_renumbered_on_the_gpu(order, dtype, rng):
    cupy = pytest.importorskip("cupy")
    import cupyx.scipy.sparse as cusp

    empty = autospmv.prepare(cusp.csr_matrix((0, 0), dtype=dtype), device="cuda", order=order)
    assert empty.order == order and empty.shape == (0, 0)
    A = numbered_at_random(grid_laplacian(30)).astype(dtype)
    op = autospmv.prepare(cusp.csr_matrix(A), device="cuda", order=order)
    assert op.order == order and sorted(op.permutation) == list(range(A.shape[0]))
    x = rng.standard_normal(A.shape[0])
    y = op @ cupy.asarray(x)
    assert isinstance(y, cupy.ndarray)
    assert relative_error(cupy.asnumpy(y), reference(A, x)) <= 1e-12
    auto = autospmv.prepare(cusp.csr_matrix(A), device="cuda", products=10**9, solver=True)
    assert auto.order in ("keep", "bfs")
    assert relative_error(cupy.asnumpy(auto @ cupy.asarray(x)), reference(A, x)) <= 1e-12


@pytest.mark.parametrize("order", ORDERS)
def test_the_renumbered_copy_of_an_uploaded_host_matrix_becomes_the_operators(order,
                                                                             monkeypatch):
    """A host matrix uploaded for the GPU is renumbered on its copy there, which the operator
    then converts from, and the host matrix in the new order is that copy's (NumPy arrays stand
    in for the GPU's: the plumbing, not the GPU's work)."""
    from autospmv._prepare import device_input

    A = numbered_at_random(grid_laplacian(12))
    uploaded, renumbered = numpy_device_csr(A), []

    def permuted_stand_in(csr, perm, inverse):
        assert csr is uploaded, "renumbered something other than the uploaded copy"
        renumbered.append(numpy_device_csr(ordering.apply_order(csr.to_host(), perm, inverse)))
        return renumbered[-1]

    monkeypatch.setattr(device_input, "upload_for", lambda csr, device: uploaded)
    monkeypatch.setattr(device_input, "permuted_device_csr", permuted_stand_in)
    given = device_input.canonical_input(A, "cpu", order=order)
    assert given.order.order == order and len(renumbered) == 1
    assert given.uploaded is renumbered[0]
    want = ordering.apply_order(A, given.order.perm, given.order.inverse)
    assert isinstance(given.csr, sp.csr_matrix) and given.csr.has_canonical_format
    assert (given.csr != want).nnz == 0 and given.csr.dtype == want.dtype
    assert not given.borrowed and given.order.seconds > 0


@pytest.mark.requires_gpu
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_host_matrix_for_the_gpu_is_renumbered_on_its_copy_there(order, dtype, monkeypatch,
                                                                  rng):
    """prepare() of a host matrix in another order uploads it once and builds the operator from
    the copy renumbered on the GPU; the products match SciPy's in the caller's order."""
    cupy = pytest.importorskip("cupy")
    import autospmv._prepare.operator
    from autospmv._prepare import device_input

    def no_second_upload(csr):
        raise AssertionError("the matrix in its new order was uploaded again")

    A = numbered_at_random(grid_laplacian(30)).astype(dtype)
    uploads = []
    upload = device_input.upload_for
    monkeypatch.setattr(device_input, "upload_for",
                        lambda csr, device: uploads.append(csr) or upload(csr, device))
    monkeypatch.setattr(autospmv._prepare.operator, "upload_csr", no_second_upload)
    op = autospmv.prepare(A, device="cuda", order=order)
    assert op.order == order and len(uploads) == 1
    x = rng.standard_normal(A.shape[0])
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(dtype)]
    assert relative_error(cupy.asnumpy(op @ cupy.asarray(x)),
                          reference(A, x)) <= TOLERANCE[np.dtype(dtype)]
    in_own_order = op.in_own_order()
    want = ordering.apply_order(A, np.asarray(op.permutation),
                                ordering.inverse_of(np.asarray(op.permutation)))
    assert relative_error(in_own_order @ x, reference(want, x)) <= TOLERANCE[np.dtype(dtype)]


@pytest.mark.requires_gpu
@pytest.mark.parametrize("name", [name for name in WALKED if name != "unsorted_columns"])
def test_the_bfs_order_of_a_cupy_matrix_is_walked_on_the_gpu(name):
    """On a real GPU, as in the simulator (``test_device_order.py``): the host's walk of the
    graph of A + Aᵀ, with nothing of A's structure copied to the host."""
    pytest.importorskip("cupy")
    import cupyx.scipy.sparse as cusp

    from autospmv._prepare.device_input import canonical_device_csr

    A = WALKED[name]()
    A.sort_indices()
    device = canonical_device_csr(cusp.csr_matrix(A))
    perm = ordering.bfs_on_device(device)
    assert perm is not None and isinstance(perm, np.ndarray)
    assert perm.tolist() == walked_by_the_description(structure_of_a_plus_at(A))


def test_the_cpu_rule_prices_an_x_beyond_the_cache_by_its_misses(monkeypatch):
    A = numbered_at_random(grid_laplacian(40))
    x_bytes = A.shape[1] * 8
    everywhere = ordering.Locality(1.0)  # reads all of x
    cpu = dataclasses.replace(ordering.BUILT_IN_RULES["cpu"], window_bytes=0)
    gpu = ordering.product_seconds(A, everywhere, "cuda")
    monkeypatch.setattr(ordering, "cpu_cache_bytes", lambda: 64 * x_bytes)
    in_cache = ordering.product_seconds(A, everywhere, "cpu", cpu)
    assert ordering.cpu_miss_seconds(x_bytes) == 0.0
    monkeypatch.setattr(ordering, "cpu_cache_bytes", lambda: x_bytes)  # x outgrows its share
    assert ordering.cpu_miss_seconds(x_bytes) == pytest.approx(
        ordering.CPU_MISS_SECONDS * (1 - ordering.CPU_CACHE_SHARE))
    beyond = ordering.product_seconds(A, everywhere, "cpu", cpu)
    assert beyond == pytest.approx(in_cache + A.nnz * ordering.cpu_miss_seconds(x_bytes))
    assert ordering.product_seconds(A, everywhere, "cuda") == gpu  # no cache term on the GPU


def test_sectors_within_the_rules_x_window_cost_nothing():
    A = numbered_at_random(grid_laplacian(400))
    rule = dataclasses.replace(ordering.BUILT_IN_RULES["cuda"], latency_seconds=0.0)
    x_bytes = A.shape[1] * 8
    stream = ordering.product_seconds(A, ordering.Locality(0.0), "cuda", rule)
    near = ordering.Locality(1.0, reach=rule.window_bytes / 8 / 2 - 1)  # fits the window
    assert ordering.window_miss(A, near.reach, rule) == 0.0
    assert ordering.product_seconds(A, near, "cuda", rule) == stream
    far = ordering.Locality(1.0, reach=10 * A.shape[1])  # all of x, the most a window spans
    assert ordering.window_bytes(A, far.reach) == x_bytes
    share = 1 - rule.window_bytes / x_bytes
    assert ordering.window_miss(A, far.reach, rule) == pytest.approx(share)
    assert ordering.product_seconds(A, far, "cuda", rule) == pytest.approx(
        stream + A.nnz * share * ordering.SECTOR_BYTES / rule.bytes_per_second)
    assert ordering.product_seconds(A, ordering.Locality(1.0), "cuda", rule) == pytest.approx(
        ordering.product_seconds(A, far, "cuda", rule))  # no reach: all of x


def test_auto_keeps_without_computing_an_order_where_the_rows_reach_little_of_x(monkeypatch):
    # Numbered at random within blocks of 400 rows: x's sectors scatter within each block, which
    # the caches hold, so no order can gain and none is computed.
    blocks = sp.block_diag([numbered_at_random(grid_laplacian(20), seed) for seed in range(400)],
                           format="csr")
    blocks.sort_indices()
    refused = lambda *args, **kwargs: pytest.fail("an order was computed")  # noqa: E731
    monkeypatch.setitem(ordering.COMPUTE, "bfs", refused)
    for device in ("cuda", "cpu"):
        choice, kept = ordering.choose_order(blocks, "auto", 10**9, device,
                                             rule=ordering.BUILT_IN_RULES[device])
        assert choice.kept and kept is blocks and "even an ideal order" in choice.reason
        assert choice.features["x_reach_before"] < 400
        assert choice.features["x_sectors_per_nnz_warp_before"] > 2 * choice.features[
            "x_sectors_floor"]


def test_the_cpu_cache_is_the_largest_level_linux_describes(tmp_path):
    from autospmv._support import devices

    for index, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "64K"),
                                                 (2, "Unified", "1024K"), (3, "Unified", "32M"),
                                                 (4, "Unified", "unreadable")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert devices.cpu_cache_bytes(str(tmp_path)) == 32 << 20
    assert devices.cpu_cache_bytes(str(tmp_path / "nowhere")) == devices.DEFAULT_CPU_CACHE_BYTES
    assert devices.cpu_cache_bytes() > 0


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("share", [0.0, 1e12])  # always the scatter, always the gather
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_forms_of_a_permutation_give_src_at_perm(monkeypatch, share, parallel, dtype, rng):
    from autospmv.kernels.cpu import permute

    monkeypatch.setattr(permute, "SCATTER_CACHE_SHARE", share)
    m = 70_000  # above the threads' threshold
    perm = rng.permutation(m).astype(np.int32)
    src = rng.standard_normal(m).astype(dtype)
    dst = np.full(m, np.nan, dtype=dtype)
    permute.permute(perm, ordering.inverse_of(perm), src, dst, parallel)
    np.testing.assert_array_equal(dst, src[perm])
    block = rng.standard_normal((m, 3)).astype(dtype)
    rows = np.full_like(block, np.nan)
    permute.permute(perm, ordering.inverse_of(perm), block, rows, parallel)
    np.testing.assert_array_equal(rows, block[perm])


@pytest.mark.parametrize("share", [0.0, 1e12])
def test_an_operator_in_another_order_by_either_form_matches_scipy(monkeypatch, share, rng):
    from autospmv.kernels.cpu import permute

    monkeypatch.setattr(permute, "SCATTER_CACHE_SHARE", share)
    A = numbered_at_random(grid_laplacian(300))  # 9·10⁴ rows: the threads' gathers
    op = autospmv.prepare(A, device="cpu", order="bfs")
    x = rng.standard_normal(A.shape[0])
    assert relative_error(op @ x, reference(A, x)) <= 1e-12
    assert relative_error(op.rmatvec(x), reference(A.T.tocsr(), x)) <= 1e-12
    x32 = x.astype(np.float32)
    assert relative_error(op @ x32, reference(A, x32)) <= 1e-12
    X = rng.standard_normal((A.shape[0], 4))
    assert relative_error(op @ X, A @ X) <= 1e-12


@pytest.mark.parametrize("order", ORDERS)
def test_measuring_the_candidates_times_them_in_the_order_chosen(order, rng):
    from pathlib import Path

    model = Path(__file__).resolve().parent.parent / "models" / \
        "cuda-nvidia-h100-80gb-hbm3-float64.json"  # a tree to take candidates from on the CPU
    A = numbered_at_random(grid_laplacian(40))
    op = autospmv.prepare(A, device="cpu", model=str(model), tune="measure", order=order)
    assert op.order == order and op.decision.tuning["kept"] == op.kernel
    assert len(op.decision.tuning["times_us"]) >= 2  # candidates were built and timed
    p = op.permutation
    predicted = autospmv.select(A[p][:, p], device="cpu", model=str(model))
    assert op.decision.tuning["predicted"] == predicted.kernel  # decided in the order chosen
    x = rng.standard_normal(A.shape[0])
    assert relative_error(op @ x, reference(A, x)) <= 1e-12
    assert relative_error(op.T @ x, reference(A.T.tocsr(), x)) <= 1e-12


def test_a_fitted_rule_decides_and_explain_names_it():
    from autospmv._decide.model.order_rule import OrderRule

    A = numbered_at_random(grid_laplacian(300))
    # a device slower than the built-in rule's GPU, with cheap gathers: the caller's order
    # gains on this grid, where the built-in rule (whose 5 µs launch bounds the product at
    # this size) keeps the order
    fast_gathers = OrderRule(bytes_per_second=3.0e11, latency_seconds=5e-7,
                             permutation_bytes_per_second=3.0e14, labels=40)
    choice, _ = ordering.choose_order(A, "auto", 10**9, "cuda", rule=fast_gathers)
    assert choice.order == "bfs"
    assert "chosen by the cost rule fitted to 40 labelled products" in choice.reason
    built_in, _ = ordering.choose_order(A, "auto", 10**9, "cuda",
                                        rule=ordering.BUILT_IN_RULES["cuda"])
    assert built_in.kept and "the built-in cost rule" in built_in.reason


def test_prepare_reads_the_order_rule_of_the_model_that_decides(tmp_path):
    from autospmv._decide.model.lookup import find_model, load_model
    from autospmv._decide.model.order_rule import OrderRule

    shipped = find_model("cuda", dtype="float64")
    model = load_model(shipped.path)
    model.order_rule = OrderRule(bytes_per_second=1e9, latency_seconds=1e-6, labels=7)
    path = tmp_path / "model.json"
    model.to_json(path)
    assert ordering.rule_for("cuda", str(path), np.float64) == model.order_rule
    assert ordering.rule_for("cpu", None, np.float64) == ordering.BUILT_IN_RULES["cpu"]
    A = numbered_at_random(grid_laplacian(40))
    op = autospmv.prepare(A, device="cpu", model=str(path), products=10**9)
    assert "fitted to 7 labelled products" in op.explain()


def test_the_reach_is_how_far_from_its_row_a_row_reads_x():
    from autospmv._decide.features.sampling import x_reach
    from autospmv._support.validation import canonicalize

    grid = canonicalize(grid_laplacian(30))  # columns i, i ± 1 and i ± 30: 2 of 5 at 30
    assert x_reach(grid) == 30.0
    assert x_reach(canonicalize(numbered_at_random(grid_laplacian(30)))) > 200
    assert x_reach(canonicalize(sp.identity(50, format="csr"))) == 0.0
    assert x_reach(canonicalize(sp.csr_matrix((7, 7)))) == 0.0
    wide = canonicalize(sp.csr_matrix(np.ones((3, 1000))))  # row i reads every column
    assert x_reach(wide) == pytest.approx(np.quantile(
        np.abs(np.arange(1000)[None, :] - np.arange(3)[:, None]), 0.9))


def test_orders_timed_close_together_are_timed_again(monkeypatch):
    from autospmv._prepare import tuning
    from autospmv._support import timing

    A = numbered_at_random(grid_laplacian(30))
    renumbered = autospmv.prepare(A, device="cpu", order="bfs")
    kept = autospmv.prepare(A, device="cpu", order="keep")
    plans = []

    class Scripted:  # each timing of both orders gives the next of the script's medians
        def __init__(self, *args, **kwargs):
            pass

        def time_all(self, ops):
            times = plans.pop(0)
            return {key: {"b2b": {"median": times[key]}} for key in ops}

    monkeypatch.setattr(timing, "Bench", Scripted)
    plans[:] = [{"bfs": 10.0, "keep": 9.8}, {"bfs": 9.0, "keep": 9.9}]  # a disturbed first
    assert tuning.faster_order(renumbered, kept) is renumbered and not plans
    assert "the least of 2 timings each" in renumbered.decision.notes[-1]
    plans[:] = [{"bfs": 10.0, "keep": 20.0}, {"bfs": 30.0, "keep": 10.0}]  # far apart: once
    assert tuning.faster_order(renumbered, kept) is renumbered and len(plans) == 1
    assert "timings each" not in renumbered.decision.notes[-1]
    # A's own order faster, against the rule's choice: timed again, even far apart
    plans[:] = [{"bfs": 20.0, "keep": 10.0}, {"bfs": 8.0, "keep": 10.0}]
    assert tuning.faster_order(renumbered, kept) is renumbered and not plans
    assert "the least of 2 timings each" in renumbered.decision.notes[-1]
    plans[:] = [{"bfs": 20.0, "keep": 10.0}, {"bfs": 19.0, "keep": 10.0}, {"bfs": 1.0}]
    assert tuning.faster_order(renumbered, kept) is kept and len(plans) == 1  # at most twice
    assert "the least of 2 timings each" in kept.decision.notes[-1]
