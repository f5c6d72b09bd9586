"""The feature glossary: one line for every feature a tree may compare, the same in the code
(``explain`` prints it) and in the model card."""

from __future__ import annotations

from pathlib import Path

from autospmv import KERNELS
from autospmv._decide.features.extract import FEATURE_NAMES
from autospmv._tools.glossary import FEATURE_DESCRIPTIONS, describe, markdown_table

MODEL_CARD = Path(__file__).resolve().parent.parent / "models" / "README.md"


def test_every_feature_and_estimate_has_one_line():
    names = [*FEATURE_NAMES, *(f"est_{kernel}" for kernel in KERNELS)]
    missing = [name for name in names if name not in FEATURE_DESCRIPTIONS]
    assert not missing
    for name in names:
        text = describe(name)
        assert text and "\n" not in text and len(text) <= 100, name


def test_unknown_names_are_said_to_be_unknown():
    assert "not in autospmv's glossary" in describe("no_such_feature")


def test_the_model_card_holds_the_glossary_table():
    """models/README.md documents the features with exactly this table; after changing the
    glossary, paste ``autospmv._tools.glossary.markdown_table()`` there."""
    assert markdown_table() in MODEL_CARD.read_text(encoding="utf-8")
