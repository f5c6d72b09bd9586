"""autospmv.distributed on real GPUs: one rank per GPU (dask-cuda's LocalCUDACluster), vectors
as CuPy chunks, the ghost exchange through NCCL where there are two GPUs or more.

Skipped without a real GPU, dask-cuda or CuPy (see conftest.py); the CPU tests of the same
code are in test_distributed.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as spla

pytestmark = pytest.mark.requires_gpu

dask_cuda = pytest.importorskip("dask_cuda")
cupy = pytest.importorskip("cupy")
distributed = pytest.importorskip("distributed")

from autospmv import distributed as adist  # noqa: E402
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
