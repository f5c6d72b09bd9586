"""The public entry points: :func:`prepare` and :func:`select`."""

from __future__ import annotations

import functools

from . import registry
from .operator import SpMVOperator
from .selector import Decision, forced_decision, rule_decision
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


def _resolve_device(device) -> str:
    device = check_device(device)
    if device is None:
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise RuntimeError(
            "device='cuda' was requested but no usable CUDA GPU was found "
            "(install the 'cuda' extra and check the driver), or use device='cpu'"
        )
    return device


def select(A, *, kernel: str | None = None, model=None) -> Decision:
    """The Decision that :func:`prepare` would act on, without converting A."""
    return _decide(canonicalize(A), kernel, model)


def _decide(csr, kernel, model, params=None) -> Decision:
    if kernel is not None:
        registry.get(kernel)  # validates the name
        return forced_decision(csr, kernel, params)
    if params:
        raise ValueError("params= needs kernel= (parameters belong to one kernel)")
    if model is not None:
        raise NotImplementedError("trained models are not supported yet; omit model=")
    return rule_decision(csr)


def prepare(A, *, kernel: str | None = None, device: str | None = None, model=None,
            params: dict | None = None) -> SpMVOperator:
    """Canonicalise A, choose a kernel (or use ``kernel=``), convert once, return the operator.

    ``device``: ``"cuda"``, ``"cpu"`` or None (CUDA when a usable GPU is present).
    ``params``: with ``kernel=``, overrides the tuned parameters (e.g. ``{"width": 8}`` for hyb).
    """
    if kernel is not None:
        registry.get(kernel)
    device = _resolve_device(device)
    csr = canonicalize(A)
    return SpMVOperator(csr, _decide(csr, kernel, model, params), device)
