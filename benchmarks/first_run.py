"""The first run in a new environment: import, first prepare and first product on the GPU, with
empty caches, as a user who has just installed the package sees it.

The caller's own work comes first, as in a user's program: importing NumPy, SciPy and CuPy,
making a vector (CuPy compiles its fill kernel on first use) and a SciPy 2-D Laplacian of 10⁶
nonzeros. Then ``import autospmv``, the first ``prepare`` for the GPU and the first product, the
package's part (``package_s``). Prints one JSON line: numba's and numba-cuda's versions, the
seconds of each part, ``bare_s`` (from a bare interpreter to the first product, the caller's
part included), and how many GPU kernels were compiled rather than loaded. Run it in a fresh
process with ``NUMBA_CACHE_DIR`` and ``CUPY_CACHE_DIR`` set to empty folders::

    NUMBA_CACHE_DIR=$(mktemp -d) CUPY_CACHE_DIR=$(mktemp -d) PYTHONPATH=. python benchmarks/first_run.py
"""

import json
import time

started = time.perf_counter()
import cupy  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

x = cupy.ones(1 << 20)
cupy.cuda.Device().synchronize()
T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(447, 447))
A = sp.kronsum(T, T, format="csr")
callers = time.perf_counter()
import autospmv  # noqa: E402

imported = time.perf_counter()
op = autospmv.prepare(A, device="cuda")
prepared = time.perf_counter()
y = op @ x[:A.shape[1]]
cupy.cuda.Device().synchronize()
multiplied = time.perf_counter()
assert np.allclose(cupy.asnumpy(y), A @ np.ones(A.shape[1]))
import numba  # noqa: E402
from importlib.metadata import version  # noqa: E402

print(json.dumps({"numba": numba.__version__, "numba_cuda": version("numba-cuda"),
                  "callers_s": callers - started, "import_s": imported - callers,
                  "prepare_s": prepared - imported, "product_s": multiplied - prepared,
                  "package_s": multiplied - callers, "bare_s": multiplied - started,
                  "kernel": op.kernel, "explain_compile": [line for line in op.explain()
                                                           .splitlines() if "compil" in line]}))
