"""The public entry points: :func:`prepare` and :func:`select`."""

from __future__ import annotations

import dataclasses
import functools
import time

from . import registry
from .cpu_threads import check_threads
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
    return _decide(canonicalize(A), kernel, target_device(device), model)


def _decide(csr, kernel, device, model, params=None) -> Decision:
    if kernel is not None:
        registry.get(kernel)  # validates the name
        return forced_decision(csr, kernel, device, params)
    if params:
        raise ValueError("params= needs kernel= (parameters belong to one kernel)")
    choice = find_model(device, model)
    if choice is None:
        return rule_decision(csr, device)
    started = time.perf_counter()
    values = features(csr, device=device)
    decision = model_decision(csr, choice, values, device)
    elapsed_ms = (time.perf_counter() - started) * 1e3
    decision.notes.append(f"features and prediction took {elapsed_ms:.2f} ms")
    return decision


def prepare(A, *, kernel: str | None = None, device: str | None = None, model=None,
            params: dict | None = None, threads: int | None = None) -> SpMVOperator:
    """Canonicalise A, choose a kernel (or use ``kernel=``), convert once, return the operator.

    ``device``: ``"cuda"``, ``"cpu"`` or None (CUDA when a usable GPU is present).
    ``model``: a model file path or a loaded :class:`~autospmv.model.TreeModel` to decide with
    (default: the lookup of :func:`autospmv.selector.find_model`).
    ``params``: with ``kernel=``, overrides the tuned parameters (e.g. ``{"width": 8}`` for hyb).
    ``threads``: on the CPU, the most threads one product may use (1: the serial kernel, no thread
    pool). Default: the environment variable ``AUTOSPMV_NUM_THREADS``, else one thread per 60K
    nonzeros up to the usable cores; see :mod:`autospmv.cpu_threads` for why. Ignored on CUDA.

    When the chosen kernel's format refuses A (padding beyond the fill limit) or does not fit in
    memory, the tree's next choice is tried, and ``op.decision`` records it; a forced kernel
    raises instead.
    """
    threads = check_threads(threads)
    device = resolve_device(device)
    csr = canonicalize(A)
    decision = _decide(csr, kernel, device, model, params)
    while True:
        try:
            return SpMVOperator(csr, decision, device, threads)
        except (FormatTooLargeError, MemoryError) as error:
            if kernel is not None or not decision.candidates:
                raise
            refused, fallback = decision.kernel, decision.candidates[0]
            decision = dataclasses.replace(
                decision, kernel=fallback, params=registry.choose_params(fallback, csr, device),
                candidates=decision.candidates[1:],
                notes=decision.notes + [f"guardrail: {refused} could not be built ({error}); "
                                        f"fell back to {fallback}, the tree's next choice"])
