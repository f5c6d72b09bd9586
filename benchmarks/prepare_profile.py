"""Profile automatic prepare() for the GPU (cProfile and decision notes).

Where the time goes: a cProfile of ten calls per matrix (after three untimed ones), with the
decision's notes, which split the features and prediction from the conversion.

The matrices are those of :mod:`benchmarks.prepare_cost` (a 2-D Laplacian and a power-law
matrix per size) in float32 and float64, already on the GPU as CuPy CSR matrices
(``--input device``, the default) or SciPy matrices on the host (``--input host``). Needs a GPU
and CuPy.

    PYTHONPATH=. python benchmarks/prepare_profile.py --sizes 1e6 2e7 --out FOLDER

Writes ``FOLDER/prof-MATRIX_DTYPE.txt`` (the 45 most expensive calls, cumulative) and prints
each matrix's median prepare() time over ten synchronised calls and its decision notes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
from pathlib import Path

import autospmv
from autospmv._support.timing import time_calls
from prepare_cost import make_matrices

CALLS = 10
UNTIMED = 3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 2e7])
    parser.add_argument("--input", choices=["device", "host"], default="device")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import cupy
    import cupyx.scipy.sparse as cps

    args.out.mkdir(parents=True, exist_ok=True)
    for name, A in make_matrices(args.sizes, ["float32", "float64"]):
        matrix = cps.csr_matrix(A) if args.input == "device" else A
        last = {}

        def prepare():
            last["op"] = autospmv.prepare(matrix)
            cupy.cuda.runtime.deviceSynchronize()

        for _ in range(UNTIMED - 1):  # time_calls makes the last untimed call
            prepare()
        median_ms = time_calls(prepare, "cpu", budget=0.0, min_samples=CALLS)["median"] / 1e3
        op = last["op"]
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(CALLS):
            autospmv.prepare(matrix)
        cupy.cuda.runtime.deviceSynchronize()
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(45)
        label = f"{name}_{A.dtype}_{args.input}"
        (args.out / f"prof-{label}.txt").write_text(text.getvalue())
        notes = [line.strip() for line in op.explain().splitlines() if "took" in line]
        print(f"{label}: {op.kernel}, median {median_ms:.2f} ms; "
              + "; ".join(notes), flush=True)


if __name__ == "__main__":
    main()
