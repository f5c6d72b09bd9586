"""CPU benchmark: every autospmv CPU kernel through the operator against SciPy's ``A @ x``.

Each kernel of the registry (``--kernels`` picks some) is timed as users call it,
``op.matvec(x, out=y)`` (argument checks and dispatch included), and SciPy as ``A @ x``, all of
one matrix together with the labeller's timer (:class:`autospmv._support.timing.Bench`: warm-up, then
interleaved rounds of per-call samples and of back-to-back batches, contention check), its time
budget set so that each of the two measurements takes about ``--seconds``. The figure reported
(``us``, ``scipy_us``) is the median back-to-back time per call, over batches of about
``--seconds`` / 15 each; the per-call median is recorded beside it. Results are checked against
SciPy in float64 first. Prints a table and writes ``benchmarks/results/cpu-<dtype>-<date>.json``.

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
from autospmv import _registry as registry  # noqa: E402
from autospmv.formats.base import FormatTooLargeError  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv._support.timing import Bench, TimingOptions, relative_error  # noqa: E402

LARGE_NNZ = 100_000
SCIPY = "scipy"
"""The key SciPy's ``A @ x`` is timed under, beside the kernels."""


def timing_options(seconds: float) -> TimingOptions:
    """The labeller's timer with about ``seconds`` for each measurement of one operator: 15 to
    200 per-call samples, and 15 back-to-back batches of up to 10,000 calls each."""
    return TimingOptions(warmup=2, repeats=200, min_repeats=15, max_seconds=seconds,
                         b2b_calls=10_000, b2b_repeats=15)


class SciPyProduct:
    """SciPy's ``A @ x`` as an operator for :class:`Bench` (a new y every call, as users get)."""

    def __init__(self, A):
        self._A = A

    def matvec(self, x, out=None):
        return self._A @ x


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
    parser.add_argument("--kernels", default=",".join(registry.names()))
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--seconds", type=float, default=0.3, help="time budget per measurement")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.matrices is None or not args.matrices.is_dir():
        parser.error("no matrix folder found; pass --matrices DIR")
    kernels = args.kernels.split(",")
    for kernel in kernels:
        try:
            registry.get(kernel)
        except ValueError as error:
            parser.error(str(error))
    options = timing_options(args.seconds)
    rng = np.random.default_rng(0)
    records = []
    print(f"{'matrix':22s} {'nnz':>8s} {'scipy':>8s} " + " ".join(f"{k:>10s}" for k in kernels)
          + "   (µs per call; best/scipy ratio last)", flush=True)
    for path in sorted(args.matrices.glob("*.npz")):
        A = canonicalize(sp.load_npz(path).astype(args.dtype))
        x = rng.standard_normal(A.shape[1]).astype(A.dtype)
        ref = A.astype(np.float64) @ x.astype(np.float64)
        bench = Bench("cpu", x, A.shape[0], options)
        ops = {SCIPY: SciPyProduct(A)}
        record = {"matrix": path.stem, "shape": list(A.shape), "nnz": int(A.nnz), "kernels": {}}
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
            record["kernels"][kernel] = {"feasible": True, "params": op.params,
                                         "first_call_s": first_call_s,
                                         "error": relative_error(y, ref)}
            ops[kernel] = op
        timings = bench.time_all(ops)
        del ops, bench
        for key, timing in timings.items():
            if isinstance(timing, Exception):
                raise RuntimeError(f"{path.stem}: timing {key} failed") from timing
            figures = {"us": timing["b2b"]["median"], "per_call_us": timing["per_call"]["median"],
                       "spread": timing}
            if key == SCIPY:
                record.update({f"scipy_{name}": value for name, value in figures.items()})
            else:
                record["kernels"][key].update(figures)
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
