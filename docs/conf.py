"""Sphinx configuration of autospmv's documentation.

Pages are Markdown (MyST). Build with warnings as errors, as ``tests/test_docs.py`` does:

    python -m sphinx -W -b html docs docs/_build/html
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autospmv import __version__  # noqa: E402
from autospmv._tools.glossary import markdown_table  # noqa: E402

project = "autospmv"
author = "the autospmv authors"
copyright = "2026, the autospmv authors"
release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]

myst_enable_extensions = ["substitution"]
myst_heading_anchors = 3
myst_substitutions = {"glossary_table": markdown_table()}
"""The feature glossary of explain.md, from the code that ``autospmv explain`` prints."""

autodoc_member_order = "bysource"
autodoc_inherit_docstrings = False
"""SciPy's LinearOperator docstrings describe SciPy's methods, not the operator's."""
napoleon_google_docstring = False

html_theme = "alabaster"
html_title = f"autospmv {__version__}"
html_theme_options = {"page_width": "1200px", "sidebar_width": "260px"}
"""A page of 1200 px (alabaster's 940 px left wide code blocks past the page at 1280 px); the
theme also uses the width in a media query, so it is a plain length: narrower windows stack the
sidebar above the page. The sidebar is wide enough for most member names, and
_static/custom.css wraps the rest."""
html_static_path = ["_static"]
html_css_files = ["custom.css"]
