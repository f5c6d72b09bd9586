"""Per-kernel profile on large matrices: what limits each kernel, in float32 and float64.

For each matrix (real matrices grown to ~20M nonzeros, generated large matrices), dtype and kernel
(optionally several parameter settings of one kernel), the result is checked against SciPy and
timed back-to-back and per call (the labeller's timer, :class:`autospmv._support.timing.Bench` through
:mod:`autospmv.training.timing`, with the sample counts of :func:`gpu.timing_options`). Three
rates are reported:

* effective bandwidth: the minimum CSR traffic (design.md) over the time, comparable across
  kernels and with cuSPARSE;
* format bandwidth: the bytes the kernel must read at least (its format's arrays, x once, y once)
  over the time, which says how close the kernel runs to the memory system's limit with the
  layout it has;
* the device's measured copy bandwidth, the ceiling both are compared with.

A kernel whose one synchronised call runs below ``--slowest`` (2 %) of the copy bandwidth is
checked but not timed further: its run carries ``once_us`` and ``skipped`` instead of timings.
Timing such kernels took an estimated 240 s of the 308 s float32 run on the H200 in
``results/kernels-h200-2026-11-26-unsigned-float32.json`` (in the repository's history; JDS and
csr_scalar on power_law_2.0 and dense_rows, 48–508 ms a call). The summary's selection score
counts such a kernel, when chosen, by that one call.

``--compare NAME=FILE`` (repeatable) times, beside the registered CUDA module of kernel NAME,
another implementation of that module (a file with the same ``build(fmt, params, arrays)``),
built on the same uploaded arrays: an A/B of versions of a kernel in one process on one device.

    PYTHONPATH=. python benchmarks/kernel_profile.py --matrices .matrices \\
        --dtypes float32,float64 --variants csr5:sigma=8,12,16,24,32 --out results.json

``--at-random`` numbers each grown copy at random (one random symmetric permutation of the
block-diagonal copies, seeded by the matrix's name: :func:`autospmv.training.corpus.grow_permuted`),
as graph and unstructured-mesh data often arrive: the summary's selection score is then the
default operator's on such matrices, whose order it keeps.

Counters (Nsight Compute) for the same launches: ``--once`` runs every configuration exactly once
with no timing, for ``ncu --kernel-name regex:_kernel --csv ... python benchmarks/kernel_profile.py
--once ...``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gpu  # noqa: E402  (timer options, baselines, matrices, device information)

import autospmv  # noqa: E402
from autospmv import _registry as registry  # noqa: E402
from autospmv.formats.base import FormatTooLargeError  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv._support.timing import CpuClock, relative_error  # noqa: E402
from autospmv.training.timing import TOLERANCE, Bench  # noqa: E402

DEFAULT_GROWN = ("80BAU3B", "PILOT87", "PGPgiantcompo", "polblogs", "netscience", "rajat19",
                 "adder_dcop_05", "G51", "fe_4elt2", "cryg2500", "bcsstk16", "FIT2D")
"""Real matrices grown by default: LP, graphs, circuits and regular meshes."""


def parse_variants(text: str | None) -> dict:
    """``"csr5:sigma=8,16;csr_vector:threads_per_row=4,8"`` -> {kernel: [params, ...]}."""
    out = {}
    for part in filter(None, (text or "").split(";")):
        kernel, setting = part.split(":")
        key, values = setting.split("=")
        out[kernel] = [{key: int(v)} for v in values.split(",")]
    return out


def load_module(kernel: str, path: str):
    """Another implementation of ``autospmv.kernels.cuda.<kernel>``, importable beside it."""
    name = f"autospmv.kernels.cuda._{kernel}_{Path(path).stem}_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def host_format(op, A):
    """The operator's format built on the host from A by its registry entry: on a GPU the
    operator keeps no host copy, and the format's sizes and metadata are needed here (for
    :func:`format_bytes` and to build ``--compare`` programs on the uploaded arrays)."""
    return registry.get(op.kernel).convert(A, op.params, "cuda")


def format_bytes(fmt) -> int:
    """Bytes a kernel must move at least: its format's arrays, x once and y once."""
    m, n = fmt.shape
    return int(fmt.nbytes) + (m + n) * np.dtype(fmt.dtype).itemsize


def run(op, bench: Bench, timed: bool, ref, program=None, slowest_us: float | None = None):
    """Check and time one operator (or ``program`` built on its arrays) on the bench's vectors;
    with ``timed`` false, run it once (for the profiler) and return {}. A kernel whose second,
    synchronised call takes longer than ``slowest_us`` is not timed further (``skipped``): a
    kernel that far below the memory system cannot be the best one, and timing it back-to-back
    took most of a run's time (see the module docstring)."""
    from numba import cuda

    target = op
    if program is not None:
        from autospmv.kernels.cuda.launch import SIMULATOR, device_pointer

        xp = bench.xs if SIMULATOR else [device_pointer(x) for x in bench.xs]
        yp = bench.ys if SIMULATOR else [device_pointer(y) for y in bench.ys]
        target = gpu.Calls(lambda i: program.run(xp[i], yp[i], 0), bench)
    target.matvec(bench.xs[0], out=bench.ys[0])
    if not timed:
        cuda.synchronize()
        return {}
    results = {0: {"error": relative_error(bench.ys[0].copy_to_host(), ref)}}
    if slowest_us is not None:
        cuda.synchronize()
        timer = CpuClock()
        timer.start()
        target.matvec(bench.xs[0], out=bench.ys[0])
        cuda.synchronize()
        once_us = timer.stop()
        if once_us > slowest_us:
            results[0].update(once_us=once_us, skipped=f"one call took {once_us:,.0f} µs, above "
                                                       f"{slowest_us:,.0f} µs: not timed")
            return results[0]
    gpu.add_timings(results, bench.time_all({0: target}))
    return results[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", help="folder of .npz matrices to grow")
    parser.add_argument("--grown", default=",".join(DEFAULT_GROWN),
                        help="names of the matrices to grow (comma-separated; 'all' for every one)")
    parser.add_argument("--grown-nnz", type=float, default=20e6)
    parser.add_argument("--at-random", action="store_true",
                        help="number each grown matrix at random (a random symmetric "
                             "permutation of its copies)")
    parser.add_argument("--no-large", action="store_true", help="skip the generated matrices")
    parser.add_argument("--large-nnz", type=float, default=20e6)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--kernels", default=",".join(registry.names()))
    parser.add_argument("--variants", help="e.g. 'csr5:sigma=8,12,16,24,32'")
    parser.add_argument("--compare", action="append", default=[],
                        help="KERNEL=FILE: also time another implementation of the CUDA module")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--once", action="store_true", help="run each once, untimed (for ncu)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--b2b", type=int, default=50)
    parser.add_argument("--slowest", type=float, default=0.02,
                        help="time a kernel only if one call runs at this fraction of the copy "
                             "bandwidth or more (effective bytes); 0 times every kernel")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    kernels = args.kernels.split(",")
    variants = parse_variants(args.variants)
    compared = {}
    for item in args.compare:
        kernel, path = item.split("=", 1)
        compared.setdefault(kernel, []).append((Path(path).stem, load_module(kernel, path)))
    timed = not args.once
    options = gpu.timing_options(args.repeats, args.b2b)
    info = gpu.device_info()
    info["copy_tbs"] = None if args.once else gpu.copy_bandwidth_tbs()
    out = Path(args.out)
    records = []
    rng = np.random.default_rng(0)

    def save():
        out.write_text(json.dumps({"device": info, "records": records}, indent=1))

    def matrices():
        folder = Path(args.matrices) if args.matrices else None
        names = None if args.grown == "all" else set(args.grown.split(","))
        from autospmv.training import corpus

        for path in sorted(folder.glob("*.npz")) if folder else []:
            if names is not None and path.stem not in names:
                continue
            A = sp.load_npz(path)
            k = max(1, round(args.grown_nnz / max(A.nnz, 1)))
            if args.at_random:
                yield f"{path.stem}_p{k}", "grown at random", corpus.grow_permuted(A, k, path.stem)
            else:
                yield f"{path.stem}_x{k}", "grown", corpus.grow(A, k)
        if not args.no_large:
            yield from ((name, "large", A) for name, A in gpu.large_matrices(args.large_nnz))

    print(f"{info['gpu']}: copy {info['copy_tbs'] or 0:.2f} TB/s", flush=True)
    for name, group, A64 in matrices():
        for dtype in args.dtypes.split(","):
            A = canonicalize(A64.astype(dtype))
            x = rng.standard_normal(A.shape[1]).astype(A.dtype)
            ref = A.astype(np.float64) @ x.astype(np.float64)
            bench = Bench("cuda", x, A.shape[0], options)
            record = {"matrix": name, "group": group, "dtype": dtype, "shape": list(A.shape),
                      "nnz": int(A.nnz), "min_bytes": gpu.min_bytes(A), "runs": []}
            slowest_us = (record["min_bytes"] / (args.slowest * info["copy_tbs"] * 1e6)
                          if timed and args.slowest > 0 else None)
            choice = autospmv.select(A, device="cuda")
            record["selected"] = {"kernel": choice.kernel, "params": choice.params,
                                  "model": next((n for n in choice.notes if n.startswith("model ")),
                                                None)}
            for kernel in kernels:
                for params in [None] + variants.get(kernel, []):
                    try:
                        op = autospmv.prepare(A, kernel=kernel, device="cuda", params=params)
                    except FormatTooLargeError as error:
                        record["runs"].append({"kernel": kernel, "params": params,
                                               "feasible": False, "reason": str(error)})
                        continue
                    fmt = host_format(op, A)
                    implementations = [("registered", None)]
                    for label, module in compared.get(kernel, []):
                        program = module.build(fmt, op.params,
                                               op._backend.program.arrays).load()
                        implementations.append((label, program))
                    for label, program in implementations:
                        result = run(op, bench, timed, ref, program, slowest_us)
                        result.update({"kernel": kernel, "implementation": label,
                                       "params": op.params, "feasible": True,
                                       "format_bytes": format_bytes(fmt)})
                        if "b2b_us" in result:
                            result["eff_tbs"] = record["min_bytes"] / result["b2b_us"] / 1e6
                            result["format_tbs"] = result["format_bytes"] / result["b2b_us"] / 1e6
                        record["runs"].append(result)
                    del op, fmt
            if timed and not args.no_baselines:
                results, calls = gpu.baselines(A, bench, ref)
                gpu.add_timings(results, bench.time_all(calls))
                for base, r in results.items():
                    if "b2b_us" in r:
                        r["eff_tbs"] = record["min_bytes"] / r["b2b_us"] / 1e6
                    record[base] = r
            del bench
            records.append(record)
            save()
            if timed:
                print(summary_line(record), flush=True)
    save()
    if timed:
        for line in summary(records, info["copy_tbs"]):
            print(line)
    print(f"wrote {out}")


def correct_runs(record, with_skipped: bool = False) -> list[dict]:
    """The record's runs of the registered kernels that ran, were timed back-to-back and
    matched the reference within the dtype's tolerance: the ones a best kernel is among. With
    ``with_skipped``, also those that matched but were too slow to be timed (``once_us`` only),
    which a selection can still land on (:func:`time_us`)."""
    tolerance = TOLERANCE[np.dtype(record["dtype"])]
    return [x for x in record["runs"] if x.get("feasible") and x["implementation"] == "registered"
            and x["error"] <= tolerance
            and ("b2b_us" in x or with_skipped and "once_us" in x)]


def time_us(run: dict) -> float:
    """A run's back-to-back time, or for a kernel too slow to be timed its one synchronised
    call (launch included: at those times, a few µs more than back-to-back)."""
    return run["b2b_us"] if "b2b_us" in run else run["once_us"]


def summary(records, copy_tbs) -> list[str]:
    """Per dtype: the best kernel against cuSPARSE (back-to-back), its effective bandwidth
    against the copy bandwidth, and the automatic selection against the best kernel."""
    lines = []
    for dtype in sorted({r["dtype"] for r in records}):
        ratios, rates, quality = [], [], []
        for r in (r for r in records if r["dtype"] == dtype):
            ok = correct_runs(r)
            if not ok:
                continue
            best = min(ok, key=lambda x: x["b2b_us"])
            rates.append(best["eff_tbs"])
            if "b2b_us" in r.get("cusparse", {}):
                ratios.append(r["cusparse"]["b2b_us"] / best["b2b_us"])
            chosen = [x for x in correct_runs(r, with_skipped=True)
                      if x["kernel"] == r["selected"]["kernel"]
                      and x["params"] == r["selected"]["params"]]
            if chosen:
                quality.append(best["b2b_us"] / time_us(chosen[0]))

        def geomean(v):
            return float(np.exp(np.mean(np.log(v)))) if v else float("nan")

        lines.append(
            f"{dtype}: best kernel vs cuSPARSE (b2b) geomean {geomean(ratios):.3f}, "
            f"min {min(ratios, default=float('nan')):.3f}, "
            f">= 1.0 on {sum(x >= 1.0 for x in ratios)}/{len(ratios)}; median best "
            f"{np.median(rates):.2f} TB/s = {np.median(rates) / copy_tbs:.0%} of copy; "
            f"selection {geomean(quality):.3f} of best, "
            f"{sum(q >= 1 / 1.1 for q in quality)}/{len(quality)} within 10 %, "
            f"worst {min(quality, default=float('nan')):.3f}")
    return lines


def summary_line(record) -> str:
    """One line per matrix and dtype: effective TB/s of every run and of cuSPARSE."""
    cells = []
    for r in record["runs"]:
        if not r.get("feasible"):
            continue
        implementation = r["implementation"]
        tag = r["kernel"] + ("" if implementation == "registered" else f"[{implementation}]")
        tag += "".join(f":{v}" for v in r["params"].values()) if r["params"] else ""
        bad = not r["error"] <= TOLERANCE[np.dtype(record["dtype"])]
        rate = (format(r["eff_tbs"], ".2f") if "eff_tbs" in r
                else "slow" if "skipped" in r else "failed")
        cells.append(f"{tag}={'WRONG' if bad else rate}")
    cus = record.get("cusparse", {})
    if "eff_tbs" in cus:
        cells.append(f"cusparse={cus['eff_tbs']:.2f}")
    return f"{record['matrix'][:22]:22s} {record['dtype'][-2:]} " + " ".join(cells)


if __name__ == "__main__":
    main()
