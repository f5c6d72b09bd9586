"""autospmv: sparse matrix-vector multiplication with the storage format chosen for you.

>>> import autospmv, scipy.sparse as sp, numpy as np
>>> A = sp.random(1000, 800, density=0.01, format="csr", random_state=0)
>>> op = autospmv.prepare(A, device="cpu")
>>> y = op @ np.ones(800)

See :func:`prepare`, :data:`KERNELS` and ``op.explain()``.
"""

from __future__ import annotations

from . import cache

cache.configure()  # before any numba function is defined: see autospmv/cache.py

# Then: asks OpenMP for sleeping workers before numba starts its threads (see cpu_threads).
from . import cpu_threads  # noqa: E402, F401, I001
from .features import features  # noqa: E402
from .operator import SpMVOperator  # noqa: E402
from .registry import KERNELS  # noqa: E402
from .selector import Decision  # noqa: E402
from .session import cuda_available, prepare, select  # noqa: E402

__all__ = ["KERNELS", "Decision", "SpMVOperator", "cuda_available", "features", "prepare",
           "select"]
__version__ = "0.1.0"
