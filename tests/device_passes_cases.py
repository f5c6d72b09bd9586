"""The cases of ``device_passes_simulator_worker.py``, apart from it so that the tests can name
them without importing the worker (which turns numba-cuda's simulator on for its process)."""

from __future__ import annotations

from matrices import FAMILY, block3, poisson2d, power_law, random_matrix

SIMULATED_FAMILY = sorted(set(FAMILY) - {"parallel_long_rows_24x40000",
                                         "parallel_random_2000x2000"})
"""The matrix family less its two largest members, which take a minute each in the simulator."""
SAMPLED = {
    "block3": lambda: block3(701, 6e-3, 0),
    "poisson2d": lambda: poisson2d(50),
    "power_law": lambda: power_law(2500, 2000, 1.6, 9),
    "uniform": lambda: random_matrix(1501, 2001, 0.003, 5),
}
"""Matrices scanned in detail on a sample of their windows (``sample_rows`` below the rows):
runs of drawn windows, 3-row block rows across two windows, and windows left out."""
SAMPLE_ROWS = (100, 500)
LOCALITY = ("power_law", "poisson2d")
"""Matrices whose x locality for csr5's chooser is counted on the device too (every window of
so small a matrix: the sampled feature's value)."""
NEEDED = {
    "row_lengths_only": ["nnz", "row_mean"],
    "x_locality_only": ["nnz", "x_sectors_per_nnz_warp"],
    "sampled": ["nnz", "x_sectors_per_nnz_warp", "block4_share"],
    "index_passes": ["diagonals", "row_std"],
}
"""The features a caller reads, which decide the passes that run (``passes_needed``)."""
