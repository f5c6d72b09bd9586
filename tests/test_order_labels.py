"""Order labels (:mod:`training.order_labels`): records of the product timed in each order on
the CPU, the rule fitted to them, and the command line that writes it into a model file."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import scipy.sparse as sp

from autospmv._decide import ordering
from autospmv._decide.model.lookup import find_model, load_model
from autospmv._decide.model.order_rule import OrderRule
from matrices import poisson2d
from training import order_labels
from training.records import read_records
from training.timing import QUICK


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "matrices"
    folder.mkdir()
    sp.save_npz(folder / "grid.npz", poisson2d(40))
    sp.save_npz(folder / "wide.npz", sp.random(30, 60, density=0.5, format="csr",
                                               random_state=0))  # not square: left out
    return folder


def test_cases_grow_square_matrices_in_both_numberings(folder):
    cases = order_labels.cases([folder], grown_nnz=(2e4,))
    assert [c.numbering for c in cases] == ["given", "at_random"]
    given, at_random = (c.load() for c in cases)
    assert given.shape == at_random.shape and given.nnz == at_random.nnz
    assert cases[0].copies == round(2e4 / poisson2d(40).nnz)
    assert (given != at_random).nnz  # renumbered
    assert np.allclose(np.sort(given.data), np.sort(at_random.data))


def test_labels_are_written_resumed_and_read_back(folder, tmp_path):
    out = tmp_path / "orders.jsonl"
    order_labels.label_orders([folder], out, "cpu", grown_nnz=(2e4,), options=QUICK,
                              progress=None)
    records = read_records(out, order_labels.SCHEMA)
    assert [r["numbering"] for r in records] == ["given", "at_random"]
    for record in records:
        assert set(record["times"]) == set(order_labels.TIMED)
        assert all(t["b2b_us"] > 0 for t in record["times"].values())
        assert record["features"]["x_sectors_per_nnz_warp_after"] > 0
    at_random = records[1]["features"]
    assert at_random["bandwidth_after"] < at_random["bandwidth_before"]
    before = out.read_text()
    order_labels.label_orders([folder], out, "cpu", grown_nnz=(2e4,), options=QUICK,
                              progress=None)
    assert out.read_text() == before  # nothing labelled twice
    with pytest.raises(ValueError, match="float32 labels|holds float64"):
        order_labels.label_orders([folder], out, "cpu", dtype="float32", grown_nnz=(2e4,),
                                  options=QUICK, progress=None)


def synthetic_records(bandwidth: float, gather_bandwidth: float, count: int = 8,
                      window: float = 0.0) -> list:
    """Records whose times follow the GPU rule exactly with these bandwidths and x window:
    every other matrix as given (its rows reach 200 columns before the order and 300 after),
    the others numbered at random (reaching most of x before)."""
    rule = OrderRule(bytes_per_second=bandwidth, latency_seconds=0.0, window_bytes=window,
                     permutation_bytes_per_second=gather_bandwidth)
    records = []
    for i in range(count):
        m = 1_000_000 * (i + 1)
        nnz = 5 * m
        before = ordering.Locality(1.0 - 0.05 * i, 0.7 * m if i % 2 else 200.0)
        after = ordering.Locality(0.2 + 0.02 * i, 300.0)
        layout = order_labels._Layout((m, m), nnz, np.dtype("float64"))
        keep = ordering.product_seconds(layout, before, "cuda", rule)
        own = ordering.product_seconds(layout, after, "cuda", rule)
        gathers = ordering.permutation_seconds(layout, "cuda", rule)
        records.append({
            "schema": order_labels.SCHEMA, "name": f"m{i}", "shape": [m, m], "nnz": nnz,
            "dtype": "float64", "device": {"device": "cuda", "name": "test"},
            "features": {"x_sectors_per_nnz_warp_before": before.sectors_per_nnz,
                         "x_reach_before": before.reach,
                         "x_sectors_per_nnz_warp_after": after.sectors_per_nnz,
                         "x_reach_after": after.reach},
            "times": {"keep": {"b2b_us": keep * 1e6}, "bfs_own": {"b2b_us": own * 1e6},
                      "bfs": {"b2b_us": (own + gathers) * 1e6}}})
    return records


def test_the_fit_recovers_the_bandwidths_the_times_follow():
    rule, fit = order_labels.fit_rule(synthetic_records(2.5e12, 1.0e12), "cuda")
    assert rule.bytes_per_second == pytest.approx(2.5e12, rel=1e-6)
    assert rule.permutation_bytes_per_second == pytest.approx(1.0e12, rel=1e-6)
    assert fit["median_error"] < 1e-6 and rule.labels == 16
    counts = order_labels.agreement(synthetic_records(2.5e12, 1.0e12), "cuda", rule)
    assert all(c["agree"] == c["cases"] for c in counts.values())


def test_the_fit_keeps_the_smallest_x_window_that_decides_as_the_labels():
    # As given, the rows' x stays in a 256 KiB window and the order gains nothing; the rule
    # without a window sees gains there. Of the windows that decide as the labels, the
    # smallest is kept.
    records = synthetic_records(2.5e12, 1.0e12, window=256 << 10)
    rule, fit = order_labels.fit_rule(records, "cuda")
    assert rule.window_bytes > 0 and order_labels.disagreements(records, "cuda", rule) == 0
    smaller = [w for w in order_labels.WINDOWS if w < rule.window_bytes]
    for window in smaller:
        candidate = dataclasses.replace(rule, window_bytes=window)
        assert order_labels.disagreements(records, "cuda", candidate) > 0
    blind_to_the_window = dataclasses.replace(rule, window_bytes=0)
    counts = order_labels.agreement(records, "cuda", blind_to_the_window)
    assert counts["stored"]["wrong"] == 4  # the four matrices as given


def test_the_fit_recovers_the_bandwidth_with_the_window_the_times_follow(monkeypatch):
    monkeypatch.setattr(order_labels, "WINDOWS", (256 << 10,))
    rule, fit = order_labels.fit_rule(synthetic_records(2.5e12, 1.0e12, window=256 << 10),
                                      "cuda")
    assert rule.window_bytes == 256 << 10 and fit["median_error"] < 1e-6
    assert rule.bytes_per_second == pytest.approx(2.5e12, rel=1e-6)


def test_records_without_a_reach_read_all_of_x_as_the_window():
    records = synthetic_records(2.5e12, 1.0e12)
    for record in records:
        del record["features"]["x_reach_before"], record["features"]["x_reach_after"]
    rule, fit = order_labels.fit_rule(records, "cuda")
    assert rule.bytes_per_second == pytest.approx(2.5e12, rel=1e-6) and rule.window_bytes == 0


def test_the_fit_refuses_products_too_short_to_weigh():
    short = synthetic_records(1e15, 1e15)
    with pytest.raises(ValueError, match="the fit needs 4 or more"):
        order_labels.fit_rule(short, "cuda")


def test_fit_orders_writes_the_rule_into_a_model_file(tmp_path, capsys):
    from training.__main__ import main

    labels = tmp_path / "orders.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records(2e12, 8e11)))
    model_path = tmp_path / "model.json"
    load_model(find_model("cuda", dtype="float64").path).to_json(model_path)
    assert main(["fit-orders", str(labels), "--model", str(model_path)]) == 0
    out = capsys.readouterr().out
    assert "fitted to 16 products" in out and "built-in rule against the labels" in out
    assert "guard passed" in out
    written = json.loads(model_path.read_text())
    assert written["schema_version"] == 6
    assert written["order_rule"]["bytes_per_second"] == pytest.approx(2e12, rel=1e-6)
    assert load_model(model_path).order_rule.labels == 16


def test_a_rule_that_decides_worse_than_the_built_in_one_is_not_written(tmp_path, capsys,
                                                                         monkeypatch):
    from training.__main__ import main

    records = synthetic_records(2.5e12, 3.0e12, window=ordering.GPU_WINDOW_BYTES)
    blind = OrderRule(bytes_per_second=1e15, latency_seconds=5e-6)  # sees no gain anywhere
    passed, reason = order_labels.guard(records, "cuda", blind)
    assert not passed and "the built-in rule stays" in reason
    labels = tmp_path / "orders.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in records))
    model_path = tmp_path / "model.json"
    load_model(find_model("cuda", dtype="float64").path).to_json(model_path)
    before = model_path.read_text()
    monkeypatch.setattr(order_labels, "fit_rule", lambda records, device: (blind, {
        "products": 16, "gathers": 0, "median_error": 0.5, "gathers_median_error": None}))
    assert main(["fit-orders", str(labels), "--model", str(model_path)]) == 0
    captured = capsys.readouterr()
    assert "guard failed" in captured.out and "left " in captured.err
    assert model_path.read_text() == before
