"""``prepare(A, background=True)`` against ``prepare(A)`` on the GPU: the time to the first
product and to the end of N products, from the ``prepare`` call, for host matrices of about
2·10⁷ nonzeros (the 2-D Laplacian and power-law matrices of ``prepare_cost.make_matrices``).

Products run on CuPy vectors with ``out=`` (the solver's loop, no host copies); each run ends
with a device synchronisation. Every (matrix, dtype, way, N) is run ``--repeats`` times after
one untimed run of both ways, interleaved; medians. The kernel the background operator ended
on is recorded and must be prepare()'s.

    PYTHONPATH=. python benchmarks/background_start.py --out F.json --label DEVICE_KIND
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

import cupy  # noqa: E402
import numpy as np  # noqa: E402

import autospmv  # noqa: E402
from prepare_cost import gpu_matrices_main  # noqa: E402

PRODUCTS = (1, 100, 1000)


def run(A, x, y, products: int, background: bool) -> tuple[float, str]:
    """Seconds from the prepare call to the end of ``products`` products, and the kernel that
    ran the last one."""
    cupy.cuda.Device().synchronize()
    started = time.perf_counter()
    op = autospmv.prepare(A, device="cuda", background=background)
    for _ in range(products):
        op.matvec(x, out=y)
    cupy.cuda.Device().synchronize()
    elapsed = time.perf_counter() - started
    kernel = op.kernel
    op.wait()
    return elapsed, kernel


def measure(name: str, A, repeats: int) -> dict:
    x = cupy.asarray(np.random.default_rng(0).standard_normal(A.shape[1]).astype(A.dtype))
    y = cupy.empty(A.shape[0], dtype=A.dtype)
    chosen = autospmv.prepare(A, device="cuda").kernel
    row = {"matrix": name, "dtype": str(A.dtype), "nnz": int(A.nnz), "kernel": chosen}
    for products in PRODUCTS:
        times = {False: [], True: []}
        ended_on = set()
        run(A, x, y, products, False)
        run(A, x, y, products, True)
        for _ in range(repeats):
            for background in (False, True):
                elapsed, kernel = run(A, x, y, products, background)
                times[background].append(elapsed)
                if background:
                    ended_on.add(kernel)
        plain, hidden = statistics.median(times[False]), statistics.median(times[True])
        row[f"products_{products}"] = {"prepare_s": plain, "background_s": hidden,
                                       "saving": plain / hidden,
                                       "background_last_kernels": sorted(ended_on)}
    return row


def main(argv=None) -> None:
    gpu_matrices_main("background_start", __doc__.splitlines()[0], measure, argv, repeats=5)


if __name__ == "__main__":
    main()
