"""``prepare(A, tune="measure")`` against the automatic ``prepare(A)`` on held-out matrices.

For each held-out base of ``models/holdout.txt`` grown to about 2·10⁷ nonzeros (the ``kinds``
corpus, ``training/corpus.py``) and each dtype: the automatic prepare's seconds and kernel, the
tuned prepare's seconds, kernel and tuning record, both prepares timed after one untimed
prepare of the same matrix (kernels compiled, memory pool warm), the median of ``--repeats``;
and from this device's label file (``--labels``, a ``<slug>-<dtype>.jsonl.gz`` per dtype) the
quality q = t(labelled fastest) / t(kept) of both choices.

    PYTHONPATH=. python benchmarks/tune_measure.py --matrices .matrices/shared .matrices/corpus \\
        --labels models/labels --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
from autospmv._decide.model.store import device_slug  # noqa: E402
from autospmv.training import corpus  # noqa: E402
from autospmv.training.records import read_records  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402


def _timed(A, repeats: int, **options):
    seconds, op = [], None
    autospmv.prepare(A, device="cuda", **options)
    for _ in range(repeats):
        del op
        started = time.perf_counter()
        op = autospmv.prepare(A, device="cuda", **options)
        seconds.append(time.perf_counter() - started)
    return op, statistics.median(seconds)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", nargs="+", required=True)
    parser.add_argument("--labels", type=Path, required=True)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--min-nnz", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    held = set(corpus.read_names(corpus.HOLDOUT_FILE))
    entries = [e for e in corpus.corpus("kinds", args.matrices)
               if e.nnz >= args.min_nnz and Path(e.source).stem in held]
    records = []
    for dtype in args.dtypes.split(","):
        labels = {r["name"]: r for r in read_records(
            args.labels / f"{device_slug('cuda')}-{dtype}.jsonl.gz")}
        for entry in entries:
            A = canonicalize(entry.load().astype(dtype))
            auto, auto_s = _timed(A, args.repeats)
            tuned, tuned_s = _timed(A, args.repeats, tune="measure")
            row = labels[entry.name]
            mode = row["timing_mode"]
            times = {k: r[f"time_{mode}_us"] for k, r in row["kernels"].items()
                     if r["status"] == "ok"}
            best = min(times, key=times.get)
            records.append({
                "dtype": dtype, "name": entry.name, "nnz": int(A.nnz),
                "auto": {"kernel": auto.kernel, "seconds": auto_s,
                         "q_by_labels": times[best] / times[auto.kernel]},
                "measure": {"kernel": tuned.kernel, "seconds": tuned_s,
                            "q_by_labels": times[best] / times[tuned.kernel],
                            "tuning": tuned.decision.tuning},
                "labelled_best": best, "ratio": tuned_s / auto_s})
            print(f"{dtype} {entry.name}: auto {auto.kernel} {auto_s * 1e3:.0f} ms "
                  f"q {records[-1]['auto']['q_by_labels']:.3f}; measure {tuned.kernel} "
                  f"{tuned_s * 1e3:.0f} ms q {records[-1]['measure']['q_by_labels']:.3f}; "
                  f"ratio {records[-1]['ratio']:.2f}", flush=True)
            del auto, tuned
    summary = {}
    for dtype in args.dtypes.split(","):
        rows = [r for r in records if r["dtype"] == dtype]
        if rows:
            summary[dtype] = {
                "matrices": len(rows),
                "median_auto_s": statistics.median(r["auto"]["seconds"] for r in rows),
                "median_measure_s": statistics.median(r["measure"]["seconds"] for r in rows),
                "median_ratio": statistics.median(r["ratio"] for r in rows),
                "geomean_q_auto": statistics.geometric_mean(r["auto"]["q_by_labels"]
                                                            for r in rows),
                "geomean_q_measure": statistics.geometric_mean(r["measure"]["q_by_labels"]
                                                               for r in rows)}
    print(json.dumps(summary, indent=1))
    Path(args.out).write_text(json.dumps({"device": device_slug("cuda"), "summary": summary,
                                          "records": records}, indent=1, default=str))


if __name__ == "__main__":
    main()
