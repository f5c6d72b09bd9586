"""GPU solvers against cupyx's, SciPy's iteration counts and the memory floor, in one run.

For each matrix and dtype it measures:

* **per iteration**: ``autospmv.cg`` with rtol=0 for a fixed number of iterations (so every
  solver runs the same count), against ``cupyx.scipy.sparse.linalg.cg`` with the matrix as a
  cuSPARSE CSR matrix and with the autospmv operator; CUDA events around whole solves, median
  of several solves;
* **the memory floor** of one cg iteration: the product's fewest bytes (CSR values, column
  indices, row pointer, x and y once) plus ten vector passes, at the device-to-device copy
  bandwidth measured in the same run, and the floor of its dependencies: the same bytes moved
  by three device copies each waiting for the one before, as a CUDA graph
  (:func:`chained_copies_seconds`);
* **per solve** to rtol=1e-6 (cg, bicgstab, gmres(restart=30), minres) against cupyx's solver of
  the same name where cupyx has one (cupyx has no bicgstab: its cgs, also two products per
  iteration, stands in and is named so), with the iteration counts of autospmv and of SciPy's
  solver on the CPU in float64 (where SciPy converges within the limit), and for gmres the
  floor of its bytes (:func:`gmres_floor_seconds`), which ``--floors FILE`` adds to the gmres
  solves of an earlier results file without a GPU.

Matrices: 2-D (5-point) and 3-D (7-point) Laplacians from 10⁴ nonzeros up (``--sizes``), and
the real matrices of ``--matrices`` folders (``.npz``), symmetric ones shifted to be positive
definite for cg and minres, and nonsymmetric ones for bicgstab and gmres. Results go to a JSON
file that names the GPU; a table is printed last. Run from the repository root on a GPU::

    PYTHONPATH=. python benchmarks/solvers_gpu.py --out results.json
    PYTHONPATH=. python benchmarks/solvers_gpu.py --check     # correctness only, small sizes
    python benchmarks/solvers_gpu.py --floors benchmarks/results/solvers-gpu-h200.json
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import autospmv

METHODS = ("cg", "bicgstab", "gmres", "minres")


def laplacian_2d(k):
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    return sp.kronsum(T, T, format="csr")


def laplacian_3d(k):
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    return sp.kronsum(sp.kronsum(T, T), T, format="csr")


def laplacian(dims: int, nnz: float):
    """The Laplacian of ``dims`` dimensions with about ``nnz`` nonzeros."""
    if dims == 2:
        return laplacian_2d(max(3, int(round((nnz / 5) ** 0.5))))
    return laplacian_3d(max(3, int(round((nnz / 7) ** (1 / 3)))))


def copy_bandwidth(cp) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write), median of 20."""
    a = cp.ones(1 << 27, dtype=cp.float64)
    b = cp.empty_like(a)
    times = []
    for _ in range(22):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        b[...] = a
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return 2 * a.nbytes / statistics.median(times[2:])


def product_bytes(shape: tuple[int, int], nnz: int, itemsize: int) -> int:
    """The fewest bytes of the product of a CSR matrix of ``shape`` and ``nnz`` entries: values,
    column indices, row pointer, x and y once."""
    m, n = shape
    index = 4
    return nnz * (itemsize + index) + (m + 1) * index + (m + n) * itemsize


def floor_seconds(A, itemsize: int, bandwidth: float) -> float:
    """One cg iteration's fewest bytes over the copy bandwidth: the product
    (:func:`product_bytes`) plus ten vector passes."""
    return (product_bytes(A.shape, A.nnz, itemsize) + 10 * A.shape[0] * itemsize) / bandwidth


GMRES_RESTART = 30
"""The restart length of the gmres solves."""


def gmres_floor_seconds(n: int, nnz: int, itemsize: int, columns: int, bandwidth: float,
                        restart: int = GMRES_RESTART) -> float:
    """The fewest bytes of a gmres(restart) solve of ``columns`` Arnoldi columns in all (the
    solve's iteration count) over the copy bandwidth: per column c of a cycle (counted from 0),
    the product (:func:`product_bytes` of an n × n matrix of ``nnz`` entries) and Gram-Schmidt
    once, which reads w and the c + 1 basis vectors to project and again to subtract, and
    writes w: (2c + 5) vector passes. The normalisation, the reorthogonalisation where needed,
    the end of each cycle (x += V y, the residual) and cupyx's own extra passes are left out,
    so no gmres of these iterations can run faster; cupyx's solve time over this floor is the
    most any such gmres can gain on it."""
    product = product_bytes((n, n), nnz, itemsize)
    full, last = divmod(columns, restart)
    passes = full * sum(2 * c + 5 for c in range(restart)) + sum(2 * c + 5 for c in range(last))
    return (columns * product + passes * n * itemsize) / bandwidth


def add_gmres_floors(results: dict) -> dict:
    """``results`` (a results file of this script, one run's or several runs' with ``runs``
    and each row's or solve's ``run``) with :func:`gmres_floor_seconds` as ``floor_seconds`` in
    every Laplacian row's gmres solve, at the copy bandwidth of the run that measured it."""
    for row in results.get("laplacians", []):
        itemsize = np.dtype(row["dtype"]).itemsize
        for solve in row["solves"]:
            if solve["method"] == "gmres":
                measured_by = solve.get("run", row.get("run"))  # a solve may name its own run
                run = results["runs"][measured_by] if measured_by else results
                solve["floor_seconds"] = gmres_floor_seconds(
                    row["n"], row["nnz"], itemsize, solve["iterations"], run["copy_bandwidth"])
    return results


def chained_copies_seconds(cp, A, itemsize: int) -> float:
    """The floor of an iteration's dependencies: the bytes of :func:`floor_seconds` (less one
    dot's pass, which the product may form) moved by three device copies that each wait for
    the one before (the direction, the product, the update: the fewest passes a cg iteration
    with its two sums can make), 16 iterations captured as a CUDA graph and replayed; seconds
    per iteration. The copies are CuPy's elementwise copy, the one :func:`copy_bandwidth`
    times, so that the chain and the floor differ by the waiting alone, not by the copy.
    Copies of tens of megabytes start and drain, which a single copy of a gigabyte hides."""
    n = A.shape[0]
    passes = [b // 16 for b in (3 * n * itemsize, product_bytes(A.shape, A.nnz, itemsize),
                                6 * n * itemsize)]
    buffers = [(cp.ones(words, dtype=cp.float64), cp.empty(words, dtype=cp.float64))
               for words in passes]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for source, target in buffers:
            target[...] = source  # compiled before the capture
        stream.begin_capture()
        for _ in range(16):
            for source, target in buffers:
                target[...] = source
        graph = stream.end_capture()
        seconds, _ = timed(cp, lambda: [graph.launch(stream) for _ in range(10)])
    return seconds / 160


def timed(cp, run, repeats=5):
    """Median seconds of ``run()`` (CUDA events around it, the device synchronised)."""
    times = []
    run()
    for _ in range(repeats):
        cp.cuda.Device().synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        result = run()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times), result


COPIES = 32
"""Copies of a launch in one graph."""


def graph_us(cp, stream, launch, copies: int = COPIES, replays: int = 7) -> float:
    """µs per ``launch()``: ``copies`` of it captured as a graph on ``stream``, the median of
    ``replays`` timings of two replays each."""
    with stream:
        launch()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(copies):
            launch()
        graph = stream.end_capture()
        graph.launch(stream)
        times = []
        for _ in range(replays):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            graph.launch(stream)
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / (2 * copies))
    return statistics.median(times)


def cupyx_solver(name):
    import cupyx.scipy.sparse.linalg as cla

    solver = getattr(cla, "cgs" if name == "bicgstab" else name, None)
    if solver is None:
        return None, None
    parameters = inspect.signature(solver).parameters
    tolerance = "rtol" if "rtol" in parameters else "tol"
    return solver, tolerance


def cupyx_call(name, A, b, rtol, maxiter):
    solver, tolerance = cupyx_solver(name)
    kwargs = {tolerance: rtol, "maxiter": maxiter}
    if "atol" in inspect.signature(solver).parameters:
        kwargs["atol"] = 0.0
    if name == "gmres":  # cupyx counts inner iterations where SciPy counts restart cycles
        kwargs.update(restart=30, maxiter=30 * maxiter)
    return solver(A, b, **kwargs)


def scipy_iterations(name, A, b, rtol, maxiter):
    count = []
    kwargs = {"callback_type": "pr_norm"} if name == "gmres" else {}
    if name == "gmres":
        kwargs["restart"] = 30
    solver = getattr(spla, name)
    x, info = solver(A, b, rtol=rtol, maxiter=maxiter, callback=lambda *a: count.append(1),
                     **kwargs)
    return len(count), int(info), float(np.linalg.norm(A @ x - b))


def solver_iteration_us(cp, op, b, solver: str, iterations: int) -> float:
    """µs per iteration of ``autospmv.<solver>(op, b, rtol=0, maxiter=iterations)`` (:func:`timed`:
    the median of five solves after one)."""
    solve = getattr(autospmv, solver)
    seconds, _ = timed(cp, lambda: solve(op, b, rtol=0.0, maxiter=iterations))
    return seconds * 1e6 / iterations


def per_iteration(cp, cusparse, A, op, b, dtype, iterations):
    """Seconds per cg iteration: autospmv, cupyx + cuSPARSE, cupyx + the operator."""
    import cupyx.scipy.sparse.linalg as cla

    n = A.shape[0]
    b_gpu = cp.asarray(b, dtype=dtype)
    ours, _ = timed(cp, lambda: autospmv.cg(op, b_gpu, rtol=0.0, maxiter=iterations))
    y = cp.empty_like(b_gpu)
    product, _ = timed(cp, lambda: [op.matvec(b_gpu, out=y) for _ in range(100)])
    wrapped = cla.LinearOperator((n, n), matvec=op.matvec, dtype=dtype)
    solver, tolerance = cupyx_solver("cg")
    kwargs = {tolerance: 0.0, "maxiter": iterations}
    with_cusparse, _ = timed(cp, lambda: solver(cusparse, b_gpu, **kwargs), repeats=3)
    with_operator, _ = timed(cp, lambda: solver(wrapped, b_gpu, **kwargs), repeats=3)
    return (ours / iterations, with_cusparse / iterations, with_operator / iterations,
            product / 100)


def per_solve(cp, cusparse, A, op, b, dtype, name, rtol, maxiter, with_scipy):
    b_gpu = cp.asarray(b, dtype=dtype)
    kwargs = {"restart": 30} if name == "gmres" else {}
    cp.cuda.Device().synchronize()
    started = time.perf_counter()
    getattr(autospmv, name)(op, b_gpu, rtol=rtol, maxiter=maxiter, **kwargs)
    cp.cuda.Device().synchronize()
    first = time.perf_counter() - started
    ours, (x, info) = timed(cp, lambda: getattr(autospmv, name)(
        op, b_gpu, rtol=rtol, maxiter=maxiter, **kwargs), repeats=3)
    iterations = op.last_solve["iterations"]
    residual = float(cp.linalg.norm(cusparse @ x - b_gpu))
    row = {"method": name, "seconds": ours, "first_seconds": first, "iterations": iterations,
           "info": info,
           "residual": residual, "b_norm": float(np.linalg.norm(b))}
    if cupyx_solver(name)[0] is not None:
        theirs, (xc, infoc) = timed(cp, lambda: cupyx_call(name, cusparse, b_gpu, rtol,
                                                            maxiter), repeats=3)
        row.update(cupyx=("cgs" if name == "bicgstab" else name), cupyx_seconds=theirs,
                   cupyx_info=int(infoc),
                   cupyx_residual=float(cp.linalg.norm(cusparse @ xc - b_gpu)))
    if with_scipy and dtype == np.float64:
        maxiter_scipy = maxiter
        count, info_s, res_s = scipy_iterations(name, A.astype(np.float64), b, rtol,
                                                maxiter_scipy)
        row.update(scipy_iterations=count, scipy_info=info_s, scipy_residual=res_s)
    return row


def convection(A, strength=0.5):
    """A (symmetric, as the Laplacians) with a skew-symmetric part on its pattern: strength ×
    (upper − lower off-diagonal part), a convection–diffusion-like nonsymmetric matrix with A's
    diagonal."""
    A = sp.csr_matrix(A, dtype=np.float64)
    return (A + strength * (sp.triu(A, 1) - sp.tril(A, -1))).tocsr()


def nonsymmetric_copy(A):
    """A real nonsymmetric matrix with its diagonal raised by a fifth of each row's absolute
    sum (so Krylov methods have a chance; whether they converge is part of the result)."""
    A = sp.csr_matrix(A, dtype=np.float64)
    row_sums = np.asarray(abs(A).sum(axis=1)).ravel()
    return (A + sp.diags(0.2 * row_sums + 1e-3 * (row_sums.max() + 1))).tocsr()


def spd_copy(A):
    """A symmetric matrix shifted to be positive definite: A + (Gershgorin shift) I, scaled
    by the diagonal so the iteration counts stay moderate."""
    A = sp.csr_matrix(A, dtype=np.float64)
    A = ((A + A.T) * 0.5).tocsr()
    row_sums = np.asarray(abs(A).sum(axis=1)).ravel()
    return (A + sp.diags(row_sums - A.diagonal() + 1e-2 * (row_sums.max() + 1))).tocsr()


def real_matrices(folders, limit):
    found = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.npz")):
            A = sp.load_npz(path).tocsr()
            if A.shape[0] != A.shape[1] or A.nnz < 1000:
                continue
            symmetric = abs(A - A.T).sum() <= 1e-12 * abs(A).sum()
            found.append((path.stem, A, bool(symmetric)))
    found.sort(key=lambda item: item[1].nnz)
    step = max(1, len(found) // limit)
    return found[::step][:limit]


def check(cp, out, methods=METHODS):
    """Correctness on small problems: every method, dtype and preconditioner against SciPy."""
    rows = []
    rng = np.random.default_rng(1)
    P = laplacian_2d(60)
    n = P.shape[0]
    N = (P + sp.diags(rng.uniform(-0.3, 0.3, n - 1), 1)).tocsr()
    S = (P - 0.3 * sp.identity(n)).tocsr()
    b = rng.standard_normal(n)
    for name, A in (("cg", P), ("bicgstab", N), ("gmres", N), ("minres", P), ("minres", S)):
        if name not in methods:
            continue
        for dtype in (np.float64, np.float32):
            Ad = A.astype(dtype)
            op = autospmv.prepare(Ad, device="cuda")
            jac = sp.diags(1.0 / A.diagonal())
            for M in (None, "jacobi", "operator"):
                if name == "minres" and M is not None and A is S:
                    continue
                Mo = autospmv.prepare(jac.astype(dtype), device="cuda") if M == "operator" else M
                kwargs = {"restart": 30} if name == "gmres" else {}
                x, info = getattr(autospmv, name)(op, cp.asarray(b, dtype=dtype), rtol=1e-8,
                                                  M=Mo, **kwargs)
                its = op.last_solve["iterations"]
                xe, infoe = getattr(autospmv, name)(op, b.astype(dtype), rtol=1e-8, M=Mo,
                                                    callback=lambda x: None, **kwargs)
                its_eager = op.last_solve["iterations"]
                cpu = autospmv.prepare(Ad, device="cpu")
                xc, infoc = getattr(autospmv, name)(cpu, b.astype(dtype), rtol=1e-8,
                                                    M=None if M is None else "jacobi", **kwargs)
                its_cpu = cpu.last_solve["iterations"]
                count, info_s, res_s = scipy_iterations(
                    name, A, b, 1e-8, None) if dtype == np.float64 else (None, None, None)
                if name == "gmres" and count is not None:
                    pass
                res = float(np.linalg.norm(A @ cp.asnumpy(x).astype(np.float64) - b))
                row = dict(method=name, dtype=np.dtype(dtype).name, M=str(M), info=info,
                           iterations=its, iterations_eager=its_eager, iterations_cpu=its_cpu,
                           scipy_iterations=count, scipy_info=info_s, residual=res,
                           scipy_residual=res_s,
                           eager_vs_graph=float(np.linalg.norm(xe - cp.asnumpy(x))
                                                / np.linalg.norm(xe)),
                           type=type(x).__module__)
                rows.append(row)
                print(json.dumps(row), flush=True)
    out["check"] = rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results file (JSON; needed but with --floors)")
    parser.add_argument("--check", action="store_true", help="correctness only")
    parser.add_argument("--sizes", default="1e4,1e5,1e6,5e6,2e7",
                        help="Laplacian sizes in nonzeros, comma-separated")
    parser.add_argument("--dims", default="2,3", help="Laplacian dimensions")
    parser.add_argument("--iterations", type=int, default=300,
                        help="cg iterations timed per solve (rtol=0)")
    parser.add_argument("--matrices", nargs="*", default=[], help="folders of .npz matrices")
    parser.add_argument("--limit", type=int, default=16, help="real matrices per kind")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--floors", type=Path,
                        help="add the gmres solves' floors to this results file (in place, "
                             "from the figures it holds: no GPU) and print them")
    parser.add_argument("--no-overlap", action="store_true",
                        help="launch the solvers' steps without programmatic dependent launch "
                             "(for comparison)")
    args = parser.parse_args(argv)
    if args.floors:
        text = args.floors.read_text(encoding="utf-8")
        results = add_gmres_floors(json.loads(text))
        compact = not text.startswith("{\n")  # the file keeps its layout
        args.floors.write_text(json.dumps(results, indent=None if compact else 1,
                                          separators=(",", ":") if compact else None),
                               encoding="utf-8")
        print_gmres_floors(results)
        return
    if args.out is None:
        parser.error("--out is required (but with --floors)")
    if args.no_overlap:
        from autospmv._solve import steps

        steps.OVERLAP = False
    import cupy as cp
    import cupyx.scipy.sparse as csp

    out = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "overlap": not args.no_overlap,
           "date": datetime.date.today().isoformat(), "host": platform.node(),
           "versions": {"cupy": cp.__version__, "numpy": np.__version__}}
    if args.check:
        check(cp, out, args.methods.split(","))
        args.out.write_text(json.dumps(out, indent=1))
        return
    bandwidth = copy_bandwidth(cp)
    out["copy_bandwidth"] = bandwidth
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    methods = args.methods.split(",")
    laplacians = []
    for dims in (int(d) for d in args.dims.split(",")):
        for size in (float(s) for s in args.sizes.split(",")):
            laplacians.append((f"laplacian{dims}d-{int(size):.0e}", laplacian(dims, size)))
    rows = []
    for name, A in laplacians:
        for dtype in dtypes:
            Ad = A.astype(dtype)
            op = autospmv.prepare(Ad, device="cuda")
            cusparse = csp.csr_matrix(Ad)
            b = np.random.default_rng(2).standard_normal(A.shape[0])
            ours, cusp, wrapped, product = per_iteration(cp, cusparse, Ad, op, b, dtype,
                                                         args.iterations)
            floor = floor_seconds(A, dtype.itemsize, bandwidth)
            chained = chained_copies_seconds(cp, A, dtype.itemsize)
            row = dict(matrix=name, n=A.shape[0], nnz=int(A.nnz), dtype=dtype.name,
                       kernel=op.kernel, iteration_us=ours * 1e6, product_us=product * 1e6,
                       cupyx_cusparse_us=cusp * 1e6, cupyx_operator_us=wrapped * 1e6,
                       floor_us=floor * 1e6, chained_floor_us=chained * 1e6)
            solves = []
            for method in methods:
                A_method = A if method in ("cg", "minres") else convection(A)
                op_m = op if A_method is A else autospmv.prepare(A_method.astype(dtype),
                                                                  device="cuda")
                cus_m = cusparse if A_method is A else csp.csr_matrix(A_method.astype(dtype))
                solves.append(per_solve(cp, cus_m, A_method.astype(dtype), op_m, b, dtype,
                                        method, 1e-6, 2000 if method != "gmres" else 100,
                                        with_scipy=A.nnz <= 2e6))
                if method == "gmres":
                    solves[-1]["floor_seconds"] = gmres_floor_seconds(
                        A.shape[0], A_method.nnz, dtype.itemsize, solves[-1]["iterations"],
                        bandwidth)
            row["solves"] = solves
            rows.append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(json.dumps({**out, "laplacians": rows}, indent=1))
    out["laplacians"] = rows
    real = []
    for name, A, symmetric in real_matrices(args.matrices, args.limit):
        for dtype in dtypes:
            prepared = {}
            for method in methods:
                if method in ("cg", "minres"):
                    A_method = spd_copy(A) if symmetric else None
                else:
                    A_method = nonsymmetric_copy(A) if not symmetric else None
                if A_method is None:
                    continue
                key = id(A_method)
                Ad = A_method.astype(dtype)
                op = autospmv.prepare(Ad, device="cuda")
                b = np.random.default_rng(3).standard_normal(A.shape[0])
                real.append(dict(matrix=name, nnz=int(A.nnz), dtype=dtype.name,
                                 **per_solve(cp, csp.csr_matrix(Ad), Ad, op, b, dtype, method,
                                             1e-6, 2000 if method != "gmres" else 100,
                                             with_scipy=True)))
                print(json.dumps(real[-1]), flush=True)
        out["real"] = real
        args.out.write_text(json.dumps(out, indent=1))
    args.out.write_text(json.dumps(out, indent=1))
    print_table(out)


def print_table(out):
    print(f"\n{out['device']}, copy {out['copy_bandwidth'] / 1e12:.2f} TB/s")
    print(f"{'matrix':22s} {'dtype':7s} {'nnz':>9s} {'ours':>8s} {'product':>8s} {'floor':>8s}"
          f" {'chained':>8s} {'cuSPARSE':>9s} {'operator':>9s}  per solve vs cupyx (cg bicgstab* "
          "gmres minres)")
    for row in out.get("laplacians", []):
        speedups = " ".join(f"{s['cupyx_seconds'] / s['seconds']:.1f}x" if "cupyx_seconds" in s
                            else "-" for s in row["solves"])
        print(f"{row['matrix']:22s} {row['dtype']:7s} {row['nnz']:9d} "
              f"{row['iteration_us']:7.1f}u {row['product_us']:7.1f}u {row['floor_us']:7.1f}u "
              f"{row.get('chained_floor_us', float('nan')):7.1f}u "
              f"{row['cupyx_cusparse_us']:8.1f}u {row['cupyx_operator_us']:8.1f}u  {speedups}")


def print_gmres_floors(results):
    """Each Laplacian's gmres solve against its floor, and cupyx's against the same floor."""
    print(f"{'matrix':22s} {'dtype':7s} {'columns':>7s} {'floor':>9s} {'ours':>9s} "
          f"{'cupyx':>9s}  ours/floor  cupyx/floor  cupyx/ours")
    for row in results.get("laplacians", []):
        for solve in row["solves"]:
            if solve["method"] != "gmres" or "floor_seconds" not in solve:
                continue
            floor, ours = solve["floor_seconds"], solve["seconds"]
            cupyx = solve.get("cupyx_seconds", float("nan"))
            print(f"{row['matrix']:22s} {row['dtype']:7s} {solve['iterations']:7d} "
                  f"{floor * 1e3:7.2f}ms {ours * 1e3:7.2f}ms {cupyx * 1e3:7.2f}ms  "
                  f"{ours / floor:10.2f}  {cupyx / floor:11.2f}  {cupyx / ours:10.2f}")


if __name__ == "__main__":
    sys.exit(main())
