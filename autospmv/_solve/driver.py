"""One solve: the arguments checked as SciPy checks them, the operator and workspace made, the
method's iteration run to the end on the operator's device, x returned in b's kind.

On the GPU, without a callback or a preconditioner that must be called from the host, the
iteration runs as a CUDA graph: :data:`REPLAY_ITERATIONS` iterations (the method's product and
steps, and a preconditioner's product) are captured once and replayed until the flags, read once
per replay, say the method stopped. Iterations queued after the one that stopped do nothing but
their products (every step skips once the method has stopped), so x and the iteration count
are those of the stopping iteration. With a callback, or a preconditioner given as any other
linear operator, each iteration runs eagerly and the host reads the flags after each.

An operator that stores A in another order (``op.permutation``, :func:`autospmv.prepare`'s
``order=``) is iterated on in that order throughout (:meth:`SpMVOperator.in_own_order`): b and
x0 are permuted once per solve, as is a Jacobi preconditioner's diagonal (read from the
permuted matrix), and x is permuted back once (and for each callback); no product of the
iteration pays for the gathers. A preconditioner given as an operator or any other linear
operator is in the caller's order, so such a solve iterates in the caller's order, through the
operator's own gathers.
"""

from __future__ import annotations

import dataclasses
import numbers
import threading
import weakref

import numpy as np

from .._prepare.prepare import prepare
from .._prepare.operator import SpMVOperator
from .bicgstab import BiCGSTAB
from .cg import CG
from .gmres import GMRES
from .machines import CpuMachine, CudaMachine
from .minres import MINRES
from .scalars import ERROR, ERRORS, INFO, ITERATIONS, MAXITER, TOL
from .steps import host_norm

REPLAY_ITERATIONS = 16
"""Iterations captured in one CUDA graph (rounded up to a multiple of the method's period)."""

HINT_ITERATIONS = 1000
"""The iterations a solve is expected to take when it prepares A itself: with the method's
products per iteration, the ``products=`` workload hint it prepares A with (at most maxiter;
:func:`hint_products`)."""

METHODS = {"cg": CG, "bicgstab": BiCGSTAB, "gmres": GMRES, "minres": MINRES}
"""Each method's class by its SciPy name."""


@dataclasses.dataclass
class Problem:
    """One solve's right-hand side, start and limits, checked (:func:`solve`)."""

    b: object
    """b in the solve's dtype, as an array of the machine's module (NumPy or CuPy)."""
    x0: object
    """x0 likewise, or None."""
    rtol: float
    atol: float
    bnrm2: float
    maxiter: int
    callback: object
    kind: str
    """The kind of array b came as (:func:`_kind`), which x goes back as."""
    given_b: object
    inverse: object = None
    """With an operator that runs in another order: the array (of the machine's module) that
    takes the solve's vectors back to the caller's order (``x[inverse]``); else None."""


def hint_products(method, maxiter: int) -> int:
    """The ``products=`` workload hint a solve of ``method`` (a class of :data:`METHODS`) with
    ``maxiter`` iterations prepares a matrix it is given with."""
    return min(maxiter, HINT_ITERATIONS) * method.products_per_iteration


def solve(method, A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None,
          callback=None, options=None):
    """Run ``method`` (a class of :mod:`.cg`, :mod:`.bicgstab`, :mod:`.gmres`, :mod:`.minres`);
    ``(x, info)`` as SciPy's solver of that name returns them."""
    rtol, atol = _tolerances(method.name, rtol, atol)
    kind = _kind(b)
    if kind == "numpy":
        b = np.asarray(b)
    n_b = _length(b, "b")
    maxiter = method.default_maxiter(n_b) if maxiter is None else _count(maxiter, "maxiter")
    op = _operator(A, kind, hint_products(method, maxiter))
    m, n = op.shape
    if m != n:
        raise ValueError(f"the solvers need a square matrix; A is {m}x{n}")
    if n_b != n:
        raise ValueError(f"b has length {n_b}, but A is {n}x{n}")
    if x0 is not None and _length(x0, "x0") != n:
        raise ValueError(f"x0 has length {_length(x0, 'x0')}, but A is {n}x{n}")
    dtype = _dtype(op.dtype, b, x0)
    if op.device != "cuda" and kind != "numpy":
        raise ValueError(f"b is a GPU array ({kind}), but the operator runs on the CPU; "
                         "prepare A with device='cuda' or pass a NumPy b")
    xp = _array_module(op)
    b_work = xp.asarray(b).reshape(-1).astype(dtype, copy=False)
    x0_work = None if x0 is None else xp.asarray(x0).reshape(-1).astype(dtype, copy=False)
    bnrm2 = host_norm(b_work) if xp is np else float(xp.linalg.norm(b_work))
    if bnrm2 == 0 or maxiter == 0:  # SciPy returns before iterating
        x = b_work.copy() if bnrm2 == 0 else (
            xp.zeros_like(b_work) if x0_work is None else x0_work.copy())
        op.last_solve = {"method": method.name, "iterations": 0, "info": 0,
                         "device": op.device}
        return _returned(x, kind, b), 0
    solve_op, inverse = op, None
    if op.permutation is not None and (M is None or isinstance(M, str)):
        solve_op = op.in_own_order()  # b and x0 permuted once, x back once
        perm, inverse = op.order_arrays(xp)
        b_work = b_work[perm]
        x0_work = None if x0_work is None else x0_work[perm]
    problem = Problem(b_work, x0_work, rtol, atol, bnrm2, maxiter, callback, kind, b, inverse)
    options = method.configure(n, dict(options or {}))
    preconditioner = _preconditioner(M, solve_op, dtype)
    workspace = _workspace(solve_op, method, n, dtype, options, preconditioner)
    try:
        with workspace.machine:
            if workspace.reused:
                workspace.machine.reset(solve_op)
            x, flags = _run(method(workspace.machine, **options), workspace, problem)
    finally:
        workspace.release()
    if flags[ERROR]:
        raise ValueError(ERRORS[int(flags[ERROR])])
    info = int(flags[INFO])
    op.last_solve = {"method": method.name, "iterations": int(flags[ITERATIONS]),
                     "info": info, "device": op.device}
    return _returned(_callers_order(x, problem), kind, b), info


def _callers_order(x, problem: Problem):
    """x of the solve, in the caller's order (:attr:`Problem.inverse`)."""
    return x if problem.inverse is None else x[problem.inverse]


def _array_module(op):
    """CuPy for an operator on a GPU (NumPy under numba-cuda's simulator and on the CPU)."""
    if op.device == "cuda":
        from ..kernels.cuda.launch import SIMULATOR

        if not SIMULATOR:
            import cupy

            return cupy
    return np


def _run(solver, workspace, problem: Problem):
    """The solve on its machine: ``(x, flags)``."""
    machine = workspace.machine
    machine.upload(solver.b, problem.b)
    if problem.x0 is not None:
        machine.upload(solver.x, problem.x0)
    machine.set_flags({MAXITER: problem.maxiter})
    machine.set_scalars({TOL: max(problem.atol, problem.rtol * problem.bnrm2),
                         **solver.initial_scalars(bnrm2=problem.bnrm2, rtol=problem.rtol,
                                                  atol=problem.atol, maxiter=problem.maxiter)})
    solver.start(problem.x0 is not None)
    if (problem.callback is None and machine.captures and workspace.graph is not None
            and not solver.eager and solver.period == 1):
        # The graph of an earlier solve, whose iterations are every iteration's: replayed at
        # once (a start that already stopped makes its steps do nothing), with no eager
        # iteration and no read of the flags before it.
        flags = _replay_until_stopped(machine, workspace.graph)
        return machine.result(solver.x), flags
    flags = machine.flags()
    if not machine.stopped(flags):
        if problem.callback is not None or not machine.captures:
            flags = _run_eagerly(machine, solver, problem)
        else:
            flags = _run_captured(machine, solver, workspace)
    return machine.result(solver.x), flags


class _Workspace:
    """A machine kept with its operator for the next solve of the same kind, with the graph
    captured on it; ``lock`` is held by the solve using it (:func:`_workspace`)."""

    def __init__(self, key, machine):
        self.key = key
        self.machine = machine
        self.graph = None
        self.lock = threading.Lock()
        self.reused = False

    def release(self) -> None:
        self.machine.op = None  # the operator holds the workspace, not the other way round
        self.lock.release()


_WORKSPACES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
"""operator -> the :class:`_Workspace` of its last GPU solve (one per operator)."""


def _workspace(op, method, n, dtype, options, preconditioner) -> _Workspace:
    """The machine for this solve: on the GPU, the operator's last one when that was made for
    the same method, dtype, options and preconditioner and no other solve uses it (its arrays
    and captured graph are reused: nothing is allocated or captured again), else a new one,
    kept for the next solve."""
    kind = preconditioner[0] if preconditioner else None
    key = (method.name, np.dtype(dtype), tuple(sorted(options.items())), kind,
           id(preconditioner[1]) if kind == "product" else None)
    cached = op.device == "cuda" and kind != "call"
    if cached:
        workspace = _WORKSPACES.get(op)
        if (workspace is not None and workspace.key == key
                and workspace.lock.acquire(blocking=False)):
            workspace.reused = True
            workspace.machine.op = op
            return workspace
    machine_type = CudaMachine if op.device == "cuda" else CpuMachine
    machine = machine_type(op, n, dtype, method.rows, method.scalar_count(options),
                           preconditioner, workspace_rows=method.workspace_rows(options),
                           partial_sums=method.partial_sums(options))
    workspace = _Workspace(key, machine)
    workspace.lock.acquire()
    if cached and not machine.simulated:
        _WORKSPACES[op] = workspace
    return workspace


def _run_eagerly(machine, solver, problem: Problem):
    interval = 1 if problem.callback is not None else machine.flag_interval
    while True:
        done = solver.callbacks_due(machine.flags())
        for _ in range(interval):  # iterations after a stop do nothing but their products
            solver.iteration(eager=True)
        flags = machine.flags()
        if problem.callback is not None and solver.callbacks_due(flags) > done:
            problem.callback(_returned(_callers_order(machine.result(solver.x), problem),
                                       problem.kind, problem.given_b))
        if machine.stopped(flags):
            return flags


def _run_captured(machine, solver, workspace):
    for _ in range(max(solver.eager, 1)):  # also loads every kernel before the capture
        solver.iteration(eager=True)
        flags = machine.flags()
        if machine.stopped(flags):
            return flags
    if workspace.graph is None:
        per_replay = solver.iterations_per_replay(REPLAY_ITERATIONS)
        workspace.graph = machine.capture(lambda: [solver.iteration()
                                                   for _ in range(per_replay)])
    return _replay_until_stopped(machine, workspace.graph)


def _replay_until_stopped(machine, graph):
    """Replay ``graph`` until the flags, read after each replay, say the method stopped."""
    while True:
        machine.replay(graph)
        flags = machine.flags()
        if machine.stopped(flags):
            return flags


def _tolerances(name, rtol, atol):
    for value, what in ((rtol, "rtol"), (atol, "atol")):
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                or not value >= 0 or value == float("inf")):
            raise ValueError(f"{name}: {what} must be a real, non-negative, finite number; "
                             f"got {value!r}")
    return float(rtol), float(atol)


def _count(value, what):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be a whole number; got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be 0 or more; got {value}")
    return int(value)


def _kind(vector) -> str:
    """``"numpy"`` for host arrays (and anything NumPy takes), else the module of a CUDA array
    (``"cupy"``, ``"torch"``, or another kind with ``__cuda_array_interface__``)."""
    if isinstance(vector, np.ndarray):
        return "numpy"
    if getattr(vector, "__cuda_array_interface__", None) is not None:
        return type(vector).__module__.split(".")[0]
    return "numpy"


def _length(vector, what):
    shape = tuple(getattr(vector, "shape", np.shape(vector)))
    if len(shape) == 2 and 1 in shape:
        return shape[0] * shape[1]
    if len(shape) != 1:
        raise ValueError(f"{what} must be a vector; got shape {shape}")
    return shape[0]


def _dtype(matrix_dtype, b, x0):
    dtypes = [np.dtype(matrix_dtype), _vector_dtype(b)]
    if x0 is not None:
        dtypes.append(_vector_dtype(x0))
    dtype = np.result_type(*dtypes)
    if dtype.kind == "c":
        raise TypeError(f"the solvers are real; got a {dtype} problem (solve the real and "
                        "imaginary parts, or use SciPy's solvers)")
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"the solvers run in float32 or float64; b and x0 of dtype {dtype} "
                        "cannot be; convert them to float64")
    return dtype


def _vector_dtype(vector):
    dtype = getattr(vector, "dtype", None)
    if dtype is None:
        return np.asarray(vector).dtype
    try:
        return np.dtype(dtype)
    except TypeError:  # torch dtypes
        return np.dtype(str(dtype).replace("torch.", ""))


def _operator(A, kind, products):
    if isinstance(A, SpMVOperator):
        A.wait()
        if kind != "numpy" and A.device != "cuda":
            raise ValueError("b is a GPU array, but the operator runs on the CPU; prepare A "
                             "with device='cuda'")
        return A
    device = "cuda" if kind != "numpy" else None
    return prepare(A, device=device, products=products, solver=True)


def _preconditioner(M, op, dtype):
    if M is None:
        return None
    n = op.shape[0]
    if isinstance(M, str):
        if M != "jacobi":
            raise ValueError(f"M must be 'jacobi', an operator or None; got {M!r}")
        diagonal = np.asarray(op.diagonal(), dtype=np.float64)
        zero = np.flatnonzero(diagonal == 0)
        if zero.size:
            raise ValueError(f"M='jacobi' needs a nonzero diagonal; A[{zero[0]}, {zero[0]}] is 0")
        return ("jacobi", (1.0 / diagonal).astype(dtype))
    if getattr(M, "shape", (n, n)) != (n, n):
        raise ValueError(f"M must be {n}x{n} like A; got {M.shape}")
    if isinstance(M, SpMVOperator):
        if M.device != op.device:
            raise ValueError(f"M runs on {M.device}, A on {op.device}; prepare both on one "
                             "device")
        if np.result_type(M.dtype, dtype) == dtype:
            return ("product", M)
    import scipy.sparse.linalg as spla

    if not isinstance(M, SpMVOperator) and not hasattr(M, "matvec"):
        M = spla.aslinearoperator(M)
    if op.device == "cuda" and isinstance(M, spla.LinearOperator) and not isinstance(
            M, SpMVOperator):
        return ("call", _HostOperator(M))
    return ("call", M)


class _HostOperator:
    """A SciPy linear operator called from a GPU solve: NumPy in and out."""

    def __init__(self, M):
        self.M = M

    def matvec(self, vector):
        host = vector.get() if hasattr(vector, "get") else np.asarray(vector)
        return self.M.matvec(host)


def _returned(x, kind, b):
    """x as the kind of array b is: NumPy, CuPy, torch (on b's device), or a numba device
    array for other CUDA arrays."""
    if kind == "numpy":
        return x.get() if hasattr(x, "get") else np.asarray(x)
    if kind == "cupy":
        return x
    if kind == "torch":
        import torch

        return torch.as_tensor(x, device=b.device)
    from numba import cuda

    return cuda.as_cuda_array(x)


def solve_on_rank(method, rank, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter, columns,
                  options=None):
    """One rank's part of a solve of :mod:`autospmv.distributed`, run on every rank at once:
    ``(x chunk, info, iterations)``. ``b`` and ``x0`` are the rank's chunks; ``columns``, the
    matrix's order (for options that depend on it, such as GMRES's restart). The iteration is
    the one every other solve runs (:class:`~.machines.RankMachine`)."""
    from .machines import RankMachine

    rtol, atol = _tolerances(method.name, rtol, atol)
    bnrm2 = rank.norm(b)
    if bnrm2 == 0 or maxiter == 0:
        x = b.copy() if bnrm2 == 0 else (rank.xp.zeros_like(b) if x0 is None else x0.copy())
        return x, 0, 0
    options = method.configure(columns, dict(options or {}))
    machine = RankMachine(rank, b.shape[0], b.dtype, method.rows, method.scalar_count(options),
                          None, workspace_rows=method.workspace_rows(options),
                          partial_sums=method.partial_sums(options))
    problem = Problem(b, x0, rtol, atol, bnrm2, maxiter, None, "rank", b)
    with machine:
        x, flags = _run(method(machine, **options), _Workspace(None, machine), problem)
    if flags[ERROR]:
        raise ValueError(ERRORS[int(flags[ERROR])])
    return x, int(flags[INFO]), int(flags[ITERATIONS])
