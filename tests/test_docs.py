"""The documentation site builds without a warning.

Sphinx builds docs/ (Markdown pages through MyST, the API reference from the docstrings) with
warnings as errors, as the README's build command does: a broken link, a page outside the table
of contents, a missing figure or a docstring that does not parse fails here. The build runs in
its own interpreter, on the CPU, into a temporary folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
BUILD_SECONDS = 60
"""The build takes a few seconds; a minute means something is wrong (an import that compiles,
a page that runs code)."""


def test_the_documentation_builds_without_warnings(tmp_path):
    env = {**os.environ, "NUMBA_DISABLE_CUDA": "1"}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
        env=env, capture_output=True, text=True, timeout=5 * BUILD_SECONDS)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert (tmp_path / "html" / "index.html").is_file()
    assert seconds < BUILD_SECONDS, f"the documentation took {seconds:.0f} s to build"


def test_every_figure_is_shown_and_every_shown_figure_exists():
    """docs/figures holds what the pages show, nothing more (make_figures.py draws them)."""
    shown = {line.split("](figures/", 1)[1].split(")", 1)[0]
             for page in DOCS.glob("*.md") for line in page.read_text(encoding="utf-8").splitlines()
             if "](figures/" in line}
    drawn = {path.name for path in (DOCS / "figures").iterdir()}
    assert shown and shown == drawn
