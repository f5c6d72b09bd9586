"""The CPU default against SciPy, per call: ``autospmv.prepare(A, device="cpu")`` (the built-in
rule without a CPU model) applied as users call it, ``op.matvec(x, out=y)``, against SciPy's
``A @ x``, on the demo's matrices and those of ``--matrices`` folders.

The two are called in interleaved pairs, ``--repeats`` times over ``--pairs`` pairs each (the
order alternating), and each repeat gives the ratio of the medians, t(SciPy) / t(autospmv)
(above 1: autospmv is faster). Recorded per matrix: min, median and max of that ratio over the
repeats, both medians in µs, the kernel and whether the product runs SciPy's compiled loop.
Writes ``benchmarks/results/cpu-default-vs-scipy.json``.

    python benchmarks/cpu_default.py --matrices /work/shared/matrices
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
from autospmv._decide.model.store import cpu_model  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv._tools.examples import demo_matrices  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cpu-default-vs-scipy.json"


def cpu_ticks() -> tuple[float, float] | None:
    """(seconds of CPU time all processes used, of which this process's), or None where
    ``/proc/stat`` cannot be read."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK"), time.process_time()


def others_share(before, after, seconds: float) -> float:
    """The share of one core other processes used between two :func:`cpu_ticks`."""
    if before is None or after is None or seconds <= 0:
        return 0.0
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / seconds


def wait_until_quiet(limit: float, deadline: float) -> None:
    """Sleep until other processes used less than ``limit`` of a core for one second (or
    until ``deadline``)."""
    while time.perf_counter() < deadline:
        before, started = cpu_ticks(), time.perf_counter()
        time.sleep(1.0)
        if others_share(before, cpu_ticks(), time.perf_counter() - started) < limit:
            return


def compare(A, repeats: int, pairs: int, others: float = math.inf,
            patience: float = 0.0) -> dict:
    op = autospmv.prepare(A, device="cpu")
    x = np.random.default_rng(0).standard_normal(A.shape[1])
    y = np.empty(A.shape[0])
    ours, theirs = (lambda: op.matvec(x, out=y)), (lambda: A @ x)
    ours(), theirs()
    ratios, medians, retaken, loudest = [], {"autospmv": [], "scipy": []}, 0, 0.0
    deadline = time.perf_counter() + patience
    while len(ratios) < repeats:
        samples = {"autospmv": [], "scipy": []}
        before, began = cpu_ticks(), time.perf_counter()
        for pair in range(pairs):
            order = (("autospmv", ours), ("scipy", theirs))
            for name, call in order if pair % 2 else order[::-1]:
                started = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - started)
        share = others_share(before, cpu_ticks(), time.perf_counter() - began)
        if share >= others and time.perf_counter() < deadline:
            retaken += 1
            wait_until_quiet(others, deadline)
            continue
        loudest = max(loudest, share)
        us = {name: float(np.median(t)) * 1e6 for name, t in samples.items()}
        ratios.append(us["scipy"] / us["autospmv"])
        for name in us:
            medians[name].append(us[name])
    return {"nnz": int(A.nnz), "kernel": op.kernel, "threads": op.threads,
            "scipy_loop": "SciPy's compiled CSR loop" in op.explain(),
            "ratio": {"min": min(ratios), "median": float(np.median(ratios)),
                      "max": max(ratios)},
            "us": {name: float(np.median(v)) for name, v in medians.items()},
            "repeats_taken_again": retaken, "others_max_core_share": round(loudest, 3)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", nargs="*", default=[], metavar="DIR")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.1,
                        help="about how long each repeat of one matrix takes")
    parser.add_argument("--others", type=float, default=0.1,
                        help="a repeat during which other processes used this share of one "
                             "core or more is taken again (default: %(default)s)")
    parser.add_argument("--patience", type=float, default=600.0,
                        help="seconds per matrix to wait for quiet repeats; after that the "
                             "disturbed ones count (default: %(default)s)")
    args = parser.parse_args(argv)
    found = dict(demo_matrices())
    for folder in args.matrices:
        found.update({p.stem: sp.load_npz(p) for p in sorted(Path(folder).glob("*.npz"))})
    results = {}
    for name, A in found.items():
        A = canonicalize(A).astype(np.float64)
        pairs = int(min(2000, max(20, args.seconds / (2 * (A.nnz * 2e-9 + 5e-6)))))
        results[name] = compare(A, args.repeats, pairs, args.others, args.patience)
        r = results[name]["ratio"]
        print(f"{name[:28]:28s} nnz {A.nnz:9,d}  SciPy/autospmv min {r['min']:.2f} median "
              f"{r['median']:.2f} max {r['max']:.2f} ({results[name]['repeats_taken_again']} repeats "
              "taken again)", flush=True)
    medians = [r["ratio"]["median"] for r in results.values()]
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
               "numpy": np.__version__, "scipy": scipy.__version__,
               "autospmv": autospmv.__version__,
               "note": ("a shared machine: a repeat counted when the other processes used less "
                        f"than {args.others} of one core while it ran (repeats_taken_again, "
                        "others_max_core_share per matrix), or when the patience of "
                        f"{args.patience:g} s per matrix ran out")}
    summary = {"matrices": len(medians), "at_least_1": sum(m >= 1.0 for m in medians),
               "repeats_taken_again": sum(r["repeats_taken_again"] for r in results.values()),
               "min_median": min(medians), "geomean_median": float(np.exp(np.mean(np.log(medians))))}
    RESULTS.write_text(json.dumps({"machine": machine, "date": time.strftime("%Y-%m-%d"),
                                   "summary": summary, "results": results}, indent=1) + "\n")
    print(f"{summary}\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
