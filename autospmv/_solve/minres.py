"""MINRES, step for step as ``scipy.sparse.linalg.minres`` (without its ``shift``).

SciPy's iteration is the Lanczos process (one product, two dot products) and a QR update of its
tridiagonal matrix in scalars, with x updated along the direction w. Here, around the product:

1. ``lanczos_vector``: v = y / β;
2. y = A v;
3. ``lanczos_alpha``: y −= (β/β_old) r1 (from the second iteration on), with v·y: α;
4. ``subtract`` (``subtract_in_place`` without M): y −= (α/β) r2, and M y for a Jacobi M,
   with y·M y: the new β, whose finish runs SciPy's scalar recurrences (the rotation, φ, the
   next direction's coefficients);
5. ``solution``: w = (v − ε_old w1 − δ w2)/γ and x += φ w in one pass with x·x, whose finish
   runs SciPy's stopping tests (``istop``; info = maxiter for the iteration limit, else 0).

SciPy rebinds r1, r2 and y, and w1, w2 and w, each iteration; here those vectors rotate through
three rows each, so the rows repeat every three iterations (after the first, in which r1 and r2
are the same vector).
"""

from __future__ import annotations

import math

import numpy as np

from .bodies import dot, residual, subtract, subtract_in_place
from .dual import dual
from .method import Method
from .scalars import (FIRST_FREE_FLAG, FIRST_FREE_SCALAR, INDEFINITE_PRECONDITIONER, ITERATIONS,
                      MAXITER, NOT_SYMMETRIC, TOL, fail, keep, stop)
from .steps import Step

ISTOP = FIRST_FREE_FLAG
(BETA1, BETA, OLDB, ALFA, DBAR, EPSLN, OLDEPS, DELTA, PHI, PHIBAR, DENOM, CS, SN, TNORM2, GMAX,
 GMIN, RHS1, RHS2, ROOT, GAMMA, RTOL, EPS, INVERSE_BETA, BETA_RATIO,
 ALFA_RATIO) = range(FIRST_FREE_SCALAR + 1, FIRST_FREE_SCALAR + 26)
"""The slots of SciPy's scalars, and the three quotients the passes multiply by (SciPy's
``1.0/beta``, ``beta/oldb`` and ``alfa/beta``), formed once by the finish before them rather
than at every element."""
SCALARS = ALFA_RATIO + 1


@dual
def begin(s, f, unused, beta1):
    """SciPy's start from β1² = r1·M r1."""
    if beta1 < 0:
        fail(f, INDEFINITE_PRECONDITIONER)
    elif beta1 == 0:
        stop(f, 0)
    else:
        beta1 = math.sqrt(beta1)
        s[BETA1] = beta1
        s[BETA] = beta1
        s[INVERSE_BETA] = 1.0 / beta1
        s[PHIBAR] = beta1
        s[RHS1] = beta1


@dual
def begin_after_product(s, f, beta1, unused):
    begin(s, f, 0.0, beta1)


@dual
def lanczos_vector(W, ld, i, s, D, v, y, c, d, e, g):
    W[v + i] = s[INVERSE_BETA] * W[y + i]
    return 0.0, 0.0


@dual
def lanczos_alpha(W, ld, i, s, D, y, v, r1, d, e, g):
    value = W[y + i] - s[BETA_RATIO] * W[r1 + i]  # the ratio is 0 at first
    vi = W[v + i]
    W[y + i] = value
    return float(vi) * value, 0.0


@dual
def alpha(s, f, alfa, unused):
    s[ALFA] = alfa
    s[ALFA_RATIO] = alfa / s[BETA]


@dual
def recurrences(s, f, unused, beta):
    """SciPy's scalars from the new β² = y·M y to the next direction's coefficients."""
    itn = f[ITERATIONS] + 1
    f[ITERATIONS] = itn
    oldb = s[BETA]
    if beta < 0:
        fail(f, NOT_SYMMETRIC)
        return
    beta = math.sqrt(beta)
    alfa = s[ALFA]
    s[OLDB] = oldb
    s[BETA] = beta
    s[INVERSE_BETA] = 1.0 / beta
    s[BETA_RATIO] = beta / oldb  # SciPy subtracts (beta/oldb) r1 from the second iteration on
    s[TNORM2] += alfa * alfa + oldb * oldb + beta * beta
    if itn == 1 and beta / s[BETA1] <= 10 * s[EPS]:
        f[ISTOP] = -1
    cs = s[CS]
    sn = s[SN]
    dbar = s[DBAR]
    s[OLDEPS] = s[EPSLN]
    s[DELTA] = cs * dbar + sn * alfa
    gbar = sn * dbar - cs * alfa
    s[EPSLN] = sn * beta
    s[DBAR] = -cs * beta
    s[ROOT] = math.sqrt(gbar * gbar + s[DBAR] * s[DBAR])
    gamma = max(math.sqrt(gbar * gbar + beta * beta), s[EPS])
    s[GAMMA] = gamma
    s[CS] = gbar / gamma
    s[SN] = beta / gamma
    s[PHI] = s[CS] * s[PHIBAR]
    s[PHIBAR] = s[SN] * s[PHIBAR]
    s[DENOM] = 1.0 / gamma


@dual
def recurrences_after_product(s, f, beta, unused):
    recurrences(s, f, 0.0, beta)


@dual
def solution(W, ld, i, s, D, w, w1, w2, v, x, g):
    """w = (v − ε_old w1 − δ w2)/γ (into row ``w``); x += φ w; the terms of x·x."""
    xi = W[x + i]
    value = (W[v + i] - s[OLDEPS] * W[w1 + i] - s[DELTA] * W[w2 + i]) * s[DENOM]
    xi = xi + s[PHI] * value
    W[w + i] = value
    W[x + i] = xi
    return float(xi) * xi, 0.0


@dual
def stopping_tests(s, f, xx, unused):
    """SciPy's tests after the update of x."""
    gamma = s[GAMMA]
    s[GMAX] = max(s[GMAX], gamma)
    s[GMIN] = min(s[GMIN], gamma)
    z = s[RHS1] / gamma
    s[RHS1] = s[RHS2] - s[DELTA] * z
    s[RHS2] = -s[EPSLN] * z
    anorm = math.sqrt(s[TNORM2])
    ynorm = math.sqrt(xx)
    eps = s[EPS]
    epsx = anorm * ynorm * eps
    rnorm = s[PHIBAR]
    if ynorm == 0 or anorm == 0:
        test1 = math.inf
    else:
        test1 = rnorm / (anorm * ynorm)
    if anorm == 0:
        test2 = math.inf
    else:
        test2 = s[ROOT] / anorm
    acond = s[GMAX] / s[GMIN]
    istop = f[ISTOP]
    if istop == 0:
        rtol = s[RTOL]
        if 1 + test2 <= 1:
            istop = 2
        if 1 + test1 <= 1:
            istop = 1
        if f[ITERATIONS] >= f[MAXITER]:
            istop = 6
        if acond >= 0.1 / eps:
            istop = 4
        if epsx >= s[BETA1]:
            istop = 3
        if test2 <= rtol:
            istop = 2
        if test1 <= rtol:
            istop = 1
        if s[TOL] > 0 and rnorm <= s[TOL]:
            istop = 1
        f[ISTOP] = istop
    if istop != 0:
        stop(f, f[MAXITER] if istop == 6 else 0)


RESIDUAL = Step(residual, begin)
RESIDUAL_KEPT = Step(residual, keep)
BEGIN_AFTER_PRODUCT = Step(dot, begin_after_product)
LANCZOS_VECTOR = Step(lanczos_vector)
LANCZOS_ALPHA = Step(lanczos_alpha, alpha)
LANCZOS_BETA = Step(subtract, recurrences)
"""y −= (α/β) r2 (y becomes r2), M y for a Jacobi M, and SciPy's recurrences on y·M y."""
LANCZOS_BETA_WITHOUT_M = Step(subtract_in_place, recurrences)
LANCZOS_BETA_ONLY = Step(subtract_in_place)
RECURRENCES_AFTER_PRODUCT = Step(dot, recurrences_after_product)
SOLUTION = Step(solution, stopping_tests)


class MINRES(Method):
    """The iteration of this module on a machine (:mod:`.machines`)."""

    name = "minres"
    rows = ("x", "b", "q", "ra", "rb", "rc", "z", "v", "wa", "wb", "wc")
    scalars = SCALARS
    period = 3
    eager = 1

    @staticmethod
    def default_maxiter(n: int) -> int:
        return 5 * n

    def __init__(self, m):
        super().__init__(m)
        self.r1, self.r2, self.out = self.ra, self.ra, self.rb
        self.w, self.w1, self.w2 = self.wa, self.wc, self.wb

    def initial_scalars(self, *, bnrm2, rtol, atol, maxiter):
        info = np.finfo(self.m.dtype)
        return {CS: -1.0, GMIN: float(info.max), EPS: float(info.eps), RTOL: rtol}

    def start(self, x0_given: bool) -> None:
        m = self.m
        if x0_given:
            m.product(self.x, self.q)
        if m.preconditioner_is_product:
            m.step(RESIDUAL_KEPT, self.r1, self.b, self.q, self.r1)
            m.precondition(self.r1, self.z)
            m.step(BEGIN_AFTER_PRODUCT, self.r1, self.z)
        else:
            m.step(RESIDUAL, self.r1, self.b, self.q, self.z if m.preconditioner else self.r1)

    def iteration(self, eager: bool = False) -> None:
        m = self.m
        y = self.z if m.preconditioner is not None else self.r2
        m.step(LANCZOS_VECTOR, self.v, y)
        m.product(self.v, self.out)
        m.step(LANCZOS_ALPHA, self.out, self.v, self.r1)
        if m.preconditioner_is_product:
            m.step(LANCZOS_BETA_ONLY, self.out, self.r2, 0, ALFA_RATIO)
            m.precondition(self.out, self.z)
            m.step(RECURRENCES_AFTER_PRODUCT, self.out, self.z)
        elif m.preconditioner is not None:
            m.step(LANCZOS_BETA, self.out, self.r2, self.z, ALFA_RATIO)
        else:
            m.step(LANCZOS_BETA_WITHOUT_M, self.out, self.r2, 0, ALFA_RATIO)
        m.step(SOLUTION, self.w1, self.w2, self.w, self.v, self.x)
        self.w, self.w1, self.w2 = self.w1, self.w2, self.w
        free = ({self.ra, self.rb, self.rc} - {self.r2, self.out}).pop()
        self.r1, self.r2, self.out = self.r2, self.out, free
