"""Multi-vector product benchmark: ``op @ X`` (SpMM, one pass over the matrix for the k columns
of a row-major X) against the baselines, for k = 1, 4, 16, 64, float32 and float64.

On the CPU (``--device cpu``): autospmv's ``op @ X`` against SciPy's ``A @ X`` and against k
separate products ``op.matvec(X[:, j], out=y_j)`` (the columns and outputs prepared beforehand:
their best case). On a GPU (``--device cuda``, the default when one is usable): ``op @ X`` with a
CuPy X against cuSPARSE SpMM through CuPy (``cupyx.scipy.sparse.csr_matrix(A) @ X``, given the
same row-major X, which CuPy copies to column-major first, and, as ``cusparse_fortran``, given a
column-major copy of X: cuSPARSE's own layout, no copy) and against torch.sparse
(``torch.sparse_csr_tensor(...) @ X``); a baseline that cannot run records why.

Matrices (in three groups, summarised apart): every ``.npz`` of ``--matrices`` as given
("given"), the 2-D Poisson matrix of ``--poisson``² rows ("generated"), and with
``--grown-nnz`` each of them again grown to about that many nonzeros as block-diagonal copies
(fewer where X and Y of 64 columns would pass ``--grown-max-gb``), so that products leave the
caches ("grown"). ``op`` is ``autospmv.prepare(A, device=...)``, the automatic choice:
its multi-vector product runs on CSR arrays whatever the kernel (``op.explain()`` says which;
a record's ``note`` holds that line, and its ``choice`` the program a GPU timed and kept for
5 to 8 columns).

Timing: :class:`autospmv._support.timing.Bench`, the labeller's timer (warm-up, interleaved rounds of
per-call samples and of back-to-back batches, contention check), all implementations of one
(matrix, dtype, k) timed together over ``--inputs`` rotating X. Per call: one synchronised
product between two clock readings (CUDA events on a GPU), what a solver loop sees; back to
back: ``--b2b`` products between two readings (on a GPU, the device's own time). Every result
is checked against SciPy in float64 first. The summary gives, per group of matrices, dtype and
k, the geometric mean over the matrices of t(baseline) / t(autospmv) (above 1: autospmv is
faster) for both figures. Results go to ``--out`` (JSON, with the device, written after every
matrix); progress to stderr.

    PYTHONPATH=. python benchmarks/spmm.py --matrices ../shared/matrices --out spmm.json
    PYTHONPATH=. python benchmarks/spmm.py --matrices ../shared/matrices --grown-only \
        --grown-nnz 1e7 --dtypes float32 --out spmm-grown-float32.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
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
from autospmv._support.devices import resolve_device  # noqa: E402
from autospmv._support.timing import (Bench, TimingOptions, clock, relative_error,  # noqa: E402
                                      release_device_memory)
from autospmv._support.validation import canonicalize  # noqa: E402

OURS = "autospmv"
COLUMNS = (1, 4, 16, 64)


class Rotation(Bench):
    """:class:`autospmv._support.timing.Bench` over inputs that every implementation keeps itself: the
    bench hands out their indices, and each :class:`Product` multiplies its own input of that
    index, so that every implementation gets its inputs in the layout and library it takes."""

    def __init__(self, device: str, inputs: int, options: TimingOptions):
        self.device = device
        self.options = options
        self.clock = clock(device)
        self.xs = list(range(inputs))
        self.ys = [None] * inputs


@dataclasses.dataclass
class Product:
    """One implementation as an operator for :class:`Rotation`: ``matvec(i)`` computes
    ``call(inputs[i])``; ``result(i)`` is that product on the host, for the check."""

    call: object
    inputs: list
    to_host: object = np.asarray

    def matvec(self, i, out=None):
        return self.call(self.inputs[i])

    def result(self, i: int = 0) -> np.ndarray:
        return self.to_host(self.call(self.inputs[i]))


class CpuImplementations:
    """autospmv's operator of A on the CPU, SciPy's A, and k separate products of the operator
    (columns and outputs prepared beforehand: their best case)."""

    def __init__(self, A):
        self.A = A
        self.op = autospmv.prepare(A, device="cpu")
        self.failed = {}

    def products(self, blocks: list) -> dict:
        op, k = self.op, blocks[0].shape[1]
        columns = [[np.ascontiguousarray(X[:, j]) for j in range(k)] for X in blocks]
        dtype = np.result_type(op.dtype, blocks[0].dtype)
        outs = [np.empty(self.A.shape[0], dtype=dtype) for _ in range(k)]

        def separate(cols):
            for j, x in enumerate(cols):
                op.matvec(x, out=outs[j])
            return outs

        return {OURS: Product(lambda X: op @ X, blocks),
                "scipy": Product(lambda X: self.A @ X, blocks),
                "separate": Product(separate, columns, lambda ys: np.stack(ys, axis=1))}


class GpuImplementations:
    """autospmv's operator of A on the GPU (fed CuPy X, or numba X without CuPy), cuSPARSE
    through CuPy (fed the same row-major X, and as ``cusparse_fortran`` a column-major copy)
    and torch.sparse CSR; a library that is missing or fails is left out, its reason in
    :attr:`failed`."""

    def __init__(self, A):
        self.A = A
        self.op = autospmv.prepare(A, device="cuda")
        self.failed = {}
        self.cupy = self.M = self.T = None
        try:
            import cupy
            import cupyx.scipy.sparse as csp

            self.cupy, self.M = cupy, csp.csr_matrix(A)
        except Exception as error:  # CuPy absent: autospmv is fed numba device arrays
            self.failed["cusparse"] = self.failed["cusparse_fortran"] = describe(error)
        try:
            self.T = torch_csr(A)
        except Exception as error:
            self.failed["torch"] = describe(error)

    def products(self, blocks: list) -> dict:
        op, M, T, cupy = self.op, self.M, self.T, self.cupy
        products = {}
        if cupy is not None:
            X_c = [cupy.asarray(X) for X in blocks]
            products[OURS] = Product(lambda X: op @ X, X_c, cupy.asnumpy)
            products["cusparse"] = Product(lambda X: M @ X, X_c, cupy.asnumpy)
            products["cusparse_fortran"] = Product(
                lambda X: M @ X, [cupy.asfortranarray(X) for X in X_c], cupy.asnumpy)
        else:
            from numba import cuda

            products[OURS] = Product(lambda X: op @ X, [cuda.to_device(X) for X in blocks],
                                     lambda Y: Y.copy_to_host())
        if T is not None:
            import torch

            products["torch"] = Product(lambda X: T @ X,
                                        [torch.from_numpy(X).cuda() for X in blocks],
                                        lambda Y: Y.cpu().numpy())
        return products


def torch_csr(A):
    """A as a torch.sparse CSR tensor on the GPU, with A's own index width (int32 where it
    fits) when torch multiplies with it, else with int64 indices."""
    import torch

    for index in dict.fromkeys((A.indices.dtype, np.dtype(np.int64))):
        T = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(index)),
                                    torch.from_numpy(A.indices.astype(index)),
                                    torch.from_numpy(A.data), size=A.shape, device="cuda")
        try:
            T @ torch.ones((A.shape[1], 2), dtype=T.dtype, device="cuda")
        except RuntimeError:
            if index == np.int64:
                raise
            continue
        return T


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def free_device_memory() -> None:
    """Return what dropped arrays held to the device (numba, CuPy's pool, torch's cache)."""
    from numba import cuda

    if not cuda.config.ENABLE_CUDASIM:  # the simulator (a dry run of this script) keeps none
        release_device_memory("cuda")
    for name, free in (("cupy", lambda m: m.get_default_memory_pool().free_all_blocks()),
                       ("torch", lambda m: m.cuda.empty_cache())):
        if name in sys.modules:
            free(sys.modules[name])


def figures(timing) -> dict:
    if isinstance(timing, Exception):
        return {"failed": f"{type(timing).__name__}: {timing}"}
    return {"per_call_us": timing["per_call"]["median"],
            "per_call_min_us": timing["per_call"]["min"],
            "b2b_us": timing["b2b"]["median"], "b2b_min_us": timing["b2b"]["min"],
            "samples": timing["per_call"]["n"], "b2b_batches": timing["b2b"]["n"],
            "b2b_calls": timing["b2b_calls"], "retimed": timing["retimed"]}


def bench_case(implementations, device: str, k: int, options: TimingOptions, inputs: int,
               rng) -> dict:
    """One (matrix, dtype, k) for the implementations of one matrix and dtype
    (:class:`CpuImplementations`, :class:`GpuImplementations`): every product checked against
    SciPy in float64, then all timed together."""
    A, op = implementations.A, implementations.op
    blocks = [rng.random((A.shape[1], k), dtype=op.dtype) for _ in range(inputs)]
    reference = A.astype(np.float64) @ blocks[0].astype(np.float64)
    products = implementations.products(blocks)
    record = {"kernel": op.kernel,
              "results": {name: {"failed": why} for name, why in implementations.failed.items()}}
    started = time.perf_counter()
    products[OURS].result()  # the first product of k columns: set-up, compilation or loading
    record["first_product_ms"] = (time.perf_counter() - started) * 1e3
    for name, product in products.items():
        record["results"][name] = {"error": relative_error(product.result(), reference)}
    for name, timing in Rotation(device, inputs, options).time_all(products).items():
        record["results"][name].update(figures(timing))
    notes = [line.strip().removeprefix("note: ") for line in op.explain().splitlines()
             if "multi-vector" in line]
    record["note"] = next(iter(notes), None)
    record["choice"] = next((line for line in notes if f"of {k} columns (" in line), None)
    return record


def poisson2d(side: int) -> sp.csr_matrix:
    """The 5-point Laplacian on a side × side grid."""
    tri = sp.diags([-np.ones(side - 1), 2 * np.ones(side), -np.ones(side - 1)], [-1, 0, 1])
    eye = sp.identity(side)
    return sp.csr_matrix(sp.kron(eye, tri) + sp.kron(tri, eye))


def grown(A: sp.csr_matrix, nnz: float, max_bytes: float) -> tuple[sp.csr_matrix, int]:
    """A as ``copies`` block-diagonal copies, about ``nnz`` nonzeros in all, fewer where X and Y
    of 64 float64 columns would pass ``max_bytes``; returns (matrix, copies)."""
    copies = max(1, round(nnz / max(A.nnz, 1)))
    copies = max(1, min(copies, int(max_bytes // (sum(A.shape) * 64 * 8))))
    return sp.csr_matrix(sp.kron(sp.identity(copies, format="csr"), A, format="csr")), copies


def matrices(args):
    """(name, group, matrix): the folder's as given (group "given"), the Poisson matrix
    ("generated"), then grown copies of both ("grown")."""
    paths = sorted(Path(args.matrices).glob("*.npz")) if args.matrices else []
    given = [(path.stem, "given", lambda path=path: sp.load_npz(path)) for path in paths]
    if args.poisson:
        given.append((f"poisson2d_{args.poisson}", "generated",
                      lambda: poisson2d(args.poisson)))
    only = set(args.only.split(",")) if args.only else None
    given = [entry for entry in given if only is None or entry[0] in only]
    if not args.grown_only:
        for name, group, load in given:
            yield name, group, load()
    if args.grown_nnz:
        for name, _, load in given:
            A, copies = grown(sp.csr_matrix(load()), args.grown_nnz, args.grown_max_gb * 1e9)
            yield f"{name}_x{copies}", "grown", A


def geomean(values) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def summarise(records: list) -> dict:
    """``{group: {dtype: {k: {baseline: {"per_call": g, "b2b": g, "cases": n}}}}}``: g the
    geometric mean over the matrices of t(baseline) / t(autospmv), and under k = "all" over
    every (matrix, k) of the group and dtype; only results that passed the check count."""
    summary = {}
    for r in records:
        ours = r.get("results", {}).get(OURS, {})
        if "b2b_us" not in ours or not ours.get("ok"):
            continue
        for name, result in r["results"].items():
            if name == OURS or "b2b_us" not in result or not result.get("ok"):
                continue
            by_k = summary.setdefault(r["group"], {}).setdefault(r["dtype"], {})
            for k in (str(r["k"]), "all"):
                cell = by_k.setdefault(k, {}).setdefault(name, {"per_call": [], "b2b": []})
                cell["per_call"].append(result["per_call_us"] / ours["per_call_us"])
                cell["b2b"].append(result["b2b_us"] / ours["b2b_us"])
    for group in summary.values():
        for dtype, by_k in group.items():
            for cells in by_k.values():
                for name, cell in cells.items():
                    cells[name] = {"per_call": geomean(cell["per_call"]),
                                   "b2b": geomean(cell["b2b"]), "cases": len(cell["b2b"])}
            order = sorted(by_k, key=lambda k: (k == "all", int(k) if k != "all" else 0))
            group[dtype] = {k: by_k[k] for k in order}
    return summary


def device_info(device: str) -> dict:
    info = {"device": device, "platform": platform.platform(), "python": platform.python_version(),
            "numpy": np.__version__, "scipy": scipy.__version__,
            "numba": __import__("numba").__version__, "cores": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    try:
        info["cpu"] = next(line.split(":", 1)[1].strip()
                           for line in Path("/proc/cpuinfo").read_text().splitlines()
                           if line.startswith("model name"))
    except (OSError, StopIteration):
        info["cpu"] = platform.processor()
    if device == "cuda":
        from numba import cuda

        gpu = cuda.get_current_device()
        name = getattr(gpu, "name", "CUDA simulator")  # the simulator's device has no name
        info["gpu"] = name.decode() if isinstance(name, bytes) else name
        info["compute_capability"] = list(gpu.compute_capability)
        for module in ("numba_cuda", "cupy", "torch"):
            try:
                info[module] = __import__(module).__version__
            except Exception:  # library absent on this machine
                info[module] = None
    return info


def default_matrices() -> Path | None:
    """The first folder holding .npz matrices among the checkout's copy of the shared matrices
    and the shared folder beside the checkout."""
    root = Path(__file__).resolve().parent.parent
    for candidate in (root / ".matrices" / "shared", root.parent / "shared" / "matrices"):
        if any(candidate.glob("*.npz")):
            return candidate
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrices", type=Path, default=default_matrices(),
                        help="folder of .npz matrices (default: ../shared/matrices)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda when a GPU is usable, else cpu")
    parser.add_argument("--columns", default=",".join(map(str, COLUMNS)))
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--only", help="comma-separated matrix names (default: all)")
    parser.add_argument("--poisson", type=int, default=300,
                        help="also the 2-D Poisson matrix on this grid side (0: none)")
    parser.add_argument("--grown-nnz", type=float, default=0,
                        help="also every matrix grown to about this many nonzeros")
    parser.add_argument("--grown-max-gb", type=float, default=2.0,
                        help="largest X + Y of 64 float64 columns for a grown matrix (GB)")
    parser.add_argument("--grown-only", action="store_true",
                        help="only the grown matrices (with --grown-nnz)")
    parser.add_argument("--inputs", type=int, default=4, help="X blocks rotated")
    parser.add_argument("--repeats", type=int, default=30, help="per-call samples")
    parser.add_argument("--b2b", type=int, default=20, help="products per back-to-back batch")
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="time budget of each measurement of one implementation")
    parser.add_argument("--out", type=Path, help="JSON file (default benchmarks/results/...)")
    args = parser.parse_args(argv)
    device = args.device or resolve_device(None)
    columns = [int(k) for k in args.columns.split(",")]
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    if not args.matrices and not args.poisson:
        parser.error("no matrices: pass --matrices DIR or --poisson N")
    options = TimingOptions(warmup=3, repeats=args.repeats, min_repeats=5,
                            max_seconds=args.seconds, b2b_calls=args.b2b, b2b_repeats=5,
                            vectors=args.inputs)
    info = device_info(device)
    date = datetime.date.today().isoformat()
    label = info.get("gpu", device).replace("NVIDIA ", "").replace(" ", "-").lower()
    out = args.out or Path(__file__).parent / "results" / f"spmm-{label}-{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"SpMM on {info.get('gpu') or info['cpu']} ({device}); writing {out}", file=sys.stderr)
    records = []
    rng = np.random.default_rng(0)

    def save():
        out.write_text(json.dumps({
            "device": info, "date": date, "columns": columns, "dtypes": [str(d) for d in dtypes],
            "timing": dataclasses.asdict(options), "summary": summarise(records),
            "records": records}, indent=1))

    for name, group, matrix in matrices(args):
        for dtype in dtypes:
            A = canonicalize(sp.csr_matrix(matrix).astype(dtype))
            try:
                implementations = (GpuImplementations if device == "cuda"
                                   else CpuImplementations)(A)
            except Exception as error:  # recorded for every k; the run goes on
                implementations, failure = None, describe(error)
            for k in columns:
                record = {"matrix": name, "group": group, "shape": list(A.shape),
                          "nnz": int(A.nnz), "dtype": str(dtype), "k": k}
                try:
                    if implementations is None:
                        raise RuntimeError(failure)
                    record.update(bench_case(implementations, device, k, options,
                                             args.inputs, rng))
                except Exception as error:  # recorded; the run goes on with the next case
                    record["failed"] = describe(error)
                if device == "cuda":
                    free_device_memory()
                tolerance = 1e-5 if dtype == np.float32 else 1e-12
                for result in record.get("results", {}).values():
                    result["ok"] = result.get("error", math.inf) <= tolerance
                records.append(record)
                print(line(record), file=sys.stderr, flush=True)
        save()
    save()
    for group, by_dtype in summarise(records).items():
        for dtype, by_k in by_dtype.items():
            for k, by_name in by_k.items():
                cells = ", ".join(f"{n} {c['per_call']:.2f}/{c['b2b']:.2f}"
                                  for n, c in by_name.items())
                print(f"{group} {dtype} k={k}: t(baseline)/t(autospmv) per call/b2b, geomean "
                      f"over {max(c['cases'] for c in by_name.values())} cases: {cells}",
                      file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)


def line(record: dict) -> str:
    head = f"{record['matrix']:28s} {record['dtype']:8s} k={record['k']:<3d}"
    if "failed" in record:
        return f"{head} FAILED {record['failed']}"
    cells = []
    for name, r in record["results"].items():
        if "b2b_us" in r:
            cells.append(f"{name} {r['per_call_us']:.0f}/{r['b2b_us']:.0f}"
                         + ("" if r["ok"] else " WRONG"))
        else:
            cells.append(f"{name} -")
    return f"{head} {record['kernel']:10s} " + "  ".join(cells) + "  (µs per call/b2b)"


if __name__ == "__main__":
    main()
