"""autospmv.distributed on a local Dask cluster of two CPU workers, compared with SciPy.

One cluster serves the whole module: ``LocalCluster(n_workers=2, threads_per_worker=1,
processes=True)``. Worker processes rather than threads, because two in-process workers would run
numba parallel regions from two threads at once, which numba's default (workqueue) threading
layer refuses by aborting the process; processes are also what a ``LocalCUDACluster`` uses, so
everything that travels (parts, decisions, vectors) is really serialised here. The client is not
made the default client, so that :func:`prepare` without ``client=`` can be tested.

Decisions use a trained model given explicitly (``model=``, :data:`CPU_MODEL`), so that they do
not depend on models retrained on the machine that runs the tests.
"""

from __future__ import annotations

import pickle
import threading
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
                      poisson2d, random_matrix, random_vector, reference, relative_error)

CPU_MODEL = str(Path(__file__).resolve().parent.parent / "models"
                / "cuda-nvidia-h100-80gb-hbm3-float64.json")
"""A trained tree for the CPU parts to decide with (none ships for the CPU, whose rule runs one
kernel; a tree reads the same features on any device, so a GPU model serves to show that each
part decides for itself)."""


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


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", list(FAMILY))
def test_family_equals_scipy(client, name, dtype):
    A = FAMILY[name]().astype(dtype)
    op = prepare(A, client)
    assert op.shape == A.shape and op.dtype == dtype and len(op.parts) == 2
    check_product(op, A, dtype)
    # The parts cover the rows in order, and their nonzeros add up to A's.
    canonical = autospmv.validation.canonicalize(A)
    assert [p.rows for p in op.parts] == [(0, op.parts[0].rows[1]), (op.parts[0].rows[1],
                                                                       A.shape[0])]
    assert sum(p.nnz for p in op.parts) == canonical.nnz == op.nnz


def test_row_partition_balances_nonzeros():
    A = one_long_row(300, 3000, 123, 3, 4)  # one row of 3000 among rows of 3
    work = np.concatenate(([0], np.cumsum(np.diff(A.indptr) + 1)))  # nonzeros + 1 per row
    for parts in (2, 3, 7):
        bounds = adist.row_partition(A.indptr, parts)
        assert bounds.size == parts + 1 and bounds[0] == 0 and bounds[-1] == 300
        assert np.all(np.diff(bounds) >= 0)
        # Each inner boundary is the row boundary nearest to its share of the work.
        for k, bound in enumerate(bounds[1:-1], start=1):
            target = work[-1] * k / parts
            assert abs(work[bound] - target) == np.min(np.abs(work - target))
    # Three parts: the long row (3001 of 4197 units) gets a block of its own.
    np.testing.assert_array_equal(adist.row_partition(A.indptr, 3), [0, 123, 124, 300])
    # More parts than rows: some blocks are empty, every row is in exactly one block.
    bounds = adist.row_partition(np.array([0, 2, 2, 5]), 5)
    assert bounds[0] == 0 and bounds[-1] == 3 and np.all(np.diff(bounds) >= 0)
    np.testing.assert_array_equal(adist.row_partition(np.array([0]), 3), [0, 0, 0, 0])


def blocks_as_stored(A, op):
    """Each part's rows of A, with columns compacted to the part's footprint where it is, built
    here independently of the module."""
    A = sp.csr_matrix(A)
    out = []
    for part in op.parts:
        block = A[slice(*part.rows)]
        footprint = np.unique(block.indices)
        if footprint.size < op.compact_below * A.shape[1]:
            block = block[:, footprint]
        out.append(block)
    return out


def test_each_part_decides_for_itself_and_explains(client):
    # Rows 0-299: one dense row among short ones; rows 300-599: a diagonal.
    A = sp.csr_matrix(sp.vstack([one_long_row(300, 3000, 123, 3, 4),
                                 diagonal(3000, 5)[:300]]))
    op = prepare(A, client)
    expected = [autospmv.select(block, device="cpu", model=CPU_MODEL)
                for block in blocks_as_stored(A, op)]
    assert op.kernels == [d.kernel for d in expected]
    assert [d.params for d in op.decisions] == [d.params for d in expected]
    assert [d.path for d in op.decisions] == [d.path for d in expected]
    # The model gives the two halves different kernels (if a retrained model stops doing so,
    # choose another pair of blocks: the point is that parts decide independently).
    assert len(set(op.kernels)) == 2, op.kernels
    assert all(p.device == "cpu" for p in op.parts)
    assert len({p.worker for p in op.parts}) == 2
    text = op.explain()
    assert text.startswith(f"DistributedOperator 600x3000 float64 nnz={A.nnz}: 2 row parts on "
                           "2 workers")
    for part, decision in zip(op.parts, op.decisions):
        start, stop = part.rows
        assert (f"part {part.index}: rows {start}:{stop} ({stop - start} rows), nnz {part.nnz}, "
                in text)
        assert f"kernel {part.kernel}\n" in text + "\n"
        first_line = decision.explain().splitlines()[0]
        assert "  " + first_line in text
    check_product(op, A, np.float64)


@pytest.mark.parametrize("kernel", ["coo", "ell", "csr5"])
def test_keywords_reach_every_part(client, kernel):
    A = poisson2d(20)
    op = prepare(A, client, parts=3, kernel=kernel)
    assert op.kernels == [kernel] * 3
    assert all(d.source == "forced" for d in op.decisions)
    check_product(op, A, np.float64)


def test_banded_matrix_sends_only_the_footprint(client):
    n = 2000
    A = sp.diags([np.full(n - 3, 0.5), np.full(n - 1, -1.0), np.full(n, 4.0),
                  np.full(n - 1, -1.0), np.full(n - 5, 0.25)], [-3, -1, 0, 1, 5], format="csr")
    op = prepare(A, client, parts=4)
    for part in op.parts:
        block = A[slice(*part.rows)]
        assert part.compacted
        np.testing.assert_array_equal(part.footprint, np.unique(block.indices))
        assert part.columns == part.footprint.size < n
    # The stored parts on the workers have the compacted number of columns.
    shapes = client.gather([client.submit(lambda op: op.shape, future, pure=False)
                            for future in op._futures])
    assert shapes == [(p.rows[1] - p.rows[0], p.columns) for p in op.parts]
    check_product(op, A, np.float64)
    sent = op.last_transfer
    assert sent["per_part"] == [p.footprint.size for p in op.parts]
    assert sent["shared"] == 0
    assert all(count < n for count in sent["per_part"])
    assert sent["entries"] < 2 * n  # what two workers reading the whole x would receive


def test_wide_footprint_reads_the_whole_x(client):
    A = random_matrix(400, 300, 0.05, 3)  # every block touches nearly all columns
    op = prepare(A, client, parts=3)
    assert not any(p.compacted for p in op.parts)
    assert all(p.columns == 300 for p in op.parts)
    check_product(op, A, np.float64)
    assert op.last_transfer["per_part"] == [0, 0, 0]
    assert op.last_transfer["shared"] >= 2 * 300
    assert "reads the whole x" in op.explain()


def test_compaction_threshold(client):
    A = poisson2d(20)  # 400 columns; a half of the rows touches just over half of them
    never = prepare(A, client, parts=2, compact_below=0.0)
    always = prepare(A, client, parts=2, compact_below=1.0)
    assert not any(p.compacted for p in never.parts)
    assert all(p.compacted for p in always.parts)
    # The default bar lets each half of a square mesh matrix receive only its footprint.
    default = prepare(A, client, parts=2)
    assert all(p.compacted and 0.5 * 400 < p.columns < 400 for p in default.parts)
    assert default.compact_below == adist.COMPACT_BELOW
    y_never = check_product(never, A, np.float64)
    y_always = check_product(always, A, np.float64)
    np.testing.assert_array_equal(y_never, y_always)


def test_large_inputs_are_scattered(client, monkeypatch):
    """Inputs above INLINE_BYTES go through scatter (the shared x broadcast, pieces per
    worker) instead of inside the tasks; the results are the same."""
    # Two wide rows (about 90 % of the columns), then a diagonal over half of the columns.
    A = sp.csr_matrix(sp.vstack([random_matrix(2, 6000, 0.7, 1),
                                 sp.hstack([diagonal(3000, 2), sp.csr_matrix((3000, 3000))])]))
    op = prepare(A, client, parts=2)
    assert [p.compacted for p in op.parts] == [False, True]
    y_inline = check_product(op, A, np.float64)
    monkeypatch.setattr(adist, "INLINE_BYTES", 0)
    y_scattered = check_product(op, A, np.float64)
    np.testing.assert_array_equal(y_inline, y_scattered)
    # The shared x went once to the one worker whose part reads it.
    assert op.last_transfer == {"per_part": [0, op.parts[1].columns], "shared": 6000,
                                "entries": 6000 + op.parts[1].columns}


@pytest.mark.parametrize("parts", [1, 5])
def test_parts_other_than_workers(client, parts):
    A = random_matrix(300, 200, 0.03, 7)
    op = prepare(A, client, parts=parts)
    assert len(op.parts) == parts
    workers = sorted(client.nthreads())
    assert [p.worker for p in op.parts] == [workers[k % 2] for k in range(parts)]
    check_product(op, A, np.float64)


def test_more_parts_than_rows(client):
    A = random_matrix(3, 40, 0.5, 8)
    op = prepare(A, client, parts=5)
    assert sum(p.rows[1] - p.rows[0] for p in op.parts) == 3
    check_product(op, A, np.float64)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ["poisson2d_169", "huge_row_among_short_300x3000",
                                  "empty_0x7", "rect_37x61"])
def test_dask_array_in_dask_array_out(client, name, dtype):
    A = FAMILY[name]().astype(dtype)
    op = prepare(A, client, parts=3)
    x = random_vector(np.random.default_rng(1), A.shape[1], np.float64)
    x_dask = da.from_array(x, chunks=max(1, A.shape[1] // 4))
    y = op @ x_dask
    assert isinstance(y, da.Array) and y.dtype == np.float64  # SciPy's: float64 x rules
    assert y.chunks == (tuple(p.rows[1] - p.rows[0] for p in op.parts),)
    values = client.compute(y).result()
    assert values.dtype == np.float64
    assert relative_error(values, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    np.testing.assert_array_equal(values, op.matvec(x))
    same = op @ da.from_array(x.astype(dtype), chunks=max(1, A.shape[1] // 4))
    assert same.dtype == dtype and client.compute(same).result().dtype == dtype


def test_cg_with_the_distributed_operator(client):
    A = poisson2d(12)
    b = np.random.default_rng(2).random(A.shape[0])
    op = prepare(A, client)
    x, info = spla.cg(op, b, rtol=1e-10)
    x_ref, info_ref = spla.cg(A, b, rtol=1e-10)
    assert info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=1e-8, atol=1e-12)


def test_column_vectors_lists_and_matrices(client):
    A = random_matrix(30, 20, 0.2, 9)
    op = prepare(A, client)
    x = np.arange(20, dtype=np.float64)
    assert op.matvec(x.reshape(-1, 1)).shape == (30, 1)
    np.testing.assert_allclose(op.matvec(list(x)), A @ x, rtol=1e-12)
    X = np.random.default_rng(3).random((20, 3))
    np.testing.assert_allclose(op @ X, A @ X, rtol=1e-12)


def test_a_float32_operator_gives_float64_for_float64_x(client):
    A = poisson2d(12).astype(np.float32)
    op = prepare(A, client)
    x = np.random.default_rng(4).standard_normal(A.shape[1])
    y = op @ x
    assert op.dtype == np.float32 and y.dtype == np.float64
    assert relative_error(y, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    assert (op @ x.astype(np.float32)).dtype == np.float32


def test_the_operator_pickles_without_its_client(client):
    """The parts stay on the workers; an unpickled copy multiplies through the loading
    process's client, and without one it says so."""
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


def test_decisions_survive_the_trip(client):
    op = prepare(poisson2d(8), client)
    for decision in op.decisions:
        assert isinstance(decision, autospmv.Decision)
        assert pickle.loads(pickle.dumps(decision)).explain() == decision.explain()


def test_errors(client):
    A = random_matrix(30, 20, 0.2, 9)
    with pytest.raises(ValueError, match="needs a Dask client: pass client="):
        adist.prepare(A, device="cpu")
    with pytest.raises(ValueError, match="parts must be a positive integer; got 0"):
        prepare(A, client, parts=0)
    with pytest.raises(ValueError, match="parts must be a positive integer; got 1.5"):
        prepare(A, client, parts=1.5)
    with pytest.raises(ValueError, match=r"compact_below must be a share .* got 2"):
        prepare(A, client, compact_below=2)
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        prepare(A, client, device="gpu")
    op = prepare(A, client)
    with pytest.raises(ValueError, match="x has length 19, but the matrix has 20 columns"):
        op.matvec(np.ones(19))
    with pytest.raises(ValueError, match="x must be a vector of length 20; got a dask array "
                                         r"with shape \(21,\)"):
        op @ da.ones(21)
    with pytest.raises(NotImplementedError, match="prepare A.T"):
        op.rmatvec(np.ones(30))
    op.close()
    with pytest.raises(RuntimeError, match="was closed"):
        op @ np.ones(20)


def test_in_process_workers_take_turns_on_the_cpu():
    """Workers sharing a process (``processes=False``, as in the README) run CPU products one at
    a time: a product waits while another thread holds the lock, then completes correctly."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0", silence_logs=50) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        A = random_matrix(200, 150, 0.05, 4)
        op = prepare(A, client)
        x = random_vector(np.random.default_rng(5), 150, np.float64)
        result = {}
        with adist._CPU_LOCK:
            product = threading.Thread(target=lambda: result.setdefault("y", op @ x))
            product.start()
            product.join(1.0)
            assert product.is_alive() and not result
        product.join(60)
        assert relative_error(result["y"], reference(A, x)) <= 1e-12
