"""autospmv's operator is SciPy's LinearOperator without autospmv importing scipy.sparse.linalg
(:mod:`autospmv._prepare.linear_operator`): each check runs in a fresh interpreter, since the point
is what a new process imports and in which order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

SPD = """
import numpy as np, scipy.sparse as sp
T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(30, 30))
A = sp.kronsum(T, T, format="csr")
b = np.ones(A.shape[0])
"""


def run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", SPD + code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_importing_autospmv_leaves_scipy_sparse_linalg_unimported():
    assert run("""
import sys, autospmv
op = autospmv.prepare(A, device="cpu")
y = op @ b
print("scipy.sparse.linalg" in sys.modules)
""") == "False"


@pytest.mark.parametrize("order", ["autospmv first", "scipy first"])
def test_the_operator_is_scipys_linear_operator_in_either_import_order(order):
    imports = ("import autospmv\nimport scipy.sparse.linalg as spla\n" if order == "autospmv first"
               else "import scipy.sparse.linalg as spla\nimport autospmv\n")
    assert run(imports + """
from scipy.sparse.linalg._interface import LinearOperator
op = autospmv.prepare(A, device="cpu")
x, info = spla.cg(op, b, rtol=1e-10)
print(isinstance(op, spla.LinearOperator), LinearOperator is spla.LinearOperator,
      spla.aslinearoperator(op) is op, info, float(abs(A @ x - b).max()) < 1e-8)
""") == "True True True 0 True"
