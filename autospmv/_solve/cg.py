"""Conjugate gradients, step for step as ``scipy.sparse.linalg.cg``.

SciPy's loop, per iteration: stop if ‖r‖ < atol; z = M r; ρ = r·z; p = z + (ρ/ρ_prev) p
(p = z at first); q = A p; α = ρ / (p·q); x += α p; r -= α q. Here the same iteration is three
fused passes around the product (:mod:`.steps`):

1. ``direction``: p = z + β p, with z = M r formed on the fly for a Jacobi M;
2. the product q = A p;
3. ``dot(p, q)``, kept for the update;
4. ``update``: x += α p and r -= α q in one pass that also sums r·r and r·z for the next
   iteration's test and ρ; its finish counts the iteration, tests ‖r‖ against the tolerance
   (and the iteration limit) and sets β.

A preconditioner that is an operator splits pass 4: the update keeps r·r, the operator makes
z = M r, and ``dot(r, z)`` finishes the iteration. The test that ends SciPy's loop at the top of
iteration k+1 is made at the end of iteration k; the iteration count and x are SciPy's.

Passes 2 and 3 are one on a GPU where the product's kernel owns whole rows: it forms p·q as it
writes q (:meth:`.machines.Machine.product` with ``keep_dot``), and the update takes α as
ρ / (p·q) from there.
"""

from __future__ import annotations

import math

from .bodies import dot, preconditioned, residual
from .dual import dual
from .method import Method
from .scalars import FIRST_FREE_SCALAR, ITERATIONS, KEPT, MAXITER, TOL, keep, stop
from .steps import Step

RHO, BETA = FIRST_FREE_SCALAR + 1, FIRST_FREE_SCALAR + 2
SCALARS = BETA + 1


@dual
def begin(s, f, rr, rz):
    """SciPy's test before the first iteration, and ρ."""
    if math.sqrt(rr) < s[TOL]:
        stop(f, 0)
    else:
        s[RHO] = rz
        s[BETA] = 0.0


@dual
def begin_after_product(s, f, rz, unused):
    """:func:`begin` once a preconditioner's product has given r·z."""
    begin(s, f, s[KEPT], rz)


@dual
def direction(W, ld, i, s, D, p, r, z, c, d, e):
    """p = z + β p (z: row ``z``, or M r formed here when ``z`` is ``r``; a row ``z`` of its
    own comes with an operator M, where D is 1 and leaves z as it is)."""
    pi = W[p + i]
    zi = preconditioned(W, ld, i, D, W[z + i])
    W[p + i] = pi * s[BETA] + zi
    return 0.0, 0.0


@dual
def update(W, ld, i, s, D, x, r, p, q, d, e):
    """x += α p; r −= α q, with α = ρ / (p·q) (p·q kept by the product); the terms of r·r and
    r·z."""
    alpha = s[RHO] / s[KEPT]
    xi, pi, ri, qi = W[x + i], W[p + i], W[r + i], W[q + i]
    value = ri - alpha * qi
    zi = preconditioned(W, ld, i, D, value)
    W[x + i] = xi + alpha * pi
    W[r + i] = value
    return float(value) * value, float(value) * zi


@dual
def next_iteration(s, f, rr, rz):
    """The iteration is done: SciPy's tests at the top of the next one, then β and ρ."""
    done = f[ITERATIONS] + 1
    f[ITERATIONS] = done
    if done >= f[MAXITER]:
        stop(f, done)
    elif math.sqrt(rr) < s[TOL]:
        stop(f, 0)
    else:
        s[BETA] = rz / s[RHO]
        s[RHO] = rz


@dual
def next_after_product(s, f, rz, unused):
    next_iteration(s, f, s[KEPT], rz)


RESIDUAL = Step(residual, begin)
RESIDUAL_KEPT = Step(residual, keep)
BEGIN_AFTER_PRODUCT = Step(dot, begin_after_product)
DIRECTION = Step(direction, held=SCALARS)
UPDATE = Step(update, next_iteration, held=SCALARS)
UPDATE_KEPT = Step(update, keep, held=SCALARS)
NEXT_AFTER_PRODUCT = Step(dot, next_after_product)


class CG(Method):
    """The iteration of this module on a machine (:mod:`.machines`)."""

    name = "cg"
    rows = ("x", "b", "r", "p", "q", "z")
    scalars = SCALARS

    def start(self, x0_given: bool) -> None:
        m = self.m
        if x0_given:
            m.product(self.x, self.q)
        if m.preconditioner_is_product:
            m.step(RESIDUAL_KEPT, self.r, self.b, self.q, self.r)
            m.precondition(self.r, self.z)
            m.step(BEGIN_AFTER_PRODUCT, self.r, self.z)
        else:
            m.step(RESIDUAL, self.r, self.b, self.q, self.r)

    def iteration(self, eager: bool = False) -> None:
        m = self.m
        z = self.z if m.preconditioner_is_product else self.r
        m.step(DIRECTION, self.p, self.r, z)
        m.product(self.p, self.q, keep_dot=True)
        if m.preconditioner_is_product:
            m.step(UPDATE_KEPT, self.x, self.r, self.p, self.q)
            m.precondition(self.r, self.z)
            m.step(NEXT_AFTER_PRODUCT, self.r, self.z)
        else:
            m.step(UPDATE, self.x, self.r, self.p, self.q)
