"""GMRES's Gram-Schmidt projection two ways: the solver's pass against one that reads the basis
several vectors at a time in slices of a warp.

The projection sums w's dot products with the basis v_0 … v_{c−1} and w·w (the first pass of a
column, :func:`autospmv._solve.gmres.project` as a :class:`autospmv._solve.steps.MultiStep`).
The solver's pass forms a tile of w per block in shared memory, and its warps take the basis
vectors in turn, each reading its vector's stretch of the tile. On vectors of a few 10⁵
elements it takes well above its bytes' time (``gmres_column_pieces.py``): a block has
one or two tiles, and each tile waits for w, then for each of its warp's vectors in turn.

The other form (:func:`project_by_slices`) gives each warp slices of 32 consecutive elements:
it reads w's slice once, then the slice of eight basis vectors at a time (eight loads in flight
per lane), and adds each vector's products across the warp by shuffles, lane 0 keeping the
warp's running sum per vector in shared memory; the last block adds the blocks' sums with all
its threads, eight groups of blocks at once. Each form's sums are added in a fixed order, so
each gives the same bits from run to run (not the same bits as the other).

This benchmark times both (CUDA graphs of 32 copies, as ``solvers_gpu.graph_us``) on the
vector lengths of the 2-D and 3-D Laplacians of 10⁶ and 5·10⁶ nonzeros, with 4, 16 and 30
basis vectors, both dtypes, and checks that the other form's sums match the solver's (and, in
``--check``, float64 sums formed with NumPy). Needs a GPU; ``--check`` also runs under
numba-cuda's simulator::

    PYTHONPATH=. python benchmarks/gmres_projection.py --out FILE
    PYTHONPATH=. python benchmarks/gmres_projection.py --check
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
from numba import float64, int32

from autospmv._support.devices import numba_cuda
from autospmv.kernels.cuda import jit
from autospmv.kernels.cuda.grid_sum import BLOCKS_PER_SM, warp_sum

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solvers_gpu import copy_bandwidth, graph_us  # noqa: E402  (beside this script)

cuda = numba_cuda()  # (numba-cuda with NumPy 2.5 needs its compatibility step)

THREADS = 256
WARPS = THREADS // 32
GROUPS = 8
"""Groups of blocks whose sums the last block's threads add at once (THREADS / 32)."""
SUMS = 32
"""The most sums: 31 basis vectors and w·w."""
AT_ONCE = 8
"""Basis vectors whose slices a warp reads before it adds their products."""

LENGTHS = {"2-D Laplacian of 1e6 nonzeros": 199_809, "3-D Laplacian of 1e6 nonzeros": 140_608,
           "2-D Laplacian of 5e6 nonzeros": 1_000_000, "3-D Laplacian of 5e6 nonzeros": 704_969}
"""Vector lengths of ``benchmarks/solvers_gpu.py``'s Laplacians."""
BASES = (4, 16, 30)
DTYPES = (np.float32, np.float64)


@jit(device=True)
def _product(W, row, i, n, wi):
    if i < n:
        return float64(W[row + i]) * wi
    return 0.0


@jit(device=True)
def _add(sums, warp, k, value, lane):
    value = warp_sum(value)
    if lane == 0:
        sums[warp, k] += value


@jit(launch_bounds=(THREADS, BLOCKS_PER_SM))
def project_by_slices(W, w, v0, ld, n, count, partials, tickets, totals):
    """``totals[k]`` = Σ_i W[v0 + k·ld + i] · W[w + i] for k < ``count`` and
    ``totals[count]`` = Σ_i W[w + i]², in float64 (``partials``: SUMS per block; the ticket 0
    before and after)."""
    sums = cuda.shared.array((WARPS, SUMS), float64)
    last = cuda.shared.array(1, int32)
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    block = cuda.blockIdx.x
    blocks = cuda.gridDim.x
    sums[warp, lane] = 0.0
    cuda.syncwarp()
    norm = 0.0
    first = block * WARPS  # the block's first piece: every warp of a block runs as many rounds
    while first * 32 < n:
        i = (first + warp) * 32 + lane
        wi = 0.0
        if i < n:
            wi = float64(W[w + i])
        norm += wi * wi
        k = 0
        while k + AT_ONCE <= count:
            row = v0 + k * ld
            t0 = _product(W, row, i, n, wi)
            t1 = _product(W, row + ld, i, n, wi)
            t2 = _product(W, row + 2 * ld, i, n, wi)
            t3 = _product(W, row + 3 * ld, i, n, wi)
            t4 = _product(W, row + 4 * ld, i, n, wi)
            t5 = _product(W, row + 5 * ld, i, n, wi)
            t6 = _product(W, row + 6 * ld, i, n, wi)
            t7 = _product(W, row + 7 * ld, i, n, wi)
            _add(sums, warp, k, t0, lane)
            _add(sums, warp, k + 1, t1, lane)
            _add(sums, warp, k + 2, t2, lane)
            _add(sums, warp, k + 3, t3, lane)
            _add(sums, warp, k + 4, t4, lane)
            _add(sums, warp, k + 5, t5, lane)
            _add(sums, warp, k + 6, t6, lane)
            _add(sums, warp, k + 7, t7, lane)
            k += AT_ONCE
        while k < count:
            _add(sums, warp, k, _product(W, v0 + k * ld, i, n, wi), lane)
            k += 1
        first += blocks * WARPS
    _add(sums, warp, count, norm, lane)
    cuda.syncthreads()
    if tid <= count:
        total = 0.0
        for other in range(WARPS):
            total += sums[other, tid]
        partials[block * SUMS + tid] = total
    cuda.threadfence()
    cuda.syncthreads()
    if tid == 0:
        last[0] = cuda.atomic.add(tickets, 0, 1) == blocks - 1
    cuda.syncthreads()
    if last[0] == 0:
        return
    cuda.threadfence()
    group = tid // 32  # the blocks ≡ group (mod GROUPS), for sum k = lane
    value = 0.0
    if lane <= count:
        b = group
        while b < blocks:
            value += partials[b * SUMS + lane]
            b += GROUPS
    sums[group, lane] = value  # (WARPS == GROUPS: the block's own sums are no longer needed)
    cuda.syncthreads()
    if tid <= count:
        total = 0.0
        for g in range(GROUPS):
            total += sums[g, tid]
        totals[tid] = total
    if tid == 0:
        tickets[0] = 0


class Slices:
    """The other form's workspace for a grid of ``grid`` blocks."""

    def __init__(self, grid: int):
        self.grid = grid
        self.partials = cuda.to_device(np.zeros(grid * SUMS))
        self.tickets = cuda.to_device(np.zeros(1, np.int32))
        self.totals = cuda.to_device(np.zeros(SUMS))

    def launch(self, W, w: int, v0: int, ld: int, n: int, count: int, stream=0):
        project_by_slices[self.grid, THREADS, stream](W, w, v0, ld, n, count, self.partials,
                                                      self.tickets, self.totals)

    def sums(self, count: int) -> np.ndarray:
        return self.totals.copy_to_host()[:count + 1]


def grid_for(n: int, multiprocessors: int) -> int:
    """One wave, or a warp per slice where there are fewer slices."""
    return max(1, min(BLOCKS_PER_SM * multiprocessors, -(-n // (32 * WARPS))))


def reference(W: np.ndarray, w: int, v0: int, ld: int, n: int, count: int) -> np.ndarray:
    """The sums in float64 by NumPy."""
    vector = W[w:w + n].astype(np.float64)
    rows = [W[v0 + k * ld:v0 + k * ld + n].astype(np.float64) for k in range(count)]
    return np.array([float(row @ vector) for row in rows] + [float(vector @ vector)])


def check(multiprocessors: int) -> dict:
    """The other form's sums against NumPy's: the largest difference relative to the largest
    sum, by dtype and basis size."""
    simulated = cuda.config.ENABLE_CUDASIM
    n = 3001 if simulated else 1_000_003
    ld = -(-n // 64) * 64
    out = {}
    for dtype in DTYPES:
        for count in ((3, 9) if simulated else BASES):
            W = np.random.default_rng(count).standard_normal((count + 2) * ld).astype(dtype)
            slices = Slices(2 if simulated else grid_for(n, multiprocessors))
            slices.launch(cuda.to_device(W), 0, ld, ld, n, count)
            expected = reference(W, 0, ld, ld, n, count)
            found = slices.sums(count)
            out[f"{np.dtype(dtype).name}-{count}"] = float(
                np.max(np.abs(found - expected)) / np.max(np.abs(expected)))
    return out


def measure(cp, n: int, dtype, basis: int, bandwidth: float, multiprocessors: int) -> dict:
    """µs per projection of each form on a GMRES solve's own workspace, the floor of its bytes
    and the largest difference of the two forms' sums relative to the largest sum."""
    import autospmv
    import scipy.sparse as sp
    from autospmv._solve import gmres
    from gmres_column_pieces import RESTART, gmres_workspace  # (beside this script)

    op = autospmv.prepare(sp.identity(n, dtype=dtype, format="csr"), device="cuda")
    row = {"n": n, "dtype": np.dtype(dtype).name, "basis": basis}
    with gmres_workspace(cp, op, n, dtype) as (machine, method):
        machine.set_flags({gmres.RESTART: RESTART, gmres.COLUMN: basis - 1})
        project = gmres.gram_schmidt_steps(RESTART + 2)[0]
        w, v0, ld = method.w, method.v[0], machine.ld
        stream = machine.stream
        on = cuda.external_stream(stream.ptr)
        slices = Slices(grid_for(n, multiprocessors))
        row["grid"] = slices.grid
        row["tiles_us"] = graph_us(cp, stream, lambda: machine.step(project, w, v0, basis, 0, 1))
        row["slices_us"] = graph_us(cp, stream,
                                    lambda: slices.launch(machine.W, w, v0, ld, n, basis, on))
        stream.synchronize()
        s = machine.s.get()
        h = gmres.H + (basis - 1) * (RESTART + 1)
        solver = np.append(s[h:h + basis], s[gmres.H0] ** 2)
        row["difference"] = float(np.max(np.abs(slices.sums(basis) - solver))
                                  / np.max(np.abs(solver)))
    row["floor_us"] = (basis + 1) * n * np.dtype(dtype).itemsize / bandwidth * 1e6
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="results (JSON)")
    parser.add_argument("--check", action="store_true", help="the sums against NumPy's alone")
    args = parser.parse_args(argv)
    simulated = cuda.config.ENABLE_CUDASIM
    multiprocessors = 1 if simulated else cuda.get_current_device().MULTIPROCESSOR_COUNT
    if args.check:
        print(json.dumps(check(multiprocessors)))
        return
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    results = {"device": device, "copy_bandwidth": copy_bandwidth(cp), "rows": []}
    for (name, n), dtype, basis in itertools.product(LENGTHS.items(), DTYPES, BASES):
        row = {"vectors": name, **measure(cp, n, dtype, basis, results["copy_bandwidth"],
                                          multiprocessors)}
        results["rows"].append(row)
        print(json.dumps(row), flush=True)
        if args.out:  # after every row, so that a run cut short keeps what it measured
            args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
