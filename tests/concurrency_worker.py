"""Threads and processes calling autospmv's CPU kernels; run in a subprocess by
``test_concurrency.py``, because a failure here can abort the process.

Usage: ``python tests/concurrency_worker.py threads|fork``, with ``NUMBA_THREADING_LAYER`` set
by the caller. Prints one JSON object on stdout: ``{"layer": ..., "wrong": n, "calls": n}`` for
``threads``, ``{"layer": ..., "results": [...], "expected": ...}`` for ``fork``. Exit status 3
when the requested threading layer cannot be loaded here.
"""

from __future__ import annotations

import json
import multiprocessing
import pathlib
import sys
import threading

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numba  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import autospmv  # noqa: E402

THREADS = 8
CALLS = 25


def matrix(seed: int, rows: int = 4000) -> sp.csr_matrix:
    """About 80,000 nonzeros in rows of 15 to 25 entries and one of 45 (HYB's overflow; ELL's
    padding stays under its fill limit). The operators are built with ``threads=2``, so every
    kernel runs its parallel specialisation whatever the size rule would pick."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(15, 26, rows)
    lengths[7] = 45
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.sort(rng.choice(3000, n, replace=False)) for n in lengths])
    A = sp.csr_matrix((rng.uniform(-1, 1, indptr[-1]), indices, indptr), shape=(rows, 3000))
    return A


def layer_or_exit() -> str:
    """Start numba's threads with a tiny parallel call; exit 3 if the layer is unavailable."""
    try:
        autospmv.prepare(matrix(0), kernel="csr_scalar", device="cpu", threads=2) @ np.ones(3000)
    except ValueError as error:  # "No threading layer could be loaded" and its kin
        print(f"threading layer unavailable: {error}", file=sys.stderr)
        sys.exit(3)
    return numba.threading_layer()


def threads() -> dict:
    """THREADS threads call one operator per kernel (and each its own operator), CALLS times,
    with their own x; every result must equal the one computed alone, bit for bit."""
    layer = layer_or_exit()
    A, B = matrix(1), matrix(2)
    shared = {k: autospmv.prepare(A, kernel=k, device="cpu", threads=2) for k in autospmv.KERNELS}
    rng = np.random.default_rng(3)
    xs = [rng.uniform(-1, 1, 3000) for _ in range(THREADS)]
    expected = {k: [op @ x for x in xs] for k, op in shared.items()}
    wrong, calls = [0], [0]
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        own = {k: autospmv.prepare(B, kernel=k, device="cpu", threads=2) for k in autospmv.KERNELS}
        own_expected = {k: B @ xs[t] for k in own}
        out = np.empty(A.shape[0])
        start.wait()
        for _ in range(CALLS):
            for k in autospmv.KERNELS:
                y = shared[k] @ xs[t]
                shared[k].matvec(xs[t], out=out)
                z = own[k] @ xs[t]
                bad = (not np.array_equal(y, expected[k][t])
                       or not np.array_equal(out, expected[k][t])
                       or not np.allclose(z, own_expected[k], rtol=1e-12, atol=1e-12))
                with lock:
                    wrong[0] += bad
                    calls[0] += 3

    lock = threading.Lock()
    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return {"layer": layer, "wrong": wrong[0], "calls": calls[0]}


_OPERATOR = None


def _child(seed: int) -> float:
    rng = np.random.default_rng(seed)
    return float(_OPERATOR @ rng.uniform(-1, 1, 3000) @ np.ones(4000))


def fork() -> dict:
    """A parallel call, then a 'fork' pool whose workers call the same operator."""
    global _OPERATOR
    layer = layer_or_exit()
    A = matrix(4)
    _OPERATOR = autospmv.prepare(A, kernel="csr_vector", device="cpu", threads=2)
    expected = [float(A @ np.random.default_rng(s).uniform(-1, 1, 3000) @ np.ones(4000))
                for s in range(4)]
    _OPERATOR @ np.ones(3000)  # the parent's parallel call before the fork
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map_async(_child, range(4)).get(timeout=120)
    return {"layer": layer, "results": results, "expected": expected}


if __name__ == "__main__":
    print(json.dumps({"threads": threads, "fork": fork}[sys.argv[1]]()))
