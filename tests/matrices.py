"""Named test matrices: every kernel runs over all of them and is compared with SciPy.

``FAMILY`` maps a readable name to a zero-argument maker that builds a fresh scipy sparse matrix
(a new object each call, so a test cannot spoil the next one). Structures and values come from
fixed seeds, so every run sees the same matrices; values are random (not all ones), so a kernel
that reads the wrong entry or column cannot agree with SciPy by accident. Generated values are
positive: with a positive x (see :func:`random_vector`) no sum cancels, so SciPy's result is
well-conditioned and the relative tolerances measure a kernel's rounding rather than the luck of
one long row's cancellation (a signed sum of 2,000 float32 products can lose 1e-4 in any order).

``TINY`` holds the same structural cases shrunk for numba-cuda's CUDA simulator, which runs one
Python thread per CUDA thread: each has at most 64 rows and 400 stored entries.

``REAL`` adds a few small real matrices from ``../shared/matrices`` beside the repository (or the
folder named by ``AUTOSPMV_TEST_MATRICES``, e.g. a copy on a machine without that folder) when
it exists; it is empty otherwise. Use :func:`real_matrix_names` to list what is available.
``SHARED`` holds every matrix of that folder.

Families for one format or test sit beside them: ``PADDED`` (ELL, HYB, JDS layouts and round
trips), ``CSR5_CORNERS`` (CSR5's tiles) and ``REPRESENTATIVE`` (the decision snapshots).

This module only needs NumPy and SciPy at import, so benchmarks can import it too (a few makers
import autospmv or ``autospmv.training.corpus`` when called).
"""

from __future__ import annotations

import os
import pathlib
from typing import Callable

import numpy as np
import scipy.sparse as sp

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
REAL_MATRIX_DIR = pathlib.Path(os.environ.get("AUTOSPMV_TEST_MATRICES")
                               or REPO_ROOT.parent / "shared" / "matrices")
REAL_MATRICES = ("young1c", "rajat19", "bp_1200", "netscience", "hangGlider_2")
"""Small real matrices (≤ 15k nonzeros) with short, regular, and very long rows."""


def numpy_device_csr(csr):
    """A canonical host CSR as a :class:`autospmv.formats.base.DeviceCSR` whose arrays are its
    NumPy arrays: the stand-in for a matrix on the GPU that the device code paths accept."""
    from autospmv.formats.base import DeviceCSR

    return DeviceCSR(csr.shape, csr.indptr, csr.indices, csr.data, csr.indptr.copy(), np)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _values(rng: np.random.Generator, size: int) -> np.ndarray:
    """Random values in [0.5, 1.5): never accidentally 0, and positive (see the module docs)."""
    return rng.uniform(0.5, 1.5, size)


def from_row_lengths(lengths, n: int, seed: int) -> sp.csr_matrix:
    """CSR with the given number of entries per row, in distinct random columns."""
    rng = _rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    indptr = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.empty(indptr[-1], dtype=np.int64)
    for i, length in enumerate(lengths):
        indices[indptr[i]:indptr[i + 1]] = np.sort(rng.choice(n, size=length, replace=False))
    return sp.csr_matrix((_values(rng, indices.size), indices, indptr), shape=(lengths.size, n))


def random_matrix(m: int, n: int, density: float, seed: int) -> sp.csr_matrix:
    """round(density·m·n) entries at distinct uniformly random positions (O(nnz) time)."""
    rng = _rng(seed)
    position = rng.choice(m * n, size=int(round(density * m * n)), replace=False)
    row, col = np.divmod(position, n) if n else (position, position)
    return sp.csr_matrix((_values(rng, position.size), (row, col)), shape=(m, n))


def one_long_row(m: int, n: int, row: int, short: int, seed: int) -> sp.csr_matrix:
    """Every row has ``short`` entries except ``row``, which is full (n entries)."""
    lengths = np.full(m, short)
    lengths[row] = n
    return from_row_lengths(lengths, n, seed)


def power_law(m: int, n: int, exponent: float, seed: int) -> sp.csr_matrix:
    """Row lengths from a Zipf-like law: most rows short, a few very long, some empty."""
    rng = _rng(seed)
    lengths = np.minimum(np.floor(rng.pareto(exponent, m) * 2).astype(np.int64), n)
    return from_row_lengths(lengths, n, seed + 1)


def spd_band(n: int, offsets=(1, 3, 7), seed: int = 0) -> sp.csr_matrix:
    """A symmetric positive definite band matrix (diagonally dominant) with random
    off-diagonals at ``offsets``."""
    rng = np.random.default_rng(seed)
    A = sp.diags([np.full(n, 2.0 * len(offsets) + 1.0)], [0], shape=(n, n), format="lil")
    for o in offsets:
        values = -rng.random(n - o)
        A.setdiag(values, o)
        A.setdiag(values, -o)
    return A.tocsr()


def poisson2d(k: int) -> sp.csr_matrix:
    """The 5-point Laplacian on a k×k grid (k² rows): symmetric positive definite."""
    tri = sp.diags([-np.ones(k - 1), 2 * np.ones(k), -np.ones(k - 1)], [-1, 0, 1])
    eye = sp.identity(k)
    return sp.csr_matrix(sp.kron(eye, tri) + sp.kron(tri, eye))


def diagonal(m: int, seed: int) -> sp.csr_matrix:
    return sp.csr_matrix(sp.diags(_values(_rng(seed), m)))


def block3(blocks: int, density: float, seed: int) -> sp.csr_matrix:
    """3×3 dense blocks on a random block pattern (a kron product)."""
    rng = _rng(seed)
    pattern = random_matrix(blocks, blocks, density, seed)
    return sp.csr_matrix(sp.kron(pattern, _values(rng, 9).reshape(3, 3)))


def with_duplicates(m: int, n: int, nnz: int, seed: int) -> sp.coo_matrix:
    """COO with repeated (row, col) pairs and unsorted entries (duplicates must be summed)."""
    rng = _rng(seed)
    row = rng.integers(0, m, nnz)
    col = rng.integers(0, n, max(1, nnz // 4))[rng.integers(0, max(1, nnz // 4), nnz)]
    return sp.coo_matrix((_values(rng, nnz), (row, col)), shape=(m, n))


def with_explicit_zeros(m: int, n: int, density: float, seed: int) -> sp.csr_matrix:
    """Every third stored entry is an explicit 0.0 that stays in the structure."""
    A = random_matrix(m, n, density, seed)
    A.data[::3] = 0.0
    return A


def empty_rows_share(m: int, n: int, share: float, row_length: int, seed: int) -> sp.csr_matrix:
    """A share of rows empty, the others with ``row_length`` entries."""
    rng = _rng(seed)
    lengths = np.where(rng.random(m) < share, 0, row_length)
    return from_row_lengths(lengths, n, seed + 1)


def long_rows_across_tasks(seed: int) -> sp.csr_matrix:
    """≥ 50k nonzeros (CPU kernels take their parallel path) with a row of 33,000 entries that
    covers a whole 16,384-entry task of the COO kernel and rows that cross task boundaries."""
    lengths = np.full(24, 900)
    lengths[1] = 33_000
    return from_row_lengths(lengths, 40_000, seed)


def dense(m: int, n: int, seed: int) -> sp.csr_matrix:
    return sp.csr_matrix(_values(_rng(seed), m * n).reshape(m, n))


Maker = Callable[[], sp.spmatrix]

FAMILY: dict[str, Maker] = {
    "empty_0x0": lambda: sp.csr_matrix((0, 0)),
    "empty_5x0": lambda: sp.csr_matrix((5, 0)),
    "empty_0x7": lambda: sp.csr_matrix((0, 7)),
    "all_rows_empty_9x11": lambda: sp.csr_matrix((9, 11)),
    "row_1x300": lambda: random_matrix(1, 300, 0.5, 1),
    "column_300x1": lambda: random_matrix(300, 1, 0.5, 2),
    "dense_row_among_empty_50x2000": lambda: one_long_row(50, 2000, 17, 0, 3),
    "huge_row_among_short_300x3000": lambda: one_long_row(300, 3000, 123, 3, 4),
    "diagonal_100": lambda: diagonal(100, 5),
    "poisson2d_169": lambda: poisson2d(13),
    "power_law_500": lambda: power_law(500, 500, 1.1, 6),
    "block3x3_120": lambda: block3(40, 0.1, 7),
    "duplicates_coo_60x50": lambda: with_duplicates(60, 50, 600, 8),
    "rect_37x61": lambda: random_matrix(37, 61, 0.15, 9),
    "rect_61x37": lambda: random_matrix(61, 37, 0.15, 10),
    "odd_33x33": lambda: random_matrix(33, 33, 0.2, 11),
    "odd_65x47": lambda: random_matrix(65, 47, 0.2, 12),
    "explicit_zeros_40x40": lambda: with_explicit_zeros(40, 40, 0.2, 13),
    "half_rows_empty_200x150": lambda: empty_rows_share(200, 150, 0.5, 7, 14),
    "dense_23x29": lambda: dense(23, 29, 15),
    "parallel_random_2000x2000": lambda: random_matrix(2000, 2000, 0.015, 16),
    "parallel_long_rows_24x40000": lambda: long_rows_across_tasks(17),
}
"""The matrix family every kernel runs over (real matrices are in :data:`REAL`)."""

TINY: dict[str, Maker] = {
    "empty_0x0": lambda: sp.csr_matrix((0, 0)),
    "empty_5x0": lambda: sp.csr_matrix((5, 0)),
    "empty_0x7": lambda: sp.csr_matrix((0, 7)),
    "all_rows_empty_9x11": lambda: sp.csr_matrix((9, 11)),
    "row_1x150": lambda: random_matrix(1, 150, 0.5, 21),
    "column_40x1": lambda: random_matrix(40, 1, 0.5, 22),
    "dense_row_among_empty_12x150": lambda: one_long_row(12, 150, 5, 0, 23),
    "dense_row_among_short_40x150": lambda: one_long_row(40, 150, 7, 3, 24),
    "diagonal_33": lambda: diagonal(33, 25),
    "poisson2d_36": lambda: poisson2d(6),
    "power_law_48": lambda: power_law(48, 48, 1.1, 26),
    "block3x3_36": lambda: block3(12, 0.2, 27),
    "duplicates_coo_20x17": lambda: with_duplicates(20, 17, 120, 28),
    "rect_13x37": lambda: random_matrix(13, 37, 0.2, 29),
    "rect_37x13": lambda: random_matrix(37, 13, 0.2, 30),
    "odd_33x33": lambda: random_matrix(33, 33, 0.15, 31),
    "explicit_zeros_20x20": lambda: with_explicit_zeros(20, 20, 0.25, 32),
    "rows_of_2_and_1_64x64": lambda: from_row_lengths([2, 1] * 32, 64, 33),
    "rows_of_6_two_tiles_100x100": lambda: from_row_lengths(np.full(100, 6), 100, 34),
    "rows_of_7_and_gaps_two_tiles_120x100": lambda: from_row_lengths([7, 7, 0] * 40, 100, 35),
    "long_row_among_short_10x3000": lambda: one_long_row(10, 3000, 4, 3, 36),
}
"""The same structural cases, small enough for the CUDA simulator (≤ 120 rows, ≤ 600 entries).
Two hold two complete CSR5 tiles at the σ = 8 chosen for them (256 entries a tile) and a
partial third, with rows crossing the tiles' ends: CSR5's whole-step path, where a tile's lane 0
may continue the previous tile's row, on clean tiles and on tiles with empty rows. The last one is
the exception to the size: a 3,000-entry row, which at σ = 2 (64 entries a tile, see
:data:`TINY_PARAMETER_CASES`) fills whole blocks of eight tiles with the next
``CONTENDED_ROW_TILES`` tiles, CSR5's one-atomic-per-block path."""

TINY_EXTRA_CASES = {"device_out": "odd_33x33", "nan_inf": "power_law_48"}
"""Simulator cases beyond host vectors, and the TINY matrix each runs on: device vectors (with and
without ``out=``), and NaN/±Inf in x."""

TINY_MIXED_MATRICES = ("power_law_48", "rows_of_7_and_gaps_two_tiles_120x100", "rect_13x37",
                       "empty_5x0")
"""The TINY matrices every kernel multiplies under the simulator with x of the other dtype than
the matrix's: rows of many lengths; CSR5 tiles with rows crossing them and empty rows; a wide
shape; no columns."""

TINY_MIXED_PARAMETER_CASES: list[tuple[str, str, dict]] = [
    ("csr_vector", "power_law_48", {"threads_per_row": 32}),
    ("csr5", "dense_row_among_short_40x150", {"sigma": 3}),
    ("csr5", "long_row_among_short_10x3000", {"sigma": 2}),
    ("hyb", "power_law_48", {"width": 1}),
]
"""Kernel paths beyond the tuned choice that the simulator also runs with x of the other dtype:
the longest shuffle reduction, CSR5's clamped steps and its one atomic per block of a long row,
HYB's ELL part and COO overflow together (cases of :data:`TINY_PARAMETER_CASES`)."""

TINY_PARAMETER_CASES: list[tuple[str, str, dict]] = [
    *[("csr_vector", "power_law_48", {"threads_per_row": g}) for g in (1, 2, 4, 8, 16, 32)],
    *[("csr5", "dense_row_among_short_40x150", {"sigma": s}) for s in (2, 3, 16, 32)],
    *[("csr5", "poisson2d_36", {"sigma": s}) for s in (2, 3)],
    ("csr5", "rows_of_2_and_1_64x64", {"sigma": 2}),
    ("csr5", "long_row_among_short_10x3000", {"sigma": 2}),
    *[("hyb", "power_law_48", {"width": w}) for w in (0, 1, 3)],
]
"""(kernel, TINY matrix, params) beyond the tuned choice: every csr_vector group size, CSR5 tiles
shorter than the long row (σ = 2: 64 entries a tile, so the 150-entry row spans three tiles) and
the large-matrix σ = 16; rows of the 2-D Laplacian crossing tiles with no row empty, on the
whole-step and the clamped path; in float64, y cleared at the tiles' ends only, with a row
crossing from the first tile into the second); a row filling 46 tiles of σ = 2, where one block
of eight adds its tiles' sums with a single atomic; and HYB from pure COO to mostly ELL."""


def parameter_case_name(matrix: str, params: dict) -> str:
    return matrix + "".join(f"[{key}={value}]" for key, value in params.items())


# --- the padded formats (ELL, HYB, JDS) --------------------------------------------------------

def signed_from_row_lengths(lengths, n: int, seed: int) -> sp.csr_matrix:
    """The given number of entries per row, in distinct random columns, with signed standard
    normal values (so sums can cancel, unlike :func:`from_row_lengths`)."""
    rng = _rng(seed)
    lengths = np.asarray(lengths)
    row = np.repeat(np.arange(lengths.size), lengths)
    col = np.concatenate([rng.choice(n, k, replace=False) for k in lengths])
    return sp.csr_matrix((rng.standard_normal(row.size), (row, col)), shape=(lengths.size, n))


def _dense_row_among_short() -> sp.csr_matrix:
    A = signed_from_row_lengths(_rng(4).integers(0, 4, 50), 50, 4).tolil()
    A[17, :] = np.arange(1, 51)
    return A.tocsr()


def _signed_explicit_zeros() -> sp.csr_matrix:
    A = signed_from_row_lengths(np.full(40, 5), 33, 5)
    A.data[::3] = 0.0  # stored zeros must survive every conversion
    return A


PADDED: dict[str, Maker] = {
    "0x0": FAMILY["empty_0x0"],
    "3x0": lambda: sp.csr_matrix((3, 0)),
    "0x4": lambda: sp.csr_matrix((0, 4)),
    "empty_rows": lambda: sp.csr_matrix((45, 7)),
    "1xN": lambda: signed_from_row_lengths([70], 100, 1),
    "Nx1": lambda: signed_from_row_lengths(np.arange(90) % 2, 1, 2),
    "dense_row": _dense_row_among_short,
    "rect_37x61": lambda: signed_from_row_lengths(_rng(3).integers(0, 12, 37), 61, 3),
    "diagonal": lambda: sp.diags(np.arange(1.0, 66.0), format="csr"),
    "power_law": lambda: signed_from_row_lengths(np.minimum(_rng(6).zipf(1.8, 250), 250), 250, 6),
    "explicit_zeros": _signed_explicit_zeros,
}
"""Small matrices for the padded formats' layouts and round trips: no rows or columns, empty
rows, one row or column, a dense row, Zipf row lengths, stored zeros; values signed."""


# --- CSR5 ----------------------------------------------------------------------------------------

def nnz_near_tiles(sigma: int, tiles: int, delta: int) -> sp.csr_matrix:
    """Rows of 3 entries (the last absorbs the remainder) and nnz = tiles·ω·σ + delta, ω being
    CSR5's tile width (32 lanes)."""
    from autospmv.formats.csr5 import OMEGA

    nnz = tiles * OMEGA * sigma + delta
    lengths = np.full(nnz // 3, 3)
    lengths[-1] += nnz - lengths.sum()
    return from_row_lengths(lengths, 40, seed=tiles * 10 + delta + 1)


def sparse_rows(m: int, every: int, length: int, seed: int) -> sp.csr_matrix:
    """Only every ``every``-th row holds ``length`` entries: most CSR5 tiles contain empty rows."""
    lengths = np.zeros(m, dtype=np.int64)
    lengths[::every] = length
    return from_row_lengths(lengths, max(length, 20), seed)


CSR5_CORNERS: dict[str, Maker] = {
    "empty_rows_between_short_rows": lambda: sparse_rows(900, 7, 3, 41),
    "single_entries_every_third_row": lambda: sparse_rows(1500, 3, 1, 42),
    "huge_row_alone_3x5000": lambda: from_row_lengths([0, 5000, 0], 6000, 43),
    "long_rows_mid_tile_and_gaps": lambda: from_row_lengths(
        [3, 0, 0, 7, 0, 1500, 0, 2, 0, 0, 1, 600, 0, 4], 1600, 44),
    "rect_37x61_seed45": lambda: random_matrix(37, 61, 0.15, 45),
    "power_law_2000": lambda: power_law(2000, 2000, 1.1, 46),
    "trailing_empty_rows": lambda: from_row_lengths([0, 0, 40, 0, 9] + [0] * 50, 60, 47),
    "rows_cross_tiles_none_empty": lambda: from_row_lengths(np.arange(1, 80), 100, 48),
    "rows_of_32_fill_whole_tiles": lambda: from_row_lengths(np.full(64, 32), 100, 49),
    **{f"nnz_128x{k}{d:+d}": (lambda k=k, d=d: nnz_near_tiles(4, k, d))
       for k in (1, 3) for d in (-1, 0, 1)},
    **{f"nnz_1024x2{d:+d}": (lambda d=d: nnz_near_tiles(32, 2, d)) for d in (-1, 0, 1)},
}
"""Matrices aimed at CSR5's corner cases (tiles of ω·σ entries), run beside :data:`FAMILY`:
empty rows inside tiles, rows longer than a tile, rows crossing tiles with no row empty, rows
that end exactly where tiles end (σ rows of 32 per tile, whatever σ), nnz one short of, at, and
one past a multiple of the tile size."""


# --- decision snapshots ----------------------------------------------------------------------

def _generators():
    from autospmv.training import generators

    return generators


REPRESENTATIVE: dict[str, Maker] = {
    "2-D Poisson, 60×60 grid": lambda: poisson2d(60),
    "power-law rows (α = 1.8)": lambda: _generators().power_law("power-law", 40_000, 1.8),
    "block FEM, 3×3 blocks": lambda: _generators().block_fem("block-fem", 40_000, 3, 9),
    "one dense row among rows of 4": lambda: one_long_row(3000, 3000, 7, 4, 1),
    "diagonal": lambda: diagonal(5000, 1),
    "LP-like, 4× wider than tall": lambda: _generators().lp("lp", 40_000, 4.0),
    "uniform random rows, 40k rows of ~30": lambda: random_matrix(40_000, 40_000, 30 / 40_000, 3),
    "matrices.block3x3_120": FAMILY["block3x3_120"],
    "matrices.parallel_long_rows_24x40000": FAMILY["parallel_long_rows_24x40000"],
    "3-D 7-point stencil, ~10⁶ nonzeros": lambda: _generators().stencil("stencil3d", 1_000_000, 7),
    "rows of ~4000 (wide LP block), ~10⁶ nonzeros":
        lambda: _generators().long_rows("long-rows", 1_000_000, 4000),
    "one row of 200 000 among rows of 4, ~10⁶ nonzeros":
        lambda: _generators().dense_rows("dense-rows", 1_000_000, 1, 1.0),
}
"""Representative structures whose decisions are snapshotted in ``tests/golden/`` (the names
appear there), built in well under a second each; some come from ``autospmv.training.corpus``."""


def load_real(name: str) -> sp.csr_matrix:
    """A real matrix from ``../shared/matrices``, values as stored (pattern-only files hold 1s)."""
    return sp.load_npz(REAL_MATRIX_DIR / f"{name}.npz").tocsr()


def real_matrix_names() -> list[str]:
    """The names of :data:`REAL_MATRICES` present on this machine."""
    return [name for name in REAL_MATRICES if (REAL_MATRIX_DIR / f"{name}.npz").is_file()]


REAL: dict[str, Maker] = {
    f"real_{name}": (lambda name=name: load_real(name)) for name in real_matrix_names()
}
"""Real matrices available here (empty when ``../shared/matrices`` is absent)."""

ALL: dict[str, Maker] = {**FAMILY, **REAL}
"""The family plus the real matrices that exist on this machine."""

SHARED: dict[str, Maker] = {
    f"shared_{path.stem}": (lambda path=path: sp.load_npz(path).tocsr())
    for path in sorted(REAL_MATRIX_DIR.glob("*.npz"))
}
"""Every matrix in ``../shared/matrices``, not only :data:`REAL_MATRICES` (empty when the folder
is absent)."""


def matrix(name: str, dtype) -> sp.spmatrix:
    """The matrix ``name`` of :data:`ALL`, built afresh with values of the given dtype."""
    return ALL[name]().astype(dtype)


def random_vector(rng: np.random.Generator, n: int, dtype) -> np.ndarray:
    """A random x in [0, 1) of the given dtype."""
    return rng.random(n).astype(dtype)


def reference(A, x: np.ndarray) -> np.ndarray:
    """SciPy's ``A @ x`` in float64: the reference every kernel is compared with."""
    return sp.csr_matrix(A, dtype=np.float64) @ np.asarray(x, dtype=np.float64)


def relative_error(y, y_ref) -> float:
    """‖y − y_ref‖ / ‖y_ref‖ in float64; for a zero reference, 0 if y is exactly 0, else inf."""
    y = np.asarray(y, dtype=np.float64)
    y_ref = np.asarray(y_ref, dtype=np.float64)
    scale = np.linalg.norm(y_ref)
    if scale == 0:
        return 0.0 if not np.any(y) else float("inf")
    return float(np.linalg.norm(y - y_ref) / scale)


DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["float32", "float64"]
"""The value dtypes every kernel exists for, and their test ids."""

TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
"""Largest accepted relative error per value dtype (shared/design.md, Measurement method)."""


def padded_slots(kernel: str, A: sp.csr_matrix, params: dict | None = None) -> int:
    """The padded size that a kernel's fill limit bounds (0 for kernels without padding).

    ell: m x the longest row. jds: 32 x the longest row of each warp of 32 rows sorted by length
    (the GPU thread slots). hyb: m x its ELL width (clamped to the longest row).
    """
    lengths = np.diff(A.indptr)
    longest = int(lengths.max()) if lengths.size else 0
    if kernel == "ell":
        return lengths.size * longest
    if kernel == "jds":
        return 32 * int(np.sort(lengths)[::-1][::32].sum())
    if kernel == "hyb" and params and "width" in params:
        return lengths.size * min(int(params["width"]), longest)
    return 0


def conversion_refused(kernel: str, A, params: dict | None = None,
                       device: str = "cuda") -> bool:
    """Whether ``prepare(A, kernel=kernel, device=device)`` must raise FormatTooLargeError (the
    fill rule).

    A padded format refuses when its padded size exceeds both ``ELL_MAX_FILL * nnz`` and
    ``ELL_SMALL`` slots (autospmv.formats.ell), counted after duplicates are summed. JDS's
    limit bounds GPU thread slots, so on the CPU it never refuses.
    """
    if kernel == "jds" and device == "cpu":
        return False
    from autospmv.formats.ell import ELL_MAX_FILL, ELL_SMALL

    csr = sp.csr_matrix(A, copy=True)
    csr.sum_duplicates()
    slots = padded_slots(kernel, csr, params)
    return slots > ELL_MAX_FILL * csr.nnz and slots > ELL_SMALL


def assert_close(y, y_ref, dtype) -> None:
    """Fail unless y is within :data:`TOLERANCE` of the reference (relative, normwise)."""
    error = relative_error(y, y_ref)
    assert error <= TOLERANCE[np.dtype(dtype)], f"relative error {error:.3g}"


def prepare_or_refuse(A, kernel: str, device: str, params: dict | None = None):
    """``autospmv.prepare(A, kernel=kernel, device=device)``, or None after checking that the
    conversion refuses with FormatTooLargeError where :func:`conversion_refused` says it must."""
    import pytest

    import autospmv
    from autospmv.formats.base import FormatTooLargeError

    if conversion_refused(kernel, A, params, device):
        with pytest.raises(FormatTooLargeError, match="fill limit"):
            autospmv.prepare(A, kernel=kernel, device=device, params=params)
        return None
    op = autospmv.prepare(A, kernel=kernel, device=device, params=params)
    assert (op.kernel, op.device) == (kernel, device)
    return op


def nonfinite_error(y, y_ref) -> float:
    """Raise AssertionError unless ``y`` has NaN, +inf and -inf exactly where ``y_ref`` has
    them; return the relative error over the finite entries."""
    for test in (np.isnan, np.isposinf, np.isneginf):
        differ = np.argwhere(test(y) != test(y_ref))
        if differ.size:
            raise AssertionError(f"{test.__name__} differs from SciPy at {differ.tolist()}")
    finite = np.isfinite(y_ref)
    return relative_error(y[finite], y_ref[finite])


_PTX: dict = {}


def compiled_ptx(launch, cc=(9, 0)) -> str:
    """``launch.ptx(cc)``, compiled once per (kernel, argument types, cc) in this process."""
    key = (launch.dispatcher.py_func, launch.argtypes, cc)
    if key not in _PTX:
        _PTX[key] = launch.ptx(cc)
    return _PTX[key]
