"""The command lines: ``python -m autospmv`` and the label files that
``python -m autospmv.training`` reads.

Commands run in-process through ``main([...])``; output is captured with ``capsys``. User mistakes
must end with exit status 2 and a one-line message on stderr, never a traceback.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest
import scipy.sparse as sp

import autospmv
from autospmv import __main__ as cli
from autospmv._decide.model.tree import TreeModel
from matrices import poisson2d
from autospmv.training import label
from autospmv.training.records import append_record, read_records
from autospmv.training.__main__ import main as training_main

REPO = Path(__file__).resolve().parent.parent
GPU_MODEL = REPO / "models" / "cuda-nvidia-h200-float64.json"
GPU_LABELS = REPO / "models" / "labels" / "cuda-nvidia-h200-float64.jsonl.gz"


@pytest.fixture(autouse=True)
def isolated_lookup(monkeypatch, tmp_path):
    """No AUTOSPMV_MODEL, an empty per-user folder and the GPU model as the only shipped one,
    so that the CPU has no model (whatever CPU models are shipped later)."""
    monkeypatch.delenv("AUTOSPMV_MODEL", raising=False)
    monkeypatch.setenv("AUTOSPMV_HOME", str(tmp_path / "autospmv-home"))
    monkeypatch.setattr(autospmv._decide.model.lookup, "shipped_models",
                        lambda: {"cuda-nvidia-h200-float64": GPU_MODEL})


@pytest.fixture
def matrix_file(tmp_path) -> Path:
    path = tmp_path / "poisson.npz"
    sp.save_npz(path, poisson2d(12))
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def assert_user_error(status: int, err: str, command: str, message: str) -> None:
    assert status == 2
    assert err.startswith(f"autospmv {command}: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "explain", "bench", "info", "models", "retrain"):
        assert command in out


def test_explain_without_a_model_for_the_cpu(capsys, matrix_file):
    status, out, _ = run(capsys, "explain", str(matrix_file), "--device", "cpu")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"{matrix_file}: 144×144, 672 nonzeros, on cpu"
    assert lines[1].startswith("model: none for cpu-") and lines[1].count(" float64 ") == 1
    assert "the built-in rule decides: csr_scalar for every matrix" in lines[1]
    assert lines[2] == "kernel csr_scalar (no parameters), chosen by rule"
    assert lines[3] == "  device = cpu → csr_scalar"


def test_explain_with_a_model_file_shows_it_and_the_path(capsys, matrix_file):
    status, out, _ = run(capsys, "explain", str(matrix_file), "--device", "cpu",
                         "--model", str(GPU_MODEL))
    assert status == 0
    lines = out.splitlines()
    model = autospmv._decide.model.lookup.load_model(GPU_MODEL)
    assert lines[1] == (f"model: {GPU_MODEL} (passed as model=; trained on NVIDIA H200, "
                        f"{model.provenance['trained'][:10]}); a float64 model, deciding for "
                        "float64 matrices")
    assert lines[2].endswith("chosen by model cuda-nvidia-h200-float64.json")
    # The path from the root, with the feature values read.
    root = model.feature_names[model.feature[0]]
    root_value = model.inputs(autospmv.features(sp.load_npz(matrix_file)))[root]
    assert lines[3].startswith(f"  {root} = {root_value:.4g} ")


def test_explain_for_a_gpu_on_a_machine_without_one(capsys, matrix_file, monkeypatch):
    """Deciding needs no GPU: the CLI decides as ``autospmv.select(A, device="cuda")`` does,
    says each fact once and explains every feature on the path in one line."""
    monkeypatch.setattr(autospmv._support.devices, "cuda_available", lambda: False)
    status, out, err = run(capsys, "explain", str(matrix_file), "--device", "cuda")
    assert status == 0, err
    decision = autospmv.select(sp.load_npz(matrix_file), device="cuda")
    lines = out.splitlines()
    assert lines[0].startswith(f"{matrix_file}: 144×144, 672 nonzeros, on cuda (no usable GPU")
    assert lines[1].startswith(f"model: {GPU_MODEL} (shipped for cuda-nvidia-h200, the nearest")
    assert lines[2] == decision.explain().splitlines()[0]
    assert out.count("trained on NVIDIA H200") == 1  # the model is described once
    leaf_notes = [line for line in lines if "the path ends in leaf" in line]
    assert len(leaf_notes) == 1
    node = int(re.search(r"the path ends in leaf (\d+)", leaf_notes[0]).group(1))
    corrects = TreeModel.load(GPU_MODEL).corrects(node)
    ranks_by = "smallest corrected estimate" if corrects else "smallest estimate"
    assert f"{ranks_by} (µs, best first): {decision.kernel} " in leaf_notes[0]
    glossary_lines = lines[lines.index("features on the path:") + 1:]
    used = list(dict.fromkeys(step.split(" = ")[0] for step in decision.path))
    assert [line.split()[0] for line in glossary_lines] == used
    for name, line in zip(used, glossary_lines):
        assert line.endswith(autospmv._tools.glossary.FEATURE_DESCRIPTIONS[name])


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing.npz", "no such file: "),
    (lambda tmp: _write(tmp / "garbage.npz", b"not a zip archive"),
     "garbage.npz: not an .npz archive (the zip file scipy.sparse.save_npz writes)"),
    (lambda tmp: _write(tmp / "matrix.csv", b"1,2\n"), "unsupported file type '.csv'"),
], ids=["missing", "unreadable", "wrong-type"])
def test_explain_reports_bad_files_in_one_line(capsys, tmp_path, make, message):
    status, _, err = run(capsys, "explain", str(make(tmp_path)))
    assert_user_error(status, err, "explain", message)
    assert "pickle" not in err


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_bad_model_is_a_user_error(capsys, tmp_path, matrix_file, monkeypatch):
    broken = _write(tmp_path / "broken.json", b"{")
    status, _, err = run(capsys, "explain", str(matrix_file), "--model", str(broken))
    assert_user_error(status, err, "explain", "bad model for cpu: ")
    assert "broken.json is not a valid JSON model file" in err
    monkeypatch.setenv("AUTOSPMV_MODEL", str(tmp_path / "gone.json"))
    status, _, err = run(capsys, "info")
    assert_user_error(status, err, "info", "gone.json' does not exist")


def test_bench_a_tiny_matrix_on_the_cpu(capsys, matrix_file):
    status, out, _ = run(capsys, "bench", str(matrix_file), "--device", "cpu")
    assert status == 0
    for row in (*autospmv.KERNELS, "SciPy"):
        assert f"  {row:11s}" in out
    assert "picked csr_scalar" in out and "quality " in out and "× SciPy's speed" in out
    # Deciding is reported against SciPy's product (the README's figure) and prepare() in all,
    # conversion included, against the picked kernel's SpMV: two different numbers, each named.
    assert "deciding (features and prediction, select()) took " in out
    assert "× SciPy's A @ x on the CPU (" in out
    assert "prepare() in all (deciding, conversion to csr, set-up) took " in out


@pytest.mark.slow
def test_bench_prints_the_spread_over_repeats(capsys, matrix_file, monkeypatch):
    """Each row is the median, min and max of the per-call medians of --repeats measurements,
    and the speed against SciPy's is given per repeat too (a clock whose readings grow by one
    µs per measurement)."""
    from autospmv._support import timing

    class Growing(_FixedClock):
        reading = 0.0

        def stop(self) -> float:
            return self.reading

    clock = Growing()
    real_time_all = timing.Bench.time_all

    def time_all(self, rows):
        clock.reading += 1.0
        return real_time_all(self, rows)

    monkeypatch.setattr(timing, "clock", lambda device: clock)
    monkeypatch.setattr(timing.Bench, "time_all", time_all)
    status, out, _ = run(capsys, "bench", str(matrix_file), "--device", "cpu", "--repeats", "3")
    assert status == 0 and "over 3 repeats" in out
    assert f"  {'SciPy':11s} {2.0:10.1f}  {1.0:8.1f}  {3.0:8.1f}\n" in out


def test_bench_on_the_gpu_says_when_cusparse_cannot_be_timed(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes the import fail
    assert cli.baseline(poisson2d(4), "cuda", []) == ("cuSPARSE", None)


class _FixedClock:
    """A clock whose every reading is 7 µs."""

    def start(self) -> None:
        pass

    def stop(self) -> float:
        return 7.0


def test_demo_and_bench_time_with_autospmvs_timer(capsys, matrix_file, monkeypatch):
    """Every figure demo and bench print comes from autospmv._support.timing's clocks: with a clock
    reading 7 µs, every time printed is 7 µs, SciPy's row in bench's table too."""
    from autospmv._support import timing

    monkeypatch.setattr(timing, "clock", lambda device: _FixedClock())
    status, out, _ = run(capsys, "bench", str(matrix_file), "--device", "cpu")
    assert status == 0
    assert "median       min       max  µs per call over 5 repeats" in out
    for row in (*autospmv.KERNELS, "SciPy"):
        assert f"  {row:11s} {7.0:10.1f}  {7.0:8.1f}  {7.0:8.1f}\n" in out
    assert "picked csr_scalar (7.0 µs), best " in out and "quality 1.000" in out
    assert "1.00× SciPy's speed (per repeat 1.00–1.00×)" in out
    assert ("deciding (features and prediction, select()) took 0.01 ms = 1.0× SciPy's A @ x on "
            "the CPU (0.01 ms) = 1 SpMVs of csr_scalar") in out
    assert "prepare() in all (deciding, conversion to csr, set-up) took 0.01 ms = 1 SpMVs" in out
    monkeypatch.setattr(cli, "demo_matrices", lambda: {"Poisson 8×8": poisson2d(8)})
    status, out, _ = run(capsys, "demo")
    assert status == 0
    assert "      7.0 µs per call vs SciPy       7.0 µs (1.00×), relative error " in out


def test_a_reader_that_goes_away_ends_the_output_quietly(tmp_path):
    """``autospmv info | head``: the pipe closes before autospmv writes; it stops with the
    closed pipe's status (141) and nothing on stderr, not a BrokenPipeError traceback."""
    import subprocess

    process = subprocess.Popen([sys.executable, "-m", "autospmv", "info"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # long before the interpreter has imported autospmv
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141
    assert stderr == ""


def test_models_remove_deletes_rejected_reports_too(capsys):
    """A retrain whose model the guard rejected leaves ``<model>.rejected.md``, beside an
    installed model or alone; ``models --remove`` deletes it with the rest."""
    folder = autospmv._decide.model.store.user_data_dir() / "models"
    folder.mkdir(parents=True)
    installed = folder / "cpu-test-float64.json"
    installed.write_bytes(GPU_MODEL.read_bytes())
    files = [installed, folder / "cpu-test-float64.md", folder / "cpu-test-float64.rejected.md",
             folder / "cpu-test-float32.rejected.md"]  # no float32 model was ever installed
    for file in files[1:]:
        file.write_text("report")
    status, out, _ = run(capsys, "models", "--remove", "cpu-test-float32")
    assert status == 0 and f"removed {files[3]}" in out and files[0].exists()
    status, out, _ = run(capsys, "models", "--remove")
    assert status == 0
    assert [file.exists() for file in files] == [False] * 4
    assert all(f"removed {file}" in out for file in files[:3])


def test_info_names_the_model_and_why(capsys, monkeypatch, tmp_path):
    status, out, _ = run(capsys, "info")
    assert status == 0
    assert out.startswith(f"autospmv {autospmv.__version__}, numba ")
    model_lines = [line for line in out.splitlines() if line.startswith("model: ")]
    assert [line.split()[4] for line in model_lines] == ["float64", "float32"]  # one per dtype
    assert all("none for cpu-" in line and "cuda-nvidia-h200" in line
               and "rule decides: csr_scalar for every matrix" in line for line in model_lines)
    cpu_model = _as_cpu_model(tmp_path)
    monkeypatch.setenv("AUTOSPMV_MODEL", str(cpu_model))
    status, out, _ = run(capsys, "info")
    assert f"model: {cpu_model} (from AUTOSPMV_MODEL; trained on a test CPU" in out


def _as_cpu_model(tmp_path) -> Path:
    """The GPU model's tree in a file whose provenance says it was trained on a CPU."""
    doc = json.loads(GPU_MODEL.read_text())
    doc["provenance"]["device"] = {"device": "cpu", "name": "a test CPU"}
    path = tmp_path / "cpu-model.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_cpu_model_in_the_environment_does_not_decide_for_the_gpu(capsys, monkeypatch,
                                                                     tmp_path, matrix_file):
    """AUTOSPMV_MODEL naming a CPU model decides on the CPU only: for the GPU the shipped GPU
    model decides, with one warning that says why."""
    cpu_model = _as_cpu_model(tmp_path)
    monkeypatch.setenv("AUTOSPMV_MODEL", str(cpu_model))
    A = poisson2d(12)
    assert autospmv.select(A, device="cpu").notes[0].startswith("model cpu-model.json (from "
                                                               "AUTOSPMV_MODEL")
    with pytest.warns(RuntimeWarning, match="is a model for cpu, so it does not decide for cuda"):
        decision = autospmv.select(A, device="cuda")
    assert decision.source == "model cuda-nvidia-h200-float64.json"
    status, out, _ = run(capsys, "explain", "--device", "cuda", str(matrix_file))
    assert status == 0 and "model: " in out and "AUTOSPMV_MODEL" not in out


def test_demo_on_a_small_set(capsys, monkeypatch):
    monkeypatch.setattr(cli, "demo_matrices", lambda: {"Poisson 8×8": poisson2d(8)})
    status, out, _ = run(capsys, "demo")
    assert status == 0
    assert "Poisson 8×8: 64×64, 288 nonzeros" in out and "relative error" in out


def test_retrain_delegates_to_the_training_pipeline(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["retrain", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: autospmv retrain") and "--budget-minutes" in out


def test_retrain_without_the_training_extra(capsys, monkeypatch, tmp_path):
    """One line naming the extra, from either program, and no lock left behind."""
    monkeypatch.setitem(sys.modules, "tqdm", None)  # makes the import fail
    status, _, err = run(capsys, "retrain", "--device", "cpu", "--corpus", "tiny")
    assert_user_error(status, err, "retrain", "pip install 'autospmv[training]'")
    assert "needs tqdm" in err
    home = tmp_path / "autospmv-home"
    assert not (list(home.rglob("*.lock")) if home.exists() else [])
    assert training_main(["retrain", "--device", "cpu", "--corpus", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m autospmv.training retrain: error: ")
    assert "pip install 'autospmv[training]'" in err and "Traceback" not in err


def test_the_readme_names_the_training_extra_for_retrain():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    lines = [line for line in readme.splitlines() if "retrain" in line and "pip install" in line]
    assert any("[training]" in line for line in lines), lines


# -- gzip-compressed label files ------------------------------------------------------------


@pytest.fixture(scope="module")
def some_labels() -> list[dict]:
    """The GPU label records of two synthetic and two real families (21 matrices)."""
    families = {"stencil2d", "dense-rows", "fem", "circuit"}
    return [r for r in read_records(GPU_LABELS) if r["family"] in families]


def test_training_reads_gzip_labels(tmp_path, some_labels, capsys):
    plain, packed = tmp_path / "labels.jsonl", tmp_path / "labels.jsonl.gz"
    text = "".join(json.dumps(r) + "\n" for r in some_labels)
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert read_records(packed) == read_records(plain) == some_labels
    model = tmp_path / "model.json"
    assert training_main(["train", str(packed), "--out", str(model), "--folds", "3"]) == 0
    assert "## All policies" in capsys.readouterr().out
    provenance = autospmv._decide.model.tree.TreeModel.load(model).provenance
    assert provenance["labels"][0]["file"] == "labels.jsonl.gz"
    assert provenance["labels"][0]["records"] == len(some_labels)


def _as_cpu_labels(records: list[dict]) -> list[dict]:
    """The records as if labelled on this machine's CPU, so that a CPU labelling run may resume
    them."""
    from autospmv._decide.model.store import cpu_model

    return [dict(r, device=dict(r["device"], device="cpu", name=cpu_model())) for r in records]


def test_gzip_labels_resume_after_a_cut(tmp_path, some_labels):
    records = _as_cpu_labels(some_labels[:3])
    path = tmp_path / "labels.jsonl.gz"
    for record in records:
        append_record(path, record)
    path.write_bytes(path.read_bytes()[:-20])  # the last record's gzip member cut short
    assert read_records(path) == records[:2]
    summary = label.label([], path, "cpu", progress=False)  # resumes: nothing left to label
    assert (summary["labelled"], summary["skipped"]) == (0, 0)
    assert gzip.decompress(path.read_bytes()).decode().count("\n") == 2  # cut member dropped
    append_record(path, records[2])
    assert read_records(path) == records


def test_gzip_label_file_must_be_named_gz(tmp_path, some_labels):
    records = _as_cpu_labels(some_labels[:1])
    path = tmp_path / "labels.jsonl"
    path.write_bytes(gzip.compress((json.dumps(records[0]) + "\n").encode()))
    assert read_records(path) == records  # reading recognises gzip by its content
    with pytest.raises(ValueError, match="is gzip-compressed but its name says otherwise"):
        label.label([], path, "cpu", progress=False)


@pytest.mark.slow
def test_retrain_can_be_restarted_and_undone(capsys, monkeypatch):
    """The documented life cycle: retrain installs a model in the data folder, `models` shows
    it in use, labels timed differently are not mixed in, `--fresh` starts over and
    `models --remove` brings the shipped (here: no CPU) model back."""
    monkeypatch.setenv("TQDM_DISABLE", "1")
    # The install guard on nine noisy quick timings could go either way; this test is about the
    # life cycle, so the guard passes here (it has tests of its own).
    import autospmv.training.train

    real_guard = autospmv.training.train.guard
    monkeypatch.setattr(autospmv.training.train, "guard",
                        lambda cv: {**real_guard(cv), "passed": True, "reason": "test"})
    home = autospmv._decide.model.store.user_data_dir()
    slug = autospmv._decide.model.store.device_slug("cpu")
    model = home / "models" / f"{slug}-float64.json"
    labels = home / "labels" / f"{slug}-float64.jsonl"
    quick = ["retrain", "--device", "cpu", "--corpus", "tiny", "--quick"]
    assert cli.main(quick) == 0
    err = capsys.readouterr().err
    assert "labelling 9 matrices (27,000 nonzeros) on cpu: about " in err
    assert f"installed {model}" in err and labels.is_file()

    status, out, _ = run(capsys, "models")
    assert status == 0
    installed = (f"installed by `autospmv retrain` ({home / 'models'}):\n"
                 f"  {slug}-float64.json (trained ")
    assert installed in out
    assert f"  cpu  float64 {model} (retrained on this machine)" in out

    assert cli.main(["retrain", "--device", "cpu", "--corpus", "tiny"]) == 2  # full timing
    assert "timed with other options (--quick, this run: full timing)" in capsys.readouterr().err

    assert cli.main(quick + ["--fresh"]) == 0
    err = capsys.readouterr().err
    assert f"--fresh: deleted the earlier labels {labels}" in err
    assert "labelled 9 matrices" in err and "0 were already in" in err

    status, out, _ = run(capsys, "models", "--remove")
    assert status == 0 and not model.exists() and not model.with_suffix(".md").exists()
    assert f"removed {model}\n" in out and labels.is_file()
    assert f"kept the labels of {slug}-float64 in {labels.parent}" in out
    assert "  cpu  float64 none: the built-in rule decides" in out
    status, _, err = run(capsys, "models", "--remove", slug)
    assert_user_error(status, err, "models", f"no installed model {slug}; installed: none")


# -- user errors: one line, exit status 2, checked before any work ----------------------------


def _parsers() -> list:
    """Every argparse parser of the command lines: ``autospmv`` and its commands, the solver
    benchmark of ``autospmv bench --solver``, the training pipeline and its commands."""
    import argparse

    from autospmv._tools.bench_solvers import build_parser as solver_bench_parser
    from autospmv.training.__main__ import _parser as training_parser

    found = []

    def walk(parser):
        found.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(cli.build_parser())
    walk(solver_bench_parser())
    walk(training_parser("autospmv"))
    return found


def test_every_command_and_argument_has_help(capsys):
    parsers = _parsers()
    missing = [f"{parser.prog} {action.dest}" for parser in parsers for action in parser._actions
               if action.help is None and action.dest != "help"]
    assert missing == []
    assert all(parser.description for parser in parsers[1:] if parser.add_help), \
        [p.prog for p in parsers[1:] if p.add_help and not p.description]
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    assert "generated matrices" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["explain", "bench"])
def test_a_file_name_too_long_is_a_user_error(capsys, command):
    status, _, err = run(capsys, command, "a" * 5000 + ".npz")
    assert_user_error(status, err, command, "File name too long")


@pytest.mark.parametrize("argv", [["demo"], ["bench", "FILE"]])
def test_a_bad_thread_setting_is_a_user_error(capsys, monkeypatch, matrix_file, argv):
    monkeypatch.setenv("AUTOSPMV_NUM_THREADS", "abc")
    argv = [str(matrix_file) if a == "FILE" else a for a in argv]
    status, _, err = run(capsys, *argv)
    assert_user_error(status, err, argv[0], "AUTOSPMV_NUM_THREADS must be a positive integer")


def _usage_error(capsys, argv, message) -> None:
    """``argv`` ends with exit status 2 and one line on stderr that holds ``message``."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("options, message", [
    (["--rounds", "-5"], "-5 is out of range: an integer from 1 to 1000 is allowed"),
    (["--rounds", str(10**30)], "is out of range"),
    (["--rounds", "x"], "'x' is not an integer"),
    (["--cores", "abc"], "--cores 'abc': positive numbers of cores or 'all' are allowed"),
    (["--cores", "0"], "--cores '0': positive numbers of cores or 'all' are allowed"),
    (["--cores", "100000"], "--cores 100000: none of these fits the"),
    (["--out", "/nonexistent/folder/out.json"],
     "the folder /nonexistent/folder does not exist (it is not created)"),
    (["--out", "/dev/null"], "--out /dev/null exists and is not a regular file"),
])
def test_solver_benchmark_options_are_checked_before_any_work(capsys, options, message):
    _usage_error(capsys, ["bench", "--solver", *options], message)
    assert not Path("/nonexistent").exists()


def test_usage_errors_are_one_line(capsys):
    _usage_error(capsys, ["explain"], "autospmv explain: error: the following arguments are "
                                      "required: file")
    _usage_error(capsys, ["retrain", "--budget-minutes", "0"], "0 is out of range")
    _usage_error(capsys, ["retrain", "--jobs", "-1"], "-1 is out of range")


@pytest.mark.parametrize("labels, message", [
    ("/nonexistent/folder/labels.jsonl", "the folder /nonexistent/folder does not exist"),
    ("/dev/null", "--labels /dev/null exists and is not a regular file"),
])
def test_retrain_checks_its_label_file_before_any_work(capsys, labels, message):
    status, _, err = run(capsys, "retrain", "--device", "cpu", "--corpus", "tiny", "--quick",
                         "--labels", labels)
    assert_user_error(status, err, "retrain", message)
    assert not Path("/nonexistent").exists() and not Path("/dev/null.lock").exists()


def test_child_processes_end_with_their_parent(tmp_path):
    """A benchmark killed mid-run leaves no child running (the solver benchmark's children
    start through ending_with_parent)."""
    import os
    import signal
    import subprocess
    import time

    script = ("import subprocess, sys\n"
              "from autospmv._tools.cli_checks import ending_with_parent\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
              " preexec_fn=ending_with_parent())\n"
              "print(child.pid, flush=True)\n"
              "import time; time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:  # reap it if it became ours
            os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")


# -- models --remove: exact names, only the files retrain wrote ---------------------------------


@pytest.fixture
def data_folders():
    home = autospmv._decide.model.store.user_data_dir()
    models, labels = home / "models", home / "labels"
    models.mkdir(parents=True)
    labels.mkdir()
    return models, labels


def test_models_remove_takes_exact_names_only(capsys, data_folders):
    """The reproducer of the hostile-input report: a device name's prefix of another device
    removes nothing of the other one; a bare prefix is refused with the names it matches."""
    models, labels = data_folders
    (models / "cpu-amd-epyc-float64.json").write_bytes(GPU_MODEL.read_bytes())
    mine, other = labels / "cpu-amd-epyc-float64.jsonl", labels / "cpu-amd-epyc-7b13-float64.jsonl"
    mine.write_text("{}\n")
    other.write_text("{}\n")
    status, out, _ = run(capsys, "models", "--remove", "cpu-amd-epyc", "--labels")
    assert status == 0 and other.exists() and not mine.exists()
    assert not (models / "cpu-amd-epyc-float64.json").exists()
    status, _, err = run(capsys, "models", "--remove", "cpu", "--labels")
    assert_user_error(status, err, "models", "names starting with it: "
                                             "cpu-amd-epyc-7b13-float64")
    assert other.exists()
    status, _, err = run(capsys, "models", "--remove", "cuda-nvidia-h200")
    assert_user_error(status, err, "models", "no installed model cuda-nvidia-h200; installed: "
                                             "none")


def test_models_remove_of_a_model_takes_its_labels_and_lock(capsys, data_folders):
    models, labels = data_folders
    for dtype in ("float64", "float32"):
        (models / f"cpu-x-{dtype}.json").write_bytes(GPU_MODEL.read_bytes())
        (labels / f"cpu-x-{dtype}.jsonl").write_text("{}\n")
    (labels / "cpu-x-float64.jsonl.lock").write_text("")  # left by a killed run
    status, out, _ = run(capsys, "models", "--remove", "cpu-x-float64", "--labels")
    assert status == 0
    assert sorted(p.name for p in labels.iterdir()) == ["cpu-x-float32.jsonl"]
    assert sorted(p.name for p in models.iterdir()) == ["cpu-x-float32.json"]
    assert f"removed {labels / 'cpu-x-float64.jsonl.lock'}" in out


def test_models_remove_never_deletes_files_it_did_not_write(capsys, tmp_path, data_folders):
    """With the models folder a link to a folder of the user's, only files named as retrain
    names them go; a link among them is removed, not what it points to."""
    models, _ = data_folders
    elsewhere = tmp_path / "user-folder"
    elsewhere.mkdir()
    models.rmdir()
    models.symlink_to(elsewhere)
    settings, target = elsewhere / "settings.json", tmp_path / "precious.json"
    settings.write_text("{}")
    target.write_text("{}")
    (elsewhere / "cpu-y-float64.json").symlink_to(target)
    (elsewhere / "cpu-y-float64.md").write_text("report")
    status, out, _ = run(capsys, "models", "--remove")
    assert status == 0 and settings.exists() and target.exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["settings.json"]
    assert "settings" not in out


def test_info_reports_the_last_run_that_installed_nothing(capsys, data_folders):
    from autospmv._decide.model.store import device_slug
    from autospmv.training.__main__ import write_rejected

    models, _ = data_folders
    write_rejected(models / f"{device_slug('cpu')}-float64.json", "oracle gain 0.020 < 0.05",
                   "figures")
    status, out, _ = run(capsys, "info")
    assert status == 0
    assert "last retrain for float64 (" in out and "installed nothing: oracle gain 0.020" in out
    assert "last retrain for float32" not in out
