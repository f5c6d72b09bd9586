"""prepare(A) without kernel=: on every shared real matrix and every family matrix, with each
shipped model, on each device (the ``device`` fixture: the CPU, and CUDA on a real GPU), the
operator uses a registered kernel, matches SciPy, and its explanation names every feature and
threshold on the tree's path (and, for a tree that corrects a cost model, the corrected
estimates that decide). The features are computed for the device that prepare() decides for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv._decide import selection as selector
from autospmv._decide.model.tree import TreeModel
from matrices import FAMILY, SHARED, TOLERANCE, random_vector, reference, relative_error

MODELS = sorted((Path(__file__).resolve().parent.parent / "models").glob("*.json"))
MATRICES = {**FAMILY, **SHARED}


def load(name: str) -> sp.csr_matrix:
    return sp.csr_matrix(MATRICES[name]())


@pytest.mark.parametrize("model", MODELS, ids=[path.stem for path in MODELS])
@pytest.mark.parametrize("name", sorted(FAMILY) + sorted(SHARED))
def test_automatic_choice_is_valid_correct_and_explained(name, model, device, rng):
    A = load(name)
    op = autospmv.prepare(A, device=device, model=model)
    assert op.device == device
    assert op.kernel in autospmv.KERNELS
    assert op.decision.source == f"model {model.name}"
    x = random_vector(rng, A.shape[1], np.float64)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    tree = TreeModel.load(model)
    features = autospmv.features(A, device=device)
    steps = tree.decision_path(features)
    explanation = op.explain()
    if tree.n_nodes > 1:
        assert steps, "a tree with splits compares at least one feature"
    if tree.ranking == "correction":  # the (corrected) estimates decide and are listed, best first
        leaf = tree.leaf(features).node
        ranks_by = "corrected estimate" if tree.corrects(leaf) else "smallest estimate"
        assert f"{ranks_by} (µs, best first): {tree.ranked(features)[0]} " in explanation
    for step in steps:
        assert f"{step.feature} = {selector._comparison(step)}" in explanation
