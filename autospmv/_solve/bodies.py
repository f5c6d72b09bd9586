"""Element bodies that several methods share (see :mod:`.steps` for what a body is)."""

from __future__ import annotations

from .dual import dual


@dual
def dot(W, ld, i, s, D, u, v, c, d, e, g):
    """The terms of ``u · v`` (rows ``u`` and ``v``)."""
    return float(W[u * ld + i]) * W[v * ld + i], 0.0


@dual
def dot_and_norm(W, ld, i, s, D, u, v, c, d, e, g):
    """The terms of ``u · v`` and ``u · u``."""
    a = float(W[u * ld + i])
    return a * W[v * ld + i], a * a


@dual
def preconditioned(W, ld, i, D, value):
    """``value`` times the inverse diagonal of a Jacobi preconditioner at ``i``; ``value``
    itself without one (``D`` of one element)."""
    if D.shape[0] != 1:
        return value * D[i]
    return value
