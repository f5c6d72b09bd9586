"""One decision pass per prepare(): features scanned, estimates computed, tree walked once.

An automatic ``prepare()`` reads everything it decides and explains with from one
:meth:`~autospmv._decide.model.tree.TreeModel.evaluate`: the kernel, the fall-back order, the path, the leaf,
the corrected and the raw cost-model estimates. These tests count the three expensive steps
(the feature scan, :meth:`CostModel.estimates` and the tree walk) around whole calls, so that a
caller asking the model again for one of those parts shows up as a second count.
"""

from __future__ import annotations

import collections
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import autospmv
from autospmv._decide.model import lookup
from autospmv._decide.model.cost_model import CostModel
from autospmv._decide.model.tree import TreeModel
from autospmv._decide.model.store import device_slug, user_model_path
from matrices import FAMILY, poisson2d

from autospmv._decide.features import extract as FEATURES
"""The features module (``autospmv.features`` is the function of that name)."""
SHIPPED = sorted((Path(__file__).resolve().parent.parent / "models").glob("*.json"))


CPU_STAND_IN = next(p for p in SHIPPED if p.name == "cuda-nvidia-h100-80gb-hbm3-float64.json")
"""Shipped in the tests as this CPU's model: none ships for the CPU (its rule runs one kernel),
and a tree reads the same features on any device, so a GPU model serves to count a CPU pass."""


@pytest.fixture(autouse=True)
def isolated_lookup(monkeypatch, tmp_path):
    """No AUTOSPMV_MODEL, an empty per-user folder, and a CPU model among the shipped ones,
    which decides."""
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "autospmv-home"))
    stem = f"{device_slug('cpu')}-float64"
    shipped = {**lookup.shipped_models(), stem: tmp_path / f"{stem}.json"}
    shutil.copyfile(CPU_STAND_IN, shipped[stem])
    monkeypatch.setattr(lookup, "shipped_models", lambda: shipped)


@pytest.fixture
def calls(monkeypatch) -> collections.Counter:
    """Counts of the feature scan (every route to the features runs it once), the cost model's
    estimates and the tree walk, for the test's calls. A step the code under test does not
    have (an older version without ``TreeModel._walk``) counts 0, so the comparison with
    :data:`ONE_PASS` says which step ran how often."""
    counts = collections.Counter()

    def count(owner, name: str, key: str) -> None:
        original = getattr(owner, name, None)

        def counted(*args, **kwargs):
            counts[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted, raising=False)

    count(FEATURES, "scan_rows", "features")
    count(CostModel, "estimates", "estimates")
    count(TreeModel, "_walk", "walk")
    return counts


ONE_PASS = {"features": 1, "estimates": 1, "walk": 1}


def test_one_automatic_prepare_is_one_decision_pass(calls):
    op = autospmv.prepare(poisson2d(30), device="cpu")
    op.explain()
    assert op.decision.source.startswith("model "), op.explain()
    assert dict(calls) == ONE_PASS


def test_measure_decides_once_and_does_not_recompute_features(calls):
    op = autospmv.prepare(poisson2d(30), device="cpu", tune="measure")
    op.explain()
    assert op.decision.tuning["predicted"] and op.decision.source.startswith("model ")
    assert dict(calls) == ONE_PASS


def test_select_is_one_decision_pass(calls):
    autospmv.select(FAMILY["block3x3_120"](), device="cuda").explain()
    assert dict(calls) == ONE_PASS


def test_a_forced_kernel_makes_no_decision_pass(calls):
    op = autospmv.prepare(poisson2d(30), device="cpu", kernel="hyb")
    op.explain()
    assert op.kernel == "hyb" and dict(calls) == {}


def test_a_skipped_retrained_model_does_not_rescan(calls, monkeypatch):
    """A retrained model that loads but cannot decide hands the same features to the next."""
    doc = json.loads(CPU_STAND_IN.read_text())
    doc["provenance"] = {"marker": "retrained"}
    path = user_model_path(device_slug("cpu"))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    evaluate = TreeModel.evaluate

    def failing(self, features, only_read=False):
        if self.provenance.get("marker") == "retrained":
            raise ValueError("features missing for the model: something")
        return evaluate(self, features, only_read)

    monkeypatch.setattr(TreeModel, "evaluate", failing)
    with pytest.warns(RuntimeWarning, match="retrained on this machine is skipped"):
        op = autospmv.prepare(poisson2d(30), device="cpu")
    assert "shipped" in op.decision.notes[0]
    assert dict(calls) == ONE_PASS


@pytest.mark.parametrize("model", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_the_single_methods_agree_with_one_evaluation(model):
    tree = TreeModel.load(model)
    device = "cuda" if model.stem.startswith("cuda-") else "cpu"
    for A in (poisson2d(30), FAMILY["block3x3_120"](), FAMILY["parallel_long_rows_24x40000"]()):
        features = autospmv.features(A, device=device)
        evaluation = tree.evaluate(features)
        assert tree.ranked(features) == list(evaluation.ranked)
        assert tree.predict(features) == evaluation.ranked[0]
        assert tree.decision_path(features) == list(evaluation.path)
        assert tree.leaf(features) == evaluation.leaf
        assert tree.predict_proba(features) == evaluation.leaf.proba
        assert tree.inputs(features) == evaluation.inputs
        assert evaluation.estimates == tree.cost_model.estimates(features)
        assert {**features, **tree.cost_model.derived(features)} == evaluation.inputs
        np.testing.assert_array_equal(tree.corrected(features), evaluation.corrected)
        assert not evaluation.corrected.flags.writeable
        assert tree.corrected(features).flags.writeable
        assert tree.apply(np.array([[evaluation.inputs[n] for n in tree.feature_names]]))[0] \
            == evaluation.leaf.node


def always(kernel: str) -> TreeModel:
    """A tree of one leaf that picks ``kernel`` for every matrix."""
    tree = {"children_left": [-1], "children_right": [-1], "feature": [-2], "threshold": [-2.0],
            "value": [[1.0, 0.0]], "n_node_samples": [1], "weighted_n_node_samples": [1.0]}
    other = "coo" if kernel != "coo" else "csr_scalar"
    return TreeModel(["rows"], [kernel, other], tree)


def test_an_automatic_hyb_takes_its_width_from_the_scan(calls, row_length_passes):
    """The chooser's width comes from the row-length histogram of the feature scan; the row
    lengths are computed once more, by the format's width check, and not by the chooser."""
    A = autospmv._support.validation.canonicalize(poisson2d(80))  # 6084 of 6400 rows of 5: width 5
    m = A.shape[0]
    chosen = autospmv._registry.choose_params("hyb", A, "cpu")
    model = always("hyb")
    autospmv.prepare(A, device="cpu", model=model)  # compiles first
    calls.clear()
    row_length_passes.clear()
    op = autospmv.prepare(A, device="cpu", model=model)
    assert row_length_passes[m] == 1
    assert dict(calls) == {"features": 1, "walk": 1}
    assert op.kernel == "hyb" and op.decision.source == "model given"
    assert op.params == chosen == {"width": 5}


def test_the_tree_and_derived_share_one_derivation_of_the_estimates(monkeypatch):
    """``CostModel.derived`` and ``TreeModel.evaluate`` read the ``est_<kernel>`` values from
    the one function that derives them from the estimates."""
    tree = {"children_left": [-1], "children_right": [-1], "feature": [-2], "threshold": [-2.0],
            "value": [[1.0, 0.0]], "n_node_samples": [1], "weighted_n_node_samples": [1.0]}
    cost = CostModel({"coo": [12] + [0] * 9, "csr5": [16] + [0] * 9})
    model = TreeModel(["rows", "est_csr5"], ["coo", "csr5"], tree, cost_model=cost)
    features = {name: 0.0 for k in ("coo", "csr5") for name in cost.feature_names_of(k)}
    expected = {"est_coo": 0.0, "est_csr5": pytest.approx(np.log2(16 / 12))}
    assert cost.derived(features) == expected
    assert cost.derived_of({"csr5": 16.0, "coo": 12.0}) == expected  # by kernel, not dict order
    assert {k: model.evaluate(features).inputs[k] for k in expected} == expected
    seen = []

    def derived_of(self, estimates):
        seen.append(dict(estimates))
        return {"est_coo": 0.25, "est_csr5": 0.5}

    monkeypatch.setattr(CostModel, "derived_of", derived_of)
    assert cost.derived(features) == {"est_coo": 0.25, "est_csr5": 0.5}
    evaluation = model.evaluate(features)
    assert evaluation.inputs["est_coo"] == 0.25 and evaluation.inputs["est_csr5"] == 0.5
    assert seen == [{"coo": 12.0, "csr5": 16.0}, evaluation.estimates]


def test_an_automatic_prepare_validates_the_matrix_once(monkeypatch):
    """canonicalize() checks every index; the decision's feature scan does not check again."""
    from autospmv._support import validation

    checks = collections.Counter()
    check_structure = validation.check_structure

    def counted(A):
        checks["structure"] += 1
        return check_structure(A)

    monkeypatch.setattr(validation, "check_structure", counted)
    op = autospmv.prepare(poisson2d(30), device="cpu")
    assert op.decision.source.startswith("model ") and checks == {"structure": 1}
    assert autospmv.features(poisson2d(30))  # the public functions still validate their input
    assert checks == {"structure": 2}


@pytest.mark.parametrize("model", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_a_decision_from_the_features_read_is_the_decision_from_all(model):
    """prepare() computes only the features its model reads (features_read): the tree and its
    cost model decide exactly as from every feature, and the full check still stands."""
    from autospmv._decide.features.extract import canonical_features_and_lengths, feature_names
    from autospmv._support.validation import canonicalize

    tree = TreeModel.load(model)
    device = "cuda" if model.stem.startswith("cuda-") else "cpu"
    read = tree.features_read()
    assert read < set(feature_names())
    for A in (poisson2d(30), FAMILY["block3x3_120"](), FAMILY["parallel_long_rows_24x40000"]()):
        csr = canonicalize(A)
        full, _ = canonical_features_and_lengths(csr, device=device)
        lazy, _ = canonical_features_and_lengths(csr, device=device, needed=read)
        assert read <= set(lazy)
        evaluation = tree.evaluate(full)
        from_read = tree.evaluate({k: lazy[k] for k in read}, only_read=True)
        assert from_read.ranked == evaluation.ranked and from_read.path == evaluation.path
        assert from_read.leaf == evaluation.leaf and from_read.estimates == evaluation.estimates
        with pytest.raises(ValueError, match="features missing for the model"):
            tree.evaluate({k: lazy[k] for k in read})
