"""The order of rows and columns as part of the decision (``prepare(A, order=...)``), on a GPU.

Each shared matrix (``.npz`` files of the folders given) is grown block-diagonally to about
``--grown-nnz`` nonzeros and numbered at random (one random symmetric permutation). For float32
and float64, back to back (CUDA events around ``--products`` products of a CuPy x; on the CPU
the operators of a matrix take turns, one product each, and each figure is the median of its
products' own times, so that a shared machine's load falls on all of them alike):

* ``keep``: today's automatic operator, ``prepare(A, order="keep")``;
* ``auto``: ``prepare(A, order="auto", products=--hint)``, and the order it chose;
* ``rcm``: ``prepare(A, order="rcm")``; ``rcm_in_own_order``: the same operator's product in
  its stored order (``op.in_own_order()``, x already permuted: what a solver's iteration
  runs), so ``rcm`` less this is the cost of the two gathers, beside ``copy``: one copy of
  x, the GPU's time of a vector pass (repeated in a CUDA graph, so that no launch from the
  host bounds it; back to back on the CPU);
* ``bfs``, ``bfs_in_own_order``: the same for ``prepare(A, order="bfs")`` (reverse
  Cuthill–McKee over the graph of A's rows, the order "auto" computes);
* on a GPU, ``device_keep`` and ``device_bfs``: the same for the matrix given as a CuPy matrix,
  whose bfs order is walked on the GPU (``device_bfs_ordering_cost_s``: its ``prepare`` less
  ``device_keep``'s, beside ``bfs_ordering_cost_s``, the host's walk of the host matrix);
* ``cusparse``: SciPy's RCM, then cupyx's CSR product in RCM order, alone (``cusparse_in_order``)
  and with the two permutations of x and y by CuPy indexing (``cusparse``);
* the grown matrix as given (not renumbered): ``keep``, ``keep_hint`` (the order kept, with the
  same hint, whose kernel tuning "auto" runs too: the operator a hint gave before orders were
  decided) and ``auto`` with the hint; ``given_auto_over_today`` is ``auto`` over
  ``keep_hint``, what the order's decision costs or gains on a matrix already in a good order,
  and ``given_prepare_over_today`` the same for ``prepare``'s time (the fastest of three
  ``prepare`` calls each: :data:`RETIMED`).

Each row has the products' µs, every ``prepare``'s seconds and the kernel it chose, each
order's one-time cost (``prepare`` with the order less ``prepare`` keeping it;
``ordering_cost_s`` and the keys without a prefix are RCM's, ``bfs_...`` the bfs order's),
the gain per product and the break-even product count, and whether the hint's products pay for
the order. On symmetric matrices (or symmetrised ones), shifted to be positive definite as
``solvers_gpu.py`` does, ``autospmv.cg`` runs ``--cg-iterations`` iterations (rtol=0) on the
operator kept and the operator of "auto" prepared for the solvers (``solver=True``, as the
solvers prepare a matrix they are given): the µs per iteration. Beside them, the product of
the operator kept and of "auto"'s in its stored order, back to back: ``cg_ceiling`` is the
iteration kept over the same iteration with the one product replaced by the other, the most an
order can gain cg whose vector updates (the same in any order) stay as they are: a GPU's
figure (there the products and the solves run alone on the device); on a shared CPU the
products, timed in turns, and the solves see different loads, and the kept product can time
longer than the kept iteration.
A warm-up measures the first matrix grown to ``--warm-up-nnz`` once, unrecorded, so that the
kernels' first uses fall in no row. The summary has the geometric means the acceptance reads.
Results go to ``--out`` (JSON naming the GPU, written after every matrix), progress to stderr.

    PYTHONPATH=. python benchmarks/ordering.py .matrices/shared --out ordering-h200.json
    PYTHONPATH=. python benchmarks/ordering.py .matrices/shared --device cpu \\
        --grown-nnz 2e5 --limit 2 --products 5 --cg-iterations 5 --out /tmp/ordering-cpu.json

The defaults finish in about five minutes on an H200 (``--limit`` matrices, spread over sizes).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import autospmv  # noqa: E402
from solvers_gpu import graph_us, spd_copy  # noqa: E402  (beside this script)


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


def shared_matrices(folders, limit: int):
    """Square matrices of the folders (at least 1000 nonzeros), spread over sizes."""
    found = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.npz")):
            A = sp.load_npz(path).tocsr()
            if A.shape[0] == A.shape[1] and A.nnz >= 1000:
                found.append((path.stem, A))
    found.sort(key=lambda item: item[1].nnz)
    step = max(1, len(found) // max(limit, 1))
    return found[::step][:limit]


def grown(A, nnz: float):
    """A repeated block-diagonally to about ``nnz`` nonzeros (A itself when larger)."""
    copies = max(1, round(nnz / A.nnz))
    return A.tocsr() if copies == 1 else sp.block_diag([A] * copies, format="csr")


def at_random(A, seed: int = 0):
    """A renumbered by one random symmetric permutation."""
    p = np.random.default_rng(seed).permutation(A.shape[0])
    B = A[p][:, p].tocsr()
    B.sort_indices()
    return B


class Device:
    """Arrays, synchronisation and back-to-back timing on the GPU (CUDA events) or the CPU."""

    def __init__(self, name: str):
        self.name = name
        if name == "cuda":
            import cupy

            self.cp = cupy
            self.xp = cupy
        else:
            self.cp = None
            self.xp = np

    def describe(self) -> str:
        if self.cp is not None:
            props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
            return props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        model = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as info:
                model = next(line.split(":", 1)[1].strip() for line in info
                             if line.startswith("model name"))
        except (OSError, StopIteration):
            pass
        return f"CPU {model}, {len(os.sched_getaffinity(0))} cores"

    def sync(self) -> None:
        if self.cp is not None:
            self.cp.cuda.Device().synchronize()

    def back_to_back(self, run, products: int) -> float:
        """µs per call of ``run()`` over ``products`` calls, after two warm-up calls."""
        run()
        run()
        self.sync()
        if self.cp is not None:
            start, stop = self.cp.cuda.Event(), self.cp.cuda.Event()
            start.record()
            for _ in range(products):
                run()
            stop.record()
            stop.synchronize()
            return self.cp.cuda.get_elapsed_time(start, stop) * 1e3 / products
        started = time.perf_counter()
        for _ in range(products):
            run()
        return (time.perf_counter() - started) * 1e6 / products

    def each_back_to_back(self, runs: dict, products: int) -> dict:
        """µs per call of each of ``runs`` (label: callable), ``products`` calls each. On the
        GPU one after another (:meth:`back_to_back`); on the CPU in turns, one call of each per
        turn, each call timed by itself, and the median of each's calls: a shared machine's
        change of load then falls on every label alike, and a burst on a few calls only."""
        if self.cp is not None:
            return {label: self.back_to_back(run, products) for label, run in runs.items()}
        for run in runs.values():
            run()
            run()
        times = {label: [] for label in runs}
        for _ in range(products):
            for label, run in runs.items():
                started = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - started)
        return {label: float(np.median(t)) * 1e6 for label, t in times.items()}

    def pass_us(self, run) -> float:
        """µs per call of ``run()`` as the device runs it: on the GPU captured in a CUDA graph
        and replayed (:func:`solvers_gpu.graph_us`), so that the host's launches do not bound a
        short kernel; on the CPU back to back."""
        if self.cp is None:
            return self.back_to_back(run, 20)
        return graph_us(self.cp, self.cp.cuda.Stream(non_blocking=True), run)


RETIMED = ("given_keep_hint", "given_auto")
"""The prepares timed again after the run's (in turns, A B B A, each freed before the next):
the faster of its three timings counts, so that neither gains from finding memory the other
freed."""


def prepared(device: Device, A, **options):
    """``(operator, seconds of prepare)``, the device idle before and after."""
    device.sync()
    started = time.perf_counter()
    op = autospmv.prepare(A, device=device.name, **options)
    device.sync()
    return op, time.perf_counter() - started


def product(device: Device, op, x):
    """A callable running ``op.matvec(x, out=...)`` into one result vector."""
    out = device.xp.empty(op.shape[0], dtype=np.result_type(op.dtype, x.dtype))
    return lambda: op.matvec(x, out=out)


def baseline_us(device: Device, A, perm, x, products: int) -> tuple[float, float]:
    """cuSPARSE (cupyx) or SciPy on the CPU: the product in RCM order alone, and with x
    permuted into that order and y back by the array library's indexing."""
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(perm.size, dtype=perm.dtype)
    B = A[perm][:, perm].tocsr()
    if device.cp is not None:
        import cupyx.scipy.sparse as cusp

        B = cusp.csr_matrix(B)
        perm, inverse = device.cp.asarray(perm), device.cp.asarray(inverse)
    x_p = x[perm]
    in_order = device.back_to_back(lambda: B @ x_p, products)
    permuted = device.back_to_back(lambda: (B @ x[perm])[inverse], products)
    return in_order, permuted


CG_TURNS = 5
"""On the CPU, the solves of :func:`cg_us` split into this many turns per operator."""


def cg_us(device: Device, ops: dict, iterations: int) -> dict:
    """µs per iteration of ``autospmv.cg`` on each of ``ops`` (label: operator; rtol=0: every
    iteration runs): on the GPU one solve of ``iterations`` each, one operator after another;
    on the CPU :data:`CG_TURNS` solves of a share of them each, the operators in turns, and the
    median of each's turns (as :meth:`Device.each_back_to_back`)."""
    turns = 1 if device.cp is not None else CG_TURNS
    b = {label: device.xp.ones(op.shape[0], dtype=op.dtype) for label, op in ops.items()}
    for label, op in ops.items():
        autospmv.cg(op, b[label], rtol=0.0, maxiter=2)  # the workspace (and a CUDA graph)
    times = {label: [] for label in ops}
    for _ in range(turns):
        for label, op in ops.items():
            device.sync()
            started = time.perf_counter()
            autospmv.cg(op, b[label], rtol=0.0, maxiter=max(1, iterations // turns))
            device.sync()
            done = op.last_solve["iterations"] or max(1, iterations // turns)
            times[label].append((time.perf_counter() - started) * 1e6 / done)
    return {label: float(np.median(t)) for label, t in times.items()}


def geomean(values) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def measure_matrix(device: Device, name: str, A, args) -> list[dict]:
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    G = grown(A, args.grown_nnz)
    R = at_random(G)
    started = time.perf_counter()
    perm = np.ascontiguousarray(reverse_cuthill_mckee(R, symmetric_mode=False))
    scipy_rcm_s = time.perf_counter() - started
    log(f"{name}: grown to {R.nnz:,} nonzeros ({R.shape[0]:,} rows); SciPy RCM "
        f"{scipy_rcm_s:.2f} s")
    rows = []
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        row = {"matrix": name, "dtype": np.dtype(dtype).name, "rows": R.shape[0], "nnz": R.nnz,
               "scipy_rcm_s": scipy_rcm_s}
        Rd, Gd = R.astype(dtype), G.astype(dtype)
        x = device.xp.asarray(rng.standard_normal(R.shape[0]).astype(dtype))
        runs = {}
        preparations = [
            ("keep", Rd, {"order": "keep"}),
            ("auto", Rd, {"order": "auto", "products": args.hint}),
            ("rcm", Rd, {"order": "rcm"}), ("bfs", Rd, {"order": "bfs"}),
            ("given_keep", Gd, {"order": "keep"}),
            ("given_keep_hint", Gd, {"order": "keep", "products": args.hint}),
            ("given_auto", Gd, {"order": "auto", "products": args.hint})]
        if device.cp is not None:
            import cupyx.scipy.sparse as cusp

            on_gpu = cusp.csr_matrix(Rd)
            preparations += [("device_keep", on_gpu, {"order": "keep"}),
                             ("device_bfs", on_gpu, {"order": "bfs"})]
        for label, matrix, options in preparations:
            op, seconds = prepared(device, matrix, **options)
            row[f"{label}_prepare_s"] = seconds
            row[f"{label}_order"] = op.order
            row[f"{label}_kernel"] = op.kernel
            runs[label] = product(device, op, x)
            if label in ("rcm", "bfs"):
                runs[f"{label}_in_own_order"] = product(device, op.in_own_order(), x)
            del op
        retimed = {label: (matrix, options) for label, matrix, options in preparations
                   if label in RETIMED}
        for label in RETIMED + RETIMED[::-1]:
            matrix, options = retimed[label]
            op, seconds = prepared(device, matrix, **options)
            row[f"{label}_prepare_s"] = min(row[f"{label}_prepare_s"], seconds)
            del op
            gc.collect()  # the next prepare finds this one's memory free, as each retimed one does
        for label, us in device.each_back_to_back(runs, args.products).items():
            row[f"{label}_us"] = us
        del runs
        copy = device.xp.empty_like(x)
        row["copy_us"] = device.pass_us(lambda: copy.__setitem__(Ellipsis, x))
        row["cusparse_in_order_us"], row["cusparse_us"] = baseline_us(
            device, Rd, perm, x, args.products)
        gain_us = row["keep_us"] - row["rcm_us"]
        cost_s = row["rcm_prepare_s"] - row["keep_prepare_s"]
        row["speedup_rcm"] = row["keep_us"] / row["rcm_us"]
        row["speedup_auto"] = row["keep_us"] / row["auto_us"]
        row["speedup_in_own_order"] = row["keep_us"] / row["rcm_in_own_order_us"]
        row["gathers_us"] = row["rcm_us"] - row["rcm_in_own_order_us"]
        row["given_auto_over_keep"] = row["given_auto_us"] / row["given_keep_us"]
        row["given_auto_over_today"] = row["given_auto_us"] / row["given_keep_hint_us"]
        row["given_prepare_over_today"] = (row["given_auto_prepare_s"]
                                           / row["given_keep_hint_prepare_s"])
        row["ordering_cost_s"] = cost_s
        row["gain_per_product_us"] = gain_us
        row["break_even_products"] = cost_s * 1e6 / gain_us if gain_us > 0 else None
        row["hint_pays"] = bool(gain_us > 0 and args.hint * gain_us * 1e-6 >= cost_s)
        bfs_gain_us = row["keep_us"] - row["bfs_us"]
        bfs_cost_s = row["bfs_prepare_s"] - row["keep_prepare_s"]
        row["speedup_bfs"] = row["keep_us"] / row["bfs_us"]
        row["speedup_bfs_in_own_order"] = row["keep_us"] / row["bfs_in_own_order_us"]
        row["bfs_ordering_cost_s"] = bfs_cost_s
        row["bfs_gain_per_product_us"] = bfs_gain_us
        row["bfs_break_even_products"] = (bfs_cost_s * 1e6 / bfs_gain_us if bfs_gain_us > 0
                                          else None)
        if device.cp is not None:
            row["speedup_device_bfs"] = row["keep_us"] / row["device_bfs_us"]
            row["device_bfs_ordering_cost_s"] = (row["device_bfs_prepare_s"]
                                                 - row["device_keep_prepare_s"])
            log(f"  {row['dtype']}: the bfs order of the CuPy matrix walked on the GPU: "
                f"{row['device_bfs_ordering_cost_s']:.3f} s (the host's walk "
                f"{bfs_cost_s:.3f} s), its product {row['device_bfs_us']:.1f} µs")
        if args.cg_iterations:
            S = at_random(grown(spd_copy(A), args.grown_nnz)).astype(dtype)
            ops = {}
            for label, options in (("keep", {"order": "keep"}),
                                   ("auto", {"order": "auto", "products": args.hint,
                                             "solver": True})):
                ops[label], _ = prepared(device, S, **options)
                row[f"cg_{label}_order"] = ops[label].order
            for label, us in cg_us(device, ops, args.cg_iterations).items():
                row[f"cg_{label}_us_per_iteration"] = us
            b = device.xp.asarray(rng.standard_normal(S.shape[0]).astype(dtype))
            products = device.each_back_to_back(
                {"keep": product(device, ops["keep"], b),
                 "auto_in_own_order": product(device, ops["auto"].in_own_order(), b)},
                args.products)
            del ops
            row["cg_keep_product_us"] = products["keep"]
            row["cg_auto_product_in_own_order_us"] = products["auto_in_own_order"]
            row["cg_speedup_auto"] = (row["cg_keep_us_per_iteration"]
                                      / row["cg_auto_us_per_iteration"])
            row["cg_ceiling"] = row["cg_keep_us_per_iteration"] / (
                row["cg_keep_us_per_iteration"] - products["keep"]
                + products["auto_in_own_order"])
        log(f"  {row['dtype']}: keep {row['keep_us']:.1f} µs, auto ({row['auto_order']}) "
            f"{row['auto_us']:.1f}, rcm {row['rcm_us']:.1f} ({row['rcm_in_own_order_us']:.1f} in "
            f"its own order), bfs {row['bfs_us']:.1f} ({row['bfs_in_own_order_us']:.1f}; "
            f"ordering {bfs_cost_s:.2f} s); a copy of x {row['copy_us']:.1f}; cuSPARSE in RCM "
            "order "
            f"{row['cusparse_in_order_us']:.1f} (+ permutations {row['cusparse_us']:.1f}); "
            f"as given: auto/keep {row['given_auto_over_keep']:.3f}, auto/keep with the hint "
            f"{row['given_auto_over_today']:.3f} (prepare "
            f"{row['given_prepare_over_today']:.2f}×); RCM ordering "
            f"{cost_s:.2f} s, break-even {row['break_even_products'] or float('nan'):.0f} "
            f"products" + (f"; cg µs/iteration keep {row['cg_keep_us_per_iteration']:.1f}, "
                           f"auto {row['cg_auto_us_per_iteration']:.1f}"
                           if args.cg_iterations else ""))
        rows.append(row)
    return rows


def summary(rows) -> dict:
    out = {}
    for dtype in ("float32", "float64"):
        these = [r for r in rows if r["dtype"] == dtype]
        out[dtype] = {
            "geomean_speedup_auto": geomean(r["speedup_auto"] for r in these),
            "geomean_speedup_rcm": geomean(r["speedup_rcm"] for r in these),
            "geomean_speedup_in_own_order": geomean(r["speedup_in_own_order"] for r in these),
            "geomean_speedup_bfs": geomean(r["speedup_bfs"] for r in these),
            "geomean_speedup_bfs_in_own_order": geomean(r["speedup_bfs_in_own_order"]
                                                        for r in these),
            "geomean_rcm_over_bfs_ordering_cost": geomean(
                r["ordering_cost_s"] / r["bfs_ordering_cost_s"] for r in these
                if r["bfs_ordering_cost_s"] > 0 and r["ordering_cost_s"] > 0),
            "geomean_host_over_device_bfs_ordering_cost": geomean(
                r["bfs_ordering_cost_s"] / r["device_bfs_ordering_cost_s"] for r in these
                if r.get("device_bfs_ordering_cost_s", 0) > 0 and r["bfs_ordering_cost_s"] > 0),
            "geomean_gathers_over_copy": geomean(r["gathers_us"] / r["copy_us"]
                                                 for r in these),
            "geomean_cg_speedup_auto": geomean(r.get("cg_speedup_auto") for r in these),
            "geomean_cg_ceiling": geomean(r.get("cg_ceiling") for r in these),
            "worst_given_auto_over_today": max((r["given_auto_over_today"] for r in these),
                                               default=None),
            "geomean_given_prepare_over_today": geomean(r["given_prepare_over_today"]
                                                        for r in these),
            "worst_given_auto_over_keep": max((r["given_auto_over_keep"] for r in these),
                                              default=None),
            "matrices_where_hint_pays": sum(r["hint_pays"] for r in these),
            "matrices": len(these),
        }
    return out


WARM_UP_NNZ = 3e5
"""The size of the warm-up's matrix: above the size from which the model decides (as it does
for the run's matrices), small enough to take seconds."""


def warm_up(device: Device, name: str, A, args) -> None:
    """Every measurement of :func:`measure_matrix` once on ``A`` grown to ``--warm-up-nnz``
    nonzeros, for a handful of products and cg iterations, not recorded: the first uses of the
    kernels (compilation, loading, allocation) then fall in no row of the run."""
    small = argparse.Namespace(**{**vars(args), "grown_nnz": args.warm_up_nnz, "products": 5,
                                  "cg_iterations": min(args.cg_iterations, 5)})
    log(f"warm-up on {name}:")
    measure_matrix(device, name, A, small)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrices", nargs="+", help="folders of .npz matrices")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--grown-nnz", type=float, default=1e7)
    parser.add_argument("--limit", type=int, default=6, help="matrices at most")
    parser.add_argument("--products", type=int, default=200,
                        help="products per back-to-back timing")
    parser.add_argument("--hint", type=int, default=100_000,
                        help="the products= hint of order='auto'")
    parser.add_argument("--cg-iterations", type=int, default=200,
                        help="cg iterations timed (0: no cg)")
    parser.add_argument("--out", required=True, help="JSON file of the results")
    parser.add_argument("--warm-up-nnz", type=float, default=WARM_UP_NNZ,
                        help="grow the first matrix to this size and measure it once, "
                             "unrecorded, before the run (0: no warm-up)")
    args = parser.parse_args(argv)
    device = Device(args.device)
    rows = []
    started = time.perf_counter()
    for index, (name, A) in enumerate(shared_matrices(args.matrices, args.limit)):
        if index == 0 and args.warm_up_nnz:
            warm_up(device, name, A, args)
        rows += measure_matrix(device, name, A, args)
        result = {"device": device.describe(), "args": vars(args), "rows": rows,
                  "summary": summary(rows), "seconds": time.perf_counter() - started}
        Path(args.out).write_text(json.dumps(result, indent=1))  # after every matrix
    log(json.dumps(result["summary"], indent=1))
    log(f"done in {result['seconds']:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()
