"""The CPU operator inside SciPy's solvers, and its thread settings (no timings here: those are
the solver benchmark's, :mod:`autospmv._tools.bench_solvers`, ``autospmv bench --solver``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import autospmv
from autospmv._support import threads as cpu_threads
from autospmv.kernels import cpu as cpu_kernels
from autospmv.kernels.cpu import csr as cpu_csr

ROOT = Path(__file__).resolve().parent.parent
POOL = numba.config.NUMBA_NUM_THREADS
needs_two_threads = pytest.mark.skipif(POOL < 2, reason="numba runs a single thread here")


def laplacian_2d(side: int, shift: float = 0.05) -> sp.csr_matrix:
    """SPD: the 5-point Laplacian of a side×side grid plus ``shift`` on the diagonal."""
    line = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(side, side))
    return (sp.kronsum(line, line) + shift * sp.identity(side * side)).tocsr()


def nonsymmetric(n: int = 400) -> sp.csr_matrix:
    rng = np.random.default_rng(3)
    R = sp.random(n, n, density=0.01, format="csr", random_state=4)
    return (R + sp.diags(4.0 + rng.uniform(0, 1, n))).tocsr()


def counted(fn):
    """Calls ``fn(callback)`` and returns (its result, the number of callback calls)."""
    calls = []
    result = fn(lambda *_: calls.append(1))
    return result, len(calls)


KERNELS_IN_SOLVERS = ["csr_scalar", "jds", "hyb", "csr5"]
THREADS = [1, pytest.param(2, marks=needs_two_threads)]


@pytest.mark.parametrize("kernel", KERNELS_IN_SOLVERS)
@pytest.mark.parametrize("threads", THREADS)
def test_cg_with_the_operator_matches_scipy(kernel, threads):
    A = laplacian_2d(24)
    b = A @ np.random.default_rng(0).uniform(-1, 1, A.shape[1])
    op = autospmv.prepare(A, kernel=kernel, device="cpu", threads=threads)
    (x_op, info_op), it_op = counted(lambda cb: sla.cg(op, b, rtol=1e-10, callback=cb))
    (x_sp, info_sp), it_sp = counted(lambda cb: sla.cg(A, b, rtol=1e-10, callback=cb))
    assert info_op == info_sp == 0
    assert it_op == it_sp > 10
    np.testing.assert_allclose(x_op, x_sp, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS_IN_SOLVERS)
@pytest.mark.parametrize("threads", THREADS)
def test_gmres_with_the_operator_matches_scipy(kernel, threads):
    A = nonsymmetric()
    b = A @ np.random.default_rng(1).uniform(-1, 1, A.shape[1])
    op = autospmv.prepare(A, kernel=kernel, device="cpu", threads=threads)

    def run(M):
        return counted(lambda cb: sla.gmres(M, b, rtol=1e-10, restart=10, callback=cb,
                                            callback_type="pr_norm"))

    (x_op, info_op), it_op = run(op)
    (x_sp, info_sp), it_sp = run(A)
    assert info_op == info_sp == 0
    assert it_op == it_sp > 3
    np.testing.assert_allclose(x_op, x_sp, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS_IN_SOLVERS)
@pytest.mark.parametrize("threads", THREADS)
def test_lsqr_with_the_operator_matches_scipy(kernel, threads):
    """lsqr also multiplies by Aᵀ (the operator's transpose), on a rectangular matrix. Where
    both products are SciPy's bit for bit, so is every iterate and the iteration count; where
    one rounds differently (csr_scalar's threaded Aᵀ sums its rows of 16 or more terms in four
    partial sums), the stopping test may trigger one iteration apart."""
    A = sp.random(300, 120, density=0.05, format="csr", random_state=5)
    A = (A + sp.eye(300, 120)).tocsr()
    b = A @ np.random.default_rng(2).uniform(-1, 1, A.shape[1])
    op = autospmv.prepare(A, kernel=kernel, device="cpu", threads=threads)
    result_op = sla.lsqr(op, b, atol=1e-12, btol=1e-12)
    result_sp = sla.lsqr(A, b, atol=1e-12, btol=1e-12)
    v = np.random.default_rng(3).uniform(-1, 1, A.shape[0])
    w = np.random.default_rng(4).uniform(-1, 1, A.shape[1])
    bitwise = np.array_equal(op @ w, A @ w) and np.array_equal(op.T @ v, A.T @ v)
    assert result_op[1] == result_sp[1] and result_sp[2] > 3  # istop, itn
    if bitwise:
        assert result_op[2] == result_sp[2]
    else:
        assert abs(result_op[2] - result_sp[2]) <= 1
    np.testing.assert_allclose(result_op[0], result_sp[0], rtol=1e-9, atol=1e-12)
    assert op.T.threads == op.threads


@pytest.mark.parametrize("kernel", KERNELS_IN_SOLVERS)
@pytest.mark.parametrize("threads", THREADS)
def test_eigsh_with_the_operator_matches_scipy(kernel, threads):
    A = laplacian_2d(20)
    v0 = np.random.default_rng(3).uniform(0.5, 1.5, A.shape[0])
    op = autospmv.prepare(A, kernel=kernel, device="cpu", threads=threads)
    counts = {"op": 0}

    def matvec(x):
        counts["op"] += 1
        return op @ x

    wrapped = sla.LinearOperator(A.shape, matvec=matvec, dtype=A.dtype)
    values_op = np.sort(sla.eigsh(wrapped, k=4, v0=v0, tol=1e-10, return_eigenvectors=False))
    counts["scipy"] = 0

    def matvec_sp(x):
        counts["scipy"] += 1
        return A @ x

    wrapped_sp = sla.LinearOperator(A.shape, matvec=matvec_sp, dtype=A.dtype)
    values_sp = np.sort(sla.eigsh(wrapped_sp, k=4, v0=v0, tol=1e-10, return_eigenvectors=False))
    assert counts["op"] == counts["scipy"] > 4
    np.testing.assert_allclose(values_op, values_sp, rtol=1e-10)
    # and the operator itself, without a wrapper
    values_direct = np.sort(sla.eigsh(op, k=4, v0=v0, tol=1e-10, return_eigenvectors=False))
    np.testing.assert_allclose(values_direct, values_sp, rtol=1e-10)


# ------------------------------------------------------------------------- thread settings

def _refuse(*args):
    raise AssertionError("the parallel kernel ran")


def test_one_thread_runs_the_serial_kernel(monkeypatch):
    monkeypatch.setattr(cpu_csr, "_scalar_parallel", _refuse)
    A = laplacian_2d(200)  # ~200K nonzeros: large enough for threads by the size rule
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu", threads=1)
    x = np.ones(A.shape[1])
    assert op.threads == 1
    np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12)
    np.testing.assert_allclose(op.T @ x, A.T @ x, rtol=1e-12)  # the transpose keeps threads=1


@needs_two_threads
def test_two_threads_run_the_parallel_kernel_even_on_a_small_matrix(monkeypatch):
    ran = []
    monkeypatch.setattr(cpu_csr, "_scalar_parallel", lambda *a: ran.append(1))
    op = autospmv.prepare(laplacian_2d(5), kernel="csr_scalar", device="cpu", threads=2)
    op @ np.ones(25)
    assert op.threads == 2 and ran == [1]


def test_hyb_passes_the_choice_to_both_parts(monkeypatch):
    from autospmv.kernels.cpu import coo, ell

    monkeypatch.setattr(coo, "_coo_parallel", _refuse)
    monkeypatch.setattr(ell, "_ell_parallel", _refuse)
    A = laplacian_2d(200)
    op = autospmv.prepare(A, kernel="hyb", device="cpu", threads=1, params={"width": 3})
    x = np.ones(A.shape[1])
    np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12)


def test_the_environment_variable_sets_threads_and_threads_wins(monkeypatch):
    A = laplacian_2d(200)
    monkeypatch.setenv(cpu_threads.ENV_THREADS, "1")
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    assert op.threads == 1
    assert any("requested by AUTOSPMV_NUM_THREADS" in note for note in op.decision.notes)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu", threads=POOL)
    assert op.threads == POOL


def test_explicit_threads_are_capped_by_numbas_pool():
    op = autospmv.prepare(laplacian_2d(5), kernel="csr_scalar", device="cpu", threads=POOL + 3)
    assert op.threads == POOL
    assert any("capped at numba's pool" in note for note in op.decision.notes)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "two", True])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        autospmv.prepare(laplacian_2d(5), device="cpu", threads=bad)


def test_a_bad_environment_variable_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(cpu_threads.ENV_THREADS, "many")
    with pytest.raises(ValueError, match="AUTOSPMV_NUM_THREADS must be a positive integer"):
        autospmv.prepare(laplacian_2d(5), device="cpu")


def test_auto_threads_follow_size_cores_and_pool(monkeypatch):
    monkeypatch.delenv(cpu_threads.ENV_THREADS, raising=False)
    monkeypatch.setattr(cpu_threads, "blas_threads", lambda: 1)
    monkeypatch.setattr(cpu_threads, "pool_size", lambda: 16)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 4)
    per = cpu_threads.NNZ_PER_THREAD
    assert cpu_threads.choose_threads(0)[0] == 1
    assert cpu_threads.choose_threads(2 * per - 1)[0] == 1
    assert cpu_threads.choose_threads(2 * per)[0] == 2
    assert cpu_threads.choose_threads(100 * per)[0] == 4  # the usable cores
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 32)
    assert cpu_threads.choose_threads(100 * per)[0] == 16  # numba's pool
    assert cpu_kernels.PARALLEL_MIN_NNZ == 2 * per


def test_auto_threads_stay_serial_on_two_cores_below_a_million_nonzeros(monkeypatch):
    """On two usable cores a second thread waits for a core that other work may hold: below
    BLAS_SHARED_MIN_NNZ products run serially there, whatever the BLAS and the vectors."""
    monkeypatch.delenv(cpu_threads.ENV_THREADS, raising=False)
    monkeypatch.setattr(cpu_threads, "pool_size", lambda: 16)
    monkeypatch.setattr(cpu_threads, "blas_threads", lambda: 1)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 2)
    limit = cpu_threads.BLAS_SHARED_MIN_NNZ
    count, why = cpu_threads.choose_threads(limit - 1, vector_length=100)
    assert count == 1 and "serial on 2 usable cores below 1,000,000 nonzeros" in why
    assert cpu_threads.choose_threads(limit, vector_length=100)[0] == 2
    assert cpu_threads.choose_threads(limit - 1, threads=2)[0] == 2  # asked for: honoured
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 3)
    assert cpu_threads.choose_threads(limit - 1, vector_length=100)[0] == 3


def test_auto_threads_stay_serial_beside_a_threaded_blas_below_the_limit(monkeypatch):
    monkeypatch.delenv(cpu_threads.ENV_THREADS, raising=False)
    monkeypatch.setattr(cpu_threads, "pool_size", lambda: 16)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 16)
    monkeypatch.setattr(cpu_threads, "blas_threads", lambda: 16)
    limit = cpu_threads.BLAS_SHARED_MIN_NNZ
    long = cpu_threads.BLAS_THREADED_MIN_LENGTH
    count, why = cpu_threads.choose_threads(limit - 1, vector_length=long)
    assert count == 1 and "serial beside a BLAS running 16 threads" in why
    assert cpu_threads.choose_threads(limit - 1)[0] == 1  # no length: the BLAS may thread
    assert cpu_threads.choose_threads(limit, vector_length=long)[0] == 16
    assert cpu_threads.choose_threads(limit - 1, threads=4, vector_length=long)[0] == 4
    # on shorter vectors the BLAS stays on one thread, so the product threads by its size
    assert cpu_threads.choose_threads(limit - 1, vector_length=long - 1)[0] == 16
    assert cpu_threads.choose_threads(2 * cpu_threads.NNZ_PER_THREAD,
                                      vector_length=long - 1)[0] == 2
    monkeypatch.setattr(cpu_threads, "blas_threads", lambda: 1)
    assert cpu_threads.choose_threads(limit - 1, vector_length=long)[0] == 16


def test_an_operator_reads_its_vector_length_for_the_blas_rule(monkeypatch):
    """The operator hands choose_threads its larger dimension: short and wide matrices alike."""
    monkeypatch.delenv(cpu_threads.ENV_THREADS, raising=False)
    monkeypatch.setattr(cpu_threads, "pool_size", lambda: 16)
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: 16)
    monkeypatch.setattr(cpu_threads, "blas_threads", lambda: 16)
    nnz = 4 * cpu_threads.NNZ_PER_THREAD
    rng = np.random.default_rng(0)
    for shape, expected in [((2_000, 2_000), 4), ((2_000, 20_000), 1), ((20_000, 2_000), 1)]:
        rows, cols = rng.integers(0, shape[0], nnz), rng.integers(0, shape[1], nnz)
        A = sp.csr_matrix((np.ones(nnz), (rows, cols)), shape=shape)
        A.sum_duplicates()
        op = autospmv.prepare(A, device="cpu", kernel="csr_scalar")
        assert op.threads == min(expected, max(1, A.nnz // cpu_threads.NNZ_PER_THREAD)), (
            shape, op.threads, op.threads_reason)


def test_blas_threads_reads_the_blas_pools():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert cpu_threads.blas_threads() == 1
    pools = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert cpu_threads.blas_threads() == max([p["num_threads"] for p in pools], default=1)


def test_usable_cores_follow_the_cpu_affinity(monkeypatch):
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert cpu_threads.usable_cores() == 1


class FakeNumba:
    """Stands in for numba's thread-count functions, recording every change."""

    def __init__(self, current: int):
        self.current = current
        self.changes = []

    def get_num_threads(self):
        return self.current

    def set_num_threads(self, n):
        self.changes.append(n)
        self.current = n


def _binder(calls):
    def bind(fmt, params, parallel):
        def run(x, y):
            calls.append(("parallel" if parallel else "serial", fake.current))
            if x == "fail":
                raise RuntimeError("kernel failed")
        return run
    return bind


fake = FakeNumba(4)


@pytest.mark.parametrize("current, threads, expected, changes", [
    (4, 4, ("parallel", 4), []),        # as many as numba runs: no change
    (4, 8, ("parallel", 4), []),        # never more than the caller's numba.set_num_threads
    (4, 3, ("parallel", 3), [3, 4]),    # fewer: set for the call, then restored
    (1, 3, ("serial", 1), []),          # the caller asked numba for one thread: serial kernel
    (4, 1, ("serial", 4), []),          # one thread: always serial, numba untouched
])
def test_each_call_honours_and_restores_numbas_thread_count(monkeypatch, current, threads,
                                                            expected, changes):
    fake.current, fake.changes = current, []
    monkeypatch.setattr(cpu_kernels, "numba", fake)
    calls = []
    run = cpu_kernels.bind_threaded(_binder(calls), None, {}, threads)
    run("x", "y")
    assert calls == [expected]
    assert fake.changes == changes and fake.current == current


def test_the_thread_count_is_restored_when_the_kernel_fails(monkeypatch):
    fake.current, fake.changes = 4, []
    monkeypatch.setattr(cpu_kernels, "numba", fake)
    run = cpu_kernels.bind_threaded(_binder([]), None, {}, 2)
    with pytest.raises(RuntimeError, match="kernel failed"):
        run("fail", "y")
    assert fake.changes == [2, 4] and fake.current == 4


def test_real_calls_leave_numbas_thread_count_as_they_found_it():
    A = laplacian_2d(200)
    x = np.ones(A.shape[1])
    before = numba.get_num_threads()
    for threads in range(1, POOL + 1):
        op = autospmv.prepare(A, kernel="csr_scalar", device="cpu", threads=threads)
        np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12)
        assert numba.get_num_threads() == before
    if POOL >= 2:
        numba.set_num_threads(1)
        try:
            np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12)
            assert numba.get_num_threads() == 1
        finally:
            numba.set_num_threads(before)


def _policy_in_new_process(env: dict) -> str:
    code = ("import os, autospmv, autospmv._support.threads as t; "
            "print(os.environ.get('OMP_WAIT_POLICY')); print(t.wait_policy())")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, text=True,
                            capture_output=True, check=True)
    return result.stdout


def test_importing_autospmv_asks_openmp_for_sleeping_workers():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = _policy_in_new_process(env).splitlines()
    assert out == ["PASSIVE", "OMP_WAIT_POLICY=PASSIVE (set by autospmv)"]


def test_a_users_wait_policy_is_kept():
    out = _policy_in_new_process({**os.environ, "OMP_WAIT_POLICY": "ACTIVE"}).splitlines()
    assert out == ["ACTIVE", "OMP_WAIT_POLICY=ACTIVE (set by the user)"]


# ------------------------------------------------------------------------- solver benchmark

@pytest.mark.parametrize("rectangular", [False, True])
def test_solver_benchmark_checks_every_solver_on_a_small_matrix(rectangular):
    """The benchmark's untimed check: equal product counts, iterations and solutions."""
    from autospmv._tools import bench_solver_runs as bench

    A = sp.random(150, 110 if rectangular else 150, density=0.05, format="csr", random_state=7)
    A = (A + sp.eye(*A.shape)).tocsr()
    scipy_side, ops, _ = bench.build_problems(A)
    M = scipy_side["spd"]
    assert M.shape[0] == (260 if rectangular else 150)
    assert np.all(np.linalg.eigvalsh(M.toarray()) > 0)
    for solver in bench.SOLVERS:
        solve, key_op, key_sp = bench.solver_calls(solver, scipy_side)
        record = bench.compare(solver, "small", solve, ops[key_op], scipy_side[key_sp],
                               scipy_side[key_op], rounds=2)
        assert record["same_products"], record
        assert record["products_op"] > 1, record
        assert record["solution_rel_diff"] < 1e-8, record
        assert record["rounds"] == 2


def test_bench_solver_flag_reaches_the_solver_benchmark(capsys):
    from autospmv.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["bench", "--solver", "--solvers", "cg,nope"])
    assert stop.value.code == 2
    assert "unknown solvers ['nope']" in capsys.readouterr().err


def test_bench_solver_refuses_a_folder_without_matrices(tmp_path, capsys):
    from autospmv.__main__ import main

    (tmp_path / "shared").mkdir()  # matrices one folder down are not this folder's
    sp.save_npz(tmp_path / "shared" / "a.npz", sp.eye(3, format="csr"))
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--solver", "--matrices", str(tmp_path), "--quick"])
    assert stop.value.code == 2
    assert "the folder holds no .npz files" in capsys.readouterr().err


def test_bench_solver_runs_on_a_users_folder(tmp_path, capsys):
    """``--quick`` in a folder without the project's quick set takes its first matrices; the
    results go to ``--out``, one record per matrix and solver."""
    import json

    from autospmv.__main__ import main

    folder = tmp_path / "mine"
    folder.mkdir()
    for name, size in (("a_small", 30), ("b_smaller", 20)):
        A = sp.random(size, size, density=0.2, format="csr", random_state=size)
        sp.save_npz(folder / f"{name}.npz", (A + sp.eye(size)).tocsr())
    out = tmp_path / "result.json"
    assert main(["bench", "--solver", "--matrices", str(folder), "--quick", "--solvers", "cg",
                 "--rounds", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    [config] = result["configs"]
    assert config["config"]["env"] == "default"
    assert [(r["matrix"], r["solver"]) for r in config["records"]] == [("a_small", "cg"),
                                                                       ("b_smaller", "cg")]
    assert f"wrote {out}" in capsys.readouterr().err
