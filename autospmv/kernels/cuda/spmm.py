"""Multi-vector product (SpMM) kernels on the GPU: ``Y = A @ X`` for a row-major X of k columns,
on A's CSR arrays. Which of them a product runs, and their launches, are chosen in
:mod:`.spmm_programs`.

X (n × k) and Y (m × k) are C-contiguous (row-major): the k values of one row of X are adjacent,
so the lanes that read them for one nonzero read consecutive words. Every kernel takes k, the
distance between rows of X and Y, and the number of their first columns it computes, so a launch
handed X and Y from a later column on computes a window of columns (a pass or a tile).

* **k ≤ 4 columns** (:func:`spmm_few_columns_kernel`): csr_vector's split. A group of g lanes
  (g chosen as for csr_vector, from the lengths of the work items: rows cut into pieces, see
  below) shares a row; lane l reads nonzeros
  ``l, l+g, ...`` (coalesced within the group) and multiplies each into up to four accumulators
  (one per column; the k values of ``X[c, :]`` lie in one or two 32-byte sectors); the group
  then reduces its accumulators with shuffles. Each nonzero is read once for all k columns.
* **k > 4 columns**: a group of G lanes owns a row, its lanes spread over the columns, and G is
  the power of two from 2 to 32 that gives each lane at most its kernel's number of columns
  (:func:`.spmm_programs.lanes_per_row`; X wider than 32 lanes' columns is covered in passes,
  each walking the row again, its entries then in cache). Every lane walks the row's nonzeros
  (the group reads each one with one broadcast load) and for each nonzero gathers its columns
  of ``X[c, :]``, coalesced across the group; Y's rows are written coalesced. Four kernels (the
  one-pass programs, :data:`.spmm_programs.ONE_PASS`) differ in which columns a lane takes and
  how many nonzeros a step keeps in flight:

  - :func:`spmm_many_columns_kernel`: columns ``l, l+G, l+2G, l+3G``, two nonzeros a step;
  - :func:`spmm_column_pairs_kernel`: the adjacent pair ``2l, 2l+1``, four nonzeros a step:
    twice the lanes per row for the same k;
  - :func:`spmm_column_pairs_wide_step_kernel`: the same with eight nonzeros a step, under a
    launch bound of :data:`WIDE_STEP_BLOCKS_PER_SM` blocks per SM (more registers, fewer
    threads): it wins on long rows;
  - :func:`spmm_column_quads_kernel`: the adjacent ``4l`` to ``4l+3``, two nonzeros a step.

  On the SpMM benchmark's grown matrices the column pairs (four or eight nonzeros a step) win
  most cases from k = 8 on and every float64 case from k = 32, eight nonzeros a step on rows of
  tens of nonzeros or more; four columns a lane (many-columns or quads) win on rows of fewer
  than ten in float32; none wins everywhere.

* **5 to 8 columns** (:func:`spmm_eight_columns_kernel`): the few-columns kernel's split with
  up to eight sums a lane, one nonzero a step: one pass over A where rows are long.

Long rows: a group handles at most :data:`PIECE` nonzeros of a row. A kernel's row launch
gives every row its first piece and writes Y's row; where rows are longer than that, its piece
launch takes their further pieces, listed by row and first nonzero
(:func:`.spmm_programs.long_row_pieces`), and adds them to Y with atomic adds. A few long rows
then spread over many groups instead of holding one group for their whole length. Where a row
has several pieces, its sum's rounding depends on the order of the atomics, so it is not bitwise
reproducible from run to run.

Sums are accumulated in Y's dtype, the product's
(:func:`autospmv._support.validation.result_dtype`): a float32 matrix in a float64 product is
read as float32 and computed in float64. Shuffles appear only in the few- and eight-columns
kernels, after the loop over the nonzeros, where every thread of the block (also those without
a row) takes part, as numba-cuda's simulator requires (:mod:`autospmv.kernels.cuda.simulator`).

Weak where k is just above a multiple of a pass's columns (the sums of some lanes' last columns
idle, e.g. k = 9 in the many-columns kernel: columns 9 to 15 of four lanes) and where rows are
much shorter than g in the few-columns kernel (idle lanes, as csr_vector).
"""

from __future__ import annotations

from numba import cuda, uint64

from . import jit

BLOCK = 256

BLOCKS_PER_SM = 6
"""The kernels' launch bound: six blocks of :data:`BLOCK` threads per SM (75 % occupancy), which
holds them to 40 registers a thread, what they take in float64 without it (float32 with many
columns took 42, which leaves room for five blocks only); no registers spill."""

WIDE_STEP_BLOCKS_PER_SM = 3
"""The launch bound of :func:`spmm_column_pairs_wide_step_kernel`: three blocks of
:data:`BLOCK` threads per SM, up to 85 registers a thread (it takes 72 in float64, 48 in
float32), for its eight nonzeros a step."""

PIECE = 128
"""Most nonzeros of a row that one group handles (see the module docstring)."""

FULL_MASK = 0xFFFFFFFF


@cuda.jit(device=True, inline=True)
def _work_item(item, indptr, piece_row, piece_start, pieces):
    """``(row, start, end, valid)`` of work item ``item``: in the row launch (``pieces`` 0) the
    first :data:`PIECE` nonzeros of row ``item``; in the piece launch the piece ``item`` of the
    long-row pieces. ``valid`` is False past the last item (then start = end)."""
    row = uint64(0)
    start = uint64(0)
    end = uint64(0)
    if pieces:
        valid = item < piece_row.shape[0]
        if valid:
            row = uint64(piece_row[item])
            start = uint64(piece_start[item])
    else:
        valid = item < indptr.shape[0] - 1
        if valid:
            row = uint64(item)
            start = uint64(indptr[item])
    if valid:
        end = min(uint64(indptr[row + uint64(1)]), start + uint64(PIECE))
    return row, start, end, valid


@cuda.jit(device=True, inline=True)
def _store(y, position, value, pieces):
    """Write a sum into y (row launch) or add it atomically (piece launch)."""
    if pieces:
        cuda.atomic.add(y, position, value)
    else:
        y[position] = value


@jit(cache=True, launch_bounds=(BLOCK, BLOCKS_PER_SM))
def spmm_few_columns_kernel(indptr, indices, data, x, y, k, width, log_group, piece_row,
                            piece_start, pieces):
    # X and Y rows are k apart; this launch computes the first ``width`` (up to four) columns
    # of x and y, which a pass hands over from its first column on (see
    # spmm_programs.ColumnLaunch).
    group = 1 << log_group
    thread = cuda.grid(1)
    lane = thread & (group - 1)
    row, start, end, valid = _work_item(thread >> log_group, indptr, piece_row, piece_start,
                                        pieces)
    columns = uint64(k)
    zero = y.dtype.type(0)
    acc0 = acc1 = acc2 = acc3 = zero
    g = uint64(group)
    p = start + uint64(lane)
    # Two nonzeros per step while a lane has two left: their loads are in flight together.
    while p + g < end:
        a, b = data[p], uint64(indices[p]) * columns
        c, d = data[p + g], uint64(indices[p + g]) * columns
        acc0 += a * x[b] + c * x[d]
        if width > 1:
            acc1 += a * x[b + uint64(1)] + c * x[d + uint64(1)]
        if width > 2:
            acc2 += a * x[b + uint64(2)] + c * x[d + uint64(2)]
        if width > 3:
            acc3 += a * x[b + uint64(3)] + c * x[d + uint64(3)]
        p += uint64(2) * g
    if p < end:
        a, b = data[p], uint64(indices[p]) * columns
        acc0 += a * x[b]
        if width > 1:
            acc1 += a * x[b + uint64(1)]
        if width > 2:
            acc2 += a * x[b + uint64(2)]
        if width > 3:
            acc3 += a * x[b + uint64(3)]
    # Every thread of the warp takes part in the reduction, including those without a row.
    offset = group >> 1
    while offset > 0:
        acc0 += cuda.shfl_down_sync(FULL_MASK, acc0, offset)
        if width > 1:
            acc1 += cuda.shfl_down_sync(FULL_MASK, acc1, offset)
        if width > 2:
            acc2 += cuda.shfl_down_sync(FULL_MASK, acc2, offset)
        if width > 3:
            acc3 += cuda.shfl_down_sync(FULL_MASK, acc3, offset)
        offset >>= 1
    if valid and lane == 0:
        out = row * columns
        _store(y, out, acc0, pieces)
        if width > 1:
            _store(y, out + uint64(1), acc1, pieces)
        if width > 2:
            _store(y, out + uint64(2), acc2, pieces)
        if width > 3:
            _store(y, out + uint64(3), acc3, pieces)


@jit(cache=True, launch_bounds=(BLOCK, BLOCKS_PER_SM))
def spmm_eight_columns_kernel(indptr, indices, data, x, y, k, width, log_group, piece_row,
                              piece_start, pieces):
    # The few-columns kernel's split with up to eight sums a lane (``width`` ≤ 8 columns), one
    # nonzero a step: one pass over A for 5 to 8 columns.
    group = 1 << log_group
    thread = cuda.grid(1)
    lane = thread & (group - 1)
    row, start, end, valid = _work_item(thread >> log_group, indptr, piece_row, piece_start,
                                        pieces)
    columns = uint64(k)
    zero = y.dtype.type(0)
    acc0 = acc1 = acc2 = acc3 = acc4 = acc5 = acc6 = acc7 = zero
    p = start + uint64(lane)
    while p < end:
        a, b = data[p], uint64(indices[p]) * columns
        acc0 += a * x[b]
        acc1 += a * x[b + uint64(1)]
        acc2 += a * x[b + uint64(2)]
        acc3 += a * x[b + uint64(3)]
        acc4 += a * x[b + uint64(4)]
        if width > 5:
            acc5 += a * x[b + uint64(5)]
        if width > 6:
            acc6 += a * x[b + uint64(6)]
        if width > 7:
            acc7 += a * x[b + uint64(7)]
        p += uint64(group)
    # Every thread of the warp takes part in the reduction, including those without a row.
    offset = group >> 1
    while offset > 0:
        acc0 += cuda.shfl_down_sync(FULL_MASK, acc0, offset)
        acc1 += cuda.shfl_down_sync(FULL_MASK, acc1, offset)
        acc2 += cuda.shfl_down_sync(FULL_MASK, acc2, offset)
        acc3 += cuda.shfl_down_sync(FULL_MASK, acc3, offset)
        acc4 += cuda.shfl_down_sync(FULL_MASK, acc4, offset)
        if width > 5:
            acc5 += cuda.shfl_down_sync(FULL_MASK, acc5, offset)
        if width > 6:
            acc6 += cuda.shfl_down_sync(FULL_MASK, acc6, offset)
        if width > 7:
            acc7 += cuda.shfl_down_sync(FULL_MASK, acc7, offset)
        offset >>= 1
    if valid and lane == 0:
        out = row * columns
        _store(y, out, acc0, pieces)
        _store(y, out + uint64(1), acc1, pieces)
        _store(y, out + uint64(2), acc2, pieces)
        _store(y, out + uint64(3), acc3, pieces)
        _store(y, out + uint64(4), acc4, pieces)
        if width > 5:
            _store(y, out + uint64(5), acc5, pieces)
        if width > 6:
            _store(y, out + uint64(6), acc6, pieces)
        if width > 7:
            _store(y, out + uint64(7), acc7, pieces)


@jit(cache=True, launch_bounds=(BLOCK, BLOCKS_PER_SM))
def spmm_many_columns_kernel(indptr, indices, data, x, y, k, width, log_group, piece_row,
                             piece_start, pieces):
    # X and Y rows are k apart; this launch computes their first ``width`` columns (a tile of
    # the columns, handed over from its first column on, see spmm_programs.ColumnLaunch, or
    # all k).
    thread = cuda.grid(1)
    row, start, end, valid = _work_item(thread >> log_group, indptr, piece_row, piece_start,
                                        pieces)
    if not valid:
        return
    columns = uint64(k)
    limit = uint64(width)
    g = uint64(1 << log_group)
    out = row * columns
    zero = y.dtype.type(0)
    j0 = uint64(thread & ((1 << log_group) - 1))  # this lane's first column in this pass
    while j0 < limit:
        j1, j2, j3 = j0 + g, j0 + uint64(2) * g, j0 + uint64(3) * g
        acc0 = acc1 = acc2 = acc3 = zero
        p = start
        # Two nonzeros per step: their loads (and their gathers of X) are in flight together.
        while p + uint64(1) < end:
            a, b = data[p], uint64(indices[p]) * columns
            c, d = data[p + uint64(1)], uint64(indices[p + uint64(1)]) * columns
            acc0 += a * x[b + j0] + c * x[d + j0]
            if j1 < limit:
                acc1 += a * x[b + j1] + c * x[d + j1]
            if j2 < limit:
                acc2 += a * x[b + j2] + c * x[d + j2]
            if j3 < limit:
                acc3 += a * x[b + j3] + c * x[d + j3]
            p += uint64(2)
        if p < end:
            a, b = data[p], uint64(indices[p]) * columns
            acc0 += a * x[b + j0]
            if j1 < limit:
                acc1 += a * x[b + j1]
            if j2 < limit:
                acc2 += a * x[b + j2]
            if j3 < limit:
                acc3 += a * x[b + j3]
        _store(y, out + j0, acc0, pieces)
        if j1 < limit:
            _store(y, out + j1, acc1, pieces)
        if j2 < limit:
            _store(y, out + j2, acc2, pieces)
        if j3 < limit:
            _store(y, out + j3, acc3, pieces)
        j0 += uint64(4) * g


@jit(cache=True, launch_bounds=(BLOCK, BLOCKS_PER_SM))
def spmm_column_pairs_kernel(indptr, indices, data, x, y, k, width, log_group, piece_row,
                             piece_start, pieces):
    # A pair of adjacent columns a lane, four nonzeros a step (eight gathers in flight a lane).
    _column_pairs(indptr, indices, data, x, y, k, width, log_group, piece_row, piece_start,
                  pieces, False)


@jit(cache=True, launch_bounds=(BLOCK, WIDE_STEP_BLOCKS_PER_SM))
def spmm_column_pairs_wide_step_kernel(indptr, indices, data, x, y, k, width, log_group,
                                       piece_row, piece_start, pieces):
    # The column pairs with eight nonzeros a step (sixteen gathers in flight a lane), under a
    # launch bound that leaves it the registers for them.
    _column_pairs(indptr, indices, data, x, y, k, width, log_group, piece_row, piece_start,
                  pieces, True)


@jit(device=True)
def _column_pairs(indptr, indices, data, x, y, k, width, log_group, piece_row, piece_start,
                  pieces, wide):
    """The column-pairs kernels' work on the first ``width`` of X's and Y's k columns: a pair
    of adjacent columns a lane, four nonzeros a step, or eight where ``wide`` (a constant at
    each call: each kernel compiles one loop)."""
    thread = cuda.grid(1)
    row, start, end, valid = _work_item(thread >> log_group, indptr, piece_row, piece_start,
                                        pieces)
    if not valid:
        return
    columns = uint64(k)
    limit = uint64(width)
    out = row * columns
    zero = y.dtype.type(0)
    one = uint64(1)
    j = uint64(2 * (thread & ((1 << log_group) - 1)))  # this lane's first column in this pass
    while j < limit:
        second = j + one < limit
        acc0 = acc1 = zero
        p = start
        if wide:  # eight nonzeros per step: sixteen gathers of X in flight
            while p + uint64(7) < end:
                a0, b0 = data[p], uint64(indices[p]) * columns + j
                a1, b1 = data[p + one], uint64(indices[p + one]) * columns + j
                a2, b2 = data[p + uint64(2)], uint64(indices[p + uint64(2)]) * columns + j
                a3, b3 = data[p + uint64(3)], uint64(indices[p + uint64(3)]) * columns + j
                a4, b4 = data[p + uint64(4)], uint64(indices[p + uint64(4)]) * columns + j
                a5, b5 = data[p + uint64(5)], uint64(indices[p + uint64(5)]) * columns + j
                a6, b6 = data[p + uint64(6)], uint64(indices[p + uint64(6)]) * columns + j
                a7, b7 = data[p + uint64(7)], uint64(indices[p + uint64(7)]) * columns + j
                acc0 += (((a0 * x[b0] + a1 * x[b1]) + (a2 * x[b2] + a3 * x[b3]))
                         + ((a4 * x[b4] + a5 * x[b5]) + (a6 * x[b6] + a7 * x[b7])))
                if second:
                    acc1 += (((a0 * x[b0 + one] + a1 * x[b1 + one])
                              + (a2 * x[b2 + one] + a3 * x[b3 + one]))
                             + ((a4 * x[b4 + one] + a5 * x[b5 + one])
                                + (a6 * x[b6 + one] + a7 * x[b7 + one])))
                p += uint64(8)
        else:  # four nonzeros per step: eight gathers of X in flight
            while p + uint64(3) < end:
                a0, b0 = data[p], uint64(indices[p]) * columns + j
                a1, b1 = data[p + one], uint64(indices[p + one]) * columns + j
                a2, b2 = data[p + uint64(2)], uint64(indices[p + uint64(2)]) * columns + j
                a3, b3 = data[p + uint64(3)], uint64(indices[p + uint64(3)]) * columns + j
                acc0 += (a0 * x[b0] + a1 * x[b1]) + (a2 * x[b2] + a3 * x[b3])
                if second:
                    acc1 += ((a0 * x[b0 + one] + a1 * x[b1 + one])
                             + (a2 * x[b2 + one] + a3 * x[b3 + one]))
                p += uint64(4)
        while p < end:
            a, b = data[p], uint64(indices[p]) * columns + j
            acc0 += a * x[b]
            if second:
                acc1 += a * x[b + one]
            p += one
        _store(y, out + j, acc0, pieces)
        if second:
            _store(y, out + j + one, acc1, pieces)
        j += uint64(2 << log_group)


@jit(cache=True, launch_bounds=(BLOCK, BLOCKS_PER_SM))
def spmm_column_quads_kernel(indptr, indices, data, x, y, k, width, log_group, piece_row,
                             piece_start, pieces):
    thread = cuda.grid(1)
    row, start, end, valid = _work_item(thread >> log_group, indptr, piece_row, piece_start,
                                        pieces)
    if not valid:
        return
    columns = uint64(k)
    limit = uint64(width)
    out = row * columns
    zero = y.dtype.type(0)
    one, two, three = uint64(1), uint64(2), uint64(3)
    j = uint64(4 * (thread & ((1 << log_group) - 1)))  # this lane's first column in this pass
    while j < limit:
        has1, has2, has3 = j + one < limit, j + two < limit, j + three < limit
        acc0 = acc1 = acc2 = acc3 = zero
        p = start
        while p + one < end:
            a, b = data[p], uint64(indices[p]) * columns + j
            c, d = data[p + one], uint64(indices[p + one]) * columns + j
            acc0 += a * x[b] + c * x[d]
            if has1:
                acc1 += a * x[b + one] + c * x[d + one]
            if has2:
                acc2 += a * x[b + two] + c * x[d + two]
            if has3:
                acc3 += a * x[b + three] + c * x[d + three]
            p += two
        if p < end:
            a, b = data[p], uint64(indices[p]) * columns + j
            acc0 += a * x[b]
            if has1:
                acc1 += a * x[b + one]
            if has2:
                acc2 += a * x[b + two]
            if has3:
                acc3 += a * x[b + three]
        _store(y, out + j, acc0, pieces)
        if has1:
            _store(y, out + j + one, acc1, pieces)
        if has2:
            _store(y, out + j + two, acc2, pieces)
        if has3:
            _store(y, out + j + three, acc3, pieces)
        j += uint64(4 << log_group)
