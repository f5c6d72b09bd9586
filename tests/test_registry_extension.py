"""An eighth kernel added through the public registry hook alone.

The toy kernel below is CSR-scalar under another name: it reuses the CSR format and the CPU and
CUDA CSR-scalar implementations, and is defined here only, so these tests show that
:func:`autospmv._registry.register` is all a new kernel needs: forced and automatic ``prepare``,
its cost quantities among the features, a model that knows it, the labeller's configurations and
the CLI's kernel list. The shipped models, which do not know it, keep deciding.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv._decide import cost
from autospmv._decide.features import quantities
from autospmv import _registry as registry
from autospmv._decide.model import lookup
from autospmv._decide import selection as selector
from autospmv._support.devices import check_device_name
from autospmv.__main__ import main as cli_main
from autospmv._decide.features.extract import FEATURE_NAMES
from autospmv._decide.model.tree import TreeModel
from autospmv.training import label

TOY = "toy"


def toy_params(csr: sp.csr_matrix, device: str) -> dict:
    """The toy's chooser: it has no parameters (like csr_scalar)."""
    check_device_name(device)
    return {}


def toy_variants(csr: sp.csr_matrix) -> list:
    """Two labelling variants, one of which fails to choose its parameters."""

    def broken() -> dict:
        raise RuntimeError("no such variant")

    return [("plain", dict), ("broken", broken)]


def toy_cost(inputs: cost.CostInputs) -> tuple:
    """The toy's cost quantities: csr_scalar's, as it runs csr_scalar's code."""
    return cost.csr_scalar(inputs)


TOY_SPEC = registry.KernelSpec(
    TOY, "autospmv.formats.csr:CSRFormat", "autospmv.kernels.cpu.csr:bind_scalar",
    "autospmv.kernels.cuda.csr:build_scalar", toy_params, cost=toy_cost, variants=toy_variants,
)


@pytest.fixture
def toy():
    """The toy kernel registered for one test, unregistered afterwards (also on failure)."""
    registry.register(TOY_SPEC)
    try:
        yield TOY_SPEC
    finally:
        registry.unregister(TOY)


def _matrix(seed: int = 3, m: int = 301, n: int = 257) -> sp.csr_matrix:
    """A matrix with short rows, a few long ones and empty rows (sizes not a multiple of 32)."""
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.02, format="lil", random_state=rng)
    A[7, :] = rng.standard_normal(n)
    A[40, :] = 0
    return A.tocsr()


def _toy_model() -> TreeModel:
    """A two-leaf tree: ``toy_span <= 8`` (no row longer than 8) goes to the toy kernel, longer
    to csr_vector. It reads the toy's own cost quantity, so it needs the toy registered."""
    tree = {
        "children_left": [1, -1, -1], "children_right": [2, -1, -1],
        "feature": [0, -2, -2], "threshold": [8.0, -2.0, -2.0],
        "value": [[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]],
        "n_node_samples": [4, 2, 2], "weighted_n_node_samples": [4.0, 2.0, 2.0],
    }
    return TreeModel(["toy_span"], ["csr_vector", TOY], tree, {"dtype": "float64"})


def _relative_error(y, A, x) -> float:
    reference = A.astype(np.float64) @ x.astype(np.float64)
    return float(np.linalg.norm(y - reference) / max(np.linalg.norm(reference), 1e-300))


@pytest.mark.parametrize("dtype, tolerance", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_forced_toy_kernel_matches_scipy(toy, dtype, tolerance):
    A = _matrix().astype(dtype)
    x = np.random.default_rng(1).standard_normal(A.shape[1]).astype(dtype)
    op = autospmv.prepare(A, kernel=TOY, device="cpu")
    assert (op.kernel, op.params, op.device) == (TOY, {}, "cpu")
    assert op.decision.source == "forced"
    assert _relative_error(op @ x, A, x) <= tolerance


def test_toy_cost_quantities_are_features(toy):
    A = _matrix()
    values = autospmv.features(A, device="cpu")
    names = list(values)
    assert names[:len(FEATURE_NAMES)] == list(FEATURE_NAMES)
    assert names[-len(quantities.QUANTITIES):] == [f"{TOY}_{q}" for q in quantities.QUANTITIES]
    for q in quantities.QUANTITIES:
        assert values[f"{TOY}_{q}"] == values[f"csr_scalar_{q}"]
    assert autospmv._tools.glossary.describe("toy_bytes").startswith("toy's memory traffic")


def test_a_cost_function_must_return_every_quantity(toy, monkeypatch):
    four = dataclasses.replace(registry.get(TOY), cost=lambda inputs: (1.0, 2.0, 3.0, 4.0))
    monkeypatch.setattr(registry, "specs", lambda: tuple(
        four if spec.name == TOY else spec for spec in registry._BY_NAME.values()))
    with pytest.raises(ValueError, match="cost function of kernel 'toy' returned 4 numbers; "
                                         "it must return 5: bytes, work, span, atomics, launches"):
        quantities.quantities(_matrix().tocsr(), "cpu")


def test_automatic_prepare_with_a_model_that_knows_the_toy(toy):
    model = _toy_model()
    short = sp.diags([1.0, -2.0, 0.5], [-1, 0, 1], shape=(200, 150), format="csr")  # rows ≤ 3
    x = np.random.default_rng(2).standard_normal(150)
    op = autospmv.prepare(short, device="cpu", model=model)
    assert op.kernel == TOY
    assert op.decision.candidates == ["csr_vector"]
    assert op.decision.path == ["toy_span = 3 ≤ 8"]
    assert _relative_error(op @ x, short, x) <= 1e-12
    long = _matrix()  # row 7 is full
    assert autospmv.prepare(long, device="cpu", model=model).kernel == "csr_vector"


def test_shipped_models_still_decide_with_the_toy_registered(toy, monkeypatch):
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    A = _matrix()
    for model in lookup.shipped_models().values():
        op = autospmv.prepare(A, device="cpu", model=model)
        assert op.decision.source.startswith("model ")
        assert op.kernel in autospmv.KERNELS
        assert TOY not in op.decision.candidates
    op = autospmv.prepare(A, device="cpu")  # no CPU model ships: the rule
    assert op.kernel in autospmv.KERNELS
    assert TOY not in op.decision.candidates


def test_labeller_times_the_toy_and_its_variants(toy):
    chosen, extra = label.configurations(_matrix(), "cpu")
    assert [c.kernel for c in chosen] == [*autospmv.KERNELS, TOY]
    assert chosen[-1] == label.Config(TOY, {}, "chooser")
    toy_extra = [c for c in extra if c.kernel == TOY]
    assert toy_extra == [label.Config(TOY, {}, "plain"),
                         label.Config(TOY, None, "broken", "RuntimeError: no such variant")]


def test_cli_lists_the_toy(toy, capsys):
    assert cli_main(["info"]) in (0, None)
    assert f"kernels: {', '.join(autospmv.KERNELS)}, {TOY}" in capsys.readouterr().out


def test_unregistered_toy_is_unknown_again():
    registry.register(TOY_SPEC)
    model = _toy_model()
    registry.unregister(TOY)
    assert registry.names() == autospmv.KERNELS
    assert list(autospmv.features(_matrix(), device="cpu")) == list(FEATURE_NAMES)
    with pytest.raises(ValueError, match="unknown kernel 'toy'; valid kernels: coo, "):
        autospmv.prepare(_matrix(), kernel=TOY, device="cpu")
    with pytest.raises(ValueError, match="unknown kernel names in classes: toy"):
        TreeModel(model.feature_names, model.classes, model.to_dict()["tree"],
                  known_features=["toy_span"])


def test_register_refuses_what_it_cannot_add(toy):
    with pytest.raises(ValueError, match="kernel 'toy' is already registered"):
        registry.register(TOY_SPEC)
    with pytest.raises(ValueError, match="register\\(\\) takes a KernelSpec; got str"):
        registry.register("toy")
    bad = registry.KernelSpec("Bad-Name", TOY_SPEC.format, TOY_SPEC.cpu, TOY_SPEC.cuda,
                              toy_params)
    with pytest.raises(ValueError, match="a kernel name must be a lower-case identifier; got "
                                         "'Bad-Name'"):
        registry.register(bad)
    with pytest.raises(ValueError, match="kernel 'csr_scalar' is built in and cannot be "
                                         "unregistered"):
        registry.unregister("csr_scalar")
    with pytest.raises(ValueError, match="unknown kernel 'nothing'"):
        registry.unregister("nothing")
