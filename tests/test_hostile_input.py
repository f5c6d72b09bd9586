"""Hostile input: malformed matrices, bad parameters, aliased or read-only outputs and broken
model files each give a clear ValueError (or a correct result), never a crash or a silent wrong
answer. The random fuzz runs in a subprocess (``fuzz_worker.py``): a regression there could
crash the process."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv import _registry as registry
from autospmv._decide.model.tree import CostModel, TreeModel
from autospmv._decide.model.store import device_slug, user_model_path, write_atomically
from autospmv._decide.model.lookup import shipped_models
from autospmv._support.validation import canonicalize, check_structure
from matrices import TOLERANCE, random_matrix, random_vector, reference, relative_error

HERE = pathlib.Path(__file__).resolve().parent


def csr_with(shape=(3, 4), data=None, indices=None, indptr=None) -> sp.csr_matrix:
    """A valid 3x4 CSR matrix whose arrays are then replaced, past SciPy's own checks."""
    A = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0]), np.array([0, 3, 1, 2], np.int32),
                       np.array([0, 2, 2, 4], np.int32)), shape=(3, 4))
    for name, value in (("data", data), ("indices", indices), ("indptr", indptr)):
        if value is not None:
            setattr(A, name, np.asarray(value))
    if shape != (3, 4):
        A._shape = shape
    return A


# --- structural validation --------------------------------------------------------------------

MALFORMED_CSR = {
    "negative index": (dict(indices=[0, -1, 1, 2]),
                       "negative column index -1 (first at entry 1)"),
    "index past the last column": (dict(indices=[0, 4, 1, 2]),
                                   "column index 4 out of range for 4 columns (first at entry 1; "
                                   "valid: 0..3)"),
    "indptr decreasing": (dict(indptr=[0, 3, 2, 4]),
                          "indptr decreases at row 1 (indptr[1] = 3 > indptr[2] = 2)"),
    "indptr not starting at 0": (dict(indptr=[1, 2, 2, 4]), "indptr[0] is 1; expected 0"),
    "indptr past nnz": (dict(indptr=[0, 2, 2, 5]), "indptr[-1] is 5 but data has 4 entries"),
    "indptr short of nnz": (dict(indptr=[0, 2, 2, 3]), "indptr[-1] is 3 but data has 4 entries"),
    "indptr too short": (dict(indptr=[0, 2, 4]), "indptr has 3 entries; expected 4 (3 rows + 1)"),
    "indices shorter than data": (dict(indices=[0, 3, 1]),
                                  "column has 3 entries but data has 4"),
    "float indices": (dict(indices=[0.0, 3.0, 1.0, 2.0]),
                      "column has dtype float64; expected integers"),
    "2-D data": (dict(data=np.ones((4, 1))), "data has 2 dimensions; expected 1"),
    "negative shape": (dict(shape=(-3, 4)), "negative dimension in shape (-3, 4)"),
}


@pytest.mark.parametrize("case", list(MALFORMED_CSR))
def test_malformed_csr_is_refused_before_any_kernel(case):
    changes, message = MALFORMED_CSR[case]
    for call in (lambda A: autospmv.prepare(A, device="cpu"),
                 lambda A: autospmv.prepare(A, kernel="ell", device="cpu"),
                 lambda A: autospmv.select(A, device="cpu"),
                 lambda A: autospmv.features(A, device="cpu")):
        with pytest.raises(ValueError, match=re.escape(message)):
            call(csr_with(**changes))


def _with(matrix, **attributes):
    """``matrix`` with ``attributes`` overwritten (a SciPy matrix made malformed after the fact)."""
    for name, value in attributes.items():
        setattr(matrix, name, value)
    return matrix


def _coo_array_with_rows(rows):
    coo = sp.coo_array(np.eye(3))
    coo.coords = (np.array(rows), coo.coords[1])
    return coo


def _lil_with_row(i, columns):
    lil = sp.lil_matrix(np.eye(3))
    lil.rows[i] = columns
    return lil


MALFORMED_OTHER_KINDS = {
    "csc-row": (lambda: _with(sp.csc_matrix(np.eye(3)), indices=np.array([0, 1, 7], np.int32)),
                "malformed CSC matrix: row index 7 out of range for 3 rows"),
    "coo-negative-column": (
        lambda: _with(sp.coo_matrix(np.eye(3)), col=np.array([0, -2, 2], np.int32)),
        "malformed COO matrix: negative column index -2 (first at entry 1)"),
    "coo-array-row": (lambda: _coo_array_with_rows([0, 1, 3]),
                      "malformed COO matrix: row index 3 out of range for 3 rows"),
    "bsr-indptr": (
        lambda: _with(sp.bsr_matrix(np.eye(4), blocksize=(2, 2)),
                      indptr=np.array([0, 3, 2], np.int32)),
        "malformed BSR matrix: indptr decreases at block row 1"),
    "dia-offsets": (lambda: _with(sp.dia_matrix(np.eye(4)), offsets=np.array([0, 1, 2], np.int32)),
                    "malformed DIA matrix: 3 offsets for 1 diagonals of data"),
    "dia-huge-offset": (  # SciPy's conversion corrupted the heap with it
        lambda: _with(sp.dia_matrix((np.ones((1, 4)), [0]), shape=(4, 4)),
                      offsets=np.array([2**40])),
        "malformed DIA matrix: offset 1099511627776 lies outside the 4x4 matrix (valid: -4..4)"),
    "dia-offset-below": (
        lambda: _with(sp.dia_matrix((np.ones((1, 4)), [0]), shape=(3, 4)),
                      offsets=np.array([-4], np.int32)),
        "malformed DIA matrix: offset -4 lies outside the 3x4 matrix (valid: -3..4)"),
    "dia-repeated-offset": (
        lambda: _with(sp.dia_matrix((np.ones((2, 4)), [0, 1]), shape=(4, 4)),
                      offsets=np.array([1, 1], np.int32)),
        "malformed DIA matrix: offset 1 appears more than once"),
    "lil-column": (lambda: _lil_with_row(1, [5]),
                   "malformed CSR matrix: column index 5 out of range for 3 columns"),
}
"""Malformed CSC, COO (matrix and array), BSR, DIA and LIL input: (maker, the error message)."""


@pytest.mark.parametrize("case", MALFORMED_OTHER_KINDS)
def test_malformed_other_kinds_are_refused(case):
    make, message = MALFORMED_OTHER_KINDS[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        autospmv.prepare(make(), device="cpu")


def test_every_valid_kind_passes_the_structure_check():
    A = random_matrix(12, 9, 0.3, 5)
    for kind in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.csr_array, sp.coo_array,
                 lambda M: sp.bsr_matrix(M, blocksize=(3, 3)), sp.lil_matrix, sp.dia_matrix,
                 sp.dok_matrix):
        check_structure(kind(A))
    check_structure(sp.csr_matrix((0, 0)))
    for k in (-3, 3):  # SciPy's diags makes empty diagonals just outside the matrix
        E = sp.eye(3, k=k, format="dia")
        check_structure(E)
        np.testing.assert_array_equal(autospmv.prepare(E, device="cpu") @ np.ones(3), np.zeros(3))


def test_the_structure_check_costs_less_than_one_scipy_matvec():
    rng = np.random.default_rng(0)
    m, per = 200_000, 10
    indptr = np.arange(m + 1, dtype=np.int32) * per
    indices = np.sort(rng.integers(0, m, (m, per)).astype(np.int32), axis=1).ravel()
    A = sp.csr_matrix((rng.random(m * per), indices, indptr), shape=(m, m))
    x = rng.random(m)

    def best(f):
        times = []
        for _ in range(7):
            started = time.perf_counter()
            f()
            times.append(time.perf_counter() - started)
        return min(times)

    assert best(lambda: check_structure(A)) < best(lambda: A @ x)


@pytest.mark.parametrize("indices, indptr, message", [
    ([0, -1, 1], [0, 3, 2], "indptr decreases at row 1"),
    ([0, 9, 1], [0, 2, 3], "column index 9 out of range for 4 columns"),
], ids=["bad indptr", "index out of range"])
def test_cli_explain_refuses_a_crafted_npz(tmp_path, indices, indptr, message):
    path = tmp_path / "crafted.npz"
    np.savez(path, format=b"csr", shape=np.array([2, 4]), data=np.array([1.0, 2.0, 3.0]),
             indices=np.array(indices), indptr=np.array(indptr))
    done = subprocess.run([sys.executable, "-m", "autospmv", "explain", str(path),
                           "--device", "cpu"], capture_output=True, text=True,
                          cwd=HERE.parent, timeout=300)
    assert done.returncode == 2, done.stderr
    assert f"malformed CSR matrix: {message}" in done.stderr, done.stderr


@pytest.mark.slow
def test_fuzzed_matrices_give_an_error_or_the_right_answer():
    """fuzz_worker.py: 1200 random CSR, CSC and DIA matrices, most of them malformed, some wide
    or tall, through the features, every kernel, prepare and SpMVOperator, A and Aᵀ."""
    done = subprocess.run([sys.executable, str(HERE / "fuzz_worker.py"), "1200"],
                          capture_output=True, text=True, cwd=HERE.parent, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["matrices"] == 1200
    assert report["failures"] == [], report["failures"][:5]
    assert report["refused"] > 300 and report["computed"] > 300  # both kinds were exercised


def test_the_fuzz_catches_a_validation_that_lets_malformed_matrices_through():
    """With the structure check replaced by one that accepts anything, the fuzz reports
    failures, or the process dies of what the kernels or SciPy then do."""
    done = subprocess.run([sys.executable, str(HERE / "fuzz_worker.py"), "200", "0",
                           "--without-validation"],
                          capture_output=True, text=True, cwd=HERE.parent, timeout=600)
    if done.returncode < 0:  # killed by a signal: SIGSEGV, or SIGABRT for a corrupted heap
        return
    assert done.returncode == 0, done.stderr[-3000:]
    failures = json.loads(done.stdout)["failures"]
    assert any("malformed, but computed" in failure for failure in failures), failures[:5]


# --- parameters -------------------------------------------------------------------------------

PARAMETER_ERRORS = [
    *[("csr_vector", {"threads_per_row": value},
       "kernel 'csr_vector' parameter threads_per_row must be a power of two from 1 to 32 "
       f"(1, 2, 4, 8, 16, 32); got {value!r}")
      for value in (0, 3, 5, 6, 12, 33, 64, -2, 2.5, 4.0, "4", None, True)],
    *[("hyb", {"width": value},
       f"kernel 'hyb' parameter width must be an integer >= 0; got {value!r}")
      for value in (-1, 1.5, "2", None)],
    *[("csr5", {"sigma": value},
       f"kernel 'csr5' parameter sigma must be an integer from 2 to 32; got {value!r}")
      for value in (0, 1, 33, 4.0, None)],
]


@pytest.mark.parametrize("kernel, params, message", PARAMETER_ERRORS,
                         ids=[f"{k}-{p}" for k, p, _ in PARAMETER_ERRORS])
def test_invalid_parameter_values_are_refused_with_the_allowed_values(kernel, params, message):
    A = random_matrix(20, 20, 0.3, 1)
    with pytest.raises(ValueError, match=re.escape(message)):
        autospmv.prepare(A, kernel=kernel, device="cpu", params=params)


def test_every_allowed_parameter_value_computes(rng):
    A = random_matrix(70, 50, 0.2, 2)
    x = random_vector(rng, 50, np.float64)
    cases = [("csr_vector", {"threads_per_row": g}) for g in (1, 2, 4, 8, 16, 32)]
    cases += [("csr5", {"sigma": s}) for s in range(2, 33)]
    cases += [("hyb", {"width": w}) for w in (0, 1, 2, np.int64(3))]
    for kernel, params in cases:
        op = autospmv.prepare(A, kernel=kernel, device="cpu", params=params)
        assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]


def test_operator_checks_the_parameters_of_a_decision_it_is_given():
    A = canonicalize(random_matrix(20, 20, 0.3, 1))
    decision = autospmv.select(A, kernel="csr_vector", device="cpu")
    decision.params["threads_per_row"] = 3
    with pytest.raises(ValueError, match="threads_per_row must be a power of two"):
        autospmv.SpMVOperator(A, decision, "cpu")


def test_registry_sigma_range_is_the_formats():
    from autospmv.formats.csr5 import SIGMA_RANGE

    assert (registry.CSR5_SIGMA.low, registry.CSR5_SIGMA.high) == SIGMA_RANGE


def test_params_must_be_a_dict():
    with pytest.raises(ValueError, match="params must be a dict; got list"):
        autospmv.prepare(random_matrix(5, 5, 0.5, 1), kernel="hyb", device="cpu", params=[1])


# --- out ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_out_overlapping_x_is_refused(kernel, rng):
    A = random_matrix(30, 30, 0.2, 3)
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    x = random_vector(rng, 30, np.float64)
    message = "out overlaps x: the kernel would overwrite x while reading it"
    with pytest.raises(ValueError, match=message):
        op.matvec(x, out=x)
    buffer = np.zeros(40)
    buffer[5:35] = x
    with pytest.raises(ValueError, match=message):
        op.matvec(buffer[5:35], out=buffer[:30])
    # neighbours in one buffer do not overlap
    buffer = np.zeros(60)
    buffer[:30] = x
    assert op.matvec(buffer[:30], out=buffer[30:]) is not None
    assert relative_error(buffer[30:], reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    np.testing.assert_array_equal(buffer[:30], x)


def test_read_only_out_is_refused():
    op = autospmv.prepare(random_matrix(6, 4, 0.5, 1), kernel="coo", device="cpu")
    out = np.zeros(6)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only; pass a writable array"):
        op.matvec(np.ones(4), out=out)
    assert not out.any()


# --- models -------------------------------------------------------------------------------------

STAND_IN = "cuda-nvidia-h100-80gb-hbm3-float64"
"""The shipped model that plays this CPU's shipped model here: none ships for the CPU (its rule
runs one kernel), and a tree reads the same features on any device."""


@pytest.fixture
def cpu_model_doc():
    return json.loads(shipped_models()[STAND_IN].read_text())


@pytest.fixture
def user_home(tmp_path, monkeypatch):
    """An empty per-user folder (its CPU model path returned) and a shipped CPU model."""
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    shipped = shipped_models()
    shipped[f"{device_slug('cpu')}-float64"] = shipped[STAND_IN]
    monkeypatch.setattr("autospmv._decide.model.lookup.shipped_models", lambda: shipped)
    path = user_model_path(device_slug("cpu"))
    path.parent.mkdir(parents=True)
    return path


def decided_by_shipped_model(op) -> bool:
    return op.decision.source.startswith("model ") and "shipped" in op.decision.notes[0]


@pytest.mark.parametrize("content", ['{"format": "autospmv-tree", "schema', "", "[" * 100_000,
                                     '{"format": "autospmv-tree", "schema_version": 1'],
                         ids=["truncated", "empty", "nested", "unterminated"])
def test_broken_user_model_falls_back_to_the_shipped_one(user_home, content):
    user_home.write_text(content)
    A = random_matrix(50, 50, 0.1, 1)
    with pytest.warns(RuntimeWarning, match="the model retrained on this machine is skipped"):
        op = autospmv.prepare(A, device="cpu")
    assert decided_by_shipped_model(op), op.explain()


def test_user_model_that_cannot_decide_falls_back(user_home, cpu_model_doc, monkeypatch):
    cpu_model_doc["provenance"] = {"marker": "user"}
    user_home.write_text(json.dumps(cpu_model_doc))
    evaluate = TreeModel.evaluate

    def failing(self, features, only_read=False):
        if self.provenance.get("marker") == "user":
            raise ValueError("features missing for the model: something")
        return evaluate(self, features, only_read)

    monkeypatch.setattr(TreeModel, "evaluate", failing)
    with pytest.warns(RuntimeWarning, match="skipped: features missing"):
        op = autospmv.prepare(random_matrix(50, 50, 0.1, 1), device="cpu")
    assert decided_by_shipped_model(op), op.explain()


def test_an_explicit_broken_model_still_raises(tmp_path):
    path = tmp_path / "model.json"
    path.write_text("{")
    with pytest.raises(ValueError, match="is not a valid JSON model file"):
        autospmv.prepare(random_matrix(5, 5, 0.5, 1), device="cpu", model=path)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["tree"]["threshold"].__setitem__(0, 10 ** 400), "threshold must be an array"),
    (lambda d: d["tree"].__setitem__("value", [[10 ** 400] * len(d["classes"])]),
     "value must be an array"),
    (lambda d: d.__setitem__("provenance", [1]), "provenance must be a JSON object"),
    (lambda d: d["cost_model"]["coefficients"].__setitem__(
        next(iter(d["cost_model"]["coefficients"])), [1e300] * 7),
     re.escape("non-negative numbers of at most 1e+09")),
])
def test_every_loader_error_is_a_value_error(tmp_path, cpu_model_doc, change, message):
    change(cpu_model_doc)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(cpu_model_doc))
    with pytest.raises(ValueError, match=message):
        TreeModel.load(path)


def test_loader_reports_unreadable_and_deeply_nested_files(tmp_path):
    with pytest.raises(ValueError, match="cannot read the model file"):
        TreeModel.load(tmp_path)  # a folder
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="is not a valid JSON model file"):
        TreeModel.load(path)


def test_cost_coefficients_are_range_checked():
    row = [0.0] * len(CostModel.REGRESSORS)
    for bad in (-1.0, 2e9, float("inf"), float("nan")):
        row[3] = bad
        with pytest.raises(ValueError, match="coefficients of coo"):
            CostModel({"coo": list(row)})
    row[3] = CostModel.MAX_COEFFICIENT
    CostModel({"coo": list(row)})


def test_write_atomically_leaves_the_old_file_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "model.json"
    write_atomically(path, "old")

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, "new" * 1000)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["model.json"]  # no temporary file left behind
    monkeypatch.undo()
    write_atomically(path, "new")
    assert path.read_text() == "new"


def test_readers_never_fail_while_the_model_is_reinstalled(user_home, cpu_model_doc):
    model = TreeModel.from_dict(cpu_model_doc)
    model.to_json(user_home)
    stop = threading.Event()
    installs = [0]

    def reinstall():
        while not stop.is_set():
            model.to_json(user_home)
            installs[0] += 1

    writer = threading.Thread(target=reinstall)
    writer.start()
    A = random_matrix(40, 40, 0.1, 2)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a skipped (partly written) model would warn
            sources = []  # read at least 150 times, and while at least 10 installs happen
            deadline = time.monotonic() + 300
            while (len(sources) < 150 or installs[0] <= 10) and time.monotonic() < deadline:
                sources.append(autospmv.select(A, device="cpu").notes[0])
    finally:
        stop.set()
        writer.join()
    assert installs[0] > 10
    assert all("retrained on this machine" in note for note in sources)


@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("bad, message", [(-3, "negative column index -3"),
                                          (5000, "column index 5000 out of range")])
def test_large_index_arrays_are_range_checked_by_the_compiled_pass(itype, bad, message,
                                                                   threaded, monkeypatch):
    # From COMPILED_MIN_SIZE entries the range comes from one compiled pass, not NumPy's:
    # serial, or on numba's threads (forced here even where there are fewer than the rule's).
    from autospmv._support import threads as cpu_threads
    from autospmv._support.validation import COMPILED_MIN_SIZE, index_range

    monkeypatch.setattr(cpu_threads, "PARALLEL_MIN_THREADS", 1 if threaded else 10**6)

    nnz = COMPILED_MIN_SIZE + 7
    indices = np.arange(nnz, dtype=itype) % 4000
    assert index_range(indices) == (0, 3999)
    indices[nnz - 2] = bad
    A = sp.csr_matrix((np.ones(nnz), indices, np.array([0, nnz], dtype=itype)), shape=(1, 4000))
    with pytest.raises(ValueError, match=message):
        autospmv.prepare(A, device="cpu")


# --- the public constructor ---------------------------------------------------------------------

@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_the_public_constructor_checks_the_matrix_as_prepare_does(kernel):
    # The reproducer: an index past the columns made coo, csr_scalar and ell read out of bounds.
    A = random_matrix(50, 50, 0.1, 4)
    params = registry.choose_params(kernel, canonicalize(A), "cpu")
    A.indices[1] = 10**9
    with pytest.raises(ValueError, match="malformed CSR matrix: column index 1000000000 out of "
                                         "range for 50 columns"):
        autospmv.SpMVOperator(A, autospmv.Decision(kernel, params, "u"), "cpu")


def test_the_public_constructor_builds_a_checked_snapshot(rng):
    A = random_matrix(40, 30, 0.2, 5)
    decision = autospmv.select(A, kernel="csr_scalar", device="cpu")
    op = autospmv.SpMVOperator(A, decision, "cpu", threads=np.int64(1))
    x = random_vector(rng, 30, np.float64)
    expected = reference(A, x)
    A.data[:] = 0  # the caller's arrays change; the operator does not
    assert relative_error(op @ x, expected) <= TOLERANCE[np.dtype(np.float64)]
    with pytest.raises(TypeError, match="decision must be an autospmv.Decision; got dict"):
        autospmv.SpMVOperator(A, {"kernel": "coo"}, "cpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        autospmv.SpMVOperator(A, decision, "tpu")
    with pytest.raises(ValueError, match="threads must be a positive integer; got 0"):
        autospmv.SpMVOperator(A, decision, "cpu", threads=0)


# --- transposes -------------------------------------------------------------------------------

def test_an_ell_operator_whose_transpose_ell_refuses_falls_back_to_hyb():
    import scipy.sparse.linalg as spla

    n = 3000  # one dense column: Aᵀ has a row of n entries among rows of one
    A = (sp.csr_matrix((np.ones(n), (np.arange(n), np.zeros(n, int))), shape=(n, n))
         + sp.eye(n, format="csr")).tocsr()
    op = autospmv.prepare(A, kernel="ell", device="cpu")
    z = np.linspace(-1.0, 1.0, n)
    expected = A.T @ z
    for y in (op.rmatvec(z), op.T @ z, op.H @ z):
        assert relative_error(y, expected) <= TOLERANCE[np.dtype(np.float64)]
    assert op.T.kernel == "hyb"
    assert "guardrail: ell could not be built for Aᵀ (ELL would need" in op.T.explain()
    b = A @ np.ones(n)
    x, istop = spla.lsqr(op, b, atol=1e-12, btol=1e-12)[:2]
    assert istop in (1, 2) and np.linalg.norm(A @ x - b) <= 1e-8 * np.linalg.norm(b)


def test_the_transpose_of_a_very_wide_matrix_runs_on_coo_from_its_nonzeros(rng):
    n = 3_000_000  # Aᵀ's CSR row pointer, 12 MB, would outweigh A's few hundred bytes
    columns = np.array([5, 17, 2**20, n - 1] * 2, np.int32)
    A = sp.csr_matrix((np.arange(1.0, 9.0), columns, np.array([0, 4, 4, 8, 8])), shape=(4, n))
    z = rng.uniform(-1.0, 1.0, 4)
    expected = A.T @ z
    for kernel in autospmv.KERNELS:
        op = autospmv.prepare(A, kernel=kernel, device="cpu")
        transpose = op.T
        assert transpose.kernel == "coo" and transpose.T is op
        assert f"so it runs on coo, which needs none, instead of {kernel}" in transpose.explain()
        assert transpose.nbytes < 1000
        np.testing.assert_array_equal(transpose @ z, expected)
        np.testing.assert_array_equal(op.rmatvec(z), expected)


# --- vectors and outputs ------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", autospmv.KERNELS)
def test_out_overlapping_the_operators_own_arrays_is_refused(kernel, rng):
    A = random_matrix(60, 60, 0.3, 6)
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    x = random_vector(rng, 60, np.float64)
    expected = op @ x
    owned = [array for array in op.format.arrays().values()
             if array.dtype == op.dtype and array.size >= 60]
    assert owned
    for array in owned:
        with pytest.raises(ValueError, match="out overlaps the operator's own arrays"):
            op.matvec(x, out=array[:60])
    np.testing.assert_array_equal(op @ x, expected)  # nothing was written


def test_out_is_compared_with_every_byte_of_the_kept_arrays():
    """check_out finds an out inside a strided or reversed kept array (the bytes between its
    first and last element), lets neighbours and empty arrays pass, and tells x from the
    matrix's arrays."""
    from autospmv._support.validation import byte_ranges, check_out

    f64 = np.dtype(np.float64)
    buffer = np.zeros(110)
    kept = byte_ranges([buffer[99::-3], np.zeros(0), buffer[:0]])
    assert kept.shape == (1, 2)  # empty arrays hold no bytes
    assert kept[0, 1] - kept[0, 0] == 100 * 8  # elements 0 to 99, in steps of 3 and reversed
    x = np.zeros(10)
    with pytest.raises(ValueError, match="out overlaps the operator's own arrays"):
        check_out(buffer[40:50], 10, f64, x, kept)
    with pytest.raises(ValueError, match="out overlaps the operator's own arrays"):
        check_out(buffer[95:105], 10, f64, x, kept)
    check_out(buffer[100:110], 10, f64, x, kept)  # the next bytes
    check_out(buffer[:0], 0, f64, x, kept)  # no bytes at all
    with pytest.raises(ValueError, match="out overlaps x"):
        check_out(x, 10, f64, x, kept)
    with pytest.raises(ValueError, match="out overlaps x"):
        check_out(buffer[100:110], 10, f64, buffer[105:], kept)


def test_big_endian_matrices_and_vectors_are_converted_as_scipy_does(rng):
    A = random_matrix(30, 20, 0.3, 7)
    x = random_vector(rng, 20, np.float64)
    expected = A @ x
    C = A.tocsc()
    for M in (sp.csr_matrix((A.data.astype(">f8"), A.indices.astype(">i4"),
                             A.indptr.astype(">i4")), shape=A.shape),
              sp.csc_matrix((C.data.astype(">f4"), C.indices, C.indptr), shape=A.shape),
              A.toarray().astype(">f8"), A.toarray().astype(">f4")):
        op = autospmv.prepare(M, device="cpu")
        assert op.dtype.isnative
        tolerance = TOLERANCE[np.dtype(op.dtype)]
        assert relative_error(op @ x.astype(">f8"), expected) <= tolerance


def test_thread_counts_of_any_integer_type_are_accepted():
    A = random_matrix(30, 30, 0.2, 8)
    x = np.ones(30)
    for threads in (np.int64(2), np.int32(1), np.uint8(2)):
        op = autospmv.prepare(A, device="cpu", threads=threads)
        assert 1 <= op.threads <= int(threads)
        assert relative_error(op @ x, reference(A, x)) <= TOLERANCE[np.dtype(np.float64)]
    for threads in (True, 2.0, np.float64(2), "two"):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            autospmv.prepare(A, device="cpu", threads=threads)


def test_x_of_strings_or_objects_is_refused():
    op = autospmv.prepare(random_matrix(4, 3, 1.0, 9), device="cpu")
    for x in (np.array(["1", "2", "3"]), np.array([1.0, 2.0, 3.0], dtype=object),
              ["1", "2", "3"]):
        with pytest.raises(TypeError, match="autospmv multiplies numbers"):
            op @ x


# --- settings, model files, matrix files --------------------------------------------------------

def test_an_autospmv_home_that_cannot_be_expanded(monkeypatch, capsys):
    """Automatic selection goes on without the retrained models, with a warning; what writes
    or lists the data folder stops with a one-line error naming the setting."""
    from autospmv.__main__ import main as cli
    from autospmv.training.__main__ import main as training

    monkeypatch.setenv("AUTOSPMV_HOME", "~nosuchuser/x")
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    A = random_matrix(30, 30, 0.2, 10)
    message = "cannot expand AUTOSPMV_HOME='~nosuchuser/x': no home folder found for its user"
    with pytest.warns(RuntimeWarning, match="models retrained on this machine are not looked "
                                            "for: " + re.escape(message)):
        op = autospmv.prepare(A, device="cpu")
    assert relative_error(op @ np.ones(30), reference(A, np.ones(30))) <= 1e-12
    assert cli(["models"]) == 2
    assert training(["retrain", "--device", "cpu", "--budget-minutes", "1e-9",
                     "--matrices"]) == 2
    err = capsys.readouterr().err
    assert f"autospmv models: error: {message}" in err and f"error: {message}" in err


def test_export_text_of_a_model_deeper_than_the_recursion_limit(cpu_model_doc):
    tree = cpu_model_doc["tree"]
    internal = tree["children_left"].index(max(tree["children_left"]))  # some split
    leaf = tree["children_left"].index(-1)
    depth = sys.getrecursionlimit() + 500
    chain = {key: [] for key in tree}
    for i in range(depth):  # split i: a leaf on the left, split i + 1 on the right
        for node, left, right in ((internal, 2 * i + 1, 2 * i + 2), (leaf, -1, -1)):
            for key in tree:
                chain[key].append(tree[key][node])
            chain["children_left"][-1], chain["children_right"][-1] = left, right
    for key in tree:
        chain[key].append(tree[key][leaf])
    cpu_model_doc["tree"] = chain
    model = TreeModel.from_dict(cpu_model_doc)
    assert model.depth == depth
    name = model.feature_names[tree["feature"][internal]]
    lines = model.export_text().splitlines()
    assert lines[-1].endswith(f"--- truncated branch of depth {depth - 10}")
    assert lines[0].startswith(f"|--- {name} <= ")
    lines = model.export_text(max_depth=depth).splitlines()
    assert len(lines) == 3 * depth + 1 and lines[-1].endswith("corrections: " + lines[1].split(
        "corrections: ")[1])


MATRIX_FILES = textwrap.dedent("""
    import os, warnings
    import numpy as np, scipy.sparse as sp
    from autospmv.training import corpus

    folder = {folder!r}
    np.savez(os.path.join(folder, "bad-csc.npz"), format=b"csc", shape=np.array([3, 3]),
             data=np.ones(3), indices=np.array([0, 1, 10**6]), indptr=np.array([0, 1, 2, 3]))
    A = sp.dia_matrix((np.ones((1, 4)), [0]), shape=(4, 4))
    np.savez(os.path.join(folder, "bad-dia.npz"), format=b"dia", shape=np.array([4, 4]),
             data=A.data, offsets=np.array([7]))
    sp.save_npz(os.path.join(folder, "good.npz"), sp.random(5, 5, density=0.4, format="csr",
                                                             random_state=0))
    os.mkfifo(os.path.join(folder, "x.npz"))  # reading it would wait for a writer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entries = {{e.name: e for e in corpus.corpus("tiny", [folder])
                    if e.source != corpus.SYNTHETIC}}
    print(sorted(entries))
    print([str(w.message) for w in caught])
    print(entries["good"].load().nnz)
    for name in ("bad-csc", "bad-dia"):
        try:
            entries[name].load()
        except ValueError as error:
            print(error)
""")


def test_the_corpus_refuses_malformed_files_and_skips_what_is_not_a_regular_file(tmp_path):
    # The reproducers: retrain --matrices DIR crashed in SciPy's conversion of the CSC file
    # and hung on the FIFO.
    done = subprocess.run([sys.executable, "-c", MATRIX_FILES.format(folder=str(tmp_path))],
                          capture_output=True, text=True, cwd=HERE.parent, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "['bad-csc', 'bad-dia', 'good']"
    assert f"skipping {tmp_path / 'x.npz'}: not a regular file" in lines[1]
    assert lines[2] == "10"
    assert lines[3] == (f"{tmp_path / 'bad-csc.npz'}: malformed CSC matrix: row index 1000000 "
                        "out of range for 3 rows (first at entry 2; valid: 0..2)")
    assert lines[4] == (f"{tmp_path / 'bad-dia.npz'}: malformed DIA matrix: offset 7 lies "
                        "outside the 4x4 matrix (valid: -4..4)")


# --- the model cache and the model file's size cap ----------------------------------------------

def leaf_model(kernel: str) -> dict:
    """A one-leaf model file's document: it picks ``kernel`` for every matrix."""
    return {"format": "autospmv-tree", "schema_version": 1, "feature_names": ["nnz"],
            "classes": [kernel],
            "tree": {"children_left": [-1], "children_right": [-1], "feature": [-2],
                     "threshold": [-2.0], "value": [[1.0]], "n_node_samples": [1],
                     "weighted_n_node_samples": [1.0]}}


def test_a_model_replaced_with_the_same_size_and_mtime_is_read_again(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps(leaf_model("hyb")))
    A = random_matrix(60, 60, 0.1, 1)
    assert autospmv.prepare(A, device="cpu", model=path).kernel == "hyb"
    mtime = path.stat().st_mtime_ns
    replacement = tmp_path / "replacement.json"
    replacement.write_text(json.dumps(leaf_model("ell")))  # the same number of bytes
    os.utime(replacement, ns=(mtime, mtime))
    os.replace(replacement, path)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (len(json.dumps(leaf_model("hyb"))),
                                                              mtime)
    assert autospmv.prepare(A, device="cpu", model=path).kernel == "ell"


def test_a_model_file_larger_than_the_cap_is_refused_unread(tmp_path, monkeypatch):
    from autospmv._decide.model import file as model_file

    path = tmp_path / "model.json"
    path.write_text(json.dumps(leaf_model("hyb")) + " " * 5000)
    monkeypatch.setattr(model_file, "MAX_MODEL_BYTES", 4096)
    with pytest.raises(ValueError, match="model.json is larger than 4,096 bytes"):
        TreeModel.load(path)
    with pytest.raises(ValueError, match="larger than"):
        with open(path) as handle:
            TreeModel.load(handle)
    monkeypatch.setattr(model_file, "MAX_MODEL_BYTES", 8192)
    assert list(TreeModel.load(path).classes) == ["hyb"]


def test_a_model_path_that_is_not_a_regular_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a regular file"):
        autospmv.prepare(random_matrix(5, 5, 0.5, 1), device="cpu", model=tmp_path)


def test_a_model_removed_while_it_is_read_falls_back_with_one_warning(user_home, cpu_model_doc,
                                                                      monkeypatch):
    """Another process removes (or replaces) the installed model between the look for it and
    the read: prepare() decides without it and warns once for any number of prepares."""
    import warnings

    from autospmv._decide.model.tree import TreeModel

    user_home.write_text(json.dumps(cpu_model_doc))

    load = TreeModel.load.__func__

    def vanished(cls, source, *args, **kwargs):
        if str(source) == str(user_home):
            raise FileNotFoundError(2, "No such file or directory", str(source))
        return load(cls, source, *args, **kwargs)

    monkeypatch.setattr(TreeModel, "load", classmethod(vanished))
    A = random_matrix(50, 50, 0.1, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops = [autospmv.prepare(A, device="cpu") for _ in range(5)]
    messages = [str(w.message) for w in caught if "skipped" in str(w.message)]
    assert len(messages) == 1 and "could not be read: No such file or directory" in messages[0]
    assert all(np.allclose(op @ np.ones(50), A @ np.ones(50)) for op in ops)


def test_prepare_survives_another_process_writing_and_removing_the_model(user_home,
                                                                         cpu_model_doc):
    """The reproducer of the hostile-input report: prepare() in a loop while another thread
    writes and removes the installed model never raises."""
    import threading
    import warnings

    text = json.dumps(cpu_model_doc)
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            user_home.write_text(text)
            user_home.unlink()

    writer = threading.Thread(target=churn)
    writer.start()
    A = random_matrix(50, 50, 0.1, 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(300):
                autospmv.prepare(A, device="cpu")
    finally:
        stop.set()
        writer.join()
