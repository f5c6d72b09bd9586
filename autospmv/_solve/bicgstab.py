"""BiCGSTAB, step for step as ``scipy.sparse.linalg.bicgstab``.

SciPy's loop, per iteration: stop if ‖r‖ < atol; ρ = r̃·r (breakdown −10 if |ρ| < eps²);
from the second iteration on, breakdown −11 if |ω| < eps², β = (ρ/ρ_prev)(α/ω),
p = β (p − ω v) + r (p = r at first); p̂ = M p; v = A p̂; α = ρ / (r̃·v) (−11 if r̃·v = 0);
s = r − α v; if ‖s‖ < atol: x += α p̂ and stop; ŝ = M s; t = A ŝ; ω = (t·s)/(t·t);
x += α p̂; x += ω ŝ; r = s − ω t.

Here, around the two products:

1. ``direction``: p = β (p − ω v) + r, and p̂ = M p for a Jacobi M, in one pass;
2. v = A p̂; ``dot(r̃, v)`` finishes with α;
3. ``subtract``: r −= α v (r serves as s) with ‖s‖², and ŝ = M s for a Jacobi M; its finish
   marks the half-step exit (:data:`~.scalars.HALF`), which the next pass skips on;
4. t = A ŝ; ``dot_and_norm(t, s)`` finishes with ω;
5. ``update``: x += α p̂, x += ω ŝ, r −= ω t, with r·r and r̃·r for the next iteration's tests,
   ρ and β (or, after a half-step exit, only x += α p̂).

Without a Jacobi M, p̂ is p and ŝ is s (kept in r), and passes 1, 3 and 5 are bodies of their
own that name each vector once: a pass that reads and writes one vector through two names
(offsets equal only at run time) keeps LLVM from vectorising its CPU loop, whose checks for
overlapping vectors then fail and send it to the element-by-element loop. The update has no
branch per element for the same reason: after a half-step exit ω counts as 0 (x + α p̂ gains
+0, r keeps its value, the terms are 0; the vectors are finite, as ‖s‖ passed the test).
"""

from __future__ import annotations

import math

import numpy as np

from .bodies import dot, dot_and_norm, preconditioned, subtract, subtract_in_place
from .dual import dual
from .method import Method
from .scalars import FIRST_FREE_SCALAR, HALF, ITERATIONS, MAXITER, STATE, STOPPED, TOL, stop
from .steps import Step

RHO, RHO_PREV, ALPHA, OMEGA, BETA, BREAKDOWN, HALF_EXIT = range(FIRST_FREE_SCALAR + 1,
                                                                 FIRST_FREE_SCALAR + 8)
SCALARS = HALF_EXIT + 1


@dual
def residual(W, ld, i, s, D, r, b, q, rt, e, g):
    """r = r̃ = b − q (q = A x0), with the terms of r·r twice."""
    value = W[b + i] - W[q + i]
    W[r + i] = value
    W[rt + i] = value
    return float(value) * value, float(value) * value


@dual
def tests(s, f, rr, rho):
    """SciPy's tests at the top of an iteration (ρ = r̃·r), then β."""
    if math.sqrt(rr) < s[TOL]:
        stop(f, 0)
    elif abs(rho) < s[BREAKDOWN]:
        stop(f, -10)
    elif f[ITERATIONS] > 0 and abs(s[OMEGA]) < s[BREAKDOWN]:
        stop(f, -11)
    else:
        if f[ITERATIONS] > 0:
            s[BETA] = (rho / s[RHO_PREV]) * (s[ALPHA] / s[OMEGA])
        s[RHO] = rho


@dual
def new_direction(W, i, s, p, r, v):
    """Element i of β (p − ω v) + r."""
    return (W[p + i] - s[OMEGA] * W[v + i]) * s[BETA] + W[r + i]


@dual
def direction(W, ld, i, s, D, p, r, v, ph, e, g):
    """p = β (p − ω v) + r; p̂ = M p into row ``ph`` for a Jacobi M."""
    value = new_direction(W, i, s, p, r, v)
    W[p + i] = value
    W[ph + i] = preconditioned(W, ld, i, D, value)
    return 0.0, 0.0


@dual
def direction_without_m(W, ld, i, s, D, p, r, v, d, e, g):
    """p = β (p − ω v) + r (p̂ is p)."""
    W[p + i] = new_direction(W, i, s, p, r, v)
    return 0.0, 0.0


@dual
def step_length(s, f, rv, unused):
    if rv == 0:
        stop(f, -11)
    else:
        s[ALPHA] = s[RHO] / rv


@dual
def half_test(s, f, ss, unused):
    if math.sqrt(ss) < s[TOL]:
        f[STATE] |= HALF
        s[HALF_EXIT] = 1.0


@dual
def smoothing(s, f, ts, tt):
    s[OMEGA] = ts / tt


@dual
def updated(W, i, s, x, r, ph, shi, ri, ti, rti):
    """x += α p̂; x += ω ŝ; r = s − ω t, from ŝ, s (in r), t and r̃ at i as read before the
    stores; the terms of r·r and r̃·r (after a half-step exit only x += α p̂: see the module
    docstring)."""
    full = 1.0 - s[HALF_EXIT]
    omega = s[OMEGA] * full
    value = ri - omega * ti
    W[x + i] = (W[x + i] + s[ALPHA] * W[ph + i]) + omega * shi
    W[r + i] = value
    return float(value) * value * full, float(value) * rti * full


@dual
def update(W, ld, i, s, D, x, r, ph, sh, t, rt):
    """:func:`updated` with ŝ = M s in row ``sh``, p̂ in row ``ph``."""
    return updated(W, i, s, x, r, ph, W[sh + i], W[r + i], W[t + i], W[rt + i])


@dual
def update_without_m(W, ld, i, s, D, x, r, p, t, rt, g):
    """:func:`updated` with p̂ = p and ŝ = s, which is r before this pass."""
    ri = W[r + i]
    return updated(W, i, s, x, r, p, ri, ri, W[t + i], W[rt + i])


@dual
def next_iteration(s, f, rr, rho):
    if s[HALF_EXIT] != 0:
        stop(f, 0)  # SciPy returns inside the iteration, before counting it
        return
    done = f[ITERATIONS] + 1
    f[ITERATIONS] = done
    s[RHO_PREV] = s[RHO]
    if done >= f[MAXITER]:
        stop(f, done)
    else:
        tests(s, f, rr, rho)


RESIDUAL = Step(residual, tests)
DIRECTION = Step(direction)
DIRECTION_WITHOUT_M = Step(direction_without_m)
STEP_LENGTH = Step(dot, step_length)
HALF_STEP = Step(subtract, half_test)
"""s = r − α v (into r), ŝ = M s for a Jacobi M, and the half-step test on s·s."""
HALF_STEP_WITHOUT_M = Step(subtract_in_place, half_test)
HALF_STEP_ONLY = Step(subtract_in_place)
HALF_TEST_AFTER_PRODUCT = Step(dot, half_test)
SMOOTHING = Step(dot_and_norm, smoothing, STOPPED | HALF)
UPDATE = Step(update, next_iteration)
UPDATE_WITHOUT_M = Step(update_without_m, next_iteration)


class BiCGSTAB(Method):
    """The iteration of this module on a machine (:mod:`.machines`)."""

    name = "bicgstab"
    rows = ("x", "b", "r", "rt", "p", "ph", "v", "sh", "t", "q")
    scalars = SCALARS
    products_per_iteration = 2

    def initial_scalars(self, *, bnrm2, rtol, atol, maxiter):
        return {BREAKDOWN: float(np.finfo(self.m.dtype).eps) ** 2}

    def start(self, x0_given: bool) -> None:
        m = self.m
        if x0_given:
            m.product(self.x, self.q)
        m.step(RESIDUAL, self.r, self.b, self.q, self.rt)

    def iteration(self, eager: bool = False) -> None:
        m = self.m
        if m.preconditioner is None:
            m.step(DIRECTION_WITHOUT_M, self.p, self.r, self.v)
            m.product(self.p, self.v)
            m.step(STEP_LENGTH, self.rt, self.v)
            m.step(HALF_STEP_WITHOUT_M, self.r, self.v, 0, ALPHA)
            m.product(self.r, self.t)
            m.step(SMOOTHING, self.t, self.r)
            m.step(UPDATE_WITHOUT_M, self.x, self.r, self.p, self.t, self.rt)
            return
        jacobi = not m.preconditioner_is_product
        ph, sh = self.ph, self.sh
        if jacobi:
            m.step(DIRECTION, self.p, self.r, self.v, ph)
        else:
            m.step(DIRECTION_WITHOUT_M, self.p, self.r, self.v)
            m.precondition(self.p, ph)
        m.product(ph, self.v)
        m.step(STEP_LENGTH, self.rt, self.v)
        if jacobi:
            m.step(HALF_STEP, self.r, self.v, sh, ALPHA)
        else:
            m.step(HALF_STEP_ONLY, self.r, self.v, 0, ALPHA)
            m.precondition(self.r, sh)
            m.step(HALF_TEST_AFTER_PRODUCT, self.r, self.r)
        m.product(sh, self.t)
        m.step(SMOOTHING, self.t, self.r)
        m.step(UPDATE, self.x, self.r, ph, sh, self.t, self.rt)
