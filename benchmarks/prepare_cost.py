"""What ``autospmv.prepare(A)`` costs, in SpMV-equivalents, on matrices of at least 1M nonzeros.

For each matrix: the wall-clock time of ``prepare(A)`` (canonicalisation, features, the model's
prediction, conversion, upload and launch set-up; kernels compiled beforehand, as after the first
use in a process with a warm on-disk cache), split into the decision (``select``) and the rest,
and the chosen kernel's time per call (``op.matvec(x, out=y)``, synchronised). The ratio of the
two is the number of SpMVs whose time ``prepare`` costs. Matrices: the generated large set of
``benchmarks/gpu.py`` and the real matrices grown to ~20M nonzeros.

    PYTHONPATH=. python benchmarks/prepare_cost.py --matrices .matrices [--device cuda]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
from autospmv.validation import canonicalize  # noqa: E402
from benchmarks.gpu import large_matrices  # noqa: E402
from training.corpus import grow  # noqa: E402


def per_call_seconds(op, A, device: str, repeats: int = 50) -> float:
    x = np.random.default_rng(0).standard_normal(A.shape[1]).astype(A.dtype)
    if device == "cpu":
        y = np.empty(A.shape[0], dtype=A.dtype)
        run, sync = (lambda: op.matvec(x, out=y)), (lambda: None)
    else:
        from numba import cuda

        xd, yd = cuda.to_device(x), cuda.device_array(A.shape[0], dtype=A.dtype)
        run, sync = (lambda: op.matvec(xd, out=yd)), cuda.synchronize
    run()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        sync()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", type=Path, help="folder of real .npz matrices to grow")
    parser.add_argument("--device", default=None, choices=["cuda", "cpu"])
    parser.add_argument("--grown-nnz", type=float, default=20e6)
    parser.add_argument("--large-nnz", type=float, default=12e6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if autospmv.cuda_available() else "cpu")
    named = list(large_matrices(args.large_nnz))
    for path in sorted(args.matrices.glob("*.npz")) if args.matrices else []:
        A = sp.load_npz(path)
        k = max(1, round(args.grown_nnz / max(A.nnz, 1)))
        named.append((f"{path.stem}_x{k}", grow(A, k)))
    for kernel in autospmv.KERNELS:  # compile every kernel once, outside the timings
        try:
            autospmv.prepare(sp.identity(64, format="csr"), kernel=kernel, device=device) @ np.ones(64)
        except ValueError:
            pass
    records = []
    print(f"{'matrix':28s} {'nnz':>9s} {'kernel':>10s} {'select ms':>9s} {'prepare ms':>10s} "
          f"{'SpMV µs':>8s} {'SpMV-eq.':>8s}", flush=True)
    for name, A in named:
        A = canonicalize(A)
        t0 = time.perf_counter()
        autospmv.select(A, device=device)
        select_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        op = autospmv.prepare(A, device=device)
        prepare_s = time.perf_counter() - t0
        spmv_s = per_call_seconds(op, A, device)
        record = {"matrix": name, "nnz": int(A.nnz), "kernel": op.kernel, "select_s": select_s,
                  "prepare_s": prepare_s, "spmv_s": spmv_s, "spmv_equivalents": prepare_s / spmv_s,
                  "decision": op.explain()}
        records.append(record)
        print(f"{name:28s} {A.nnz:9d} {op.kernel:>10s} {select_s * 1e3:9.1f} {prepare_s * 1e3:10.1f} "
              f"{spmv_s * 1e6:8.1f} {record['spmv_equivalents']:8.0f}", flush=True)
    median = float(np.median([r["spmv_equivalents"] for r in records if r["nnz"] >= 1_000_000]))
    print(f"median prepare() cost on matrices ≥ 1M nonzeros: {median:.0f} SpMV-equivalents")
    out = args.out or (Path(__file__).parent / "results" /
                       f"prepare-{device}-{datetime.date.today().isoformat()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    info = {}
    if device == "cuda":
        from numba import cuda

        name = cuda.get_current_device().name
        info["gpu"] = name.decode() if isinstance(name, bytes) else name
    out.write_text(json.dumps({"device": device, **info, "median_spmv_equivalents": median,
                               "records": records}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
