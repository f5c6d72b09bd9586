"""The default kernel per size band and the tree's calibrated overrides.

Covers the policy itself (autospmv._decide.model.default_policy), its place in model files (schema 3), what
prepare() and explain() do with it, and its calibration by leave-one-kind-out cross-validation
(autospmv.training.defaults) on fabricated labels where the right answer is known.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv._decide.model.default_policy import Band, DefaultPolicy, margins
from autospmv._decide.model.tree import TreeModel
from autospmv.training import defaults, train
from autospmv.training.dataset import dataset
from autospmv.training.fitting import Hyper
from autospmv.training.metrics import selection_metrics
from test_training import _record

MODELS = Path(__file__).resolve().parent.parent / "models"


def _policy(threshold=0.3):
    return DefaultPolicy([Band(0, "csr_vector", threshold), Band(1000, "csr5", math.inf)])


def test_the_default_stands_below_the_threshold_and_yields_at_or_above_it():
    ranked = ["ell", "csr_vector", "csr5"]
    stood = _policy().decide(10, ranked, {"ell": 0.0, "csr_vector": 0.29, "csr5": 1.0})
    assert (stood.kernel, stood.overridden) == ("csr_vector", False)
    assert "stood" in stood.note and "0.29" in stood.note
    replaced = _policy().decide(10, ranked, {"ell": 0.0, "csr_vector": 0.3, "csr5": 1.0})
    assert (replaced.kernel, replaced.overridden) == ("ell", True)
    assert "replaces the default csr_vector" in replaced.note


def test_an_infinite_threshold_never_yields_and_says_why():
    decided = _policy().decide(5000, ["csr_scalar", "csr5"], {"csr_scalar": 0, "csr5": 9.0})
    assert decided.kernel == "csr5" and not decided.overridden
    assert "no threshold" in decided.note and "at least 1,000 nonzeros" in decided.note


def test_a_tree_that_agrees_with_the_default_keeps_it():
    decided = _policy().decide(5000, ["csr5", "coo"], {"csr5": 0.0, "coo": 0.1})
    assert decided.kernel == "csr5" and "also ranks first" in decided.note


def test_bands_are_found_by_nonzeros():
    policy = _policy()
    assert policy.band(0)[0].kernel == "csr_vector" and policy.band(999)[1] == 1000
    assert policy.band(1000)[0].kernel == "csr5" and policy.band(10**9)[1] is None


def test_margins_follow_the_ranking_units():
    assert margins("correction", ["a", "b"], [3.0, 2.5]) == {"a": 0.5, "b": 0.0}
    assert margins("value", ["a", "b"], [0.2, 0.8]) == pytest.approx({"a": 0.6, "b": 0.0})


@pytest.mark.parametrize("doc, message", [
    ({"bands": []}, "at least one band"),
    ({"bands": [{"min_nnz": 5, "kernel": "csr5", "threshold": 0}]}, "start at 0"),
    ({"bands": [{"min_nnz": 0, "kernel": "csr5", "threshold": -1}]}, ">= 0"),
    ({"bands": [{"min_nnz": 0, "kernel": "nope", "threshold": 0}]}, "known kernel"),
    ({"bands": [{"min_nnz": 0, "kernel": "csr5", "threshold": "x"}]}, "number or null"),
    ({"bands": [{"min_nnz": 0, "kernel": "csr5", "threshold": 0},
                {"min_nnz": 0, "kernel": "coo", "threshold": 0}]}, "increasing"),
    ({"bands": [{"min_nnz": True, "kernel": "csr5", "threshold": 0}]}, "integer"),
    ([], "'bands' list"),
])
def test_malformed_defaults_are_refused(doc, message):
    with pytest.raises(ValueError, match=message):
        DefaultPolicy.from_dict(doc, autospmv.KERNELS)


def _shipped_doc() -> dict:
    path = sorted(MODELS.glob("cuda-*-float64.json"))[0]
    return json.loads(path.read_text(encoding="utf-8"))


def test_model_files_carry_the_policy_from_schema_3(tmp_path):
    shipped = _shipped_doc()
    assert shipped["schema_version"] >= 3
    doc = dict(shipped, defaults=_policy().to_dict())
    model = TreeModel.from_dict(doc)
    assert model.schema_version == shipped["schema_version"]
    assert model.defaults.bands == _policy().bands
    again = TreeModel.from_dict(json.loads(model.to_json()))
    assert again.defaults.to_dict() == _policy().to_dict()
    assert again.to_dict()["defaults"]["bands"][1]["threshold"] is None
    # a file of schema 2 (whose cost model, if any, schema 2 allows) cannot carry defaults
    with pytest.raises(ValueError, match="defaults need schema_version 3"):
        TreeModel.from_dict(dict(doc, schema_version=2, cost_model=None))


def test_prepare_uses_the_default_and_explains_it():
    doc = dict(_shipped_doc(),
               defaults={"bands": [{"min_nnz": 0, "kernel": "coo", "threshold": None}]})
    model = TreeModel.from_dict(doc)
    A = sp.random(300, 300, density=0.02, format="csr", random_state=1)
    op = autospmv.prepare(A, device="cpu", model=model)
    assert op.kernel == "coo"
    assert "the default coo for" in op.explain() and "stood" in op.explain()
    x = np.random.default_rng(0).standard_normal(300)
    np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12, atol=1e-12)


# -- calibration ------------------------------------------------------------------------------


def _kinds(tree_helps: bool, n_per_kind: int = 8, seed: int = 0) -> list[dict]:
    """Six kinds of real matrices. csr5 is a good default everywhere (within 5 %); where
    ``tree_helps`` a visible feature (row_max ≤ 16) marks matrices on which csr_scalar is twice
    as fast, in every kind alike, so that a tree trained without a kind still finds it;
    otherwise the fastest kernel other than csr5 is random noise no feature predicts."""
    rng = np.random.default_rng(seed)
    records = []
    for kind in ("k1", "k2", "k3", "k4", "k5", "k6"):
        for i in range(n_per_kind):
            short = bool(rng.random() < 0.5)
            row_max = float(rng.choice([4, 8, 12])) if short else float(rng.choice([64, 900]))
            if tree_helps:
                scalar = 5.0 if short else 20.0
            else:
                scalar = float(rng.choice([9.5, 30.0]))
            times = {"csr5": 10.0, "csr_scalar": scalar, "coo": 12.0, "csr_vector": 10.5,
                     "ell": 30.0, "hyb": 11.0, "jds": 25.0}
            records.append(_record(f"{kind}m{i}", kind, f"/data/{kind}m{i}.npz", times,
                                   row_max=row_max, nnz=2e7, row_cv=float(rng.uniform(0, 2))))
    return records


@pytest.mark.parametrize("tree_helps", [True, False])
def test_calibration_lets_the_tree_override_only_where_it_pays_out_of_kind(tree_helps):
    ds, _ = dataset(_kinds(tree_helps), "b2b")
    hyper = Hyper(2, 2, "none", "correction")
    ranking, scores = defaults.out_of_kind(ds, hyper)
    policy, table = defaults.calibrate(ds, ranking, scores, bands=(0,))
    (band,) = policy.bands
    assert band.kernel == "csr5"
    chosen = defaults.policy_choices(ds, np.arange(len(ds)), ranking, scores, policy)
    q = selection_metrics(ds.times, chosen)["geomean"]
    default_q = table[0]["default_metrics"]["geomean"]
    if tree_helps:
        assert math.isfinite(band.threshold) and q > default_q * 1.2
    else:
        assert math.isinf(band.threshold) and q == pytest.approx(default_q)
    assert not defaults.overrides_lose(table)


def test_losing_overrides_are_named():
    table = [{"low": 0, "gain": -0.01}, {"low": 10, "gain": 0.02}]
    assert defaults.overrides_lose(table) == ["0+ nonzeros: gain -0.0100"]


def test_bases_group_a_file_with_its_grown_copies():
    assert defaults.base_names(["bcsstk16", "bcsstk16-x40", "bcsstk16-p7", "random-mean8-1e6"]
                               ).tolist() == ["bcsstk16", "bcsstk16", "bcsstk16",
                                              "random-mean8-1e6"]


def test_training_exports_the_policy_and_reports_it():
    result = train.train(_kinds(True, n_per_kind=6), n_splits=3, repeats=1)
    assert result.model.defaults is not None and result.model.schema_version == 3
    assert "## Default kernels and the tree's overrides" in result.report
    assert result.model.provenance["defaults_out_of_kind"][0]["kernel"] == "csr5"


def test_every_shipped_gpu_model_carries_its_defaults_and_its_card_the_out_of_kind_figures():
    folder = Path(__file__).resolve().parent.parent / "models"
    paths = sorted(folder.glob("cuda-*.json"))
    assert len(paths) >= 4
    for path in paths:
        model = TreeModel.load(path)
        assert model.defaults is not None and model.schema_version >= 3, path.name
        card = path.with_suffix(".md").read_text(encoding="utf-8")
        assert "## Default kernels and the tree's overrides, leave one kind out" in card, path.name
        assert "| nonzeros | n | bases | default |" in card, path.name
