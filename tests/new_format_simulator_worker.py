"""Run the toy format of ``toy_format.py`` on the GPU in numba-cuda's CUDA simulator and print
one JSON object: ``{"<matrix>/<dtype>": relative error against SciPy}``.

Run by ``test_new_format.py`` in a subprocess (the simulator replaces ``numba.cuda`` process-wide).
"""

from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before anything imports numba

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent),
                str(pathlib.Path(__file__).resolve().parent)]

import numpy as np  # noqa: E402

import autospmv  # noqa: E402
import toy_format  # noqa: E402
from matrices import TINY, random_vector, reference, relative_error  # noqa: E402


def main() -> None:
    autospmv.register(toy_format.SPEC)
    rng = np.random.default_rng(0)
    out = {}
    for name, make in sorted(TINY.items()):
        for dtype in (np.float32, np.float64):
            A = make().astype(dtype)
            op = autospmv.prepare(A, kernel=toy_format.NAME, device="cuda")
            x = random_vector(rng, A.shape[1], dtype)
            out[f"{name}/{np.dtype(dtype).name}"] = relative_error(op @ x, reference(A, x))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
