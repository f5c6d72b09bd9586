"""What cg's vector work costs as one kernel with grid barriers against a kernel per pass.

Between two products, cg (:mod:`autospmv._solve.cg`) runs three passes, each a kernel that
waits for the one before: the dot product p·q (α = ρ / p·q), the update (x += α p, r −= α q,
ρ' = r·r) and the direction (p = r + β p, β = ρ' / ρ); where the product forms p·q, the last
two. A summing pass ends its kernel only once its last block has added the blocks' sums, and
the next pass begins with a grid that fills the multiprocessors again. One kernel can run the
passes in turn, each block waiting for the others at a barrier where a sum must be complete:
its grid is one wave (every block resident at once, which a barrier needs), each block adds
the blocks' sums itself, in the order the separate passes' last block uses, so α and β are the
same bits in every block and as in the separate passes, and q, x, r and p come back from L2 in
the passes after the first where they fit.

This benchmark times both forms on vectors of a Laplacian's length (CUDA graphs of 32 copies,
CuPy stream capture, as ``solvers_gpu.graph_us``), checks that they leave the same x, r, p and
scalars, and gives the bytes each must move at the device-copy bandwidth of the same run.
Needs a GPU; ``--check`` runs the comparison alone (also under numba-cuda's simulator, on one
block)::

    PYTHONPATH=. python benchmarks/cg_vector_fusion.py --out FILE
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from numba import float64

from autospmv._support.devices import numba_cuda
from autospmv.kernels.cuda import jit
from autospmv.kernels.cuda.grid_sum import PER_WARP, block_sums, grid_sums, workspace

cuda = numba_cuda()  # (numba-cuda with NumPy 2.5 needs its compatibility step)

THREADS = 256
BLOCKS_PER_SM = 4
"""One wave of the fused kernel: the steps' grid (:data:`autospmv.kernels.cuda.grid_sum.
BLOCKS_PER_SM`), held resident by its launch bounds."""

RHO, ALPHA, BETA = 0, 1, 2
LENGTHS = {"2-D Laplacian of 1e6 nonzeros": 199_809, "3-D Laplacian of 5e6 nonzeros": 704_969,
           "2-D Laplacian of 5e6 nonzeros": 1_000_000, "2-D Laplacian of 2e7 nonzeros": 4_000_000}
"""Vector lengths of ``benchmarks/solvers_gpu.py``'s Laplacians: at 10⁶ nonzeros the product
forms p·q (two passes remain), above it a pass of its own does (three)."""


@jit(launch_bounds=(THREADS, BLOCKS_PER_SM))
def dot_pass(p, q, s, partials, tickets):
    """α = ρ / p·q."""
    term = 0.0
    i = cuda.grid(1)
    while i < p.shape[0]:
        term += float64(p[i]) * float64(q[i])
        i += cuda.gridsize(1)
    last, total, unused = grid_sums(term, 0.0, partials, tickets)
    if last:
        s[ALPHA] = s[RHO] / total


@jit(launch_bounds=(THREADS, BLOCKS_PER_SM))
def update_pass(x, r, p, q, s, partials, tickets):
    """x += α p; r −= α q; β = r·r / ρ and ρ = r·r."""
    alpha = x.dtype.type(s[ALPHA])
    term = 0.0
    i = cuda.grid(1)
    while i < x.shape[0]:
        x[i] = x[i] + alpha * p[i]
        value = r[i] - alpha * q[i]
        r[i] = value
        term += float64(value) * float64(value)
        i += cuda.gridsize(1)
    last, total, unused = grid_sums(term, 0.0, partials, tickets)
    if last:
        s[BETA] = total / s[RHO]
        s[RHO] = total


@jit(launch_bounds=(THREADS, BLOCKS_PER_SM))
def direction_pass(r, p, s):
    """p = r + β p."""
    beta = p.dtype.type(s[BETA])
    i = cuda.grid(1)
    while i < p.shape[0]:
        p[i] = r[i] + beta * p[i]
        i += cuda.gridsize(1)


@jit(device=True)
def grid_barrier(barrier):
    """Every block of the grid reaches it before any goes on (``barrier``: int32 [arrived,
    generation], arrived 0 between barriers); the grid must be resident at once."""
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        generation = cuda.atomic.add(barrier, 1, 0)
        cuda.threadfence()
        if cuda.atomic.add(barrier, 0, 1) == cuda.gridDim.x - 1:
            cuda.atomic.exch(barrier, 0, 0)
            cuda.threadfence()
            cuda.atomic.add(barrier, 1, 1)
        else:
            while cuda.atomic.add(barrier, 1, 0) == generation:
                pass
        cuda.threadfence()
    cuda.syncthreads()


SECOND = 32
"""The second sum's block sums start at a multiple of this many float64 (256 bytes) past the
first's: a block reads them only after the second barrier, and no cache line it read the first
sums through holds them."""


@jit(launch_bounds=(THREADS, BLOCKS_PER_SM))
def fused_passes(x, r, p, q, s, partials, barrier, with_dot):
    """The passes of the module docstring in one kernel of one wave: all three ``with_dot``,
    else the update and the direction, with α taken from ``s`` (where the product forms p·q)."""
    per_warp = cuda.shared.array(PER_WARP, float64)
    shared_total = cuda.shared.array(1, float64)
    tid = cuda.threadIdx.x
    blocks = cuda.gridDim.x
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = x.shape[0]
    second = -(-blocks // SECOND) * SECOND
    rho = s[RHO]  # read by every block before the last barrier, after which block 0 writes it
    if with_dot:  # p·q
        term = 0.0
        i = start
        while i < n:
            term += float64(p[i]) * float64(q[i])
            i += stride
        total, unused = block_sums(float64(term), 0.0, per_warp)
        if tid == 0:
            partials[cuda.blockIdx.x] = total
        grid_barrier(barrier)
        value = 0.0
        j = tid
        while j < blocks:
            value += partials[j]
            j += cuda.blockDim.x
        total, unused = block_sums(value, 0.0, per_warp)
        if tid == 0:
            shared_total[0] = total
        cuda.syncthreads()
        alpha_64 = rho / shared_total[0]
    else:
        alpha_64 = s[ALPHA]
    alpha = x.dtype.type(alpha_64)
    # x += α p, r −= α q, r·r
    term = 0.0
    i = start
    while i < n:
        x[i] = x[i] + alpha * p[i]
        value_r = r[i] - alpha * q[i]
        r[i] = value_r
        term += float64(value_r) * float64(value_r)
        i += stride
    total, unused = block_sums(float64(term), 0.0, per_warp)
    if tid == 0:
        partials[second + cuda.blockIdx.x] = total
    grid_barrier(barrier)
    value = 0.0
    j = tid
    while j < blocks:
        value += partials[second + j]
        j += cuda.blockDim.x
    total, unused = block_sums(value, 0.0, per_warp)
    if tid == 0:
        shared_total[0] = total
    cuda.syncthreads()
    rr = shared_total[0]
    beta = p.dtype.type(rr / rho)
    if cuda.blockIdx.x == 0 and tid == 0:
        s[ALPHA] = alpha_64
        s[BETA] = rr / rho
        s[RHO] = rr
    # p = r + β p
    i = start
    while i < n:
        p[i] = r[i] + beta * p[i]
        i += stride


class Vectors:
    """x, r, p, q of one length and dtype, the scalars and both forms' workspaces, on the
    device, from one seed."""

    def __init__(self, n: int, dtype, grid: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.host = {name: rng.standard_normal(n).astype(dtype) for name in "xrpq"}
        self.rho = float(np.dot(self.host["r"].astype(np.float64), self.host["r"]))
        self.grid = grid
        self.reset()
        partials, tickets = workspace(grid)
        self.partials = cuda.to_device(np.zeros(partials))
        self.tickets = cuda.to_device(np.zeros(tickets, np.int32))
        self.fused_partials = cuda.to_device(np.zeros(-(-grid // SECOND) * SECOND + grid))
        self.barrier = cuda.to_device(np.zeros(2, np.int32))

    def reset(self):
        self.d = {name: cuda.to_device(v) for name, v in self.host.items()}
        self.s = cuda.to_device(np.array([self.rho, 0.5, 0.0]))  # α for the two-pass form

    def separate(self, stream=0, with_dot=True):
        d, grid = self.d, self.grid
        if with_dot:
            dot_pass[grid, THREADS, stream](d["p"], d["q"], self.s, self.partials,
                                            self.tickets)
        update_pass[grid, THREADS, stream](d["x"], d["r"], d["p"], d["q"], self.s,
                                           self.partials, self.tickets)
        direction_pass[grid, THREADS, stream](d["r"], d["p"], self.s)

    def fused(self, stream=0, with_dot=True):
        d = self.d
        fused_passes[self.grid, THREADS, stream](d["x"], d["r"], d["p"], d["q"], self.s,
                                                 self.fused_partials, self.barrier, with_dot)

    def state(self):
        return {**{name: v.copy_to_host() for name, v in self.d.items()},
                "s": self.s.copy_to_host()}


def compare(n: int, dtype, grid: int, with_dot: bool = True) -> dict:
    """One iteration of each form from the same vectors: the largest difference, relative to
    the separate passes' values, of x, r, p and the scalars (0: the same bits)."""
    vectors = Vectors(n, dtype, grid)
    vectors.separate(with_dot=with_dot)
    separate = vectors.state()
    vectors.reset()
    vectors.fused(with_dot=with_dot)
    fused = vectors.state()
    return {name: float(np.max(np.abs(fused[name].astype(np.float64) - separate[name])
                               / np.maximum(np.abs(separate[name]), 1e-300)))
            for name in separate}


def measure(cp, n: int, dtype, grid: int, copy_bandwidth: float) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from solvers_gpu import graph_us  # (beside this script)

    vectors = Vectors(n, dtype, grid)
    stream = cp.cuda.Stream(non_blocking=True)
    on = cuda.external_stream(stream.ptr)
    itemsize = np.dtype(dtype).itemsize
    row = {"n": n, "dtype": np.dtype(dtype).name, "grid": grid}
    for with_dot, form in ((True, "three"), (False, "two")):
        row[f"{form}_separate_us"] = graph_us(cp, stream, lambda: vectors.separate(on, with_dot))
        row[f"{form}_fused_us"] = graph_us(cp, stream, lambda: vectors.fused(on, with_dot))
        row[f"{form}_differences"] = compare(n, dtype, grid, with_dot)
    # the bytes: p·q reads 2 vectors, the update reads 4 and writes 2, the direction reads 2
    # and writes 1; fused, each vector once each way
    for form, separate, fused in (("three", 11, 7), ("two", 9, 7)):
        row[f"{form}_separate_floor_us"] = separate * n * itemsize / copy_bandwidth * 1e6
        row[f"{form}_fused_floor_us"] = fused * n * itemsize / copy_bandwidth * 1e6
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="results (JSON)")
    parser.add_argument("--check", action="store_true", help="the comparison alone")
    args = parser.parse_args(argv)
    simulated = cuda.config.ENABLE_CUDASIM
    multiprocessors = 1 if simulated else cuda.get_current_device().MULTIPROCESSOR_COUNT
    grid = BLOCKS_PER_SM * multiprocessors if not simulated else 1
    if args.check:  # the differences as JSON, by dtype
        n = 5000 if simulated else 1_000_003
        print(json.dumps({f"{np.dtype(dtype).name}-{form}": compare(n, dtype, grid, with_dot)
                          for dtype in (np.float32, np.float64)
                          for with_dot, form in ((True, "three"), (False, "two"))}))
        return
    import cupy as cp

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from solvers_gpu import copy_bandwidth

    bandwidth = copy_bandwidth(cp)
    device = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    rows = []
    for name, n in LENGTHS.items():
        for dtype in (np.float32, np.float64):
            row = {"vectors": name, **measure(cp, n, dtype, grid, bandwidth)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": device, "copy_bandwidth": bandwidth,
                                        "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
