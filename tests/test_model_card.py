"""models/README.md describes the files of models/: every one there, and none that is not."""

from __future__ import annotations

import re
from pathlib import Path

MODELS = Path(__file__).resolve().parent.parent / "models"
CARD = (MODELS / "README.md").read_text(encoding="utf-8")


def _files() -> list[str]:
    return sorted(p.name for p in MODELS.iterdir() if p.is_file() and p.name != "README.md")


def test_every_file_of_the_models_folder_is_described():
    named = [*_files(), "labels/labelling-times.json"]
    missing = [name for name in named if f"`{name}`" not in CARD
               and f"`{name.rsplit('.', 1)[0]}.json`" not in CARD]  # a model's card (.md)
    assert not missing


def test_every_model_has_a_card_and_a_section():
    models = [name for name in _files() if name.endswith(".json") and name.startswith("cuda-")]
    assert models
    headings = [line for line in CARD.splitlines() if line.startswith("## ")]
    for name in models:
        assert (MODELS / name.replace(".json", ".md")).is_file()
        assert any(f"`{name}`" in heading for heading in headings), name


def test_every_label_file_is_that_of_a_model_or_described():
    for path in sorted((MODELS / "labels").glob("*.jsonl.gz")):
        stem = path.name.removesuffix(".jsonl.gz")
        assert (MODELS / f"{stem}.json").is_file() or f"models/labels/{path.name}" in CARD


def test_every_model_file_the_card_names_exists():
    named = set(re.findall(r"\b((?:cuda|cpu)-[a-z0-9-]+-float(?:32|64)\.json)\b", CARD))
    assert named and not {name for name in named if not (MODELS / name).is_file()}
