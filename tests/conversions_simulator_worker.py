"""Run the conversion kernels (``autospmv/kernels/cuda/conversions.py``) in numba-cuda's CUDA
simulator and print, as one JSON object, whether each case built the host conversion's arrays.

The simulator replaces ``numba.cuda`` process-wide, so ``test_conversions.py`` runs this script
once in a subprocess and asserts on its output. A matrix "on the GPU" is a
:class:`autospmv.formats.base.DeviceCSR` over NumPy arrays, which the simulator's kernels read.
Run by hand::

    PYTHONPATH=. python tests/conversions_simulator_worker.py

Output (stdout): ``{case: {"diff": str | null}}``, ``diff`` naming the first array that differs
(null: every array equal, dtype and values).
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

import numpy as np  # noqa: E402

from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv.formats.base import DeviceCSR  # noqa: E402
from autospmv.formats.coo import COOFormat  # noqa: E402
from autospmv.formats.ell import split_at_width  # noqa: E402
from autospmv.kernels.cuda import conversions  # noqa: E402
from conversions_cases import CASES, widths  # noqa: E402


def first_difference(pairs: dict) -> str | None:
    for name, (want, have) in pairs.items():
        if want.dtype != have.dtype or not np.array_equal(want, have):
            return f"{name}: {have} ({have.dtype}) against {want} ({want.dtype})"
    return None


def check(csr, width: int) -> str | None:
    stand_in = DeviceCSR(csr.shape, csr.indptr, csr.indices, csr.data, csr.indptr.copy(), np)
    ell, coo = split_at_width(csr, width)
    longest = int(np.diff(csr.indptr).max()) if csr.shape[0] else 0
    col, data, coo_row, coo_col, coo_data = conversions.split_at_width(stand_in, width, longest)
    pairs = {"col": (ell.col, col), "data": (ell.data, data), "coo_row": (coo.row, coo_row),
             "coo_col": (coo.col, coo_col), "coo_data": (coo.data, coo_data),
             "rows": (COOFormat.from_csr(csr).row,
                      conversions.nonzero_rows(stand_in, csr.indices.dtype))}
    if conversions.longest_row(stand_in) != longest:
        return f"longest row {conversions.longest_row(stand_in)} against {longest}"
    return first_difference(pairs)


def main() -> None:
    out = {}
    for name, (build, dtype) in CASES.items():
        csr = canonicalize(build().astype(dtype))
        for width in widths(csr):
            try:
                diff = check(csr, width)
            except Exception as exc:  # noqa: BLE001 - reported to the test
                diff = f"{type(exc).__name__}: {exc}"
            out[f"{name}/{width}"] = {"diff": diff}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
