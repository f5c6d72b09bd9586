"""Kernels that exercise how numba-cuda's simulator runs a block once
``autospmv.kernels.cuda.simulator`` is installed (its threads as greenlets, from barrier to
barrier), for ``test_simulator_blocks.py``. Run in the simulator (``NUMBA_ENABLE_CUDASIM=1``)::

    PYTHONPATH=. NUMBA_ENABLE_CUDASIM=1 python tests/simulator_blocks_worker.py

Output (stdout): one JSON object, a list of numbers (or a message) per case.
"""

from __future__ import annotations

import json
import time

import numpy as np
from numba import cuda, float64

import autospmv.kernels.cuda  # noqa: F401  (installs the simulator's additions)

THREADS = 64


@cuda.jit
def block_sum(out):
    """Every thread writes its slot of a shared array it reaches together with the others."""
    cuda.syncthreads()
    slots = cuda.shared.array(THREADS, float64)
    slots[cuda.threadIdx.x] = 1.0
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        total = 0.0
        for i in range(THREADS):
            total += slots[i]
        out[cuda.blockIdx.x] = total


@cuda.jit
def odd_threads_return_first(out):
    """The odd threads return before the barrier; the even ones must pass it."""
    i = cuda.threadIdx.x
    slots = cuda.shared.array(THREADS, float64)
    slots[i] = 0.0
    if i % 2:
        return
    slots[i] = 1.0
    cuda.syncthreads()
    if i == 0:
        total = 0.0
        for k in range(THREADS):
            total += slots[k]
        out[0] = total


@cuda.jit
def reads_without_a_barrier(out):
    """After each of two barriers, every thread writes its slot and reads the next thread's
    slot with no barrier between: out[0] and out[1] count the reads that saw the write."""
    i = cuda.threadIdx.x
    first = cuda.shared.array(THREADS, float64)
    second = cuda.shared.array(THREADS, float64)
    first[i] = 0.0
    second[i] = 0.0
    cuda.syncthreads()
    first[i] = 1.0
    seen_first = first[(i + 1) % THREADS]
    cuda.syncthreads()
    second[i] = 1.0
    seen_second = second[(i + 1) % THREADS]
    cuda.atomic.add(out, 0, seen_first)
    cuda.atomic.add(out, 1, seen_second)


@cuda.jit
def votes(out):
    i = cuda.threadIdx.x
    count = cuda.syncthreads_count(i < 10)
    every = cuda.syncthreads_and(i < THREADS)
    some = cuda.syncthreads_or(i == THREADS - 1)
    not_every = cuda.syncthreads_and(i < 10)
    if i == 0:
        out[0], out[1], out[2], out[3] = count, every, some, not_every


@cuda.jit
def shuffle_past_returned_lanes(out):
    """Lanes 20 and up return; lane l < 4 reads lane l + 16, the others would read a returned
    lane and keep their own value."""
    i = cuda.threadIdx.x
    if i >= 20:
        return
    out[i] = cuda.shfl_down_sync(0xFFFFFFFF, float64(i), 16)


@cuda.jit
def indices(out):
    """A block of 4 × 3 threads in a grid of 2 blocks: each writes its linear thread index and
    lane."""
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    b = cuda.blockIdx.x
    out[b, y, x, 0] = x + cuda.blockDim.x * y
    out[b, y, x, 1] = cuda.laneid


@cuda.jit
def one_thread_fails(out):
    cuda.syncthreads()
    if cuda.blockIdx.x == 1 and cuda.threadIdx.x == 5:
        out[out.shape[0]] = 1.0  # out of bounds
    cuda.syncthreads()


def main() -> dict:
    results = {}
    out = np.zeros(3)
    allocate = np.empty

    def slow_empty(*args, **kwargs):  # hands the interpreter to other threads, if any can run
        time.sleep(0.001)
        return allocate(*args, **kwargs)

    np.empty = slow_empty
    try:
        block_sum[3, THREADS](out)
    finally:
        np.empty = allocate
    results["block_sums"] = out.tolist()

    out = np.zeros(1)
    odd_threads_return_first[1, THREADS](out)
    results["even_sum"] = out.tolist()

    out = np.zeros(2)
    reads_without_a_barrier[1, THREADS](out)
    results["reads_without_a_barrier"] = out.tolist()

    out = np.zeros(4)
    votes[1, THREADS](out)
    results["votes"] = out.tolist()

    out = np.full(20, -1.0)
    shuffle_past_returned_lanes[1, 32](out)
    results["shuffle"] = out.tolist()

    out = np.zeros((2, 3, 4, 2))
    indices[2, (4, 3)](out)
    results["indices"] = out.astype(int).tolist()

    try:
        one_thread_fails[2, THREADS](np.zeros(4))
        results["failure"] = "no exception"
    except IndexError as exc:
        results["failure"] = str(exc)
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
