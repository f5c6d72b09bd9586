"""Per-kernel profile on large matrices: what limits each kernel, in float32 and float64.

For each matrix (real matrices grown to ~20M nonzeros, generated large matrices), dtype and kernel
(optionally several parameter settings of one kernel), the result is checked against SciPy and
timed back-to-back and per call (the timer of :mod:`gpu`). Three rates are reported:

* effective bandwidth: the minimum CSR traffic (design.md) over the time, comparable across
  kernels and with cuSPARSE;
* format bandwidth: the bytes the kernel must read at least (its format's arrays, x once, y once)
  over the time, which says how close the kernel runs to the memory system's limit with the
  layout it has;
* the device's measured copy bandwidth, the ceiling both are compared with.

``--compare NAME=FILE`` (repeatable) times, beside the registered CUDA module of kernel NAME,
another implementation of that module (a file with the same ``build(fmt, params, arrays)``),
built on the same uploaded arrays: an A/B of versions of a kernel in one process on one device.

    PYTHONPATH=. python benchmarks/kernel_profile.py --matrices .matrices \\
        --dtypes float32,float64 --variants csr5:sigma=8,12,16,24,32 --out results.json

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

import gpu  # noqa: E402  (timer, baselines, matrices, device information)

import autospmv  # noqa: E402
from autospmv.formats.base import FormatTooLargeError  # noqa: E402
from autospmv.validation import canonicalize  # noqa: E402

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


def format_bytes(op) -> int:
    """Bytes a kernel must move at least: its format's arrays, x once and y once."""
    m, n = op.shape
    return int(op.format.nbytes) + (m + n) * op.dtype.itemsize


def run(op, xs, ys, timer, ref, program=None):
    """Check and time one operator (or ``program`` built on its arrays) on device vectors."""
    from numba import cuda

    if program is None:
        def call(i):
            op.matvec(xs[i % gpu.VECTORS], out=ys[i % gpu.VECTORS])
    else:
        from autospmv.kernels.cuda.launch import SIMULATOR, device_pointer

        xp = xs if SIMULATOR else [device_pointer(x) for x in xs]
        yp = ys if SIMULATOR else [device_pointer(y) for y in ys]

        def call(i):
            program.run(xp[i % gpu.VECTORS], yp[i % gpu.VECTORS], 0)
    if timer is None:
        call(0)
        cuda.synchronize()
        return {}
    call(0)
    error = gpu.rel_error(ys[0].copy_to_host(), ref)
    result = {"error": error}
    result.update(timer.measure(call))
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", help="folder of .npz matrices to grow")
    parser.add_argument("--grown", default=",".join(DEFAULT_GROWN),
                        help="names of the matrices to grow (comma-separated; 'all' for every one)")
    parser.add_argument("--grown-nnz", type=float, default=20e6)
    parser.add_argument("--no-large", action="store_true", help="skip the generated matrices")
    parser.add_argument("--large-nnz", type=float, default=20e6)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--kernels", default=",".join(autospmv.KERNELS))
    parser.add_argument("--variants", help="e.g. 'csr5:sigma=8,12,16,24,32'")
    parser.add_argument("--compare", action="append", default=[],
                        help="KERNEL=FILE: also time another implementation of the CUDA module")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--once", action="store_true", help="run each once, untimed (for ncu)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--b2b", type=int, default=50)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from numba import cuda

    kernels = args.kernels.split(",")
    variants = parse_variants(args.variants)
    compared = {}
    for item in args.compare:
        kernel, path = item.split("=", 1)
        compared.setdefault(kernel, []).append((Path(path).stem, load_module(kernel, path)))
    timer = None if args.once else gpu.Timer(args.repeats, args.b2b)
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
        from training import corpus

        for path in sorted(folder.glob("*.npz")) if folder else []:
            if names is not None and path.stem not in names:
                continue
            A = sp.load_npz(path)
            k = max(1, round(args.grown_nnz / max(A.nnz, 1)))
            yield f"{path.stem}_x{k}", "grown", corpus.grow(A, k)
        if not args.no_large:
            yield from ((name, "large", A) for name, A in gpu.large_matrices(args.large_nnz))

    print(f"{info['gpu']}: copy {info['copy_tbs'] or 0:.2f} TB/s", flush=True)
    for name, group, A64 in matrices():
        for dtype in args.dtypes.split(","):
            A = canonicalize(A64.astype(dtype))
            xs_host = [rng.standard_normal(A.shape[1]).astype(A.dtype) for _ in range(gpu.VECTORS)]
            ref = A.astype(np.float64) @ xs_host[0].astype(np.float64)
            xs = [cuda.to_device(x) for x in xs_host]
            ys = [cuda.device_array(A.shape[0], dtype=A.dtype) for _ in range(gpu.VECTORS)]
            record = {"matrix": name, "group": group, "dtype": dtype, "shape": list(A.shape),
                      "nnz": int(A.nnz), "min_bytes": gpu.min_bytes(A), "runs": []}
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
                    implementations = [("registered", None)]
                    for label, module in compared.get(kernel, []):
                        program = module.build(op.format, op.params,
                                               op._backend.program.arrays).load()
                        implementations.append((label, program))
                    for label, program in implementations:
                        result = run(op, xs, ys, timer, ref, program)
                        result.update({"kernel": kernel, "implementation": label,
                                       "params": op.params, "feasible": True,
                                       "format_bytes": format_bytes(op)})
                        if "b2b_us" in result:
                            result["eff_tbs"] = record["min_bytes"] / result["b2b_us"] / 1e6
                            result["format_tbs"] = result["format_bytes"] / result["b2b_us"] / 1e6
                        record["runs"].append(result)
                    del op
            if timer is not None and not args.no_baselines:
                for base, fn in (("cusparse", gpu.bench_cusparse), ("torch", gpu.bench_torch)):
                    try:
                        r = fn(A, timer, xs_host, ref)
                        r["eff_tbs"] = record["min_bytes"] / r["b2b_us"] / 1e6
                    except Exception as error:  # a missing library is recorded, not fatal
                        r = {"failed": f"{type(error).__name__}: {error}"}
                    record[base] = r
            records.append(record)
            save()
            if timer is not None:
                print(summary_line(record), flush=True)
    save()
    if timer is not None:
        for line in summary(records, info["copy_tbs"]):
            print(line)
    print(f"wrote {out}")


def summary(records, copy_tbs) -> list[str]:
    """Per dtype: the best kernel against cuSPARSE (back-to-back), its effective bandwidth
    against the copy bandwidth, and the automatic selection against the best kernel."""
    lines = []
    for dtype in sorted({r["dtype"] for r in records}):
        ratios, rates, quality = [], [], []
        for r in (r for r in records if r["dtype"] == dtype):
            ok = [x for x in r["runs"] if x.get("feasible") and x["implementation"] == "registered"
                  and x["error"] <= (1e-5 if dtype == "float32" else 1e-12)]
            if not ok:
                continue
            best = min(ok, key=lambda x: x["b2b_us"])
            rates.append(best["eff_tbs"])
            if "b2b_us" in r.get("cusparse", {}):
                ratios.append(r["cusparse"]["b2b_us"] / best["b2b_us"])
            chosen = [x for x in ok if x["kernel"] == r["selected"]["kernel"]
                      and x["params"] == r["selected"]["params"]]
            if chosen:
                quality.append(best["b2b_us"] / chosen[0]["b2b_us"])

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
        bad = r["error"] > (1e-5 if record["dtype"] == "float32" else 1e-12)
        cells.append(f"{tag}={'WRONG' if bad else format(r['eff_tbs'], '.2f')}")
    cus = record.get("cusparse", {})
    if "eff_tbs" in cus:
        cells.append(f"cusparse={cus['eff_tbs']:.2f}")
    return f"{record['matrix'][:22]:22s} {record['dtype'][-2:]} " + " ".join(cells)


if __name__ == "__main__":
    main()
