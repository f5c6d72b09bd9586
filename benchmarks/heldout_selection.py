"""Score the GPU models on their held-out matrices, from labelled times (no GPU needed).

The label files hold every kernel's measured time on every matrix (per call and back-to-back,
on the GPU named in the file). The bases listed in ``models/holdout.txt`` were never used to
train or tune a model; the ``kinds`` corpus grows each of them to about 2·10⁷ nonzeros as
block-diagonal (``-x``) and as permuted (``-p``) copies and labels them as given too. This
script asks each model for its kernel on each held-out matrix exactly as ``prepare()`` decides
(:meth:`autospmv._decide.model.tree.TreeModel.decide`: the tree, then the band's default kernel where it
stands; the features are in the label records) and scores it against the labelled times in the
size rule's mode (back-to-back from 10⁶ nonzeros, per call below): q = t(fastest) / t(chosen).

    python benchmarks/heldout_selection.py --labels DIR --models DIR --out FILE.json

Cells: the matrices as given (per call), and per growth way the grown copies of at least 10⁷
nonzeros (back-to-back). Per cell it reports the model, every fixed kernel and
``tune="measure"`` replayed on the labels (the fastest of the model's first three feasible
kernels), and the targets: as given geomean ≥ 0.98 and worst ≥ 0.80; grown geomean ≥ 0.97,
≥ 90 % within 10 %, worst ≥ 0.85 and a geomean at least 1 % above the best fixed kernel's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from autospmv._decide.model.tree import TreeModel  # noqa: E402
from autospmv.training.corpus import read_names  # noqa: E402
from autospmv.training.dataset import dataset  # noqa: E402
from autospmv.training.records import read_records  # noqa: E402
from autospmv.training.metrics import (first_feasible, fixed_name, fixed_policy,  # noqa: E402
                                       measure_policy, selection_metrics)
from autospmv.training.train import split_holdout  # noqa: E402

MODELS = REPO_ROOT / "models"
LARGE = 10_000_000
GROWN_TARGETS = {"geomean": 0.97, "within_10pct": 0.90, "worst": 0.85}
GIVEN_TARGETS = {"geomean": 0.98, "worst": 0.80}
MARGIN_OVER_FIXED = 1.01


def model_ranking(model: TreeModel, ds) -> np.ndarray:
    """Per row, the kernel columns in the order prepare() tries them."""
    return np.array([[ds.kernels.index(k) for k in model.decide(
        dict(zip(ds.feature_names, x)), int(nnz))[1]] for x, nnz in zip(ds.X, ds.nnz)])


def cells(ds) -> dict[str, np.ndarray]:
    """Rows per cell: the real matrices as given, and per growth way its copies of at least
    10⁷ nonzeros (names ending ``-x<copies>``, ``-p<copies>``, ``-c<copies>``)."""
    ways = [re.fullmatch(r"([xcp])\d+", name.rsplit("-", 1)[-1]) for name in ds.names]
    out = {"as given": np.flatnonzero(ds.as_given)}
    for way, label in (("x", "block-diagonal ≥ 1e7"), ("p", "permuted ≥ 1e7"),
                       ("c", "coupled ≥ 1e7")):
        rows = np.array([i for i, m in enumerate(ways)
                         if m and m.group(1) == way and ds.nnz[i] >= LARGE], dtype=np.int64)
        if rows.size:
            out[label] = rows
    return out


def verdict(metrics: dict, cell: str) -> dict:
    ours = metrics["model"]
    if cell == "as given":
        return {key: ours[key] >= target for key, target in GIVEN_TARGETS.items()}
    best_fixed = max(v["geomean"] for name, v in metrics.items()
                     if name.startswith("always "))
    out = {key: ours[key] >= target for key, target in GROWN_TARGETS.items()}
    out["1% above the best fixed kernel"] = ours["geomean"] >= MARGIN_OVER_FIXED * best_fixed
    return out


def score(model_path: Path, labels: Path, holdout: list[str]) -> dict:
    model = TreeModel.load(model_path)
    _, held = split_holdout(read_records(labels), holdout)
    ds, _ = dataset(held, "auto")
    ranking = model_ranking(model, ds)
    choices = {"model": first_feasible(ds.times, ranking),
               "tune='measure' (top 3)": measure_policy(ds.times, ranking, 3)}
    choices.update({fixed_name(k): fixed_policy(ds, k) for k in ds.kernels})
    results = {}
    for cell, rows in cells(ds).items():
        metrics = {name: selection_metrics(ds.times[rows], c[rows]) for name, c in choices.items()}
        results[cell] = {"metrics": metrics, "targets": verdict(metrics, cell),
                         "matrices": [{"matrix": ds.names[i], "nnz": int(ds.nnz[i]),
                                       "chosen": ds.kernels[choices["model"][i]],
                                       "fastest": ds.kernels[int(np.argmin(ds.times[i]))],
                                       "q": float(ds.times[i].min()
                                                  / ds.times[i][choices["model"][i]])}
                                      for i in rows]}
    return {"model": model_path.name, "labels": labels.name,
            "trained": model.provenance.get("trained"), "device": model.provenance.get("device"),
            "cells": results}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--labels", type=Path, default=MODELS / "labels",
                        help="the folder of label files cuda-<gpu>-<dtype>.jsonl.gz to score on "
                             "(default: the shipped models' own labels)")
    parser.add_argument("--models", type=Path, default=MODELS,
                        help="the folder of the models named after the label files (default: "
                             "the shipped models)")
    parser.add_argument("--device-kind", default="",
                        help="the device kinds the label files were timed on, for the record")
    args = parser.parse_args(argv)
    holdout = read_names(MODELS / "holdout.txt")
    results = []
    for labels in sorted(args.labels.resolve().glob("cuda-*.jsonl.gz")):
        model_path = args.models.resolve() / labels.name.replace(".jsonl.gz", ".json")
        if not model_path.exists():
            continue
        result = score(model_path, labels, holdout)
        results.append(result)
        for cell, r in result["cells"].items():
            m = r["metrics"]
            fixed = max((v["geomean"], name) for name, v in m.items() if name.startswith("always"))
            print(f"{model_path.stem:36s} {cell:22s} n={m['model']['n']:>3d} model "
                  f"{m['model']['geomean']:.3f} / {100 * m['model']['within_10pct']:5.1f} % / "
                  f"worst {m['model']['worst']:.3f}; best fixed {fixed[1][7:]} {fixed[0]:.3f}; "
                  f"measure {m[next(k for k in m if k.startswith('tune'))]['geomean']:.3f}; "
                  f"targets {'met' if all(r['targets'].values()) else r['targets']}")
    if args.out:
        args.out.write_text(json.dumps({
            "benchmark": "held-out selection of GPU models, from labelled times",
            "command": "python benchmarks/heldout_selection.py " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "date": datetime.date.today().isoformat(),
            "device_kind": args.device_kind,
            "targets": {"grown": GROWN_TARGETS, "as given": GIVEN_TARGETS,
                        "above best fixed": MARGIN_OVER_FIXED},
            "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
