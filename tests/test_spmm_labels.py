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
