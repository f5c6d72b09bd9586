"""GPU benchmark: every autospmv kernel against cuSPARSE (CuPy) and torch.sparse, in one run.

For each matrix (the real matrices as given, the same grown to ~20M nonzeros as block-diagonal
copies, and generated large matrices) and each kernel, the result is checked against SciPy in
float64 and then timed two ways with CUDA events (design.md, "Measurement method"):

* per call — events around one synchronised user-facing call (``op.matvec(x, out=y)`` with device
  arrays; ``A @ x`` for CuPy and torch): what a solver loop with host logic between calls sees;
* back-to-back — ``--b2b`` calls between two events: host work overlaps GPU work, so this is the
  kernel's own time.

Four x vectors are rotated so small matrices do not time a warm L2 cache alone. Effective bandwidth
is the minimum CSR traffic (nnz·(value+index) + (m+1)·index + n·value + m·value) over the time.
Host overhead per call is measured on a small matrix as wall-clock time of many unsynchronised
``op.matvec(x, out=y)`` calls. Writes ``benchmarks/results/gpu-<device>-<date>.json``.

    PYTHONPATH=. python benchmarks/gpu.py --matrices .matrices --large --grown
"""

from __future__ import annotations

import argparse
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
from autospmv.formats.base import FormatTooLargeError  # noqa: E402
from autospmv.validation import canonicalize  # noqa: E402

VECTORS = 4


def min_bytes(A: sp.csr_matrix) -> int:
    v, i = A.data.itemsize, A.indices.itemsize
    m, n = A.shape
    return A.nnz * (v + i) + (m + 1) * i + n * v + m * v


def rel_error(y, ref) -> float:
    norm = np.linalg.norm(ref)
    diff = np.linalg.norm(y.astype(np.float64) - ref)
    return float(diff / norm) if norm else float(diff)


class Timer:
    """CUDA-event timing of a callable ``call(i)`` on the legacy default stream."""

    def __init__(self, repeats: int, b2b: int):
        from numba import cuda

        self.cuda = cuda
        self.repeats = repeats
        self.b2b = b2b

    def _elapsed_us(self, fn) -> float:
        start, end = self.cuda.event(), self.cuda.event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return self.cuda.event_elapsed_time(start, end) * 1e3

    def measure(self, call) -> dict:
        for i in range(10):
            call(i)
        self.cuda.synchronize()
        per_call = [self._elapsed_us(lambda i=i: call(i)) for i in range(self.repeats)]

        def burst():
            for i in range(self.b2b):
                call(i)

        b2b = [self._elapsed_us(burst) / self.b2b for _ in range(5)]
        return {
            "per_call_us": float(np.median(per_call)),
            "per_call_p10_us": float(np.percentile(per_call, 10)),
            "per_call_p90_us": float(np.percentile(per_call, 90)),
            "b2b_us": float(np.median(b2b)),
            "b2b_min_us": float(np.min(b2b)),
        }


def copy_bandwidth_tbs(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth (bytes read + bytes written per second), in TB/s."""
    from numba import cuda

    src = cuda.device_array(nbytes // 8, dtype=np.float64)
    dst = cuda.device_array_like(src)
    dst.copy_to_device(src)
    times = []
    for _ in range(10):
        start, end = cuda.event(), cuda.event()
        start.record()
        dst.copy_to_device(src)
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end) * 1e-3)
    return 2 * nbytes / float(np.median(times)) / 1e12


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


def variants(kernel: str, A) -> list[dict]:
    """Parameter settings that the choosers pick between, timed with ``--variants``."""
    if kernel == "csr_vector":
        return [{"threads_per_row": g} for g in (2, 4, 8, 16, 32)]
    if kernel == "csr5":
        return [{"sigma": s} for s in (4, 8, 12, 16)]
    if kernel == "hyb":
        from autospmv.formats import hyb
        from autospmv.formats.base import row_lengths

        lengths = row_lengths(A)
        widths = {int(f(lengths)) for f in (hyb.width_quantile, hyb.width_cusp, hyb.width_cost)}
        return [{"width": w} for w in sorted(widths)]
    return []


def bench_autospmv(A, kernel, timer, xs_host, ref, params=None):
    from numba import cuda

    t0 = time.perf_counter()
    try:
        op = autospmv.prepare(A, kernel=kernel, device="cuda", params=params)
    except FormatTooLargeError as error:
        return {"feasible": False, "reason": str(error)}
    prepare_s = time.perf_counter() - t0
    xs = [cuda.to_device(x) for x in xs_host]
    ys = [cuda.device_array(A.shape[0], dtype=A.dtype) for _ in range(VECTORS)]
    y = op.matvec(xs[0], out=ys[0]).copy_to_host()
    result = {"feasible": True, "params": op.params, "prepare_s": prepare_s,
              "error": rel_error(y, ref)}
    result.update(timer.measure(lambda i: op.matvec(xs[i % VECTORS], out=ys[i % VECTORS])))
    return result


def bench_cusparse(A, timer, xs_host, ref):
    import cupy
    import cupyx.scipy.sparse as csp

    M = csp.csr_matrix(A)
    xs = [cupy.asarray(x) for x in xs_host]
    y = cupy.asnumpy(M @ xs[0])
    result = {"error": rel_error(y, ref)}
    result.update(timer.measure(lambda i: M @ xs[i % VECTORS]))
    return result


def bench_torch(A, timer, xs_host, ref):
    import torch

    M = torch.sparse_csr_tensor(
        torch.from_numpy(A.indptr.astype(np.int64)), torch.from_numpy(A.indices.astype(np.int64)),
        torch.from_numpy(A.data), size=A.shape, device="cuda",
    )
    xs = [torch.from_numpy(x).cuda() for x in xs_host]
    y = (M @ xs[0]).cpu().numpy()
    result = {"error": rel_error(y, ref)}
    result.update(timer.measure(lambda i: M @ xs[i % VECTORS]))
    return result


def large_matrices(nnz: float):
    """The generated large matrices (≥ 10M nonzeros each) from the training corpus generators."""
    from training import corpus

    n = int(nnz)
    yield "stencil2d_5pt", corpus.stencil("bench/stencil2d", n, points=5)
    yield "stencil3d_7pt", corpus.stencil("bench/stencil3d", n, points=7)
    yield "stencil3d_27pt", corpus.stencil("bench/stencil3d27", n, points=27)
    yield "block_fem_3x3", corpus.block_fem("bench/fem3", n, block=3, mesh_points=7)
    yield "uniform_random_16", corpus.uniform_random("bench/uniform", n, mean=16.0)
    yield "power_law_2.0", corpus.power_law("bench/powerlaw", n, alpha=2.0)
    yield "dense_rows", corpus.dense_rows("bench/dense", n, dense=8, fraction=0.5)


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
        from training import corpus

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
    parser.add_argument("--kernels", default=",".join(autospmv.KERNELS))
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--no-real", action="store_true",
                        help="skip the real matrices as given (still grown with --grown)")
    parser.add_argument("--grown", action="store_true", help="also grow each real matrix by kron")
    parser.add_argument("--grown-nnz", type=float, default=20e6)
    parser.add_argument("--large", action="store_true", help="also generated ≥10M-nnz matrices")
    parser.add_argument("--large-nnz", type=float, default=12e6)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--b2b", type=int, default=50)
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--variants", action="store_true",
                        help="also time the parameter settings the choosers pick between")
    parser.add_argument("--out", help="JSON output path (default benchmarks/results/...)")
    args = parser.parse_args(argv)
    kernels = args.kernels.split(",")
    timer = Timer(args.repeats, args.b2b)
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
            "b2b_calls": args.b2b, "host_overhead": overhead, "records": records}, indent=1))

    header = f"{'matrix':28s} {'nnz':>9s} " + " ".join(f"{k:>10s}" for k in kernels)
    print(header + f" {'cusparse':>10s} {'torch':>10s}  (per-call µs / b2b µs)", flush=True)
    only = set(args.only.split(",")) if args.only else None
    for name, group, A in matrices(args):
        if only and name not in only:
            continue
        A = canonicalize(A.astype(args.dtype))
        xs_host = [rng.standard_normal(A.shape[1]).astype(A.dtype) for _ in range(VECTORS)]
        ref = A.astype(np.float64) @ xs_host[0].astype(np.float64)
        record = {"matrix": name, "group": group, "shape": list(A.shape), "nnz": int(A.nnz),
                  "min_bytes": min_bytes(A), "kernels": {}}
        for kernel in kernels:
            record["kernels"][kernel] = bench_autospmv(A, kernel, timer, xs_host, ref)
            if args.variants and variants(kernel, A):
                record.setdefault("variants", {})[kernel] = [
                    bench_autospmv(A, kernel, timer, xs_host, ref, params)
                    for params in variants(kernel, A)]
        if not args.no_baselines:
            for base, fn in (("cusparse", bench_cusparse), ("torch", bench_torch)):
                try:
                    record[base] = fn(A, timer, xs_host, ref)
                except Exception as error:  # a missing library or unsupported case is recorded
                    record[base] = {"failed": f"{type(error).__name__}: {error}"}
        if overhead is None and A.nnz < 50_000:
            from numba import cuda

            op = autospmv.prepare(A, kernel="csr_vector", device="cuda")
            xs = [cuda.to_device(x) for x in xs_host]
            ys = [cuda.device_array(A.shape[0], dtype=A.dtype) for _ in range(VECTORS)]
            overhead = {"matrix": name, "kernel": "csr_vector",
                        "host_us_per_matvec": host_overhead_us(op, xs, ys)}
            print(f"host overhead per op.matvec(x, out=y): {overhead['host_us_per_matvec']:.2f} µs "
                  f"({name})", flush=True)
        records.append(record)
        save()
        cells = []
        for kernel in kernels:
            r = record["kernels"][kernel]
            bad = r.get("feasible") and r["error"] > (1e-5 if args.dtype == "float32" else 1e-12)
            cells.append("infeas." if not r.get("feasible") else
                         ("WRONG" if bad else f"{r['per_call_us']:.0f}/{r['b2b_us']:.0f}"))
        for base in ("cusparse", "torch"):
            r = record.get(base, {})
            cells.append(f"{r['per_call_us']:.0f}/{r['b2b_us']:.0f}" if "per_call_us" in r else "-")
        print(f"{name:28s} {A.nnz:9d} " + " ".join(f"{c:>10s}" for c in cells), flush=True)
        for kernel, runs in record.get("variants", {}).items():
            print(f"    {kernel} variants (b2b µs): " + ", ".join(
                f"{r['params']}: {r['b2b_us']:.0f}" for r in runs if r.get("feasible")), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
