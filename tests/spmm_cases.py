"""The cases of the GPU multi-vector product (SpMM) that ``spmm_simulator_worker.py`` runs in
numba-cuda's simulator and ``test_spmm_simulator.py`` asserts: kept apart from both, since the
worker must switch the simulator on before it imports numba and the test must not."""

from __future__ import annotations

from matrices import TINY

KERNELS = ("csr_scalar", "coo", "ell", "csr5")
"""A CSR format, which the product runs on directly, and formats it gets CSR arrays from (COO
shares its columns and values with them; ELL and CSR5 rebuild them)."""
MATRICES = ("empty_0x0", "empty_5x0", "empty_0x7", "all_rows_empty_9x11", "row_1x150",
            "dense_row_among_short_40x150", "rect_13x37", "rect_37x13", "power_law_48",
            "long_row_among_short_10x3000")
"""Empty matrices and rows, a single dense row, rectangular shapes, rows longer than a piece
(:data:`autospmv.kernels.cuda.spmm.PIECE`: 150 and 3,000 entries)."""
COLUMNS = (1, 4, 5, 16, 40)
"""Both kernels (k ≤ 4 and k > 4), and groups of 2, 4 and 16 lanes, with four columns a lane at
16 and idle column slots at 5 and 40. k = 1 on a matrix without columns is left out: SciPy's
``dot`` sends an (0, 1) X to ``matvec``, whose copy of an empty vector numba-cuda's simulator
refuses."""
CASES = [("csr_scalar", name, k) for name in MATRICES for k in COLUMNS
         if k > 1 or TINY[name]().shape[1]]
CASES += [("csr_scalar", name, 2) for name in ("row_1x150", "rect_13x37", "rect_37x13")]
CASES += [(kernel, name, k) for kernel in KERNELS[1:] for k in (3, 40)
          for name in ("rect_13x37", "dense_row_among_short_40x150")]
"""Every column count on every matrix on the CSR format; on the formats whose CSR arrays are
derived (the kernels are the same) both kernels on two matrices, one with a row longer than a
piece."""

PASSES = [(name, k) for name in ("dense_row_among_short_40x150", "rect_37x13",
                                 "all_rows_empty_9x11")
          for k in (8, 13)]
"""The few-columns kernel in passes of four columns (a last pass of four columns; four passes,
the last of one column), on a row longer than a piece (the piece launch in every pass), a
rectangular shape and empty rows. (Rows of many pieces, and every column count of one pass, are
the few-columns kernel's own cases in :data:`CASES`.)"""

ONE_PASS = [(program, name, k)
            for program in ("column_pairs", "column_pairs_wide_step", "column_quads")
            for name, counts in (("dense_row_among_short_40x150", (5, 67)),
                                 ("rect_37x13", (5, 67, 130)), ("all_rows_empty_9x11", (5, 67)),
                                 ("long_row_among_short_10x3000", (5, 67)),
                                 ("power_law_48", (5, 67)))
            for k in counts]
"""The one-pass programs besides the many-columns kernel (which only a timed first product
picks on a GPU): an odd k with a lone last column and partial last groups of columns (5, 67),
and a second pass over the columns (130), on rows longer than a piece, a rectangular shape and
empty rows."""

EIGHT = [("dense_row_among_short_40x150", 5), ("dense_row_among_short_40x150", 8),
         ("rect_37x13", 7), ("all_rows_empty_9x11", 6)]
"""The eight-columns kernel (for 5 to 8 columns, which only a timed first product picks on a
GPU): from five to eight sums a lane, on a row longer than a piece, a rectangular shape and
empty rows."""

TILED = [(program, 16, name, 37) for program in ("column_pairs", "column_quads")
         for name in ("dense_row_among_short_40x150", "rect_37x13", "all_rows_empty_9x11")]
"""The tiled programs (:data:`autospmv.kernels.cuda.spmm_programs.TILED`, which only a timed
first product picks, where X outgrows the L2 cache or has more than 64 columns): tiles of 16
columns of 37, the last of five (a lone last column), on a row longer than a piece (a piece
launch per tile), a rectangular shape and empty rows."""

RULE_CASES = ((6, "the few-columns kernel in 2 passes"),
              (16, "the column-pairs kernel of eight nonzeros a step"))
"""Column counts of the SpMM rule's cases (``rule_case`` of the simulator's worker) and the
program its rule names for them."""
