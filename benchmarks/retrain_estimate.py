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
itself. Prints a table and writes the ``runs`` of ``benchmarks/results/retrain-estimate.json``
(its ``live_runs`` kept). The committed result also replays two H200 runs of 2026-11-22, whose
label files are in the repository's history (``benchmarks/results/README.md`` says how to get
them back).

    python benchmarks/retrain_estimate.py

``live LOG`` records a ``retrain`` as a user runs it instead: LOG is its output (stdout and
stderr, tqdm's carriage returns turned into new lines), each line prefixed with the Unix time
it was printed, between a line ``start <time>`` and a line ``end <time>``, as this makes it::

    echo "start $(date +%s.%N)" > LOG
    python -m autospmv retrain 2>&1 | stdbuf -o0 tr '\r' '\n' |
        while IFS= read -r l; do echo "$(date +%s.%N) $l"; done >> LOG
    echo "end $(date +%s.%N)" >> LOG
    python benchmarks/retrain_estimate.py live LOG --command "python -m autospmv retrain" \
        --machine "..."

It keeps, in the file's ``live_runs`` (the others kept), the run's printed lines with their
times, the compile time, each estimate printed against the time that labelling really took,
and the progress line's "about ... left" against the time really left.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re
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


RESULTS = REPO_ROOT / "benchmarks" / "results" / "retrain-estimate.json"

_SECONDS = re.compile(r"about (\d+) (s|min)\b")
_PROGRESS = re.compile(r"\| (\d+)/(\d+) \[[^,\]]*, about (\d+) (s|min) left; (\S+)")


def _seconds(number: str, unit: str) -> float:
    return float(number) * (60 if unit == "min" else 1)


def live(log: pathlib.Path, command: str, machine: str) -> dict:
    """The record of a retrain's timestamped output ``log`` (see the module docstring)."""
    start = end = None
    lines, checkpoints, blocks, warm_up = [], {}, [], None
    for raw in log.read_text(encoding="utf-8").splitlines():
        stamp, _, text = raw.partition(" ")
        if stamp == "start":
            start = float(text)
            continue
        if stamp == "end":
            end = float(text)
            continue
        at = round(float(stamp) - start, 2)
        progress = _PROGRESS.search(text)
        if progress:
            # the line that first names a matrix is printed as its labelling starts, with the
            # matrices done before it and the time then thought left
            checkpoints.setdefault(progress.group(5), (int(progress.group(1)), at,
                                                       _seconds(*progress.group(3, 4))))
            continue
        if "%|" in text or not text.strip():
            continue
        lines.append([at, text.strip()])
        if text.startswith("compiled (or loaded from the cache) every kernel in "):
            warm_up = float(text.split(" in ")[1].split(" s")[0])
        elif text.startswith("labelling ") and " matrices (" in text:
            blocks.append({"started_s": at, "matrices": int(text.split()[1]),
                           "estimate_s": _seconds(*_SECONDS.search(text).groups()),
                           "printed": text})
        elif text.startswith("labelled ") and blocks:
            block = blocks[-1]
            block["labelled"] = int(text.split()[1])
            block["left_for_lack_of_time"] = int(text.split("; ")[1].split()[0])
            block["actual_s"] = round(at - block["started_s"], 2)
            block["estimate_over_actual"] = round(block["estimate_s"] / block["actual_s"], 3)
    ends = [b["started_s"] + b["actual_s"] for b in blocks if "actual_s" in b]
    points = []
    for done, at, left in sorted(checkpoints.values()):
        block_end = next((e for e in ends if e >= at), None)
        if block_end is not None:
            points.append({"matrices_done": done, "at_s": at, "printed_left_s": left,
                           "actual_left_s": round(block_end - at, 2)})
    return {"command": command, "machine": machine,
            "date": datetime.date.today().isoformat(), "log": log.name,
            "total_s": round(end - start, 2), "warm_up_s": warm_up, "labelling": blocks,
            "progress": points, "lines": lines}


def write(update: dict) -> None:
    """Write ``update``'s keys into :data:`RESULTS`, keeping its other keys."""
    current = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    current.update(update)
    RESULTS.write_text(json.dumps(current, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "live":
        import argparse

        parser = argparse.ArgumentParser(prog="retrain_estimate.py live")
        parser.add_argument("log", type=pathlib.Path)
        parser.add_argument("--command", required=True, help="the command that was run")
        parser.add_argument("--machine", required=True, help="the machine, in words")
        args = parser.parse_args(argv[1:])
        record = live(args.log, args.command, args.machine)
        for block in record["labelling"]:
            print(f"labelling {block['matrices']} matrices: estimate {block['estimate_s']:.0f} s, "
                  f"took {block.get('actual_s', float('nan')):.1f} s")
        current = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        runs = [r for r in current.get("live_runs", []) if r.get("log") != record["log"]]
        write({"live_runs": runs + [record]})
        return
    results = [replay(run, reference) for run, reference in RUNS]
    for result in results:
        print(f"{result['run']} ({result['matrices']} matrices, {result['labelling_s']:.0f} s; "
              f"reference {pathlib.Path(result['reference']).parent.name})")
        print("  done  elapsed   left  forecast   count")
        for row in result["checkpoints"]:
            mark = "  (first minute)" if row["after_first_minute"] else ""
            print(f"  {row['matrices_done']:4d} {row['elapsed_s']:8.0f} {row['actual_left_s']:6.0f}"
                  f" {row['forecast_left_s']:9.0f} {row['count_left_s']:7.0f}{mark}")
    write({"benchmark": "retrain time estimate, replayed", "date": datetime.date.today().isoformat(),
           "method": __doc__.split("\n\n")[1], "runs": results})


if __name__ == "__main__":
    main()
