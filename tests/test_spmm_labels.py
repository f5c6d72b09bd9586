"""SpMM labels (:mod:`training.spmm_labels`): the cases and features on any machine, the command
line's refusal without a GPU, and on a real GPU every program checked and timed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from autospmv._support.validation import canonicalize
from matrices import poisson2d
from training import spmm_labels
from training.records import read_records


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "matrices"
    folder.mkdir()
    sp.save_npz(folder / "grid.npz", poisson2d(40))
    sp.save_npz(folder / "wide.npz", sp.random(60, 120, density=0.5, format="csr",
                                               random_state=0))  # rectangular: labelled too
    sp.save_npz(folder / "tiny.npz", sp.identity(10, format="csr"))  # below MIN_NNZ: left out
    return folder


def test_cases_grow_every_matrix_of_enough_nonzeros(folder):
    cases = spmm_labels.cases([folder], grown_nnz=(2e4,))
    assert sorted(c.name.split("@")[0] for c in cases) == ["grid", "wide"]
    for case in cases:
        A = case.load()
        source = sp.load_npz(case.source)
        assert A.shape == (source.shape[0] * case.copies, source.shape[1] * case.copies)
        assert A.nnz == source.nnz * case.copies
        assert case.copies == max(1, round(2e4 / source.nnz))


def test_row_features_describe_the_row_lengths():
    arrow = sp.lil_matrix((300, 300))
    arrow[0, :] = 1.0
    arrow.setdiag(2.0)
    features = spmm_labels.row_features(canonicalize(sp.csr_matrix(arrow)))
    assert features["row_max"] == 300 and features["row_mean"] == pytest.approx(599 / 300)
    assert features["long_row_share"] == pytest.approx(300 / 599)
    assert features["row_cv"] > 5
    regular = spmm_labels.row_features(canonicalize(poisson2d(10)))
    assert regular["long_row_share"] == 0.0 and regular["row_max"] == 5
    empty = spmm_labels.row_features(canonicalize(sp.csr_matrix((0, 4))))
    assert empty == {"row_mean": 0.0, "row_max": 0, "row_cv": 0.0, "long_row_share": 0.0}


def test_program_keys_name_the_tile():
    assert spmm_labels.program_key(("column_pairs", 0)) == "column_pairs"
    assert spmm_labels.program_key(("column_quads", 64)) == "column_quads@64"


def test_the_command_line_needs_a_real_gpu(folder, tmp_path, capsys, monkeypatch):
    from training import timing
    from training.__main__ import main

    monkeypatch.setattr(timing, "require_real_gpu", _no_gpu)
    monkeypatch.setattr(spmm_labels, "require_real_gpu", _no_gpu)
    out = tmp_path / "spmm.jsonl"
    assert main(["label-spmm", "--matrices", str(folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "SpMM labels time CUDA kernels and need a real GPU" in err
    assert not out.exists()
    with pytest.raises(SystemExit) as exit_:  # nothing to choose at 4 columns or fewer
        main(["label-spmm", "--matrices", str(folder), "--columns", "4", "--out", str(out)])
    assert exit_.value.code == 2 and "--columns: 4 is out of range" in capsys.readouterr().err


def _no_gpu():
    raise RuntimeError("no usable CUDA GPU was found")


@pytest.mark.requires_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_program_is_checked_and_timed_on_a_gpu(folder, tmp_path, dtype):
    out = tmp_path / "spmm.jsonl"
    spmm_labels.label_spmm([folder], out, dtype=dtype, grown_nnz=(3e4,), columns=(8, 16),
                           progress=None)
    records = read_records(out, spmm_labels.SCHEMA)
    assert len(records) == 2 and {r["dtype"] for r in records} == {dtype}
    for record in records:
        assert set(record["columns"]) == {"8", "16"}
        eight = record["columns"]["8"]
        assert {"many_columns", "passes", "eight_columns"} <= set(eight["times"])
        assert "passes" not in record["columns"]["16"]["times"]
        for columns in record["columns"].values():
            assert all(t > 0 for t in columns["times"].values()) and columns["spread"] >= 1
            assert set(columns["errors"]) == set(columns["times"])
            assert max(columns["errors"].values()) <= (1e-5 if dtype == "float32" else 1e-12)
    before = out.read_text()
    spmm_labels.label_spmm([folder], out, dtype=dtype, grown_nnz=(3e4,), columns=(8, 16),
                           progress=None)
    assert out.read_text() == before  # resumed: nothing labelled twice
    assert all(json.loads(line)["schema"] == spmm_labels.SCHEMA for line in before.splitlines())
    assert np.isfinite([t for r in records for c in r["columns"].values()
                        for t in c["times"].values()]).all()


def timed(times: dict, row_mean: float, name: str = "m", dtype: str = "float64") -> dict:
    """A record for the fit: one matrix's programs' µs per column count."""
    return {"name": name, "dtype": dtype, "device": {"name": "test"},
            "features": {"row_mean": row_mean},
            "columns": {str(k): {"times": t} for k, t in times.items()}}


def test_the_fit_splits_by_row_length_where_two_programs_lose_less_than_one():
    records = []
    for i in range(8):  # short rows: the quads win; long rows: the wide step wins
        short = i < 4
        records.append(timed({16: {"many_columns": 10.0,
                                   "column_quads": 5.0 if short else 9.0,
                                   "column_pairs_wide_step": 8.0 if short else 4.0},
                              64: {"many_columns": 20.0, "column_pairs": 11.0,
                                   "column_pairs@64": 10.0}},
                             row_mean=3.0 + i if short else 40.0 + i, name=f"m{i}"))
    fit = spmm_labels.fit_spmm_rule(records)
    sixteen, sixty_four = fit.rule.choices
    assert (sixteen.columns, sixteen.below, sixteen.above) == (16, "column_quads",
                                                               "column_pairs_wide_step")
    assert 6.0 < sixteen.threshold < 40.0
    assert sixty_four.threshold is None and sixty_four.above == "column_pairs@tiled"
    assert fit.passed and fit.rule.labels == 16
    evaluation = spmm_labels.evaluate(records)
    assert evaluation[16]["fitted"] == pytest.approx(1.0)
    assert evaluation[16]["held_out"] == pytest.approx(1.0)
    assert evaluation[16]["many_columns"] < 0.6
    assert fit.rule.program_for(12, 3.0) == ("column_quads", False)
    assert fit.rule.program_for(100, 3.0) == ("column_pairs", True)


def test_a_rule_that_loses_to_the_many_columns_kernel_held_out_is_not_written():
    # each matrix's winner is its own: fitted to the others, the rule picks a loser
    records = [timed({16: {"many_columns": 1.2, "column_quads": 1.0 if i % 2 else 3.0,
                           "column_pairs": 3.0 if i % 2 else 1.0}}, row_mean=5.0, name=f"m{i}")
               for i in range(2)]
    fit = spmm_labels.fit_spmm_rule(records)
    assert not fit.passed and "k=16" in fit.reason


def test_the_fit_refuses_records_of_two_dtypes():
    records = [timed({16: {"many_columns": 1.0}}, 5.0),
               timed({16: {"many_columns": 1.0}}, 5.0, dtype="float32")]
    with pytest.raises(ValueError, match="mix devices or dtypes"):
        spmm_labels.fit_spmm_rule(records)


def test_the_benchmarks_timed_choices_read_as_records(tmp_path, capsys):
    from autospmv.kernels.cuda.spmm_programs import timed_choice_note
    from training.__main__ import main

    def record(name, nnz, rows, k, dtype, times):
        key = (k, np.dtype(dtype), np.dtype(dtype))
        return {"matrix": name, "nnz": nnz, "shape": [rows, rows], "dtype": dtype, "k": k,
                "choice": timed_choice_note(key, times)}

    eight = {("many_columns", 0): 9.0, ("column_pairs", 0): 5.0,
             ("column_pairs_wide_step", 0): 6.0, ("column_quads", 0): 7.0,
             ("passes", 0): 8.0, ("eight_columns", 0): 4.5}
    wide = {("many_columns", 0): 30.0, ("column_pairs", 0): 20.0,
            ("column_pairs_wide_step", 0): 25.0, ("column_quads", 0): 26.0,
            ("column_pairs", 32): 18.0, ("column_quads", 32): 27.0}
    old = {("many_columns", 0): 9.0, ("column_pairs", 0): 5.0}  # fewer programs: left out
    records = [record(f"m{i}", 1000 * (i + 1), 100, 8, "float64", eight) for i in range(4)]
    records += [record(f"m{i}", 1000 * (i + 1), 100, 64, "float64", wide) for i in range(4)]
    records += [record("m0", 1000, 100, 16, "float64", old),
                record("m0", 1000, 100, 8, "float32", eight),
                {"matrix": "m9", "nnz": 10, "shape": [5, 5], "dtype": "float64", "k": 1,
                 "choice": None}]
    path = tmp_path / "spmm.json"
    path.write_text(json.dumps({"runs": {"a": {"device": {"gpu": "NVIDIA Test"},
                                               "records": records}}}))
    read = spmm_labels.benchmark_records(path, "float64")
    assert len(read) == 4 and {r["device"]["name"] for r in read} == {"NVIDIA Test"}
    assert set(read[0]["columns"]) == {"8", "64"}  # merged over the records of one matrix
    assert read[0]["columns"]["64"]["times"]["column_pairs@32"] == 18.0
    assert read[1]["features"]["row_mean"] == 20.0
    with pytest.raises(ValueError, match="no float32 records|no float16"):
        spmm_labels.benchmark_records(path, "float16")
    model = tmp_path / "model.json"
    from autospmv._decide.model.lookup import find_model, load_model

    load_model(find_model("cuda", dtype="float64").path).to_json(model)
    assert main(["fit-spmm", "--benchmark", str(path), "--dtype", "float64",
                 "--model", str(model)]) == 0
    out = capsys.readouterr().out
    assert "k=8: eight_columns" in out and "k=64: column_pairs@tiled" in out
    written = json.loads(model.read_text())
    assert written["schema_version"] == 7 and written["spmm_rule"]["labels"] == 8
    assert written["provenance"]["spmm_labels"][0]["file"] == "spmm.json"
    assert main(["fit-spmm", "--model", str(model)]) == 2  # neither labels nor --benchmark
    assert "one of them" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    (lambda r: r.pop("columns"), "lacks what the SpMM fit reads"),
    (lambda r: r["features"].update(row_mean=-1.0), "a finite mean row length"),
    (lambda r: r["columns"].update({"3": {"times": {"many_columns": 1.0}}}), "above 4"),
    (lambda r: r["columns"]["16"]["times"].update(column_pairs=-1.0), "positive times"),
    (lambda r: r["columns"]["16"]["times"].update(warp_magic=1.0), "unknown program"),
    (lambda r: r["columns"]["16"].update(times={}), "the programs' times at k=16"),
    (lambda r: r.update(dtype="float16"), "float32 or float64"),
])
def test_damaged_label_records_are_refused_with_a_reason(tmp_path, damage, message):
    from training.records import append_record

    record = timed({16: {"many_columns": 2.0, "column_pairs": 1.0}}, row_mean=5.0)
    record.update(schema=spmm_labels.SCHEMA, device={"device": "cuda", "name": "test"})
    damage(record)
    path = tmp_path / "spmm.jsonl"
    append_record(path, record)
    with pytest.raises(ValueError, match=message):
        spmm_labels.read_labels([path])


def test_a_file_that_is_not_the_benchmarks_is_refused(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"runs": {"a": {"device": {}}}}))
    with pytest.raises(ValueError, match="not a results file of benchmarks/spmm.py"):
        spmm_labels.benchmark_records(path, "float64")
    path.write_text(json.dumps({"records": [{"dtype": "float64", "choice": (
        "multi-vector products of 8 columns (float64 X, float64 Y) run the many-columns kernel "
        "(1 µs; the column-pairs kernel 2 µs), timed at the first one")}]}))
    with pytest.raises(ValueError, match="no float64 records with timed programs"):
        spmm_labels.benchmark_records(path, "float64")  # too few programs: left out


def test_the_rule_names_the_programs_the_gpu_runs():
    from autospmv._decide.model import spmm_rule
    from autospmv.kernels.cuda import spmm_programs

    assert spmm_rule.PROGRAMS == spmm_programs.PROGRAMS
    assert spmm_rule.TILED == spmm_programs.TILED
    assert spmm_rule.FEW_COLUMN_PROGRAMS == {"passes": spmm_programs.MEASURED_UP_TO,
                                             "eight_columns": spmm_programs.EIGHT_COLUMNS}
