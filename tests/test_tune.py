"""prepare(A, tune="measure"): the tree's top candidates are timed on A and the fastest kept."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

import autospmv
from autospmv._decide.selection import Decision
from autospmv._prepare.tuning import (MEASURE_GAIN, TUNE_CANDIDATES, TUNE_MARGIN, TUNE_PRODUCTS,
                                      measure, measure_candidates, measuring_pays)
from autospmv._decide.ordering import OrderChoice
from autospmv._prepare.device_input import Input
from autospmv._prepare.operator import SpMVOperator
from autospmv._decide.model.tree import TreeModel
from autospmv._support.validation import canonicalize
from matrices import FAMILY, poisson2d
from virtual_clock import VirtualClock

MODELS = Path(__file__).resolve().parent.parent / "models"
CPU_MODEL = MODELS / "cuda-nvidia-h100-80gb-hbm3-float64.json"
"""A trained tree to tune from on the CPU (none ships for the CPU, whose rule runs one kernel; a
tree reads the same features on any device)."""


def test_measure_keeps_the_measured_fastest_and_records_it():
    A = poisson2d(120)
    predicted = autospmv.select(A, device="cpu", model=CPU_MODEL)
    op = autospmv.prepare(A, device="cpu", model=CPU_MODEL, tune="measure")
    tuning = op.decision.tuning
    expected = [predicted.kernel] + predicted.candidates[:TUNE_CANDIDATES - 1]
    assert list(tuning["times_us"]) == expected
    assert tuning["predicted"] == predicted.kernel and tuning["timing"] == "b2b"
    b2b = {k: t["b2b"] for k, t in tuning["times_us"].items()}
    assert tuning["kept"] == op.kernel == min(b2b, key=b2b.get)
    assert all(t["b2b"] > 0 and t["per_call"] > 0 for t in tuning["times_us"].values())
    assert tuning["seconds"] > 0 and tuning["products"] > 0
    assert any(note.startswith("tune='measure': back-to-back µs per product: ")
               for note in op.decision.notes)
    x = np.linspace(-1, 1, A.shape[1])
    np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12)


def test_measure_overrules_a_slow_prediction(monkeypatch):
    from autospmv._support import timing

    A = poisson2d(60)
    predicted = autospmv.select(A, device="cpu", model=CPU_MODEL).kernel
    matvec = SpMVOperator.matvec
    clock = VirtualClock()  # the products' own account of their time, whatever the machine's load
    monkeypatch.setattr(timing, "clock", lambda device: clock)

    def slowed(self, x, out=None):  # the predicted kernel takes 2 ms per product, others 10 µs
        clock.advance(2e-3 if self.kernel == predicted else 1e-5)
        return matvec(self, x, out=out)

    monkeypatch.setattr(SpMVOperator, "matvec", slowed)
    op = autospmv.prepare(A, device="cpu", model=CPU_MODEL, tune="measure")
    assert op.kernel != predicted and op.decision.tuning["predicted"] == predicted
    times = op.decision.tuning["times_us"]
    assert times[predicted]["b2b"] == pytest.approx(2000)
    assert times[op.kernel]["b2b"] == pytest.approx(10)
    assert f"(predicted {predicted})" in op.explain()


def test_without_a_model_the_rule_then_the_registry_order(monkeypatch):
    monkeypatch.setattr("autospmv._decide.model.lookup.shipped_models", lambda: {})
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    monkeypatch.setenv("AUTOSPMV_HOME", "/nonexistent-autospmv-home")
    op = autospmv.prepare(FAMILY["huge_row_among_short_300x3000"](), device="cpu",
                          tune="measure")
    assert op.decision.tuning["predicted"] == "csr_scalar"  # the CPU rule's one kernel
    assert list(op.decision.tuning["times_us"]) == ["csr_scalar", "coo", "csr_vector"]


def test_a_refused_format_is_skipped():
    # A one-leaf tree ranking ell first, then csr_vector, then coo.
    clf = DecisionTreeClassifier(random_state=0).fit(
        np.ones((6, 1)), ["ell", "ell", "ell", "csr_vector", "csr_vector", "coo"])
    model = TreeModel.from_sklearn(clf, ["row_max"])
    A = FAMILY["huge_row_among_short_300x3000"]()  # ell refuses its padding
    tuning = autospmv.prepare(A, device="cpu", model=model, tune="measure").decision.tuning
    assert tuning["predicted"] == "ell" and tuning["refused"] == ["ell"]
    assert list(tuning["times_us"]) == ["csr_vector", "coo", "csr_scalar"]


def test_measure_times_with_autospmvs_timer_without_the_training_package(monkeypatch):
    """The training pipeline is no part of the library: tune='measure' times with
    autospmv._support.timing alone."""
    from autospmv._support import timing

    monkeypatch.setitem(sys.modules, "autospmv.training", None)  # makes any import of it fail
    monkeypatch.setitem(sys.modules, "autospmv.training.timing", None)
    clocks = []
    clock = timing.clock
    monkeypatch.setattr(timing, "clock", lambda device: clocks.append(device) or clock(device))
    op = autospmv.prepare(poisson2d(30), device="cpu", model=CPU_MODEL, tune="measure")
    assert clocks == ["cpu"] and op.decision.tuning["kept"] == op.kernel


def test_measure_refuses_the_cuda_simulator(monkeypatch):
    monkeypatch.setattr("autospmv._support.devices.cuda_simulator", lambda: True)
    A = canonicalize(poisson2d(5))
    decision = autospmv.select(A, device="cuda")
    with pytest.raises(RuntimeError, match="simulator .* would time a Python interpreter"):
        measure(Input(A, "cuda", OrderChoice("keep", "order kept")), decision)


@pytest.mark.parametrize("slug", sorted(path.name.removesuffix(".json") for path in
                                         MODELS.glob("cuda-*.json")))
def test_the_margin_prunes_no_labelled_fastest_kernel(slug):
    """On a shipped model's own labels, the kernel that timed fastest is never ranked
    TUNE_MARGIN or more behind the tree's first choice, so tune="measure" would time it."""
    from autospmv.training.records import read_records

    model = TreeModel.load(MODELS / f"{slug}.json")
    behind = []
    for record in read_records(MODELS / "labels" / f"{slug}.jsonl.gz"):
        times = {kernel: result["time_b2b_us"] for kernel, result in record["kernels"].items()
                 if result.get("status") == "ok" and result.get("time_b2b_us")}
        if not times:
            continue
        evaluation, ranked, _ = model.decide(record["features"], record["nnz"])
        margins = model.margins(evaluation)
        fastest = min(times, key=times.get)
        if fastest in margins:  # (a kernel the tree does not rank is never a candidate)
            behind.append((margins[fastest] - margins[ranked[0]], record["name"], fastest))
    assert len(behind) > 500, "the label file holds the matrices the model was trained on"
    margin, name, fastest = max(behind)
    assert margin < TUNE_MARGIN, f"{fastest}, fastest on {name}, is ranked {margin:.2f} behind"


def test_tune_arguments_are_checked():
    with pytest.raises(ValueError, match=r"unknown tune='exhaustive'; valid: None"):
        autospmv.prepare(poisson2d(5), device="cpu", tune="exhaustive")
    with pytest.raises(ValueError, match="cannot be combined with kernel="):
        autospmv.prepare(poisson2d(5), device="cpu", kernel="coo", tune="measure")


def _decision(estimate_us, margins):
    return Decision("csr5", {}, "model m", candidates=list(margins), margins=margins,
                            estimates_us={"csr5": estimate_us})


def test_measuring_pays_when_the_saving_exceeds_the_conversions_and_timed_products():
    decision = _decision(100.0, {"csr_scalar": 0.2, "hyb": 0.5, "coo": 3.0})
    assert measure_candidates(decision) == ["csr5", "csr_scalar", "hyb"]
    # cost: 2 conversions of 10 ms + 3 × TUNE_PRODUCTS products of 100 µs
    cost = 2 * 0.010 + 3 * TUNE_PRODUCTS * 100e-6
    breakeven = cost / (100e-6 * MEASURE_GAIN)
    below, above = int(breakeven * 0.99), int(breakeven * 1.01) + 1
    pays, note = measuring_pays(decision, below, 0.010)
    assert not pays and note.endswith("kept the prediction") and f"{below:,} products" in note
    pays, note = measuring_pays(decision, above, 0.010)
    assert pays and note.endswith("measured") and "csr5, csr_scalar, hyb" in note


def test_measuring_never_pays_without_an_estimate_or_a_second_candidate():
    far = _decision(100.0, {"csr_scalar": TUNE_MARGIN, "hyb": TUNE_MARGIN + 1.0})
    pays, note = measuring_pays(far, 10**12, 0.0)
    assert not pays and "no other kernel is ranked within" in note
    pays, note = measuring_pays(
        Decision("csr_vector", {}, "rule", candidates=["coo"]), 10**12, 0.0)
    assert not pays and "no time estimate" in note


def test_the_products_hint_measures_when_it_pays_and_says_so():
    A = poisson2d(120)
    few = autospmv.prepare(A, device="cpu", model=CPU_MODEL, products=1)
    assert few.decision.tuning == {}
    assert any(n.startswith("workload hint: 1 products") and n.endswith("kept the prediction")
               for n in few.decision.notes)
    many = autospmv.prepare(A, device="cpu", model=CPU_MODEL, products=10**12)
    hint = [n for n in many.decision.notes if n.startswith("workload hint")]
    assert len(hint) == 1 and hint[0].endswith(": measured"), hint
    tuning = many.decision.tuning
    assert tuning["predicted"] == few.kernel and tuning["kept"] == many.kernel
    assert list(tuning["times_us"]) == measure_candidates(few.decision)
    assert "workload hint" in many.explain()
    x = np.linspace(-1, 1, A.shape[1])
    np.testing.assert_allclose(many @ x, A @ x, rtol=1e-12)


def test_the_products_hint_is_checked_and_ignored_with_a_forced_kernel():
    A = poisson2d(20)
    for bad, error in [(-1, ValueError), (2.5, TypeError), (True, TypeError), ("9", TypeError)]:
        with pytest.raises(error, match="products"):
            autospmv.prepare(A, device="cpu", products=bad)
    op = autospmv.prepare(A, device="cpu", kernel="coo", products=10**12)
    assert op.kernel == "coo" and not any("workload" in n for n in op.decision.notes)
    assert autospmv.prepare(A, device="cpu", model=CPU_MODEL, products=np.int64(5)).nnz == A.nnz
