"""Element bodies that several methods share (see :mod:`.steps` for what a body is)."""

from __future__ import annotations

from .dual import dual


@dual
def dot(W, ld, i, s, D, u, v, c, d, e, g):
    """The terms of ``u · v`` (rows ``u`` and ``v``)."""
    return float(W[u + i]) * W[v + i], 0.0


@dual
def dot_and_norm(W, ld, i, s, D, u, v, c, d, e, g):
    """The terms of ``u · v`` and ``u · u``."""
    a = float(W[u + i])
    return a * W[v + i], a * a


@dual
def residual(W, ld, i, s, D, r, b, q, z, e, g):
    """r = b − q (q = A x0); M r into row ``z`` for a Jacobi M when ``z`` is not ``r``; the
    terms of r·r and r·M r."""
    return stored(W, ld, i, D, r, z, W[b + i] - W[q + i])


@dual
def subtract(W, ld, i, s, D, y, x, z, slot, e, g):
    """y −= s[slot] x; M y into row ``z``, another than ``y``, for a Jacobi M; the terms of y·y
    and y·M y."""
    value = W[y + i] - s[slot] * W[x + i]
    preconditioned_value = preconditioned(W, ld, i, D, value)
    W[y + i] = value
    W[z + i] = preconditioned_value
    return float(value) * value, float(value) * preconditioned_value


@dual
def subtract_in_place(W, ld, i, s, D, y, x, c, slot, e, g):
    """y −= s[slot] x without a Jacobi M (M y is y); the terms of y·y twice, as y·y and y·M y.

    A pass without M has a body of its own that names y once: one that reads and writes y
    through two names (offsets equal only at run time) keeps LLVM from vectorising its CPU
    loop, whose checks for overlapping vectors then fail and send it to the element-by-element
    loop."""
    value = W[y + i] - s[slot] * W[x + i]
    W[y + i] = value
    return float(value) * value, float(value) * value


@dual
def stored(W, ld, i, D, y, z, value):
    """``value`` into row ``y`` and M ``value`` into row ``z`` for a Jacobi M when ``z`` is not
    ``y``; the terms of y·y and y·M y."""
    preconditioned_value = preconditioned(W, ld, i, D, value)
    W[y + i] = value
    if z != y:
        W[z + i] = preconditioned_value
    return float(value) * value, float(value) * preconditioned_value


@dual
def preconditioned(W, ld, i, D, value):
    """``value`` times the inverse diagonal of a Jacobi preconditioner at ``i``; ``value``
    itself without one (``D`` of one element)."""
    if D.shape[0] != 1:
        return value * D[i]
    return value


@preconditioned.variant("cpu")
def _preconditioned_without_branch(W, ld, i, D, value):
    """:func:`preconditioned` on the CPU: ``value`` times D's element i, or its only element
    (1) without a Jacobi M. The load is made either way (a load under a test keeps LLVM from
    vectorising the step's loop); the GPU's form spares the load and the product."""
    return value * D[i * (D.shape[0] != 1)]


@dual
def combination(W, ld, i, s, v0, coefficients, count):
    """Element i of Σ_k a_k v_k over k < ``count`` (a from slot ``coefficients``; v_k at
    offset ``v0 + k * ld``), four basis vectors at a time, so that four of their loads are in
    flight at once. The offsets advance by additions, which keep unsigned offsets unsigned on
    the CPU (:mod:`.steps`)."""
    total0 = 0.0
    total1 = 0.0
    total2 = 0.0
    total3 = 0.0
    row = v0
    k = 0
    while k + 3 < count:
        row1 = row + ld
        row2 = row1 + ld
        row3 = row2 + ld
        total0 += s[coefficients + k] * W[row + i]
        total1 += s[coefficients + k + 1] * W[row1 + i]
        total2 += s[coefficients + k + 2] * W[row2 + i]
        total3 += s[coefficients + k + 3] * W[row3 + i]
        row = row3 + ld
        k += 4
    while k < count:
        total0 += s[coefficients + k] * W[row + i]
        row = row + ld
        k += 1
    return (total0 + total1) + (total2 + total3)
