"""The automatic decision on a GPU: the feature passes on the uploaded matrix against the host
scan, and ``prepare()`` as a whole.

For the 2-D Laplacian and power-law matrices of ``prepare_cost.make_matrices`` (``--sizes``
nonzeros, default 2·10⁷) in float32 and float64, uploaded with CuPy, medians of ``--repeats``
(after two untimed calls) of:

* ``host_ms``: ``canonical_features_and_lengths`` of the host matrix with the shipped model's
  features (the host scan);
* ``device_ms``: the same with the uploaded matrix (the passes a decision on the GPU runs);
* ``prepare_ms``: ``autospmv.prepare(A, device="cuda")`` (upload, decision, conversion), and
  ``decision_ms``, the time its notes give for features and prediction;

and whether the host and the uploaded matrix gave the same features. Runs with any version of
the package that has these functions (``--label`` names it in the output), so a before/after
comparison is two runs on one machine. Needs a GPU and CuPy:

    PYTHONPATH=. python benchmarks/feature_passes.py [--sizes 2e7] [--out FILE]
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402

import autospmv  # noqa: E402
from autospmv._decide.features.extract import canonical_features_and_lengths  # noqa: E402
from autospmv._decide.model.lookup import find_model  # noqa: E402
from autospmv._prepare.device_input import upload_csr  # noqa: E402
from prepare_cost import gpu_matrices_main  # noqa: E402


def milliseconds(call, repeats: int) -> float:
    """Median wall time of ``call`` and a device synchronisation, after two untimed calls."""
    sync = cupy.cuda.Device().synchronize
    times = []
    for k in range(repeats + 2):
        started = time.perf_counter()
        call()
        sync()
        if k >= 2:
            times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def decision_ms(op) -> float:
    """The decision's own time from its notes ("features and prediction took X ms")."""
    for note in op.decision.notes:
        found = re.search(r"features and prediction took ([0-9.]+) ms", note)
        if found:
            return float(found.group(1))
    return float("nan")


def measure(name: str, A, repeats: int) -> dict:
    """The timings of one matrix (see the module docstring)."""
    needed = find_model("cuda", None, A.dtype).model.features_read()
    uploaded = upload_csr(A)
    host = canonical_features_and_lengths(A, device="cuda", needed=needed)[0]
    device = canonical_features_and_lengths(A, device="cuda", uploaded=uploaded,
                                            needed=needed)[0]
    row = {"matrix": name, "dtype": A.dtype.name, "rows": A.shape[0], "nnz": int(A.nnz),
           "same_features": all(device[k] == host[k] for k in device),
           "host_ms": milliseconds(lambda: canonical_features_and_lengths(
               A, device="cuda", needed=needed), repeats),
           "device_ms": milliseconds(lambda: canonical_features_and_lengths(
               A, device="cuda", uploaded=uploaded, needed=needed), repeats)}
    ops = []
    row["prepare_ms"] = milliseconds(lambda: ops.append(autospmv.prepare(A, device="cuda")),
                                     repeats)
    row["decision_ms"] = statistics.median(decision_ms(op) for op in ops[2:])
    row["kernel"] = ops[-1].kernel
    return row


def main(argv=None) -> None:
    gpu_matrices_main("feature_passes", __doc__.splitlines()[0], measure, argv, repeats=10)


if __name__ == "__main__":
    main()
