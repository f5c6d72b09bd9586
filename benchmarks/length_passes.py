"""Row-length passes of a matrix on the GPU: on the device against on the host's row pointer.

For the benchmark's 2-D Laplacian and power-law matrices (``prepare_cost.make_matrices``) of
10⁶, 5·10⁶ and 2·10⁷ nonzeros in float32, uploaded with CuPy, this prints the time of
``autospmv._decide.length_features.device_length_passes`` and ``host_length_passes`` (medians of 30, and
whether they agree), and of an automatic ``prepare()`` of the CuPy matrix with the shipped
threshold ``DEVICE_LENGTH_PASSES_MIN_ROWS`` and with the passes always on the device.
Needs a GPU and CuPy:

    PYTHONPATH=. python benchmarks/length_passes.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402
import cupyx.scipy.sparse as cusp  # noqa: E402

import autospmv  # noqa: E402
from autospmv._run.device_input import canonical_device_csr  # noqa: E402
from autospmv._run.timing import time_calls  # noqa: E402
from prepare_cost import make_matrices  # noqa: E402

from autospmv._decide import length_features  # noqa: E402


def milliseconds(call, repeats: int = 30) -> tuple[float, float]:
    """(median, min) in ms of ``call`` and a device synchronisation on the host's clock (host
    work between launches counts), after three calls that are not timed."""
    sync = cupy.cuda.Device().synchronize
    call()
    call()  # time_calls makes the third untimed call
    timed = time_calls(lambda: (call(), sync()), "cpu", budget=0.0, min_samples=repeats)
    return timed["median"] / 1e3, timed["min"] / 1e3


def main() -> None:
    for name, A in make_matrices([1e6, 5e6, 2e7], ["float32"]):
        matrix = cusp.csr_matrix(A)
        cupy.cuda.Device().synchronize()
        csr = canonical_device_csr(matrix)
        m = A.shape[0]
        on_device = milliseconds(lambda: length_features.device_length_passes(csr))
        on_host = milliseconds(lambda: length_features.host_length_passes(csr.host_indptr, m))
        same = (length_features.device_length_passes(csr)[0]
                == length_features.host_length_passes(csr.host_indptr, m)[0])
        print(f"{name:16s} rows {m:>9,d}  device passes median {on_device[0]:.3f} "
              f"min {on_device[1]:.3f} ms | host passes median {on_host[0]:.3f} "
              f"min {on_host[1]:.3f} ms  same={same}", flush=True)
        shipped = length_features.DEVICE_LENGTH_PASSES_MIN_ROWS
        for label, rows in ((f"threshold {shipped:,} rows", shipped), ("always device", 0)):
            length_features.DEVICE_LENGTH_PASSES_MIN_ROWS = rows
            prepare = milliseconds(lambda: autospmv.prepare(matrix, device="cuda"), 15)
            length_features.DEVICE_LENGTH_PASSES_MIN_ROWS = shipped
            print(f"    automatic prepare, {label}: median {prepare[0]:.2f} "
                  f"min {prepare[1]:.2f} ms", flush=True)
        del matrix, csr


if __name__ == "__main__":
    main()
