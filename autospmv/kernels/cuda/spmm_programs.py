"""Multi-vector product (SpMM) on the GPU, host side: which kernel of :mod:`.spmm` computes
``Y = A @ X`` for a row-major X of k columns, on A's CSR arrays, and its launches.

k ≤ :data:`FEW_COLUMNS` columns run the few-columns kernel. For k > :data:`FEW_COLUMNS` no
kernel wins everywhere (see :mod:`.spmm`), so the first product of k columns times the one-pass
programs (:data:`ONE_PASS`) and, for k ≤ :data:`MEASURED_UP_TO`, the eight-columns kernel and
the few-columns kernel in passes of four columns (each pass handed X and Y from its first column
on, :class:`ColumnLaunch`, each reading A again), and keeps the fastest
(:class:`MultiVectorProgram`, :func:`programs_for`). Where X outgrows the GPU's L2 cache, or has
more than :data:`MAX_TILE` columns, it also times the column pairs and quads in tiles of X's
columns (:data:`TILED`, :func:`tile_width`): one launch per tile, each handed X and Y from the
tile's first column on, so that the rows of X that neighbouring rows of A share stay in L2 while
a tile is gathered and a row takes fewer lanes, at the price of reading A once per tile.

Long rows: rows longer than :data:`.spmm.PIECE` nonzeros have their further pieces listed
(:func:`long_row_pieces`, computed once from the row pointer), and every launch of a kernel on
the rows is followed by a second launch of the same kernel on those pieces (:func:`launches`); a
matrix without long rows has no second launch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import cuda

from ... import _registry as registry
from ..._support.timing import CudaClock
from ...formats.base import RowStructure
from .. import unsigned
from .launch import SIMULATOR, X, Y, Launch
from .spmm import (BLOCK, PIECE, spmm_column_pairs_kernel, spmm_column_pairs_wide_step_kernel,
                   spmm_column_quads_kernel, spmm_eight_columns_kernel,
                   spmm_few_columns_kernel, spmm_many_columns_kernel)

if not SIMULATOR:
    from cuda.bindings import driver

FEW_COLUMNS = 4
"""Products with at most this many columns use :func:`.spmm.spmm_few_columns_kernel`."""

MEASURED_UP_TO = 8
"""Column counts above :data:`FEW_COLUMNS` up to this also time the few-columns kernel in passes
of :data:`FEW_COLUMNS` columns at the first product (:meth:`MultiVectorProgram.run`), each
pass reading A again. The passes win where rows are long enough for the few-columns kernel's
split of a row's nonzeros to beat a few lanes per row; from 9 columns on, four passes or more
lost to the many-columns kernel on every matrix of the SpMM benchmark (timed up to 16
columns)."""

EIGHT_COLUMNS = 8
"""Most columns of :func:`.spmm.spmm_eight_columns_kernel` (its eight sums a lane)."""

MIN_TILE = 16
"""Fewest columns of a tile of X (:func:`tile_width`): narrower tiles read A once for too few
columns."""

MAX_TILE = 64
"""Widest tile of X (:func:`tile_width`), and so the tile of every product of more columns:
the column quads, 32 lanes a row from 65 columns on, run 128 columns 1.45 times slower than
two tiles of 64 columns (16 lanes a row) even where X fits the L2 cache (the H200's SpMM
benchmark, float32, lock1074 grown to 4·10⁶ nonzeros)."""

COLUMNS_PER_LANE = 4
"""Columns a lane of :func:`.spmm.spmm_many_columns_kernel` accumulates in one pass over a row
(its four sums)."""


def long_row_pieces(indptr: np.ndarray, piece: int = PIECE) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, starts)``: every piece of :data:`.spmm.PIECE` nonzeros of a row after its first, as
    the row it belongs to and the position of its first nonzero (arrays of indptr's dtype, in
    row order; empty when no row is longer than a piece)."""
    indptr = np.asarray(indptr)
    lengths = np.diff(indptr).astype(np.int64)
    extra = np.maximum(-(-lengths // piece) - 1, 0)
    rows = np.repeat(np.arange(lengths.size, dtype=np.int64), extra)
    first = np.cumsum(extra) - extra  # each long row's first entry in the list
    rank = np.arange(rows.size, dtype=np.int64) - np.repeat(first, extra) + 1
    starts = indptr[:-1].astype(np.int64)[rows] + rank * piece
    return rows.astype(indptr.dtype), starts.astype(indptr.dtype)


RULE = (f"multi-vector products (A @ X, X of k columns) run on A's CSR arrays: for "
        f"k ≤ {FEW_COLUMNS}, a group of lanes per row over its nonzeros (csr_vector's group "
        f"size for pieces of at most {PIECE} nonzeros) with k sums each; for larger k, the "
        f"fastest at the first product of k columns of: 2 to 32 lanes per row over the "
        f"columns of X, {COLUMNS_PER_LANE} columns a lane; the same with a pair of adjacent "
        f"columns a lane, four or eight nonzeros a step; four adjacent columns a lane; and up "
        f"to k = {MEASURED_UP_TO} the first kernel's split with up to {EIGHT_COLUMNS} sums, "
        f"and the first kernel in passes of {FEW_COLUMNS} columns; where X outgrows the L2 "
        f"cache or has more than {MAX_TILE} columns, the column pairs and quads in tiles of "
        f"X's columns that fit it, of at most {MAX_TILE} (where the first product cannot be "
        f"timed, in a CUDA graph being captured, the program the model's SpMM rule names, "
        f"else the first of these); rows longer than {PIECE} nonzeros are split among groups")
"""The rule :class:`MultiVectorProgram` follows, as the decision notes it."""


class ColumnLaunch(NamedTuple):
    """A launch of ``Y = A @ X`` on the columns of X and Y from ``first`` on: it is handed X
    and Y from their column ``first`` (their addresses shifted by that many elements, see
    :meth:`closure`), so a pass of the few-columns kernel reads its window of columns as the
    first columns of rows k apart, with no argument of its own for the window."""

    launch: Launch
    first: int

    def load(self, n: int, m: int, k: int) -> None:
        """Load the launch for an X of n rows and a Y of m rows, k columns each (the launch is
        handed them from column ``first`` on)."""
        self.launch.load(max(n * k - self.first, 0), max(m * k - self.first, 0))

    def closure(self, x_dtype, y_dtype):
        """``f(x, y, stream)`` running the launch with X and Y shifted to column ``first``:
        device addresses on a GPU (the launch loaded), flat device arrays under the
        simulator."""
        first = self.first
        if SIMULATOR:
            return lambda x, y, stream=0: self.launch.simulate(x[first:], y[first:])
        fire = self.launch.fire()
        if not first:
            return fire
        dx, dy = first * np.dtype(x_dtype).itemsize, first * np.dtype(y_dtype).itemsize
        return lambda x, y, stream: fire(x + dx, y + dy, stream)


class OnePass(NamedTuple):
    """A program of k > :data:`FEW_COLUMNS` columns that passes over A once: its kernel, the
    columns a lane accumulates in a pass over a row, and how the decision's notes name it."""

    kernel: object
    columns_per_lane: int
    name: str


ONE_PASS = {
    "many_columns": OnePass(spmm_many_columns_kernel, COLUMNS_PER_LANE,
                            "the many-columns kernel"),
    "column_pairs": OnePass(spmm_column_pairs_kernel, 2, "the column-pairs kernel"),
    "column_pairs_wide_step": OnePass(spmm_column_pairs_wide_step_kernel, 2,
                                      "the column-pairs kernel of eight nonzeros a step"),
    "column_quads": OnePass(spmm_column_quads_kernel, 4, "the column-quads kernel"),
}
"""The one-pass programs of k > :data:`FEW_COLUMNS` columns, by name."""

TILED = ("column_pairs", "column_quads")
"""The one-pass programs also timed in tiles of X's columns (:func:`tile_width`) where X
outgrows the L2 cache or has more than :data:`MAX_TILE` columns: the column pairs, which win
most products of many columns, and the column quads, which win many float32 products of up to
64 columns whose rows are short."""

PROGRAMS = (*ONE_PASS, "passes", "eight_columns")
"""Every program of a product of more than :data:`FEW_COLUMNS` columns: the one-pass programs
(:data:`ONE_PASS`), and for up to :data:`MEASURED_UP_TO` columns the few-columns kernel in
passes of :data:`FEW_COLUMNS` columns and the eight-columns kernel."""


def launches(shape: tuple[int, int], arrays: dict, pieces: tuple, few_group: int, k: int,
             x_dtype, y_dtype, program: str = "many_columns", tile: int = 0
             ) -> list[ColumnLaunch]:
    """The launches of ``Y = A @ X`` for X of k columns (not loaded): the row launch, and the
    piece launch where ``pieces`` (the rows and starts of :func:`long_row_pieces`) has any.
    ``arrays``: A's CSR arrays (``indptr``, ``indices``, ``data``; host arrays stand in for
    device arrays when only PTX is compiled); ``few_group``: the lanes per row of the
    few-columns and eight-columns kernels. ``program`` (one of :data:`PROGRAMS`) is for
    k > :data:`FEW_COLUMNS`: a one-pass program, the eight-columns kernel (k ≤
    :data:`EIGHT_COLUMNS`), or the few-columns kernel in passes of :data:`FEW_COLUMNS` columns
    (both launches per pass, each pass on the columns from its ``first``); k ≤
    :data:`FEW_COLUMNS` always runs the few-columns kernel once. ``tile`` (a one-pass program
    only, 0 for none): the one-pass program runs on tiles of this many columns, one after
    the other, so that the X it gathers at a time is a tile's columns (see
    :func:`tile_width`).

    Raises
    ------
    ValueError
        For a program not in :data:`PROGRAMS`, the eight-columns kernel for more than
        :data:`EIGHT_COLUMNS` columns, or a tile for a program that is not one-pass."""
    if program not in PROGRAMS:
        raise ValueError(f"program must be one of {PROGRAMS}; got {program!r}")
    if program == "eight_columns" and k > EIGHT_COLUMNS:
        raise ValueError(f"the eight-columns kernel takes at most {EIGHT_COLUMNS} columns; "
                         f"got {k}")
    if tile and (program not in ONE_PASS or tile < 1):
        raise ValueError(f"tiles of columns are for the one-pass programs {tuple(ONE_PASS)}, "
                         f"of at least one column; got {program!r} in tiles of {tile}")
    if k <= FEW_COLUMNS or program == "passes":
        kernel, group, window = spmm_few_columns_kernel, few_group, FEW_COLUMNS
    elif program == "eight_columns":
        kernel, group, window = spmm_eight_columns_kernel, few_group, EIGHT_COLUMNS
    else:
        one_pass = ONE_PASS[program]
        window = min(tile, k) if tile else k
        kernel, group = one_pass.kernel, lanes_per_row(window, one_pass.columns_per_lane)
    piece_row, piece_start = pieces
    steps = []
    for first in range(0, k, window):
        for items, in_pieces in ((shape[0], 0), (piece_row.shape[0], 1)):
            if not items:
                continue
            args = [arrays["indptr"], unsigned(arrays["indices"]), arrays["data"], X, Y,
                    np.int64(k), np.int64(min(window, k - first)),
                    np.int32(group.bit_length() - 1), piece_row, piece_start,
                    np.int32(in_pieces)]
            launch = Launch(kernel, -(-items * group // BLOCK), BLOCK, args, y_dtype)
            if np.dtype(x_dtype) != np.dtype(y_dtype):
                launch = launch.for_vectors(x_dtype, y_dtype)
            steps.append(ColumnLaunch(launch, first))
    return steps


def tile_width(k: int, n: int, itemsize: int, cache_bytes: int) -> int:
    """The tile width (columns) of the tiled programs (:data:`TILED`) for X of n rows × k
    columns of ``itemsize`` bytes and an L2 cache of ``cache_bytes``: the widest power of two
    of columns, at most :data:`MAX_TILE`, whose tile of X fits the cache (a power of two fills
    the lanes a row takes), where that is fewer than k columns and at least :data:`MIN_TILE`;
    0 (no tiles) otherwise. Gathered from a tile that stays in L2, rows of X that a matrix's
    rows share are read from memory once per tile instead of again whenever the cache has
    dropped them; A is read once per tile.

    Examples
    --------
    >>> MiB = 1 << 20
    >>> tile_width(128, 175_000, 4, 50 * MiB)  # X of 90 MB
    64
    >>> tile_width(64, 175_000, 4, 50 * MiB)   # 45 MB: fits
    0
    >>> tile_width(64, 175_000, 8, 50 * MiB), tile_width(128, 1_000, 8, 50 * MiB)
    (32, 64)
    """
    fitting = cache_bytes // max(n * itemsize, 1)
    width = min(1 << (fitting.bit_length() - 1), MAX_TILE) if fitting else 0
    return width if MIN_TILE <= width < k else 0


def lanes_per_row(k: int, columns_per_lane: int) -> int:
    """The lanes per row of a one-pass program for k columns: the smallest power of two from 2
    to 32 that leaves each lane at most ``columns_per_lane`` columns (32 beyond
    ``32 × columns_per_lane`` columns, covered in passes).

    Examples
    --------
    >>> [lanes_per_row(k, 2) for k in (5, 8, 9, 16, 17, 64, 65, 200)]
    [4, 4, 8, 8, 16, 32, 32, 32]
    """
    lanes = -(-k // columns_per_lane)
    return min(32, max(2, 1 << (lanes - 1).bit_length()))


def few_columns_group(shape: tuple[int, int], host_indptr: np.ndarray,
                      pieces: tuple | None = None) -> int:
    """The lanes per row of the few-columns kernel: csr_vector's group size for the work items
    the kernel runs, each row's first :data:`.spmm.PIECE` nonzeros and the further pieces of
    long rows (``pieces``: :func:`long_row_pieces` of ``host_indptr``, computed here when not
    given).
    (The row lengths themselves would let a few long rows, which the pieces split, give every
    short row a whole warp.)"""
    indptr = np.asarray(host_indptr, dtype=np.int64)
    lengths = np.diff(indptr)
    rows, starts = (long_row_pieces(indptr) if pieces is None
                    else (np.asarray(a, dtype=np.int64) for a in pieces))
    items = np.concatenate([np.minimum(lengths, PIECE),
                            np.minimum(indptr[rows + 1], starts + PIECE) - starts])
    item_indptr = np.concatenate([[0], np.cumsum(items)])
    structure = RowStructure((items.size, shape[1]), item_indptr, np.dtype(np.float64))
    return registry.choose_params("csr_vector", structure, "cuda")["threads_per_row"]


class MultiVectorProgram:
    """A's CSR arrays on the GPU and the launches of ``Y = A @ X``, loaded for each column
    count and vector dtype at its first product (the kernels take k as an argument: one
    compilation per dtype serves every k).

    ``arrays``: the CSR arrays on the device (``indptr``, ``indices``, ``data``);
    ``host_indptr``: the row pointer on the host, which the long-row pieces (uploaded here) and
    the few-columns group size come from; ``notes``: a list that gets a line for each measured
    or picked choice (:meth:`run`), the decision's notes; ``rule``: the model's
    :class:`~autospmv._decide.model.spmm_rule.SpmmRule` (or None), whose program runs where the
    programs cannot be timed. The current GPU's L2 cache size
    (``cache_bytes``; 0 under the simulator, where nothing is timed) sets the tiles of the
    tiled programs (:func:`tile_width`). Not safe to run from two threads at once (see
    :meth:`Launch.fire <autospmv.kernels.cuda.launch.Launch.fire>`): the caller holds a lock.
    """

    PROGRAMS = 32
    """Launch sets kept (one per column count and dtypes: the launches, which own their
    parameter buffers, and their closures); the oldest gives way beyond this."""

    def __init__(self, shape: tuple[int, int], arrays: dict, host_indptr: np.ndarray,
                 notes: list | None = None, rule=None):
        self.shape = shape
        self.rule = rule
        rows = len(host_indptr) - 1
        self.row_mean = float(host_indptr[-1]) / rows if rows > 0 else 0.0
        self.arrays = arrays
        pieces = long_row_pieces(host_indptr)
        self.pieces = tuple(_to_device(a) for a in pieces)
        self.few_group = few_columns_group(shape, host_indptr, pieces)
        self.notes = [] if notes is None else notes
        self.cache_bytes = 0 if SIMULATOR else cuda.get_current_device().L2_CACHE_SIZE
        self._programs = {}

    @property
    def nbytes(self) -> int:
        """Device bytes of the long-row piece list."""
        return sum(a.nbytes for a in self.pieces)

    def run(self, k: int, x_dtype, y_dtype, x, y, stream) -> None:
        """``Y = A @ X`` for k columns: ``x``, ``y`` the device addresses of X and Y (arrays,
        flattened, under the simulator), queued on ``stream``.

        For k > :data:`FEW_COLUMNS` on a GPU, the first product of k columns (and dtypes)
        times the programs of :func:`programs_for` (:func:`time_programs`, on this X and Y:
        it waits for the stream) and keeps the fastest for every later product, noting their
        times. Where it cannot time (the stream is being captured into a graph; under the
        simulator) it runs the rule's program for k and A's mean row length
        (:meth:`picked`), noted, and without a rule the many-columns kernel."""
        key = (k, np.dtype(x_dtype), np.dtype(y_dtype))
        program = self._programs.get(key)
        if program is None:
            program = self.build(k, x_dtype, y_dtype, ("many_columns", 0))
            if k > FEW_COLUMNS:
                candidates = programs_for(k, self.shape[1], np.dtype(x_dtype).itemsize,
                                          self.cache_bytes)
                times, built = None, None
                if not SIMULATOR:
                    built = [program] + [self.build(k, x_dtype, y_dtype, candidate)
                                         for candidate in candidates[1:]]
                    times = time_programs(built, x, y, stream)
                if times is not None:
                    timed = dict(zip(candidates, times))
                    self.notes.append(timed_choice_note(key, timed))
                    program = built[candidates.index(min(timed, key=timed.get))]
                elif (picked := self.picked(k, candidates)) is not None:
                    program = (built[candidates.index(picked)] if built is not None else
                               self.build(k, x_dtype, y_dtype, picked))
                    why = ("nothing is timed under numba-cuda's simulator" if SIMULATOR else
                           "the stream was being captured into a CUDA graph, so nothing could "
                           "be timed")
                    self.notes.append(
                        f"multi-vector products of {k} columns ({key[1]} X, {key[2]} Y) run "
                        f"{program_name(picked[0], k, picked[1])}, picked by "
                        f"{self.rule.describe()} for a mean row length of {self.row_mean:.3g} "
                        f"({why})")
            if len(self._programs) >= self.PROGRAMS:
                self._programs.pop(next(iter(self._programs)))
            self._programs[key] = program
        for fire in program[1]:
            fire(x, y, stream)

    def picked(self, k: int, candidates: list[tuple[str, int]]) -> tuple[str, int] | None:
        """The rule's program for k columns as one of ``candidates`` (:func:`programs_for`;
        a tiled program untiled where X needs no tiles), or None without a rule or where the
        rule has none for k."""
        wanted = self.rule.program_for(k, self.row_mean) if self.rule is not None else None
        if wanted is None:
            return None
        name, tiled = wanted
        tiles = [c for c in candidates if c[0] == name and c[1]] if tiled else []
        candidate = tiles[0] if tiles else (name, 0)
        return candidate if candidate in candidates else None

    def build(self, k: int, x_dtype, y_dtype, candidate: tuple[str, int]) -> tuple:
        """The loaded launches of :func:`launches` for ``candidate`` (a program and its tile
        width, 0 for none) and their closures. The launches are kept with the closures: a
        closure of Launch.fire holds only the address of its launch's parameter buffer, which
        the driver reads at every launch; the buffer, and the values it points to, live as
        long as the Launch."""
        m, n = self.shape
        program, tile = candidate
        steps = launches(self.shape, self.arrays, self.pieces, self.few_group, k, x_dtype,
                         y_dtype, program, tile)
        for step in steps:
            step.load(n, m, k)
        return steps, [step.closure(x_dtype, y_dtype) for step in steps]


def programs_for(k: int, n: int = 0, itemsize: int = 8, cache_bytes: int = 0
                 ) -> list[tuple[str, int]]:
    """The programs, as ``(program, tile width)`` (0: untiled; the many-columns kernel
    first), that the first product of k > :data:`FEW_COLUMNS` columns times: those of
    :data:`PROGRAMS`, the passes only up to :data:`MEASURED_UP_TO` columns, and the tiled
    programs (:data:`TILED`) in tiles of :func:`tile_width` columns, where it gives any, for X
    of n rows of k ``itemsize``-byte values and an L2 cache of ``cache_bytes``.

    Examples
    --------
    >>> [name for name, _ in programs_for(8)]  # doctest: +NORMALIZE_WHITESPACE
    ['many_columns', 'column_pairs', 'column_pairs_wide_step', 'column_quads', 'passes',
     'eight_columns']
    >>> programs_for(16)  # doctest: +NORMALIZE_WHITESPACE
    [('many_columns', 0), ('column_pairs', 0), ('column_pairs_wide_step', 0),
     ('column_quads', 0)]
    >>> programs_for(128, 175_000, 4, 50 << 20)[4:]
    [('column_pairs', 64), ('column_quads', 64)]
    """
    untiled = [(name, 0) for name in PROGRAMS if (name != "passes" or k <= MEASURED_UP_TO)
               and (name != "eight_columns" or k <= EIGHT_COLUMNS)]
    tile = tile_width(k, n, itemsize, cache_bytes)
    return untiled + [(name, tile) for name in TILED if tile]


def program_name(program: str, k: int, tile: int = 0) -> str:
    """How the decision's notes name ``program`` for k columns, in tiles of ``tile`` columns
    where given.

    Examples
    --------
    >>> program_name("passes", 8), program_name("column_pairs", 8)
    ('the few-columns kernel in 2 passes', 'the column-pairs kernel')
    >>> program_name("column_pairs", 128, 64)
    'the column-pairs kernel in tiles of 64 columns'
    """
    if program == "passes":
        return f"the few-columns kernel in {-(-k // FEW_COLUMNS)} passes"
    if program == "eight_columns":
        return "the eight-columns kernel"
    name = ONE_PASS[program].name
    return f"{name} in tiles of {tile} columns" if tile else name


def timed_choice_note(key: tuple, times: dict[tuple, float]) -> str:
    """The decision's note on the program :meth:`MultiVectorProgram.run` timed and kept for
    ``key`` (k, X's dtype, Y's dtype); ``times``: µs per product of each program timed, by
    ``(program, tile width)``.

    Examples
    --------
    >>> key = (8, np.dtype("float32"), np.dtype("float32"))
    >>> note = timed_choice_note(key, {("many_columns", 0): 12.0, ("passes", 0): 9.5})
    >>> note.split(" run ")[1].split(", timed")[0]
    'the few-columns kernel in 2 passes (9.5 µs; the many-columns kernel 12 µs)'
    """
    k, x_dtype, y_dtype = key
    order = sorted(times, key=times.get)
    others = ", ".join(f"{program_name(name, k, tile)} {times[name, tile]:.3g} µs"
                       for name, tile in order[1:])
    return (f"multi-vector products of {k} columns ({x_dtype} X, {y_dtype} Y) run "
            f"{program_name(order[0][0], k, order[0][1])} ({times[order[0]]:.3g} µs; "
            f"{others}), timed at the first one")


def time_programs(programs: list, x, y, stream, rounds: int = 3, batch: int = 3):
    """Microseconds per product of each program (``(launches, closures)``), the least of
    ``rounds`` interleaved batches of ``batch`` products on ``stream`` (a CUDA stream handle),
    timed by :class:`~autospmv._support.timing.CudaClock` on that stream; None where the stream
    is being captured into a graph (nothing may wait for it then) or its capture status cannot
    be read."""
    status, capturing = driver.cuStreamIsCapturing(stream)
    if (status != driver.CUresult.CUDA_SUCCESS
            or capturing != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE):
        return None
    timer = CudaClock(stream)
    best = [np.inf] * len(programs)
    for _ in range(rounds):
        for i, (_, fires) in enumerate(programs):
            timer.start()
            for _ in range(batch):
                for fire in fires:
                    fire(x, y, stream)
            best[i] = min(best[i], timer.stop() / batch)
    return best


def _to_device(array: np.ndarray):
    """A host array copied to the device (an empty one too: the kernels take it all the same)."""
    return cuda.to_device(np.ascontiguousarray(array))
