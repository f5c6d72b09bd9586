"""The training pipeline: corpus, CPU labelling end to end, metrics by hand, training, CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import autospmv
from autospmv._decide import choosers
from autospmv._decide.features.extract import FEATURE_NAMES, features
from autospmv._decide.model.tree import TreeModel
from autospmv._support.timing import TimingOptions, noise_ratio, relative_error, summary
from autospmv.training import corpus, generators, label, train
from autospmv.training.__main__ import main
from autospmv.training.crossval import FALLBACK_HYPER, GRID, group_splits, hyper_grid
from autospmv.training.dataset import dataset
from autospmv.training.fitting import (MIN_REGIME_MATRICES, OBJECTIVES, Hyper, RegimeHyper, fit,
                                       fit_cost_model, regimes, sample_weights)
from autospmv.training.forecast import Forecast, labelling_seconds
from autospmv.training.metrics import (BANDS, band_rows, chooser_quality, cost_policy,
                                       first_feasible, measure_policy, rule_policy,
                                       selection_metrics, selection_score, tree_policy)
from autospmv.training.records import (LARGE_NNZ, SCHEMA, TIMING_MODES, is_noisy, read_records,
                                       row_noise, target_mode)
from autospmv.training.timing import QUICK, Bench, require_real_gpu
from virtual_clock import VirtualClock

INF = math.inf

# -- corpus ---------------------------------------------------------------------------------


def test_presets():
    tiny, small, default = (corpus.corpus(p) for p in ("tiny", "small", "default"))
    assert len(tiny) >= 8 and all(e.nnz <= 5_000 for e in tiny)
    assert max(e.nnz for e in small) <= 1_000_000
    assert 60 <= len(default) <= 120 and max(e.nnz for e in default) >= 10_000_000
    families = {v[0] for v in corpus.VARIANTS}
    assert {e.family for e in default} == families and len(families) >= 12
    for entries in (tiny, small, default):
        assert len({e.name for e in entries}) == len(entries)
        assert [e.nnz for e in entries] == sorted(e.nnz for e in entries) or entries == tiny
    with pytest.raises(ValueError, match="unknown corpus preset 'huge'; presets: tiny"):
        corpus.corpus("huge")


@pytest.mark.parametrize("variant", corpus.VARIANTS, ids=lambda v: v[1])
def test_generators_are_deterministic_and_sized(variant):
    family, stem, generator, params = variant
    make = generators.GENERATORS[generator]
    A, B = make(stem, 4000, **params), make(stem, 4000, **params)
    assert (A != B).nnz == 0 and A.shape == B.shape
    assert 0.5 * 4000 <= A.nnz <= 1.6 * 4000
    assert A.has_canonical_format and np.all(A.data != 0)


def test_size_tag():
    assert [corpus.size_tag(v) for v in (0, 7, 290378, 960_000, 1e6, 1.04e7)] == \
        ["0", "7e0", "3e5", "1e6", "1e6", "1e7"]


def test_folder_entries(tmp_path):
    A = sp.random(30, 20, density=0.2, format="csr", random_state=0)
    sp.save_npz(tmp_path / "alpha.npz", A)
    scipy.io.mmwrite(tmp_path / "beta.mtx", A.T)
    (tmp_path / "notes.txt").write_text("ignored")
    (tmp_path / "MANIFEST.tsv").write_text("name\tfamily\nalpha\tfem\n")
    entries = corpus.folder_entries(tmp_path)
    assert [(e.name, e.family, e.nnz, e.source) for e in entries] == [
        ("alpha", "fem", A.nnz, str(tmp_path / "alpha.npz")),
        ("beta", "unknown", A.nnz, str(tmp_path / "beta.mtx")),
    ]
    assert (entries[1].load() != A.T).nnz == 0
    assert corpus.folder_entries(tmp_path, max_nnz=A.nnz - 1) == []
    assert {e.name for e in corpus.corpus("tiny", [tmp_path])} >= {"alpha", "beta"}
    with pytest.raises(ValueError, match="two corpus matrices are named 'alpha'"):
        corpus.corpus("tiny", [tmp_path, tmp_path])
    with pytest.raises(ValueError, match="matrix folder .* does not exist"):
        corpus.folder_entries(tmp_path / "missing")


def test_grown_entries(tmp_path):
    A = sp.random(30, 20, density=0.2, format="csr", random_state=0)
    path = tmp_path / "alpha.npz"
    sp.save_npz(path, A)
    files = corpus.folder_entries(tmp_path)
    grown = corpus.grown_entries(files, 10 * A.nnz)
    assert [(e.name, e.family, e.source, e.grown, e.nnz) for e in grown] == [
        ("alpha-x10", "unknown", str(path), 10, 10 * A.nnz)]
    B = grown[0].load()
    assert B.shape == (300, 200) and B.nnz == 10 * A.nnz
    assert (B[60:90, 40:60] != A).nnz == 0 and B[60:90, :40].nnz == 0
    assert corpus.grown_entries(files, A.nnz) == []  # fewer than two copies: not grown
    default = {e.name: e for e in corpus.corpus("default", [tmp_path])}
    copies = round(corpus.PRESETS["default"]["grow_to"] / A.nnz)
    assert default[f"alpha-x{copies}"].grown == copies and default["alpha"].grown == 1
    assert all(e.grown == 1 for e in corpus.corpus("small", [tmp_path]))


def test_grown_in_three_ways(tmp_path):
    A = sp.random(30, 30, density=0.2, format="csr", random_state=1)
    A.setdiag(1.0)
    A = sp.csr_matrix(A)
    path = tmp_path / "alpha.npz"
    sp.save_npz(path, A)
    block, coupled, permuted = (corpus.load_grown(str(path), 4, way) for way in "xcp")
    assert block.shape == coupled.shape == permuted.shape == (120, 120)
    # Coupled: the diagonal blocks are A, neighbouring blocks hold a share of A's entries.
    assert (coupled[30:60, 30:60] != A).nnz == 0
    off = coupled[30:60, 60:90]
    mask = off.toarray() != 0
    assert 0 < off.nnz < A.nnz and np.array_equal(off.toarray()[mask], A.toarray()[mask])
    assert coupled[0:30, 60:90].nnz == 0 and coupled.nnz > block.nnz
    # Permuted: the same rows (as a multiset of lengths) and values, wider bandwidth.
    assert permuted.nnz == block.nnz
    assert sorted(np.diff(permuted.indptr)) == sorted(np.diff(block.indptr))
    assert np.isclose(permuted.sum(), block.sum())

    def bandwidth(M):
        coo = M.tocoo()
        return int(np.abs(coo.row - coo.col).max())

    assert bandwidth(permuted) > 2 * bandwidth(block)
    assert (corpus.load_grown(str(path), 4, "p") != permuted).nnz == 0  # deterministic
    names = [e.name for e in corpus.grown_entries(corpus.folder_entries(tmp_path), 1000,
                                                  ("x", "c", "p"), at_least=True)]
    copies = -(-1000 // A.nnz)
    assert names == [f"alpha-x{copies}", f"alpha-c{copies}", f"alpha-p{copies}"]


def test_kinds_preset_grows_every_long_row_base_to_the_streamed_size(tmp_path):
    short = sp.random(40, 40, density=0.1, format="csr", random_state=2)
    long = sp.lil_matrix((3, 2000))
    long[0, :1500] = 1.0  # one row longer than the preset's row limit
    long[1, :3] = 1.0
    sp.save_npz(tmp_path / "short.npz", short)
    sp.save_npz(tmp_path / "wide.npz", sp.csr_matrix(long))
    spec = corpus.PRESETS["kinds"]
    row_limit, target, ways = spec["long_rows"]
    files = corpus.folder_entries(tmp_path)
    assert [corpus.longest_row(e) for e in files] == [short.getnnz(axis=1).max(), 1500]
    grown = corpus.drawn_grown_entries(files, spec)
    copies = -(-target // files[1].nnz)
    wide = [e for e in grown if e.name.startswith("wide-") and e.nnz >= target]
    assert sorted(e.name for e in wide) == sorted(f"wide-{w}{copies}" for w in ways)
    assert 1500 > row_limit
    # The short base gets only what the draws give it: nothing grown to the target in every way.
    assert len([e for e in grown if e.name.startswith("short-") and e.nnz >= target]) <= 1
    # Drawn by the coins as well, a long-row copy is listed once.
    assert len({e.name for e in grown}) == len(grown)


def test_large_preset_makes_large_matrices_first_class(tmp_path):
    for i in range(6):  # six small "real" files of 500-1000 nonzeros
        A = sp.random(100, 100, density=0.05 + 0.01 * i, format="csr", random_state=i)
        sp.save_npz(tmp_path / f"file{i}.npz", A)
    entries = corpus.corpus("large", [tmp_path])
    large = [e for e in entries if e.nnz >= LARGE_NNZ]
    assert len(large) >= 0.4 * len(entries)
    synthetic = [e for e in entries if e.source == corpus.SYNTHETIC]
    families = {v[0] for v in corpus.VARIANTS}
    for nnz in (1_000_000, 5_000_000, 20_000_000):  # every family at every large size
        at = {e.family for e in synthetic if nnz <= e.nnz < 4 * nnz}
        assert at == families, nnz
    grown = [e for e in entries if e.grown > 1]
    ways = {e.name.rsplit("-", 1)[1][0] for e in grown}
    assert ways == set(corpus.GROWTHS)
    for target in (1_000_000, 5_000_000, 20_000_000):
        assert any(target <= e.nnz < 1.1 * target for e in grown), target
    assert len({e.name for e in entries}) == len(entries)


# -- timing ---------------------------------------------------------------------------------


def test_timing_helpers():
    assert relative_error([3.0, 4.0], [3.0, 4.0]) == 0.0
    assert relative_error([3.0, 4.0], [0.0, 4.0]) == pytest.approx(3 / 4)
    assert relative_error([1e-3], [0.0]) == pytest.approx(1e-3)
    assert summary([3, 1, 2, 10]) == {"median": 2.5, "min": 1.0,
                                      "p90": pytest.approx(7.9), "n": 4}


def test_cpu_bench_times_an_operator():
    A = generators.stencil("bench", 5000, 5)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    x = np.linspace(-1, 1, A.shape[1])
    bench = Bench("cpu", x, A.shape[0], QUICK)
    np.testing.assert_allclose(bench.result(op), A @ x)
    timing = bench.time_all({"op": op})["op"]
    assert timing["per_call"]["n"] >= QUICK.min_repeats
    assert timing["b2b"]["n"] == QUICK.b2b_repeats
    per_call = timing["per_call"]
    assert 0 < per_call["min"] <= per_call["median"] <= per_call["p90"]


class _Recorded:
    """An operator that logs its name on every call; ``fail_after`` calls, it raises."""

    def __init__(self, name, op, log, fail_after=None):
        self.name, self.op, self.log, self.fail_after = name, op, log, fail_after

    def matvec(self, x, out):
        self.log.append(self.name)
        if self.fail_after is not None and self.log.count(self.name) > self.fail_after:
            raise RuntimeError("launch failed")
        return self.op.matvec(x, out=out)


def test_time_all_interleaves_rounds_and_isolates_a_failing_operator():
    A = generators.stencil("bench", 5000, 5)
    op = autospmv.prepare(A, kernel="csr_scalar", device="cpu")
    x = np.linspace(-1, 1, A.shape[1])
    options = dataclasses.replace(QUICK, repeats=9, min_repeats=9, b2b_repeats=3, rounds=3,
                                  max_seconds=1.0, retries=0)  # one attempt: the order is exact
    bench = Bench("cpu", x, A.shape[0], options)
    log = []
    ops = {"a": _Recorded("a", op, log), "b": _Recorded("b", op, log),
           "broken": _Recorded("broken", op, log, fail_after=5)}
    timings = bench.time_all(ops)
    assert isinstance(timings["broken"], RuntimeError)
    for key in "ab":
        assert timings[key]["per_call"]["n"] == 9 and timings[key]["b2b"]["n"] == 3
    # After the warm-ups, a and b alternate: one run of calls per operator and round.
    runs = [name for i, name in enumerate(log) if i == 0 or log[i - 1] != name]
    assert runs[3:] == ["a", "b", "broken", "a", "b", "a", "b"]


class _Flaky:
    """An operator whose first ``noisy_calls`` calls take 3 ms, except every third, 1 ms (a
    contended machine), and which then takes a steady millisecond per call, on ``clock``."""

    def __init__(self, clock: VirtualClock, noisy_calls: int):
        self.clock, self.calls, self.noisy_calls = clock, 0, noisy_calls

    def matvec(self, x, out):
        self.calls += 1
        noisy = self.calls <= self.noisy_calls and self.calls % 3
        self.clock.advance(0.003 if noisy else 0.001)
        return out


def _timed_on(clock: VirtualClock, op, options) -> dict:
    bench = Bench("cpu", np.ones(4), 4, options)
    bench.clock = clock  # the operator's own account of its time, whatever the machine's load
    return bench.time_all({"op": op})["op"]


def test_a_disturbed_timing_is_taken_again_and_the_steadier_attempt_kept():
    options = dataclasses.replace(QUICK, warmup=1, repeats=9, min_repeats=9, b2b_calls=2,
                                  b2b_repeats=3, rounds=1, max_seconds=10.0, retries=2)
    # warm-up 1 + 9 single calls + 3 batches of 2: the whole first attempt is disturbed.
    clock = VirtualClock()
    timing = _timed_on(clock, _Flaky(clock, noisy_calls=16), options)
    assert timing["retimed"] == 1
    assert timing["per_call"]["median"] == pytest.approx(1000)  # the steady millisecond, in µs
    assert noise_ratio(timing) == pytest.approx(1)
    # Never steady: retried up to the limit, and the ratio shows it.
    clock = VirtualClock()
    always = _timed_on(clock, _Flaky(clock, noisy_calls=10**6), options)
    assert always["retimed"] == options.retries
    assert noise_ratio(always) == pytest.approx(3)  # 3 ms calls against 1 ms ones


def test_gpu_timing_refuses_the_simulator(monkeypatch):
    from numba import cuda

    monkeypatch.setattr(cuda.config, "ENABLE_CUDASIM", True)
    with pytest.raises(RuntimeError, match="simulator .* would time a Python interpreter"):
        require_real_gpu()
    with pytest.raises(RuntimeError, match="simulator .* would time a Python interpreter"):
        Bench("cuda", np.ones(4), 4, QUICK)


def test_the_labellers_timer_is_autospmvs():
    """training.timing adds the labeller's parts to autospmv._support.timing (one timer, not a
    copy): its Bench is autospmv's with the simulator refused."""
    from autospmv._support import timing as core

    assert issubclass(Bench, core.Bench) and isinstance(QUICK, core.TimingOptions)
    assert Bench.time_all is core.Bench.time_all


def test_time_calls_samples_a_callable_on_the_devices_clock(monkeypatch):
    from autospmv._support import timing

    readings = iter(range(1, 10**6))

    class Counting(timing.CpuClock):
        def stop(self) -> float:
            return float(next(readings))

    monkeypatch.setattr(timing, "clock", lambda device: Counting())
    calls = []
    result = timing.time_calls(lambda: calls.append(1), "cpu", budget=0.0, min_samples=7)
    assert len(calls) == 8  # one warm-up call, then the samples
    assert result == summary(range(1, 8))


# -- labelling ------------------------------------------------------------------------------


def test_measure_statuses():
    A = autospmv._support.validation.canonicalize(generators.dense_rows("one-dense-row", 4000, 1, 1.0))
    x = np.linspace(-1, 1, A.shape[1])
    y_ref = A @ x
    bench = Bench("cpu", x, A.shape[0], QUICK)
    ok = label.measure(A, label.Config("csr_scalar", {}, "chooser"), bench, y_ref)
    assert ok["status"] == "ok" and ok["feasible"] and ok["error"] < 1e-12
    assert ok["time_per_call_us"] == ok["spread"]["per_call"]["median"] > 0
    assert ok["time_b2b_us"] == ok["spread"]["b2b"]["median"] > 0
    wrong = label.measure(A, label.Config("csr_scalar", {}, "chooser"), bench, 2 * y_ref)
    assert wrong["status"] == "incorrect" and wrong["time_per_call_us"] is None
    assert wrong["reason"].startswith("relative error 0.5 > 1e-12")
    too_wide = label.measure(A, label.Config("ell", {}, "chooser"), bench, y_ref)
    assert too_wide["status"] == "infeasible" and not too_wide["feasible"]
    assert "FormatTooLargeError" in too_wide["reason"]
    bogus = label.measure(A, label.Config("ell", {"bogus": 1}, "chooser"), bench, y_ref)
    assert bogus["status"] == "failed" and "has no parameter 'bogus'" in bogus["reason"]


def test_configurations_cover_every_kernel_and_strategy():
    A = autospmv._support.validation.canonicalize(generators.power_law("configs", 4000, 2.2))
    chosen, variants = label.configurations(A, "cuda")
    assert [c.kernel for c in chosen] == list(autospmv.KERNELS)
    assert all(c.strategy == "chooser" and c.error is None for c in chosen)
    strategies = [(c.kernel, c.strategy) for c in variants]
    assert strategies == [("csr_vector", f"threads_per_row={t}") for t in (2, 4, 8, 16, 32)] + [
        ("hyb", s) for s in choosers.HYB_STRATEGIES] + [
        ("csr5", f"sigma={s}") for s in (4, 6, 8, 12, 16, 24, 32)]
    assert label.configurations(A, "cuda", variants=False)[1] == []
    for device in ("cpu", "cuda"):  # the choosers' parameters are among the variants
        chosen, variants = label.configurations(A, device)
        for config in chosen:
            if config.params:
                assert config.params in [v.params for v in variants if v.kernel == config.kernel]


@pytest.fixture(scope="module")
def tiny_labels(tmp_path_factory):
    out = tmp_path_factory.mktemp("labels") / "tiny.jsonl"
    summary = label.label(corpus.corpus("tiny"), out, "cpu", options=QUICK, progress=False)
    return out, summary


def test_label_tiny_corpus_on_cpu(tiny_labels):
    out, summary = tiny_labels
    entries = corpus.corpus("tiny")
    assert summary["labelled"] == len(entries) and summary["remaining"] == 0
    records = read_records(out)
    assert [r["name"] for r in records] == [e.name for e in entries]
    for record in records:
        assert record["schema"] == SCHEMA and record["dtype"] == "float64"
        assert list(record["features"]) == list(FEATURE_NAMES)
        assert set(record["kernels"]) == set(autospmv.KERNELS)
        assert len(record["variants"]) == len(choosers.THREADS_PER_ROW_VARIANTS) + len(
            choosers.HYB_STRATEGIES) + len(choosers.CSR5_SIGMAS)
        assert record["device"]["device"] == "cpu" and record["versions"]["numba"]
        assert record["features_ms"] > 0 and record["date"]
        ok = {k: r for k, r in record["kernels"].items() if r["status"] == "ok"}
        assert {"coo", "csr_scalar", "csr_vector"} <= set(ok)
        for mode in TIMING_MODES:
            best = record["best"][mode]
            assert ok[best][f"time_{mode}_us"] == min(r[f"time_{mode}_us"] for r in ok.values())
        for result in list(record["kernels"].values()) + record["variants"]:
            assert result["status"] in ("ok", "infeasible", "incorrect", "failed")
            assert (result["time_per_call_us"] is not None) == (result["status"] == "ok")


def test_labelling_resumes(tiny_labels, tmp_path):
    source, _ = tiny_labels
    out = tmp_path / "labels.jsonl"
    lines = source.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # a cut last line
    entries = corpus.corpus("tiny")
    summary = label.label(entries, out, "cpu", options=QUICK, progress=False)
    assert (summary["labelled"], summary["skipped"]) == (1, len(entries) - 1)
    assert [r["name"] for r in read_records(out)] == [e.name for e in entries]
    again = label.label(entries, out, "cpu", options=QUICK, progress=False)
    assert (again["labelled"], again["skipped"]) == (0, len(entries))
    with pytest.raises(ValueError, match="holds float64 labels from device 'cpu'"):
        label.label(entries, out, "cpu", dtype="float32", options=QUICK, progress=False)


def test_labelling_refuses_another_machines_file(tiny_labels, tmp_path):
    """A file labelled on one GPU (or CPU) model is never extended with another's timings."""
    source, _ = tiny_labels
    out = tmp_path / "labels.jsonl"
    records = [json.loads(line) for line in source.read_text().splitlines()]
    for record in records:
        record["device"]["name"] = "Another Processor"
    out.write_text("".join(json.dumps(r) + "\n" for r in records[:-1]))
    with pytest.raises(ValueError, match="timed on 'Another Processor', not on this machine"):
        label.label(corpus.corpus("tiny"), out, "cpu", options=QUICK, progress=False)
    assert len(read_records(out)) == len(records) - 1


def test_budget_stops_cleanly(tmp_path):
    out = tmp_path / "labels.jsonl"
    summary = label.label(corpus.corpus("tiny"), out, "cpu", budget_seconds=0.0,
                          options=QUICK, progress=False)
    assert summary["labelled"] == 0 and summary["remaining"] == len(corpus.corpus("tiny"))
    assert read_records(out) == []


def test_labels_timed_with_other_options_are_not_mixed_in(tiny_labels, tmp_path):
    source, _ = tiny_labels
    out = tmp_path / "labels.jsonl"
    out.write_text(source.read_text())
    entries = corpus.corpus("tiny")
    with pytest.raises(ValueError, match=r"timed with other options \(--quick, this run: full"):
        label.label(entries, out, "cpu", options=TimingOptions(), progress=False)


def _entry(name: str, nnz: int) -> corpus.Entry:
    return corpus.Entry(name, "test", corpus.SYNTHETIC, corpus.size_tag(nnz), nnz, None)


def test_forecast_weighs_matrices_by_their_reference_time():
    """Small matrices first must not make the estimate small: each pending matrix counts with
    its reference time, scaled by the pace measured here."""
    reference = {"small": (10_000, 0.3), "large": (1_000_000, 12.0)}
    forecast = Forecast(reference)
    pending = [_entry("large", 1_000_000), _entry("large-unknown", 2_000_000)]
    # Before any measurement: the reference's own times; an unknown matrix takes the nearest
    # size's time, scaled up by nonzeros.
    assert forecast.remaining(pending) == pytest.approx(12.0 + 24.0)
    forecast.record(_entry("small", 10_000), 0.6)  # this machine runs at half the pace
    assert forecast.speed == pytest.approx(2.0)
    assert forecast.remaining(pending) == pytest.approx(2 * 36.0)
    # Counting matrices would have said 2 x 0.6 s.


def test_forecast_without_reference_uses_size():
    forecast = Forecast()
    a, b = Forecast.FALLBACK
    assert forecast.remaining([_entry("x", 10**6)]) == pytest.approx(a + b * 10**6)


def test_labelling_seconds_are_the_gaps_between_records():
    records = [{"name": n, "nnz": z, "date": d} for n, z, d in [
        ("a", 10, "2026-01-01T00:00:00+00:00"), ("b", 20, "2026-01-01T00:00:02+00:00"),
        ("c", 30, "2026-01-01T00:00:07+00:00")]]
    assert labelling_seconds(records) == {"b": (20, 2.0), "c": (30, 5.0)}


def test_label_reports_its_estimate(tmp_path):
    summary = label.label(corpus.corpus("tiny")[:1], tmp_path / "x.jsonl", "cpu",
                          budget_seconds=0.0, options=QUICK, progress=False)
    assert summary["estimated_seconds"] > 0


def test_label_compiles_first_then_estimates_the_labelling(tmp_path, capsys):
    """The kernels are compiled (or loaded from the cache) before the estimate is printed, so
    the estimate is of the labelling alone, and the budget it names is what compiling left."""
    summary = label.label(corpus.corpus("tiny")[:2], tmp_path / "x.jsonl", "cpu",
                          budget_seconds=600.0, options=QUICK, progress=False)
    err = capsys.readouterr().err
    compiled = err.index("compiled (or loaded from the cache) every kernel in ")
    estimate = err.index("labelling 2 matrices")
    assert compiled < estimate
    assert re.search(r"the budget stops it after \d+ min more;", err)
    assert summary["warm_up_seconds"] > 0 and summary["labelled"] == 2


@pytest.mark.requires_gpu
def test_label_on_a_real_gpu(tmp_path):
    out = tmp_path / "gpu.jsonl"
    entries = corpus.corpus("tiny")[:3]
    assert label.label(entries, out, "cuda", options=QUICK, progress=False)["labelled"] == 3
    for record in read_records(out):
        assert record["device"]["device"] == "cuda" and record["device"]["compute_capability"]
        ok = [r for r in record["kernels"].values() if r["status"] == "ok"]
        assert len(ok) >= 5 and all(r["time_b2b_us"] > 0 for r in ok)
        assert record["best"]["per_call"] in record["kernels"]


def test_read_records_rejects_foreign_lines(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"schema": "other"}\n')
    with pytest.raises(ValueError, match="line 1 of .* is not an autospmv label record"):
        read_records(path)
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1 of .* is not valid JSON"):
        read_records(path)


def test_tiny_end_to_end_through_the_cli(tiny_labels, tmp_path, capsys):
    labels, _ = tiny_labels
    model_path, report = tmp_path / "model.json", tmp_path / "report.md"
    assert main(["train", str(labels), "--out", str(model_path), "--report", str(report),
                 "--folds", "3"]) == 0
    model = TreeModel.load(model_path)
    sha = hashlib.sha256(labels.read_bytes()).hexdigest()
    assert model.provenance["labels"] == [{"file": labels.name, "sha256": sha, "records": 9}]
    assert model.provenance["device"]["device"] == "cpu"
    A = generators.uniform_random("unseen", 3000, 6)
    assert model.predict(features(A)) in autospmv.KERNELS
    assert "## All policies" in report.read_text()
    assert "(objectives: correction)" in report.read_text()
    assert main(["train", str(labels), "--out", str(model_path), "--report", str(report),
                 "--folds", "3", "--objectives", "fastest", "quality"]) == 0
    assert "(objectives: fastest, quality)" in report.read_text()
    assert TreeModel.load(model_path).ranking == "value"
    assert main(["corpus", "--corpus", "tiny", "--matrices"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(corpus.corpus("tiny"))
    assert main(["train", str(tmp_path / "missing.jsonl"), "--out", str(model_path)]) == 2
    assert "error:" in capsys.readouterr().err


# -- metrics by hand --------------------------------------------------------------------------


def test_selection_metrics_by_hand():
    times = np.array([[1.0, 2.0, INF], [4.0, 2.0, 3.0], [5.0, 5.0, 10.0]])
    m = selection_metrics(times, np.array([1, 2, 0]))  # q = 1/2, 2/3, 1
    assert m == {"n": 3, "geomean": pytest.approx((1 / 3) ** (1 / 3)),
                 "geomean_feasible": pytest.approx((1 / 3) ** (1 / 3)),
                 "within_10pct": pytest.approx(1 / 3), "worst": 0.5,
                 "top1": pytest.approx(1 / 3), "top1_tie5": pytest.approx(1 / 3), "misses": 0}
    m = selection_metrics(times, np.array([2, 1, -1]))  # a miss and no choice
    assert (m["geomean"], m["geomean_feasible"], m["misses"], m["worst"]) == (0.0, 1.0, 2, 0.0)
    assert m["top1"] == pytest.approx(1 / 3)
    near = selection_metrics(np.array([[1.0, 1.04, 1.08]]), np.array([1]))
    assert (near["top1"], near["top1_tie5"], near["within_10pct"]) == (0.0, 1.0, 1.0)
    far = selection_metrics(np.array([[1.0, 1.04, 1.2]]), np.array([2]))
    assert (far["top1_tie5"], far["within_10pct"]) == (0.0, 0.0)


def test_scores_weights_and_fallback_by_hand():
    times = np.array([[1.0, 4.0, INF], [2.0, 2.0, 8.0]])
    assert selection_score(times, np.array([2, 1])) == pytest.approx(np.log(1 / 4) / 2)
    np.testing.assert_allclose(sample_weights(times, "ratio"), [4.0, 4.0])
    np.testing.assert_allclose(sample_weights(times, "log_ratio"), 1 + np.log([4, 4]))
    np.testing.assert_allclose(sample_weights(times, "none"), [1, 1])
    with pytest.raises(ValueError, match="unknown weighting 'cubic'"):
        sample_weights(times, "cubic")
    ranking = np.array([[2, 1, 0], [2, 1, 0]])
    np.testing.assert_array_equal(first_feasible(times, ranking), [1, 2])
    np.testing.assert_array_equal(
        first_feasible(np.array([[INF, INF]]), np.array([[1, 0]])), [-1])


def test_measure_policy_keeps_the_fastest_of_the_first_feasible_candidates():
    times = np.array([[3.0, 1.0, 2.0, 0.5],    # fastest (col 3) ranked last: not a candidate
                      [INF, 4.0, 2.0, 1.0],    # col 0 infeasible: candidates 1, 2, 3
                      [INF, INF, INF, INF]])
    ranking = np.array([[0, 2, 1, 3], [0, 1, 2, 3], [0, 1, 2, 3]])
    np.testing.assert_array_equal(measure_policy(times, ranking, 3), [1, 3, -1])
    np.testing.assert_array_equal(measure_policy(times, ranking, 1),
                                  first_feasible(times, ranking))


# -- training on fabricated labels ------------------------------------------------------------


def _record(name, family, source, times: dict, **feats):
    """A label record whose per-call and back-to-back times are ``times`` (None: infeasible)."""
    kernels = {}
    for k in autospmv.KERNELS:
        t = times.get(k, 1000.0)
        status = "ok" if t is not None else "infeasible"
        kernels[k] = {"params": {}, "status": status, "feasible": t is not None,
                      "reason": None, "error": 0.0, "prepare_ms": 1.0,
                      "time_per_call_us": t, "time_b2b_us": None if t is None else t / 2,
                      "spread": None}
    return {"schema": SCHEMA, "name": name, "family": family, "source": source,
            "size": "1e5", "shape": [10, 10], "nnz": feats.get("nnz", 1e5), "dtype": "float64",
            "features": {f: float(feats.get(f, 0.0)) for f in FEATURE_NAMES},
            "kernels": kernels, "variants": [], "best": {}}


def _fabricated(n_per_family: int = 6, seed: int = 0) -> list[dict]:
    """Families where the best kernel follows row_max: ≤ 16 → ell, ≤ 1000 → csr_vector,
    else csr5 (ell infeasible there); three synthetic families and two real ones."""
    rng = np.random.default_rng(seed)
    records = []
    families = [("stencil", "synthetic"), ("graph", "synthetic"), ("lp", "synthetic"),
                ("fem", "/data/fem"), ("web", "/data/web")]
    for family, source in families:
        for i in range(n_per_family):
            row_max = float(rng.choice([4, 8, 12, 64, 300, 900, 5000, 20000]))
            best = "ell" if row_max <= 16 else "csr_vector" if row_max <= 1000 else "csr5"
            times = {"ell": 10.0 if best == "ell" else (30.0 if row_max <= 1000 else None),
                     "csr_vector": 10.0 if best == "csr_vector" else 25.0,
                     "csr5": 10.0 if best == "csr5" else 14.0}
            records.append(_record(f"{family}-{i}", family, source, times, row_max=row_max,
                                   nnz=float(rng.integers(1e4, 1e7)),
                                   row_cv=float(rng.uniform(0, 3))))
    return records


def test_training_learns_a_clean_rule():
    # One cross-validation on GroupKFold's folds: shuffled repeats may leave a kernel's only
    # examples out of a training part (test_repeated_cross_validation covers them). Ten
    # matrices per family: an inner training part then holds enough of them for the tree's gain
    # over the cost model alone to exceed its standard error (with six, 18 matrices, it did not).
    result = train.train(_fabricated(10), n_splits=3, repeats=1)
    cv = result.scores["cv"]
    assert cv["tree"]["geomean"] == pytest.approx(1.0) and cv["tree"]["misses"] == 0
    assert cv["always ell"]["misses"] > 0
    assert all(cv["tree"]["geomean"] > m["geomean"] for k, m in cv.items() if k != "tree")
    model = result.model
    for record in _fabricated(seed=1):
        best = min((r["time_per_call_us"], k) for k, r in record["kernels"].items()
                   if r["status"] == "ok")[1]
        assert model.predict(record["features"]) == best
    assert set(result.scores["lofo"]) == {"fem", "web"}
    assert all(r["tree"]["geomean"] == pytest.approx(1.0) for r in result.scores["lofo"].values())
    for section in ("## Nested cross-validation", "## All policies", "## Real matrices",
                    "## Tree", "hand rule", "always csr5"):
        assert section in result.report
    assert model.provenance["hyperparameters"] == {
        "max_depth": result.scores["hyper"].max_depth,
        "min_samples_leaf": result.scores["hyper"].min_samples_leaf,
        "weighting": result.scores["hyper"].weighting,
        "corrected": result.scores["hyper"].corrected}


def test_grown_copies_leave_with_their_family_and_are_not_scored_as_real():
    records = _fabricated()
    grown = [dict(r, name=r["name"] + "-x4", grown=4) for r in records if r["family"] == "fem"]
    ds, _ = dataset(records + grown)
    assert ds.real.sum() == 18 and ds.as_given.sum() == 12
    result = train.train(records + grown, n_splits=3)
    assert result.scores["lofo_all"]["n"] == 12  # the real files as given only
    assert "-x4" not in result.report.split("## Real matrices")[1].split("## Tree")[0]


def test_one_group_cannot_be_cross_validated():
    records = [r for r in _fabricated() if r["family"] == "stencil"]
    result = train.train(records, n_splits=3)
    assert result.scores["hyper"] == FALLBACK_HYPER and result.scores["folds"] == []
    assert result.scores["cv"]["tree"] is None
    assert result.model.provenance["cv_selection_score"] is None
    assert "## Nested cross-validation" not in result.report
    TreeModel.from_dict(json.loads(result.model.to_json()))


def test_labels_from_two_devices_are_refused():
    a, b = _fabricated()[:2]
    a["device"], b["device"] = {"name": "GPU A"}, {"name": "GPU B"}
    with pytest.raises(ValueError, match="the labels come from different devices"):
        train.train([a, b])


def test_b2b_mode_and_dataset_checks():
    records = _fabricated()
    ds, dropped = dataset(records + [_record("broken", "x", "synthetic",
                                                   dict.fromkeys(autospmv.KERNELS))], "b2b")
    assert dropped == ["broken"] and len(ds) == len(records)
    assert ds.times[0].min() == 5.0 and set(ds.groups) >= {"fem/real", "lp/synthetic"}
    with pytest.raises(ValueError, match="appears in more than one label record .* start over "
                                         "with `autospmv retrain --fresh`"):
        dataset(records + records[:1])
    with pytest.raises(ValueError, match="unknown timing mode 'wall'"):
        dataset(records, "wall")
    odd = dict(records[0], name="odd", features={"row_max": 1.0})
    with pytest.raises(ValueError, match="has different feature names"):
        dataset(records + [odd])


def test_hand_rule_and_tree_fallback():
    records = [_record("small", "a", "synthetic", {}, nnz=1e5, row_max=10),
               _record("many", "a", "synthetic", {}, nnz=2e6, row_max=10),
               _record("long", "a", "synthetic", {}, nnz=1e5, row_max=2000)]
    ds, _ = dataset(records)
    names = np.array(ds.kernels)[rule_policy(ds)]
    assert names.tolist() == ["csr_vector", "csr5", "csr5"]
    # A tree that always predicts ell falls back to its next class where ell is infeasible.
    rows = [_record(f"r{i}", "a", "synthetic", {"ell": 1.0 if i % 3 else None, "coo": 2.0})
            for i in range(9)]
    ds, _ = dataset(rows)
    clf = fit(ds, np.arange(len(ds)), Hyper(1, 1, "none"))
    chosen = np.array(ds.kernels)[tree_policy(clf, ds, np.arange(len(ds)))]
    assert chosen.tolist() == ["coo" if i % 3 == 0 else "ell" for i in range(9)]


def _costed(n: int = 48, seed: int = 0, noise: float = 0.0) -> list[dict]:
    """Records whose times follow a known linear cost model of random cost quantities:
    t_k = fixed_k + bytes_k / rate_k + span_k / 4, times exp(noise · N(0, 1))."""
    rng = np.random.default_rng(seed)
    fixed = dict(zip(autospmv.KERNELS, (11.0, 8.0, 8.0, 8.0, 10.0, 8.0, 13.0)))
    rate = dict(zip(autospmv.KERNELS, (2e5, 1e5, 3e5, 3.5e5, 3e5, 2.5e5, 3.5e5)))
    records = []
    for i in range(n):
        feats = {"rows": float(rng.integers(1e3, 1e6)), "nnz": float(rng.integers(1e4, 1e7)),
                 "row_max": float(rng.integers(1, 5000))}
        times = {}
        for k in autospmv.KERNELS:
            feats[f"{k}_bytes"] = float(feats["nnz"] * rng.uniform(8, 40))
            feats[f"{k}_span"] = float(rng.integers(1, 200))
            times[k] = (fixed[k] + feats[f"{k}_bytes"] / rate[k] + feats[f"{k}_span"] / 4) * \
                math.exp(noise * rng.standard_normal())
        records.append(_record(f"m{i}", f"family{i % 4}", "synthetic", times, **feats))
    return records


def test_cost_model_recovers_known_coefficients():
    ds, _ = dataset(_costed(), "per_call")  # the known model is of per-call times
    cost_model = fit_cost_model(ds, np.arange(len(ds)))
    assert cost_model.kernels == autospmv.KERNELS
    coefficients = dict(zip(cost_model.kernels, cost_model.coefficients))
    np.testing.assert_allclose(coefficients["coo"], [11.0, 0, 0, 0, 0, 1 / 2e5, 0, 0.25, 0, 0],
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(coefficients["csr5"], [13.0, 0, 0, 0, 0, 1 / 3.5e5, 0, 0.25, 0, 0],
                               rtol=1e-6, atol=1e-9)
    # Exact estimates: the cost model alone picks the fastest kernel everywhere.
    chosen = cost_policy(cost_model, ds, np.arange(len(ds)))
    assert selection_metrics(ds.times, chosen)["geomean"] == pytest.approx(1.0)


def test_hyper_grid():
    assert {h.objective for h in GRID} == {"correction"}
    assert {h.max_depth for h in GRID} == {0, 1, 2, 3, 4}
    assert {h.min_samples_leaf for h in GRID} == {4, 8}
    assert GRID[0] == Hyper(0, 8, "none", "correction", corrected=False)
    assert GRID[1] == Hyper(0, 8, "none", "correction")
    wide = hyper_grid(OBJECTIVES)
    assert {h.objective for h in wide} == set(OBJECTIVES)
    assert not any(h.max_depth == 0 for h in wide if h.objective != "correction")
    for bad in ((), ("deepest",)):
        with pytest.raises(ValueError, match="objectives must be among"):
            hyper_grid(bad)


def test_a_deeper_setting_must_beat_the_simpler_by_more_than_one_standard_error():
    from autospmv.training.crossval import _best

    simple, deep = GRID[0], GRID[5]
    # Two kernels; 40 matrices. Kernel 0 is fastest on all but two. The deep setting picks
    # kernel 1 on four matrices: 10 % faster on two of them, 9 % slower on the other two. Its
    # score is the better one, by a gain smaller than its spread...
    times = np.ones((40, 2))
    times[:, 1] = 2.0
    times[36:38] = [1.1, 1.0]
    times[38:] = [1.0, 1.09]
    chosen = {simple: np.zeros(40, dtype=np.int64),
              deep: np.r_[np.zeros(36), np.ones(4)].astype(np.int64)}
    rows = np.arange(40)
    scores = {h: selection_score(times, chosen[h]) for h in chosen}
    assert scores[deep] > scores[simple]
    assert _best([simple, deep], times, chosen, rows) == (simple, pytest.approx(scores[simple]))
    # ...but a gain of 2x on half the matrices is kept.
    times[20:] = [[2.0, 1.0]]
    chosen[deep] = np.r_[np.zeros(20), np.ones(20)].astype(np.int64)
    hyper, score = _best([simple, deep], times, chosen, rows)
    assert hyper == deep and score == pytest.approx(0.0)
    # Equal scores: the simpler wins.
    chosen[simple] = chosen[deep].copy()
    assert _best([simple, deep], times, chosen, rows)[0] == simple


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_exported_model_ranks_like_the_fitted_one(objective):
    records = _costed(noise=0.3)
    ds, _ = dataset(records)
    fitted = fit(ds, np.arange(len(ds)), Hyper(3, 2, "log_ratio", objective))
    model = TreeModel.from_dict(json.loads(fitted.export({"test": True}).to_json()))
    assert model.ranking == ("correction" if objective == "correction" else "value")
    assert set(model.feature_names) >= {f"est_{k}" for k in autospmv.KERNELS}
    expected = fitted.ranking(ds, np.arange(len(ds)))
    for record, order in zip(records, expected):
        assert model.ranked(record["features"]) == [ds.kernels[c] for c in order]


def test_a_kernel_that_never_ran_is_estimated_as_the_slowest():
    records = _costed()
    for record in records:
        record["kernels"]["ell"].update(status="infeasible", time_per_call_us=None)
    ds, _ = dataset(records)
    cost_model = fit_cost_model(ds, np.arange(len(ds)))
    assert cost_model.kernels == autospmv.KERNELS
    row = dict(zip(cost_model.kernels, cost_model.coefficients))["ell"]
    assert row[0] == np.max(ds.times[np.isfinite(ds.times)]) and not row[1:].any()


def test_uncorrected_leaf_is_the_cost_model_alone():
    ds, _ = dataset(_costed(noise=0.3))
    rows = np.arange(len(ds))
    fitted = fit(ds, rows, Hyper(0, 8, "none", "correction", corrected=False))
    assert fitted.export().n_nodes == 1
    assert (fitted.tree.predict_proba(fitted.inputs(ds, rows)) == 0).all()
    assert (tree_policy(fitted, ds, rows)
            == cost_policy(fitted.cost_model, ds, rows)).all()
    with pytest.raises(ValueError, match="uncorrected tree is the correction objective"):
        Hyper(1, 8, "none", "correction", corrected=False)


def test_label_records_from_before_launches_get_them_from_their_features(tmp_path):
    # A record written before launches were counted reads as one written now.
    A = sp.random(3000, 3000, density=0.002, format="csr", random_state=4)
    A.data[:] = 1.0
    now = features(A, device="cuda")
    old = {k: v for k, v in now.items() if not k.endswith("_launches")}
    record = {"schema": SCHEMA, "name": "m", "features": old}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (read,) = read_records(path)
    assert list(read["features"]) == list(FEATURE_NAMES)
    assert read["features"] == now


def test_depth_zero_is_the_cost_model_with_one_correction_per_kernel():
    ds, _ = dataset(_costed(noise=0.3))
    fitted = fit(ds, np.arange(len(ds)), Hyper(0, 1, "none", "correction"))
    model = fitted.export()
    assert model.n_nodes == 1
    with pytest.raises(ValueError, match="max_depth 0 is only meaningful"):
        fit(ds, np.arange(len(ds)), Hyper(0, 1, "none", "fastest"))


def _two_regimes(n: int = 60, seed: int = 0) -> list[dict]:
    """Records half below LARGE_NNZ nonzeros, half above, whose times follow a different
    known cost model in each regime: per call (small) t_k = fixed_k + bytes_k / rate_k; back to
    back (large) t_k = bytes_k / rate'_k, where csr5 streams fastest and coo slowest."""
    rng = np.random.default_rng(seed)
    fixed = dict(zip(autospmv.KERNELS, (11.0, 8.0, 8.0, 8.0, 10.0, 8.0, 13.0)))
    rate = dict(zip(autospmv.KERNELS, (2e5, 1e5, 3e5, 3.5e5, 3e5, 2.5e5, 3.5e5)))
    b2b_rate = dict(zip(autospmv.KERNELS, (1e6, 1.5e6, 2e6, 2e6, 1.5e6, 1.5e6, 3e6)))
    records = []
    for i in range(n):
        large = i % 2 == 1
        nnz = float(rng.integers(1.1e6, 1e7) if large else rng.integers(1e4, 9e5))
        feats = {"rows": float(rng.integers(1e3, 1e6)), "nnz": nnz,
                 "row_max": float(rng.integers(1, 5000))}
        for k in autospmv.KERNELS:
            feats[f"{k}_bytes"] = float(nnz * rng.uniform(8, 40))
        times = {k: fixed[k] + feats[f"{k}_bytes"] / rate[k] for k in autospmv.KERNELS}
        record = _record(f"m{i}", f"family{i % 6}", "synthetic", times, **feats)
        for k in autospmv.KERNELS:
            record["kernels"][k]["time_b2b_us"] = feats[f"{k}_bytes"] / b2b_rate[k]
        records.append(record)
    return records


def test_matrices_streamed_from_memory_get_a_cost_table_of_their_own():
    """From STREAMED_NNZ nonzeros the times follow other rates (memory, not the L2 cache): with
    enough matrices on both sides the cost model fits them a third table and recovers both."""
    from autospmv.training import fitting

    ds, _ = train.dataset(_three_regimes())
    cost_model = fitting.fit_cost_model(ds, np.arange(len(ds)))
    assert [start for start, _ in cost_model.regimes] == [LARGE_NNZ, fitting.STREAMED_NNZ]
    scalar = cost_model.kernels.index("csr_scalar")
    bytes_column = 1 + list(cost_model.REGRESSORS[1:]).index("bytes")
    assert cost_model.regimes[0][1][scalar, bytes_column] == pytest.approx(1 / 1.5e6, rel=1e-6)
    assert cost_model.regimes[1][1][scalar, bytes_column] == pytest.approx(1 / 3e6, rel=1e-6)
    chosen = train.cost_policy(cost_model, ds, np.arange(len(ds)))
    assert train.selection_metrics(ds.times, chosen)["geomean"] == pytest.approx(1.0)
    # Too few streamed matrices: the large regime keeps one table.
    few = np.concatenate([np.flatnonzero(ds.nnz < fitting.STREAMED_NNZ),
                          np.flatnonzero(ds.nnz >= fitting.STREAMED_NNZ)[:fitting.MIN_REGIME_MATRICES - 1]])
    assert len(fitting.fit_cost_model(ds, few).regimes) == 1


def _three_regimes() -> list[dict]:
    """:func:`_two_regimes` with a third of the records moved to STREAMED_NNZ nonzeros or more,
    where the times follow other rates (memory, not the L2 cache)."""
    from autospmv.training import fitting

    records = _two_regimes(n=90)
    rng = np.random.default_rng(1)
    streamed_rate = dict(zip(autospmv.KERNELS, (5e5, 3e6, 1e6, 1e6, 1e6, 1e6, 1e6)))
    for record in records[1::3]:
        nnz = float(rng.integers(fitting.STREAMED_NNZ, 3 * fitting.STREAMED_NNZ))
        record["nnz"] = record["features"]["nnz"] = nnz
        for k in autospmv.KERNELS:
            record["features"][f"{k}_bytes"] = nnz * rng.uniform(8, 40)
            record["kernels"][k]["time_b2b_us"] = (record["features"][f"{k}_bytes"]
                                                   / streamed_rate[k])
    return records


def test_streamed_matrices_get_a_tree_of_their_own():
    from autospmv.training import fitting

    records = _three_regimes()
    ds, _ = dataset(records)
    rows = np.arange(len(ds))
    small, large = regimes(ds, rows)
    cached, streamed = fitting.streamed_split(ds, large)
    assert (ds.nnz[cached] < fitting.STREAMED_NNZ).all()
    assert (ds.nnz[streamed] >= fitting.STREAMED_NNZ).all() and streamed.size == 30
    assert fitting.streamed_split(ds, np.concatenate(
        [cached, streamed[:MIN_REGIME_MATRICES - 1]])) is None
    hyper = RegimeHyper(Hyper(0, 4, "none", "correction"), Hyper(1, 4, "none", "correction"),
                        Hyper(2, 4, "none", "correction"))
    assert hyper.as_dict()["streamed"] == hyper.streamed.as_dict()
    fitted = fit(ds, rows, hyper)
    model = TreeModel.from_dict(json.loads(fitted.export({"test": True}).to_json()))
    right = model.children_right[0]
    assert model.feature_names[model.feature[right]] == "nnz"
    # float32 has no halves above 2**23: the split sends STREAMED_NNZ - 1 left, STREAMED_NNZ
    # right.
    assert (np.float32(fitting.STREAMED_NNZ - 1) <= model.threshold[right]
            < np.float32(fitting.STREAMED_NNZ))
    assert model.n_node_samples[model.children_left[right]] == cached.size
    assert model.n_node_samples[model.children_right[right]] == streamed.size
    for record, order in zip(records, fitted.ranking(ds, rows)):
        assert model.ranked(record["features"]) == [ds.kernels[c] for c in order]
    # Each part's tree was fitted with its own hyperparameters.
    below, (cached_tree, streamed_tree) = fitted.tree.parts[0], fitted.tree.parts[1].parts
    assert below.regressor.min_samples_split == small.size + 1  # depth 0: one leaf
    assert (cached_tree.regressor.max_depth, streamed_tree.regressor.max_depth) == (1, 2)
    with pytest.raises(ValueError, match="need one objective"):
        RegimeHyper(Hyper(1, 4, "none", "correction"), Hyper(1, 4, "none", "correction"),
                    Hyper(1, 4, "none", "fastest"))
    result = train.train(records, n_splits=3, repeats=1)
    chosen = result.scores["hyper"]
    assert isinstance(chosen, RegimeHyper) and chosen.streamed is not None
    assert result.model.provenance["hyperparameters"]["streamed"] == chosen.streamed.as_dict()
    assert "streamed (from 10,000,000, back-to-back)" in result.report


def test_two_size_regimes_get_their_own_cost_model_and_tree():
    records = _two_regimes()
    ds, _ = dataset(records)
    assert ds.large_nnz == LARGE_NNZ and ds.large.sum() == 30
    rows = np.arange(len(ds))
    small, large = regimes(ds, rows)
    assert (ds.nnz[small] < LARGE_NNZ).all() and (ds.nnz[large] >= LARGE_NNZ).all()
    # One timing mode for every row, or too few matrices on one side: one regime.
    assert regimes(dataset(records, "per_call")[0], rows) is None
    assert regimes(ds, np.concatenate([small, large[:MIN_REGIME_MATRICES - 1]])) \
        is None
    cost_model = fit_cost_model(ds, rows)
    assert cost_model.large_nnz == LARGE_NNZ
    coo, csr5 = cost_model.kernels.index("coo"), cost_model.kernels.index("csr5")
    np.testing.assert_allclose(cost_model.coefficients[coo],
                               [11.0, 0, 0, 0, 0, 1 / 2e5, 0, 0, 0, 0], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(cost_model.large_coefficients[csr5],
                               [0, 0, 0, 0, 0, 1 / 3e6, 0, 0, 0, 0], rtol=1e-6, atol=1e-9)
    chosen = cost_policy(cost_model, ds, rows)
    assert selection_metrics(ds.times, chosen)["geomean"] == pytest.approx(1.0)
    # Each regime's tree has its own hyperparameters under a root split on nnz.
    hyper = RegimeHyper(Hyper(0, 4, "none", "correction"),
                              Hyper(2, 4, "ratio", "correction"))
    fitted = fit(ds, rows, hyper, cost_model)
    model = TreeModel.from_dict(json.loads(fitted.export({"test": True}).to_json()))
    assert model.schema_version == 2
    assert model.feature_names[model.feature[0]] == "nnz"
    assert model.threshold[0] == np.float32(LARGE_NNZ - 0.5)
    left, right = model.children_left[0], model.children_right[0]
    assert model.children_left[left] == -1  # depth 0 below: one leaf
    assert model.n_node_samples[left] == small.size and model.n_node_samples[right] == large.size
    for record, order in zip(records, fitted.ranking(ds, rows)):
        assert model.ranked(record["features"]) == [ds.kernels[c] for c in order]
    with pytest.raises(ValueError, match="need one objective"):
        RegimeHyper(Hyper(1, 4, "none", "correction"),
                          Hyper(1, 4, "none", "fastest"))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_two_regime_trees_of_every_objective_export_as_fitted(objective):
    records = _two_regimes(seed=1)
    for record in records:  # csr5 never wins on a small matrix: a classifier there lacks it
        if record["nnz"] < LARGE_NNZ:
            record["kernels"]["csr5"]["time_per_call_us"] = 1e6
    ds, _ = dataset(records)
    fitted = fit(ds, np.arange(len(ds)), Hyper(2, 2, "none", objective))
    below, above = fitted.tree.parts
    if objective == "fastest":
        assert "csr5" not in below.classes_ and "csr5" in above.classes_
    assert list(fitted.tree.classes_) == [k for k in ds.kernels
                                          if k in set(below.classes_) | set(above.classes_)]
    model = TreeModel.from_dict(json.loads(fitted.export().to_json()))
    for record, order in zip(records, fitted.ranking(ds, np.arange(len(ds)))):
        assert model.ranked(record["features"]) == [ds.kernels[c] for c in order]


def test_training_in_two_regimes_chooses_per_regime_and_reports_both():
    result = train.train(_two_regimes(), n_splits=3, repeats=1)
    hyper = result.scores["hyper"]
    assert isinstance(hyper, RegimeHyper)
    assert result.model.provenance["hyperparameters"] == {"small": hyper.small.as_dict(),
                                                          "large": hyper.large.as_dict()}
    assert all(isinstance(fold.hyper, RegimeHyper) for fold in result.scores["folds"])
    assert result.scores["cv"]["tree"]["geomean"] > 0.95
    report = result.report
    # Times here follow a cost model exactly, so the cost model alone may win a regime.
    small = ("the cost model alone (a single leaf correcting nothing)"
             if not hyper.small.corrected else f"max_depth={hyper.small.max_depth}, ")
    assert "per size regime, each by the out-of-fold score on its own matrices: small " \
           f"(below 1,000,000 nonzeros, per call) {small}" in report
    assert "its root splitting the regimes on nnz." in report
    assert "From 1,000,000 nonzeros (back-to-back times):" in report
    assert "| small correction/" in report or "| small cost model alone;" in report
    assert json.loads(result.model.to_json())["schema_version"] == 3  # two regimes and defaults


def test_labels_without_cost_quantities_are_refused():
    record = _record("old", "a", "synthetic", {})
    record["features"] = {f: v for f, v in record["features"].items() if "_work" not in f}
    with pytest.raises(ValueError, match="lack features this trainer needs.*relabel"):
        dataset([record])


def test_chooser_quality_by_hand():
    record = _record("v", "a", "synthetic", {"csr_vector": 10.0})
    record["variants"] = [
        {"kernel": "csr_vector", "strategy": "threads_per_row=2", "status": "ok",
         "time_per_call_us": 5.0},
        {"kernel": "csr_vector", "strategy": "threads_per_row=4", "status": "ok",
         "time_per_call_us": 10.0},
    ]
    quality = chooser_quality([record])["csr_vector"]
    assert {s: q["geomean"] for s, q in quality.items()} == {
        "threads_per_row=2": 1.0, "threads_per_row=4": 0.5, "chooser": 0.5}
    assert quality["chooser"]["within_10pct"] == 0.0


def test_train_files_records_hashes(tmp_path):
    path = tmp_path / "fab.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _fabricated()))
    result = train.train_files([path], tmp_path / "m" / "model.json", tmp_path / "r.md",
                               n_splits=3)
    loaded = TreeModel.load(tmp_path / "m" / "model.json")
    assert loaded.to_dict() == result.model.to_dict()
    assert loaded.provenance["labels"][0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (tmp_path / "r.md").read_text() == result.report


# -- robust labels, size rule, evaluation, guard, per-dtype install -------------------------


def _with_spread(record: dict, ratio: float, mode: str = "per_call") -> dict:
    """``record`` with recorded spreads: every ok kernel's median/min is 1.1, and in ``mode``
    the first ok kernel's is ``ratio``."""
    record = json.loads(json.dumps(record))
    first = True
    for result in record["kernels"].values():
        if result["status"] != "ok":
            continue
        spread = {}
        for m in TIMING_MODES:
            t = result[f"time_{m}_us"]
            r = ratio if (m == mode and first) else 1.1
            spread[m] = {"median": t, "min": t / r, "p90": t, "n": 10}
        result["spread"] = spread
        first = False
    return record


def test_size_rule_picks_the_timing_mode():
    assert target_mode(LARGE_NNZ - 1) == "per_call"
    assert target_mode(LARGE_NNZ) == "b2b"
    assert target_mode(10, "b2b") == "b2b" and target_mode(10**8, "per_call") == \
        "per_call"
    with pytest.raises(ValueError, match="unknown timing mode 'wall'"):
        target_mode(10, "wall")
    small = _record("small", "a", "synthetic", {"coo": 10.0, "csr5": 12.0}, nnz=1e5)
    large = _record("large", "a", "synthetic", {"coo": 10.0, "csr5": 12.0}, nnz=2e6)
    large["kernels"]["csr5"]["time_b2b_us"] = 3.0  # csr5 wins back-to-back only
    ds, _ = dataset([small, large])
    assert ds.labels.tolist() == ["coo", "csr5"]
    assert ds.times[0, ds.kernels.index("coo")] == 10.0  # per call below the threshold
    ds, _ = dataset([small, large], "per_call")
    assert ds.labels.tolist() == ["coo", "coo"]


def test_a_noisy_label_row_is_excluded_and_counted():
    records = _fabricated()
    steady = [_with_spread(r, 1.2) for r in records]
    noisy_small = _with_spread(dict(records[0], name="noisy-small", nnz=1e5), 2.0)
    # Disturbed per call only, but decided back-to-back (≥ 10⁶ nonzeros): kept.
    large_ok = _with_spread(dict(records[1], name="large-ok", nnz=2e6), 2.0, "per_call")
    noisy_large = _with_spread(dict(records[2], name="noisy-large", nnz=2e6), 1.6, "b2b")
    assert [is_noisy(r) for r in (steady[0], noisy_small, large_ok, noisy_large)] == \
        [False, True, False, True]
    assert row_noise(noisy_small["kernels"])["per_call"] == pytest.approx(2.0)
    ds, _ = dataset(steady + [noisy_small, large_ok, noisy_large])
    assert ds.noisy == ["noisy-small", "noisy-large"]
    assert "noisy-small" not in ds.names and "large-ok" in ds.names
    result = train.train(steady + [noisy_small, large_ok, noisy_large], n_splits=3, repeats=1)
    assert result.model.provenance["noisy_excluded"] == 2
    assert result.model.provenance["matrices"] == len(steady) + 1
    assert "Left out as noisy (a kernel's median time above 1.5 × its minimum after " \
           "re-timing): 2 matrices (noisy-small, noisy-large)." in result.report


def test_repeated_cross_validation_size_bands_and_held_out_matrices():
    records = _fabricated()
    held_names = ["fem-0", "webfile"]  # a matrix; a real file (its grown copy goes with it)
    grown = dict(records[-1], name="web-0-x4", grown=4, source="/data/webfile.npz")
    records[-2]["source"] = "/data/webfile.npz"
    result = train.train(records + [grown], n_splits=3, repeats=3, holdout=held_names)
    scores = result.scores
    assert len(scores["repeats"]) == 3
    geomeans = [m["geomean"] for m in scores["repeats"]]
    assert scores["cv"]["tree"]["geomean"] == pytest.approx(np.mean(geomeans))
    held = scores["held_out"]
    assert sorted(held["names"]) == ["fem-0", "web-0-x4", records[-2]["name"]]
    assert held["all"]["tree"]["n"] == 3 and "always csr5" in held["all"]
    measured = held["all"][f"tune='measure' (top {autospmv._prepare.tuning.TUNE_CANDIDATES})"]
    assert measured["geomean"] >= held["all"]["tree"]["geomean"]  # the tree's pick is a candidate
    assert result.model.provenance["held_out"] == 3
    assert result.model.provenance["matrices"] == len(records) - 2
    ds, _ = dataset(records)
    bands = {band[0]: band_rows(ds, band).size for band in BANDS}
    assert sum(bands.values()) == len(ds)
    trained = [r for r in records if r["name"] not in ("fem-0", records[-2]["name"])]
    ds, _ = dataset(trained)
    for band in BANDS:
        rows = band_rows(ds, band)
        if rows.size:
            assert scores["bands"][band[0]]["always coo"]["n"] == rows.size
    assert "## By size (nonzeros), out of fold" in result.report
    assert "## Held-out matrices (3; never used for training or tuning)" in result.report
    def tests(seed):
        return sorted(tuple(ds.groups[te][:1]) + tuple(te) for _, te in
                      group_splits(ds.groups, 3, seed))

    assert len({str(tests(seed)) for seed in range(1, 6)}) > 1, "shuffling changes the folds"
    for seed in (None, 1, 2):
        for tr, te in group_splits(ds.groups, 3, seed):
            assert not set(ds.groups[tr]) & set(ds.groups[te])


def _one_kernel_wins(n: int = 30) -> list[dict]:
    """Labels where csr_scalar is always fastest: no tree can beat "always csr_scalar"."""
    rng = np.random.default_rng(3)
    return [_record(f"m{i}", f"family{i % 5}", "synthetic",
                    {"csr_scalar": 10.0, "coo": float(rng.uniform(11, 30)),
                     "csr5": float(rng.uniform(11, 30))}, row_max=float(rng.integers(1, 900)),
                    nnz=float(rng.integers(1e4, 1e6)))
            for i in range(n)]


def test_guard_against_the_best_fixed_kernel():
    verdict = train.train(_fabricated(), n_splits=3, repeats=1).scores["guard"]
    assert verdict["passed"] and verdict["tree"] > verdict["best_fixed_geomean"]
    verdict = train.train(_one_kernel_wins(), n_splits=3, repeats=1).scores["guard"]
    assert not verdict["passed"] and verdict["best_fixed"] == "csr_scalar"
    assert verdict["reason"].startswith("cross-validated geomean q ")
    assert "≤ always csr_scalar 1.0000" in verdict["reason"]


def _as_labels(records, path, dtype):
    from autospmv._decide.model.store import cpu_model

    device = {"device": "cpu", "name": cpu_model()}  # labels of this machine: retrain extends them
    with open(path, "w") as handle:
        for r in records:
            handle.write(json.dumps(dict(r, dtype=dtype, device=device)) + "\n")
    return path


def _retrain(labels, dtype):
    # A labelling budget too small for any new matrix: train on the labels given.
    return main(["retrain", "--device", "cpu", "--dtype", dtype, "--labels", str(labels),
                 "--budget-minutes", "1e-9", "--matrices"])


@pytest.mark.slow
def test_a_float32_retrain_never_replaces_the_float64_model(tmp_path, monkeypatch, capsys):
    from autospmv._decide.model import lookup
    from autospmv._decide.model.store import device_slug, user_model_path

    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    slug = device_slug("cpu")
    assert _retrain(_as_labels(_fabricated(), tmp_path / "l64.jsonl", "float64"),
                    "float64") == 0
    path64 = user_model_path(slug, "float64")
    before = path64.read_bytes()
    assert TreeModel.load(path64).provenance["dtype"] == "float64"
    assert _retrain(_as_labels(_fabricated(seed=5), tmp_path / "l32.jsonl", "float32"),
                    "float32") == 0
    path32 = user_model_path(slug, "float32")
    assert path32.name == f"{slug}-float32.json" and path64.name == f"{slug}-float64.json"
    assert path64.read_bytes() == before
    assert TreeModel.load(path32).provenance["dtype"] == "float32"
    assert lookup.find_model("cpu", dtype="float32").path == path32
    assert lookup.find_model("cpu", dtype="float64").path == path64
    A = generators.stencil("dtype", 3000, 5)
    decision = autospmv.select(A.astype(np.float32), device="cpu")
    assert decision.source == f"model {path32.name}"
    assert "a float32 model, deciding for a float32 matrix" in decision.notes
    assert "installed " in capsys.readouterr().err


@pytest.mark.slow
def test_a_model_worse_than_the_best_fixed_kernel_is_not_installed(tmp_path, monkeypatch,
                                                                    capsys):
    from autospmv._decide.model.store import device_slug, user_model_path

    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "home"))
    path = user_model_path(device_slug("cpu"), "float64")
    assert _retrain(_as_labels(_one_kernel_wins(), tmp_path / "bad.jsonl", "float64"),
                    "float64") == 0
    assert not path.exists()
    err = capsys.readouterr().err
    assert "not installed (no model installed): cross-validated geomean q" in err
    assert "the best fixed kernel (always csr_scalar) would do better" in err
    assert _retrain(_as_labels(_fabricated(), tmp_path / "good.jsonl", "float64"),
                    "float64") == 0
    good, report = path.read_bytes(), path.with_suffix(".md").read_text()
    assert not path.with_suffix(".rejected.md").exists()  # the first run's, replaced
    assert _retrain(_as_labels(_one_kernel_wins(), tmp_path / "bad.jsonl", "float64"),
                    "float64") == 0
    assert path.read_bytes() == good
    assert path.with_suffix(".md").read_text() == report  # the installed model's report
    rejected = path.with_suffix(".rejected.md")
    assert rejected.read_text() != report
    assert f"not installed (kept {path})" in capsys.readouterr().err


def test_retrain_holds_the_labels_lock_while_it_labels_and_trains(tmp_path, monkeypatch):
    import fcntl

    from autospmv.training import __main__ as cli

    lock = tmp_path / "labels.jsonl.lock"

    def held() -> bool:
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    seen = []

    def train_files(*args, **kwargs):
        seen.append(("train", held()))
        raise RuntimeError("stopped after training")

    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cli, "_label", lambda *args: seen.append(("label", held())))
    monkeypatch.setattr(train, "train_files", train_files)
    assert main(["retrain", "--device", "cpu", "--labels", str(tmp_path / "labels.jsonl"),
                 "--matrices"]) == 2
    assert seen == [("label", True)] * 2 + [("train", True)]  # the CPU's probe labels first
    assert not held()


def test_two_labelling_runs_on_one_file_take_turns(tmp_path):
    """Two processes start labelling the tiny corpus into one file while its lock is held
    (here, by the test): both wait, then one labels every matrix and the other finds them
    labelled; the file holds each matrix once."""
    import fcntl
    import os
    import subprocess
    import sys
    import time

    out = tmp_path / "labels.jsonl"
    command = [sys.executable, "-m", "autospmv.training", "label", "--device", "cpu",
               "--corpus", "tiny", "--quick", "--no-variants", "--jobs", "1", "--matrices",
               "--out", str(out)]
    environment = dict(os.environ, TQDM_DISABLE="1")
    logs = [tmp_path / "first.err", tmp_path / "second.err"]
    with open(tmp_path / "labels.jsonl.lock", "a") as lock, open(logs[0], "w") as first, \
            open(logs[1], "w") as second:
        fcntl.flock(lock, fcntl.LOCK_EX)
        runs = [subprocess.Popen(command, stderr=err, env=environment)
                for err in (first, second)]
        waiting = f"waiting for another run that writes {out} to finish"
        deadline = time.monotonic() + 300
        while not all(waiting in log.read_text() for log in logs):
            assert time.monotonic() < deadline and all(r.poll() is None for r in runs), [
                log.read_text()[-2000:] for log in logs]
            time.sleep(0.1)
        fcntl.flock(lock, fcntl.LOCK_UN)
        codes = [run.wait(timeout=600) for run in runs]
    assert codes == [0, 0], [log.read_text()[-2000:] for log in logs]
    summaries = sorted(log.read_text().split("labelled ")[1][:2] for log in logs)
    assert summaries == ["0 ", "9 "]
    names = [record["name"] for record in read_records(out)]
    assert sorted(names) == sorted(e.name for e in corpus.corpus("tiny"))


# -- retrain's probe on the CPU, its lock and the files it writes ------------------------------


def _timed_record(name: str, nnz: int, times: dict[str, float]) -> dict:
    """A label record with these per-call (and back-to-back) times per kernel."""
    kernels = {k: {"status": "ok", "time_per_call_us": t, "time_b2b_us": t}
               for k, t in times.items()}
    return {"name": name, "nnz": nnz, "kernels": kernels}


def test_probe_reads_the_oracle_gain_over_the_rule():
    from autospmv.training.probe import MIN_GAIN, oracle_gain

    even = [_timed_record(f"m{i}", 10_000, {"csr_scalar": 10.0, "coo": 10.5}) for i in range(3)]
    found = oracle_gain(even, "csr_scalar")
    assert found.gain == 0.0 and not found.worth_labelling
    assert "oracle gain 0.000 < 0.05 on 3 probe matrices" in found.reason
    assert "fastest csr_scalar   1.00× csr_scalar's speed" in found.report()
    faster = even + [_timed_record("m3", 10_000, {"csr_scalar": 10.0, "coo": 5.0})]
    found = oracle_gain(faster, "csr_scalar")
    assert found.gain == pytest.approx(0.125) and found.gain >= MIN_GAIN and found.worth_labelling
    assert oracle_gain(even[:2], "csr_scalar").worth_labelling  # too few matrices: no verdict


def test_probe_takes_one_matrix_per_family_and_size():
    from autospmv.training.probe import PROBE_SIZES, probe_entries

    entries = corpus.corpus("small", [])
    chosen = probe_entries(entries)
    assert [e.size for e in chosen] == sorted((e.size for e in chosen), key=PROBE_SIZES.index)
    for size in PROBE_SIZES:
        families = [e.family for e in chosen if e.size == size]
        assert sorted(families) == sorted({e.family for e in entries if e.size == size})


def test_retrain_on_the_cpu_stops_when_no_kernel_can_beat_the_rule(tmp_path, monkeypatch,
                                                                   capsys):
    """The probe's verdict stops the run before the whole corpus is labelled: its figures are
    printed and kept as the run's rejected report, the labels so far stay and no lock remains."""
    from autospmv.training import probe

    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.delenv("AUTOSPMV_MATRICES", raising=False)
    monkeypatch.setattr(probe, "PROBE_SIZES", ("3e3",))  # the tiny corpus's size
    monkeypatch.setattr(probe, "MIN_GAIN", 2.0)  # a gain no labels can show
    labels = tmp_path / "labels.jsonl"
    assert main(["retrain", "--device", "cpu", "--corpus", "tiny", "--quick",
                 "--labels", str(labels)]) == 0
    err = capsys.readouterr().err
    # without --matrices the run says that it labels generated matrices only (retraining.md)
    assert "no --matrices (nor $AUTOSPMV_MATRICES): labelling the tiny corpus's generated " \
           "matrices only" in err
    assert "not labelling the whole corpus: no kernel beats the built-in rule (csr_scalar)" in err
    assert "a perfect choice among the kernels would take" in err
    rejected = list((tmp_path / "models").glob("*.rejected.md"))
    assert len(rejected) == 1 and rejected[0].read_text().startswith("Not installed: no kernel")
    assert not list((tmp_path / "models").glob("*.json"))
    assert len(read_records(labels)) == 9 and not labels.with_name("labels.jsonl.lock").exists()


def test_the_labels_lock_is_removed_after_a_failure(tmp_path):
    from autospmv.training.records import labels_lock

    path = tmp_path / "labels.jsonl"
    with pytest.raises(RuntimeError):
        with labels_lock(path):
            assert (tmp_path / "labels.jsonl.lock").exists()
            raise RuntimeError("the run failed")
    assert list(tmp_path.iterdir()) == []
    with labels_lock(path):  # and it can be taken again
        pass


def test_a_run_waiting_for_the_lock_takes_the_fresh_one(tmp_path):
    """A second run that waited on the lock file the first deleted locks the new file at the
    path, so that a third run cannot hold the lock beside it."""
    import threading

    from autospmv.training.records import labels_lock

    path = tmp_path / "labels.jsonl"
    lock = tmp_path / "labels.jsonl.lock"
    inside, release, order = threading.Event(), threading.Event(), []

    def first():
        with labels_lock(path):
            inside.set()
            release.wait(30)
            order.append("first")

    def second():
        inside.wait(30)
        with labels_lock(path):
            order.append("second")
            assert lock.exists()  # the file it holds is the one at the path

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    [t.start() for t in threads]
    inside.wait(30)
    release.set()
    [t.join(30) for t in threads]
    assert order == ["first", "second"] and not lock.exists()


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_written_files_get_the_umasks_mode(tmp_path, umask):
    """Models, reports and rejected reports are written atomically through a private temporary
    file, but end with the mode a plain open() would give them."""
    import os

    from autospmv._decide.model.store import write_atomically

    previous = os.umask(umask)
    try:
        write_atomically(tmp_path / "report.md", "text")
    finally:
        os.umask(previous)
    assert (tmp_path / "report.md").stat().st_mode & 0o777 == 0o666 & ~umask


def test_train_refuses_an_output_folder_that_does_not_exist(tmp_path, capsys):
    missing = tmp_path / "missing" / "model.json"
    assert main(["train", str(tmp_path / "labels.jsonl"), "--out", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"the folder {missing.parent} does not exist (it is not created)" in err
    assert not missing.parent.exists()
