"""``prepare(A, tune="measure")`` on named corpus matrices, against their labelled best kernel.

For each named matrix of the ``large`` corpus (``training/corpus.py``) and each dtype, builds it,
runs ``autospmv.prepare(A, device="cuda", tune="measure")`` and records the kernel kept, the
tuning record (``op.decision.tuning``: candidates' times, seconds, products) and, from this
device's label file (``models/labels/cuda-<gpu>-<dtype>.jsonl.gz``), the labelled fastest kernel
and q = t(labelled best) / t(kept) by the labelled times. The first matrix of a dtype pays the
kernels' compilation in its tuning seconds.

    PYTHONPATH=. python benchmarks/tune_measure.py --matrices ../shared/matrices \\
        --names delaunay_n15-p102,PILOT87-c14 --out results/tune-measure.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
from autospmv.model_store import device_slug  # noqa: E402
from autospmv.validation import canonicalize  # noqa: E402
from training import corpus  # noqa: E402
from training.records import read_records  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", default="../shared/matrices")
    parser.add_argument("--names", required=True, help="comma-separated corpus names")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    entries = {e.name: e for e in corpus.corpus("large", [args.matrices])}
    labels_dir = Path(__file__).resolve().parent.parent / "models" / "labels"
    records = []
    for dtype in args.dtypes.split(","):
        labels = {r["name"]: r for r in read_records(
            labels_dir / f"{device_slug('cuda')}-{dtype}.jsonl.gz")}
        for name in args.names.split(","):
            A = canonicalize(entries[name].load().astype(dtype))
            started = time.perf_counter()
            op = autospmv.prepare(A, device="cuda", tune="measure")
            seconds = time.perf_counter() - started
            row = labels[name]
            mode = row["timing_mode"]
            times = {k: r[f"time_{mode}_us"] for k, r in row["kernels"].items()
                     if r["status"] == "ok"}
            best = min(times, key=times.get)
            records.append({"dtype": dtype, "name": name, "nnz": int(A.nnz), "kept": op.kernel,
                            "labelled_best": best, "q_by_labels": times[best] / times[op.kernel],
                            "prepare_s": seconds, "tuning": op.decision.tuning})
            print(f"{dtype} {name}: kept {op.kernel}, labelled best {best}, "
                  f"q {records[-1]['q_by_labels']:.3f}, prepare {seconds:.2f} s", flush=True)
    Path(args.out).write_text(json.dumps({"device": device_slug("cuda"), "records": records},
                                         indent=1, default=str))


if __name__ == "__main__":
    main()
