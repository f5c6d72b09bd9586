"""The matrices the selector is trained on: synthetic structure families and real files.

Every corpus entry is a :class:`Entry` with a lazy loader, so a corpus of a hundred matrices of
up to ten million nonzeros costs nothing until each matrix is needed. Synthetic generators are
pure NumPy/SciPy, seeded from the entry's name (the same name always gives the same matrix), and
vectorised: a 10⁷-nonzero matrix takes a few seconds.

Families (each a different corner of the feature space):

================ =============================================================================
stencil2d        5- and 9-point stencils on a square grid
stencil3d        7- and 27-point stencils on a cube
banded           every entry within a band of half-width w
block-fem        a mesh graph ⊗ dense b×b blocks (b = 2…6 unknowns per mesh node)
uniform-random   Poisson row lengths, uniformly random columns (no locality)
power-law        Pareto row lengths of exponent α, skewed column popularity (graph-like)
dense-rows       short rows plus a few (nearly) dense rows
road             1–4 entries per row, mostly near the diagonal (road networks, power grids)
lp               rectangular LP constraint matrices: log-normal rows, a few linking rows
long-rows        few rows of hundreds to thousands of entries (wide LP blocks)
diagonal         the diagonal only
block-diagonal   dense diagonal blocks of varying size
permuted         stencil, block-FEM and banded matrices under a random symmetric permutation
================ =============================================================================

Presets (:data:`PRESETS`) sweep these over sizes: ``tiny`` (unit tests, ~3·10³ nonzeros),
``small`` (10⁴–10⁶, CPU labelling), ``default`` (10⁴–10⁷, sized for a ~15 minute GPU
labelling run; it also grows each real file to ~2·10⁶ nonzeros), ``large`` (large matrices
first-class: synthetic families up to 2·10⁷ nonzeros, real files grown in three ways to 10⁶,
5·10⁶ and 2·10⁷). Real files are grown (:data:`GROWTHS`) as block-diagonal copies
(:func:`grow`), copies coupled through off-diagonal blocks (:func:`grow_coupled`) and randomly
permuted copies (:func:`grow_permuted`), so that a grown matrix's bandwidth and locality are
not always its file's.

With the 31 files of ``../shared/matrices`` (4·10³–5·10⁵ nonzeros, 3.2·10⁶ in all),
``--corpus large`` holds 276 matrices, 189 of them (68 %) with at least 10⁶ nonzeros, about
8.5·10⁸ nonzeros in all: 110 synthetic (28 variants at 10⁴, 10⁵ and 1.6·10⁶, the 13 families
at 5·10⁶ and 2·10⁷; 3.7·10⁸ nonzeros) and 166 real (31 as given, 93 grown to ≥ 10⁶ in three
ways, 31 to ≥ 5·10⁶ and 11 to ≥ 2·10⁷ in one way each; 4.8·10⁸ nonzeros). The ``default``
corpus (174 matrices, 3.8·10⁸ nonzeros) took about 340 s to label on an H200, so ``large``
should take about 13 minutes per dtype there (building the 17 configurations of a 2·10⁷
matrix is most of it: about 25 s on a 2-core 2.1 GHz Xeon).

:func:`folder_entries` adds ``.npz`` (``scipy.sparse.save_npz``) and ``.mtx`` (Matrix Market)
files; a ``MANIFEST.tsv`` beside them (columns ``name``, ``family``, optionally ``nnz``)
supplies each file's family.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import zipfile
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.io
import scipy.sparse as sp

SYNTHETIC = "synthetic"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One corpus matrix: identity, where it comes from, and how to build it."""

    name: str
    """Unique within a corpus; labelling resumes by name."""
    family: str
    source: str
    """``"synthetic"`` or the file's path."""
    size: str
    """Approximate nnz as a tag such as ``"1e6"``."""
    nnz: int
    """Target (synthetic) or stored (file) number of nonzeros."""
    loader: Callable[[], sp.spmatrix] = dataclasses.field(repr=False, compare=False)
    grown: int = 1
    """Block-diagonal copies of the file's matrix (1: as given, and for synthetic entries)."""

    def load(self) -> sp.spmatrix:
        return self.loader()


def size_tag(nnz: float) -> str:
    """One significant digit in scientific notation: 290378 → ``"3e5"``, 10⁶ → ``"1e6"``."""
    if nnz < 1:
        return "0"
    exponent = int(math.floor(math.log10(nnz)))
    mantissa = round(nnz / 10**exponent)
    if mantissa == 10:
        mantissa, exponent = 1, exponent + 1
    return f"{mantissa}e{exponent}"


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _with_values(A: sp.spmatrix, rng) -> sp.csr_matrix:
    """A's structure as CSR with values uniform in [-1, 1) (no exact zeros)."""
    A = sp.csr_matrix(A)
    A.sum_duplicates()
    A.data = rng.uniform(-1.0, 1.0, A.nnz)
    A.data[A.data == 0.0] = 0.5
    return A


def _from_rows(lengths: np.ndarray, columns: np.ndarray, n: int, rng) -> sp.csr_matrix:
    """CSR from row lengths and the concatenated (unsorted, possibly repeated) columns."""
    indptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    A = sp.csr_matrix((np.ones(columns.size), columns, indptr), shape=(lengths.size, n))
    return _with_values(A, rng)


def _tridiagonal_pattern(k: int) -> sp.csr_matrix:
    return sp.diags_array([np.ones(k - 1), np.ones(k), np.ones(k - 1)], offsets=[-1, 0, 1],
                          shape=(k, k), format="csr")


def _stencil_pattern(points: int, k: int) -> sp.csr_matrix:
    """Pattern of a 5/9-point (2-D, k² unknowns) or 7/27-point (3-D, k³ unknowns) stencil."""
    T, I = _tridiagonal_pattern(k), sp.identity(k, format="csr")
    if points == 5:
        return sp.kron(I, T) + sp.kron(T, I)
    if points == 9:
        return sp.kron(T, T)
    if points == 7:
        return sp.kron(I, sp.kron(I, T)) + sp.kron(I, sp.kron(T, I)) + sp.kron(T, sp.kron(I, I))
    if points == 27:
        return sp.kron(T, sp.kron(T, T))
    raise ValueError(f"no {points}-point stencil; choose 5, 9 (2-D) or 7, 27 (3-D)")


def _side(unknowns: float, dims: int) -> int:
    return max(2, math.ceil(unknowns ** (1 / dims)))


def stencil(name: str, nnz: int, points: int) -> sp.csr_matrix:
    dims = 2 if points in (5, 9) else 3
    return _with_values(_stencil_pattern(points, _side(nnz / points, dims)), _rng(name))


def banded(name: str, nnz: int, half_width: int) -> sp.csr_matrix:
    m = max(2 * half_width + 1, nnz // (2 * half_width + 1))
    offsets = list(range(-half_width, half_width + 1))
    pattern = sp.diags_array([np.ones(m - abs(o)) for o in offsets], offsets=offsets,
                             shape=(m, m), format="csr")
    return _with_values(pattern, _rng(name))


def block_fem(name: str, nnz: int, block: int, mesh_points: int) -> sp.csr_matrix:
    """A mesh graph (a stencil pattern) with every node carrying ``block`` unknowns."""
    dims = 2 if mesh_points in (5, 9) else 3
    mesh = _stencil_pattern(mesh_points, _side(nnz / (mesh_points * block * block), dims))
    return _with_values(sp.kron(mesh, np.ones((block, block)), format="csr"), _rng(name))


def uniform_random(name: str, nnz: int, mean: float) -> sp.csr_matrix:
    rng = _rng(name)
    m = max(1, round(nnz / mean))
    lengths = rng.poisson(mean, m)
    return _from_rows(lengths, rng.integers(0, m, lengths.sum()), m, rng)


def _pareto_lengths(rng, alpha: float, count: int, cap: int) -> np.ndarray:
    """Discrete Pareto lengths ≥ 1 with tail exponent ``alpha``, at most ``cap``."""
    u = 1.0 - rng.random(count)
    return np.minimum(np.floor(u ** (-1.0 / (alpha - 1.0))), cap).astype(np.int64)


def _rows_for(rng, nnz: int, draw: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """Row lengths summing to about ``nnz`` for square matrices whose length cap is m itself:
    estimate m from a first draw, then draw again with that m."""
    m = max(16, nnz // 4)
    for _ in range(3):
        lengths = draw(m, m)
        m = max(16, round(m * nnz / max(lengths.sum(), 1)))
    return draw(m, m)


def power_law(name: str, nnz: int, alpha: float) -> sp.csr_matrix:
    rng = _rng(name)
    lengths = _rows_for(rng, nnz, lambda count, cap: _pareto_lengths(rng, alpha, count, cap))
    m = lengths.size
    hot = np.floor(m * rng.random(lengths.sum()) ** 2.5).astype(np.int64)  # popular columns
    return _from_rows(lengths, rng.permutation(m)[hot], m, rng)


def dense_rows(name: str, nnz: int, dense: int, fraction: float) -> sp.csr_matrix:
    """Short rows (1 + Poisson(3)) and ``dense`` rows with ``fraction``·n entries each."""
    rng = _rng(name)
    m = max(dense + 8, round(nnz / (4 + dense * fraction)))
    lengths = 1 + rng.poisson(3.0, m)
    long_rows = rng.choice(m, dense, replace=False)
    lengths[long_rows] = max(1, round(fraction * m))
    columns = rng.integers(0, m, lengths.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for row in long_rows:  # distinct, evenly spread columns
        columns[starts[row]:starts[row + 1]] = rng.choice(m, lengths[row], replace=False)
    return _from_rows(lengths, columns, m, rng)


def road(name: str, nnz: int) -> sp.csr_matrix:
    """1–4 entries per row; 95 % of them within ±64 of the diagonal, the rest anywhere."""
    rng = _rng(name)
    m = max(2, round(nnz / 2.5))
    lengths = rng.integers(1, 5, m)
    rows = np.repeat(np.arange(m), lengths)
    columns = np.clip(rows + rng.integers(-64, 65, rows.size), 0, m - 1)
    far = rng.random(rows.size) < 0.05
    columns[far] = rng.integers(0, m, far.sum())
    return _from_rows(lengths, columns, m, rng)


def lp(name: str, nnz: int, aspect: float) -> sp.csr_matrix:
    """An m × (aspect·m) matrix: log-normal row lengths (mean ≈ 10) plus a few linking rows
    that together hold a tenth of the nonzeros."""
    rng = _rng(name)
    m = max(8, round(0.9 * nnz / 10.5))
    n = max(1, round(aspect * m))
    lengths = np.minimum(1 + np.floor(rng.lognormal(1.8, 1.0, m)), n).astype(np.int64)
    linking = rng.choice(m, min(50, max(1, m // 1000)), replace=False)
    lengths[linking] = min(n, max(1, round(0.1 * nnz / linking.size)))
    return _from_rows(lengths, rng.integers(0, n, lengths.sum()), n, rng)


def long_rows(name: str, nnz: int, mean: int) -> sp.csr_matrix:
    """Few rows of about ``mean`` entries each (uniform in [mean/2, 3·mean/2]) over 2·mean
    columns: the shape of wide LP blocks (FIT2D-like), where each row spans many GPU tiles."""
    rng = _rng(name)
    m = max(1, round(nnz / mean))
    n = 2 * mean
    lengths = rng.integers(mean // 2, 3 * mean // 2 + 1, m)
    return _from_rows(lengths, rng.integers(0, n, lengths.sum()), n, rng)


def diagonal(name: str, nnz: int) -> sp.csr_matrix:
    return _with_values(sp.identity(max(1, nnz), format="csr"), _rng(name))


def block_diagonal(name: str, nnz: int, block: int) -> sp.csr_matrix:
    """Dense diagonal blocks with sizes uniform in [b/2, 3·b/2], b = min(block, √nnz)."""
    rng = _rng(name)
    block = max(1, min(block, math.isqrt(nnz)))
    sizes = rng.integers(max(1, block // 2), 3 * block // 2 + 1, 2 * (nnz // block**2) + 2)
    count = np.searchsorted(np.cumsum(sizes.astype(np.int64) ** 2), nnz) + 1
    sizes = sizes[:count]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    lengths = np.repeat(sizes, sizes)  # each row of a block spans the block
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    within = np.arange(lengths.sum()) - np.repeat(starts, lengths)
    columns = np.repeat(np.repeat(offsets, sizes), lengths) + within
    return _from_rows(lengths, columns, int(sizes.sum()), rng)


def permuted(name: str, nnz: int, base: str, **params) -> sp.csr_matrix:
    """``base`` (a generator name in :data:`GENERATORS`) under a random symmetric permutation."""
    A = GENERATORS[base](name, nnz, **params).tocoo()
    inverse = np.argsort(_rng(name + "/perm").permutation(A.shape[0]))
    return _with_values(sp.coo_matrix((A.data, (inverse[A.row], inverse[A.col])), A.shape),
                        _rng(name))


GENERATORS: dict[str, Callable[..., sp.csr_matrix]] = {
    "stencil": stencil, "banded": banded, "block_fem": block_fem,
    "uniform_random": uniform_random, "power_law": power_law, "dense_rows": dense_rows,
    "road": road, "lp": lp, "long_rows": long_rows, "diagonal": diagonal,
    "block_diagonal": block_diagonal, "permuted": permuted,
}  # fmt: skip

# (family, name stem, generator, parameters)
VARIANTS: tuple[tuple[str, str, str, dict], ...] = (
    ("stencil2d", "stencil2d-5pt", "stencil", {"points": 5}),
    ("stencil2d", "stencil2d-9pt", "stencil", {"points": 9}),
    ("stencil3d", "stencil3d-7pt", "stencil", {"points": 7}),
    ("stencil3d", "stencil3d-27pt", "stencil", {"points": 27}),
    ("banded", "banded-w4", "banded", {"half_width": 4}),
    ("banded", "banded-w32", "banded", {"half_width": 32}),
    ("block-fem", "fem2d-b2", "block_fem", {"block": 2, "mesh_points": 9}),
    ("block-fem", "fem3d-b3", "block_fem", {"block": 3, "mesh_points": 27}),
    ("block-fem", "fem2d-b4", "block_fem", {"block": 4, "mesh_points": 5}),
    ("block-fem", "fem2d-b6", "block_fem", {"block": 6, "mesh_points": 9}),
    ("uniform-random", "random-mean8", "uniform_random", {"mean": 8}),
    ("uniform-random", "random-mean48", "uniform_random", {"mean": 48}),
    ("power-law", "powerlaw-a1.8", "power_law", {"alpha": 1.8}),
    ("power-law", "powerlaw-a2.2", "power_law", {"alpha": 2.2}),
    ("power-law", "powerlaw-a3.0", "power_law", {"alpha": 3.0}),
    ("dense-rows", "denserows-1full", "dense_rows", {"dense": 1, "fraction": 1.0}),
    ("dense-rows", "denserows-16quarter", "dense_rows", {"dense": 16, "fraction": 0.25}),
    ("road", "road", "road", {}),
    ("lp", "lp-wide", "lp", {"aspect": 4.0}),
    ("lp", "lp-tall", "lp", {"aspect": 0.3}),
    ("long-rows", "longrows-500", "long_rows", {"mean": 500}),
    ("long-rows", "longrows-4000", "long_rows", {"mean": 4000}),
    ("diagonal", "diagonal", "diagonal", {}),
    ("block-diagonal", "blockdiag-16", "block_diagonal", {"block": 16}),
    ("block-diagonal", "blockdiag-256", "block_diagonal", {"block": 256}),
    ("permuted", "permuted-stencil2d-5pt", "permuted", {"base": "stencil", "points": 5}),
    ("permuted", "permuted-fem3d-b3", "permuted",
     {"base": "block_fem", "block": 3, "mesh_points": 27}),
    ("permuted", "permuted-banded-w32", "permuted", {"base": "banded", "half_width": 32}),
)

PRESETS: dict[str, dict] = {
    "tiny": {"sizes": (3_000,), "stems": (
        "stencil2d-5pt", "fem2d-b2", "random-mean8", "powerlaw-a2.2", "denserows-1full",
        "road", "lp-wide", "diagonal", "blockdiag-16")},
    "small": {"sizes": (10_000, 100_000, 1_000_000), "max_nnz": 2_000_000},
    "default": {"sizes": (10_000, 100_000, 1_000_000, 10_000_000), "max_nnz": 20_000_000,
                "grow_to": 2_000_000},
    "large": {"sizes": (10_000, 100_000, 1_600_000), "family_sizes": (5_000_000, 20_000_000),
              "max_nnz": 20_000_000, "grow_sizes": (1_000_000, 5_000_000, 20_000_000),
              "grow_every": (1, 3)},
}
"""Synthetic sizes (target nnz) and variants of each preset, the largest file it takes, and the
size to which smaller files are also grown (block-diagonal copies, :func:`grown_entries`).

``large`` makes matrices above 10⁶ nonzeros first-class (see :func:`corpus`): every variant at
10⁴, 10⁵ and 1.6·10⁶ nonzeros (a target of 1.6·10⁶ so that all of them, the power-law and
long-rows generators' shortfalls included, land above the 10⁶ threshold of the timing
rule), the first variant of every family at 5·10⁶ and 2·10⁷ (``family_sizes``), and each real
file grown (:func:`large_grown_entries`) in all three ways (:data:`GROWTHS`) to ≥ 10⁶,
in one way (rotating) to ≥ 5·10⁶, and every third file in one way to ≥ 2·10⁷."""


def synthetic(preset: str = "default") -> list[Entry]:
    """The synthetic entries of a preset, smallest sizes first: every variant (or those named
    by ``stems``) at ``sizes``, the first variant of each family at ``family_sizes``."""
    spec = _preset(preset)
    stems = spec.get("stems")
    first_of_family = {}
    for family, stem, _, _ in VARIANTS:
        first_of_family.setdefault(family, stem)
    sizes = [(nnz, stems) for nnz in spec["sizes"]]
    sizes += [(nnz, tuple(first_of_family.values())) for nnz in spec.get("family_sizes", ())]
    entries = []
    for nnz, chosen in sizes:
        for family, stem, generator, params in VARIANTS:
            if chosen is None or stem in chosen:
                name = f"{stem}-{size_tag(nnz)}"
                loader = functools.partial(GENERATORS[generator], name, nnz, **params)
                entries.append(Entry(name, family, SYNTHETIC, size_tag(nnz), nnz, loader))
    return entries


def _preset(preset: str) -> dict:
    try:
        return PRESETS[preset]
    except KeyError:
        raise ValueError(
            f"unknown corpus preset {preset!r}; presets: {', '.join(PRESETS)}"
        ) from None


def load_file(path: str) -> sp.csr_matrix:
    """A matrix from ``.npz`` (``scipy.sparse.save_npz``) or ``.mtx`` (Matrix Market)."""
    if path.endswith(".npz"):
        return sp.csr_matrix(sp.load_npz(path))
    return sp.csr_matrix(scipy.io.mmread(path))


def _stored_nnz(path: Path) -> int:
    """Number of stored entries, read from the file header without loading the matrix."""
    if path.suffix == ".mtx":
        return int(scipy.io.mminfo(path)[2])
    with zipfile.ZipFile(path) as archive, archive.open("data.npy") as member:
        major, _ = np.lib.format.read_magic(member)
        read_header = (np.lib.format.read_array_header_1_0 if major == 1
                       else np.lib.format.read_array_header_2_0)
        shape = read_header(member)[0]
    return int(np.prod(shape))


def _manifest(folder: Path) -> dict[str, dict]:
    path = folder / "MANIFEST.tsv"
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["name"]: row for row in csv.DictReader(handle, delimiter="\t")}


def folder_entries(folder, max_nnz: int | None = None) -> list[Entry]:
    """Entries for every ``.npz``/``.mtx`` file in ``folder`` (not recursive), sorted by name.

    The family comes from ``MANIFEST.tsv`` when it lists the file, else ``"unknown"``; files
    with more than ``max_nnz`` stored entries are left out.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"matrix folder {str(folder)!r} does not exist")
    manifest = _manifest(folder)
    entries = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".npz", ".mtx")):
        row = manifest.get(path.stem, {})
        nnz = int(row["nnz"]) if row.get("nnz") else _stored_nnz(path)
        if max_nnz is not None and nnz > max_nnz:
            continue
        loader = functools.partial(load_file, str(path))
        entries.append(Entry(path.stem, row.get("family") or "unknown", str(path),
                             size_tag(nnz), nnz, loader))
    return entries


def grow(A: sp.spmatrix, copies: int) -> sp.csr_matrix:
    """``kron(I_copies, A)``: A's structure repeated down the diagonal, a larger matrix with the
    same row lengths and the same column locality."""
    return sp.kron(sp.identity(copies, format="csr"), A, format="csr")


COUPLING = 0.1
"""Share of A's entries copied into each off-diagonal block by :func:`grow_coupled`."""


def grow_coupled(A: sp.spmatrix, copies: int, seed: str = "") -> sp.csr_matrix:
    """``copies`` diagonal copies of A coupled to their neighbours: block (i, i±1) holds a
    random :data:`COUPLING` share of A's entries (at least one), as when subdomains of a
    discretisation share a boundary. Rows get longer by about a fifth and the bandwidth spans
    two blocks."""
    A = sp.csr_matrix(A)
    rng = _rng(f"coupled/{seed}")
    coo = A.tocoo()
    keep = rng.random(coo.nnz) < COUPLING
    if coo.nnz and not keep.any():
        keep[0] = True
    C = sp.coo_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=A.shape)
    neighbours = sp.diags_array([np.ones(copies - 1), np.ones(copies - 1)], offsets=[-1, 1],
                                shape=(copies, copies), format="csr")
    return sp.csr_matrix(grow(A, copies) + sp.kron(neighbours, C, format="csr"))


def grow_permuted(A: sp.spmatrix, copies: int, seed: str = "") -> sp.csr_matrix:
    """:func:`grow`'s block-diagonal copies under random permutations (symmetric when A is
    square, else rows and columns independently): the same row lengths, but neighbouring rows
    no longer read neighbouring parts of x, and the bandwidth is the whole matrix."""
    B = grow(A, copies).tocoo()
    rng = _rng(f"permuted/{seed}")
    rows = rng.permutation(B.shape[0])
    cols = rows if B.shape[0] == B.shape[1] else rng.permutation(B.shape[1])
    return sp.csr_matrix((B.data, (rows[B.row], cols[B.col])), shape=B.shape)


GROWTHS = {"x": grow, "c": grow_coupled, "p": grow_permuted}
"""Ways to grow a real matrix, by the letter its entries' names carry: block-diagonal copies
(``x``), coupled copies (``c``), permuted copies (``p``)."""


def load_grown(path: str, copies: int, way: str = "x") -> sp.csr_matrix:
    """The file's matrix grown to ``copies`` copies in ``way`` (a :data:`GROWTHS` key)."""
    A = load_file(path)
    return grow(A, copies) if way == "x" else GROWTHS[way](A, copies, Path(path).stem)


def grown_entries(entries: list[Entry], target: int, ways=("x",),
                  at_least: bool = False) -> list[Entry]:
    """For each file entry of at most half ``target`` nonzeros and each way in ``ways``
    (:data:`GROWTHS`), the same matrix grown to about ``target`` nonzeros (at least
    ``target`` when ``at_least``), named ``<name>-<way><copies>``, in the file's family (so
    that cross-validation keeps it with its base)."""
    grown = []
    for entry in entries:
        ratio = target / max(entry.nnz, 1)
        copies = math.ceil(ratio) if at_least else round(ratio)
        if copies < 2:
            continue
        for way in ways:
            nnz = copies * entry.nnz
            grown.append(Entry(f"{entry.name}-{way}{copies}", entry.family, entry.source,
                               size_tag(nnz), nnz,
                               functools.partial(load_grown, entry.source, copies, way),
                               copies))
    return grown


def large_grown_entries(files: list[Entry], spec: dict) -> list[Entry]:
    """The ``large`` preset's grown copies of real files (see :data:`PRESETS`): every way at
    the first size; at each further size one way per file, rotating over the files, and only
    for every ``spec["grow_every"][i]``-th file there."""
    out = grown_entries(files, spec["grow_sizes"][0], tuple(GROWTHS), at_least=True)
    ways = tuple(GROWTHS)
    for step, (target, every) in enumerate(zip(spec["grow_sizes"][1:], spec["grow_every"]),
                                           start=1):
        for i, entry in enumerate(files):
            if i % every == 0:
                out += grown_entries([entry], target, (ways[(i + step) % len(ways)],),
                                     at_least=True)
    return out


def corpus(preset: str = "default", folders=()) -> list[Entry]:
    """A preset's synthetic entries plus the files in ``folders`` that fit its size limit,
    ordered by size (so a time-limited run covers every family before the largest sizes)."""
    spec = _preset(preset)
    entries = synthetic(preset)
    for folder in folders:
        files = folder_entries(folder, spec.get("max_nnz", max(spec["sizes"])))
        entries += files
        if "grow_to" in spec:
            entries += grown_entries(files, spec["grow_to"])
        if "grow_sizes" in spec:
            entries += large_grown_entries(files, spec)
    seen: dict[str, str] = {}
    for entry in entries:
        if entry.name in seen:
            raise ValueError(f"two corpus matrices are named {entry.name!r}: {seen[entry.name]} "
                             f"and {entry.source}; rename one of the files")
        seen[entry.name] = entry.source
    return sorted(entries, key=lambda e: (round(math.log10(max(e.nnz, 1))), e.source != SYNTHETIC))
