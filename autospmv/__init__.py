"""autospmv: sparse matrix-vector multiplication with the storage format chosen for you.

>>> import autospmv, scipy.sparse as sp, numpy as np
>>> A = sp.random(1000, 800, density=0.01, format="csr", random_state=0)
>>> op = autospmv.prepare(A, device="cpu")
>>> y = op @ np.ones(800)

See :func:`prepare`, :data:`KERNELS` and ``op.explain()``.
"""


def _find_folders_of_a_source_checkout() -> None:
    """Let ``autospmv.training`` and ``autospmv.models``, and no other folder, import from a
    source checkout.

    The repository keeps ``training/`` and ``models/`` beside this package and the wheel
    installs them inside it (pyproject.toml's package-dir); scripts run from the checkout with
    ``PYTHONPATH=.`` find them through a finder that answers for those two names alone, so that
    the checkout's other folders (``tests``, ``benchmarks``, the package's own) never import as
    ``autospmv.<folder>``. An installed copy has no pyproject.toml beside it and gets no finder."""
    import os
    import sys
    from importlib.machinery import PathFinder

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not (os.path.isfile(os.path.join(root, "pyproject.toml"))
            and os.path.isfile(os.path.join(root, "training", "__init__.py"))):
        return
    names = frozenset(f"{__name__}.{folder}" for folder in ("training", "models"))

    class CheckoutFolders:
        """``autospmv.training`` and ``autospmv.models`` from the checkout's top folders."""

        @staticmethod
        def find_spec(fullname, path=None, target=None):
            return PathFinder.find_spec(fullname, [root]) if fullname in names else None

    # First, so that another install's finder (an editable one of another checkout) cannot
    # answer for this checkout's folders.
    sys.meta_path.insert(0, CheckoutFolders)


_find_folders_of_a_source_checkout()
del _find_folders_of_a_source_checkout

from ._support import cache as _cache  # noqa: E402

_cache.configure()  # before any numba function is defined: see autospmv/_support/cache.py

# Then: asks OpenMP for sleeping workers before numba starts its threads (see _support/threads.py).
from ._support import threads as _threads  # noqa: E402, F401, I001
from ._decide.features.extract import features  # noqa: E402
from ._decide.selection import Decision  # noqa: E402
from ._prepare.operator import SpMVOperator  # noqa: E402
from ._prepare.prepare import prepare, select  # noqa: E402
from ._registry import KERNELS, KernelSpec, Param, register, unregister  # noqa: E402
from ._registry import names as kernel_names  # noqa: E402
from ._support.devices import cuda_available  # noqa: E402
from .formats.base import FormatTooLargeError, SparseFormat  # noqa: E402
from .solvers import bicgstab, cg, gmres, minres  # noqa: E402

__all__ = ["KERNELS", "Decision", "FormatTooLargeError", "KernelSpec", "Param", "SparseFormat",
           "SpMVOperator", "bicgstab", "cg", "cuda_available", "features", "gmres",
           "kernel_names", "minres", "prepare", "register", "select", "unregister"]
__version__ = "0.1.0"
