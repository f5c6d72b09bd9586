"""Kernel decisions: snapshots of the shipped trees, user models, model lookup, guardrails.

The snapshots are plain text files in ``tests/golden/``: the shipped tree's ``export_text()``
and, for a handful of representative matrices, the decision line and the path through the tree
that ``explain()`` prints. A retrained model changes them on purpose; regenerate them with::

    AUTOSPMV_UPDATE_GOLDEN=1 python -m pytest tests/test_decisions.py

and review the diff like any other change. No test here needs a GPU: ``select(device="cuda")``
decides for a GPU without one.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.tree import DecisionTreeClassifier

import autospmv
from autospmv._decide.model import lookup
from autospmv._decide import selection as selector
from autospmv._decide.model.tree import TreeModel
from autospmv._decide.model.store import user_model_path
from matrices import FAMILY, REPRESENTATIVE, one_long_row, poisson2d

REPO = Path(__file__).resolve().parent.parent
GPU_MODEL = REPO / "models" / "cuda-nvidia-h200-float64.json"
SHIPPED = sorted((REPO / "models").glob("*.json"))
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN = os.environ.get("AUTOSPMV_UPDATE_GOLDEN") == "1"


@pytest.fixture(autouse=True)
def isolated_lookup(monkeypatch, tmp_path):
    """No AUTOSPMV_MODEL and an empty per-user folder: only what a test sets up is found."""
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "autospmv-home"))


def check_golden(name: str, actual: str) -> None:
    """Compare ``actual`` with ``tests/golden/<name>`` (rewrite it under AUTOSPMV_UPDATE_GOLDEN)."""
    path = GOLDEN / name
    if UPDATE_GOLDEN:
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            f"golden/{name}", "now"))
        pytest.fail(f"{name} no longer matches the snapshot. If the change is intended (the "
                    "model was retrained), regenerate with AUTOSPMV_UPDATE_GOLDEN=1 python -m "
                    f"pytest tests/test_decisions.py and commit the new file.\n{diff}")


# -- the shipped GPU model ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_h200_models_are_shipped_and_valid(dtype):
    stem = f"cuda-nvidia-h200-{dtype}"
    path = lookup.shipped_models()[stem]
    model = TreeModel.load(path)
    assert set(model.classes) == set(autospmv.KERNELS)
    provenance = model.provenance
    assert provenance["device"]["name"] == "NVIDIA H200"
    assert provenance["dtype"] == dtype
    assert provenance["labels"][0]["file"] == f"{stem}.jsonl.gz"
    assert (provenance["timing_mode"], provenance["large_nnz"]) == ("auto", 1_000_000)


@pytest.mark.slow
@pytest.mark.parametrize("model", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_model_passes_the_install_guard_on_its_labels(model):
    """The test `retrain` applies before installing (autospmv.training.train.cross_validate):
    cross-validated on the committed labels, in the model's timing mode, the tree beats every
    fixed kernel and its overrides do not lose to the default kernels out of kind."""
    from autospmv.training import train
    from autospmv.training.records import read_records

    provenance = TreeModel.load(model).provenance
    labels = REPO / "models" / "labels" / provenance["labels"][0]["file"]
    verdict = train.install_verdict(read_records(labels), mode=provenance["timing_mode"])
    assert verdict["passed"], f"{model.name}: {verdict['reason']}"


@pytest.mark.parametrize("model", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_tree_snapshot(model):
    check_golden(f"{model.stem}.txt", TreeModel.load(model).export_text())


@pytest.mark.parametrize("model", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_decisions_snapshot(model):
    blocks = []
    for name, make in REPRESENTATIVE.items():
        A = make()
        device = "cuda" if model.stem.startswith("cuda-") else "cpu"
        decision = autospmv.select(A, device=device, model=model)
        kernel_line, path_line = decision.explain().splitlines()[:2]
        blocks.append(f"{name}: {A.shape[0]}×{A.shape[1]}, {A.nnz:,} nonzeros\n"
                      f"{kernel_line}\n{path_line}\n")
    decisions = "\n".join(blocks)
    check_golden(f"{model.stem}-decisions.txt", decisions)
    kernels = {line.split()[1] for line in decisions.splitlines() if line.startswith("kernel ")}
    # On two CPU cores csr_scalar wins almost everywhere (models/README.md); on the GPU the
    # representative matrices (all but one below 10⁶ nonzeros, decided on per-call time) must
    # exercise several kernels: at least three, as many as are fastest on 95 % of the H200's
    # float32 labels below 10⁶ nonzeros (csr_vector 65, coo 11, hyb 10 of 91).
    assert len(kernels) >= (3 if model.stem.startswith("cuda-") else 2), kernels


def test_deciding_for_a_gpu_without_one_uses_the_nearest_gpu_model(monkeypatch):
    monkeypatch.setattr(autospmv._support.devices, "cuda_available", lambda: False)
    decision = autospmv.select(poisson2d(20), device="cuda")
    # Every shipped GPU model is equally near to "cuda-no-gpu"; the most recently trained
    # float64 one decides.
    gpu_float64 = [path for path in SHIPPED
                   if path.stem.startswith("cuda-") and path.stem.endswith("-float64")]
    assert len(gpu_float64) >= 2
    newest = max(gpu_float64, key=lambda path: TreeModel.load(path).provenance["trained"])
    assert decision.source == f"model {newest.name}"
    assert "the nearest to this device (cuda-no-gpu)" in decision.notes[0]
    explicit = autospmv.select(poisson2d(20), device="cuda", model=newest)
    assert (decision.kernel, decision.params, decision.path) == (
        explicit.kernel, explicit.params, explicit.path)


def test_gpu_decision_explains_itself():
    decision = autospmv.select(poisson2d(60), device="cuda", model=GPU_MODEL)
    assert decision.source == "model cuda-nvidia-h200-float64.json"
    assert decision.notes[0].startswith("model cuda-nvidia-h200-float64.json (passed as model=")
    leaf_note = decision.notes[1]
    assert leaf_note.startswith("the path ends in leaf ") and "training matrices" in leaf_note
    node = int(re.search(r"the path ends in leaf (\d+)", leaf_note).group(1))
    corrects = TreeModel.load(GPU_MODEL).corrects(node)
    ranks_by = "smallest corrected estimate" if corrects else "smallest estimate"
    assert f"{ranks_by} (µs, best first): {decision.kernel} " in leaf_note
    used = [step.split(" = ")[0] for step in decision.path]
    assert set(decision.features) == set(used)
    assert sorted([decision.kernel] + decision.candidates) == sorted(autospmv.KERNELS)


def test_the_leaf_note_says_whether_the_leaf_corrects_the_estimates(monkeypatch):
    """A leaf with corrections names the corrected estimates; a leaf of a regime that keeps
    the cost model's estimates (all corrections zero) says so instead."""
    model = TreeModel.load(GPU_MODEL)
    A = poisson2d(60)
    leaf_note = autospmv.select(A, device="cuda", model=model).notes[1]
    node = int(re.search(r"the path ends in leaf (\d+)", leaf_note).group(1))
    for values, says in ((np.zeros(len(model.classes)), "keeps the cost model's estimates as "
                          "they are; the tree's kernel is the one with the smallest estimate"),
                         (np.linspace(-0.5, 0.5, len(model.classes)), "corrects the cost "
                          "model's estimate of each kernel; the tree's kernel is the one with "
                          "the smallest corrected estimate")):
        value = model.value.copy()
        value[node] = values
        monkeypatch.setattr(model, "value", value)
        decision = autospmv.select(A, device="cuda", model=model)
        assert says in decision.notes[1]
        before = "before the leaf's corrections " if values.any() else ""
        assert decision.notes[2].startswith(f"cost model estimates {before}(µs")


# -- a user's own model ---------------------------------------------------------------------


def tiny_model(classes=("ell", "ell", "ell", "csr_vector", "csr_vector", "csr5"),
               row_max=(4, 8, 12, 500, 900, 5000)) -> TreeModel:
    """A tree over ``row_max`` alone, trained on fabricated features."""
    clf = DecisionTreeClassifier(random_state=0).fit(np.array(row_max, float)[:, None], classes)
    return TreeModel.from_sklearn(clf, ["row_max"], {"device": "test bench", "trained": "2000-01-01T00:00:00+00:00"})


@pytest.fixture
def tiny_path(tmp_path) -> Path:
    path = tmp_path / "tiny.json"
    tiny_model().to_json(path)
    return path


def test_user_model_given_as_a_path(tiny_path):
    op = autospmv.prepare(poisson2d(20), device="cpu", model=tiny_path)
    assert op.kernel == "ell"
    assert op.decision.source == "model tiny.json"
    assert op.decision.path == ["row_max = 5 ≤ 256"]
    assert op.decision.notes[0] == ("model tiny.json (passed as model=; trained on test bench, "
                                    "2000-01-01)")
    explained = op.explain()
    assert "chosen by model tiny.json" in explained
    assert "  row_max = 5 ≤ 256 → ell" in explained.splitlines()


def test_model_from_the_environment_wins_over_every_other(tiny_path, monkeypatch):
    slug = "cpu-test-machine"
    monkeypatch.setattr(lookup, "device_slug", lambda device: slug)
    monkeypatch.setattr(lookup, "shipped_models", lambda: {slug: GPU_MODEL})
    user = user_model_path(slug)
    user.parent.mkdir(parents=True)
    tiny_model(classes=("coo",) * 6).to_json(user)
    monkeypatch.setenv("AUTOSPMV_MODEL", str(tiny_path))
    decision = autospmv.select(poisson2d(20), device="cpu")
    assert (decision.kernel, decision.source) == ("ell", "model tiny.json")
    assert decision.notes[0].startswith("model tiny.json (from AUTOSPMV_MODEL;")
    monkeypatch.delenv("AUTOSPMV_MODEL")
    decision = autospmv.select(poisson2d(20), device="cpu")
    assert (decision.kernel, decision.source) == ("coo", f"model {slug}.json")
    assert "retrained on this machine" in decision.notes[0]


def test_shipped_models_are_found_beside_the_package_in_a_source_tree(monkeypatch):
    """Run from a source tree where ``autospmv.models`` is not importable, the shipped models
    are the repository's ``models/`` folder beside the package."""
    from importlib import resources

    def not_installed(package):
        raise ModuleNotFoundError(package)

    lookup._shipped_listing.cache_clear()
    monkeypatch.setattr(resources, "files", not_installed)
    try:
        listing = lookup.shipped_models()
    finally:
        lookup._shipped_listing.cache_clear()
    repository_models = Path(autospmv.__file__).resolve().parent.parent / "models"
    assert listing and all(path.parent == repository_models for path in listing.values())
    assert "cuda-nvidia-h200-float64" in listing


def test_lookup_order(monkeypatch):
    """user model → shipped for this device → nearest shipped of the same kind → rule."""
    slugs = {"cuda": "cuda-nvidia-a100", "cpu": "cpu-test-machine"}
    monkeypatch.setattr(lookup, "device_slug", lambda device: slugs[device])
    monkeypatch.setattr(lookup, "shipped_models", lambda: {"cuda-nvidia-h200-float64": GPU_MODEL})
    nearest = lookup.find_model("cuda")
    assert nearest.name == "cuda-nvidia-h200-float64.json"
    assert nearest.reason == ("shipped for cuda-nvidia-h200, the nearest to this device "
                              "(cuda-nvidia-a100)")
    slugs["cuda"] = "cuda-nvidia-h200"
    assert lookup.find_model("cuda").reason == "shipped for this device"
    assert lookup.find_model("cpu") is None, "a CPU must never use a GPU's model"


def _shipped(tmp_path, **trained) -> dict:
    """Fake shipped models ``{stem: path}``, each trained on the date given for its stem."""
    out = {}
    for stem, date in trained.items():
        path = tmp_path / f"{stem}.json"
        model = tiny_model()
        model.provenance["trained"] = date
        model.to_json(path)
        out[stem] = path
    return out


def test_nearest_shipped_model_is_the_closest_device_then_the_most_recent(monkeypatch, tmp_path):
    shipped = _shipped(tmp_path, **{
        "cuda-nvidia-a100-float64": "2026-12-01", "cuda-nvidia-h200": "2026-01-01",
        "cuda-nvidia-h100-float32": "2026-01-01", "cpu-some-cpu-float64": "2026-12-31",
        "cuda-amd-mi300x-float64": "2025-01-01"})
    monkeypatch.setattr(lookup, "shipped_models", lambda: shipped)
    slugs = {"cuda": "cuda-nvidia-h100-80gb-hbm3"}
    monkeypatch.setattr(lookup, "device_slug", lambda device: slugs[device])
    # The same family (H) beats a more recent model of another family (A100); the
    # unsuffixed name is a float64 model.
    choice = lookup.find_model("cuda", dtype="float64")
    assert choice.path.name == "cuda-nvidia-h200.json" and choice.dtype == "float64"
    assert choice.reason == ("shipped for cuda-nvidia-h200, the nearest to this device "
                             "(cuda-nvidia-h100-80gb-hbm3)")
    # No common family: the most recently trained of the same kind of device (never a CPU's).
    slugs["cuda"] = "cuda-tesla-v100"
    assert lookup.find_model("cuda").path.name == "cuda-nvidia-a100-float64.json"
    # A float32 model exists (for another GPU): a float32 matrix uses it, not a float64 one.
    choice = lookup.find_model("cuda", dtype="float32")
    assert (choice.path.name, choice.dtype) == ("cuda-nvidia-h100-float32.json", "float32")
    # Not alphabetical: a shuffled listing gives the same choice.
    monkeypatch.setattr(lookup, "shipped_models", lambda: dict(reversed(shipped.items())))
    slugs["cuda"] = "cuda-nvidia-h100-80gb-hbm3"
    assert lookup.find_model("cuda").path.name == "cuda-nvidia-h200.json"


def test_a_float32_matrix_uses_a_float64_model_only_when_no_float32_one_exists(monkeypatch,
                                                                              tmp_path):
    slug = "cuda-nvidia-h200"
    monkeypatch.setattr(lookup, "device_slug", lambda device: slug)
    shipped = _shipped(tmp_path, **{slug: "2026-01-01"})
    monkeypatch.setattr(lookup, "shipped_models", lambda: shipped)
    choice = lookup.find_model("cuda", dtype="float32")
    assert choice.dtype == "float64"
    assert choice.reason == ("shipped for this device; no float32 model exists for this kind "
                             "of device")
    decision = autospmv.select(poisson2d(20).astype(np.float32), device="cuda")
    assert "a float64 model, deciding for a float32 matrix" in decision.notes
    user32 = user_model_path(slug, "float32")
    user32.parent.mkdir(parents=True)
    tiny_model(classes=("coo",) * 6).to_json(user32)
    choice = lookup.find_model("cuda", dtype="float32")
    assert (choice.path, choice.dtype, choice.reason) == (user32, "float32",
                                                          "retrained on this machine")
    assert lookup.find_model("cuda", dtype="float64").path == shipped[slug]
    assert autospmv.select(poisson2d(20).astype(np.float32), device="cuda").kernel == "coo"
    # A shipped file named with its dtype wins over the older name of the same device.
    shipped.update(_shipped(tmp_path, **{f"{slug}-float64": "2025-01-01"}))
    assert lookup.find_model("cuda", dtype="float64").path.name == f"{slug}-float64.json"
    monkeypatch.setattr(lookup, "device_slug", lambda device: "cuda-nvidia-h100")
    nearest = lookup.find_model("cuda", dtype="float64")  # also as the nearest device's
    assert nearest.path.name == f"{slug}-float64.json"


@pytest.mark.parametrize("slug, dtype, expected", [
    ("cuda-nvidia-h100-80gb-hbm3", "float32", "cuda-nvidia-h100-80gb-hbm3-float32.json"),
    ("cuda-nvidia-h100-80gb-hbm3", "float64", "cuda-nvidia-h100-80gb-hbm3-float64.json"),
    ("cuda-nvidia-h200", "float64", "cuda-nvidia-h200-float64.json"),
    ("cuda-nvidia-h200", "float32", "cuda-nvidia-h200-float32.json"),
])
def test_shipped_models_by_device_and_dtype(monkeypatch, tmp_path, slug, dtype, expected):
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path))  # no retrained model
    monkeypatch.setattr(lookup, "device_slug", lambda device: slug)
    choice = lookup.find_model("cuda", dtype=dtype)
    assert (choice.path.name, choice.dtype) == (expected, dtype)


def test_cpu_never_uses_the_shipped_gpu_model():
    choice = lookup.find_model("cpu")
    assert choice is None or choice.name.startswith("cpu-")
    op = autospmv.prepare(poisson2d(10), device="cpu")
    assert "cuda-" not in op.decision.source


def test_without_any_model_the_rule_decides_and_says_so(monkeypatch):
    monkeypatch.setattr(lookup, "shipped_models", lambda: {})
    decision = selector.rule_decision(poisson2d(20), "cuda")
    assert (decision.kernel, decision.source) == ("csr_vector", "rule")
    assert decision.path == ["max_row_length = 5 ≤ 1024"]
    assert decision.notes == ["no trained model is installed yet; the built-in rule decided"]
    long_row = selector.rule_decision(one_long_row(50, 2000, 3, 2, 0), "cuda")
    assert (long_row.kernel, long_row.path) == ("csr5", ["max_row_length = 2000 > 1024"])


def test_no_cpu_model_ships_and_the_cpu_runs_csr_scalar(monkeypatch, tmp_path):
    """The CPU path is one kernel (models/README.md, "CPU: one kernel") until a model retrained
    on the machine passes the guard; long rows included, as the rule's note says."""
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path))  # no retrained model
    assert not [stem for stem in lookup.shipped_models() if stem.startswith("cpu-")]
    for A in (poisson2d(20), one_long_row(50, 2000, 3, 2, 0), sp.csr_matrix((0, 0))):
        decision = autospmv.select(A, device="cpu")
        assert (decision.kernel, decision.source, decision.path) == (
            "csr_scalar", "rule", ["device = cpu"])
        assert "no CPU model is installed" in decision.explain()
        assert autospmv.prepare(A, device="cpu").kernel == "csr_scalar"


# -- damaged models -------------------------------------------------------------------------


def _document(**changes) -> str:
    doc = tiny_model().to_dict()
    doc.update(changes)
    return json.dumps(doc)


@pytest.mark.parametrize("content, message", [
    ("{not json", r"tiny\.json is not a valid JSON model file"),
    ('["a list"]', "a model file must hold a JSON object; found list"),
    (_document(format="pickle"), "not an autospmv tree model: 'format' is 'pickle'"),
    (_document(schema_version=99), "unsupported schema_version 99"),
    (_document(classes=["ell", "warp_magic", "csr5"]),
     "unknown kernel names in classes: warp_magic; valid kernels: coo"),
    (_document(feature_names=["row_max_typo"]), "unknown feature names: row_max_typo"),
], ids=["not-json", "not-an-object", "foreign-format", "future-schema", "unknown-kernel",
        "unknown-feature"])
def test_damaged_model_raises_a_clear_error(tmp_path, content, message):
    path = tmp_path / "tiny.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        autospmv.select(poisson2d(5), device="cpu", model=path)


def test_missing_or_damaged_model_in_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSPMV_MODEL", str(tmp_path / "nowhere.json"))
    with pytest.raises(ValueError, match=r"model file '.*nowhere\.json' does not exist"):
        autospmv.prepare(poisson2d(5), device="cpu")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "autospmv-tree", "schema_version": 1}')
    monkeypatch.setenv("AUTOSPMV_MODEL", str(broken))
    with pytest.raises(ValueError, match=r"broken\.json: the model has no 'feature_names'"):
        autospmv.prepare(poisson2d(5), device="cpu")


# -- guardrails -----------------------------------------------------------------------------


def test_refused_ell_falls_back_to_the_trees_next_choice():
    model = tiny_model(classes=("ell", "ell", "ell", "csr_vector", "csr_vector", "coo"),
                       row_max=(1, 1, 1, 1, 1, 1))  # one leaf: ell, then csr_vector, then coo
    A = FAMILY["huge_row_among_short_300x3000"]()
    decision = autospmv.select(A, device="cpu", model=model)
    assert (decision.kernel, decision.candidates[:2]) == ("ell", ["csr_vector", "coo"])
    op = autospmv.prepare(A, device="cpu", model=model)
    assert op.kernel == "csr_vector" and op.decision.candidates[0] == "coo"
    guardrail = [note for note in op.decision.notes if note.startswith("guardrail:")]
    assert len(guardrail) == 1
    assert guardrail[0].startswith("guardrail: ell could not be built (")
    assert guardrail[0].endswith("fell back to csr_vector, the tree's next choice")
    assert "guardrail: ell could not be built" in op.explain()
    x = np.linspace(0.5, 1.5, A.shape[1])
    np.testing.assert_allclose(op @ x, sp.csr_matrix(A) @ x, rtol=1e-12)


def test_a_path_step_shows_as_many_digits_as_tell_value_and_threshold_apart():
    from autospmv._decide.model.tree import Step

    assert selector._comparison(Step("nnz", 1000456.0, 999999.5, False)) == "1000456 > 999999.5"
    assert selector._comparison(Step("row_max", 12.0, 16.5, True)) == "12 ≤ 16.5"
