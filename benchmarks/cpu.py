"""CPU benchmark: every autospmv CPU kernel through the operator against SciPy's ``A @ x``.

Each kernel is timed as users call it, ``op.matvec(x, out=y)`` (argument checks and dispatch
included), and SciPy as ``A @ x``; both are medians of repeated wall-clock runs after warm-up,
with the repeat count adapted so that each measurement takes about ``--seconds``. Results are
checked against SciPy in float64 first. Prints a table and writes
``benchmarks/results/cpu-<host>-<date>.json``.

    python benchmarks/cpu.py --matrices ../shared/matrices
"""

from __future__ import annotations

import argparse
import datetime
import json
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
from autospmv.formats.base import FormatTooLargeError  # noqa: E402
from autospmv.validation import canonicalize  # noqa: E402

LARGE_NNZ = 100_000


def median_seconds(fn, budget: float) -> float:
    """Median time of ``fn()`` over batches sized to fill ``budget`` seconds."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    batch = max(1, int(0.02 / once))
    samples = []
    deadline = time.perf_counter() + budget
    while len(samples) < 15 or (time.perf_counter() < deadline and len(samples) < 200):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch)
    return float(np.median(samples))


def default_matrices() -> Path | None:
    root = Path(__file__).resolve().parent.parent
    for candidate in (root / ".matrices", root.parent / "shared" / "matrices"):
        if candidate.is_dir():
            return candidate
    return None


def geomean(values) -> float:
    values = [v for v in values if v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", type=Path, default=default_matrices())
    parser.add_argument("--kernels", default=",".join(autospmv.KERNELS))
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--seconds", type=float, default=0.3, help="time budget per measurement")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.matrices is None or not args.matrices.is_dir():
        parser.error("no matrix folder found; pass --matrices DIR")
    kernels = args.kernels.split(",")
    rng = np.random.default_rng(0)
    records = []
    print(f"{'matrix':22s} {'nnz':>8s} {'scipy':>8s} " + " ".join(f"{k:>10s}" for k in kernels)
          + "   (µs per call; best/scipy ratio last)", flush=True)
    for path in sorted(args.matrices.glob("*.npz")):
        A = canonicalize(sp.load_npz(path).astype(args.dtype))
        x = rng.standard_normal(A.shape[1]).astype(A.dtype)
        ref = A.astype(np.float64) @ x.astype(np.float64)
        scipy_s = median_seconds(lambda: A @ x, args.seconds)
        record = {"matrix": path.stem, "shape": list(A.shape), "nnz": int(A.nnz),
                  "scipy_us": scipy_s * 1e6, "kernels": {}}
        for kernel in kernels:
            try:
                op = autospmv.prepare(A, kernel=kernel, device="cpu")
            except FormatTooLargeError as error:
                record["kernels"][kernel] = {"feasible": False, "reason": str(error)}
                continue
            y = np.empty(A.shape[0], dtype=A.dtype)
            t0 = time.perf_counter()
            op.matvec(x, out=y)  # includes compilation (or loading it from the cache)
            first_call_s = time.perf_counter() - t0
            norm = np.linalg.norm(ref)
            error = float(np.linalg.norm(y - ref) / norm) if norm else float(np.linalg.norm(y))
            seconds = median_seconds(lambda: op.matvec(x, out=y), args.seconds)
            record["kernels"][kernel] = {"feasible": True, "params": op.params, "us": seconds * 1e6,
                                         "first_call_s": first_call_s, "error": error}
        times = {k: r["us"] for k, r in record["kernels"].items() if r.get("feasible")}
        record["best"] = min(times, key=times.get)
        record["best_over_scipy"] = times[record["best"]] / record["scipy_us"]
        records.append(record)
        cells = [f"{times[k]:10.1f}" if k in times else f"{'infeas.':>10s}" for k in kernels]
        print(f"{path.stem:22s} {A.nnz:8d} {record['scipy_us']:8.1f} " + " ".join(cells)
              + f"   {record['best']}: {record['best_over_scipy']:.2f}", flush=True)
    large = [r for r in records if r["nnz"] >= LARGE_NNZ]
    small = [r for r in records if r["nnz"] < LARGE_NNZ]
    summary = {
        "large_speedup_geomean": geomean([1 / r["best_over_scipy"] for r in large]),
        "small_time_ratio_geomean": geomean([r["best_over_scipy"] for r in small]),
        "small_time_ratio_max": max((r["best_over_scipy"] for r in small), default=float("nan")),
        "large_count": len(large), "small_count": len(small),
    }
    print(f"matrices ≥ {LARGE_NNZ} nnz: best kernel {summary['large_speedup_geomean']:.2f}× faster "
          f"than SciPy (geometric mean of {len(large)}); smaller: best/SciPy time "
          f"{summary['small_time_ratio_geomean']:.2f} (geomean), {summary['small_time_ratio_max']:.2f} (max)")
    host = platform.node() or "host"
    date = datetime.date.today().isoformat()
    result = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpus": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "scipy": scipy.__version__,
                    "numba": __import__("numba").__version__},
        "date": date, "dtype": args.dtype, "summary": summary, "records": records,
    }
    out = args.out or Path(__file__).parent / "results" / f"cpu-{args.dtype}-{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
