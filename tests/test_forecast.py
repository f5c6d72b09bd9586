"""retrain's time forecast from the shipped summary of the label files.

An install ships ``models/labels/labelling-times.json`` instead of the label records
(:mod:`autospmv.training.forecast`); the forecast it gives must be the one the records give.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autospmv.training import corpus
from autospmv.training.forecast import (SUMMARY, Forecast, reference_run, summarise,
                                        summary_text)

MODELS = Path(__file__).resolve().parent.parent / "models"
LABELS = sorted((MODELS / "labels").glob("*.jsonl.gz"))


@pytest.fixture(scope="module")
def summary() -> dict:
    return summarise(LABELS)


def test_the_committed_summary_is_that_of_the_committed_labels(summary):
    assert (MODELS / "labels" / SUMMARY).read_text(encoding="utf-8") == summary_text(summary), (
        "models/labels/labelling-times.json is stale: python -m autospmv.training.forecast "
        "models/labels/*.jsonl.gz --out models/labels/labelling-times.json")


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_forecast_from_the_summary_equals_the_one_from_the_records(device, summary):
    [path] = [p for p in LABELS if p.name == summary["runs"][device]["file"]]
    assert path == min(p for p in LABELS if p.name.startswith(f"{device}-"))
    shipped, records = Forecast.for_device(device), Forecast.from_records(path, device)
    assert shipped.reference == records.reference and shipped.source == records.source
    entries = [*corpus.corpus("small"), *corpus.corpus("default"),
               corpus.Entry("unseen", "test", corpus.SYNTHETIC, "1e6", 3_000_000, None)]
    for forecast in (shipped, records):
        forecast.record(entries[0], 2.5)
    assert shipped.remaining(entries) == records.remaining(entries) > 0


def test_the_summary_round_trips_through_its_text(summary, tmp_path):
    (tmp_path / SUMMARY).write_text(summary_text(summary), encoding="utf-8")
    assert reference_run("cuda", tmp_path) == summary["runs"]["cuda"]


def test_without_a_summary_the_forecast_uses_its_built_in_figures(tmp_path):
    assert reference_run("cuda", tmp_path) is None
    (tmp_path / SUMMARY).write_text("not json")
    assert Forecast.for_device("cpu", tmp_path).reference == {}
