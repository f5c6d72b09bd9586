"""Copy bandwidth over a few seconds of one process, to see how steady it is.

    PYTHONPATH=. python benchmarks/results/csr5-contended-rows-2026-11-27/copy_samples.py OUT.json

Writes ``first_calls`` (three calls of ``benchmarks.gpu.copy_bandwidth_tbs`` at the start),
``samples_3s`` (the rate of every single 2 GiB device-to-device copy for three seconds, on one
pair of buffers) and ``after_warm`` (three more calls of ``copy_bandwidth_tbs``), in TB/s (bytes
read + bytes written per second). ``copy_bandwidth_tbs`` was the median of ten copies in calls 1
and 2, the highest of five such medians after a second of copies in calls 5 and 6, and its
current form in call 7 (see the results note).
"""

import json
import sys
import time

import numpy as np
from numba import cuda

from benchmarks import gpu

NBYTES = 2 << 30

src = cuda.device_array(NBYTES // 8, dtype=np.float64)
dst = cuda.device_array_like(src)
out = {"first_calls": [gpu.copy_bandwidth_tbs() for _ in range(3)], "samples_3s": []}
start = time.perf_counter()
while time.perf_counter() - start < 3.0:
    begin, end = cuda.event(), cuda.event()
    begin.record()
    dst.copy_to_device(src)
    end.record()
    end.synchronize()
    out["samples_3s"].append(2 * NBYTES / (cuda.event_elapsed_time(begin, end) * 1e-3) / 1e12)
out["after_warm"] = [gpu.copy_bandwidth_tbs() for _ in range(3)]
json.dump(out, open(sys.argv[1], "w"))
