"""Fused vector steps: one pass over a solver's vectors that updates them elementwise and sums
up to two products on the way, then runs the solver's scalar logic on the sums.

A step is a :class:`Step`: a *body* ``body(W, ld, i, s, D, a, b, c, d, e, g) -> (t0, t1)`` that
does element ``i`` (reads and writes rows of the workspace ``W``, whose row ``k`` starts at
offset ``k * ld``; ``a`` … ``g`` are row offsets, slots or counts chosen by the caller, so
element i of the row at offset ``u`` is ``W[u + i]``; ``D`` is the inverse diagonal of a Jacobi
preconditioner, or one element when there is none) and returns its two terms; an optional
*finish* ``finish(s, f, sum0, sum1)`` that turns the two sums into the solver's scalars ``s``
and flags ``f`` (:mod:`.scalars`); and a *skip* mask: the step does nothing while
``f[STATE] & skip`` (a solver that has stopped leaves its vectors as they are).

Both parts are :func:`~.dual.dual` functions, so one definition runs on both targets:

* on the CPU, :func:`cpu_step` compiles a ``numba.njit`` loop over the elements (``prange`` on
  the threads numba has, for long vectors) that sums the terms and calls finish. It hands the
  body ``ld``, ``i`` and ``a`` … ``g`` as unsigned integers (:data:`CPU_INDEX`; the machine
  passes Python ints, which numba's dispatcher takes fastest), so that ``W[u + i]`` needs no
  wrap-around test for negative indices, and the loop's sums may be reassociated
  (:data:`CPU_FASTMATH`): with both, LLVM vectorises the loop, with partial sums in SIMD lanes
  as BLAS's dot keeps them. A body's own arithmetic is not reassociated (the functions
  :func:`~.dual.dual` compiles keep IEEE semantics). Offsets a body computes stay unsigned
  only from unsigned parts: ``row + ld``, not ``row + k * ld`` with a signed ``k`` (numba types
  a mix of signed and unsigned 64-bit integers as signed). A load or store under a test
  keeps LLVM from vectorising the loop, so the CPU's form of :func:`.bodies.preconditioned`
  loads D without one (:meth:`.dual.Dual.variant`); a body that stores a row only where it is
  not another one (a Jacobi M's row) runs element by element;
* on the GPU, :func:`cuda_step` compiles a numba-cuda kernel: a grid-stride loop, a sum per
  block, and the last block to finish adds the blocks' sums in a fixed order and calls finish
  (:func:`autospmv.kernels.cuda.grid_sum.grid_sums`: a ticket taken with an atomic after each
  block has published its sums). A step that names the scalars its body reads
  (:attr:`Step.held`) hands the body a copy of them in registers. The sums never leave the
  device and are the same from run to run (no floating-point atomics); the ticket is set back
  to 0 for the next step. The grid is one wave,
  :data:`~autospmv.kernels.cuda.grid_sum.BLOCKS_PER_SM` blocks of :data:`BLOCK` threads per
  multiprocessor, and each step's kernel is compiled with those launch bounds, so
  that its registers let them all be resident at once: in a grid-stride loop every block has
  an equal share, and blocks that had to wait for a second wave would double the step's time.
  (A :class:`MultiStep`'s kernel is compiled without them: held to them, its float64 projection
  ran far slower.)

The generated kernels are named after their parts (``__qualname__``) and hold them as globals,
so the compile cache tells them apart and sees changes to the parts' code
(:func:`autospmv.kernels.cuda.cubins.kernel_sources`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from dataclasses import dataclass

import numba
import numpy as np
from numba import prange

from .bodies import combination
from .dual import Dual, dual, retargeted
from .scalars import STATE

BLOCK = 32 if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else 256
"""Threads per block of a step's kernel (a warp under numba-cuda's simulator, which runs each
thread as a Python thread)."""

OVERLAP = True
"""Launch a step's kernel as a programmatic dependent launch
(:mod:`autospmv.kernels.cuda.grid_dependency`): its blocks are scheduled while the kernel before
it finishes, and wait there for its results."""

PARALLEL_FROM = 1 << 18
"""Vectors at least this long are stepped on all of numba's threads on the CPU."""

CPU_INDEX = numba.uint64
"""The type a CPU step hands its body ``ld``, ``i`` and ``a`` … ``g`` in (see the module
docstring)."""

CPU_FASTMATH = {"reassoc"}
"""The fast-math flags of a CPU step's loop: its sums may be reassociated (partial sums per
SIMD lane), nothing else; the body and finish it calls are compiled without fast math."""


@dual
def no_finish(s, f, sum0, sum1):
    """The finish of a step that only updates vectors."""
    return


@dataclass(frozen=True)
class Step:
    """A fused vector step (see the module docstring)."""

    body: Dual
    finish: Dual | None = None
    skip: int = 1
    held: int = 0
    """The leading scalars ``s[0]`` … ``s[held - 1]``, which the body reads and never writes:
    each GPU thread copies them into registers before its loop and hands the body that copy in
    place of ``s``. Read from ``s`` itself they are loaded again for every element, and what
    the body computes from them (cg's α = ρ / p·q) computed again, because the compiler cannot
    tell ``s`` from the workspace the body stores to. Only for a body that reads ``s`` at
    constant slots and a short ``s``: a slot the caller passes (``s[slot]``) keeps the copy in
    the thread's local memory, where copying it costs more than it saves (BiCGSTAB's and
    MINRES's steps, with 9 and 27 scalars, run slower holding them)."""
    host: object = dataclasses.field(default=None, compare=False)
    """What one CPU process runs instead of the body's loop, with NumPy and the BLAS:
    ``host(W, ld, n, s, D, a, b, c, d, e, g)`` (the arguments as the body's, the row at offset
    ``u`` being ``W[u:u + n]``), returning the two sums for the finish (anything, for a step
    without one), where the BLAS does the work faster than a loop over elements (a product
    with many basis vectors). The ranks of :mod:`autospmv.distributed` run the body of a
    step with a finish (their sums are partial)."""

    @property
    def name(self) -> str:
        finish = self.finish.__name__ if self.finish is not None else "none"
        held = f"__held{self.held}" if self.held else ""
        return f"step__{self.body.__name__}__{finish}__{self.skip}{held}"


_COMPILED: dict = {}
_LOCK = threading.Lock()


def _memoised(key, build):
    compiled = _COMPILED.get(key)
    if compiled is None:
        with _LOCK:
            compiled = _COMPILED.get(key)
            if compiled is None:
                compiled = _COMPILED[key] = build()
    return compiled


# The templates below read BODY, FINISH, SKIP, REDUCES, SUMS, BLOCK, cuda and the other upper-case
# names as globals that :func:`~.dual.retargeted` binds for each step (see the module docstring).

def _cpu_template(W, ld, n, s, f, D, a, b, c, d, e, g):
    if f[STATE] & SKIP:
        return
    sum0 = 0.0
    sum1 = 0.0
    for i in prange(n):
        t0, t1 = BODY(W, INDEX(ld), INDEX(i), s, D, INDEX(a), INDEX(b), INDEX(c), INDEX(d),
                      INDEX(e), INDEX(g))
        sum0 += t0
        sum1 += t1
    FINISH(s, f, sum0, sum1)


def cpu_step(step: Step, parallel: bool):
    """The numba CPU function ``run(W, ld, n, s, f, D, a, b, c, d, e, g)`` of ``step``, on
    numba's threads when ``parallel`` (else serial)."""
    return _cpu_function(_cpu_template, step, parallel, FINISH=step.finish or no_finish)


def _cpu_function(template, step, parallel: bool, **names):
    """``template`` with ``step``'s body, skip mask and ``names`` bound, named after the step and
    compiled by ``numba.njit`` (once per step and ``parallel``)."""
    def build():
        function = retargeted(template, "cpu", BODY=step.body, SKIP=step.skip, INDEX=CPU_INDEX,
                              **names)
        function.__qualname__ = function.__name__ = step.name
        return numba.njit(parallel=parallel, error_model="numpy", fastmath=CPU_FASTMATH)(
            function)

    return _memoised(("cpu", step, parallel), build)


def host_dot(x, y) -> float:
    """x · y of host vectors of one length, summed in float64 by a numba loop (partial sums in
    SIMD lanes, as the BLAS's dot keeps them), not by the BLAS: a BLAS call on a long vector
    wakes OpenBLAS's worker threads, which then spin on the cores for a while after it returns,
    where the solve's own loops and products run (and, called between numba loops, it waits
    for workers that have gone to sleep)."""
    def build():
        def dot(x, y):
            total = 0.0
            for i in range(x.shape[0]):
                j = CPU_INDEX(i)
                total += float(x[j]) * y[j]
            return total

        return numba.njit(error_model="numpy", fastmath=CPU_FASTMATH)(dot)

    return _memoised("dot", build)(x, y)


def host_norm(vector) -> float:
    """‖vector‖₂ of a host vector, by :func:`host_dot`."""
    return math.sqrt(host_dot(vector, vector))


def host_subtract(y, x, a: float) -> None:
    """y −= a x in place for host vectors of one length, by a numba loop: one pass, no
    temporary, and no BLAS call (SciPy's ``axpy`` would run on SciPy's own OpenBLAS, whose
    worker threads and NumPy's, each spinning after its library's calls, would take turns
    holding the cores while the other library's call waits for them)."""
    def build():
        def subtract(y, x, a):
            for i in range(y.shape[0]):
                j = CPU_INDEX(i)
                y[j] = y[j] - a * x[j]

        return numba.njit(error_model="numpy")(subtract)

    _memoised("subtract", build)(y, x, a)


def _cuda_template(W, ld, n, s, f, D, a, b, c, d, e, g, partials, tickets):
    wait_for_previous()
    release_dependents()
    if f[STATE] & SKIP:
        return
    tid = cuda.threadIdx.x
    block = cuda.blockIdx.x
    blocks = cuda.gridDim.x
    held = cuda.local.array(HELD, float64)
    for k in range(HELD):
        held[k] = s[k]
    scalars = held if HOLDS else s
    sum0 = 0.0
    sum1 = 0.0
    i = block * BLOCK + tid
    while i < n:
        t0, t1 = BODY(W, ld, i, scalars, D, a, b, c, d, e, g)
        sum0 += t0
        sum1 += t1
        i += blocks * BLOCK
    if not REDUCES:
        return
    last, sum0, sum1 = grid_sums(sum0, sum1, partials, tickets)
    if last:
        FINISH(s, f, sum0, sum1)


def cuda_step(step: Step):
    """The numba-cuda kernel ``kernel(W, ld, n, s, f, D, a, b, c, d, e, g, partials, tickets)``
    of ``step`` (blocks of :data:`BLOCK` threads; ``partials`` and ``tickets`` at least of the
    lengths :func:`autospmv.kernels.cuda.grid_sum.workspace` gives for the grid, the tickets 0
    between steps)."""
    return _cuda_function(_cuda_template, step, step.finish or no_finish, [], True,
                          REDUCES=step.finish is not None, HELD=max(step.held, 1),
                          HOLDS=step.held > 0)


def _cuda_function(template, step, finish: Dual, device_functions: list, bounded: bool,
                   suffix: str = "", **names):
    """``template`` with ``step``'s body, skip mask and ``finish`` bound, with ``names``, the
    names every step kernel reads (``cuda``, ``BLOCK``, the grid-dependency calls, ...), and
    the ``(name, template)`` pairs of ``device_functions`` compiled as device functions in
    that order (each may call the ones before it); named after the step (and ``suffix``) and
    compiled by numba-cuda (once per step and template), with the launch bounds of the steps'
    grid where ``bounded``."""
    def build():
        from numba import cuda, float64, int32

        from ..kernels.cuda.grid_dependency import release_dependents, wait_for_previous
        from ..kernels.cuda.grid_sum import BLOCKS_PER_SM, grid_sums, warp_sum

        bound = dict(cuda=cuda, float64=float64, int32=int32, BLOCK=BLOCK,
                     wait_for_previous=wait_for_previous,
                     release_dependents=release_dependents, grid_sums=grid_sums,
                     warp_sum=warp_sum, **names)
        for name, device_template in device_functions:
            bound[name] = cuda.jit(device=True)(retargeted(device_template, "cuda", **bound))
        function = retargeted(template, "cuda", BODY=step.body.on("cuda"),
                              FINISH=finish.on("cuda"), SKIP=step.skip, **bound)
        function.__qualname__ = function.__name__ = step.name + suffix
        if cuda.config.ENABLE_CUDASIM or not bounded:
            return cuda.jit(function)
        return cuda.jit(function, launch_bounds=(BLOCK, BLOCKS_PER_SM))

    return _memoised(("cuda", step, template, suffix), build)


@dataclass(frozen=True)
class MultiStep:
    """A fused vector step against a basis: its body
    ``body(W, ld, i, s, D, a, b, c, d, e, g, combined) -> value`` forms (and stores) element i
    of a vector w, and the step sums w's products with the ``c`` rows of the workspace from
    offset ``b`` (at ``b``, ``b + ld``, …) and w·w, ``c + 1`` sums in all (at most ``sums``),
    which its finish ``finish(s, f, totals)`` reads in that order (GMRES's Gram-Schmidt passes:
    one sum per basis vector and one for the norm; with ``c`` = 0 only the norm). A step that
    ``combines`` hands its body element i of Σ_k s[d + k] · (row k from ``b``) over k < ``e``
    (:func:`.bodies.combination`, in float64) as ``combined``; any other step, 0.

    On the GPU (:func:`cuda_multi_step`) each block forms a tile of w into shared memory, and
    its warps take the basis vectors in turn, each reading its vector's stretch of the tile in
    whole lines: the basis is read once, coalesced, and no thread keeps a sum per vector. In
    float32 each thread takes four elements at a time and reads them from each basis vector as
    one 16-byte value (:func:`wide_view`): one float32 a load leaves too few bytes in flight to
    draw the memory's bandwidth. In float64 a thread takes one element at a time: loads of two
    float64 a thread ran slower there."""

    body: Dual
    finish: Dual
    sums: int
    skip: int = 1
    host: object = dataclasses.field(default=None, compare=False)
    """What one CPU process runs instead of the body's loop, with the BLAS's vector products:
    ``host(W, ld, n, s, D, a, b, c, d, e, g) -> totals`` (the arguments as the body's but
    ``combined``, the row at offset ``u`` being ``W[u:u + n]``). Row by row, BLAS reads a basis
    of many vectors far faster than a loop over elements that visits every vector at each
    element. It may reach the finish's result another way (GMRES's runs SciPy's own
    Gram-Schmidt), so the ranks of :mod:`autospmv.distributed`, whose sums are partial, run
    the body."""
    combines: bool = False

    @property
    def name(self) -> str:
        combines = "__combines" if self.combines else ""
        return (f"multistep__{self.body.__name__}__{self.finish.__name__}__{self.sums}__"
                f"{self.skip}{combines}")


def wide_view(W):
    """The workspace ``W`` as a :class:`MultiStep`'s GPU kernel reads its basis: float32 viewed
    as complex128, four elements a load (the rows start on whole loads: the machine's row
    length and offsets are multiples of 64 elements); float64 as it is."""
    return W.view(np.complex128) if elements_per_thread(W.itemsize) > 1 else W


def elements_per_thread(itemsize: int) -> int:
    """The elements of w that a thread of a :class:`MultiStep`'s kernel takes at a time: four
    in float32 (one load of :func:`wide_view`), one in float64."""
    return 4 if itemsize == 4 else 1


def multi_tile(itemsize: int) -> int:
    """The elements of w that a block of a :class:`MultiStep`'s kernel forms at a time."""
    return BLOCK * elements_per_thread(itemsize)


def _cpu_multi_template(W, ld, n, s, f, D, a, b, c, d, e, g):
    if f[STATE] & SKIP:
        return
    chunks = max(1, min(CHUNKS, n // 4096))
    partial = np.zeros((chunks, SUMS))
    for chunk in prange(chunks):
        start = n * chunk // chunks
        end = n * (chunk + 1) // chunks
        acc = partial[chunk]
        for j in range(start, end):
            i = INDEX(j)
            combined = 0.0
            if COMBINES:
                combined = combination(W, INDEX(ld), i, s, INDEX(b), INDEX(d), INDEX(e))
            value = BODY(W, INDEX(ld), i, s, D, INDEX(a), INDEX(b), INDEX(c), INDEX(d),
                         INDEX(e), INDEX(g), combined)
            row = INDEX(b)
            for k in range(c):
                acc[k] += float(W[row + i]) * value
                row += INDEX(ld)
            acc[c] += float(value) * value
    totals = np.zeros(SUMS)
    for chunk in range(chunks):
        for k in range(c + 1):
            totals[k] += partial[chunk, k]
    FINISH(s, f, totals)


def cpu_multi_step(step: MultiStep, parallel: bool):
    """The numba CPU function of a :class:`MultiStep` (arguments as :func:`cpu_step`'s)."""
    return _cpu_function(_cpu_multi_template, step, parallel, FINISH=step.finish,
                         SUMS=step.sums, COMBINES=step.combines,
                         CHUNKS=numba.config.NUMBA_NUM_THREADS if parallel else 1)


def _cuda_multi_template(W, ld, n, s, f, D, a, b, c, d, e, g, partials, tickets, wide):
    wait_for_previous()
    release_dependents()
    if f[STATE] & SKIP:
        return
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    block = cuda.blockIdx.x
    blocks = cuda.gridDim.x
    tile = cuda.shared.array(TILE, float64)
    totals = cuda.shared.array(SUMS, float64)
    for k in range(tid, c + 1, BLOCK):
        totals[k] = 0.0
    norm = 0.0
    groups = n // PER  # of PER elements, one group a thread at a time
    start = block * BLOCK
    while start < groups:
        q = start + tid
        if PER == 1:
            value = _element(W, ld, q, n, s, D, a, b, c, d, e, g)
            tile[tid] = value
            norm += value * value
        else:
            sums = (0.0, 0.0, 0.0, 0.0)
            if COMBINES and q < groups:
                sums = _wide_combination(wide, b // PER + q, ld // PER, s, d, e)
            for p in range(PER):
                value = 0.0
                if q < groups:
                    value = float(BODY(W, ld, q * PER + p, s, D, a, b, c, d, e, g, sums[p]))
                tile[p * BLOCK + tid] = value
                norm += value * value
        if c > 0:
            cuda.syncthreads()
            width = min(BLOCK, groups - start)
            for k in range(warp, c, WARPS):
                row = (b + k * ld) // PER + start
                if PER == 1:
                    total = _element_tile_dot(W, row, tile, width, lane)
                else:
                    total = _tile_dot(wide, row, tile, width, lane)
                if lane == 0:
                    totals[k] += total
            cuda.syncthreads()
        start += blocks * BLOCK
    if PER > 1 and block == 0 and warp == 0 and groups * PER < n:  # the last, fewer than PER
        i = groups * PER + lane
        value = _element(W, ld, i, n, s, D, a, b, c, d, e, g)
        norm += value * value
        for k in range(c):
            term = 0.0
            if i < n:
                term = float(W[b + k * ld + i]) * value
            term = warp_sum(term)
            if lane == 0:
                totals[k] += term
    _publish(totals, norm, c, s, f, partials, tickets)


def _element_template(W, ld, i, n, s, D, a, b, c, d, e, g):
    """Element i of w as the step's body forms it (0 from n on), handed the combination where
    the step combines."""
    if i >= n:
        return 0.0
    combined = 0.0
    if COMBINES:
        combined = combination(W, ld, i, s, b, d, e)
    return float(STEP_BODY(W, ld, i, s, D, a, b, c, d, e, g, combined))


def _publish_template(totals, norm, c, s, f, partials, tickets):
    """The end of a :class:`MultiStep`'s kernel: the block's ``c`` sums in ``totals`` (shared)
    and the norm's terms ``norm`` (each thread's) into ``partials``; the block that finishes
    last adds every block's, in a fixed order, and runs the step's finish on them."""
    tid = cuda.threadIdx.x
    lane = tid % 32
    warp = tid // 32
    block = cuda.blockIdx.x
    blocks = cuda.gridDim.x
    warp_norms = cuda.shared.array(WARPS, float64)
    last = cuda.shared.array(1, int32)
    norm = warp_sum(norm)
    if lane == 0:
        warp_norms[warp] = norm
    cuda.syncthreads()
    if tid == 0:
        total = 0.0
        for other in range(WARPS):
            total += warp_norms[other]
        totals[c] = total
    cuda.syncthreads()
    for k in range(tid, c + 1, BLOCK):
        partials[block * SUMS + k] = totals[k]
    cuda.threadfence()
    cuda.syncthreads()
    if tid == 0:
        last[0] = cuda.atomic.add(tickets, 0, 1) == blocks - 1
    cuda.syncthreads()
    if last[0] == 0:
        return
    cuda.threadfence()
    for k in range(warp, c + 1, WARPS):
        total = 0.0
        j = lane
        while j < blocks:
            total += partials[j * SUMS + k]
            j += 32
        total = warp_sum(total)
        if lane == 0:
            totals[k] = total
    cuda.syncthreads()
    if tid == 0:
        STEP_FINISH(s, f, totals)
        tickets[0] = 0


def _parts_template(load):
    """The four float32 of a 16-byte load (a complex128), in float64: the lower and upper
    halves of the real part's bits, then of the imaginary's (the lower address in the lower
    half)."""
    real = load.real
    imag = load.imag
    return (float64(libdevice.int_as_float(libdevice.double2loint(real))),
            float64(libdevice.int_as_float(libdevice.double2hiint(real))),
            float64(libdevice.int_as_float(libdevice.double2loint(imag))),
            float64(libdevice.int_as_float(libdevice.double2hiint(imag))))


def _add_scaled_template(y0, y1, y2, y3, load, h):
    """``(y0, y1, y2, y3)`` plus h times the load's elements (:func:`_parts_template`)."""
    x0, x1, x2, x3 = _parts(load)
    return y0 + h * x0, y1 + h * x1, y2 + h * x2, y3 + h * x3


def _wide_combination_template(wide, row, ld, s, d, count):
    """The four elements of the load at ``row`` of Σ_k s[d + k] v_k over k < ``count`` (v_k
    ``ld`` loads apart), four loads in flight."""
    y0 = 0.0
    y1 = 0.0
    y2 = 0.0
    y3 = 0.0
    k = 0
    while k + 3 < count:
        load0 = wide[row]
        load1 = wide[row + ld]
        load2 = wide[row + 2 * ld]
        load3 = wide[row + 3 * ld]
        y0, y1, y2, y3 = _add_scaled(y0, y1, y2, y3, load0, s[d + k])
        y0, y1, y2, y3 = _add_scaled(y0, y1, y2, y3, load1, s[d + k + 1])
        y0, y1, y2, y3 = _add_scaled(y0, y1, y2, y3, load2, s[d + k + 2])
        y0, y1, y2, y3 = _add_scaled(y0, y1, y2, y3, load3, s[d + k + 3])
        row += 4 * ld
        k += 4
    while k < count:
        y0, y1, y2, y3 = _add_scaled(y0, y1, y2, y3, wide[row], s[d + k])
        row += ld
        k += 1
    return y0, y1, y2, y3


def _group_dot_template(load, tile, j):
    """The load's elements times the tile's group ``j`` (its element p at ``p * BLOCK + j``)."""
    x0, x1, x2, x3 = _parts(load)
    return (x0 * tile[j] + x1 * tile[BLOCK + j]) + (x2 * tile[2 * BLOCK + j]
                                                   + x3 * tile[3 * BLOCK + j])


def _tile_dot_template(wide, row, tile, width, lane):
    """One warp's sum of the tile's ``width`` groups times the loads from ``row`` (each lane
    four lines apart at a time, then shuffles in a fixed order), returned to lane 0."""
    t0 = 0.0
    t1 = 0.0
    t2 = 0.0
    t3 = 0.0
    j = lane
    while j + 96 < width:
        load0 = wide[row + j]
        load1 = wide[row + j + 32]
        load2 = wide[row + j + 64]
        load3 = wide[row + j + 96]
        t0 += _group_dot(load0, tile, j)
        t1 += _group_dot(load1, tile, j + 32)
        t2 += _group_dot(load2, tile, j + 64)
        t3 += _group_dot(load3, tile, j + 96)
        j += 128
    while j < width:
        t0 += _group_dot(wide[row + j], tile, j)
        j += 32
    return warp_sum((t0 + t1) + (t2 + t3))


def _element_tile_dot_template(W, row, tile, width, lane):
    """One warp's sum of ``W[row + j] * tile[j]`` over j < ``width`` (each lane's loads of a
    whole tile, eight, in flight at once; of a shorter one four, then one at a time; then
    shuffles in a fixed order), returned to lane 0: the float64 form of
    :func:`_tile_dot_template`, one element a load. With four loads in flight where eight
    could be, the pass reads the basis below the memory's bandwidth."""
    t0 = 0.0
    t1 = 0.0
    t2 = 0.0
    t3 = 0.0
    j = lane
    while j + 224 < width:
        load0 = W[row + j]
        load1 = W[row + j + 32]
        load2 = W[row + j + 64]
        load3 = W[row + j + 96]
        load4 = W[row + j + 128]
        load5 = W[row + j + 160]
        load6 = W[row + j + 192]
        load7 = W[row + j + 224]
        t0 += float(load0) * tile[j]
        t1 += float(load1) * tile[j + 32]
        t2 += float(load2) * tile[j + 64]
        t3 += float(load3) * tile[j + 96]
        t0 += float(load4) * tile[j + 128]
        t1 += float(load5) * tile[j + 160]
        t2 += float(load6) * tile[j + 192]
        t3 += float(load7) * tile[j + 224]
        j += 256
    while j + 96 < width:
        load0 = W[row + j]
        load1 = W[row + j + 32]
        load2 = W[row + j + 64]
        load3 = W[row + j + 96]
        t0 += float(load0) * tile[j]
        t1 += float(load1) * tile[j + 32]
        t2 += float(load2) * tile[j + 64]
        t3 += float(load3) * tile[j + 96]
        j += 128
    while j < width:
        t0 += float(W[row + j]) * tile[j]
        j += 32
    return warp_sum((t0 + t1) + (t2 + t3))


def cuda_multi_step(step: MultiStep, itemsize: int):
    """The numba-cuda kernel of a :class:`MultiStep` for a workspace of ``itemsize``-byte
    elements: arguments as :func:`cuda_step`'s (``partials`` holding ``step.sums`` float64 per
    block), then :func:`wide_view` of the workspace. In float64 a thread forms one element of a
    tile and reads one element of a basis vector a load; in float32 four, 16 bytes a load."""
    from numba.cuda import libdevice

    per = elements_per_thread(itemsize)
    return _cuda_function(_cuda_multi_template, step, step.finish,
                          [("_parts", _parts_template),
                           ("_add_scaled", _add_scaled_template),
                           ("_wide_combination", _wide_combination_template),
                           ("_group_dot", _group_dot_template),
                           ("_tile_dot", _tile_dot_template),
                           ("_element_tile_dot", _element_tile_dot_template),
                           ("_element", _element_template),
                           ("_publish", _publish_template)], False,
                          "__wide" if per > 1 else "", PER=per,
                          SUMS=step.sums, WARPS=BLOCK // 32, TILE=multi_tile(itemsize),
                          COMBINES=step.combines, STEP_BODY=step.body,
                          STEP_FINISH=step.finish,
                          libdevice=libdevice)
