"""prepare(A, background=True): the operator runs at once on the start kernel, the decision and
its conversion run on a thread, and the operator switches between two products; every product
is exact, A is a snapshot, and the notes say what happened."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.tree import DecisionTreeClassifier

import autospmv
from autospmv._decide.model.tree import TreeModel
from matrices import (TOLERANCE, poisson2d, power_law, random_matrix, random_vector, reference,
                      relative_error)


def _always(kernel: str) -> TreeModel:
    """A model that chooses ``kernel`` for every matrix."""
    clf = DecisionTreeClassifier().fit(np.array([[1.0], [2.0]]), [kernel, kernel])
    return TreeModel.from_sklearn(clf, ["row_max"], {"device": "test bench",
                                                     "trained": "2000-01-01T00:00:00+00:00"})


def _exact(op, A, rng) -> None:
    x = random_vector(rng, A.shape[1], np.float64)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]


@pytest.mark.parametrize("kernel", ["hyb", "csr5", "coo"])
def test_starts_on_csr_scalar_and_switches_to_the_decision(kernel, rng):
    A = power_law(3000, 2500, 1.8, 4)
    op = autospmv.prepare(A, device="cpu", model=_always(kernel), background=True)
    assert op.kernel == "csr_scalar"
    assert "chosen by the start of a background decision" in op.explain()
    _exact(op, A, rng)
    assert op.wait(timeout=60)
    assert op.kernel == kernel == autospmv.prepare(A, device="cpu", model=_always(kernel)).kernel
    _exact(op, A, rng)
    notes = op.decision.notes
    assert any(note.startswith("background: started on csr_scalar") and
               f"switched to {kernel}" in note for note in notes), notes
    assert op.decision.source.startswith("model")


def test_the_start_kernel_stays_when_it_is_the_decision(rng):
    A = poisson2d(30)
    op = autospmv.prepare(A, device="cpu", model=_always("csr_scalar"), background=True)
    assert op.wait(timeout=60)
    assert op.kernel == "csr_scalar"
    assert any("csr_scalar is the decision; kept" in note for note in op.decision.notes)
    _exact(op, A, rng)


def test_explain_says_that_no_kernel_was_requested(rng):
    """The start kernel of a background decision is autospmv's, not the caller's: explain()
    says so rather than "kernel='csr_scalar' requested"."""
    A = poisson2d(30)
    op = autospmv.prepare(A, device="cpu", model=_always("csr_scalar"), background=True)
    op.wait(timeout=60)
    text = op.explain()
    assert "requested" not in text.replace("no kernel was requested", ""), text
    assert "background=True: products run csr_scalar while the decision runs on a thread" in text


def test_a_product_switches_once_the_thread_is_done(rng):
    A = poisson2d(40)
    op = autospmv.prepare(A, device="cpu", model=_always("ell"), background=True)
    op._switch.join(60)  # the thread is done, nothing has switched yet
    assert op.decision.kernel == "csr_scalar"
    _exact(op, A, rng)  # this product switches first
    assert op.kernel == "ell"


def test_changing_a_afterwards_changes_nothing(rng):
    A = sp.csr_matrix(power_law(2000, 2000, 1.8, 5))
    assert A.has_canonical_format
    B = A.copy()
    op = autospmv.prepare(B, device="cpu", model=_always("hyb"), background=True)
    B.data *= 3
    B.indices[:] = 0
    assert op.wait(timeout=60) and op.kernel == "hyb"
    _exact(op, A, rng)
    z = random_vector(rng, A.shape[0], np.float64)
    assert relative_error(op.T @ z, reference(A.T, z)) <= TOLERANCE[np.dtype(np.float64)]


def test_threads_calling_through_the_switch_all_get_the_right_answer():
    A = power_law(4000, 4000, 1.7, 6)
    x = np.random.default_rng(3).standard_normal(A.shape[1])
    expected = reference(A, x)
    op = autospmv.prepare(A, device="cpu", model=_always("hyb"), background=True)
    errors = []

    def call():
        for _ in range(40):
            errors.append(relative_error(op @ x, expected))

    workers = [threading.Thread(target=call) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert op.wait(timeout=60) and op.kernel == "hyb"
    assert max(errors) <= TOLERANCE[np.dtype(np.float64)]


def test_a_failed_background_decision_keeps_the_start_kernel_and_warns(rng, tmp_path):
    A = poisson2d(20)
    broken = _always("ell")
    broken.classes = ["no_such_kernel"] * len(broken.classes)  # decides a kernel that is not there
    op = autospmv.prepare(A, device="cpu", model=broken, background=True)
    op._switch.join(60)
    with pytest.warns(RuntimeWarning, match="background: the decision or its conversion failed"):
        assert op.wait(timeout=60)
    assert op.kernel == "csr_scalar"
    _exact(op, A, rng)


def test_pickling_waits_for_the_decision(rng):
    A = poisson2d(20)
    op = autospmv.prepare(A, device="cpu", model=_always("ell"), background=True)
    again = pickle.loads(pickle.dumps(op))
    assert op.kernel == again.kernel == "ell"
    _exact(again, A, rng)


@pytest.mark.parametrize("options, message", [
    ({"kernel": "ell"}, "cannot be combined"),
    ({"tune": "measure"}, "cannot be combined"),
    ({"products": 100}, "cannot be combined"),
])
def test_background_refuses_what_decides_otherwise(options, message):
    with pytest.raises(ValueError, match=message):
        autospmv.prepare(poisson2d(10), device="cpu", background=True, **options)


def test_background_must_be_a_bool():
    with pytest.raises(TypeError, match="background must be True or False"):
        autospmv.prepare(poisson2d(10), device="cpu", background=1)


def test_without_background_nothing_waits():
    op = autospmv.prepare(poisson2d(10), device="cpu")
    assert op.wait(timeout=0) is True


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_on_the_gpu_the_switch_gives_prepares_decision(dtype, rng):
    pytest.importorskip("cupy")
    A = random_matrix(200_000, 150_000, 5e-5, 8).astype(dtype)  # rows of about 7.5
    expected = autospmv.prepare(A, device="cuda")
    B = A.copy()
    op = autospmv.prepare(B, device="cuda", background=True)
    assert op.kernel == "csr_vector"
    B.data[:] = 0
    x = random_vector(rng, A.shape[1], np.float64)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    assert op.wait(timeout=120)
    assert (op.kernel, op.params) == (expected.kernel, expected.params)
    assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    z = random_vector(rng, A.shape[0], np.float64)
    assert relative_error(op.T @ z, reference(A.T, z)) <= TOLERANCE[np.dtype(np.float64)]


@pytest.mark.requires_gpu
def test_on_the_gpu_a_small_matrix_is_decided_before_prepare_returns():
    pytest.importorskip("cupy")
    A = poisson2d(30)
    op = autospmv.prepare(A, device="cuda", background=True)
    assert op._switch is None
    assert (op.kernel, op.params) == (autospmv.prepare(A, device="cuda").kernel,
                                      autospmv.prepare(A, device="cuda").params)


def test_a_row_too_long_for_the_start_kernel_is_decided_before_prepare_returns(rng):
    from autospmv._prepare.background import START_MAX_ROW

    A = sp.lil_matrix((300, START_MAX_ROW + 500))
    A[7, :] = 1.0
    A[np.arange(300), np.arange(300)] = 2.0
    A = A.tocsr()
    op = autospmv.prepare(A, device="cpu", model=_always("hyb"), background=True)
    assert op._switch is None and op.kernel == "hyb"
    assert any(note.startswith("background: not used, as the longest row") for note in
               op.decision.notes), op.decision.notes
    _exact(op, A, rng)


def test_threads_waiting_pickling_and_multiplying_through_switches_never_fail():
    """A few switches of ``background_stress.py`` (run it as a script for 1,000): 8 threads
    making 1-D and 2-D products, waiting, pickling and explaining while the operator switches."""
    from background_stress import run

    result = run(switches=12, threads=8, rows=1500)
    assert result["exceptions"] == result["wrong"] == 0, result["first_errors"]
    assert result["calls"] >= 12 * 8 * 6


@pytest.mark.requires_gpu
def test_on_the_gpu_threads_through_switches_never_fail():
    """``background_stress.py`` on CUDA operators: 8 threads making 1-D and 2-D products,
    waiting, pickling and explaining while each operator switches from csr_vector."""
    pytest.importorskip("cupy")
    from background_stress import run

    result = run(switches=24, threads=8, device="cuda")
    assert result["exceptions"] == result["wrong"] == 0, result["first_errors"]
    assert result["calls"] >= 24 * 8 * 6


def test_wait_from_many_threads_once_the_decision_is_ready(rng):
    """Issue reproducer: eight threads call ``wait()`` as the thread finishes; the first
    switches and the others return True once it has."""
    A = sp.random(4000, 4000, density=1e-3, format="csr", random_state=2)
    for _ in range(5):
        op = autospmv.prepare(A, device="cpu", model=_always("hyb"), background=True)
        errors, answers = [], []

        def wait():
            try:
                answers.append(op.wait())
            except Exception as error:  # noqa: BLE001 - the test's finding
                errors.append(repr(error))

        workers = [threading.Thread(target=wait) for _ in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == [] and answers == [True] * 8
        assert op.kernel == "hyb"
        _exact(op, A, rng)


def test_a_2d_product_runs_on_the_backend_it_set_up_when_the_switch_lands_between(
        rng, monkeypatch):
    """The thread's result becomes ready after a 2-D product set up its multi-vector product on
    the start kernel and before it ran: the product runs where it set up (SciPy's result), and
    the next one on the decision's kernel."""
    from autospmv.kernels.cpu.backend import CpuBackend

    A = random_matrix(800, 700, 0.01, 3)
    op = autospmv.prepare(A, device="cpu", model=_always("hyb"), background=True)
    switch = op._switch
    switch.join(60)
    finished, switch.finished = switch.finished, None  # not ready yet, as the product begins
    set_up = CpuBackend.set_up_multi

    def set_up_then_finish(self, matrix_csr, notes=None, spmm_rule=None):
        note = set_up(self, matrix_csr, notes, spmm_rule)
        switch.finished = finished  # the thread is done from here on
        return note

    monkeypatch.setattr(CpuBackend, "set_up_multi", set_up_then_finish)
    X = rng.uniform(0.5, 1.0, (A.shape[1], 3))
    tolerance = TOLERANCE[np.dtype(np.float64)]
    assert relative_error(op @ X, A @ X) <= tolerance
    assert op.kernel == "csr_scalar"  # the product did not switch
    assert relative_error(op @ X, A @ X) <= tolerance
    assert op.kernel == "hyb"
    assert op.memory["host"] >= op.nnz * 12  # the decision's operator counts its own set-up


def test_a_broken_model_file_raises_with_background_as_without(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"format": "autospmv-tree"')
    A = poisson2d(20)
    for background in (False, True):
        with pytest.raises(ValueError, match="broken.json is not a valid JSON model file"):
            autospmv.prepare(A, device="cpu", model=path, background=background)
    with pytest.raises(ValueError, match="does not exist"):
        autospmv.prepare(A, device="cpu", model=tmp_path / "missing.json", background=True)


def test_a_broken_autospmv_model_raises_with_background(tmp_path, monkeypatch):
    path = tmp_path / "broken.json"
    path.write_text("[]")
    monkeypatch.setenv("AUTOSPMV_MODEL", str(path))
    with pytest.raises(ValueError, match="broken.json"):
        autospmv.prepare(poisson2d(20), device="cpu", background=True)


def test_a_decision_failing_on_the_thread_warns_at_the_product_that_switches(rng):
    """A decision whose format refuses A (a leaf model picking ELL for a power-law matrix, with
    no next choice) fails on the thread: the product that would switch warns, runs on the
    start kernel (SciPy's result) and the operator stays there."""
    A = power_law(3000, 3000, 1.8, 4)
    with pytest.raises(autospmv.FormatTooLargeError, match="ELL would need"):
        autospmv.prepare(A, device="cpu", model=_always("ell"))
    op = autospmv.prepare(A, device="cpu", model=_always("ell"), background=True)
    op._switch.join(60)
    with pytest.warns(RuntimeWarning, match="the decision or its conversion failed "
                                            r"\(FormatTooLargeError: ELL would need"):
        _exact(op, A, rng)
    assert op.kernel == "csr_scalar" and op._switch is None
    assert any("the operator stays on csr_scalar" in note for note in op.decision.notes)
    _exact(op, A, rng)
