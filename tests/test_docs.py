"""The documentation site builds without a warning.

Sphinx builds docs/ (Markdown pages through MyST, the API reference from the docstrings) with
warnings as errors, as the README's build command does: a broken link, a page outside the table
of contents, a missing figure or a docstring that does not parse fails here. The build runs in
its own interpreter, on the CPU, into a temporary folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def test_the_public_functions_name_no_private_module():
    """The API reference shows these docstrings: they point to public names and pages, never
    to modules whose names start with an underscore; prepare's examples run."""
    import doctest
    import re

    import autospmv

    # autospmv._support, autospmv._prepare.device_input, _decide.lookup, _find_model()
    pattern = r"\bautospmv(?:\.\w+)*\._[a-z]\w*|(?<![\w.])_[a-z]\w*(?:\.\w+|\()"
    assert re.findall(pattern, "autospmv._support, a._b.c, _find_model(), _x.y; plain_name") == [
        "autospmv._support", "_find_model(", "_x.y"]
    for function in (autospmv.prepare, autospmv.select, autospmv.features,
                     autospmv.SparseFormat.arrays):
        private = re.findall(pattern, function.__doc__)
        assert private == [], (function.__name__, private)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(autospmv.prepare, "prepare", globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 3


def test_the_stylesheet_keeps_code_and_member_names_on_the_page():
    """At 1280 px the theme's fixed 940-px body made wide code blocks run past the page and
    the sidebar cut long member names: the page is wider, code blocks scroll inside themselves
    and sidebar names wrap. The theme puts the page width in a media query
    (``max-width: <page_width>``), where only a plain length is valid."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_conf", DOCS / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    width = re.fullmatch(r"(\d+)px", conf.html_theme_options["page_width"])
    assert width and 1100 <= int(width.group(1)) <= 1280
    assert "custom.css" in conf.html_css_files
    css = (DOCS / "_static" / "custom.css").read_text()
    assert re.search(r"pre\s*\{[^}]*overflow-x:\s*auto", css)
    assert re.search(r"div\.sphinxsidebar[^{]*a[^{]*\{[^}]*overflow-wrap:\s*anywhere", css)


PUBLIC_FUNCTIONS = ("prepare", "select", "features", "cuda_available", "kernel_names",
                    "register", "unregister", "cg", "bicgstab", "gmres", "minres")
OPERATOR_MEMBERS = ("matvec", "matmat", "rmatvec", "rmatmat", "explain", "diagonal", "memory",
                    "nbytes", "transpose_operator", "wait", "product_with_dot")
"""The operator's members the API reference renders."""


def _public_docstrings():
    import autospmv

    for name in PUBLIC_FUNCTIONS:
        yield name, getattr(autospmv, name)
    for name in OPERATOR_MEMBERS:
        yield f"SpMVOperator.{name}", getattr(autospmv.SpMVOperator, name)
    yield "Decision.explain", autospmv.Decision.explain
    yield "Param.check", autospmv.Param.check
    for name, cls in _public_classes():
        yield name, cls


def _public_classes():
    """The classes the API reference renders: their docstrings document the constructor's
    parameters."""
    import autospmv
    import autospmv.distributed

    for cls in (autospmv.SpMVOperator, autospmv.Decision, autospmv.KernelSpec, autospmv.Param,
                autospmv.SparseFormat, autospmv.distributed.DistributedOperator,
                autospmv.distributed.DistributedVector):
        yield cls.__name__, cls


@pytest.mark.parametrize("name, obj", list(_public_docstrings()), ids=lambda v: (
    v if isinstance(v, str) else ""))
def test_public_functions_document_their_parameters_or_returns_in_numpydoc(name, obj):
    import inspect

    doc = inspect.getdoc(obj.fget if isinstance(obj, property) else obj) or ""
    sections = {section for section in ("Parameters", "Returns")
                if f"{section}\n{'-' * len(section)}" in doc}
    assert sections, f"{name} has neither a Parameters nor a Returns section"
    function = obj.fget if isinstance(obj, property) else getattr(obj, "__wrapped__", obj)
    takes = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
    if takes:
        assert "Parameters" in sections, f"{name} takes {takes} but documents no Parameters"


def test_the_public_docstrings_examples_run():
    """Every example in the docstrings of the public names (``doctest``, examples that need a
    GPU, a cluster or a user's kernel marked to skip)."""
    import doctest

    import autospmv

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    objects = [obj for _, obj in _public_docstrings()] + [autospmv.FormatTooLargeError]
    tried = 0
    for obj in objects:
        target = obj.fget if isinstance(obj, property) else obj
        for test in finder.find(target, globs={"autospmv": autospmv}):
            result = runner.run(test)
            assert result.failed == 0, test.name
            tried += result.attempted
    assert tried >= 20


REPO = DOCS.parent
FIGURE_PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
"""The pages whose measured figures must name the results file they come from."""
CITATION = re.compile(r"(?<![\w/.~<>-])(?:benchmarks/results|models)/[\w.*/-]*[\w*/]")
"""A results file (``benchmarks/results/...``) or a model's file or card (``models/...``) named in
the prose; ``*`` stands for a family of files."""
TABLE_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])|\d\s?(?:µs|ms|×|%|TB/s)(?!\w)")
"""A measured figure in a table cell: a decimal, a time, a ratio or a share."""
BEFORE, AFTER = 12, 3
"""A table's citation stands in the lines before it (at most 12, not beyond its section's
heading) or in the 3 lines after it."""


def _prose(page: Path) -> str:
    """The page without its code blocks, whose paths are commands' arguments, not citations."""
    return re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)


def _citations(page: Path) -> set[str]:
    return set(CITATION.findall(_prose(page)))


def test_every_cited_results_file_exists():
    """A figure's citation stays true: every results file, folder or family of files that
    README.md and the pages of docs/ name is in the repository."""
    cited = {(page.name, path) for page in FIGURE_PAGES for path in _citations(page)}
    missing = [(page, path) for page, path in sorted(cited)
               if not (any(REPO.glob(path)) if "*" in path else (REPO / path).exists())]
    assert len(cited) >= 20, cited
    assert missing == [], missing


def _tables(page: Path):
    """(first line, last line, rows) of each Markdown table of the page, lines counted from 0."""
    lines = _prose(page).splitlines()
    start = None
    for number, line in enumerate([*lines, ""]):
        if line.lstrip().startswith("|") and start is None:
            start = number
        elif not line.lstrip().startswith("|") and start is not None:
            yield start, number - 1, lines
            start = None


def test_every_table_of_figures_cites_its_results():
    """A table of measured figures names its results file in the lines before it, within its
    section, or just after it."""
    uncited, figures = [], 0
    for page in FIGURE_PAGES:
        for first, last, lines in _tables(page):
            if not any(TABLE_FIGURE.search(row) for row in lines[first + 2:last + 1]):
                continue
            figures += 1
            before = lines[max(0, first - BEFORE):first]
            headings = [k for k, line in enumerate(before) if line.startswith("#")]
            around = "\n".join(before[headings[-1] if headings else 0:]
                               + lines[last + 1:last + 1 + AFTER])
            if not CITATION.search(around):
                uncited.append(f"{page.name}:{first + 1}")
    assert figures >= 4 and uncited == [], uncited


def test_the_user_guides_sixteen_column_figures_are_the_results_files():
    """The user guide's gain of one 16-column product over 16 separate products on the CPU is
    what ``benchmarks/results/spmm-cpu-2core.json`` holds (per call, the 31 shared matrices):
    range and median per dtype, as printed."""
    import json
    import statistics

    results = json.loads((DOCS.parent / "benchmarks" / "results" / "spmm-cpu-2core.json")
                         .read_text(encoding="utf-8"))
    guide = (DOCS / "user-guide.md").read_text(encoding="utf-8")
    text = " ".join(guide.split())
    for dtype in ("float64", "float32"):
        gains = [r["results"]["separate"]["per_call_us"] / r["results"]["autospmv"]["per_call_us"]
                 for r in results["records"]
                 if r["group"] == "given" and r["k"] == 16 and r["dtype"] == dtype]
        assert len(gains) == 31
        figures = (f"{min(gains):.1f}–{max(gains):.1f}× less time",
                   f"{min(gains):.1f}–{max(gains):.1f}× in {dtype}")
        assert any(f in text for f in figures), (dtype, figures)
        assert f"median {statistics.median(gains):.1f}×" in text, dtype
