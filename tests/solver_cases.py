"""Small problems for the solvers' tests, each with the method that fits it, shared by the CPU,
simulator and GPU tests."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def laplacian(k: int):
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    return sp.kronsum(T, T, format="csr")


def convection(k: int, strength: float = 0.5):
    """A nonsymmetric convection–diffusion-like matrix: the Laplacian plus a skew part."""
    A = laplacian(k)
    return (A + strength * (sp.triu(A, 1) - sp.tril(A, -1))).tocsr()


def indefinite(k: int):
    """A symmetric indefinite matrix: the Laplacian shifted below its smallest eigenvalue."""
    return (laplacian(k) - 0.5 * sp.identity(k * k)).tocsr()


def problems(k: int):
    """``(method, matrix name, matrix)`` for every method, on matrices it solves."""
    return [("cg", "laplacian", laplacian(k)), ("bicgstab", "convection", convection(k)),
            ("gmres", "convection", convection(k)), ("minres", "laplacian", laplacian(k)),
            ("minres", "indefinite", indefinite(k))]


def right_hand_side(n: int, seed: int = 0):
    return np.random.default_rng(seed).standard_normal(n)


def scipy_solve(method: str, A, b, **kwargs):
    """SciPy's solver: ``(x, info, callbacks)``; gmres counts its restart cycles
    (``callback_type='x'``), as autospmv's gmres calls its callback."""
    import scipy.sparse.linalg as spla

    calls = []
    extra = {"callback_type": "x"} if method == "gmres" else {}
    x, info = getattr(spla, method)(A, b, callback=lambda *a: calls.append(1), **extra,
                                    **kwargs)
    return x, info, len(calls)


def scipy_iterations(method: str, A, b, **kwargs) -> int:
    """SciPy's iteration count (gmres: inner iterations, through ``callback_type='pr_norm'``)."""
    import scipy.sparse.linalg as spla

    calls = []
    extra = {"callback_type": "pr_norm"} if method == "gmres" else {}
    getattr(spla, method)(A, b, callback=lambda *a: calls.append(1), **extra, **kwargs)
    return len(calls)
