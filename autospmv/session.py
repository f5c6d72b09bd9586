"""The public entry points: :func:`prepare` and :func:`select`."""

from __future__ import annotations

import dataclasses
import functools
import time

import scipy.sparse as sp

from . import registry
from .cache import compile_timer
from .device import canonical_device_csr, is_device_matrix
from .features import features
from .formats.base import FormatTooLargeError
from .operator import SpMVOperator
from .selector import Decision, find_model, forced_decision, model_decision, rule_decision
from .validation import canonicalize, check_device


@functools.cache
def cuda_available() -> bool:
    """True when numba-cuda is installed and sees a usable GPU (or runs its simulator)."""
    try:
        from numba import cuda

        from .kernels import cuda as _  # noqa: F401  (applies the NumPy compatibility step)
    except ImportError:
        return False
    return bool(cuda.config.ENABLE_CUDASIM) or cuda.is_available()


def resolve_device(device) -> str:
    """A device name, or for None the one used automatically (CUDA when a GPU is usable)."""
    device = check_device(device)
    if device is None:
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise RuntimeError(
            "device='cuda' was requested but no usable CUDA GPU was found "
            "(install the 'cuda' extra and check the driver), or use device='cpu'"
        )
    return device


def target_device(device) -> str:
    """The device to decide for: ``device`` as given (a GPU need not be present), or for None
    the one :func:`prepare` would use."""
    return check_device(device) or resolve_device(None)


def select(A, *, kernel: str | None = None, device: str | None = None, model=None) -> Decision:
    """The Decision that :func:`prepare` would start from, without converting A.

    ``device="cuda"`` decides for a GPU even where none is present (nothing runs here).
    Guardrails act only on conversion: :func:`prepare` falls back down
    ``decision.candidates`` when a format refuses the matrix, and records it.
    """
    if is_device_matrix(A):
        return _decide_device(canonical_device_csr(A).structure(), kernel,
                              _device_for_device_input(device, resolve=False), params=None)
    return _decide(canonicalize(A), kernel, target_device(device), model)


def _device_for_device_input(device, resolve: bool = True) -> str:
    if check_device(device) == "cpu":
        raise ValueError("this matrix lives on the GPU; prepare it with device='cuda' (or None), "
                         "or pass a SciPy matrix for device='cpu'")
    return resolve_device("cuda") if resolve else "cuda"


def _decide_device(structure, kernel, device, params) -> Decision:
    """The decision for a matrix on the GPU (see :mod:`autospmv.device`): ``kernel=`` as on the
    host, else the built-in rule, which reads the row lengths only."""
    if kernel is not None:
        registry.get(kernel)
        return forced_decision(structure, kernel, device, params)
    if params:
        raise ValueError("params= needs kernel= (parameters belong to one kernel)")
    decision = rule_decision(structure, device)
    decision.notes[:] = ["device input: the built-in rule decided from the row lengths (the "
                         "model's features read the column indices, which stay on the GPU); "
                         "pass kernel= to choose"]
    return decision


def _decide(csr, kernel, device, model, params=None) -> Decision:
    if kernel is not None:
        registry.get(kernel)  # validates the name
        return forced_decision(csr, kernel, device, params)
    if params:
        raise ValueError("params= needs kernel= (parameters belong to one kernel)")
    choice = find_model(device, model)
    if choice is None:
        return rule_decision(csr, device)
    with compile_timer() as compiled:
        started = time.perf_counter()
        values = features(csr, device=device)
        decision = model_decision(csr, choice, values, device)
        elapsed = time.perf_counter() - started
    decision.notes.append(
        f"features and prediction took {(elapsed - compiled.total) * 1e3:.2f} ms")
    if compiled.total:
        decision.notes.append(compiled.note("the feature scan"))
    return decision


def prepare(A, *, kernel: str | None = None, device: str | None = None, model=None,
            params: dict | None = None) -> SpMVOperator:
    """Canonicalise A, choose a kernel (or use ``kernel=``), convert once, return the operator.

    ``A``: a SciPy sparse matrix or array, a 2-D array-like, or a matrix already on the GPU
    (``cupyx.scipy.sparse`` CSR/COO/CSC, torch sparse COO/CSR on CUDA), which is canonicalised
    and converted on the device without copying its nonzeros to the host (see
    :mod:`autospmv.device` for what is computed where and how such a matrix is decided).

    ``device``: ``"cuda"``, ``"cpu"`` or None (CUDA when a usable GPU is present).
    ``model``: a model file path or a loaded :class:`~autospmv.model.TreeModel` to decide with
    (default: the lookup of :func:`autospmv.selector.find_model`).
    ``params``: with ``kernel=``, overrides the tuned parameters (e.g. ``{"width": 8}`` for hyb).

    When the chosen kernel's format refuses A (padding beyond the fill limit) or does not fit in
    memory, the tree's next choice is tried, and ``op.decision`` records it; a forced kernel
    raises instead.
    """
    if is_device_matrix(A):  # CuPy or torch sparse on the GPU: never copied to the host
        device = _device_for_device_input(device)
        csr = canonical_device_csr(A)
        decision = _decide_device(csr.structure(), kernel, device, params)
    else:
        device = resolve_device(device)
        csr = canonicalize(A)
        decision = _decide(csr, kernel, device, model, params)
    while True:
        try:
            # The operator keeps the caller's sparse matrix (for its transpose), not a copy.
            keep = sp.issparse(A) or is_device_matrix(A)
            return SpMVOperator(csr, decision, device, source=A if keep else None)
        except (FormatTooLargeError, MemoryError) as error:
            if kernel is not None or not decision.candidates:
                raise
            refused, fallback = decision.kernel, decision.candidates[0]
            decision = dataclasses.replace(
                decision, kernel=fallback, params=registry.choose_params(fallback, csr, device),
                candidates=decision.candidates[1:],
                notes=decision.notes + [f"guardrail: {refused} could not be built ({error}); "
                                        f"fell back to {fallback}, the tree's next choice"])
