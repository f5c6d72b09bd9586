"""What CSR5's tile-height chooser costs on a GPU since it reads the locality of x: the sampled
locality (:func:`autospmv._decide.features.sampling.x_locality`) of a matrix on the GPU and of the same matrix on
the host (medians of 20), and ``prepare(A, kernel="csr5")`` of the GPU matrix with the chooser
reading it against the same with its value given (8 each, interleaved, medians), on the
2·10⁷-nonzero matrices of ``prepare_cost.py``. Needs a GPU and CuPy.

    PYTHONPATH=. python benchmarks/x_locality_cost.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy  # noqa: E402
import cupyx.scipy.sparse as cusp  # noqa: E402

import autospmv  # noqa: E402
from autospmv._prepare.device_input import canonical_device_csr  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv.training import generators  # noqa: E402

from autospmv._decide import choosers  # noqa: E402
NNZ = 20_000_000


def main() -> None:
    locality = choosers.x_locality
    sync = cupy.cuda.Device().synchronize
    for name, A in (("power_law", generators.power_law("bench/powerlaw", NNZ, 2.0)),
                    ("laplace", generators.stencil("bench/stencil2d", NNZ, 5))):
        for dtype in (np.float32, np.float64):
            host = canonicalize(A.astype(dtype))
            gpu = cusp.csr_matrix(host)
            structure = canonical_device_csr(gpu).structure()
            locality(structure), locality(host)  # compiled or loaded before timing
            on_gpu, on_host = [], []
            for _ in range(20):
                sync()
                started = time.perf_counter()
                locality(structure)  # its copy of the sampled indices to the host synchronises
                on_gpu.append(time.perf_counter() - started)
                started = time.perf_counter()
                locality(host)
                on_host.append(time.perf_counter() - started)
            value = locality(structure)
            for _ in range(2):
                autospmv.prepare(gpu, kernel="csr5")
            prepared = {"read": [], "given": []}
            for i in range(16):
                mode = "read" if i % 2 == 0 else "given"
                choosers.x_locality = locality if mode == "read" else (lambda csr, v=value: v)
                sync()
                started = time.perf_counter()
                op = autospmv.prepare(gpu, kernel="csr5")
                sync()
                prepared[mode].append(time.perf_counter() - started)
                del op
            choosers.x_locality = locality
            print(f"{name} {np.dtype(dtype).name}: x_locality on the GPU matrix median "
                  f"{np.median(on_gpu) * 1e3:.2f} ms (min {min(on_gpu) * 1e3:.2f}), on the host "
                  f"matrix {np.median(on_host) * 1e3:.2f} ms; prepare(kernel='csr5') of the GPU "
                  f"matrix {np.median(prepared['read']) * 1e3:.2f} ms reading it, "
                  f"{np.median(prepared['given']) * 1e3:.2f} ms given", flush=True)


if __name__ == "__main__":
    main()
