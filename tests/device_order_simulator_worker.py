"""Walk the bfs order on the GPU (:mod:`autospmv.kernels.cuda.ordering`) in numba-cuda's CUDA
simulator and print, as one JSON object, whether each case gave the order its description
promises: the host's walk (``walked_by_the_description``) of the graph of A + Aᵀ.

The simulator replaces ``numba.cuda`` process-wide and cannot share a process with real
compilation, so ``test_device_order.py`` runs this script once in a subprocess and asserts on
its output. A matrix "on the GPU" is a :class:`autospmv.formats.base.DeviceCSR` over NumPy
arrays, which the simulator's kernels read. Run by hand::

    PYTHONPATH=. python tests/device_order_simulator_worker.py

Output (stdout): ``{case: {"diff": str | null}}``, ``diff`` saying how the order differs (null:
the same permutation). Timings go to stderr.
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from autospmv._decide import ordering  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv.formats.base import DeviceCSR  # noqa: E402
from autospmv.kernels.cpu.ordering import rows_rcm  # noqa: E402
from autospmv.kernels.cuda.ordering import (CHECK_EVERY, INSERTION_SORT_MAX,  # noqa: E402
                                           rows_rcm_on_device)
from ordering_cases import (WALKED, numbered_at_random, structure_of_a_plus_at,  # noqa: E402
                            walked_by_the_description)
from worker_cases import run_case  # noqa: E402

CASES = [name for name in WALKED if name != "unsorted_columns"]
"""The walked matrices (a matrix on the GPU is canonical: its rows are sorted)."""


def on_device(csr) -> DeviceCSR:
    return DeviceCSR(csr.shape, csr.indptr, csr.indices, csr.data, csr.indptr.copy(), np)


def differs(got, want) -> str | None:
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != np.int64:
        return f"perm is {got.dtype}, not int64"
    if got.shape != want.shape or not np.array_equal(got, want):
        return f"{got.tolist()} against {want.tolist()}"
    return None


def walk(A, index, symmetric: bool, max_steps: int = 1000):
    """The device's order of A with ``index`` indices; ``symmetric``: Aᵀ left out."""
    Ai = A.indices.astype(index)
    T = None if symmetric else canonicalize(A.T.tocsr())
    return rows_rcm_on_device(A.indptr.astype(index), Ai,
                              None if symmetric else T.indptr.astype(index),
                              None if symmetric else T.indices.astype(index), A.shape[0], np,
                              max_steps)


def main() -> None:
    out = {}
    for name in CASES:
        A = canonicalize(WALKED[name]())
        S = structure_of_a_plus_at(A)
        symmetric = np.array_equal(S.indptr, A.indptr) and np.array_equal(S.indices, A.indices)
        for index in (np.int32, np.int64):
            tag = f"{name}/{np.dtype(index).name}"
            run_case(out, f"walk/{tag}", lambda A=A, S=S, index=index: differs(
                walk(A, index, False), walked_by_the_description(S)))
            if symmetric:
                run_case(out, f"symmetric/{tag}", lambda A=A, index=index: differs(
                    walk(A, index, True), walked_by_the_description(A)))
        run_case(out, f"bfs/{name}", lambda A=A, S=S: differs(
            ordering.computed_order(on_device(A), "bfs")[0], walked_by_the_description(S)))
    star = canonicalize(WALKED["star"]())
    out["star_reaches_beyond_two_merged_runs"] = {
        "diff": None if np.diff(star.indptr).max() > 4 * INSERTION_SORT_MAX else "too short"}
    for n in (0, 1, 5):
        run_case(out, f"no_nonzeros/{n}", lambda n=n: differs(
            walk(sp.csr_matrix((n, n)), np.int32, False), list(range(n))[::-1]))

    path = numbered_at_random(sp.eye(60, format="csr") + sp.eye(60, k=-1, format="csr"), 5)

    def too_long():
        """A path of 60 vertices (60 levels), given up after the first levels; ``bfs`` then
        walks A's rows on the host, which differs from the device's walk of A + Aᵀ."""
        if walk(path, np.int32, False, max_steps=CHECK_EVERY) is not None:
            return "a walk of 60 levels was not given up after the first levels"
        saved = ordering.MIN_DEVICE_STEPS
        ordering.MIN_DEVICE_STEPS = 1  # the budget of A's few nonzeros: a pass or two
        try:
            perm, where = ordering.computed_order(on_device(path), "bfs")
        finally:
            ordering.MIN_DEVICE_STEPS = saved
        host = rows_rcm(path.indptr, path.indices, path.shape[0])
        if np.array_equal(host, walked_by_the_description(structure_of_a_plus_at(path))):
            return "the host's walk of A is the walk of A + Aᵀ: the case cannot tell them apart"
        if "too many levels" not in where:
            return f"computed {where}"
        return differs(perm, host)

    run_case(out, "the_host_walks_what_the_device_gives_up", too_long)

    A = canonicalize(WALKED["nonsymmetric"]())

    def chosen():
        def permute(csr, perm, inverse):
            return on_device(ordering.apply_order(csr.to_host(), perm, inverse))

        choice, ordered = ordering.choose_order(on_device(A), "bfs", None, "cuda",
                                                permute=permute)
        want = walked_by_the_description(structure_of_a_plus_at(A))
        if "computing the order (on the GPU)" not in choice.reason:
            return f"the reason does not say the order was walked on the GPU: {choice.reason}"
        return differs(choice.perm.astype(np.int64), want) or differs(
            ordered.indices.astype(np.int64),
            ordering.apply_order(A, np.asarray(want), ordering.inverse_of(
                np.asarray(want))).indices.astype(np.int64))

    run_case(out, "prepare_s_choice_walks_on_the_device", chosen)

    def host_matrix_walked_on_its_copy():
        choice, ordered = ordering.choose_order(A, "bfs", None, "cuda", walk_on=on_device(A))
        want = walked_by_the_description(structure_of_a_plus_at(A))
        if "computing the order (on the GPU)" not in choice.reason:
            return f"the reason does not say the order was walked on the GPU: {choice.reason}"
        if not isinstance(ordered, sp.csr_matrix):
            return f"a host matrix renumbered into a {type(ordered).__name__}"
        return differs(choice.perm.astype(np.int64), want)

    run_case(out, "a_host_matrix_walked_on_its_copy_on_the_device", host_matrix_walked_on_its_copy)
    def refused(wrong):
        """The walk made to return ``wrong`` (no permutation) must raise, not renumber A."""
        from autospmv.kernels.cuda import ordering as walk_module

        saved = walk_module.rows_rcm_on_device
        walk_module.rows_rcm_on_device = lambda *args: np.asarray(wrong, np.int64)
        try:
            ordering.bfs_on_device(on_device(canonicalize(WALKED["components"]())))
        except RuntimeError as exc:
            return None if "no permutation" in str(exc) else f"RuntimeError: {exc}"
        finally:
            walk_module.rows_rcm_on_device = saved
        return "no error"

    n = canonicalize(WALKED["components"]()).shape[0]
    for name, wrong in {"repeated": [0] * n, "short": list(range(n - 1)),
                        "beyond": list(range(1, n + 1)), "negative": [-1] + list(range(1, n))
                        }.items():
        run_case(out, f"refused/{name}", lambda wrong=wrong: refused(wrong))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
