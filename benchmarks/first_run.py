"""The first run in a new environment: import, first prepare and first product on the GPU, with
empty caches, as a user who has just installed the package sees it.

Prints one JSON line: numba's and numba-cuda's versions, the seconds of ``import autospmv``,
of the first ``prepare`` (2-D Laplacian, 10⁶ nonzeros, CuPy matrix on the device) and of the
first product, and how many GPU kernels were compiled rather than loaded. Run it in a fresh
process with ``NUMBA_CACHE_DIR`` set to an empty folder::

    NUMBA_CACHE_DIR=$(mktemp -d) PYTHONPATH=. python benchmarks/first_run.py
"""

import json
import time

started = time.perf_counter()
import autospmv  # noqa: E402

imported = time.perf_counter()
import cupy  # noqa: E402
import numba  # noqa: E402
import numba.cuda  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(447, 447))
A = sp.kronsum(T, T, format="csr")
cupy.cuda.Device().synchronize()
before_prepare = time.perf_counter()
op = autospmv.prepare(A, device="cuda")
prepared = time.perf_counter()
y = op @ cupy.ones(A.shape[1])
cupy.cuda.Device().synchronize()
multiplied = time.perf_counter()
assert np.allclose(cupy.asnumpy(y), A @ np.ones(A.shape[1]))
from importlib.metadata import version  # noqa: E402

print(json.dumps({"numba": numba.__version__, "numba_cuda": version("numba-cuda"),
                  "import_s": imported - started, "prepare_s": prepared - before_prepare,
                  "product_s": multiplied - prepared,
                  "total_s": (imported - started) + (multiplied - before_prepare),
                  "kernel": op.kernel, "explain_compile": [line for line in op.explain()
                                                           .splitlines() if "compil" in line]}))
