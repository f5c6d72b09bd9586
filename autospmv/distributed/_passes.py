"""The split's passes over the ghost entries, compiled: marking the columns they use, and
looking up each entry's new column number.

Both read or write an array as long as A's rows at random places: one thread of NumPy's fancy
indexing waits on memory for each entry, which took most of a power-law block's split. Here
large blocks spread the entries over numba's threads
(:func:`autospmv._support.threads.threaded_passes`), small ones run the serial compilation.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._support.jit import specialisations
from .._support.threads import threaded_passes


def _mark(columns, marked):
    for k in prange(columns.size):
        marked[columns[k]] = True  # threads writing True to one place agree


def _look_up(columns, numbers, out):
    for k in prange(columns.size):
        out[k] = numbers[columns[k]] - 1


_MARK = specialisations(_mark)
_LOOK_UP = specialisations(_look_up)


def mark(columns: np.ndarray, marked: np.ndarray) -> None:
    """``marked[columns] = True``."""
    _MARK[threaded_passes(columns.size)](columns, marked)


def look_up(columns: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """``numbers[columns] - 1``, of numbers' dtype."""
    out = np.empty(columns.size, dtype=numbers.dtype)
    _LOOK_UP[threaded_passes(columns.size)](columns, numbers, out)
    return out
