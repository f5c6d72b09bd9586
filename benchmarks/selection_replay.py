"""Score today's shipped models on a committed kernel benchmark, without a GPU.

``benchmarks/kernel_profile.py`` times every kernel on real matrices grown to ~20M nonzeros
and on the generated large families, back-to-back, and records which kernel the model shipped
at the time selected. The structural features do not depend on the device, so the selection
of any model can be replayed later on any machine: this script rebuilds each matrix exactly as
the benchmark did (same growth, same generators), asks the model shipped for the benchmark's
GPU and the record's dtype, and scores its choice against the recorded back-to-back times
(q = t(fastest kernel) / t(chosen)). A choice whose parameters were not timed in the benchmark
is scored with the same kernel's timed run and flagged.

    python benchmarks/selection_replay.py \\
        benchmarks/results/kernels-h100-2026-11-27-ballot-float32.json \\
        --matrices ../shared/matrices --out benchmarks/results/selection-replay-h100-DATE.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import scipy.sparse as sp

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402  (the benchmark's generated large matrices)
from kernel_profile import correct_runs, time_us  # noqa: E402

import autospmv  # noqa: E402
from autospmv._decide.model import lookup as lookup
from autospmv._decide import selection as selector  # noqa: E402
from autospmv._decide.model.store import slugify  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402


def rebuild(name: str, group: str, folder: Path, large_nnz: float):
    """The benchmark's matrix ``name`` (``<file>_x<k>`` grown, ``<file>_p<k>`` grown and
    numbered at random, or a generated family)."""
    from autospmv.training import corpus

    if group == "grown":
        stem, k = name.rsplit("_x", 1)
        return corpus.grow(sp.load_npz(folder / f"{stem}.npz"), int(k))
    if group == "grown at random":
        stem, k = name.rsplit("_p", 1)
        return corpus.grow_permuted(sp.load_npz(folder / f"{stem}.npz"), int(k), stem)
    return dict(gpu.large_matrices(large_nnz))[name]


def score(record: dict, kernel: str, params: dict) -> tuple[float, bool]:
    """q of ``kernel``/``params`` among the record's correct runs (as the benchmark's summary
    counts them: a kernel too slow to be timed by its one call), and whether params matched."""
    best = min(r["b2b_us"] for r in correct_runs(record))
    candidates = correct_runs(record, with_skipped=True)
    same = [r for r in candidates if r["kernel"] == kernel and r["params"] == params]
    matched = bool(same)
    same = same or [r for r in candidates if r["kernel"] == kernel]
    return (best / min(time_us(r) for r in same) if same else 0.0), matched


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="a kernels-*.json written by kernel_profile.py")
    parser.add_argument("--matrices", required=True, help="the folder of the grown .npz files")
    parser.add_argument("--large-nnz", type=float, default=20e6)
    parser.add_argument("--out", help="write the per-matrix choices and scores here")
    parser.add_argument("--models", type=Path,
                        help="a folder of models named <device>-<dtype>.json to replay instead "
                             "of the shipped ones (e.g. models retrained on another labelling)")
    args = parser.parse_args(argv)

    bench = json.loads(Path(args.results).read_text())
    slug = "cuda-" + slugify(bench["device"]["gpu"])
    shipped = (lookup.shipped_models() if args.models is None
               else {path.stem: path for path in args.models.glob("*.json")})
    rows, built = [], (None, None)  # the last matrix built: records come per matrix, by dtype
    for record in bench["records"]:
        model = shipped.get(f"{slug}-{record['dtype']}")
        if model is None:
            print(f"no {record['dtype']} model for {slug}", file=sys.stderr)
            return 2
        key = record["matrix"]
        if built[0] != key:
            built = key, rebuild(key, record["group"], Path(args.matrices), args.large_nnz)
        A = canonicalize(built[1].astype(record["dtype"]))
        decision = autospmv.select(A, device="cuda", model=model)
        q, matched = score(record, decision.kernel, decision.params)
        rows.append({"matrix": key, "dtype": record["dtype"], "nnz": record["nnz"],
                     "model": model.name, "kernel": decision.kernel, "params": decision.params,
                     "params_timed": matched, "q": q,
                     "was": record.get("selected", {}).get("kernel")})
        print(f"{key:24s} {record['dtype']}  {decision.kernel:10s} q {q:.3f}"
              f"{'' if matched else '  (params not timed)'}", flush=True)
    for dtype in sorted({r["dtype"] for r in rows}):
        qs = [r["q"] for r in rows if r["dtype"] == dtype]
        geo = math.exp(sum(math.log(max(q, 1e-9)) for q in qs) / len(qs))
        near = sum(q >= 1 / 1.1 for q in qs)
        print(f"{dtype}: geomean q {geo:.3f}, {near}/{len(qs)} within 10 %, worst {min(qs):.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "benchmark": args.results, "gpu": bench["device"]["gpu"],
            "models": "shipped" if args.models is None else str(args.models), "rows": rows},
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
