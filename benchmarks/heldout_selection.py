"""Score the shipped GPU models on their held-out matrices, from the committed labels.

The labels in ``models/labels/`` hold every kernel's measured time on every matrix (per call
and back-to-back, on the GPU named in the file). The matrices listed in ``models/holdout.txt``
were never used to train or tune a shipped model. This script asks each shipped model for its
kernel on each held-out matrix (the features are in the label records) and scores the choice
against the labelled times in the model's timing mode (back-to-back from 10⁶ nonzeros, per
call below): q = t(fastest kernel) / t(chosen). No GPU is needed.

    python benchmarks/heldout_selection.py --out benchmarks/results/selection-heldout-DATE.json

``--labels DIR`` scores on another labelling of the same matrices (a repeat run, whose times
differ from the first by the run-to-run spread) and ``--models DIR`` scores other models (e.g.
retrained on that labelling); models and label files are paired by name.

Per model and size band it reports the model, every fixed kernel and the targets of the
large-matrix selection (geomean q ≥ 0.97, ≥ 90 % within 10 %, worst q ≥ 0.80, above every
fixed kernel), and per matrix the choice, the fastest kernel and q.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from autospmv.model import TreeModel  # noqa: E402
from training.dataset import dataset  # noqa: E402
from training.label import LARGE_NNZ, read_records  # noqa: E402
from training.metrics import (BANDS, band_rows, first_feasible, fixed_name,  # noqa: E402
                              fixed_policy, selection_metrics)
from training.train import read_holdout, split_holdout  # noqa: E402

MODELS = REPO_ROOT / "models"
TARGETS = {"geomean": 0.97, "within_10pct": 0.90, "worst": 0.80}
"""The large-matrix targets (≥ 10⁶ nonzeros, back-to-back)."""


def model_choices(model: TreeModel, ds) -> np.ndarray:
    """The model's kernel column per row (its first feasible kernel, as prepare() falls back)."""
    ranking = np.array([[ds.kernels.index(k) for k in model.ranked(dict(zip(ds.feature_names, x)))]
                        for x in ds.X])
    return first_feasible(ds.times, ranking)


def score(model_path: Path, labels: Path, holdout: list[str]) -> dict:
    model = TreeModel.load(model_path)
    _, held = split_holdout(read_records(labels), holdout)
    ds, _ = dataset(held, "auto")
    choices = {"model": model_choices(model, ds)}
    choices.update({fixed_name(k): fixed_policy(ds, k) for k in ds.kernels})
    bands = {}
    for band in BANDS:
        rows = band_rows(ds, band)
        if rows.size:
            bands[band[0]] = {name: selection_metrics(ds.times[rows], c[rows])
                              for name, c in choices.items()}
    large = bands.get(BANDS[-1][0])
    verdict = None
    if large:
        ours = large["model"]
        fixed = max(v["geomean"] for name, v in large.items() if name != "model")
        verdict = {**{key: ours[key] >= target for key, target in TARGETS.items()},
                   "above_every_fixed_kernel": ours["geomean"] > fixed}
        verdict["met"] = all(verdict.values())
    chosen = choices["model"]
    matrices = [{"matrix": name, "nnz": int(ds.nnz[i]),
                 "mode": "b2b" if ds.nnz[i] >= LARGE_NNZ else "per_call",
                 "chosen": ds.kernels[chosen[i]], "fastest": ds.kernels[int(np.argmin(ds.times[i]))],
                 "q": float(ds.times[i].min() / ds.times[i][chosen[i]])}
                for i, name in enumerate(ds.names)]
    return {"model": model_path.name, "labels": str(labels.relative_to(REPO_ROOT)),
            "trained": model.provenance.get("trained"), "device": model.provenance.get("device"),
            "bands": bands, "large_targets": verdict, "matrices": matrices}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--labels", type=Path, default=MODELS / "labels",
                        help="the folder of label files cuda-<gpu>-<dtype>.jsonl.gz to score on "
                             "(default: the shipped models' own labels)")
    parser.add_argument("--models", type=Path, default=MODELS,
                        help="the folder of the models named after the label files (default: "
                             "the shipped models)")
    args = parser.parse_args(argv)
    holdout = read_holdout(MODELS / "holdout.txt")
    results = []
    for labels in sorted(args.labels.resolve().glob("cuda-*.jsonl.gz")):
        model_path = args.models.resolve() / labels.name.replace(".jsonl.gz", ".json")
        if not model_path.exists():
            continue
        result = score(model_path, labels, holdout)
        results.append(result)
        for band, metrics in result["bands"].items():
            m = metrics["model"]
            print(f"{model_path.stem:40s} {band:8s} n={m['n']:>3d} geomean {m['geomean']:.3f} "
                  f"within 10 % {100 * m['within_10pct']:5.1f} % worst {m['worst']:.3f}")
        print(f"{model_path.stem:40s} large-matrix targets: {result['large_targets']}")
    if args.out:
        args.out.write_text(json.dumps({
            "benchmark": "held-out selection of GPU models, from labelled times",
            "command": "python benchmarks/heldout_selection.py " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "date": datetime.date.today().isoformat(), "targets": TARGETS,
            "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
