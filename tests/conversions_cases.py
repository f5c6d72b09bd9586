"""The cases of ``conversions_simulator_worker.py``, apart from it so that the tests can name
them without importing the worker (which turns numba-cuda's simulator on for its process)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from matrices import FAMILY, power_law

NAMES = ["all_rows_empty_9x11", "empty_0x0", "empty_5x0", "column_300x1", "dense_23x29",
         "half_rows_empty_200x150", "odd_65x47", "row_1x300"]
"""Small members of the matrix family: empty rows, matrices and columns, a single dense row and
rectangular shapes."""


def huge_row_among_short() -> sp.csr_matrix:
    """40 rows of two entries and one of 200 (the family's 300×3000 case pads too many ELL
    slots for the simulator)."""
    A = sp.random(41, 400, density=0.005, format="lil", random_state=2)
    A[17, :200] = 1.0
    return A.tocsr()


CASES = {f"{name}/float32": (FAMILY[name], np.float32) for name in NAMES}
CASES["huge_row_among_short/float32"] = (huge_row_among_short, np.float32)
CASES["power_law/float64"] = (lambda: power_law(400, 300, 1.6, 3), np.float64)
CASES["odd_65x47/float64"] = (FAMILY["odd_65x47"], np.float64)


def widths(csr) -> list[int]:
    """The ELL widths a case is split at: none (all COO), one, the median row length and the
    longest row (all ELL)."""
    lengths = np.diff(csr.indptr)
    longest = int(lengths.max()) if lengths.size else 0
    return sorted({0, min(1, longest), int(np.median(lengths)) if lengths.size else 0, longest})
