"""What ``autospmv.prepare(A)`` costs: per kernel and automatic, host and device input, against
uploading the CSR matrix with CuPy, plus start-up in a fresh process (cold and warm cache).

For each matrix (a 2-D Laplacian and a power-law matrix at each size, 1M-50M nonzeros) and value
dtype it records:

* ``baseline_s``: on a GPU, building ``cupyx.scipy.sparse.csr_matrix(A)`` from the host matrix
  (the CSR upload, synchronised); on the CPU, copying the CSR arrays (``A.copy()``);
* for every kernel of the registry and for automatic selection (``auto``): the median wall time of
  ``prepare(A, kernel=...)`` on canonical host input (kernels compiled beforehand), its ratio to
  the baseline, the peak host memory allocated during prepare (``tracemalloc``; numba's own
  scratch arrays are not traced) over the CSR bytes, the per-call SpMV time (the labeller's
  timer, :class:`autospmv._support.timing.Bench` through :mod:`autospmv.training.timing`) and prepare in
  SpMV-equivalents;
* on a GPU with CuPy, the same for device input: ``prepare(cupyx csr)``, whose time does not
  include the upload.

Start-up runs ``import autospmv`` + the first ``prepare`` + the first product in a new interpreter,
first with an empty compiled-code cache (cold), then again with the cache it filled (warm).

Data goes to a JSON file named after the device (``benchmarks/results/prepare-<device>-<date>.json``
by default), progress to stderr. A time budget (``--budget``, seconds) skips what is left when
it runs out, recording the skip. ``--quick`` runs 1M and 5M nonzeros, float32 only, one repeat
less, within a 240 s budget for the matrices: about five minutes on an H100.

    PYTHONPATH=. python benchmarks/prepare_cost.py [--device cuda|cpu] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import autospmv  # noqa: E402
from autospmv import _registry as registry  # noqa: E402
from autospmv._support.devices import default_device  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from autospmv._support.timing import TimingOptions  # noqa: E402
from autospmv.training.timing import Bench  # noqa: E402

STARTUP = """
import sys, time, json
started = time.perf_counter()
import numpy as np, scipy.sparse as sp
import autospmv
imported = time.perf_counter()
lap = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(300, 300), dtype=np.float32)
A = sp.kronsum(lap, lap, format="csr")
made = time.perf_counter()
op = autospmv.prepare(A, device=sys.argv[1])
prepared = time.perf_counter()
y = op @ np.ones(A.shape[1], dtype=A.dtype)
done = time.perf_counter()
print(json.dumps({"import_s": imported - started, "prepare_s": prepared - made,
                  "first_matvec_s": done - prepared,
                  "total_s": (imported - started) + (done - made), "kernel": op.kernel,
                  "notes": op.decision.notes}))
"""


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def make_matrices(sizes, dtypes):
    from autospmv.training import generators

    for nnz in sizes:
        for family, build in (("laplace2d", lambda n: generators.stencil("bench/stencil2d", n, 5)),
                              ("power_law", lambda n: generators.power_law("bench/powerlaw", n, 2.0))):
            A = build(int(nnz))
            for dtype in dtypes:
                yield f"{family}_{nnz / 1e6:g}M", canonicalize(A.astype(dtype))


def gpu_matrices_main(benchmark: str, description: str, measure, argv=None,
                      repeats: int = 10) -> None:
    """The command line of a GPU benchmark that runs ``measure(name, A, repeats)`` (a dict,
    printed as it comes) on :func:`make_matrices`' matrices in float32 and float64: options
    ``--sizes``, ``--repeats``, ``--label`` and ``--out`` (the rows, the GPU and the date as
    JSON)."""
    import cupy

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sizes", type=float, nargs="+", default=[2e7])
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for name, A in make_matrices(args.sizes, ["float32", "float64"]):
        rows.append(measure(name, A, args.repeats))
        print(json.dumps(rows[-1]), flush=True)
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    result = {"benchmark": benchmark, "label": args.label,
              "gpu": gpu.decode() if isinstance(gpu, bytes) else gpu,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


def csr_bytes(A) -> int:
    return A.indptr.nbytes + A.indices.nbytes + A.data.nbytes


class Device:
    """Synchronisation, the CSR baseline and vectors for one device."""

    def __init__(self, name: str):
        self.name = name
        self.cupy = None
        if name == "cuda":
            from numba import cuda

            self.numba_cuda = cuda
            try:
                import cupy
                import cupyx.scipy.sparse  # noqa: F401

                self.cupy = cupy
            except ImportError:
                log("CuPy is not installed: no CSR-upload baseline and no device input")

    def sync(self):
        if self.name == "cuda":
            self.numba_cuda.synchronize()
            if self.cupy is not None:
                self.cupy.cuda.get_current_stream().synchronize()

    def baseline(self, A):
        """(what, seconds): the CSR upload with CuPy on a GPU, a CSR copy on the CPU."""
        if self.name == "cpu":
            return "scipy csr copy", lambda: A.copy()
        if self.cupy is None:
            return None, None
        import cupyx.scipy.sparse as cusp

        def upload():
            matrix = cusp.csr_matrix(A)
            self.sync()
            return matrix

        return "cupyx.scipy.sparse.csr_matrix(A)", upload

    def device_input(self, A):
        if self.cupy is None:
            return None
        import cupyx.scipy.sparse as cusp

        return cusp.csr_matrix(A)

    def describe(self) -> dict:
        info = {"device": self.name, "python": platform.python_version(),
                "numpy": np.__version__, "autospmv": autospmv.__version__,
                "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
        import numba

        info["numba"] = numba.__version__
        info["numba_threads"] = numba.get_num_threads()
        if self.name == "cuda":
            name = self.numba_cuda.get_current_device().name
            info["gpu"] = name.decode() if isinstance(name, bytes) else name
            if self.cupy is not None:
                info["cupy"] = self.cupy.__version__
        return info


def timed(fn, repeats: int, sync=lambda: None) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls and the last result: for ``prepare`` and the
    baseline's upload, which are not products (the products go through :func:`spmv_seconds`)."""
    samples, value = [], None
    for _ in range(repeats):
        value = None  # free the previous result first
        sync()
        started = time.perf_counter()
        value = fn()
        sync()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), value


def spmv_seconds(op, A, device: Device, repeats: int = 20) -> float:
    """Median seconds per call of ``op.matvec(x, out=y)`` (synchronised each time), with the
    labeller's timer (:class:`autospmv._support.timing.Bench` through
    :mod:`autospmv.training.timing`), ``repeats`` per-call samples."""
    x = np.random.default_rng(0).standard_normal(A.shape[1]).astype(A.dtype)
    options = TimingOptions(warmup=1, repeats=repeats, min_repeats=repeats, b2b_calls=1,
                            b2b_repeats=1, rounds=1)
    timing = Bench(device.name, x, A.shape[0], options).time_all({0: op})[0]
    if isinstance(timing, Exception):
        raise timing
    return timing["per_call"]["median"] * 1e-6


def peak_host_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def compile_everything(device: str, dtypes):
    from autospmv._tools.warmup import warmup

    started = time.perf_counter()
    steps = warmup(device, [np.dtype(d).name for d in dtypes])
    failed = [s.name for s in steps if s.error]
    log(f"warm-up: {time.perf_counter() - started:.1f} s" + (f"; failed: {failed}" if failed
                                                             else ""))


def measure_matrix(name, A, device: Device, kernels, repeats: int) -> list[dict]:
    records = []
    what, baseline = device.baseline(A)
    base_s = timed(baseline, repeats, device.sync)[0] if baseline else None
    common = {"matrix": name, "dtype": A.dtype.name, "shape": list(A.shape), "nnz": int(A.nnz),
              "csr_bytes": csr_bytes(A), "baseline": what, "baseline_s": base_s}
    inputs = [("host", A)]
    device_A = device.device_input(A)
    if device_A is not None:
        inputs.append(("device", device_A))
    for source, M in inputs:
        for kernel in kernels:
            record = dict(common, input=source, kernel=kernel)
            forced = None if kernel == "auto" else kernel
            try:
                prepare_s, op = timed(lambda: autospmv.prepare(M, kernel=forced,
                                                               device=device.name),
                                      repeats, device.sync)
                record.update(kernel_chosen=op.kernel, prepare_s=prepare_s, memory=op.memory)
                if source == "host":
                    op = None
                    peak = peak_host_bytes(lambda: autospmv.prepare(M, kernel=forced,
                                                                    device=device.name))
                    record.update(peak_host_bytes=peak, peak_over_csr=peak / csr_bytes(A))
                    op = autospmv.prepare(M, kernel=forced, device=device.name)
                spmv = spmv_seconds(op, A, device)
                record.update(spmv_s=spmv, spmv_equivalents=prepare_s / spmv)
                if base_s:
                    record["over_baseline"] = prepare_s / base_s
            except Exception as error:  # recorded; one refusal (e.g. ELL padding) is data too
                record["error"] = f"{type(error).__name__}: {error}"
            records.append(record)
            log(f"{name:18s} {A.dtype.name:7s} {source:6s} {kernel:10s} "
                + (f"error {record['error'][:70]}" if "error" in record else
                   f"prepare {record['prepare_s'] * 1e3:8.1f} ms"
                   + (f" = {record['over_baseline']:5.2f}x baseline" if base_s else "")
                   + (f", peak {record['peak_over_csr']:.2f}x CSR" if "peak_over_csr" in record
                      else "")
                   + f", {record['spmv_equivalents']:7.0f} SpMV-eq."))
    return records


def startup(device: str) -> dict:
    """Cold and warm start in fresh interpreters, sharing a new, empty cache folder."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="autospmv-startup-") as folder:
        env = dict(os.environ, AUTOSPMV_CACHE_DIR=folder,
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env.pop("NUMBA_CACHE_DIR", None)
        # Python's bytecode is written as an installed package's is (pip compiles it at
        # install): a warm start then reads it, as in a user's environment, instead of
        # compiling every module of the project from source again.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for label in ("cold", "warm", "warm_again"):
            done = subprocess.run([sys.executable, "-c", STARTUP, device], capture_output=True,
                                  text=True, env=env, timeout=900)
            if done.returncode:
                out[label] = {"error": done.stderr[-2000:]}
            else:
                out[label] = json.loads(done.stdout.splitlines()[-1])
            log(f"start-up {label}: " + (f"{out[label]['total_s']:.3f} s (import "
                                         f"{out[label]['import_s']:.3f} s)"
                                         if "total_s" in out[label] else "failed"))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--quick", action="store_true",
                        help="1M and 5M nonzeros, float32 only, fewer repeats")
    parser.add_argument("--sizes", type=float, nargs="+", help="nonzeros per matrix")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "float64"])
    parser.add_argument("--kernels", nargs="+", help="default: every kernel and auto")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds (default 3600, 240 with --quick); what is left when it "
                             "runs out is skipped")
    parser.add_argument("--no-startup", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    device = Device(args.device or default_device())
    sizes = args.sizes or ([1e6, 5e6] if args.quick else [1e6, 5e6, 20e6, 50e6])
    dtypes = args.dtypes or (["float32"] if args.quick else ["float32", "float64"])
    kernels = args.kernels or [*registry.names(), "auto"]
    repeats = args.repeats or (3 if args.quick else 5)
    budget = args.budget or (240.0 if args.quick else 3600.0)
    result = {**device.describe(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "sizes": sizes, "dtypes": dtypes, "repeats": repeats}
    if not args.no_startup:
        result["startup"] = startup(device.name)  # first: it needs an untouched cache folder
    compile_everything(device.name, dtypes)
    records, skipped = [], []
    for name, A in make_matrices(sizes, dtypes):
        if time.perf_counter() - started > budget:
            skipped.append(f"{name} {A.dtype.name}")
            continue
        records += measure_matrix(name, A, device, kernels, repeats)
    result.update(records=records, skipped=skipped)
    ok = [r for r in records if "over_baseline" in r and r["nnz"] >= 1_000_000]
    if ok:
        result["summary"] = {
            f"{source} {kernel}": {
                "median_over_baseline": statistics.median(r["over_baseline"] for r in rows),
                "max_peak_over_csr": max((r.get("peak_over_csr", 0) for r in rows), default=0),
                "median_spmv_equivalents": statistics.median(r["spmv_equivalents"]
                                                             for r in rows)}
            for source in ("host", "device") for kernel in kernels
            if (rows := [r for r in ok if r["input"] == source and r["kernel"] == kernel])}
        for key, value in result["summary"].items():
            log(f"{key:18s} median {value['median_over_baseline']:.2f}x baseline, "
                f"peak {value['max_peak_over_csr']:.2f}x CSR, "
                f"{value['median_spmv_equivalents']:.0f} SpMV-eq.")
    slug = result.get("gpu", "cpu").lower().replace(" ", "-")
    out = args.out or (ROOT / "benchmarks" / "results" /
                       f"prepare-{device.name}-{slug}-{datetime.date.today().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    log(f"wrote {out} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
