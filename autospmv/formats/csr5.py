"""CSR5 (Liu & Vinter, ICS 2015): nonzeros in ω×σ tiles with per-tile segmented-sum descriptors.

The nonzeros, in CSR order, are cut into tiles of ``ω·σ`` consecutive entries (ω = :data:`OMEGA`
= 32, the warp width; σ = ``sigma``, the tile height). Lane ``l`` of a tile owns the σ
consecutive nonzeros ``tile_base + l·σ + j`` (j = 0..σ-1), so every lane does the same work
whatever the row lengths: the load balance does not depend on the matrix structure.

A row *starts a segment* at its first nonzero; the tile's first nonzero also starts one (segment
0), which may continue a row begun in an earlier tile. A tile's segments are numbered 0, 1, ...
in nonzero order; segment s is row ``tile_row + s``. What a lane sums before its first segment
start (its *head*) belongs to the segment left open by the lanes before it and is added to that
segment by a segmented sum across the lanes.

Empty rows: each gets one *placeholder* entry, column :data:`PLACEHOLDER` and value 0, so that
every row owns a segment and rows follow from segment numbers alone. The kernels skip
placeholders (never read x there: the result is exact whatever x holds) in the tiles that are
flagged as holding one, and their segments store the empty rows' zeros. Without them an empty
row would break the numbering, and such tiles would need a table of rows and y cleared in full.

Layout (ntiles = ⌈nnz' / (ω·σ)⌉, nnz' = nnz + the number of empty rows; ``itype`` is the CSR
index dtype, int32 or int64):

``indices``, ``data`` (nnz',)
    The nonzeros in CSR order with the placeholders in place, full tiles transposed: entry
    ``tile_base + l·σ + j`` is stored at ``tile_base + j·ω + l``, so lane l reads its j-th entry
    next to lane l+1's (coalesced warp loads). The last tile, when incomplete (nnz' not a
    multiple of ω·σ), stays in CSR order: its lane l reads ``tile_base + l·σ + j`` while that is
    below nnz'.
``tile_ptr`` (ntiles+1,) itype
    Row of each tile's first entry, stored as its bitwise complement ``~row`` (negative) when the
    tile holds a placeholder. ``tile_ptr[ntiles] = m``.
``bit_flag`` (ntiles·ω,) uint32
    Entry ``t·ω + l``, bit j: set iff entry ``t·ω·σ + l·σ + j`` starts a segment (the first
    entry of a row, or of the tile). σ ≤ 32 bits per lane.
``y_offset`` (ntiles·ω,) int32
    Segments started in the tile's lanes before l, i.e. the number of the first segment lane l
    starts: its row relative to the tile's first row.
``has_empty_rows`` (bool)
    Whether some row of the matrix is empty (then placeholders are stored, unless the matrix has
    no nonzeros and so no tiles).

The paper's third descriptor, each lane's distance to the next lane that starts a segment
(``seg_offset``), is not stored: the GPU kernel takes it from one ballot of its lanes' flags,
and the CPU kernel's backward pass over the lanes finds it on the way.

A row that crosses tiles is the last segment of the tile where it starts and segment 0 of the
following ones; the kernels combine those partial sums. A tile's last row is either the next
tile's first row or the one before it. The CSR row pointer is not stored: the descriptors
determine every entry's row, which is how :meth:`CSR5Format.to_csr` rebuilds the matrix.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from .._support.jit import njit
from . import convert
from .base import SparseFormat

OMEGA = 32
"""Tile width ω: lanes per tile, the CUDA warp width."""

SIGMA_RANGE = (2, 32)
"""Allowed tile heights σ (inclusive); a lane's bit flags fit one uint32."""

PLACEHOLDER = -1
"""Column index of an empty row's placeholder entry: every bit set, never a real column (read as
unsigned, as the kernels read int32 indices, it is 0xFFFFFFFF, past the last column of any
matrix)."""


def placeholder_rows(indptr, xp=np):
    """``(padded, positions)``: the row pointer with one entry more in every empty row, and the
    positions of those placeholder entries in the padded CSR order; ``indptr`` itself and no
    positions when no row is empty or none has an entry (a matrix without nonzeros has no
    tiles). The padded pointer is int64 where the extra entries would overflow ``indptr``'s
    dtype. ``xp``: the array module of ``indptr`` (NumPy, or CuPy on the GPU)."""
    lengths = indptr[1:] - indptr[:-1]
    empty = lengths == 0
    count = int(xp.count_nonzero(empty))
    if int(indptr[-1]) == 0 or count == 0:
        return indptr, xp.empty(0, dtype=indptr.dtype)
    wide = int(indptr[-1]) + count > np.iinfo(indptr.dtype).max
    padded = xp.zeros(indptr.shape[0], dtype=np.int64 if wide else indptr.dtype)
    xp.maximum(lengths, 1, out=lengths)
    xp.cumsum(lengths, dtype=padded.dtype, out=padded[1:])
    return padded, padded[:-1][empty]


def insert_placeholders(values, positions, fill, xp=np):
    """``values`` (CSR order) with ``fill`` inserted at ``positions`` (from
    :func:`placeholder_rows`); ``values`` itself when there are none."""
    if positions.shape[0] == 0:
        return values
    out = xp.full(values.shape[0] + positions.shape[0], fill, dtype=values.dtype)
    real = xp.ones(out.shape[0], dtype=bool)
    real[positions] = False
    out[xp.nonzero(real)[0]] = values
    return out


def flag_placeholder_tiles(tile_ptr, positions, sigma: int) -> None:
    """Store the first row of every tile holding a placeholder as its complement (in place)."""
    if positions.shape[0]:
        tiles = positions // (OMEGA * sigma)
        tile_ptr[tiles] = ~tile_ptr[tiles]


@njit(cache=True, nogil=True)
def _permute_tiles(src, out, sigma, to_tiles):
    """Copy src to out, moving every full tile between CSR order and the transposed tile order.

    ``to_tiles``: nonzero ``base + l·σ + j`` goes to ``base + j·ω + l``; otherwise the reverse.
    The incomplete last tile is copied unchanged (it stays in CSR order).
    """
    size = OMEGA * sigma
    full = src.shape[0] // size * size
    for base in range(0, full, size):
        for lane in range(OMEGA):
            for j in range(sigma):
                csr_position = base + lane * sigma + j
                tile_position = base + j * OMEGA + lane
                if to_tiles:
                    out[tile_position] = src[csr_position]
                else:
                    out[csr_position] = src[tile_position]
    out[full:] = src[full:]


def _check_sigma(sigma) -> int:
    low, high = SIGMA_RANGE
    if isinstance(sigma, (bool, np.bool_)) or not isinstance(sigma, (int, np.integer)) \
            or not low <= sigma <= high:
        raise ValueError(
            f"CSR5 tile height sigma must be an integer in [{low}, {high}]; got {sigma!r}"
        )
    return int(sigma)


def csr5_descriptors(indptr: np.ndarray, sigma: int, indices: np.ndarray | None = None,
                     data: np.ndarray | None = None, placeholders: tuple | None = None) -> dict:
    """The fields of a :class:`CSR5Format` (all but ``shape``) for a CSR row pointer.
    ``placeholders``: :func:`placeholder_rows` of ``indptr``, when the caller has it already.

    With ``indices`` and ``data`` (host arrays), their tile-transposed copies with the
    placeholders in place are included, written by the compiled pass from the arrays as they
    are; without, ``indices`` and ``data`` are left out: the descriptors depend on ``indptr``
    alone, and :func:`insert_placeholders` and :func:`transpose_tiles` place the nonzeros
    wherever they are (the GPU path of :mod:`autospmv._prepare.device_input`).
    """
    sigma = _check_sigma(sigma)
    itype = indptr.dtype
    m = indptr.shape[0] - 1
    padded, positions = placeholder_rows(indptr) if placeholders is None else placeholders
    total = int(padded[-1])
    has_empty_rows = positions.shape[0] > 0 or (total == 0 and m > 0)
    ntiles = -(-total // (OMEGA * sigma))

    tile_ptr = np.empty(ntiles + 1, dtype=itype)
    convert.csr5_tiles(padded, sigma, OMEGA, tile_ptr[:-1])
    tile_ptr[-1] = m
    bit_flag = np.empty(ntiles * OMEGA, dtype=np.uint32)
    y_offset = np.empty(ntiles * OMEGA, dtype=np.int32)
    moved = indices is not None
    if moved:
        out_indices = np.empty(total, dtype=indices.dtype)
        out_data = np.empty(total, dtype=data.dtype)
    else:
        indices = out_indices = np.empty(0, dtype=itype)
        data = out_data = np.empty(0, dtype=np.float64)
    convert.csr5_fill(indptr, padded, indices, data, sigma, OMEGA, tile_ptr[:-1], bit_flag,
                      y_offset, out_indices, out_data, PLACEHOLDER)
    flag_placeholder_tiles(tile_ptr, positions, sigma)
    fields = dict(sigma=sigma, tile_ptr=tile_ptr, bit_flag=bit_flag, y_offset=y_offset,
                  has_empty_rows=has_empty_rows)
    if moved:
        fields.update(indices=out_indices, data=out_data)
    return fields


DEVICE_DESCRIPTORS_MIN_NNZ = 5_000_000
"""From this many nonzeros a matrix on the GPU without empty rows gets its descriptors computed
there (:func:`descriptors_without_empty_rows`); below, the host's compiled passes over the row
pointer and one upload cost less: the device's dozens of small array operations take about
1.5 ms whatever the size, the host's share about 0.2–0.3 ms per 10⁶ nonzeros."""


def descriptors_without_empty_rows(indptr, sigma: int, xp=np) -> dict:
    """:func:`csr5_descriptors` (without ``indices`` and ``data``) for the row pointer of a
    matrix with at least one nonzero and no empty row, computed with array operations of ``xp``
    (NumPy, or CuPy for a row pointer on the GPU: no transfer to the host but scalars), with the
    same values.

    Without empty rows there are no placeholders, a tile's first row is the last row starting
    at or before its first nonzero, and the flagged nonzeros are the rows' first ones plus the
    first nonzero of every tile that continues a row. A lane's bits are summed as powers of two
    (exact in float64 below 2³²; made by shifts, since CuPy's ``exp2`` is not exact) and its
    segments counted."""
    sigma = _check_sigma(sigma)
    itype = indptr.dtype
    m = indptr.shape[0] - 1
    size = OMEGA * sigma
    ntiles = -(-int(indptr[-1]) // size)
    bases = xp.arange(ntiles, dtype=np.int64) * size
    tile_ptr = xp.empty(ntiles + 1, dtype=itype)
    tile_ptr[:-1] = xp.searchsorted(indptr, bases, side="right") - 1
    tile_ptr[-1] = m
    continued = bases[indptr[tile_ptr[:-1]] < bases]
    flagged = xp.concatenate([indptr[:-1].astype(np.int64), continued])
    tile = flagged // size
    local = flagged - tile * size
    word = tile * OMEGA + local // sigma
    bits = xp.left_shift(xp.ones_like(local), local % sigma).astype(np.float64)  # exp2 rounds
    bit_flag = xp.bincount(word, weights=bits, minlength=ntiles * OMEGA)
    segments = xp.bincount(word, minlength=ntiles * OMEGA).reshape(ntiles, OMEGA)
    y_offset = (xp.cumsum(segments, axis=1) - segments).astype(np.int32)
    return dict(sigma=sigma, tile_ptr=tile_ptr, bit_flag=bit_flag.astype(np.uint32),
                y_offset=y_offset.reshape(-1), has_empty_rows=False)


def transpose_tiles(values, sigma: int, xp=np, to_tiles: bool = True):
    """``values`` (nnz,) in CSR order -> CSR5's order: every full tile transposed (nonzero
    ``base + l·σ + j`` to ``base + j·ω + l``), the incomplete last tile unchanged; with
    ``to_tiles=False`` the reverse, CSR5's order back to CSR order. ``xp`` is the array module
    (NumPy, or CuPy for device arrays)."""
    full = values.shape[0] // (OMEGA * sigma) * (OMEGA * sigma)
    tile = (OMEGA, sigma) if to_tiles else (sigma, OMEGA)
    out = xp.empty_like(values)
    out[:full] = values[:full].reshape(-1, *tile).transpose(0, 2, 1).reshape(-1)
    out[full:] = values[full:]
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class CSR5Format(SparseFormat):
    """CSR5 storage (see the module docstring for the meaning of every array)."""

    sigma: int
    tile_ptr: np.ndarray
    bit_flag: np.ndarray
    y_offset: np.ndarray
    has_empty_rows: bool
    indices: np.ndarray
    data: np.ndarray

    name = "csr5"

    @property
    def tile_size(self) -> int:
        """Nonzeros per tile, ω·σ."""
        return OMEGA * self.sigma

    @property
    def ntiles(self) -> int:
        return self.tile_ptr.shape[0] - 1

    @classmethod
    def from_csr(cls, csr: sp.csr_matrix, sigma: int) -> "CSR5Format":
        """Build CSR5 with tile height ``sigma`` from canonical CSR.

        Empty rows get their placeholders (:func:`placeholder_rows`), then two compiled passes
        over the tiles (:mod:`autospmv.formats.convert`) find each tile's first row and write
        the descriptors and the transposed tiles.
        """
        descriptors = csr5_descriptors(csr.indptr, sigma, csr.indices, csr.data)
        return cls(csr.shape, **descriptors)

    @classmethod
    def from_device_csr(cls, csr, sigma: int) -> "CSR5Format":
        """:meth:`from_csr` on the device: the tiles transposed there with one reshape, and the
        descriptors computed there (:func:`descriptors_without_empty_rows`, from
        :data:`DEVICE_DESCRIPTORS_MIN_NNZ` nonzeros) or, for a smaller matrix or one with empty
        rows (placeholders), by the host's compiled passes over the row pointer and uploaded."""
        xp = csr.xp
        indices, data = csr.indices, csr.data
        if (csr.nnz >= DEVICE_DESCRIPTORS_MIN_NNZ
                and not bool((csr.indptr[1:] == csr.indptr[:-1]).any())):
            fields = descriptors_without_empty_rows(csr.indptr, sigma, xp)
        else:
            placeholders = placeholder_rows(csr.host_indptr)
            fields = csr5_descriptors(csr.host_indptr, sigma, placeholders=placeholders)
            fields = {k: (xp.asarray(v) if isinstance(v, np.ndarray) else v)
                      for k, v in fields.items()}
            positions = xp.asarray(placeholders[1])
            indices = insert_placeholders(indices, positions, PLACEHOLDER, xp)
            data = insert_placeholders(data, positions, 0, xp)
        return cls(csr.shape, indices=transpose_tiles(indices, sigma, xp),
                   data=transpose_tiles(data, sigma, xp), **fields)

    def csr_arrays(self, csr):
        """The tiles transposed back to CSR order, the empty rows' placeholders dropped."""
        xp = csr.xp
        indices = transpose_tiles(self.indices, self.sigma, xp, to_tiles=False)
        data = transpose_tiles(self.data, self.sigma, xp, to_tiles=False)
        if indices.shape[0] > csr.nnz:
            real = xp.nonzero(indices != PLACEHOLDER)[0]
            indices, data = indices[real], data[real]
        return indices, data

    def to_csr(self) -> sp.csr_matrix:
        """Rebuild the CSR matrix from the tiles and their descriptors alone (placeholders
        dropped)."""
        m = self.shape[0]
        sigma, size, ntiles = self.sigma, self.tile_size, self.ntiles
        stored = self.data.shape[0]
        indices = np.empty_like(self.indices)
        data = np.empty_like(self.data)
        _permute_tiles(self.indices, indices, sigma, False)
        _permute_tiles(self.data, data, sigma, False)

        bits = (self.bit_flag[:, None] >> np.arange(sigma, dtype=np.uint32)) & 1
        flags = bits.astype(bool).reshape(-1)[:stored]
        segment = np.cumsum(flags) - 1
        tile = np.arange(stored, dtype=np.int64) // size
        segment -= segment[np.arange(ntiles, dtype=np.int64) * size][tile]
        first = self.tile_ptr[:-1].astype(np.int64)
        row = np.where(first < 0, ~first, first)[tile] + segment
        real = indices != PLACEHOLDER
        row, indices, data = row[real], indices[real], data[real]
        indptr = np.zeros(m + 1, dtype=self.tile_ptr.dtype)
        np.cumsum(np.bincount(row, minlength=m), out=indptr[1:])
        return sp.csr_matrix((data, indices, indptr), shape=self.shape)
