"""autospmv.distributed on a local Dask cluster of two CPU workers, compared with SciPy.

One cluster serves the whole module: ``LocalCluster(n_workers=2, threads_per_worker=1,
processes=True)``. Worker processes rather than threads, because that is what a
``LocalCUDACluster`` uses, so everything that travels (blocks, decisions, vectors, the ranks'
socket connections) is really serialised here; one test runs in-process workers. The client is
not made the default client, so that :func:`prepare` without ``client=`` can be tested.

Decisions use a trained model given explicitly (``model=``, :data:`CPU_MODEL`), so that they do
not depend on models retrained on the machine that runs the tests.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

import autospmv  # noqa: E402
from autospmv import distributed as adist  # noqa: E402

from matrices import (DTYPE_IDS, DTYPES, FAMILY, TOLERANCE, diagonal, one_long_row,  # noqa: E402
                      poisson2d, random_matrix, random_vector, reference, relative_error,
                      spd_band)

CPU_MODEL = str(Path(__file__).resolve().parent.parent / "models"
                / "cuda-nvidia-h100-80gb-hbm3-float64.json")
"""A trained tree for the CPU blocks to decide with (none ships for the CPU, whose rule runs one
kernel; a tree reads the same features on any device, so a GPU model serves to show that each
block decides for itself)."""


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=50)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def prepare(A, client, **kwargs):
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("model", CPU_MODEL)
    return adist.prepare(A, client=client, **kwargs)


def check_product(op, A, dtype, seed=0):
    x = random_vector(np.random.default_rng(seed), A.shape[1], dtype)
    y = op @ x
    assert isinstance(y, np.ndarray) and y.shape == (A.shape[0],) and y.dtype == dtype
    assert relative_error(y, reference(A, x)) <= TOLERANCE[np.dtype(dtype)]
    return y


def band(n, offsets=(1, 3, 7), seed=0):
    return spd_band(n, offsets, seed)


FLOAT32_CASES = ["empty_0x0", "row_1x300", "poisson2d_169", "rect_61x37", "power_law_500"]
"""The family's float32 cases (the blocks and the exchange do not depend on the dtype)."""


@pytest.mark.parametrize("name, dtype",
                         [(name, np.float64) for name in FAMILY]
                         + [(name, np.float32) for name in FLOAT32_CASES],
                         ids=[f"{name}-float64" for name in FAMILY]
                         + [f"{name}-float32" for name in FLOAT32_CASES])
def test_family_equals_scipy(client, name, dtype):
    A = FAMILY[name]().astype(dtype)
    op = prepare(A, client)
    assert op.shape == A.shape and op.dtype == dtype and len(op.parts) == 2
    check_product(op, A, dtype)
    canonical = sp.csr_matrix(A)
    canonical.sum_duplicates()
    assert op.nnz == canonical.nnz == sum(p.owned_nnz + p.ghost_nnz for p in op.parts)
    assert [p.rows for p in op.parts] == [(0, op.parts[0].rows[1]),
                                          (op.parts[0].rows[1], A.shape[0])]


def test_row_partition_balances_nonzeros():
    A = one_long_row(300, 3000, 123, 3, 4)  # one row of 3000 among rows of 3
    work = np.concatenate(([0], np.cumsum(np.diff(A.indptr) + 1)))  # nonzeros + 1 per row
    for parts in (2, 3, 7):
        bounds = adist.row_partition(A.indptr, parts)
        assert bounds.size == parts + 1 and bounds[0] == 0 and bounds[-1] == 300
        assert np.all(np.diff(bounds) >= 0)
        for k, bound in enumerate(bounds[1:-1], start=1):
            target = work[-1] * k / parts
            assert abs(work[bound] - target) == np.min(np.abs(work - target))
    np.testing.assert_array_equal(adist.row_partition(A.indptr, 3), [0, 123, 124, 300])
    np.testing.assert_array_equal(adist.row_partition(np.array([0]), 3), [0, 0, 0, 0])
    np.testing.assert_array_equal(adist.even_bounds(10, 3), [0, 3, 6, 10])


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_split_into_owned_and_ghost_blocks(rank):
    from autospmv.distributed._partition import split_block

    A = random_matrix(90, 90, 0.08, 3)
    col_bounds = np.array([0, 20, 50, 90])
    rows = slice(30 * rank, 30 * rank + 30)
    block = A[rows]
    split = split_block(block, col_bounds, rank)
    start, stop = col_bounds[rank], col_bounds[rank + 1]
    dense = block.toarray()
    np.testing.assert_array_equal(split.owned.toarray(), dense[:, start:stop])
    outside = dense.copy()
    outside[:, start:stop] = 0
    expected_columns = np.flatnonzero(np.any(outside != 0, axis=0))
    np.testing.assert_array_equal(split.ghost_columns, expected_columns)
    np.testing.assert_array_equal(split.ghost_rows, np.flatnonzero(np.any(outside != 0, axis=1)))
    np.testing.assert_array_equal(split.ghost.toarray(),
                                  outside[np.ix_(split.ghost_rows, split.ghost_columns)])
    for owner, (a, b) in split.sources.items():
        assert owner != rank
        columns = split.ghost_columns[a:b]
        assert np.all((columns >= col_bounds[owner]) & (columns < col_bounds[owner + 1]))
    assert sum(b - a for a, b in split.sources.values()) == split.ghost_columns.size


@pytest.mark.parametrize("n, size", [(50, 400), (1 << 22, 300)], ids=["marked", "sorted"])
def test_ghost_columns_renumbered_in_order(n, size):
    """The ghost columns' distinct values and each entry's position among them, as NumPy's
    unique gives them, both by marking the columns and by sorting them."""
    from autospmv.distributed._partition import _renumber

    columns = np.random.default_rng(n).integers(0, n, size)
    distinct, positions = _renumber(columns, n)
    expected, inverse = np.unique(columns, return_inverse=True)
    np.testing.assert_array_equal(distinct, expected)
    np.testing.assert_array_equal(positions, inverse)


def test_ghost_columns_of_a_very_wide_matrix():
    """Few entries in many columns: the ghost columns are found by sorting, not marking."""
    from autospmv.distributed._partition import split_block

    n = 3_000_000
    block = sp.csr_matrix((np.ones(4), [5, 2_999_999, 1_000_000, 7], [0, 2, 4]), shape=(2, n))
    block.sum_duplicates()
    split = split_block(block, np.array([0, 10, n]), 0)
    np.testing.assert_array_equal(split.ghost_columns, [1_000_000, 2_999_999])
    np.testing.assert_array_equal(split.ghost.toarray(), [[0, 1], [1, 0]])
    assert split.sources == {1: (0, 2)}
    np.testing.assert_array_equal(split.owned.indices, [5, 7])


def test_only_ghost_entries_are_exchanged_and_explained(client):
    n = 2000
    A = band(n, offsets=(1, 5))
    op = prepare(A, client)
    (r0, r1), (c0, c1) = op.parts[0].rows, op.parts[0].cols
    assert (r0, r1) == (c0, c1)  # a square matrix: x is cut like the rows
    # Rank 0 needs x[r1:r1 + 5] from rank 1 (the band reaches 5 columns past its rows), and
    # rank 1 needs x[r1 - 5:r1] from rank 0; only the 5 rows at the edge have ghost entries.
    assert op.parts[0].receives_from == {1: 5} and op.parts[1].receives_from == {0: 5}
    assert op.parts[0].sends_to == {1: 5} and op.parts[1].sends_to == {0: 5}
    assert op.parts[0].ghost_rows == 5 and op.parts[0].ghost_columns == 5
    assert set(op.parts[0].build_seconds) == {"check", "split", "agree", "prepare_owned",
                                              "prepare_ghost"}
    assert op.comm == "socket" and op.comm_reason == "CPU workers"
    text = op.explain()
    assert text.startswith(f"DistributedOperator {n}x{n} float64 nnz={A.nnz}: 2 ranks, ghost "
                           "exchange through socket (CPU workers)")
    for part in op.parts:
        assert f"rank {part.index}: rows {part.rows[0]}:{part.rows[1]} " in text
        assert part.decision.explain().splitlines()[0] in text
        assert part.ghost_decision.explain().splitlines()[0] in text
    check_product(op, A, np.float64)


def test_each_block_decides_for_itself(client):
    # Rows 0-299: one dense row among short ones; rows 300-599: a diagonal.
    A = sp.csr_matrix(sp.vstack([one_long_row(300, 3000, 123, 3, 4),
                                 diagonal(3000, 5)[:300]]))
    op = prepare(A, client)
    for part in op.parts:
        owned = sp.csr_matrix(A[slice(*part.rows), slice(*part.cols)])
        expected = autospmv.select(owned, device="cpu", model=CPU_MODEL)
        assert (part.kernel, part.decision.path) == (expected.kernel, expected.path)
    # The model gives the two owned blocks different kernels (if a retrained model stops doing
    # so, choose another pair of blocks: the point is that blocks decide independently).
    assert len(set(op.kernels)) == 2, op.kernels
    check_product(op, A, np.float64)


@pytest.mark.parametrize("kernel", ["coo", "ell"])
def test_keywords_reach_both_blocks(client, kernel):
    A = poisson2d(20)
    op = prepare(A, client, kernel=kernel)
    assert op.kernels == [kernel] * 2
    assert [p.ghost_kernel for p in op.parts] == [kernel] * 2
    assert all(p.decision.source == p.ghost_decision.source == "forced" for p in op.parts)
    check_product(op, A, np.float64)


@pytest.mark.parametrize("order", ["rcm", "bfs"])
def test_each_rank_renumbers_its_owned_block(client, order):
    # A band numbered at random: each rank's owned (square) block renumbered by the order, its
    # ghost block (rectangular) in its own order; products and cg as SciPy's.
    A = band(600, offsets=(1, 2, 9))
    p = np.random.default_rng(4).permutation(600)
    A = sp.csr_matrix(A[p][:, p])
    op = prepare(A, client, order=order)
    assert [part.decision.order for part in op.parts] == [order] * 2
    assert all(part.ghost_decision.order == "keep" for part in op.parts)
    check_product(op, A, np.float64)
    b = np.random.default_rng(5).standard_normal(600)
    x_ref, info_ref, iterations = scipy_iterations(spla.cg, A, b, rtol=1e-10)
    x, info = adist.cg(op, b, rtol=1e-10)
    assert info == info_ref == 0 and op.last_solve["iterations"] == iterations
    np.testing.assert_allclose(x, x_ref, rtol=1e-8, atol=1e-12)


def test_distributed_vectors_stay_on_the_workers(client):
    A = band(500)
    op = prepare(A, client)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(500), rng.standard_normal(500)
    va, vb = op.vector(a), op.vector(b)
    assert isinstance(va, adist.DistributedVector) and va.shape == (500,)
    assert va.layout.sizes == tuple(p.cols[1] - p.cols[0] for p in op.parts)
    np.testing.assert_array_equal(va.gather(), a)
    np.testing.assert_allclose((va + vb).gather(), a + b, rtol=1e-15)
    np.testing.assert_allclose((va - 2.0 * vb).gather(), a - 2.0 * b, rtol=1e-15)
    np.testing.assert_allclose(va.axpy(0.5, vb).gather(), a + 0.5 * b, rtol=1e-15)
    np.testing.assert_allclose((-va).gather(), -a)
    assert va.dot(vb) == pytest.approx(a @ b, rel=1e-13)
    assert va.norm() == pytest.approx(np.linalg.norm(a), rel=1e-13)
    # Products of distributed vectors are distributed vectors: A @ (A @ a) without a gather.
    y = op @ (op @ va)
    assert isinstance(y, adist.DistributedVector)
    assert relative_error(y.gather(), A @ (A @ a)) <= 1e-12
    # dask in and out.
    as_dask = y.to_dask()
    assert as_dask.chunks == (y.layout.sizes,)
    np.testing.assert_array_equal(client.compute(as_dask).result(), y.gather())
    back = adist.DistributedVector.from_dask(da.from_array(a, chunks=77), op.col_layout, client)
    np.testing.assert_array_equal(back.gather(), a)
    zeros = op.zeros()
    assert zeros.dtype == np.float64 and not zeros.gather().any()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["poisson2d_169", "huge_row_among_short_300x3000",
                                  "empty_0x7", "rect_37x61"])
def test_dask_array_in_dask_array_out(client, name, dtype):
    A = FAMILY[name]().astype(dtype)
    op = prepare(A, client)
    x = random_vector(np.random.default_rng(1), A.shape[1], np.float64)
    y = op @ da.from_array(x, chunks=max(1, A.shape[1] // 4))
    assert isinstance(y, da.Array) and y.dtype == np.float64  # SciPy's: float64 x rules
    assert y.chunks == (tuple(p.rows[1] - p.rows[0] for p in op.parts),)
    values = client.compute(y).result()
    assert relative_error(values, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    same = op @ da.from_array(x.astype(dtype), chunks=max(1, A.shape[1] // 4))
    assert same.dtype == dtype and client.compute(same).result().dtype == dtype


def scipy_iterations(solver, A, b, **kwargs):
    count = [0]
    x, info = solver(A, b, callback=lambda _: count.__setitem__(0, count[0] + 1), **kwargs)
    return x, info, count[0]


def test_cg_runs_on_the_workers_as_scipy_does(client):
    A = band(3000, offsets=(1, 2, 40))
    op = prepare(A, client)
    b = np.random.default_rng(2).standard_normal(3000)
    x_ref, info_ref, iterations = scipy_iterations(spla.cg, A, b, rtol=1e-10)
    x, info = adist.cg(op, b, rtol=1e-10)
    assert isinstance(x, np.ndarray) and info == info_ref == 0
    assert op.last_solve == {"iterations": iterations, "info": 0}
    np.testing.assert_allclose(x, x_ref, rtol=1e-8, atol=1e-12)
    # From a distributed right-hand side and start: x stays distributed.
    x0 = np.random.default_rng(3).standard_normal(3000)
    xd, info = adist.cg(op, op.vector(b, side="rows"), x0=op.vector(x0), rtol=1e-10)
    assert isinstance(xd, adist.DistributedVector) and info == 0
    x_ref0, _, iterations0 = scipy_iterations(spla.cg, A, b, x0=x0, rtol=1e-10)
    assert op.last_solve["iterations"] == iterations0
    np.testing.assert_allclose(xd.gather(), x_ref0, rtol=1e-8, atol=1e-12)
    # Not converged within maxiter: SciPy's info (the iterations run).
    _, info = adist.cg(op, b, rtol=1e-14, maxiter=3)
    assert info == 3 and op.last_solve["iterations"] == 3
    # A zero right-hand side is its own solution.
    x, info = adist.cg(op, np.zeros(3000))
    assert info == 0 and not x.any()


def test_a_solution_is_handed_over_once(client):
    """A solve keeps x on each worker until a second task takes it: dropping x at once leaves
    nothing behind, and the next collective task runs after the hand-over."""
    from autospmv.distributed import _solvers

    A = band(600)
    op = prepare(A, client)
    b = op.vector(np.ones(600), side="rows")
    adist.cg(op, b, rtol=1e-10)  # x dropped at once
    y = op @ b
    np.testing.assert_allclose(y.gather(), A @ np.ones(600), rtol=1e-13)
    held = client.run(lambda: len(_solvers._SOLUTIONS))
    assert held == {worker: 0 for worker in op.workers}


def test_an_unknown_side_is_refused_by_vector_and_zeros_alike(client):
    op = prepare(band(60), client)
    for make in (lambda: op.vector(np.ones(60), side="diagonal"),
                 lambda: op.zeros(side="diagonal")):
        with pytest.raises(ValueError, match="side must be 'columns' or 'rows'; got 'diagonal'"):
            make()


@pytest.mark.parametrize("maxiter, x0", [(None, False), (None, True), (5, False)])
def test_cg_on_one_device_as_scipy_does(maxiter, x0):
    """The rank function on one device without Dask (scalars in device arrays, the stop flag
    read after each iteration on the CPU) stops where SciPy stops, with SciPy's x."""
    from autospmv.distributed._solvers import LocalRank, cg_on

    A = band(2000, offsets=(1, 2, 40))
    b = np.random.default_rng(7).standard_normal(2000)
    start = np.random.default_rng(8).standard_normal(2000) if x0 else None
    x_ref, info_ref, iterations = scipy_iterations(spla.cg, A, b, x0=start, rtol=1e-10,
                                                   maxiter=maxiter)
    local = LocalRank(autospmv.prepare(A, device="cpu", model=CPU_MODEL))
    x, info, count = cg_on(local, b, start, rtol=1e-10, maxiter=maxiter or 20000)
    assert (info, count) == (info_ref, iterations)
    np.testing.assert_allclose(x, x_ref, rtol=1e-8, atol=1e-12)


@pytest.mark.slow
def test_gmres_and_minres_run_on_the_workers_as_scipy_does(client):
    n = 2000
    N = (band(n, offsets=(1, 9)) + sp.diags(np.linspace(0.1, 0.9, n - 4), 4)).tocsr()
    op = prepare(N, client)
    b = np.random.default_rng(5).standard_normal(n)
    counted = []
    x_ref, info_ref = spla.gmres(N, b, rtol=1e-10, restart=15, callback_type="pr_norm",
                                 callback=lambda r: counted.append(r))
    x, info = adist.gmres(op, b, rtol=1e-10, restart=15)
    assert info == info_ref == 0 and op.last_solve["iterations"] == len(counted)
    np.testing.assert_allclose(x, x_ref, rtol=1e-7, atol=1e-10)
    S = band(n, offsets=(1, 2, 40))
    op = prepare(S, client)
    x_ref, info_ref, iterations = scipy_iterations(spla.minres, S, b, rtol=1e-10)
    x, info = adist.minres(op, b, rtol=1e-10)
    assert info == info_ref == 0 and op.last_solve["iterations"] == iterations
    np.testing.assert_allclose(x, x_ref, rtol=1e-7, atol=1e-10)


def test_one_task_per_worker_in_one_graph(client):
    from autospmv.distributed._tasks import on_workers

    def where(value, *, offset):
        return distributed.get_worker().address, value + offset

    workers = sorted(client.nthreads())
    for order in (workers, workers[::-1], [workers[1]] * 3):
        futures = on_workers(client, where, order, range(len(order)), offset=10)
        assert client.gather(futures) == [(w, k + 10) for k, w in enumerate(order)]
    with pytest.raises(ValueError, match="one argument per worker"):
        on_workers(client, where, workers, [1])


def test_bicgstab_runs_on_the_workers_as_scipy_does(client):
    n = 2000
    A = (band(n, offsets=(1, 9)) + sp.diags(np.linspace(0.1, 0.9, n - 4), 4)).tocsr()
    op = prepare(A, client)
    b = np.random.default_rng(4).standard_normal(n)
    x_ref, info_ref, iterations = scipy_iterations(spla.bicgstab, A, b, rtol=1e-10)
    x, info = adist.bicgstab(op, b, rtol=1e-10)
    assert info == info_ref == 0
    assert op.last_solve["iterations"] == iterations
    np.testing.assert_allclose(x, x_ref, rtol=1e-7, atol=1e-10)
    assert relative_error(A @ x, b) < 1e-9


def band_rows(start, stop, n=1200):
    """Rows start:stop of :func:`band` (made on the workers)."""
    return band(n)[start:stop]


def test_blocks_made_on_the_workers(client, tmp_path):
    A = band(1200)
    by_function = prepare(band_rows, client, shape=(1200, 1200))
    assert [p.rows for p in by_function.parts] == [(0, 600), (600, 1200)]
    check_product(by_function, A, np.float64)
    uneven = prepare(band_rows, client, shape=(1200, 1200), row_bounds=[0, 100, 1200])
    assert [p.rows for p in uneven.parts] == [(0, 100), (100, 1200)]
    assert [p.cols for p in uneven.parts] == [(0, 100), (100, 1200)]
    check_product(uneven, A, np.float64)
    paths = []
    for k, rows in enumerate([slice(0, 700), slice(700, 1200)]):
        paths.append(tmp_path / f"part{k}.npz")
        sp.save_npz(paths[-1], A[rows])
    from_files = prepare([str(p) for p in paths], client)
    assert [p.rows for p in from_files.parts] == [(0, 700), (700, 1200)]
    check_product(from_files, A, np.float64)
    x, info = adist.cg(from_files, np.ones(1200), rtol=1e-10)
    assert info == 0 and relative_error(A @ x, np.ones(1200)) < 1e-9


def test_one_rank(client):
    A = random_matrix(300, 200, 0.03, 7)
    op = prepare(A, client, parts=1)
    assert len(op.parts) == 1 and op.comm == "self"
    assert op.parts[0].ghost_decision is None and op.parts[0].ghost_nnz == 0
    assert "ghost block: none" in op.explain()
    check_product(op, A, np.float64)


def test_map_ranks_runs_spmd_code(client):
    A = band(400)
    op = prepare(A, client)
    x = op.vector(np.arange(400.0))

    def residual_norm(rank, chunk):
        return rank.rank, rank.size, rank.norm(rank.matvec(chunk) - chunk)

    results = client.gather(op.map_ranks(residual_norm, x))
    expected = np.linalg.norm(A @ np.arange(400.0) - np.arange(400.0))
    assert [r[:2] for r in results] == [(0, 2), (1, 2)]
    assert all(r[2] == pytest.approx(expected, rel=1e-13) for r in results)


def test_columns_lists_and_dtypes(client):
    A = random_matrix(30, 20, 0.2, 9)
    op = prepare(A, client)
    x = np.arange(20, dtype=np.float64)
    assert op.matvec(x.reshape(-1, 1)).shape == (30, 1)
    np.testing.assert_allclose(op.matvec(list(x)), A @ x, rtol=1e-12)
    X = np.random.default_rng(3).random((20, 3))
    np.testing.assert_allclose(op @ X, A @ X, rtol=1e-12)
    single = prepare(poisson2d(12).astype(np.float32), client)
    x = np.random.default_rng(4).standard_normal(144)
    assert single.dtype == np.float32 and (single @ x).dtype == np.float64
    assert (single @ x.astype(np.float32)).dtype == np.float32


def test_the_operator_pickles_without_its_client(client):
    A = random_matrix(40, 30, 0.2, 5)
    op = prepare(A, client)
    data = pickle.dumps(op)
    x = np.arange(30.0)
    with pytest.raises(ValueError, match="unpickled DistributedOperator needs a Dask client"):
        pickle.loads(data) @ x
    with client.as_current():
        copy = pickle.loads(data)
        np.testing.assert_allclose(copy @ x, A @ x, rtol=1e-12)
        assert copy.kernels == op.kernels


def test_errors(client):
    A = random_matrix(30, 20, 0.2, 9)
    with pytest.raises(ValueError, match="needs a Dask client: pass client="):
        adist.prepare(A, device="cpu")
    with pytest.raises(ValueError, match="parts must be a positive integer; got 0"):
        prepare(A, client, parts=0)
    with pytest.raises(ValueError, match="parts=3 ranks need as many workers"):
        prepare(A, client, parts=3)
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        prepare(A, client, device="gpu")
    with pytest.raises(ValueError, match=r"a block function needs shape=\(m, n\)"):
        prepare(band_rows, client)
    with pytest.raises(ValueError, match="row_bounds must be 3 non-decreasing integers"):
        prepare(band_rows, client, shape=(1200, 1200), row_bounds=[0, 1300, 1200])
    with pytest.raises(ValueError, match="give one part source per rank: 2"):
        prepare(["a.npz"], client)
    with pytest.raises(TypeError, match="A must be a SciPy sparse matrix"):
        prepare("matrix.npz", client)
    with pytest.raises(ValueError, match=r"must have shape \(600, 1200\); got \(600, 5\)"):
        prepare(lambda a, b: sp.csr_matrix((b - a, 5)), client, shape=(1200, 1200))
    op = prepare(A, client)
    with pytest.raises(ValueError, match="x has length 19, but the matrix has 20 columns"):
        op.matvec(np.ones(19))
    with pytest.raises(ValueError, match="x must be a vector of length 20; got a dask array"):
        op @ da.ones(21)
    with pytest.raises(ValueError, match="the solvers need a square operator; this one is 30x20"):
        adist.cg(op, np.ones(30))
    other = prepare(band(20), client, parts=1)
    with pytest.raises(ValueError, match="x is cut differently from the operator's columns"):
        op @ other.vector(np.ones(20))
    square = prepare(band(20), client)
    with pytest.raises(ValueError, match="x0 is cut differently from the operator's columns"):
        adist.cg(square, np.ones(20), x0=other.vector(np.ones(20)))
    with pytest.raises(ValueError, match="the two vectors are cut differently"):
        op.vector(np.ones(20)).dot(other.vector(np.ones(20)))
    with pytest.raises(NotImplementedError, match="prepare A.T"):
        op.rmatvec(np.ones(30))
    op.close()
    with pytest.raises(RuntimeError, match="was closed"):
        op @ np.ones(20)


def test_in_process_workers():
    """Workers sharing one process (``processes=False``, as in the docs): their CPU products
    take turns (the ranks' lock) while the ghost exchange goes on; products and cg are right."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0", silence_logs=50) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        A = band(800)
        op = prepare(A, client)
        check_product(op, A, np.float64)
        b = np.ones(800)
        _, _, iterations = scipy_iterations(spla.cg, A, b, rtol=1e-10)
        x, info = adist.cg(op, b, rtol=1e-10)
        assert info == 0 and op.last_solve["iterations"] == iterations


# --- hostile input and lost workers -------------------------------------------------------------

HANG_GUARD_S = 120
"""A call that hung before its fix is run under this bound (far above its time), so that a
regression fails the test instead of stalling the suite."""


def finishes(call):
    """``call()``'s result, or a failure when it hangs (see :data:`HANG_GUARD_S`)."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(timeout=HANG_GUARD_S)
    except concurrent.futures.TimeoutError:
        pytest.fail(f"still running after {HANG_GUARD_S} s: a rank's worker is blocked")
    finally:
        pool.shutdown(wait=False)


def still_usable(client):
    """A prepare and a product on the same cluster give SciPy's result."""
    A = band(300)
    finishes(lambda: check_product(prepare(A, client), A, np.float64))


def test_a_column_index_out_of_range_is_refused_as_prepare_refuses_it(client):
    A = random_matrix(200, 200, 0.05, 1)
    A.indices = A.indices.copy()
    A.indices[3] = 10 ** 9
    message = "column index 1000000000 out of range for 200 columns"
    with pytest.raises(ValueError, match=message):
        autospmv.prepare(A, device="cpu")
    with pytest.raises(ValueError, match=message):
        prepare(A, client)


@pytest.mark.parametrize("spoil, message", [
    (lambda block: block.indices.__setitem__(2, 10 ** 7),
     r"rank 1's row block \(rows 150:300\): malformed CSR matrix: column index 10000000 out of "
     r"range for 300 columns"),
    (lambda block: block.indices.__setitem__(0, -4),
     r"rank 1's row block \(rows 150:300\): malformed CSR matrix: negative column index -4"),
    (lambda block: block.indptr.__setitem__(5, 10 ** 6),
     r"rank 1's row block \(rows 150:300\): malformed CSR matrix: indptr decreases"),
], ids=["column past the end", "negative column", "indptr"])
def test_a_malformed_row_block_is_refused_naming_its_rank(client, spoil, message):
    """The block function's block of rank 1 only is malformed: refused before any split reads
    it (a split used to write out of bounds there), and every rank stays usable."""
    A = band(300)

    def rows(start, stop):
        block = A[start:stop].copy()
        if start:
            block.indices, block.indptr = block.indices.copy(), block.indptr.copy()
            spoil(block)
        return block

    with pytest.raises(ValueError, match=message):
        finishes(lambda: prepare(rows, client, shape=A.shape))
    still_usable(client)


def test_a_part_source_that_is_not_an_npz_file_names_its_rank(client, tmp_path):
    A = band(200)
    good = tmp_path / "part0.npz"
    sp.save_npz(good, A[:100])
    broken = tmp_path / "part1.npz"
    broken.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="rank 1's part source .*part1.npz.* cannot be read"):
        finishes(lambda: prepare([str(good), str(broken)], client))
    still_usable(client)


def test_a_block_function_failing_on_one_rank_leaves_every_rank_usable(client):
    """Rank 0's block was made, rank 1's function raised: rank 0 used to wait for rank 1 in
    the exchange, and the next prepare on the cluster hung behind it."""
    A = band(300)

    def rows(start, stop):
        if start:
            raise RuntimeError("no block for rank 1")
        return A[start:stop]

    with pytest.raises(RuntimeError, match="no block for rank 1"):
        finishes(lambda: prepare(rows, client, shape=A.shape))
    still_usable(client)


def test_a_kernel_refusing_one_rank_only_leaves_every_rank_usable(client):
    """ELL fits rank 0's block (a diagonal) and not rank 1's (one long row): rank 1 fails after
    the exchange; its communicator is released on every rank."""
    n = 20_000
    A = (sp.eye(n, format="lil") * 2.0)
    A[n - 10, :] = 1.0
    A = sp.csr_matrix(A)
    with pytest.raises(autospmv.FormatTooLargeError, match="ELL would need"):
        finishes(lambda: prepare(A, client, kernel="ell"))
    still_usable(client)


def test_longdouble_is_refused_on_every_distributed_path(client):
    A = band(200)
    op = prepare(A, client)
    x = np.ones(200, dtype=np.longdouble)
    message = (r"must have dtype float32 or float64; got float(128|96), which autospmv's "
               r"kernels do not compute in; convert it first")
    if np.dtype(np.longdouble) == np.float64:
        pytest.skip("longdouble is float64 here")
    for call in (lambda: op @ x, lambda: op.vector(x), lambda: op @ da.from_array(x),
                 lambda: adist.cg(op, x)):
        with pytest.raises(TypeError, match=message):
            finishes(call)
    with pytest.raises(TypeError, match=r"does not support dtype float(128|96).*A\.astype"):
        prepare(A.astype(np.longdouble), client)
    check_product(op, A, np.float64)


def test_cuda_on_cpu_workers_says_they_have_no_gpu(client):
    with pytest.raises(ValueError, match=r"device='cuda', but worker tcp://\S+ has no usable "
                                         r"GPU"):
        prepare(band(50), client, device="cuda")


def test_a_closed_client_is_named_as_closed():
    A = band(100)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0", silence_logs=50) as cluster:
        client = distributed.Client(cluster, set_as_default=False)
        op = prepare(A, client)
        x = op.vector(np.ones(100))
        client.close()
        for call in (lambda: op @ np.ones(100), lambda: op @ x, lambda: op.vector(np.ones(100)),
                     lambda: adist.cg(op, np.ones(100)), lambda: prepare(A, client)):
            with pytest.raises(ValueError, match=r"the Dask client is closed \(status 'closed'\)"):
                call()


def test_a_dead_worker_is_named_with_its_rank():
    """Rank 1's worker process is killed between products, then during a solve: each call
    says which rank and worker left, and a new prepare works on the workers there are then."""
    import os
    import signal
    import threading

    A = band(400)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=50) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        op = prepare(A, client)
        x = op.vector(np.ones(400))
        check_product(op, A, np.float64)
        pid = client.run(os.getpid, workers=[op.workers[1]])[op.workers[1]]
        os.kill(pid, signal.SIGKILL)
        gone = rf"rank 1 \(worker {op.workers[1]}\) left the cluster"
        for call in (lambda: op @ np.ones(400), lambda: (op @ x).gather(),
                     lambda: adist.cg(op, np.ones(400))):
            with pytest.raises(RuntimeError, match=gone):
                finishes(call)
        client.wait_for_workers(2, timeout=60)
        op = prepare(A, client)
        check_product(op, A, np.float64)
        pid = client.run(os.getpid, workers=[op.workers[1]])[op.workers[1]]
        threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
        lost = (r"rank 0 lost its connection to rank 1 .*: rank 1's worker died|"
                rf"rank 1 \(worker {op.workers[1]}\) left the cluster")
        with pytest.raises(RuntimeError, match=lost):
            finishes(lambda: adist.cg(op, np.ones(400), rtol=0.0, maxiter=10 ** 7))
