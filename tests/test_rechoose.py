"""Label records brought up to date after a chooser changed (training/rechoose.py): the kernel
takes the timing of the variant with the new parameters, the features are computed again, and
nothing is timed."""

from __future__ import annotations

import gzip
import json

import pytest
from matrices import poisson2d

from autospmv import _registry as registry
from autospmv._decide.features.extract import features
from autospmv._support.validation import canonicalize
from autospmv.training.records import read_records
from autospmv.training.rechoose import rechoose_files, rechoose_record

OLD = {"sigma": 30}
"""Parameters no chooser picks for the test matrix: what an earlier chooser had recorded."""


def _result(params: dict, us: float) -> dict:
    spread = {"median": us, "min": us, "p90": us, "n": 5}
    return {"params": params, "status": "ok", "feasible": True, "reason": None, "error": 0.0,
            "prepare_ms": 1.0, "time_per_call_us": us, "time_b2b_us": us,
            "spread": {"per_call": spread, "b2b": spread, "b2b_calls": 50, "retimed": 0}}


def _record(csr, name: str = "poisson") -> dict:
    """A record labelled when csr5's chooser picked :data:`OLD`: csr5 timed with it (9 µs) and
    with today's choice as a variant (4 µs, faster than coo's 5 µs)."""
    chosen = registry.choose_params("csr5", csr, "cuda")
    stale = dict(features(csr, device="cuda"), csr5_span=float(OLD["sigma"]))
    return {
        "schema": "autospmv-labels/1", "name": name, "shape": list(csr.shape),
        "nnz": int(csr.nnz), "dtype": str(csr.dtype), "device": {"device": "cuda"},
        "features": stale,
        "kernels": {"coo": _result({}, 5.0), "csr5": _result(OLD, 9.0)},
        "variants": [{"kernel": "csr5", "strategy": f"sigma={s['sigma']}", **_result(s, t)}
                     for s, t in ((OLD, 9.0), (chosen, 4.0))],
        "best": {"per_call": "coo", "b2b": "coo"}, "timing_mode": "per_call",
        "noise": {"per_call": 1.0, "b2b": 1.0}, "noisy": False,
    }


def test_a_changed_choice_takes_its_variant_and_fresh_features():
    csr = canonicalize(poisson2d(12))
    chosen = registry.choose_params("csr5", csr, "cuda")
    assert chosen != OLD
    record = _record(csr)
    updated, change = rechoose_record(record, csr)
    assert updated["kernels"]["csr5"]["params"] == chosen
    assert updated["kernels"]["csr5"]["time_per_call_us"] == 4.0
    assert "strategy" not in updated["kernels"]["csr5"]
    assert updated["kernels"]["coo"] == record["kernels"]["coo"]
    assert updated["best"] == {"per_call": "csr5", "b2b": "csr5"}
    assert updated["features"] == features(csr, device="cuda")
    assert change.kernels == {"csr5": (OLD, chosen)} and change.features == ("csr5_span",)
    [stamp] = updated["rechosen"]
    assert stamp["kernels"] == {"csr5": {"from": OLD, "to": chosen}} and stamp["date"]
    assert record["kernels"]["csr5"]["params"] == OLD  # the input record is not modified
    again, nothing = rechoose_record(updated, csr)
    assert nothing is None and again is updated


def test_a_choice_no_variant_timed_leaves_the_record_and_says_so():
    csr = canonicalize(poisson2d(12))
    record = _record(csr)
    record["variants"] = record["variants"][:1]  # only the old parameters were timed
    kept, change = rechoose_record(record, csr)
    assert kept is record and change.missing == ("csr5",)


def test_the_matrix_must_be_the_records():
    record = _record(canonicalize(poisson2d(12)))
    with pytest.raises(ValueError, match="the record's is"):
        rechoose_record(record, canonicalize(poisson2d(11)))


def test_files_are_updated_in_place_and_each_matrix_built_once(tmp_path):
    csr = canonicalize(poisson2d(12))
    paths = [tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl"]
    for path in paths:
        lines = "".join(json.dumps(r) + "\n" for r in (_record(csr), _record(csr, "other")))
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(lines.encode()))
        else:
            path.write_text(lines)
    built = []

    def load(name, dtype):
        built.append((name, dtype))
        return csr

    changes = rechoose_files(paths, load, names={"poisson"}, progress=False)
    assert built == [("poisson", "float64")]
    for path in paths:
        records = {r["name"]: r for r in read_records(path)}
        assert records["poisson"]["kernels"]["csr5"]["time_per_call_us"] == 4.0
        assert records["other"]["kernels"]["csr5"]["params"] == OLD  # not asked for
        assert [c.name for c in changes[str(path)]] == ["poisson"]
