"""Sorting a short run of keys together with a payload, in numba-compiled code: the rows of a
permuted CSR copy (:mod:`.permute`: columns with their values) and the vertices one vertex of the
bfs walk reaches (:mod:`.ordering`: degrees with the vertices).

A run of at most :data:`INSERTION_SORT_MAX` keys is sorted by insertion (no allocation, and
fastest for the few entries of a typical row); a longer one by a stable ``argsort`` (a dense
row of a million entries must not cost a million squared).
"""

from __future__ import annotations

import numpy as np

from ..._support.jit import njit

INSERTION_SORT_MAX = 32
"""The longest run sorted by insertion; longer runs are sorted by a stable argsort."""


@njit(cache=True)
def sort_run(keys, payload, first, last):
    """Sort ``keys[first:last]`` in ascending order, stably (equal keys keep their order), and
    move ``payload[first:last]`` with them."""
    if last - first <= INSERTION_SORT_MAX:
        for a in range(first + 1, last):
            key, value = keys[a], payload[a]
            b = a - 1
            while b >= first and keys[b] > key:
                keys[b + 1] = keys[b]
                payload[b + 1] = payload[b]
                b -= 1
            keys[b + 1] = key
            payload[b + 1] = value
        return
    ranked = np.argsort(keys[first:last], kind="mergesort")
    sorted_keys = keys[first:last].copy()
    values = payload[first:last].copy()
    for a in range(last - first):
        keys[first + a] = sorted_keys[ranked[a]]
        payload[first + a] = values[ranked[a]]
