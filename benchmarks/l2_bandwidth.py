"""Read bandwidth of the GPU's L2 cache and of its memory: the ceilings a multi-vector product's
gathers of X run against.

Every thread of a grid of ``blocks`` blocks per multiprocessor (256 threads each) reads a
buffer in strides of the grid, ``rounds`` times over, with loads cached in L2 only
(``cuda.ldcg``, so that the multiprocessors' L1 caches serve nothing); the fastest of five timed
launches (CUDA events) over the block counts gives the bandwidth. Buffers of 8 to 32 MiB stay in
L2 (50 MiB on an H100 or H200) after the first round; one of 4 GiB does not, and measures the
memory. A multi-vector product of k columns gathers a row of X (k values) for every nonzero: at
the L2 bandwidth those gathers take nnz · k · itemsize / bandwidth, unless rows of X that one
multiprocessor gathers again are served by its L1. Needs a GPU:

    PYTHONPATH=. python benchmarks/l2_bandwidth.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from autospmv._support.devices import numba_cuda

cuda = numba_cuda()  # (numba-cuda with NumPy 2.5 needs its compatibility step)

BUFFERS_MIB = ((8, 200), (16, 100), (24, 80), (32, 60), (4096, 2))
"""(buffer size in MiB, rounds over it): the rounds make each launch a few milliseconds long."""
BLOCKS_PER_SM = (4, 8, 16)
THREADS = 256


@cuda.jit
def read_rounds(buffer, rounds, out):
    """Sum ``buffer`` ``rounds`` times over in strides of the grid, four loads in flight a
    thread, through L2 only; the sum is written only if it equals an impossible value, so that
    the loads are not optimised away."""
    total = 0.0
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = buffer.size
    for _ in range(rounds):
        i = start
        while i + 3 * stride < n:  # four loads in flight
            total += ((cuda.ldcg(buffer, i) + cuda.ldcg(buffer, i + stride))
                      + (cuda.ldcg(buffer, i + 2 * stride) + cuda.ldcg(buffer, i + 3 * stride)))
            i += 4 * stride
        while i < n:
            total += cuda.ldcg(buffer, i)
            i += stride
    if total == -1.0:
        out[0] = total


def bandwidth_tbs(buffer, rounds: int, out, multiprocessors: int) -> float:
    """The fastest read rate (TB/s) of five launches, over :data:`BLOCKS_PER_SM`."""
    best = 0.0
    for blocks in BLOCKS_PER_SM:
        grid = multiprocessors * blocks
        read_rounds[grid, THREADS](buffer, 1, out)  # compiles, and brings the buffer to L2
        cuda.synchronize()
        seconds = math.inf
        for _ in range(5):
            start, end = cuda.event(), cuda.event()
            start.record()
            read_rounds[grid, THREADS](buffer, rounds, out)
            end.record()
            end.synchronize()
            seconds = min(seconds, cuda.event_elapsed_time(start, end) / 1e3)
        best = max(best, buffer.nbytes * rounds / seconds / 1e12)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the results here (JSON)")
    args = parser.parse_args()
    device = cuda.get_current_device()
    multiprocessors = device.MULTIPROCESSOR_COUNT
    out = cuda.device_array(1, dtype=np.float64)
    results = {"gpu": device.name.decode() if isinstance(device.name, bytes) else device.name,
               "multiprocessors": multiprocessors, "tb_per_s": {}}
    for mib, rounds in BUFFERS_MIB:
        buffer = cuda.to_device(np.ones(mib * 2**20 // 8))
        tbs = bandwidth_tbs(buffer, rounds, out, multiprocessors)
        results["tb_per_s"][f"{mib} MiB"] = round(tbs, 2)
        print(f"{mib:5d} MiB: {tbs:.2f} TB/s", flush=True)
        del buffer
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
