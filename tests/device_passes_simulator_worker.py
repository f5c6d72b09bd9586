"""Run the feature passes' GPU kernels in numba-cuda's CUDA simulator and print, as one JSON
object, whether each case gave the host scan's features.

The simulator replaces ``numba.cuda`` process-wide and cannot share a process with real
compilation, so ``test_device_passes.py`` runs this script once in a subprocess and asserts on
its output. A matrix "on the GPU" is a :class:`autospmv.formats.base.DeviceCSR` over NumPy
arrays, which the simulator's kernels read. Run by hand::

    PYTHONPATH=. python tests/device_passes_simulator_worker.py

Output (stdout): ``{case: {"diff": str | null}}``, ``diff`` naming what differs (null: every
value equal, bit for bit). Timings go to stderr.
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numpy as np  # noqa: E402

from autospmv._decide.features import extract as features_module  # noqa: E402
from autospmv._decide.features.sampling import x_locality, x_reach  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv.formats.base import DeviceCSR  # noqa: E402
from device_passes_cases import (  # noqa: E402
                                 LOCALITY, NEEDED, SAMPLE_ROWS, SAMPLED, SIMULATED_FAMILY,
                                 )
from matrices import FAMILY  # noqa: E402
from worker_cases import run_case  # noqa: E402

def on_device(csr) -> DeviceCSR:
    return DeviceCSR(csr.shape, csr.indptr, csr.indices, csr.data, csr.indptr.copy(), np)


def difference(expected: tuple, got: tuple, subset: bool = False) -> str | None:
    """What differs between two (features, (values, counts)) results; None if nothing. With
    ``subset``, ``got`` may leave features out."""
    (want, want_lengths), (have, have_lengths) = expected, got
    if not subset and set(have) != set(want):
        return f"features {sorted(set(want) ^ set(have))} on one side only"
    if not set(have) <= set(want):
        return f"unknown features {sorted(set(have) - set(want))}"
    changed = {k: (want[k], have[k]) for k in have if want[k] != have[k]}
    if changed:
        return f"values differ: {changed}"
    for name, a, b in zip(("values", "counts"), want_lengths, have_lengths):
        if a.dtype != b.dtype or not np.array_equal(a, b):
            return f"row-length {name} differ: {a} ({a.dtype}) against {b} ({b.dtype})"
    return None


def features_both_ways(csr, sample_rows=None, needed=None):
    host = features_module.canonical_features_and_lengths(csr, sample_rows, "cuda")
    device = features_module.canonical_features_and_lengths(csr, sample_rows, "cuda",
                                                            uploaded=on_device(csr),
                                                            needed=needed)
    return difference(host, device, subset=needed is not None)


def main() -> None:
    out = {}
    for dtype in (np.float32, np.float64):
        tag = np.dtype(dtype).name
        for name in SIMULATED_FAMILY:
            csr = canonicalize(FAMILY[name]().astype(dtype))
            run_case(out, f"family/{name}/{tag}", lambda csr=csr: features_both_ways(csr))
        for name, build in SAMPLED.items():
            csr = canonicalize(build().astype(dtype))
            for rows in SAMPLE_ROWS:
                run_case(out, f"sampled/{name}/{rows}/{tag}",
                         lambda csr=csr, rows=rows: features_both_ways(csr, rows))
            if name not in LOCALITY:
                continue

            def locality(csr=csr):
                structure = on_device(csr).structure()
                host = (x_locality(csr), x_reach(csr))
                device = (x_locality(structure), x_reach(structure))
                return None if host == device else f"{host} on the host, {device} on the device"

            run_case(out, f"x_locality/{name}/{tag}", locality)
    csr = canonicalize(SAMPLED["block3"]().astype(np.float32))
    for name, needed in NEEDED.items():
        run_case(out, f"needed/{name}",
                 lambda needed=needed: features_both_ways(csr, 200, needed))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
