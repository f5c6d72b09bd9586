"""The fixed costs a user feels: the host time of one GPU product against a bare launch of the
same kernel, and a new process's start (cold and warm) against the import floor of the stack.

``percall`` (GPU): for every matrix of a folder (``.npz``, as given), in float32 and float64,
the operator ``prepare`` picks, timed per call (CUDA events around one synchronised call, the
driver's own events) in interleaved rounds against its *floor*: the same launches (the
operator's device program: its kernels, and a memset where the program has one) made directly
with ``cuLaunchKernel`` (``cuLaunchKernelEx`` for a programmatic dependent launch) on arguments
prepared once, as the thinnest Python launch there is. The user calls timed: ``op.matvec(x,
out=y)`` on numba device arrays (as ``benchmarks/gpu.py`` and the labeller time them) and on
CuPy arrays, and ``op @ x`` on a CuPy vector (allocating the result). Also the host's share alone
(many unsynchronised calls, wall-clock) of the floor and of ``op.matvec``, and an empty CuPy
``RawKernel`` launched the same way.

``start``: fresh interpreters, ``--repeats`` rounds after one untimed round, medians. Each round
runs, in turn: the floor (``import numpy, scipy.sparse, numba`` and one call of a cached njit
function; on ``cuda`` also ``from numba import cuda``, the CUDA context, ``import cupy`` and its
first operation), and autospmv's warm start (``import numpy, scipy.sparse``, ``import
autospmv``, ``prepare`` of a 300×300-grid 2-D Laplacian in float32 on the device, one product
of a host vector), sharing a cache folder that the untimed round filled. The cold start (the
same with a new, empty cache folder) runs ``--cold`` times: the first with CuPy's kernel cache
empty too (a new environment), the others with the CuPy kernels that the first compiled. Times
run from the script's first line (the interpreter's own start-up is the same for all and left
out); building the matrix is left out. Each autospmv process also reports the time its ``prepare`` and product spent in
numba's and numba-cuda's compilers, and the modules it imported that the floor does not.

    PYTHONPATH=. python benchmarks/fixed_costs.py percall --matrices .matrices/shared --out F
    PYTHONPATH=. python benchmarks/fixed_costs.py start --device cuda --repeats 7 --out F
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FLOOR_CPU = """
import time
started = time.perf_counter()
import numpy, scipy.sparse, numba
import cached_function
cached_function.f(numpy.ones(3))
"""
FLOOR_CUDA = """
from numba import cuda
cuda.current_context()
import cupy
cupy.arange(10).sum().item()
"""
CACHED_FUNCTION = """
import numba

@numba.njit(cache=True)
def f(x):
    return x.sum()
"""
START = """
import time
started = time.perf_counter()
import numpy as np, scipy.sparse as sp
imported_stack = time.perf_counter()
T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(300, 300))
A = sp.kronsum(T, T, format="csr").astype(np.float32)
x = np.ones(A.shape[1], dtype=np.float32)
built = time.perf_counter()
import autospmv
from autospmv._support.cache import compile_timer
imported = time.perf_counter()
with compile_timer() as compiled:
    op = autospmv.prepare(A, device="{device}")
    prepared = time.perf_counter()
    y = op @ x
    done = time.perf_counter()
"""
REPORT = """
import json, sys
before = set(json.loads(sys.argv[1]))
print(json.dumps({
    "total_s": (done - built) + (imported_stack - started),
    "stack_import_s": imported_stack - started, "import_s": imported - built,
    "prepare_s": prepared - imported, "product_s": done - prepared,
    "compile_s": compiled.total, "compile_cpu_s": compiled.cpu,
    "compile_cuda_s": compiled.cuda, "kernel": op.kernel,
    "modules_beyond_floor": sorted(set(sys.modules) - before)}))
"""


def _run(code: str, env: dict, argv=()) -> str:
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env=env, timeout=900)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return done.stdout


def floor_code(device: str) -> str:
    return FLOOR_CPU + (FLOOR_CUDA if device == "cuda" else "") + \
        "import json, sys\nprint(json.dumps({'total_s': time.perf_counter() - started, " \
        "'modules': sorted(sys.modules)}))\n"


def profile_warm_start(program: str, env: dict, argv, out: Path, top: int = 60) -> None:
    """One more warm start under cProfile; its functions by cumulative time to ``out``."""
    import io
    import pstats

    with tempfile.TemporaryDirectory() as folder:
        script, stats = Path(folder) / "start.py", Path(folder) / "start.prof"
        script.write_text(program)
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(stats), str(script), *argv],
                       capture_output=True, text=True, env=env, timeout=900, check=True)
        text = io.StringIO()
        pstats.Stats(str(stats), stream=text).sort_stats("cumulative").print_stats(top)
        out.write_text(text.getvalue())


def start(device: str, repeats: int, cold: int, log=print, profile: Path | None = None) -> dict:
    """Floor, warm and cold starts (see the module docstring); seconds."""
    with tempfile.TemporaryDirectory(prefix="autospmv-fixed-costs-") as folder:
        folder = Path(folder)
        (folder / "cached_function.py").write_text(CACHED_FUNCTION)
        env = dict(os.environ, AUTOSPMV_CACHE_DIR=str(folder / "cache"),
                   NUMBA_CACHE_DIR=str(folder / "numba-floor"),
                   PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode as an installed package has it
        autospmv_env = dict(env)
        autospmv_env.pop("NUMBA_CACHE_DIR")
        floor_modules = json.loads(_run(floor_code(device), env))["modules"]
        program = START.format(device=device) + REPORT
        argv = [json.dumps(floor_modules)]
        out = {"floor": [], "warm": [], "cold": []}
        for i in range(cold):  # the first with CuPy's kernel cache empty too
            cold_env = dict(autospmv_env, AUTOSPMV_CACHE_DIR=str(folder / f"cold-{i}"),
                            CUPY_CACHE_DIR=str(folder / "cupy-cold"))
            out["cold"].append(json.loads(_run(program, cold_env, argv)))
            out["cold"][-1]["cupy_cache_empty"] = i == 0
            log(f"cold start {i}: {out['cold'][-1]['total_s']:.3f} s "
                f"(compiling {out['cold'][-1]['compile_s']:.3f} s)")
        _run(program, autospmv_env, argv)  # fills the shared cache folder
        for r in range(repeats):
            out["floor"].append(json.loads(_run(floor_code(device), env))["total_s"])
            out["warm"].append(json.loads(_run(program, autospmv_env, argv)))
            log(f"round {r}: floor {out['floor'][-1]:.3f} s, warm {out['warm'][-1]['total_s']:.3f}"
                f" s (import {out['warm'][-1]['import_s']:.3f}, prepare "
                f"{out['warm'][-1]['prepare_s']:.3f}, product {out['warm'][-1]['product_s']:.3f})")
        if profile:
            profile_warm_start(program, autospmv_env, argv, profile)
    floor = statistics.median(out["floor"])
    warm = statistics.median(w["total_s"] for w in out["warm"])
    paired = statistics.median(w["total_s"] / f for w, f in zip(out["warm"], out["floor"]))
    summary = {"floor_s": floor, "warm_s": warm, "warm_over_floor": warm / floor,
               "warm_over_floor_per_round": paired}
    for record in out["cold"]:
        which = "cold_s" if record["cupy_cache_empty"] else "cold_cupy_cache_kept_s"
        summary[which] = record["total_s"]
        summary[which.replace("_s", "_compile_s")] = record["compile_s"]
    for key in ("import_s", "prepare_s", "product_s", "compile_s"):
        summary[f"warm_{key}"] = statistics.median(w[key] for w in out["warm"])
    last = out["warm"][-1]
    summary["warm_modules_beyond_floor"] = len(last["modules_beyond_floor"])
    for record in out["warm"][:-1] + out["cold"][1:]:
        record.pop("modules_beyond_floor")
    return {"summary": summary, **out}


def _driver():
    from cuda.bindings import driver

    return driver


class EventTimer:
    """Microseconds of ``fn()`` between two CUDA events on the legacy default stream."""

    def __init__(self):
        driver = _driver()
        self.driver = driver
        self.start = driver.cuEventCreate(0)[1]
        self.end = driver.cuEventCreate(0)[1]

    def __call__(self, fn) -> float:
        d = self.driver
        d.cuEventRecord(self.start, 0)
        fn()
        d.cuEventRecord(self.end, 0)
        d.cuEventSynchronize(self.end)
        return d.cuEventElapsedTime(self.start, self.end)[1] * 1e3


def floor_launch(program, x_ptr: int, y_ptr: int):
    """A function making the launches of a loaded device program directly, on arguments
    prepared here (x and y fixed), on the legacy default stream."""
    from autospmv.kernels.cuda.launch import Launch, overlapping_config

    driver = _driver()
    calls = []
    for step in program.steps:
        if isinstance(step, Launch):
            step._x.value, step._y.value = x_ptr, y_ptr
            params = ctypes.addressof(step._params)
            if getattr(step, "_overlaps", False):
                config = overlapping_config(step.grid, step.block)
                calls.append((driver.cuLaunchKernelEx, (config, step._function, params, 0)))
            else:
                calls.append((driver.cuLaunchKernel, (step._function, step.grid, 1, 1,
                                                      step.block, 1, 1, 0, 0, params, 0)))
        elif step.words:
            calls.append((driver.cuMemsetD32Async, (y_ptr, 0, step.words, 0)))
    if len(calls) == 1:
        (function, args), = calls
        return lambda: function(*args)

    def launch_all():
        for function, args in calls:
            function(*args)

    return launch_all


def host_us(fn, calls: int = 1000) -> float:
    """Wall-clock µs per call of many unsynchronised calls (the host's share alone)."""
    from numba import cuda

    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
        cuda.synchronize()
    return best


def per_call(matrices: Path, rounds: int, samples: int, log=print) -> dict:
    """Per-call times of every matrix of ``matrices`` in both dtypes (see the module doc)."""
    import cupy
    import scipy.sparse as sp
    from numba import cuda

    import autospmv

    timer = EventTimer()
    empty = cupy.RawKernel(r'extern "C" __global__ void empty() {}', "empty")
    empty((1,), (32,), ())
    cuda.synchronize()
    empty_us = statistics.median(timer(lambda: empty((1,), (32,), ())) for _ in range(500))
    rows = []
    for path in sorted(matrices.glob("*.npz")):
        for dtype in (np.float32, np.float64):
            A = sp.load_npz(path).tocsr().astype(dtype)
            op = autospmv.prepare(A, device="cuda")
            rng = np.random.default_rng(0)
            host = [rng.standard_normal(A.shape[1]).astype(dtype) for _ in range(4)]
            xs = [cuda.to_device(v) for v in host]
            ys = [cuda.device_array(A.shape[0], dtype=dtype) for _ in host]
            cxs = [cupy.asarray(v) for v in host]
            cys = [cupy.empty(A.shape[0], dtype=dtype) for _ in host]
            program = op._backend.program
            floor = floor_launch(program, xs[0].__cuda_array_interface__["data"][0],
                                 ys[0].__cuda_array_interface__["data"][0])
            counter = [0]

            def numba_out():
                i = counter[0] = (counter[0] + 1) % 4
                op.matvec(xs[i], out=ys[i])

            def cupy_out():
                i = counter[0] = (counter[0] + 1) % 4
                op.matvec(cxs[i], out=cys[i])

            def cupy_matmul():
                i = counter[0] = (counter[0] + 1) % 4
                op @ cxs[i]

            calls = {"floor": floor, "numba_out": numba_out, "cupy_out": cupy_out,
                     "cupy_matmul": cupy_matmul}
            times = {name: [] for name in calls}
            for fn in calls.values():
                for _ in range(50):
                    fn()
            cuda.synchronize()
            for _ in range(rounds):
                for name, fn in calls.items():
                    times[name] += [timer(fn) for _ in range(samples)]
            ref = A.astype(np.float64) @ host[0].astype(np.float64)
            y = op.matvec(xs[0], out=ys[0]).copy_to_host()
            error = float(np.linalg.norm(y - ref) / max(np.linalg.norm(ref), 1e-300))
            row = {"matrix": path.stem, "dtype": np.dtype(dtype).name, "shape": list(A.shape),
                   "nnz": int(A.nnz), "kernel": op.kernel, "steps": len(program.steps),
                   "error": error,
                   **{f"{name}_us": statistics.median(t) for name, t in times.items()},
                   "host_floor_us": host_us(floor), "host_numba_out_us": host_us(numba_out)}
            row["ratio"] = row["numba_out_us"] / row["floor_us"]
            rows.append(row)
            log(f"{path.stem:22s} {row['dtype']:7s} {op.kernel:10s} floor {row['floor_us']:6.2f}"
                f" op {row['numba_out_us']:6.2f} ({row['ratio']:.3f}x) cupy out "
                f"{row['cupy_out_us']:6.2f} cupy @ {row['cupy_matmul_us']:6.2f} host: floor "
                f"{row['host_floor_us']:5.2f} op {row['host_numba_out_us']:5.2f} µs")
    summary = {"empty_rawkernel_us": empty_us}
    for dtype in ("float32", "float64"):
        part = [r for r in rows if r["dtype"] == dtype]
        entry = {key: statistics.median(r[key] for r in part)
                 for key in ("floor_us", "numba_out_us", "cupy_out_us", "cupy_matmul_us",
                             "host_floor_us", "host_numba_out_us", "ratio")}
        entry["median_over_median_floor"] = entry["numba_out_us"] / entry["floor_us"]
        entry["cupy_out_over_floor"] = entry["cupy_out_us"] / entry["floor_us"]
        entry["matrices"] = len(part)
        entry["max_error"] = max(r["error"] for r in part)
        summary[dtype] = entry
    return {"summary": summary, "rows": rows}


def describe(device: str) -> dict:
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "python": sys.version.split()[0], "machine": platform.machine(),
           "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    import numba

    out["numba"] = numba.__version__
    if device == "cuda":
        from numba import cuda
        from numba_cuda import __version__ as numba_cuda_version

        gpu = cuda.get_current_device()
        out.update(numba_cuda=numba_cuda_version, gpu=gpu.name.decode()
                   if isinstance(gpu.name, bytes) else gpu.name,
                   compute_capability=list(gpu.compute_capability))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["percall", "start"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--matrices", type=Path, default=Path(".matrices/shared"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=40, help="per call and round")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cold", type=int, default=1)
    parser.add_argument("--profile", type=Path, help="start: profile one more warm start")
    parser.add_argument("--label", default="", help="recorded with the result")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    result = {"benchmark": f"fixed_costs {args.what}", "label": args.label,
              "device_kind": os.environ.get("DEVICE_KIND", ""),
              **describe("cuda" if args.what == "percall" else args.device)}
    if args.what == "percall":
        result.update(per_call(args.matrices, args.rounds, args.samples, log))
    else:
        result.update(device=args.device,
                      start=start(args.device, args.repeats, args.cold, log, args.profile))
    print(json.dumps(result.get("summary") or result["start"]["summary"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
