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

``REAL`` adds a few small real matrices from ``../shared/matrices`` beside the repository when that
folder exists; it is empty otherwise. Use :func:`real_matrix_names` to list what is available.

This module only needs NumPy and SciPy, so benchmarks can import it too.
"""

from __future__ import annotations

import pathlib
from typing import Callable

import numpy as np
import scipy.sparse as sp

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
REAL_MATRIX_DIR = REPO_ROOT.parent / "shared" / "matrices"
REAL_MATRICES = ("young1c", "rajat19", "bp_1200", "netscience", "hangGlider_2")
"""Small real matrices (≤ 15k nonzeros) with short, regular, and very long rows."""


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
}
"""The same structural cases, small enough for the CUDA simulator (≤ 64 rows, ≤ 400 entries)."""

TINY_EXTRA_CASES = {"device_out": "odd_33x33", "nan_inf": "power_law_48"}
"""Simulator cases beyond host vectors, and the TINY matrix each runs on: device vectors (with and
without ``out=``), and NaN/±Inf in x."""

TINY_PARAMETER_CASES: list[tuple[str, str, dict]] = [
    *[("csr_vector", "power_law_48", {"threads_per_row": g}) for g in (1, 2, 4, 8, 16, 32)],
    *[("csr5", "dense_row_among_short_40x150", {"sigma": s}) for s in (2, 3, 16, 32)],
    *[("hyb", "power_law_48", {"width": w}) for w in (0, 1, 3)],
]
"""(kernel, TINY matrix, params) beyond the tuned choice: every csr_vector group size, CSR5 tiles
shorter than the long row (σ = 2: 64 entries a tile, so the 150-entry row spans three tiles) and
the large-matrix σ = 16, and HYB from pure COO to mostly ELL."""


def parameter_case_name(matrix: str, params: dict) -> str:
    return matrix + "".join(f"[{key}={value}]" for key, value in params.items())


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
