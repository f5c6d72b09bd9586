"""TreeModel: exact agreement with scikit-learn, JSON round trips, and every validation error."""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier, export_text

from autospmv import KERNELS
from autospmv._decide.model.tree import TreeModel
from autospmv._decide.model import lookup
from autospmv._decide.model.store import device_slug, slugify, user_model_path

NAMES = ["row_max", "row_cv", "nnz", "density", "ell_fill", "block2_share"]
KNOWN = {"known_features": NAMES + ["unused_feature"]}


def _data(seed: int, n: int = 400):
    rng = np.random.default_rng(seed)
    X = np.column_stack([
        rng.integers(1, 2000, n).astype(float),  # integer-valued: many exact ties
        rng.gamma(2.0, 0.5, n),
        10 ** rng.uniform(3, 8, n),
        10 ** rng.uniform(-7, -1, n),
        1 + rng.exponential(3.0, n),
        rng.uniform(0, 1, n).round(2),
    ])  # fmt: skip
    score = np.log10(X[:, 0]) + X[:, 1] - X[:, 4] / 4 + rng.normal(0, 0.3, n)
    y = np.array(KERNELS)[np.digitize(score, [0.0, 1.0, 2.0, 3.0])]
    return X, y


@pytest.fixture(scope="module", params=[False, True], ids=["unweighted", "weighted"])
def fitted(request):
    X, y = _data(0)
    weights = np.random.default_rng(1).uniform(0.5, 20, len(y)) if request.param else None
    clf = DecisionTreeClassifier(max_depth=7, random_state=0).fit(X, y, sample_weight=weights)
    return clf, TreeModel.from_sklearn(clf, NAMES, {"device": "test"}, **KNOWN)


def _probes(model: TreeModel, seed: int) -> np.ndarray:
    """Random rows, with every threshold and its float32/float64 neighbours planted in them."""
    X, _ = _data(seed, 300)
    rows = []
    for node in np.flatnonzero(model.children_left != -1):
        t32 = model.threshold[node]
        up, down = np.float32(np.inf), np.float32(-np.inf)
        for v in (t32, np.nextafter(t32, up), np.nextafter(t32, down),
                  np.nextafter(np.float64(t32), np.inf), np.nextafter(np.float64(t32), -np.inf),
                  np.float64(t32) + 0.49 * float(np.spacing(t32)),
                  np.float64(t32) + 0.51 * float(np.spacing(t32))):
            row = X[len(rows) % len(X)].copy()
            row[model.feature[node]] = float(v)
            rows.append(row)
    return np.vstack([X, np.array(rows)])


def _as_dicts(X):
    return [dict(zip(NAMES, row.tolist())) for row in X]


def test_predictions_equal_sklearn_including_values_at_thresholds(fitted):
    clf, model = fitted
    X = _probes(model, 5)
    np.testing.assert_array_equal(model.apply(X), clf.apply(X.astype(np.float32)))
    expected = clf.predict(X)
    assert [model.predict(f) for f in _as_dicts(X)] == expected.tolist()
    proba = np.array([list(model.predict_proba(f).values()) for f in _as_dicts(X[:50])])
    np.testing.assert_allclose(proba, clf.predict_proba(X[:50]), rtol=1e-15, atol=0)


def test_json_round_trip_is_exact(fitted, tmp_path):
    clf, model = fitted
    path = tmp_path / "model.json"
    model.to_json(path)
    doc = json.loads(path.read_text())
    internal = np.array(doc["tree"]["children_left"]) != -1
    thresholds = np.array(doc["tree"]["threshold"])[internal]
    np.testing.assert_array_equal(thresholds.astype(np.float32).astype(np.float64), thresholds)
    X = _probes(model, 6)
    for source in (path, str(path), io.StringIO(path.read_text()), io.BytesIO(path.read_bytes())):
        loaded = TreeModel.load(source, **KNOWN)
        assert [loaded.predict(f) for f in _as_dicts(X)] == clf.predict(X).tolist()
        assert loaded.provenance == {"device": "test"}
    assert TreeModel.load(path, **KNOWN).to_json() == model.to_json()


def _with_stored_thresholds(clf, model):
    """A copy of clf whose thresholds are the model's float32 ones (printed by export_text)."""
    clone = copy.deepcopy(clf)
    internal = model.children_left != -1
    clone.tree_.threshold[internal] = model.threshold[internal]
    return clone


def test_float32_thresholds_change_no_prediction(fitted):
    clf, model = fitted
    X = _probes(model, 8)
    np.testing.assert_array_equal(_with_stored_thresholds(clf, model).predict(X), clf.predict(X))


def test_export_text_matches_sklearn(fitted):
    clf, model = fitted
    clone = _with_stored_thresholds(clf, model)
    assert model.export_text() == export_text(clone, feature_names=NAMES)
    assert model.export_text(max_depth=2, decimals=3) == export_text(
        clone, feature_names=NAMES, max_depth=2, decimals=3)
    assert model.export_text(show_weights=True) == export_text(
        clone, feature_names=NAMES, show_weights=True)


def test_decision_path_leaf_and_ranking(fitted):
    clf, model = fitted
    X = _probes(model, 7)[::7]
    paths = clf.decision_path(X.astype(np.float32))
    for i, features in enumerate(_as_dicts(X)):
        nodes = paths.indices[paths.indptr[i]:paths.indptr[i + 1]]
        steps = model.decision_path(features)
        assert len(steps) == len(nodes) - 1
        for node, child, step in zip(nodes, nodes[1:], steps):
            assert step.feature == NAMES[clf.tree_.feature[node]]
            assert step.went_left == (child == clf.tree_.children_left[node])
            assert step.went_left == (np.float32(step.value) <= np.float32(step.threshold))
        leaf = model.leaf(features)
        assert leaf.node == nodes[-1]
        assert leaf.samples == clf.tree_.n_node_samples[nodes[-1]]
        ranked = model.ranked(features)
        assert ranked[0] == model.predict(features) and sorted(ranked) == sorted(model.classes)
        assert [leaf.proba[c] for c in ranked] == sorted(leaf.proba.values(), reverse=True)


def test_extra_feature_keys_are_ignored(fitted):
    _, model = fitted
    features = dict(_as_dicts(_data(3, 1)[0])[0], unused_feature=1.0)
    assert model.predict(features) in model.classes


def test_export_text_truncates_like_sklearn():
    X, y = _data(2)
    clf = DecisionTreeClassifier(random_state=0).fit(X, y)
    model = TreeModel.from_sklearn(clf, NAMES, **KNOWN)
    text = model.export_text(max_depth=1)
    assert "truncated branch" in text
    assert text == export_text(_with_stored_thresholds(clf, model), feature_names=NAMES,
                               max_depth=1)


# -- validation -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def doc():
    X, y = _data(0)
    clf = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y)
    return TreeModel.from_sklearn(clf, NAMES, **KNOWN).to_dict()


def _damaged(doc, change):
    bad = copy.deepcopy(doc)
    change(bad)
    return bad


def _set_tree(key, value):
    return lambda d: d["tree"].__setitem__(key, value)


def _set_node(key, node, value):
    return lambda d: d["tree"][key].__setitem__(node, value)


def _leaf_value_len(d):
    d["tree"]["value"][1] = d["tree"]["value"][1][:-1]


INVALID = [
    (lambda d: d.__setitem__("format", "sklearn-pickle"), "not an autospmv tree model"),
    (lambda d: d.__setitem__("schema_version", 8), "unsupported schema_version 8"),
    (lambda d: d.__setitem__("spmm_rule", {"choices": [{"columns": 16, "threshold": None,
                                                        "below": "column_pairs",
                                                        "above": "column_pairs"}]}),
     "the model's spmm_rule needs schema_version 7"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": []}),
     "an SpMM rule needs at least one choice"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": [{
        "columns": 16, "threshold": None, "below": "column_pairs", "above": "warp_magic"}]}),
     "unknown program 'warp_magic'"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": [{
        "columns": 16, "threshold": 4.0, "below": "passes", "above": "column_pairs"}]}),
     "names passes for 16 columns; it runs at most 8"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": [{
        "columns": 16, "threshold": None, "below": "many_columns@tiled",
        "above": "many_columns"}]}), "unknown program 'many_columns@tiled'"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": [
        {"columns": 16, "threshold": None, "below": "column_pairs", "above": "column_pairs"},
        {"columns": 8, "threshold": None, "below": "column_pairs", "above": "column_pairs"}]}),
     "column counts must ascend"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": [{"columns": 16}]}),
     "an SpMM choice has the entries"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": [{
        "columns": 16.0, "threshold": None, "below": "column_pairs", "above": "column_pairs"}]}),
     "columns must be a whole number of at least 5"),
    (lambda d: d.update(schema_version=7, spmm_rule={"choices": [{
        "columns": 16, "threshold": -1.0, "below": "column_pairs",
        "above": "column_pairs"}]}), "threshold must be a non-negative number or null"),
    (lambda d: d.pop("classes"), "the model has no 'classes' entry"),
    (lambda d: d.__setitem__("order_rule", {"bytes_per_second": 1e12, "latency_seconds": 5e-6}),
     "the model's order_rule needs schema_version 6"),
    (lambda d: d.update(schema_version=6, order_rule={"bytes_per_second": 0,
                                                      "latency_seconds": 5e-6}),
     "the order rule's bytes_per_second must be finite and positive"),
    (lambda d: d.update(schema_version=6, order_rule={"latency_seconds": 5e-6}),
     "the order rule has no 'bytes_per_second'"),
    (lambda d: d.update(schema_version=6, order_rule={"bytes_per_second": 1e12,
                                                      "latency_seconds": 5e-6, "speed": 1}),
     "the order rule has unknown entries: speed"),
    (lambda d: d.update(schema_version=6, order_rule=[1]), "the order rule must be a JSON object"),
    (lambda d: d.__setitem__("feature_names", "row_max"), "feature_names must be a non-empty"),
    (lambda d: d.__setitem__("feature_names", []), "feature_names must be a non-empty"),
    (lambda d: d["feature_names"].__setitem__(1, "row_max"), "feature_names contains duplicates"),
    (lambda d: d["feature_names"].__setitem__(1, "bogus"), "unknown feature names: bogus"),
    (lambda d: d["classes"].__setitem__(0, "bsr"), "unknown kernel names in classes: bsr"),
    (lambda d: d.__setitem__("provenance", [1]), "provenance must be a JSON object"),
    (lambda d: d.__setitem__("tree", [1, 2]), "'tree' must be a JSON object"),
    (lambda d: d["tree"].pop("threshold"), "the tree has no threshold array"),
    (_set_tree("feature", ["a", "b"]), "feature must be an array of numbers"),
    (_set_tree("threshold", 3.0), "threshold must be an array of finite numbers"),
    (lambda d: d.__setitem__("tree", {k: [] for k in d["tree"]}), "the tree has no nodes"),
    (lambda d: d["tree"]["n_node_samples"].pop(), "inconsistent lengths: children_left has 7 "
     "nodes, n_node_samples has 6"),
    (_leaf_value_len, "value must hold"),
    (_set_node("value", 2, [-1.0] * 5), "value must not be negative"),
    (_set_node("children_left", 0, 1.5), "children_left must be a list of integers"),
    (_set_node("n_node_samples", 3, 0), "node sample counts must be positive"),
    (_set_node("children_right", 2, 5), "node 2: a leaf must have both children -1"),
    (_set_node("children_left", 0, 9), "node 0: child index 9 out of range"),
    (_set_node("children_left", 1, 0), "node 1: child index 0 out of range"),
    (_set_node("feature", 0, 6), r"node 0: feature index 6 out of range \(the model has 6"),
    (_set_node("threshold", 0, 0.1), "node 0: threshold 0.1 is not a float32 value"),
    (_set_node("children_right", 0, 2), "node 2 is reached from 2 parents"),
]


@pytest.mark.parametrize("change, message", INVALID)
def test_damaged_documents_raise(doc, change, message):
    bad = _damaged(doc, change)
    with pytest.raises(ValueError, match=message):
        TreeModel.from_dict(bad, **KNOWN)
    with pytest.raises(ValueError, match=message):
        TreeModel.load(io.StringIO(json.dumps(bad)), **KNOWN)


def test_non_finite_numbers_are_refused(doc):
    bad = _damaged(doc, _set_node("threshold", 0, float("nan")))
    with pytest.raises(ValueError, match="threshold must be an array of finite numbers"):
        TreeModel.from_dict(bad, **KNOWN)


def test_document_must_be_object_and_json():
    with pytest.raises(ValueError, match="must hold a JSON object; found list"):
        TreeModel.load(io.StringIO("[]"))
    with pytest.raises(ValueError, match="is not a valid JSON model file"):
        TreeModel.load(io.StringIO('{"format": "autospmv-tree",'))
    with pytest.raises(ValueError, match="NaN is not allowed in a model file"):
        TreeModel.load(io.StringIO('{"x": NaN}'))
    with pytest.raises(ValueError, match="is not a valid JSON model file"):
        TreeModel.load(io.BytesIO(b"\x80\x04\x95 pickled"))


def test_known_names_default_to_the_library(doc):
    with pytest.raises(ValueError, match="unknown kernel names in classes: bsr"):
        TreeModel.from_dict(_damaged(doc, lambda d: d["classes"].__setitem__(0, "bsr")),
                            known_features=NAMES)
    model = TreeModel.from_dict(doc, known_features=NAMES, known_kernels=KERNELS + ("bsr",))
    assert model.classes == tuple(doc["classes"])


def test_prediction_inputs_are_checked(doc):
    model = TreeModel.from_dict(doc, **KNOWN)
    features = dict.fromkeys(NAMES, 1.0)
    with pytest.raises(ValueError, match="features missing for the model: density"):
        model.predict({k: v for k, v in features.items() if k != "density"})
    with pytest.raises(ValueError, match="feature values must be finite; not finite: nnz"):
        model.predict(dict(features, nnz=float("inf")))
    with pytest.raises(ValueError, match=r"X must have shape \(k, 6\)"):
        model.apply(np.zeros((2, 5)))


def test_from_sklearn_checks_its_input():
    X, y = _data(0, 100)
    clf = DecisionTreeClassifier(max_depth=2).fit(X, y)
    with pytest.raises(ValueError, match="fitted on 6 features but 2 feature names"):
        TreeModel.from_sklearn(clf, NAMES[:2], **KNOWN)
    multi = DecisionTreeClassifier(max_depth=2).fit(X, np.column_stack([y, y]))
    with pytest.raises(ValueError, match="only single-output classifiers"):
        TreeModel.from_sklearn(multi, NAMES, **KNOWN)


# -- locations ------------------------------------------------------------------------------


def test_user_model_path_and_the_lookup_of_a_retrained_model(tmp_path, monkeypatch, doc):
    monkeypatch.delenv("AUTOSPMV_HOME", raising=False)
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert user_model_path("cpu-x") == tmp_path / "xdg" / "autospmv" / "models" / "cpu-x.json"
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "home"))
    path = user_model_path("cuda-nvidia-h100")
    assert path == tmp_path / "home" / "models" / "cuda-nvidia-h100.json"
    monkeypatch.setattr(lookup, "device_slug", lambda device: "cuda-nvidia-h100")
    monkeypatch.setattr(lookup, "shipped_models", lambda: {})
    assert lookup.find_model("cuda") is None
    path.parent.mkdir(parents=True)
    TreeModel.from_dict(doc, **KNOWN).to_json(path)
    choice = lookup.find_model("cuda")  # a name without a dtype is a float64 model
    assert choice.path == path and choice.retrained


def test_slugs():
    assert slugify("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert slugify("Intel(R) Xeon(R) Processor @ 2.10GHz") == "intel-r-xeon-r-processor-2-10ghz"
    assert device_slug("cpu").startswith("cpu-")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        device_slug("gpu")


def test_cuda_slug_without_a_gpu(monkeypatch):
    import autospmv._support.devices

    monkeypatch.setattr(autospmv._support.devices, "cuda_available", lambda: False)
    assert device_slug("cuda") == "cuda-no-gpu"


# -- cost models ------------------------------------------------------------------------------


def _one_leaf_correction(cost):
    """A coo/csr5 model of one leaf correcting nothing over the cost model ``cost``."""
    tree = {"children_left": [-1], "children_right": [-1], "feature": [-2], "threshold": [-2.0],
            "value": [[0.0, 0.0]], "n_node_samples": [3], "weighted_n_node_samples": [3.0]}
    return TreeModel(["nnz", "est_csr5"], ["coo", "csr5"], tree, ranking="correction",
                     cost_model=cost)


def _cost_model(**coefficients):
    from autospmv._decide.model.tree import CostModel

    return CostModel(coefficients)


def test_cost_model_estimates_and_relative_values_by_hand():
    # coo: 10 µs + 0.5 µs per span step + 2 µs per x sector; csr5: 12 µs + 1 µs per 1000
    # bytes + 1 µs per launch + 0.25 µs per nonzero and unit of row length (of at most 32).
    cost = _cost_model(coo=[10, 0, 0, 2, 0, 0, 0, 0.5, 0, 0],
                       csr5=[12, 0, 0, 0, 0.25, 1e-3, 0, 0, 0, 1.0])
    features = {"rows": 5.0, "nnz": 9.0, "x_sectors_per_nnz_warp": 0.5, "row_mean": 1.8,
                "coo_bytes": 0.0, "coo_work": 0.0, "coo_span": 4.0,
                "coo_atomics": 0.0, "coo_launches": 2.0, "csr5_bytes": 4000.0, "csr5_work": 0.0,
                "csr5_span": 0.0, "csr5_atomics": 0.0, "csr5_launches": 2.0}
    # coo: 10 + 0.5·4 + 2·(9·0.5) = 21; csr5: 12 + 4 + 2 + 0.25·(9·1.8) = 22.05.
    assert cost.estimates(features) == {"coo": 21.0, "csr5": pytest.approx(22.05)}
    assert cost.derived(features) == {"est_coo": 0.0,
                                      "est_csr5": pytest.approx(np.log2(22.05 / 21))}
    assert cost.regressor_names("coo") == ["1", "rows", "nnz", "x_sectors", "row_length",
                                           "coo_bytes", "coo_work", "coo_span", "coo_atomics",
                                           "coo_launches"]
    assert {"x_sectors_per_nnz_warp", "row_mean"} <= set(cost.input_names())
    # row_length stops growing at a mean row length of 32.
    long_rows = dict(features, row_mean=100.0)
    assert cost.estimates(long_rows)["csr5"] == pytest.approx(18 + 0.25 * 9 * 32)
    for missing in ("coo_atomics", "x_sectors_per_nnz_warp", "row_mean"):
        with pytest.raises(ValueError, match=f"features missing for the cost model: {missing}"):
            cost.estimates({k: v for k, v in features.items() if k != missing})
    # All-zero coefficients still give a finite logarithm.
    assert _cost_model(coo=[0] * 10).estimates(features)["coo"] == pytest.approx(1e-3)


def test_cost_model_without_the_launch_regressor_is_refused():
    from autospmv._decide.model.cost_model import CostModel

    old = {"regressors": ["1", "rows", "nnz", "bytes", "work", "span", "atomics"],
           "coefficients": {"coo": [10, 0, 0, 0, 0, 0.5, 0]}}
    with pytest.raises(ValueError, match="cost_model regressors must be"):
        CostModel.from_dict(old)


def test_cost_model_fitted_without_x_sectors_reads_as_a_zero_coefficient():
    from autospmv._decide.model.cost_model import CostModel

    old = {"regressors": ["1", "rows", "nnz", "bytes", "work", "span", "atomics", "launches"],
           "coefficients": {"coo": [10, 0, 0, 0, 0, 0.5, 0, 0]},
           "large_nnz": 1000, "large_coefficients": {"coo": [3, 0, 0, 0, 0, 0.5, 0, 0]}}
    cost = CostModel.from_dict(old)
    assert cost.coefficients.tolist() == [[10, 0, 0, 0, 0, 0, 0, 0.5, 0, 0]]
    assert cost.large_coefficients.tolist() == [[3, 0, 0, 0, 0, 0, 0, 0.5, 0, 0]]
    assert CostModel.from_dict(cost.to_dict()).coefficients.tolist() == \
        cost.coefficients.tolist()


def test_cost_model_fitted_without_row_length_reads_as_a_zero_coefficient():
    from autospmv._decide.model.cost_model import CostModel

    old = {"regressors": ["1", "rows", "nnz", "x_sectors", "bytes", "work", "span", "atomics",
                          "launches"],
           "coefficients": {"coo": [10, 0, 0, 2, 0, 0, 0.5, 0, 0]},
           "regimes": [{"from_nnz": 1000, "coefficients": {"coo": [3, 0, 0, 1, 0, 0, 0, 0, 0]}}]}
    cost = CostModel.from_dict(old)
    assert cost.coefficients.tolist() == [[10, 0, 0, 2, 0, 0, 0, 0.5, 0, 0]]
    assert cost.regimes[0][1].tolist() == [[3, 0, 0, 1, 0, 0, 0, 0, 0, 0]]
    assert not cost.uses("row_length") and cost.uses("x_sectors")
    # Regressors out of order, or one missing that every file has, are refused.
    for regressors in (["1", "nnz", "rows", "x_sectors", "bytes", "work", "span", "atomics",
                        "launches"],
                       ["1", "rows", "nnz", "x_sectors", "row_length", "bytes", "work", "span",
                        "atomics"]):
        with pytest.raises(ValueError, match="cost_model regressors must be"):
            CostModel.from_dict(dict(old, regressors=regressors))


@pytest.mark.parametrize("coefficients, message", [
    ({}, "non-empty object"),
    ({"gemm": [1] * 10}, "unknown kernel names in the cost model: gemm"),
    ({"coo": [1] * 6}, "must be 10 non-negative numbers"),
    ({"coo": [1, -1, 0, 0, 0, 0, 0, 0, 0, 0]}, "must be 10 non-negative numbers"),
    ({"coo": [1, float("nan"), 0, 0, 0, 0, 0, 0, 0]}, "finite numbers"),
])
def test_cost_model_rejects_bad_coefficients(coefficients, message):
    with pytest.raises(ValueError, match=message):
        _cost_model(**coefficients)


def test_correction_ranking_needs_a_cost_model_and_round_trips():
    from autospmv._decide.model.tree import CostModel

    tree = {"children_left": [-1], "children_right": [-1], "feature": [-2], "threshold": [-2.0],
            "value": [[0.0, -1.0]], "n_node_samples": [3], "weighted_n_node_samples": [3.0]}
    with pytest.raises(ValueError, match="a correction ranking needs a cost_model"):
        TreeModel(["rows"], ["coo", "csr5"], tree, ranking="correction")
    with pytest.raises(ValueError, match="value must not be negative"):
        TreeModel(["rows"], ["coo", "csr5"], tree)
    with pytest.raises(ValueError, match="unknown ranking 'best'"):
        TreeModel(["rows"], ["coo", "csr5"], tree, ranking="best")
    cost = CostModel({"coo": [12] + [0] * 9, "csr5": [16] + [0] * 9})
    model = TreeModel(["rows", "est_csr5"], ["coo", "csr5"], tree, cost_model=cost,
                      ranking="correction")
    features = {name: 0.0 for k in ("coo", "csr5") for name in cost.feature_names_of(k)}
    # log2 16 − 1 = 3 < log2 12: the leaf's correction halves csr5's estimate and it wins.
    assert model.ranked(features) == ["csr5", "coo"]
    assert model.predict(features) == "csr5"
    doc = json.loads(model.to_json())
    assert doc["ranking"] == "correction" and doc["cost_model"]["coefficients"]["coo"][0] == 12
    again = TreeModel.from_dict(doc)
    assert again.ranked(features) == ["csr5", "coo"] and again.to_dict() == model.to_dict()
    assert model.export_text() == "|--- corrections: coo +0.00, csr5 -1.00\n"
    doc["cost_model"]["regressors"] = ["1"]
    with pytest.raises(ValueError, match="cost_model regressors must be"):
        TreeModel.from_dict(doc)


def test_cost_model_of_two_size_regimes_by_hand_and_schema_2():
    from autospmv._decide.model.tree import CostModel

    # Below 1000 nonzeros coo costs 10 µs and csr5 12 µs; from 1000 on, coo 20 µs and csr5 15.
    cost = CostModel({"coo": [10] + [0] * 9, "csr5": [12] + [0] * 9},
                     large_coefficients={"coo": [20] + [0] * 9,
                                         "csr5": [15] + [0] * 9}, large_nnz=1000)
    features = {name: 0.0 for k in ("coo", "csr5") for name in cost.feature_names_of(k)}
    assert cost.estimates(dict(features, nnz=999)) == {"coo": 10.0, "csr5": 12.0}
    assert cost.estimates(dict(features, nnz=1000)) == {"coo": 20.0, "csr5": 15.0}
    assert cost.is_large([999, 1000]).tolist() == [False, True]
    names = sorted(features)
    X = np.array([[999.0 if n == "nnz" else 0.0 for n in names],
                  [5000.0 if n == "nnz" else 0.0 for n in names]])
    np.testing.assert_array_equal(cost.times(X, names), [[10, 12], [20, 15]])
    model = _one_leaf_correction(cost)
    assert model.ranked(dict(features, nnz=10)) == ["coo", "csr5"]
    assert model.ranked(dict(features, nnz=10**6)) == ["csr5", "coo"]
    doc = json.loads(model.to_json())
    assert doc["schema_version"] == 2 and doc["cost_model"]["large_nnz"] == 1000
    assert TreeModel.from_dict(doc).to_dict() == model.to_dict()
    # Version 1 cannot hold the second table; a model without one is still written as 1.
    with pytest.raises(ValueError, match="large_coefficients need schema_version 2"):
        TreeModel.from_dict(dict(doc, schema_version=1))
    single = _one_leaf_correction(CostModel({"coo": [10] + [0] * 9, "csr5": [12] + [0] * 9}))
    assert json.loads(single.to_json())["schema_version"] == 1


def test_cost_model_with_three_size_regimes_round_trips_and_says_which_table():
    from autospmv._decide.model.cost_model import CostModel
    from autospmv._decide.selection import _regime_words

    table = lambda c: {"coo": [c] + [0] * 9, "csr5": [c + 1] + [0] * 9}  # noqa: E731
    cost = CostModel(table(10), regimes=[(1000, table(20)), (10_000, table(30))])
    names = cost.input_names()
    X = np.array([[nnz if n == "nnz" else 0.0 for n in names] for nnz in (999, 1000, 10_000)])
    np.testing.assert_array_equal(cost.times(X, names), [[10, 11], [20, 21], [30, 31]])
    assert cost.is_large([999, 1000, 10_000]).tolist() == [False, True, True]
    doc = cost.to_dict()
    assert "large_nnz" not in doc and [r["from_nnz"] for r in doc["regimes"]] == [1000, 10_000]
    again = CostModel.from_dict(json.loads(json.dumps(doc)))
    np.testing.assert_array_equal(again.times(X, names), cost.times(X, names))
    assert _regime_words(cost, 999) == "; its coefficients for matrices of fewer than 1,000 nonzeros"
    assert _regime_words(cost, 5000) == ("; its coefficients for matrices of 1,000 to fewer than "
                                         "10,000 nonzeros")
    assert _regime_words(cost, 10_000) == "; its coefficients for matrices of at least 10,000 nonzeros"
    with pytest.raises(ValueError, match="regimes must start at increasing nonzeros"):
        CostModel(table(10), regimes=[(1000, table(20)), (1000, table(30))])
    with pytest.raises(ValueError, match="has regimes and large_nnz"):
        CostModel.from_dict(dict(doc, large_nnz=5, large_coefficients=table(1)))
    model = _one_leaf_correction(cost)
    file_doc = json.loads(model.to_json())
    assert file_doc["schema_version"] == 4
    file_doc["schema_version"] = 3
    with pytest.raises(ValueError, match="x_sectors and regimes need schema_version 4"):
        TreeModel.from_dict(file_doc)


def test_cost_model_reading_row_length_needs_schema_version_5():
    from autospmv._decide.model.cost_model import CostModel

    at = CostModel.REGRESSORS.index("row_length")
    row = [10.0] + [0.0] * 9
    row[at] = 1e-3
    cost = CostModel({"coo": row, "csr5": [12.0] + [0.0] * 9})
    model = _one_leaf_correction(cost)
    file_doc = json.loads(model.to_json())
    assert file_doc["schema_version"] == 5
    assert TreeModel.from_dict(file_doc).cost_model.uses("row_length")
    file_doc["schema_version"] = 4
    with pytest.raises(ValueError, match="row_length needs schema_version 5"):
        TreeModel.from_dict(file_doc)


@pytest.mark.parametrize("large, message", [
    ({"large_nnz": 1000}, "large_coefficients and large_nnz go together"),
    ({"large_coefficients": {"coo": [1] * 10}}, "large_coefficients and large_nnz go together"),
    ({"large_coefficients": {"coo": [1] * 10}, "large_nnz": 0}, "large_nnz must be a positive"),
    ({"large_coefficients": {"coo": [1] * 10}, "large_nnz": True}, "large_nnz must be a positive"),
    ({"large_coefficients": {"csr5": [1] * 10}, "large_nnz": 10}, "must name the same kernels"),
    ({"large_coefficients": {"coo": [-1] * 10}, "large_nnz": 10},
     "large_coefficients of coo must be 10 non-negative"),
])
def test_cost_model_rejects_a_bad_second_regime(large, message):
    from autospmv._decide.model.tree import CostModel

    with pytest.raises(ValueError, match=message):
        CostModel({"coo": [1] * 10}, **large)


def test_only_the_features_read_are_required_when_asked(doc):
    model = TreeModel.from_dict(doc, **KNOWN)
    read = model.features_read()
    compared = {NAMES[i] for i in doc["tree"]["feature"] if i >= 0}
    assert read == compared and read < set(NAMES)  # no cost model: the tree's splits
    features = dict(zip(NAMES, _data(1, 1)[0][0]))
    partial = {k: v for k, v in features.items() if k in read}
    lazy, full = model.evaluate(partial, only_read=True), model.evaluate(features)
    assert (lazy.ranked, lazy.path, lazy.leaf) == (full.ranked, full.path, full.leaf)
    with pytest.raises(ValueError, match="features missing for the model"):
        model.evaluate(partial)
    missing = sorted(read)[0]
    with pytest.raises(ValueError, match=f"features missing for the model: {missing}"):
        model.evaluate({k: v for k, v in partial.items() if k != missing}, only_read=True)
    with pytest.raises(ValueError, match=f"not finite: {missing}"):
        model.evaluate(dict(partial, **{missing: float("nan")}), only_read=True)


def test_an_order_rule_round_trips_in_schema_version_6(fitted):
    from autospmv._decide.model.order_rule import OrderRule

    _, model = fitted
    rule = OrderRule(bytes_per_second=2.5e12, latency_seconds=4e-6,
                     permutation_bytes_per_second=1.5e12, labels=84)
    with_rule = TreeModel.from_dict({**model.to_dict(), "schema_version": 6,
                                     "order_rule": rule.to_dict()}, **KNOWN)
    doc = json.loads(with_rule.to_json())
    assert doc["schema_version"] == 6 and doc["order_rule"]["labels"] == 84
    assert TreeModel.from_dict(doc, **KNOWN).order_rule == rule
    assert "order_rule" not in model.to_dict() and model.schema_version < 6
    assert "fitted to 84 labelled products" in rule.describe()


def test_an_spmm_rule_round_trips_in_schema_version_7(fitted):
    from autospmv._decide.model.spmm_rule import SpmmChoice, SpmmRule

    _, model = fitted
    rule = SpmmRule((SpmmChoice(8, 30.0, "column_pairs", "column_pairs_wide_step"),
                     SpmmChoice(64, None, "column_quads@tiled", "column_quads@tiled")), labels=64)
    with_rule = TreeModel.from_dict({**model.to_dict(), "schema_version": 7,
                                     "spmm_rule": rule.to_dict()}, **KNOWN)
    doc = json.loads(with_rule.to_json())
    assert doc["schema_version"] == 7 and doc["spmm_rule"]["labels"] == 64
    assert TreeModel.from_dict(doc, **KNOWN).spmm_rule == rule
    assert "spmm_rule" not in model.to_dict() and model.schema_version < 7
    assert rule.describe() == "the SpMM rule fitted to 64 labelled products"
    # the band of the fewest labelled columns at least k; the last band beyond them
    assert rule.program_for(4, 10.0) is None  # the few-columns kernel serves k <= 4
    assert rule.program_for(6, 10.0) == ("column_pairs", False)
    assert rule.program_for(8, 30.0) == ("column_pairs_wide_step", False)
    assert rule.program_for(9, 10.0) == ("column_quads", True)
    assert rule.program_for(500, 10.0) == ("column_quads", True)
