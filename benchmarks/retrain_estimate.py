"""How good is retrain's time estimate? Replays committed labelling runs.

A label file records when each matrix was finished, so a finished run can be replayed: after
the first k matrices (and after the first minute), compare the time the run really had left
with two estimates of it,

* **forecast**: :class:`autospmv.training.forecast.Forecast` (what ``retrain`` prints), each pending
  matrix's time in a reference run scaled by this run's pace on the matrices done so far;
* **count**: the elapsed time per matrix times the matrices left, which is what a progress
  bar that counts matrices shows (tqdm's own estimate).

Each run is replayed against the label file of the other run on the same kind of machine
(committed runs only: ``models/labels`` and ``benchmarks/results``), so a run never predicts
itself. Prints a table and writes ``benchmarks/results/retrain-estimate-<date>.json``. The
committed result also replays two H200 runs of 2026-11-22, whose label files are in the
repository's history (``benchmarks/results/README.md`` says how to get them back).

    python benchmarks/retrain_estimate.py
"""

from __future__ import annotations

import datetime
import json
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from autospmv.training.corpus import Entry  # noqa: E402
from autospmv.training.forecast import Forecast, labelling_seconds  # noqa: E402
from autospmv.training.records import read_records  # noqa: E402

CPU_LABELS = "cpu-intel-r-xeon-r-processor-2-10ghz-float64.jsonl.gz"
RUNS = [  # (run replayed, reference run of the same kind of machine)
    (f"benchmarks/results/retrain-cpu-2026-11-22/{CPU_LABELS}", f"models/labels/{CPU_LABELS}"),
    (f"models/labels/{CPU_LABELS}", f"benchmarks/results/retrain-cpu-2026-11-22/{CPU_LABELS}"),
]
CHECKPOINTS = (5, 10, 20, 40, 80)


def replay(run: str, reference: str) -> dict:
    """Estimates against the truth at each checkpoint of ``run``."""
    records = read_records(REPO_ROOT / run)
    seconds = labelling_seconds(records)
    done = [r for r in records[1:]]  # the first record has no measured time
    entries = [Entry(r["name"], r["family"], r["source"], r["size"], r["nnz"], None)
               for r in done]
    taken = [seconds[r["name"]][1] for r in done]
    forecast = Forecast(labelling_seconds(read_records(REPO_ROOT / reference)))
    first_minute = next(k for k in range(1, len(taken)) if sum(taken[:k]) >= 60)
    rows = []
    for k in sorted({*CHECKPOINTS, first_minute}):
        if k >= len(entries):
            continue
        estimate = Forecast(forecast.reference)
        for entry, t in zip(entries[:k], taken[:k]):
            estimate.record(entry, t)
        elapsed, left = sum(taken[:k]), sum(taken[k:])
        rows.append({
            "matrices_done": k, "elapsed_s": round(elapsed, 1), "actual_left_s": round(left, 1),
            "forecast_left_s": round(estimate.remaining(entries[k:]), 1),
            "count_left_s": round(elapsed / k * (len(entries) - k), 1),
            "after_first_minute": k == first_minute,
        })
    return {"run": run, "reference": reference, "matrices": len(entries),
            "labelling_s": round(sum(taken), 1), "checkpoints": rows}


def main() -> None:
    results = [replay(run, reference) for run, reference in RUNS]
    for result in results:
        print(f"{result['run']} ({result['matrices']} matrices, {result['labelling_s']:.0f} s; "
              f"reference {pathlib.Path(result['reference']).parent.name})")
        print("  done  elapsed   left  forecast   count")
        for row in result["checkpoints"]:
            mark = "  (first minute)" if row["after_first_minute"] else ""
            print(f"  {row['matrices_done']:4d} {row['elapsed_s']:8.0f} {row['actual_left_s']:6.0f}"
                  f" {row['forecast_left_s']:9.0f} {row['count_left_s']:7.0f}{mark}")
    date = datetime.date.today().isoformat()
    out = REPO_ROOT / "benchmarks" / "results" / f"retrain-estimate-{date}.json"
    out.write_text(json.dumps({"benchmark": "retrain time estimate, replayed", "date": date,
                               "method": __doc__.split("\n\n")[1], "runs": results},
                              indent=1) + "\n")
    print(f"wrote {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
