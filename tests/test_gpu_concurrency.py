"""GPU operators under concurrent use, on the callers' streams, and on the right device.

Marked ``requires_gpu``: skipped without a real GPU (and under the CUDA simulator). The stream tests
queue a long spin on a non-default stream before the work that fills x: a kernel launched on any
other stream than the caller's would read x before it is written.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import autospmv
from matrices import assert_close, from_row_lengths, random_matrix, random_vector, reference
from read_only_vector import ReadOnly

cuda = pytest.importorskip("numba.cuda")

pytestmark = pytest.mark.requires_gpu

THREADS = 8
CALLS = 50
SPIN_CYCLES = 200_000_000
"""About a tenth of a second of one GPU thread spinning: far longer than a launch takes."""


def kernel_matrix():
    """Many blocks' worth of rows of 4 to 8 entries: every kernel builds it (ELL's padding stays
    under its fill limit) and HYB has an overflow."""
    lengths = np.random.default_rng(11).integers(4, 9, 20_000)
    return from_row_lengths(lengths, 15_000, 11)


@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_eight_threads_share_one_gpu_operator(kernel):
    A = kernel_matrix()
    op = autospmv.prepare(A, kernel=kernel, device="cuda")
    rng = np.random.default_rng(5)
    xs = [random_vector(rng, A.shape[1], np.float64) for _ in range(THREADS)]
    expected = [reference(A, x) for x in xs]
    wrong = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        first = op @ xs[t]  # a thread new to CUDA: the operator's GPU becomes its current one
        x_device = cuda.to_device(xs[t])
        out = cuda.device_array(A.shape[0])
        if not np.allclose(first, expected[t], rtol=1e-10, atol=1e-12):
            wrong.append(t)
        start.wait()
        for _ in range(CALLS):
            host = op @ xs[t]  # the shared staging buffers
            op.matvec(x_device, out=out)  # the shared launch parameters
            device = out.copy_to_host()
            for y in (host, device):
                if not np.allclose(y, expected[t], rtol=1e-10, atol=1e-12):
                    wrong.append(t)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert wrong == []


@pytest.mark.parametrize("kernel", ["csr_vector", "coo", "hyb"])  # one step, a memset, two
def test_torch_non_default_stream_orders_the_launch(kernel):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    A = kernel_matrix()
    op = autospmv.prepare(A, kernel=kernel, device="cuda")
    values = random_vector(np.random.default_rng(6), A.shape[1], np.float64)
    source = torch.from_numpy(values).cuda()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()  # PyTorch creates it non-blocking: no implicit ordering
    with torch.cuda.stream(stream):
        x = torch.full_like(source, float("nan"))
        out = torch.full((A.shape[0],), float("nan"), dtype=torch.float64, device="cuda")
        torch.cuda._sleep(SPIN_CYCLES)
        x.copy_(source)  # x is ready only after the spin
        op.matvec(x, out=out)
        y = op @ x
        result, result_out = y.cpu(), out.cpu()  # .cpu() waits for the current stream
    assert_close(result.numpy(), reference(A, values), np.float64)
    assert_close(result_out.numpy(), reference(A, values), np.float64)


@pytest.mark.parametrize("kernel", ["csr_vector", "coo", "hyb"])
def test_cupy_non_default_stream_orders_the_launch(kernel):
    cupy = pytest.importorskip("cupy")
    A = kernel_matrix()
    op = autospmv.prepare(A, kernel=kernel, device="cuda")
    values = random_vector(np.random.default_rng(7), A.shape[1], np.float64)
    spin = cupy.RawKernel(r"""
        extern "C" __global__ void spin(long long cycles) {
            long long start = clock64();
            while (clock64() - start < cycles) {}
        }""", "spin")
    source = cupy.asarray(values)
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.full(A.shape[1], np.nan)
        out = cupy.full(A.shape[0], np.nan)
        spin((1,), (1,), (cupy.int64(SPIN_CYCLES),))
        x[...] = source  # x is ready only after the spin
        op.matvec(x, out=out)
        y = op @ x
        result, result_out = cupy.asnumpy(y, stream=stream), cupy.asnumpy(out, stream=stream)
        stream.synchronize()
    assert_close(result, reference(A, values), np.float64)
    assert_close(result_out, reference(A, values), np.float64)


def test_out_overlapping_x_and_read_only_out_are_refused_on_the_gpu():
    op = autospmv.prepare(random_matrix(8, 8, 0.5, 1), kernel="csr_scalar", device="cuda")
    buffer = cuda.to_device(np.arange(16.0))
    with pytest.raises(ValueError, match="out overlaps x"):
        op.matvec(buffer[:8], out=buffer[4:12])

    with pytest.raises(ValueError, match="out is read-only"):
        op.matvec(buffer[:8], out=ReadOnly(cuda.device_array(8)))
    out = cuda.device_array(8)
    op.matvec(ReadOnly(buffer[:8]), out=out)  # a read-only x is fine
    assert_close(out.copy_to_host(), reference(random_matrix(8, 8, 0.5, 1), np.arange(8.0)),
                 np.float64)


def test_vectors_and_callers_on_another_gpu_are_refused():
    if len(cuda.gpus) < 2:
        pytest.skip("needs two GPUs")
    A = random_matrix(50, 40, 0.2, 2)
    with cuda.gpus[0]:
        op = autospmv.prepare(A, kernel="csr_scalar", device="cuda")
        x0 = cuda.to_device(np.ones(40))
    with cuda.gpus[1]:
        x1 = cuda.to_device(np.ones(40))
        out1 = cuda.device_array(50)
    with cuda.gpus[0]:
        with pytest.raises(ValueError, match="x is on GPU 1, but the operator's matrix is on "
                                             "GPU 0"):
            op @ x1
        with pytest.raises(ValueError, match="out is on GPU 1"):
            op.matvec(x0, out=out1)
        assert_close((op @ x0).copy_to_host(), reference(A, np.ones(40)), np.float64)
    with cuda.gpus[1]:
        with pytest.raises(ValueError, match="the calling thread's current GPU is 1"):
            op @ np.ones(40)
