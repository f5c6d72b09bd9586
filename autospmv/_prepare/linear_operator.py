"""SciPy's ``LinearOperator``, the base class of :class:`autospmv.SpMVOperator`, without the rest
of ``scipy.sparse.linalg`` when nothing has imported that package yet.

``import scipy.sparse.linalg`` runs the package's ``__init__``, which imports every solver and,
through them, ``scipy.linalg``: about 0.15 s on a 2-core machine, twice what autospmv's own
modules take, in every new process, for a class whose module (``scipy.sparse.linalg._interface``)
needs only ``scipy.sparse``. So when the package is not imported yet, that module is loaded
from its file under its own name. A later ``import scipy.sparse.linalg`` finds it in
``sys.modules`` and uses it, so there is one ``LinearOperator`` class and SciPy's solvers take
the operator as their own. Where the module does not stand alone (a SciPy whose module imports
from its package), the package is imported as usual.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import scipy.sparse

PACKAGE = "scipy.sparse.linalg"
MODULE = PACKAGE + "._interface"


def _linear_operator() -> type:
    if PACKAGE not in sys.modules and MODULE not in sys.modules:
        path = Path(scipy.sparse.__file__).with_name("linalg") / "_interface.py"
        try:
            source = path.read_text(encoding="utf-8")
        except OSError:
            source = "from ."
        if not re.search(r"^\s*from \.", source, re.MULTILINE):  # stands alone
            spec = importlib.util.spec_from_file_location(MODULE, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[MODULE] = module
            try:
                spec.loader.exec_module(module)
                return module.LinearOperator
            except Exception:  # noqa: BLE001 - any failure: import the package instead
                del sys.modules[MODULE]
    if PACKAGE not in sys.modules and MODULE in sys.modules:
        return sys.modules[MODULE].LinearOperator
    from scipy.sparse.linalg import LinearOperator

    return LinearOperator


LinearOperator = _linear_operator()
"""``scipy.sparse.linalg.LinearOperator`` (the same class)."""
