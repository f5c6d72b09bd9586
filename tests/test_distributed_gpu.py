"""autospmv.distributed on real GPUs: one rank per GPU (dask-cuda's LocalCUDACluster), vectors
as CuPy chunks, the ghost exchange through NCCL where there are two GPUs or more.

Skipped without a real GPU, dask-cuda or CuPy (see conftest.py); the CPU tests of the same
code are in test_distributed.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

pytestmark = pytest.mark.requires_gpu

dask_cuda = pytest.importorskip("dask_cuda")
cupy = pytest.importorskip("cupy")
distributed = pytest.importorskip("distributed")

import autospmv  # noqa: E402
from autospmv import distributed as adist  # noqa: E402
from autospmv.distributed._solvers import LocalRank, cg_on  # noqa: E402
from matrices import spd_band  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with dask_cuda.LocalCUDACluster(threads_per_worker=1, device_memory_limit=0) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client


def band(n, offsets=(1, 3, 40)):
    return spd_band(n, offsets)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_and_cg_on_gpus(client, dtype):
    n = 20_000
    A = band(n).astype(dtype)
    op = adist.prepare(A, client=client)
    assert all(part.device == "cuda" for part in op.parts)
    if len(op.parts) > 1:
        assert op.comm == "nccl", op.comm_reason
    x = np.random.default_rng(1).standard_normal(n).astype(dtype)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    y = op @ x
    assert np.linalg.norm(y - A @ x) <= tolerance * np.linalg.norm(A @ x)
    xd = op.vector(x)
    chunks = client.gather(xd.chunks)
    assert all(isinstance(chunk, cupy.ndarray) for chunk in chunks)
    z = op @ (op @ xd)
    assert np.linalg.norm(z.gather() - A @ (A @ x)) <= tolerance * np.linalg.norm(A @ (A @ x))
    assert op @ cupy.asarray(x) is not None
    if dtype == np.float64:
        count = [0]
        spla.cg(A, x, rtol=1e-10, callback=lambda _: count.__setitem__(0, count[0] + 1))
        solution, info = adist.cg(op, x, rtol=1e-10)
        assert info == 0 and op.last_solve["iterations"] == count[0]
        assert np.linalg.norm(A @ solution - x) <= 1e-9 * np.linalg.norm(x)
    op.close()


def scipy_iterations(solver, A, b, **kwargs):
    count = [0]
    x, info = solver(A, b, callback=lambda _: count.__setitem__(0, count[0] + 1), **kwargs)
    return x, info, count[0]


def test_bicgstab_and_cg_from_a_start_on_gpus(client):
    n = 12_000
    A = (band(n, offsets=(1, 9)) + sp.diags(np.linspace(0.1, 0.9, n - 4), 4)).tocsr()
    op = adist.prepare(A, client=client)
    b = np.random.default_rng(4).standard_normal(n)
    _, info_ref, iterations = scipy_iterations(spla.bicgstab, A, b, rtol=1e-10)
    x, info = adist.bicgstab(op, b, rtol=1e-10)
    assert info == info_ref == 0 and op.last_solve["iterations"] == iterations
    assert np.linalg.norm(A @ x - b) <= 1e-9 * np.linalg.norm(b)
    S = band(n)
    spd = adist.prepare(S, client=client)
    x0 = np.random.default_rng(5).standard_normal(n)
    _, _, iterations = scipy_iterations(spla.cg, S, b, x0=x0, rtol=1e-10)
    xd, info = adist.cg(spd, spd.vector(b, side="rows"), x0=spd.vector(x0), rtol=1e-10)
    assert isinstance(xd, adist.DistributedVector) and info == 0
    assert spd.last_solve["iterations"] == iterations
    assert all(isinstance(c, cupy.ndarray) for c in client.gather(xd.chunks))
    assert np.linalg.norm(S @ xd.gather() - b) <= 1e-9 * np.linalg.norm(b)
    # x stays on the workers and serves the next product.
    assert np.allclose((spd @ xd).gather(), S @ xd.gather(), rtol=1e-12, atol=1e-12)
    _, info = adist.cg(spd, b, rtol=1e-14, maxiter=4)
    assert info == 4 and spd.last_solve["iterations"] == 4
    op.close()
    spd.close()


@pytest.mark.parametrize("maxiter", [None, 7])
def test_one_gpu_cg_reads_its_stop_flag_late_and_stops_as_scipy(maxiter):
    """cg_on on one GPU keeps its scalars on the device and reads the stop flag one iteration
    late: the iteration count, info and x are still SciPy's."""
    n = 30_000
    A = band(n)
    b = np.random.default_rng(6).standard_normal(n)
    x_ref, info_ref, iterations = scipy_iterations(spla.cg, A, b, rtol=1e-10, maxiter=maxiter)
    x, info, count = cg_on(LocalRank(autospmv.prepare(A, device="cuda")), cupy.asarray(b),
                           rtol=1e-10, maxiter=maxiter or 10 * n)
    assert (info, count) == (info_ref, iterations)
    np.testing.assert_allclose(cupy.asnumpy(x), x_ref, rtol=1e-7, atol=1e-10)
