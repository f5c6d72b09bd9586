"""GPU benchmark: every autospmv kernel against cuSPARSE (CuPy) and torch.sparse, in one run.

For each matrix (the real matrices as given, the same grown to ~20M nonzeros as block-diagonal
copies, and generated large matrices), every kernel of the registry (``--kernels`` picks some)
runs with its chooser's parameters for the GPU and, with ``--variants``, with the parameter
variants its registry entry names: the configurations the labeller times
(:func:`autospmv.training.label.configurations`). Each result is checked against SciPy in
float64, and then every configuration and baseline of the matrix is timed with the labeller's timer
(:class:`autospmv._support.timing.Bench` as :mod:`autospmv.training.timing` gives it, refusing numba-cuda's
simulator: CUDA events, interleaved rounds, contention check; design.md, "Measurement method")
two ways:

* per call — events around one synchronised user-facing call (``op.matvec(x, out=y)`` with device
  arrays; ``A @ x`` for CuPy and torch): what a solver loop with host logic between calls sees;
* back-to-back — ``--b2b`` calls between two events: host work overlaps GPU work, so this is the
  kernel's own time.

Four x vectors are rotated so small matrices do not time a warm L2 cache alone. Effective bandwidth
is the minimum CSR traffic (nnz·(value+index) + (m+1)·index + n·value + m·value) over the time.
Writes ``benchmarks/results/gpu-<device>-<date>.json``.

Two figures come from loops of their own, as they time something other than a product: the
device-to-device copy bandwidth (the ceiling effective bandwidth is compared with), and the host
overhead per call, the wall-clock time of many unsynchronised ``op.matvec(x, out=y)`` calls on the
first small matrix (the host's share alone, with the operator ``prepare`` picks there).

    PYTHONPATH=. python benchmarks/gpu.py --matrices .matrices --large --grown
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
from autospmv import _registry as registry  # noqa: E402
from autospmv.formats.base import FormatTooLargeError  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv.training.label import Config, configurations  # noqa: E402
from autospmv._support.timing import (TimingOptions, relative_error,  # noqa: E402
                                      release_device_memory)
from autospmv.training.timing import TOLERANCE, Bench  # noqa: E402

VECTORS = 4
WARMUP = 10
B2B_BATCHES = 5
BUDGET_S = 600.0
"""Time allowed to each measurement: large, so that the sample counts are the ones asked for."""


def min_bytes(A: sp.csr_matrix) -> int:
    v, i = A.data.itemsize, A.indices.itemsize
    m, n = A.shape
    return A.nnz * (v + i) + (m + 1) * i + n * v + m * v


def timing_options(repeats: int, b2b: int) -> TimingOptions:
    """The labeller's timer with this benchmark's sample counts: exactly ``repeats`` per-call
    samples and :data:`B2B_BATCHES` batches of ``b2b`` calls (no time budget shortens them),
    after :data:`WARMUP` calls, over :data:`VECTORS` x vectors."""
    return TimingOptions(warmup=WARMUP, repeats=repeats, min_repeats=repeats,
                         max_seconds=BUDGET_S, b2b_calls=b2b, b2b_repeats=B2B_BATCHES,
                         vectors=VECTORS)


class Calls:
    """``call(i)`` as an operator for :class:`Bench`, whose ``matvec(xs[i], out=ys[i])`` runs it
    with the index i of the bench's vector: for what is not an autospmv operator (a baseline's
    ``M @ x`` on its own copies of the vectors, a device program launched directly)."""

    def __init__(self, call, bench: Bench):
        self._call = call
        self._index = {id(x): i for i, x in enumerate(bench.xs)}

    def matvec(self, x, out=None):
        return self._call(self._index[id(x)])


def figures(timing: dict) -> dict:
    """A timing of :meth:`Bench.time_all` as this benchmark's fields (µs, medians unless said)."""
    per_call, b2b = timing["per_call"], timing["b2b"]
    return {"per_call_us": per_call["median"], "per_call_min_us": per_call["min"],
            "per_call_p90_us": per_call["p90"], "per_call_samples": per_call["n"],
            "b2b_us": b2b["median"], "b2b_min_us": b2b["min"], "b2b_batches": b2b["n"],
            "b2b_calls": timing["b2b_calls"], "retimed": timing["retimed"]}


def add_timings(results: dict, timings: dict) -> None:
    """Add :meth:`Bench.time_all`'s ``timings`` to ``results`` of the same keys (a timing that
    raised is recorded as ``failed``)."""
    for key, timing in timings.items():
        if isinstance(timing, Exception):
            results[key]["failed"] = f"{type(timing).__name__}: {timing}"
        else:
            results[key].update(figures(timing))


COPY_WARMUP_S = 1.0
"""Seconds of untimed copies before the timed ones: a GPU that was idle runs its first copies at
lower clocks."""

COPY_ROUNDS_S = 2.0
"""Seconds of rounds of ten timed copies; the copy bandwidth is the highest round's median. The
copy rate of these GPUs moves for stretches of a second or more: on an H200, copies ran at
3.40–3.59 TB/s in some stretches and 3.75–3.87 in others, on the same buffers and after
warm-up; on an H100, 2.49–2.81 (``benchmarks/results/kernels-gpu-2026-11-26-27.md``, "csr5: one
atomic per block on very long rows"). The higher rate is the one the memory sustains, and the
one kernels are compared with: measured so, 3.85–3.86 TB/s on the H200 in every one of six
measurements."""


def copy_bandwidth_tbs(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth (bytes read + bytes written per second), in TB/s: the
    highest median of ten copies of ``nbytes`` over :data:`COPY_ROUNDS_S` of rounds, after
    :data:`COPY_WARMUP_S` of untimed copies."""
    from numba import cuda

    src = cuda.device_array(nbytes // 8, dtype=np.float64)
    dst = cuda.device_array_like(src)
    start = time.perf_counter()
    while time.perf_counter() - start < COPY_WARMUP_S:
        dst.copy_to_device(src)
        cuda.synchronize()
    fastest = math.inf
    start = time.perf_counter()
    while time.perf_counter() - start < COPY_ROUNDS_S:
        times = []
        for _ in range(10):
            begin, end = cuda.event(), cuda.event()
            begin.record()
            dst.copy_to_device(src)
            end.record()
            end.synchronize()
            times.append(cuda.event_elapsed_time(begin, end) * 1e-3)
        fastest = min(fastest, float(np.median(times)))
    return 2 * nbytes / fastest / 1e12


def host_overhead_us(op, xs, ys, calls: int = 2000) -> float:
    """Wall-clock host time per ``op.matvec(x, out=y)`` on device arrays (no synchronisation)."""
    from numba import cuda

    for i in range(50):
        op.matvec(xs[i % VECTORS], out=ys[i % VECTORS])
    cuda.synchronize()
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(calls):
            op.matvec(xs[i % VECTORS], out=ys[i % VECTORS])
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        cuda.synchronize()
    return best


def _key(config: Config):
    """A configuration's key among the results of a matrix: equal parameters share one."""
    return config.key if not config.error else (config.kernel, config.strategy)


def build(A, config: Config, bench: Bench, ref) -> tuple[dict, object]:
    """Build and check one configuration: (its result, the operator to time or None)."""
    if config.error:
        return {"feasible": False, "params": None,
                "reason": f"choosing parameters: {config.error}"}, None
    t0 = time.perf_counter()
    try:
        op = autospmv.prepare(A, kernel=config.kernel, device="cuda", params=config.params)
    except FormatTooLargeError as error:
        return {"feasible": False, "params": config.params, "reason": str(error)}, None
    prepare_s = time.perf_counter() - t0
    return {"feasible": True, "params": op.params, "prepare_s": prepare_s,
            "error": relative_error(bench.result(op), ref)}, op


def cusparse(A, bench: Bench):
    """cuSPARSE through CuPy: (``M @ x`` as :class:`Calls`, ``M @ x₀`` on the host)."""
    import cupy
    import cupyx.scipy.sparse as csp

    M = csp.csr_matrix(A)
    xs = [cupy.asarray(x.copy_to_host()) for x in bench.xs]
    return Calls(lambda i: M @ xs[i], bench), cupy.asnumpy(M @ xs[0])


def torch_sparse(A, bench: Bench):
    """torch.sparse CSR: (``M @ x`` as :class:`Calls`, ``M @ x₀`` on the host)."""
    import torch

    M = torch.sparse_csr_tensor(
        torch.from_numpy(A.indptr.astype(np.int64)), torch.from_numpy(A.indices.astype(np.int64)),
        torch.from_numpy(A.data), size=A.shape, device="cuda",
    )
    xs = [torch.from_numpy(x.copy_to_host()).cuda() for x in bench.xs]
    return Calls(lambda i: M @ xs[i], bench), (M @ xs[0]).cpu().numpy()


BASELINES = {"cusparse": cusparse, "torch": torch_sparse}


def baselines(A, bench: Bench, ref) -> tuple[dict, dict]:
    """(``{name: result}``, ``{name: Calls}`` to time) for :data:`BASELINES`; a baseline that
    cannot run (library absent, unsupported case) has ``failed`` in its result instead."""
    results, calls = {}, {}
    for name, make in BASELINES.items():
        try:
            calls[name], y = make(A, bench)
            results[name] = {"error": relative_error(y, ref)}
        except Exception as error:  # a missing library or unsupported case is recorded
            calls.pop(name, None)
            results[name] = {"failed": f"{type(error).__name__}: {error}"}
    return results, calls


def bench_matrix(A, kernels, with_variants: bool, with_baselines: bool,
                 options: TimingOptions, x) -> tuple[dict, Bench]:
    """Results of one canonical matrix: ``{"kernels": {kernel: result}, "variants": {kernel:
    [result, ...]}, "cusparse": result, "torch": result}`` (variants and baselines when asked),
    all timed together, and the bench (its vectors are reused for the host overhead)."""
    ref = A.astype(np.float64) @ x.astype(np.float64)
    bench = Bench("cuda", x, A.shape[0], options)
    chosen, extra = configurations(A, "cuda", with_variants)
    chosen = [c for c in chosen if c.kernel in kernels]
    extra = [c for c in extra if c.kernel in kernels]
    results, ops = {}, {}
    for config in chosen + extra:  # a configuration equal to one built is not built again
        if _key(config) not in results:
            results[_key(config)], op = build(A, config, bench, ref)
            if op is not None:
                ops[_key(config)] = op
    if with_baselines:
        base_results, base_calls = baselines(A, bench, ref)
        results.update(base_results)
        ops.update(base_calls)
    add_timings(results, bench.time_all(ops))
    del ops
    release_device_memory("cuda")

    out = {"kernels": {c.kernel: dict(results[_key(c)]) for c in chosen}}
    for c in extra:
        out.setdefault("variants", {}).setdefault(c.kernel, []).append(
            dict(results[_key(c)], strategy=c.strategy))
    if with_baselines:
        out.update({name: results[name] for name in BASELINES})
    return out, bench


def large_matrices(nnz: float):
    """The generated large matrices (≥ 10M nonzeros each) from the training corpus generators."""
    from autospmv.training import generators

    n = int(nnz)
    yield "stencil2d_5pt", generators.stencil("bench/stencil2d", n, points=5)
    yield "stencil3d_7pt", generators.stencil("bench/stencil3d", n, points=7)
    yield "stencil3d_27pt", generators.stencil("bench/stencil3d27", n, points=27)
    yield "block_fem_3x3", generators.block_fem("bench/fem3", n, block=3, mesh_points=7)
    yield "uniform_random_16", generators.uniform_random("bench/uniform", n, mean=16.0)
    yield "power_law_2.0", generators.power_law("bench/powerlaw", n, alpha=2.0)
    yield "dense_rows", generators.dense_rows("bench/dense", n, dense=8, fraction=0.5)


def matrices(args):
    folder = Path(args.matrices) if args.matrices else None
    real = sorted(folder.glob("*.npz")) if folder and folder.is_dir() else []
    if not args.no_real:
        for path in real:
            yield path.stem, "real", sp.load_npz(path)
    if args.large:
        for name, A in large_matrices(args.large_nnz):
            yield name, "large", A
    if args.grown:
        from autospmv.training import corpus

        for path in real:
            A = sp.load_npz(path)
            k = max(1, round(args.grown_nnz / max(A.nnz, 1)))
            yield f"{path.stem}_x{k}", "grown", corpus.grow(A, k)


def device_info() -> dict:
    """The GPU and library versions (under numba-cuda's simulator, which has neither name nor
    driver, the GPU is called "CUDA simulator")."""
    from numba import cuda
    import numba

    dev = cuda.get_current_device()
    name = getattr(dev, "name", "CUDA simulator")
    driver = getattr(getattr(cuda, "driver", None), "driver", None)
    info = {
        "gpu": name.decode() if isinstance(name, bytes) else name,
        "compute_capability": list(dev.compute_capability),
        "driver": driver.get_version() if hasattr(driver, "get_version") else None,
        "numba": numba.__version__, "numpy": np.__version__, "python": platform.python_version(),
    }
    for module in ("numba_cuda", "cupy", "torch", "scipy"):
        try:
            info[module] = __import__(module).__version__
        except Exception:  # library absent on this machine
            info[module] = None
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", help="folder of .npz matrices (the real set)")
    parser.add_argument("--only", help="comma-separated matrix names to run (default: all)")
    parser.add_argument("--kernels", default=",".join(registry.names()),
                        help="comma-separated kernels of the registry (default: all)")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--no-real", action="store_true",
                        help="skip the real matrices as given (still grown with --grown)")
    parser.add_argument("--grown", action="store_true", help="also grow each real matrix by kron")
    parser.add_argument("--grown-nnz", type=float, default=20e6)
    parser.add_argument("--large", action="store_true", help="also generated ≥10M-nnz matrices")
    parser.add_argument("--large-nnz", type=float, default=12e6)
    parser.add_argument("--repeats", type=int, default=50, help="per-call samples")
    parser.add_argument("--b2b", type=int, default=50, help="calls per back-to-back batch")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--variants", action="store_true",
                        help="also time the parameter variants of each kernel's registry entry")
    parser.add_argument("--out", help="JSON output path (default benchmarks/results/...)")
    args = parser.parse_args(argv)
    kernels = args.kernels.split(",")
    for kernel in kernels:
        try:
            registry.get(kernel)
        except ValueError as error:
            parser.error(str(error))
    options = timing_options(args.repeats, args.b2b)
    tolerance = TOLERANCE[np.dtype(args.dtype)]
    info = device_info()
    info["copy_tbs"] = copy_bandwidth_tbs()
    print(f"{info['gpu']}: device-to-device copy {info['copy_tbs']:.2f} TB/s", flush=True)
    rng = np.random.default_rng(0)
    records = []
    overhead = None
    date = datetime.date.today().isoformat()
    slug = info["gpu"].replace("NVIDIA ", "").replace(" ", "-").lower()
    out = Path(args.out) if args.out else (
        Path(__file__).parent / "results" / f"gpu-{slug}-{date}.json")
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():  # after every matrix, so an interrupted run keeps what it measured
        out.write_text(json.dumps({
            "device": info, "date": date, "dtype": args.dtype, "repeats": args.repeats,
            "b2b_calls": args.b2b, "timing": dataclasses.asdict(options),
            "host_overhead": overhead, "records": records}, indent=1))

    def cell(r: dict) -> str:
        if not r.get("feasible", True):
            return "infeas."
        if "error" in r and not r["error"] <= tolerance:
            return "WRONG"
        return f"{r['per_call_us']:.0f}/{r['b2b_us']:.0f}" if "b2b_us" in r else "-"

    header = f"{'matrix':28s} {'nnz':>9s} " + " ".join(f"{k:>10s}" for k in kernels)
    print(header + f" {'cusparse':>10s} {'torch':>10s}  (per-call µs / b2b µs)", flush=True)
    only = set(args.only.split(",")) if args.only else None
    for name, group, A in matrices(args):
        if only and name not in only:
            continue
        A = canonicalize(A.astype(args.dtype))
        x = rng.standard_normal(A.shape[1]).astype(A.dtype)
        record = {"matrix": name, "group": group, "shape": list(A.shape), "nnz": int(A.nnz),
                  "min_bytes": min_bytes(A)}
        results, bench = bench_matrix(A, kernels, args.variants, not args.no_baselines,
                                      options, x)
        record.update(results)
        if overhead is None and A.nnz < 50_000:
            op = autospmv.prepare(A, device="cuda")
            overhead = {"matrix": name, "kernel": op.kernel,
                        "host_us_per_matvec": host_overhead_us(op, bench.xs, bench.ys)}
            print(f"host overhead per op.matvec(x, out=y): {overhead['host_us_per_matvec']:.2f} µs "
                  f"({name}, {op.kernel})", flush=True)
            del op
        del bench
        records.append(record)
        save()
        cells = [cell(record["kernels"][kernel]) for kernel in kernels]
        cells += [cell(record[base]) if base in record else "-" for base in BASELINES]
        print(f"{name:28s} {A.nnz:9d} " + " ".join(f"{c:>10s}" for c in cells), flush=True)
        for kernel, runs in record.get("variants", {}).items():
            print(f"    {kernel} variants (b2b µs): " + ", ".join(
                f"{r['strategy']} {r['params']}: {r['b2b_us']:.0f}" for r in runs
                if "b2b_us" in r), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
