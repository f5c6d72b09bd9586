"""Row-length passes of a matrix on the GPU: on the device against on the host's row pointer.

For the benchmark's 2-D Laplacian and power-law matrices (``prepare_cost.make_matrices``) of
10⁶, 5·10⁶ and 2·10⁷ nonzeros in float32, uploaded with CuPy, this prints the time of
``autospmv.features._device_length_passes`` and ``_host_length_passes`` (medians of 30, and
whether they agree), and of an automatic ``prepare()`` of the CuPy matrix with the shipped
threshold ``DEVICE_LENGTH_PASSES_MIN_ROWS`` and with the passes always on the device.
Needs a GPU and CuPy:

    PYTHONPATH=. python benchmarks/length_passes.py
"""
import sys, time, importlib
sys.path.insert(0, '.'); sys.path.insert(1, 'benchmarks')  # run from the repository root
import numpy as np, cupy, cupyx.scipy.sparse as cusp
import autospmv
F = importlib.import_module("autospmv.features"); D = importlib.import_module("autospmv.device")
from prepare_cost import make_matrices
sync = cupy.cuda.Device().synchronize
def t(f, n=30):
    for _ in range(3): f()
    sync(); ts = []
    for _ in range(n):
        s = time.perf_counter(); f(); sync(); ts.append(time.perf_counter() - s)
    return np.median(ts) * 1e3, np.min(ts) * 1e3
for name, A in make_matrices([1e6, 5e6, 2e7], ['float32']):
    dA = cusp.csr_matrix(A); sync()
    csr = D.canonical_device_csr(dA); m = A.shape[0]
    dev = t(lambda: F._device_length_passes(csr)); host = t(lambda: F._host_length_passes(csr.host_indptr, m))
    same = F._device_length_passes(csr)[0] == F._host_length_passes(csr.host_indptr, m)[0]
    print(f"{name:16s} rows {m:>9,d}  device passes median {dev[0]:.3f} min {dev[1]:.3f} ms | host passes median {host[0]:.3f} min {host[1]:.3f} ms  same={same}", flush=True)
    for label, rows in ((f"threshold {F.DEVICE_LENGTH_PASSES_MIN_ROWS:,} rows",
                         F.DEVICE_LENGTH_PASSES_MIN_ROWS), ("always device", 0)):
        old = F.DEVICE_LENGTH_PASSES_MIN_ROWS; F.DEVICE_LENGTH_PASSES_MIN_ROWS = rows
        p = t(lambda: autospmv.prepare(dA, device="cuda"), 15)
        F.DEVICE_LENGTH_PASSES_MIN_ROWS = old
        print(f"    automatic prepare, {label}: median {p[0]:.2f} min {p[1]:.2f} ms", flush=True)
    del dA, csr
