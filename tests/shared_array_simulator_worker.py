"""A block of simulated threads that meet at ``cuda.shared.array`` after a barrier, as the
kernels' threads do (csr5's contended tiles, the grid sums, the solvers' reductions), for
``test_simulator_shared_array.py``. Run in numba-cuda's simulator
(``NUMBA_ENABLE_CUDASIM=1``)::

    PYTHONPATH=. NUMBA_ENABLE_CUDASIM=1 python tests/shared_array_simulator_worker.py

While the kernel runs, ``numpy.empty`` waits a millisecond before it allocates, which hands the
interpreter to other threads mid-allocation, so that threads reaching the line together would
each allocate an array of their own unless the allocation is locked. Output (stdout, JSON):
``{"sums": [...]}``, thread 0's sum of what the block's threads wrote, one per launch (64 each
when no write is lost).
"""

from __future__ import annotations

import json
import time

import numpy as np
from numba import cuda, float64

import autospmv.kernels.cuda  # noqa: F401  (installs the simulator's shuffles and shared arrays)

LAUNCHES = 3
THREADS = 64


@cuda.jit
def block_sum(out):
    cuda.syncthreads()
    slots = cuda.shared.array(THREADS, float64)
    slots[cuda.threadIdx.x] = 1.0
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        total = 0.0
        for i in range(THREADS):
            total += slots[i]
        out[0] = total


def main() -> dict:
    allocate = np.empty

    def slow_empty(*args, **kwargs):
        time.sleep(0.001)
        return allocate(*args, **kwargs)

    sums = []
    for _ in range(LAUNCHES):
        out = np.zeros(1)
        np.empty = slow_empty
        try:
            block_sum[1, THREADS](out)
        finally:
            np.empty = allocate
        sums.append(float(out[0]))
    return {"sums": sums}


if __name__ == "__main__":
    print(json.dumps(main()))
