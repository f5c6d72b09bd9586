"""The public entry points: :func:`prepare` and :func:`select`."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .. import _registry as registry
from .._decide.ordering import OrderChoice, check_order
from .._decide.selection import Decision, decide
from .._support.devices import cuda_simulator
from .._support.threads import check_threads
from ..formats.base import FormatTooLargeError, longest_row
from .background import (
    START_KERNEL, BackgroundSwitch, on_own_stream, snapshot_for_cpu, snapshot_for_gpu,
    start_refused,
)
from .device_input import Input, canonical_input
from .operator import SpMVOperator
from .tuning import tune as tuned


def select(A, *, kernel: str | None = None, device: str | None = None, model=None) -> Decision:
    """The decision :func:`prepare` would start from, without converting A.

    ``device="cuda"`` decides for a GPU even where none is present (nothing runs here).
    Guardrails act only on conversion: :func:`prepare` falls back down
    ``decision.candidates`` when a format refuses the matrix, and records it.

    Parameters
    ----------
    A : sparse matrix or array
        As :func:`prepare` takes it (host or device).
    kernel : str, optional
        A kernel to decide for instead of the automatic choice.
    device : {"cuda", "cpu"}, optional
        The device to decide for; None as :func:`prepare` chooses.
    model : str, path or TreeModel, optional
        The model that decides, as :func:`prepare` takes it.

    Returns
    -------
    Decision
        The kernel, its parameters, the ranked candidates and why (``explain()``).

    Raises
    ------
    TypeError, ValueError
        For a matrix or option that :func:`prepare` refuses, with its message.

    Examples
    --------
    >>> import scipy.sparse as sp, autospmv
    >>> decision = autospmv.select(sp.eye(1000, format="csr"), device="cpu")
    >>> decision.kernel in autospmv.KERNELS
    True
    """
    given = canonical_input(A, device, runs=False)
    return decide(given.csr, kernel, given.device, model)


def prepare(A, *, kernel: str | None = None, device: str | None = None, model=None,
            params: dict | None = None, tune: str | None = None,
            threads: int | None = None, products: int | None = None,
            background: bool = False, order: str = "auto", solver: bool = False) -> SpMVOperator:
    """Canonicalise A, choose a kernel (or use ``kernel=``), convert once, return the operator.

    Parameters
    ----------
    A : sparse matrix, array-like or GPU sparse matrix
        A SciPy sparse matrix or array, a 2-D array-like, or a matrix already on the GPU
        (``cupyx.scipy.sparse`` CSR/COO/CSC, torch sparse COO/CSR on CUDA), which is
        canonicalised and converted on the device without copying its nonzeros to the host
        (the user guide's "NVIDIA GPUs" says what is computed where and how it is decided).
        The operator is a snapshot: changing A afterwards does not change it.
    kernel : str, optional
        Use this kernel (one of :data:`autospmv.KERNELS`) instead of deciding.
    device : {"cuda", "cpu"}, optional
        Default: CUDA when a usable GPU is present, else the CPU.
    model : str, PathLike or TreeModel, optional
        A model file, or a loaded model, to decide with. Default: the ``AUTOSPMV_MODEL``
        environment variable, then a model retrained on this machine, then the shipped model
        of this device or the nearest one of the same kind, else the built-in rule (the user
        guide's "How the kernel is chosen").
    params : dict, optional
        With ``kernel=``: parameters that replace the tuned ones (``{"width": 8}`` for hyb).
    tune : {None, "measure"}, optional
        ``"measure"`` (in the manner of FFTW_MEASURE) builds up to three of the decision's
        best-ranked kernels that A's formats accept (without a model: the rule's kernel, then
        the registry's in order; kernels the tree ranks far behind its first choice are
        skipped), times each back-to-back on A with autospmv's timer and keeps the fastest.
        ``op.decision.tuning`` records every candidate's times, the kept kernel and what tuning
        cost. It pays when the operator is applied hundreds of times or more on a large matrix.
        On CUDA it needs a real GPU.
    threads : int, optional
        On the CPU, the most threads one product may use (1: the serial kernel, no thread
        pool). Default: ``AUTOSPMV_NUM_THREADS``, else one thread per 60,000 nonzeros up to the
        usable cores (the performance notes' "CPU threads" says why). Ignored on CUDA.
    products : int, optional
        A workload hint: how many products the caller expects (a solver's iterations). With a
        model's decision and ``tune=None``, prepare measures by itself (as ``tune="measure"``)
        when the expected saving, ``products`` × the chosen kernel's estimated time × 1 %,
        exceeds the estimated cost of measuring. ``op.explain()`` shows the figures.
    background : bool, default False
        For a host matrix with automatic selection: the operator runs at once on a kernel
        that converts nothing (csr_vector on the GPU, csr_scalar on the CPU) while a thread
        decides and converts; the first product after the thread ends switches to the chosen
        kernel, and ``op.wait()`` waits for it. ``op.kernel`` and ``op.explain()`` tell the
        kernel that runs now.
    order : {"auto", "keep", "rcm", "bfs"}, default "auto"
        The order of rows and columns the operator stores A in: ``"keep"``, A's own; ``"rcm"``,
        reverse Cuthill–McKee (SciPy's, on the structure of A + Aᵀ); ``"bfs"``, reverse
        Cuthill–McKee over the graph of A's rows (a breadth-first walk from a vertex of least
        degree, neighbours by degree, computed by autospmv without forming A + Aᵀ: as good an
        order for the product at a third of SciPy's cost in geometric mean; the order
        ``"auto"`` computes). A bandwidth-reducing order gathers x from nearby addresses when A is
        numbered at random (graph or mesh data as they arrive): products of such matrices run
        about twice as fast on a GPU and two to three times on a CPU in the order they are stored in
        (geometric means on the shared matrices; inside the solvers), less in A's own order,
        which gathers x and y around each product. The order is applied
        inside the operator: every product takes and returns vectors in A's own order. Only a
        square matrix is renumbered. ``"auto"`` keeps the order without a ``products`` hint
        (nothing is computed), and with one reorders where a cost rule over x's locality says
        that the gain of ``products`` products exceeds the cost of computing the order (the
        user guide's "Order") and the product then times faster than in A's own order (both
        operators are built and timed back to back; the faster is kept); ``op.order`` and
        ``op.explain()`` say what was chosen and why.
        The kernel is chosen for A in the order chosen. A matrix on the GPU is renumbered
        there, from an order computed on the host from its column indices (copied once).

    solver : bool, default False
        The ``products`` run in the operator's stored order: inside autospmv's solvers
        (:mod:`autospmv.solvers`), which permute b and x once per solve, or in an iteration of
        your own on ``op.in_own_order()``. ``order="auto"`` then weighs and times a renumbered
        product without the gathers of x and y that a product in A's own order pays, so it
        renumbers where the iteration gains, even where a single product in A's own order
        would not. The solvers prepare A this way when given a matrix.

    Returns
    -------
    SpMVOperator
        The operator, a ``scipy.sparse.linalg.LinearOperator``; ``op.explain()`` says why its
        kernel was chosen. When the chosen kernel's format refuses A (padding beyond the fill
        limit) or does not fit in memory, the tree's next choice is used, and ``op.decision``
        records it.

    Raises
    ------
    ValueError
        A malformed sparse matrix (indices out of range, ``indptr`` not monotone or not ending
        at nnz, inconsistent lengths), before anything reads it; an unknown ``kernel``,
        ``tune`` or ``order``, ``order="rcm"`` or ``"bfs"`` for a matrix that is not square, or
        options that do not go together.
    TypeError
        Complex values, or ``background`` or ``solver`` that is not a bool.
    FormatTooLargeError
        A forced ``kernel=`` whose format refuses A.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv
    >>> A = sp.random(1000, 1000, density=0.01, format="csr", random_state=0)
    >>> op = autospmv.prepare(A, device="cpu")
    >>> bool(np.allclose(op @ np.ones(1000), A @ np.ones(1000)))
    True
    >>> autospmv.prepare(A, kernel="hyb", device="cpu").kernel
    'hyb'
    >>> op = autospmv.prepare(A, device="cpu", order="rcm")
    >>> op.order, bool(np.allclose(op @ np.ones(1000), A @ np.ones(1000)))
    ('rcm', True)
    """
    threads = check_threads(threads)
    if tune not in (None, "measure"):
        raise ValueError(f"unknown tune={tune!r}; valid: None (predict) or 'measure'")
    if tune and kernel is not None:
        raise ValueError("tune='measure' chooses among the tree's candidates; it cannot be "
                         "combined with kernel=")
    products = _check_products(products)
    if not isinstance(background, bool):
        raise TypeError(f"background must be True or False, not {background!r}")
    if not isinstance(solver, bool):
        raise TypeError(f"solver must be True or False, not {solver!r}")
    order = check_order(order)
    if background and (kernel is not None or tune is not None or products is not None
                       or order not in ("auto", "keep")):
        raise ValueError("background=True decides automatically; it cannot be combined with "
                         f"kernel=, tune=, products= or order={order!r}")
    started = time.perf_counter()
    given = canonical_input(A, device, order=order, products=products, gathers=not solver,
                            model=model, host_only=("tune='measure'" if tune else "background=True"
                                       if background else None))
    refused = None
    if background:
        started_op, refused = _start_in_background(given, model, threads, started)
        if started_op is not None:
            return started_op
    decision = decide(given.csr, kernel, given.device, model, params, given.uploaded)
    if refused:
        decision.notes.append(refused)
    _record_order(decision, given.order)
    if tune == "measure":
        return _ordered(tuned(given, decision, threads), given.order)
    built = time.perf_counter()
    op = _build(given.csr, decision, given.device, threads, forced=kernel is not None,
                source=given.source, borrowed=given.borrowed, uploaded=given.uploaded)
    conversion_s = time.perf_counter() - built
    op = _confirmed(_ordered(op, given.order), given, kernel, model, params, threads,
                    gathers=not solver)
    if products is None or kernel is not None:
        return op
    # the kernels are timed without the order's gathers, which every candidate would add
    return _ordered(tuned(given, op.decision, threads, built=op.in_own_order(),
                          products=products, conversion_s=conversion_s), given.order)


def _record_order(decision: Decision, choice: OrderChoice) -> None:
    """The order's choice in the decision that ``explain()`` prints."""
    decision.order = choice.order
    decision.order_reason = choice.reason
    decision.order_features = dict(choice.features)
    decision.order_seconds = choice.seconds


def _confirmed(op: SpMVOperator, given: Input, kernel, model, params, threads,
               gathers: bool = True) -> SpMVOperator:
    """``op``, or the operator of A in its own order where the cost rule chose another order
    and the product in A's own order times faster (the tuning stage times both; ``gathers``
    as :func:`.tuning.faster_order`'s). Timing needs a host matrix and a real device:
    elsewhere the rule's choice stands."""
    choice = given.order
    if (choice.kept_matrix is None or given.source is not None
            or (given.device == "cuda" and cuda_simulator())):
        return op
    kept = canonical_input(choice.kept_matrix, given.device)
    decision = decide(kept.csr, kernel, kept.device, model, params, kept.uploaded)
    _record_order(decision, kept.order)
    decision.order_reason = ("order kept: the product in A's own order timed faster than in "
                             f"the order the cost rule chose ({choice.reason})")
    try:
        kept_op = _build(kept.csr, decision, kept.device, threads, forced=kernel is not None,
                         borrowed=False, uploaded=kept.uploaded)
    except (FormatTooLargeError, MemoryError):
        return op
    faster = tuned(given, decision, threads, built=op, against=kept_op, gathers=gathers)
    if faster is kept_op:  # what follows (the workload hint's tuning) works on A as it is
        given.csr, given.uploaded, given.borrowed, given.order = (
            kept.csr, kept.uploaded, False, kept.order)
    return faster


def _ordered(op: SpMVOperator, choice: OrderChoice) -> SpMVOperator:
    """``op``, built on the matrix in ``choice``'s order, taking and returning vectors in A's
    own order."""
    if not choice.kept and op.permutation is None:
        op._apply_order(choice.perm, choice.inverse, op.decision)
    return op


def _build(csr, decision: Decision, device: str, threads, *, forced: bool, **options
           ) -> SpMVOperator:
    """The operator of ``decision``; when its format refuses A (padding beyond the fill limit)
    or does not fit in memory, the tree's next choice, noted (a forced kernel raises).
    ``options``: as :meth:`SpMVOperator._build`'s."""
    while True:
        try:
            return SpMVOperator._canonical(csr, decision, device, threads, **options)
        except (FormatTooLargeError, MemoryError) as error:
            if forced or not decision.candidates:
                raise
            refused, fallback = decision.kernel, decision.candidates[0]
            decision = dataclasses.replace(
                decision, kernel=fallback, params=registry.choose_params(fallback, csr, device),
                candidates=decision.candidates[1:],
                notes=decision.notes + [f"guardrail: {refused} could not be built ({error}); "
                                        f"fell back to {fallback}, the tree's next choice"])


def _start_in_background(given: Input, model, threads, started: float
                         ) -> tuple[SpMVOperator | None, str | None]:
    """``prepare(A, background=True)`` of a canonical host matrix: the operator on the start
    kernel with its decision running on a thread (:mod:`autospmv._prepare.background`); or None
    where the decision is made before returning (where :func:`decide` says deciding later does
    not pay, or a row too long for the start kernel), with the note that says why for the
    latter."""
    csr, device, uploaded = given.csr, given.device, given.uploaded
    start = decide(csr, None, device, model, uploaded=uploaded, start=START_KERNEL[device])
    if start is None:
        return None, None
    longest = uploaded.longest_row() if device == "cuda" else longest_row(csr.indptr)
    refused = start_refused(longest)
    if refused:
        return None, refused
    op = SpMVOperator._canonical(csr, start, device, threads, borrowed=given.borrowed,
                                 uploaded=uploaded)
    if device == "cuda":
        snapshot, structure = snapshot_for_gpu(uploaded)
        options = {"uploaded": snapshot}
    else:
        snapshot = structure = snapshot_for_cpu(op)
        options = {}

    def build():
        decision = decide(snapshot, None, device, model)
        if (decision.kernel, decision.params) == (op.kernel, op.params):
            return None
        return _build(structure, decision, device, threads, forced=False, **options)

    if device == "cuda":
        build = on_own_stream(build)
    op._switch = BackgroundSwitch(build, started)
    return op, None


def _check_products(products):
    if products is None:
        return None
    if isinstance(products, bool) or not isinstance(products, (int, np.integer)):
        raise TypeError(f"products must be a whole number of products, not {products!r}")
    if products < 0:
        raise ValueError(f"products must be 0 or more, not {products}")
    return int(products)
