"""How reproducible is "the fastest kernel"? Two labelling runs of the same matrices compared.

A selector is scored against the fastest kernel of one labelling run, so no selector can be
expected to score better than that run's own fastest kernel does in a second, independent
run on the same kind of device. For the matrices both label files hold (optionally only the
held-out ones), this prints, per size band, the score of run A's fastest kernel measured in
run B and the other way round: q = t_B(fastest in B) / t_B(fastest in A), geometric mean,
share within 10 %, worst; times in each row's training mode (back-to-back from 10^6
nonzeros, per call below), as training reads them.

    python benchmarks/label_reproducibility.py models/labels/cuda-nvidia-h200-float64.jsonl.gz \\
        benchmarks/results/label-h200-holdout-rerun-2026-11-23/cuda-nvidia-h200-float64.jsonl.gz \\
        --holdout models/holdout.txt

``--shift KERNEL`` also prints how one kernel's time moved between the runs against the others:
per matrix, its time over the fastest other kernel's in run B, divided by the same in run A,
geometric mean per size band (below 1: the kernel got faster relative to the others). The
division by the same run's other kernels cancels what moves every kernel alike between runs
(another machine of the same kind, its host's speed), so a change to one kernel shows.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from autospmv.training.dataset import dataset  # noqa: E402
from autospmv.training.records import read_records  # noqa: E402
from autospmv.training.metrics import BANDS, band_rows  # noqa: E402
from autospmv.training.corpus import read_names  # noqa: E402
from autospmv.training.train import split_holdout  # noqa: E402


def common(a, b, holdout):
    """The two runs' records of the matrices both hold (only the held-out ones if named)."""
    if holdout:
        a, b = split_holdout(a, holdout)[1], split_holdout(b, holdout)[1]
    names = {r["name"] for r in a} & {r["name"] for r in b}

    def pick(records):
        return sorted((r for r in records if r["name"] in names), key=lambda r: r["name"])

    return pick(a), pick(b)


def oracle_in_other(ds_from, ds_in) -> np.ndarray:
    """q in ``ds_in`` of the kernel that was fastest in ``ds_from`` (same rows, same kernels)."""
    chosen = np.argmin(ds_from.times, axis=1)
    rows = np.arange(len(ds_in))
    return ds_in.times.min(axis=1) / ds_in.times[rows, chosen]


def summary(q: np.ndarray) -> str:
    geomean = math.exp(float(np.mean(np.log(np.maximum(q, 1e-12)))))
    return f"{geomean:.3f} / {np.mean(q >= 1 / 1.1):.1%} / worst {q.min():.3f}"


SHIFT_BANDS = (("< 1M", 0, 1e6), ("1M-3M", 1e6, 3e6), ("3M-10M", 3e6, 1e7),
               ("≥ 10M", 1e7, math.inf))
"""Size bands (nonzeros) of ``--shift``: finer among the large matrices, where the back-to-back
times go from launch-paced (10–20 µs) to traffic-paced."""


def relative_to_others(ds, kernel: str) -> np.ndarray:
    """Per row, ``kernel``'s time over the fastest other kernel's (inf where it did not run)."""
    k = ds.kernels.index(kernel)
    others = np.delete(ds.times, k, axis=1).min(axis=1)
    return ds.times[:, k] / others


def shift(ds_a, ds_b, kernel: str) -> None:
    """Print :func:`relative_to_others` of run B over run A per :data:`SHIFT_BANDS`."""
    ratio = relative_to_others(ds_b, kernel) / relative_to_others(ds_a, kernel)
    print(f"{kernel} against the fastest other kernel, run B over run A (geometric mean):")
    for name, low, high in SHIFT_BANDS:
        rows = (ds_a.nnz >= low) & (ds_a.nnz < high) & np.isfinite(ratio)
        if rows.any():
            values = np.log(ratio[rows])
            print(f"{name:>8} ({int(rows.sum()):3d}): {math.exp(values.mean()):.3f} "
                  f"(middle half {math.exp(np.percentile(values, 25)):.3f}–"
                  f"{math.exp(np.percentile(values, 75)):.3f})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--holdout", help="compare only the matrices this file holds out")
    parser.add_argument("--shift", metavar="KERNEL",
                        help="also print how KERNEL's time moved against the others")
    args = parser.parse_args(argv)
    holdout = read_names(args.holdout) if args.holdout else ()
    a, b = common(read_records(args.run_a), read_records(args.run_b), holdout)
    ds_a, _ = dataset(a)
    ds_b, _ = dataset(b)
    if ds_a.names != ds_b.names or ds_a.kernels != ds_b.kernels:
        print("the runs disagree on usable matrices or kernels", file=sys.stderr)
        return 2
    print(f"{len(ds_a)} matrices in both runs; geomean q / within 10 % / worst")
    for band in BANDS:
        rows = band_rows(ds_a, band)
        if rows.size:
            a_in_b = oracle_in_other(ds_a, ds_b)[rows]
            b_in_a = oracle_in_other(ds_b, ds_a)[rows]
            print(f"{band[0]:>8} ({rows.size:3d}): A's fastest in B {summary(a_in_b)}; "
                  f"B's fastest in A {summary(b_in_a)}")
    if args.shift:
        if args.shift not in ds_a.kernels:
            print(f"no kernel {args.shift!r} in the runs ({', '.join(ds_a.kernels)})",
                  file=sys.stderr)
            return 2
        shift(ds_a, ds_b, args.shift)
    return 0


if __name__ == "__main__":
    sys.exit(main())
