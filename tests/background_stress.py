"""Threads through the background switch: ``prepare(A, background=True)`` again and again,
with threads making products (1-D and 2-D), waiting, pickling and explaining while the operator
switches from its start kernel to the decision's. Every call must succeed and every product
must be SciPy's to the rounding of the kernel that ran it.

``test_background.py`` runs a few switches; run it as a script for the full count::

    PYTHONPATH=. python tests/background_stress.py [switches] [threads] [rows] [cpu|cuda]

which prints one JSON object: the switches, the calls made, the exceptions and wrong results
(both 0 when the switch is safe) and the kernels switched to.
"""

from __future__ import annotations

import collections
import json
import pathlib
import pickle
import sys
import threading

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent),
                str(pathlib.Path(__file__).resolve().parent)]

import numpy as np  # noqa: E402

import autospmv  # noqa: E402
from autospmv._decide.model.tree import TreeModel  # noqa: E402
from matrices import TOLERANCE, from_row_lengths, relative_error  # noqa: E402

KERNELS = ("hyb", "ell", "csr5", "coo", "csr_vector", "csr_scalar", "jds")
"""The decisions switched to in turn, less the device's start kernel (which is kept instead)."""
GPU_ROWS = 40_000
"""Rows of the GPU's matrix: above the nonzeros that the GPU decides before ``prepare``
returns, so that its operator switches too."""
CALLS = 6
"""Calls per thread per switch, the first ones as soon as the operator is returned."""


def always(kernel: str) -> TreeModel:
    """A one-leaf model that picks ``kernel`` for every matrix."""
    return TreeModel.from_dict({
        "format": "autospmv-tree", "schema_version": 1, "feature_names": ["nnz"],
        "classes": [kernel],
        "tree": {"children_left": [-1], "children_right": [-1], "feature": [-2],
                 "threshold": [-2.0], "value": [[1.0]], "n_node_samples": [1],
                 "weighted_n_node_samples": [1.0]}})


def run(switches: int, threads: int = 8, rows: int = 3000, device: str = "cpu") -> dict:
    """``switches`` background prepares, each met by ``threads`` threads of :data:`CALLS`
    calls (a 1-D product, a 2-D product, ``wait()``, a pickle round trip, ``explain()``, in an
    order that differs per thread); the counts of what happened. On ``device="cuda"`` the
    vectors are the host's (the products upload them), the matrix has at least
    :data:`GPU_ROWS` rows, and the pickle is the documented refusal."""
    from autospmv._prepare.background import START_KERNEL

    if device == "cuda":
        rows = max(rows, GPU_ROWS)
    kernels_switched_to = [k for k in KERNELS if k != START_KERNEL[device]]
    A = from_row_lengths(np.full(rows, 4), rows, 4)  # even rows: every format takes it
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.0, A.shape[1])
    X = rng.uniform(0.5, 1.0, (A.shape[1], 3))
    y_ref, Y_ref = A @ x, A @ X
    tolerance = TOLERANCE[np.dtype(np.float64)]
    models = {kernel: always(kernel) for kernel in kernels_switched_to}
    counts = collections.Counter()
    errors: list[str] = []
    lock = threading.Lock()

    def check(y, expected, what):
        if relative_error(y, expected) > tolerance:
            with lock:
                counts["wrong"] += 1
                errors.append(f"wrong {what}")

    def pickled(op):
        """A round trip on the CPU; on the GPU the documented refusal (a GPU operator's matrix
        lives in device memory), raised as without a background decision."""
        if device == "cpu":
            check(pickle.loads(pickle.dumps(op)) @ x, y_ref, "unpickled")
            return
        try:
            pickle.dumps(op)
        except TypeError as error:
            if "an operator on the GPU cannot be pickled" in str(error):
                return
            raise
        raise AssertionError("a GPU operator was pickled")

    def calls(op):
        return {
            "matvec": lambda: check(op @ x, y_ref, "1-D product"),
            "matmat": lambda: check(op @ X, Y_ref, "2-D product"),
            "wait": lambda: op.wait(),
            "pickle": lambda: pickled(op),
            "explain": lambda: op.explain(),
        }

    def caller(op, order, barrier):
        table = calls(op)
        barrier.wait()
        for name in order:
            try:
                table[name]()
            except Exception as error:  # noqa: BLE001 - counted and reported
                with lock:
                    counts["exceptions"] += 1
                    errors.append(f"{name}: {error!r}")
            with lock:
                counts["calls"] += 1

    kernels = collections.Counter()
    names = ["matvec", "matmat", "matvec", "matmat", "wait", "pickle", "explain"]
    for switch in range(switches):
        kernel = kernels_switched_to[switch % len(kernels_switched_to)]
        op = autospmv.prepare(A, device=device, model=models[kernel], background=True)
        if op._switch is None:
            counts["wrong"] += 1
            errors.append(f"switch {switch}: decided before prepare returned")
        barrier = threading.Barrier(threads)
        workers = []
        for t in range(threads):
            order = [names[(switch + t + i * (t + 1)) % len(names)] for i in range(CALLS)]
            if t == 0:  # one thread pickles, which waits for the switch, only at the end
                order = [name for name in order if name != "pickle"] + ["pickle"]
            workers.append(threading.Thread(target=caller, args=(op, order, barrier)))
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        kernels[op.kernel] += 1
        if op.kernel != kernel:
            counts["wrong"] += 1
            errors.append(f"switch {switch}: runs {op.kernel}, decided {kernel}")
    return {"device": device, "rows": rows, "switches": switches, "threads": threads,
            "calls": counts["calls"],
            "exceptions": counts["exceptions"], "wrong": counts["wrong"],
            "kernels": dict(kernels), "first_errors": errors[:5]}


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:4]]
    device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    print(json.dumps(run(*(numbers or [1000]), device=device)))
