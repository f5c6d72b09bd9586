"""``import autospmv`` and a matvec from an install where nothing can be written.

The package is copied to a temporary folder, every ``__pycache__`` is replaced by a plain file
(so that neither Python nor numba can create one, even when the tests run as root, for whom
``chmod a-w`` changes nothing) and the tree is made read-only. HOME and XDG_CACHE_HOME point
below a plain file, so numba's user-wide cache folder cannot be created either, and
NUMBA_CACHE_DIR and AUTOSPMV_CACHE_DIR are unset: the user cache folder cannot be created. The
import must still work, with a warning naming the folder it could not use (compiled code then
goes to a temporary folder for this process: :mod:`autospmv._support.cache`), and the kernels must still
compute.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import autospmv
    import numpy as np
    import scipy.sparse as sp
    assert autospmv.__file__.startswith({root!r}), autospmv.__file__
    A = sp.random(300, 200, density=0.05, format="csr", random_state=0)
    x = np.arange(200.0)
    for kernel in (None, "csr_scalar"):  # the automatic choice, and one forced
        y = autospmv.prepare(A, kernel=kernel, device="cpu") @ x
        assert np.allclose(y, A @ x), kernel
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("autospmv cannot use ") and "/blocker/cache/" in m
               for m in messages), messages
    print("ok")
""")


def _make_read_only(root: pathlib.Path) -> None:
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        (folder / "__pycache__").write_text("not a folder")
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def test_import_and_matvec_without_a_writable_cache(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(REPO_ROOT / "autospmv", site / "autospmv",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "models", site / "models")
    _make_read_only(site)
    blocker = tmp_path / "blocker"
    blocker.write_text("a plain file: nothing can be created below it")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("NUMBA_CACHE_DIR", "PYTHONPATH", "AUTOSPMV_"))}
    env.update(HOME=str(blocker / "home"), XDG_CACHE_HOME=str(blocker / "cache"),
               PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(site))],
                              capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=600)
    finally:
        for path in [site, *site.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
