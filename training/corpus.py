"""The matrices the selector is trained on: synthetic structure families and real files.

Every corpus entry is a :class:`Entry` with a lazy loader, so a corpus of a hundred matrices of
up to ten million nonzeros costs nothing until each matrix is needed (the ``kinds`` preset
reads each real file once, small as they are, to find its longest row). Synthetic generators are
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

The generators themselves live in :mod:`training.generators`; this module keeps the entries,
presets, files and grown copies.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import warnings
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.io
import scipy.sparse as sp

from autospmv._support.validation import load_matrix_file

from .generators import GENERATORS, seeded_rng

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
    "kinds": {"sizes": (10_000, 100_000, 1_600_000), "family_sizes": (5_000_000, 20_000_000),
              "max_nnz": 20_000_000,
              "draws": ((1_000_000, 1.0, "xcp"), (5_000_000, 1 / 8, "xcp"),
                        (20_000_000, 1 / 3, "xp")),
              "long_rows": (1024, 20_000_000, "xp"),
              "held_out_sizes": ((20_000_000, "xp"),)},
}
"""Synthetic sizes (target nnz) and variants of each preset, the largest file it takes, and the
size to which smaller files are also grown (block-diagonal copies, :func:`grown_entries`).

``large`` makes matrices above 10⁶ nonzeros first-class (see :func:`corpus`): every variant at
10⁴, 10⁵ and 1.6·10⁶ nonzeros (a target of 1.6·10⁶ so that all of them, the power-law and
long-rows generators' shortfalls included, land above the 10⁶ threshold of the timing
rule), the first variant of every family at 5·10⁶ and 2·10⁷ (``family_sizes``), and each real
file grown (:func:`large_grown_entries`) in all three ways (:data:`GROWTHS`) to ≥ 10⁶,
in one way (rotating) to ≥ 5·10⁶, and every third file in one way to ≥ 2·10⁷.

``kinds`` is built for many real bases of many kinds (the 31 shared files and the 345 of the
UF collection): every base as given, and grown copies drawn per base (:func:`drawn_grown_entries`)
rather than every base at every size: ``draws`` lists (size, probability, ways), each drawn
with its own seeded coin and growth way, so that one labelling of about 400 bases fits a few
device calls. Bases with rows longer than ``long_rows[0]`` nonzeros are rare in the collections
(7 of the 376 files) and are the matrices whose row-length costs (a warp's longest loop, the
atomic additions into one row's y) reach furthest; a coin would leave most of them out of the
streamed size band, where the cost model needs them to fit those costs, so each is also grown
to ``long_rows[1]`` in every way of ``long_rows[2]``. The first variant of every synthetic
family is labelled at 5·10⁶ and 2·10⁷ nonzeros (``family_sizes``), the generated long-row
structures (dense rows, long rows, wide LP blocks, power laws) among them. The bases named in
:data:`HOLDOUT_FILE` are grown instead to ``held_out_sizes``
in each listed way (block-diagonal and permuted copies of about 2·10⁷ nonzeros), the matrices
on which a model trained without them is scored."""


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
    """A matrix from ``.npz`` (``scipy.sparse.save_npz``) or ``.mtx`` (Matrix Market), read by
    :func:`autospmv._support.validation.load_matrix_file`: a malformed file raises a ValueError
    naming it before SciPy converts its arrays."""
    return sp.csr_matrix(load_matrix_file(path))


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


def kind_of(row: dict) -> str:
    """A file's family from its manifest row: the ``family`` column, else the collection's
    ``kind`` without the words that only say where the matrix stands in a series ("duplicate
    structural problem" and "subsequent 2D/3D problem" are "structural" and "2D/3D"), else
    ``"unknown"``."""
    if row.get("family"):
        return row["family"]
    kind = (row.get("kind") or "unknown").lower()
    for word in ("duplicate ", "subsequent "):
        kind = kind.removeprefix(word)
    return kind.removesuffix(" sequence").removesuffix(" problem") or "unknown"


def folder_entries(folder, max_nnz: int | None = None) -> list[Entry]:
    """Entries for every ``.npz``/``.mtx`` file in ``folder`` (not recursive), sorted by name.

    The family comes from ``MANIFEST.tsv`` when it lists the file (:func:`kind_of`); files
    with more than ``max_nnz`` stored entries are left out, and so, with a warning, is anything
    that is not a regular file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"matrix folder {str(folder)!r} does not exist")
    manifest = _manifest(folder)
    entries = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".npz", ".mtx")):
        if not path.is_file():  # a FIFO or a device would block the reader
            warnings.warn(f"skipping {path}: not a regular file", RuntimeWarning, stacklevel=2)
            continue
        row = manifest.get(path.stem, {})
        nnz = int(row["nnz"]) if row.get("nnz") else _stored_nnz(path)
        if max_nnz is not None and nnz > max_nnz:
            continue
        loader = functools.partial(load_file, str(path))
        entries.append(Entry(path.stem, kind_of(row), str(path),
                             size_tag(nnz), nnz, loader))
    return entries


def files_by_size(folders, min_nnz: int, limit: int | None = None, square: bool = False
                  ) -> list[tuple[Entry, int]]:
    """``(entry, nnz)`` of the files of ``folders`` (:func:`folder_entries`) whose matrix has
    at least ``min_nnz`` nonzeros (and is square where ``square``), from the smallest; with
    ``limit``, at most that many, spread evenly over the sizes."""
    files = []
    for folder in folders:
        for entry in folder_entries(folder):
            A = entry.load()
            if A.nnz >= min_nnz and (not square or A.shape[0] == A.shape[1]):
                files.append((entry, A.nnz))
    files.sort(key=lambda item: item[1])
    if limit is not None and limit < len(files):
        step = len(files) / max(limit, 1)
        files = [files[int(i * step)] for i in range(limit)]
    return files


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
    rng = seeded_rng(f"coupled/{seed}")
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
    rng = seeded_rng(f"permuted/{seed}")
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


HOLDOUT_FILE = Path(__file__).resolve().parent.parent / "models" / "holdout.txt"
"""The frozen list of held-out bases (one name a line, ``#`` comments)."""


def read_names(path) -> list[str]:
    """Names from a list file: one a line; blank lines and ``#`` comments ignored."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def longest_row(entry: Entry) -> int:
    """The most nonzeros in one row of a file entry's matrix (0 for an empty one)."""
    indptr = entry.load().indptr
    return int(np.diff(indptr).max()) if len(indptr) > 1 else 0


def drawn_grown_entries(files: list[Entry], spec: dict, held_out=()) -> list[Entry]:
    """The ``kinds`` preset's grown copies (see :data:`PRESETS`): for each base not in
    ``held_out``, each ``(size, probability, ways)`` of ``spec["draws"]`` is drawn with a coin
    seeded by the base's name and, when drawn, grown in one of ``ways`` (letters of
    :data:`GROWTHS`), also drawn; a base with a row longer than ``spec["long_rows"][0]`` is
    also grown to ``spec["long_rows"][1]`` in each of its ways (a copy the draws made already
    counts once); each held-out base is grown to every size of ``spec["held_out_sizes"]`` in
    every listed way."""
    held_out = set(held_out)
    out = []
    for entry in files:
        if entry.name in held_out:
            for target, ways in spec.get("held_out_sizes", ()):
                out += grown_entries([entry], target, tuple(ways), at_least=True)
            continue
        rng = seeded_rng(f"draw/{entry.name}")
        mine = []
        for target, probability, ways in spec["draws"]:
            coin, way = rng.random(), ways[int(rng.integers(len(ways)))]
            if coin < probability:
                mine += grown_entries([entry], target, (way,), at_least=True)
        if "long_rows" in spec:
            row_limit, target, ways = spec["long_rows"]
            if longest_row(entry) > row_limit:
                drawn = {grown.name for grown in mine}
                mine += [grown for grown in grown_entries([entry], target, tuple(ways),
                                                          at_least=True)
                         if grown.name not in drawn]
        out += mine
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
        if "draws" in spec:
            entries += drawn_grown_entries(files, spec, read_names(HOLDOUT_FILE))
    seen: dict[str, str] = {}
    for entry in entries:
        if entry.name in seen:
            raise ValueError(f"two corpus matrices are named {entry.name!r}: {seen[entry.name]} "
                             f"and {entry.source}; rename one of the files")
        seen[entry.name] = entry.source
    return sorted(entries, key=lambda e: (round(math.log10(max(e.nnz, 1))), e.source != SYNTHETIC))
