"""Where the host time of one ``op.matvec(x, out=y)`` goes, on a small matrix (GPU needed).

Times, per call, in µs of wall-clock host time without synchronisation: reading the vectors'
``__cuda_array_interface__``, the full argument check, the bare launches of the operator's device
program, and the whole ``matvec``. The GPU work of a small matrix is shorter than each of these,
so these numbers are what bounds the call rate. For the kernels named, by default every kernel
of the registry.

The loop here is its own, not the labeller's timer (:class:`autospmv.timing.Bench`): that one
times products on the device between CUDA events, while this measures the host's share alone,
wall-clock and unsynchronised, of steps that are mostly not products.

    PYTHONPATH=. python benchmarks/launch_overhead.py [kernel ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
from autospmv import registry  # noqa: E402
from autospmv.kernels.cuda import backend  # noqa: E402


def per_call_us(fn, calls=20000) -> float:
    from numba import cuda

    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        cuda.synchronize()
    return best


def main(kernels):
    from numba import cuda

    A = sp.random(2000, 2000, density=0.003, format="csr", random_state=0)
    x = cuda.to_device(np.ones(2000))
    y = cuda.device_array(2000)
    print(f"{'step':44s} {'µs/call':>8s}")
    print(f"{'x.__cuda_array_interface__':44s} {per_call_us(lambda: x.__cuda_array_interface__):8.2f}")
    check = backend._check_device_vector
    cai = x.__cuda_array_interface__
    print(f"{'argument check of x':44s} {per_call_us(lambda: check(cai, 2000, A.dtype, 'x')):8.2f}")
    for kernel in kernels:
        op = autospmv.prepare(A, kernel=kernel, device="cuda")
        program = op._backend.program
        xp, yp = x.__cuda_array_interface__["data"][0], y.__cuda_array_interface__["data"][0]
        print(f"{kernel + ': device program (' + str(len(program.steps)) + ' steps)':44s} "
              f"{per_call_us(lambda: program.run(xp, yp, 0)):8.2f}")
        from cuda.bindings import driver

        import ctypes

        step = program.steps[-1]
        args = (step._function, step.grid, 1, 1, step.block, 1, 1, 0, 0,
                ctypes.addressof(step._params), 0)
        print(f"{kernel + ': bare cuLaunchKernel (cuda.bindings)':44s} "
              f"{per_call_us(lambda: driver.cuLaunchKernel(*args)):8.2f}")
        print(f"{kernel + ': op.matvec(x, out=y)':44s} "
              f"{per_call_us(lambda: op.matvec(x, out=y)):8.2f}")


if __name__ == "__main__":
    main(sys.argv[1:] or registry.names())
