"""Restarted GMRES as ``scipy.sparse.linalg.gmres`` (``callback_type='x'``), with classical
Gram-Schmidt applied twice where SciPy uses modified Gram-Schmidt.

SciPy's restart cycle: v0 = M r / ‖M r‖; for each column c: w = M A v_c, h0 = ‖w‖, modified
Gram-Schmidt against v_0 … v_c (h_ck = v_k·w; w −= h_ck v_k), h1 = ‖w‖, v_{c+1} = w / h1 (no
scaling on breakdown, h1 ≤ eps·h0); the column's Givens rotations and the residual estimate
``presid``; the cycle's Arnoldi loop ends when presid ≤ ptol, on breakdown or after ``restart``
columns. Then the triangular solve, x += V y, r = b − A x, and SciPy's outer tests and update
of ptol. ``maxiter`` counts restart cycles, as in SciPy.

Here the orthogonalisation of a column is classical Gram-Schmidt with a second pass where the
first one left at most half of w's norm (:data:`REORTHOGONALISE_BELOW`, a test in the manner of
Daniel, Gragg, Kaufman and Stewart): one pass forms the dot products with every v_k at once
(:func:`project`), the next subtracts them and sums ‖w‖² (:func:`subtract_projections`); the
same two passes again only when ‖w‖ fell below that fraction of its norm before projecting.
Gram-Schmidt applied twice where it is needed is as accurate as the modified one, so the
Hessenberg matrix and the iteration count agree with SciPy's up to rounding, while a column
reads the basis twice (four times where it is reorthogonalised) instead of in c + 2 passes.
Everything scalar (the rotations, the tests, the triangular solve) runs in the finish of the
pass before it. One restart cycle is one iteration of the driver: on the GPU the whole cycle is
one CUDA graph (the second passes stay in it and return at once where they are not needed),
and the host reads the flags once per cycle.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .bodies import combination, dot, preconditioned, residual
from .dual import dual
from .method import Method
from .scalars import (FIRST_FREE_FLAG, FIRST_FREE_SCALAR, INNER_DONE, ITERATIONS, MAXITER,
                      ORTHOGONAL, STATE, STOPPED, TOL, stop)
from .steps import MultiStep, Step, host_dot, host_subtract

COLUMN, K, RESTART, CYCLES, BREAKDOWN = range(FIRST_FREE_FLAG, FIRST_FREE_FLAG + 5)
(PTOL, PTOL_FACTOR, PRESID, H0, SCALE, EPS, BNRM2, COLUMNS) = range(FIRST_FREE_SCALAR + 1,
                                                                      FIRST_FREE_SCALAR + 9)
H = COLUMNS + 1
"""Start of SciPy's h (restart × (restart + 1), row c holds column c of the Hessenberg
matrix), followed by the rotations (restart × 2), S (restart + 1), y (restart) and the second
Gram-Schmidt pass's coefficients (restart)."""


@dual
def rotations(restart):
    return H + restart * (restart + 1)


@dual
def residual_estimates(restart):
    return rotations(restart) + 2 * restart


@dual
def coefficients(restart):
    return residual_estimates(restart) + restart + 1


@dual
def second_coefficients(restart):
    return coefficients(restart) + restart


@dual
def preconditioned_norm(W, ld, i, s, D, u, w, c, d, e, g):
    """M u into row ``w`` (for a Jacobi M; u itself when ``w`` is ``u`` without M) and the
    terms of its norm."""
    value = preconditioned(W, ld, i, D, W[u + i])
    if w != u or D.shape[0] != 1:
        W[w + i] = value
    return float(value) * value, 0.0


@dual
def initial_ptol(s, f, mb, unused):
    """SciPy's first ptol from ‖M b‖."""
    s[PTOL] = math.sqrt(mb) * min(s[PTOL_FACTOR], s[TOL] / s[BNRM2])


@dual
def begin(s, f, rr, unused):
    if math.sqrt(rr) < s[TOL]:
        stop(f, 0)


@dual
def cycle_start(s, f, norm, unused):
    """S = (‖M r‖, 0, …) and the scale of v0."""
    restart = f[RESTART]
    first = residual_estimates(restart)
    tmp = math.sqrt(norm)
    for k in range(restart + 1):
        s[first + k] = 0.0
    s[first] = tmp
    s[SCALE] = 1.0 / tmp


@dual
def scale(W, ld, i, s, D, v, w, c, d, e, g):
    """v = w · s[SCALE] (in place when ``v`` is ``w``)."""
    W[v + i] = W[w + i] * s[SCALE]
    return 0.0, 0.0


REORTHOGONALISE_BELOW = 0.5
"""A column's Gram-Schmidt is applied a second time where the first pass leaves ‖w‖ at or
below this fraction of its norm before projecting. The rounding error the subtraction leaves
in w, relative to what remains of it, grows as that fraction falls: at one half it stays within
a few units of roundoff, and a second pass restores orthogonality where cancellation is worse.
Daniel, Gragg, Kaufman and Stewart test against 1/√2, which sends many well-conditioned
columns (a Laplacian's, for one) through the second pass for no gain in accuracy."""


@dual
def project(W, ld, i, s, D, w, v0, count, unused, first, g, combined):
    """Element i of w, whose dot products with v_0 … v_{count−1} the step sums: on the column's
    first pass (``first`` 1) M w for a Jacobi M (stored), on the second w as it is."""
    wi = W[w + i]
    if first != 0 and D.shape[0] != 1:
        wi = wi * D[i]
        W[w + i] = wi
    return wi


@dual
def subtract_projections(W, ld, i, s, D, w, v0, none, coefficients, count, g, combined):
    """w −= Σ_k h_k v_k over k < ``count`` (h from slot ``coefficients``; the step forms the
    sum, ``combined``); the step sums ‖w‖²."""
    wi = W[w + i] - combined
    W[w + i] = wi
    return wi


def project_host(W, ld, n, s, D, w, v0, count, unused, first, g):
    """The CPU's Gram-Schmidt (see :class:`.steps.MultiStep`): on the first pass SciPy's own,
    modified Gram-Schmidt, all of it, returning the coefficients and ‖w‖² before them as
    :func:`project`'s pass does; the later passes then find w orthogonal already (coefficients
    0, nothing left to subtract: :func:`norm_host`). It reads the basis twice per column as the
    GPU's passes do: on the CPU, row by row, modified Gram-Schmidt costs no more than its dot
    products and updates, numba loops here (:func:`.steps.host_dot`, which sums in float64,
    and :func:`.steps.host_subtract`, an update in place where SciPy forms ``h v_k`` in a new
    vector and subtracts it: two passes more over memory per basis vector)."""
    vector = W[int(w):int(w) + n]
    totals = np.zeros(count + 1)
    if first and D.shape[0] != 1:
        vector *= D[:n]
    totals[count] = host_dot(vector, vector)
    if first:
        for k in range(count):
            row = int(v0) + k * int(ld)
            basis = W[row:row + n]
            h = host_dot(basis, vector)
            totals[k] = h
            host_subtract(vector, basis, h)
    return totals


def norm_host(W, ld, n, s, D, w, v0, none, coefficients, count, g):
    """The CPU's :func:`subtract_projections` after :func:`project_host`: w is orthogonal
    already, so only ‖w‖²."""
    vector = W[int(w):int(w) + n]
    return np.array([host_dot(vector, vector)])


@dual
def projections(s, f, totals):
    """The first pass's coefficients into h's column and ‖w‖ before projecting (SciPy's h0)."""
    restart = f[RESTART]
    column = f[COLUMN]
    h = H + column * (restart + 1)
    for k in range(column + 1):
        s[h + k] = totals[k]
    s[H0] = math.sqrt(totals[column + 1])


@dual
def subtracted(s, f, totals):
    """‖w‖ after the first pass: the column ends here, or is projected a second time."""
    h1 = math.sqrt(totals[0])
    if h1 > REORTHOGONALISE_BELOW * s[H0]:
        f[STATE] |= ORTHOGONAL
        column_end(s, f, h1)
    else:
        f[STATE] &= ~ORTHOGONAL


@dual
def reprojections(s, f, totals):
    """The second projection's coefficients, kept apart until the second subtraction has used
    them."""
    column = f[COLUMN]
    second = second_coefficients(f[RESTART])
    for k in range(column + 1):
        s[second + k] = totals[k]


@dual
def orthogonalised(s, f, totals):
    """h's column is the sum of both passes' coefficients; the column ends with ‖w‖."""
    restart = f[RESTART]
    column = f[COLUMN]
    h = H + column * (restart + 1)
    second = second_coefficients(restart)
    for k in range(column + 1):
        s[h + k] += s[second + k]
    column_end(s, f, math.sqrt(totals[0]))


@dual
def column_end(s, f, h1):
    """SciPy's end of an Arnoldi column: breakdown test, rotations, presid, inner stop."""
    restart = f[RESTART]
    column = f[COLUMN]
    h = H + column * (restart + 1)
    givens = rotations(restart)
    estimates = residual_estimates(restart)
    breakdown = h1 <= s[EPS] * s[H0]
    below = 0.0 if breakdown else h1
    s[SCALE] = 1.0 if breakdown else 1.0 / h1
    rotated = s[h]  # the column's entry k, rotated by the rotations before k (a register)
    for k in range(column):
        c = s[givens + 2 * k]
        sn = s[givens + 2 * k + 1]
        n1 = s[h + k + 1]
        s[h + k] = c * rotated + sn * n1
        rotated = -sn * rotated + c * n1
    c, sn, mag = lartg(rotated, below)
    s[givens + 2 * column] = c
    s[givens + 2 * column + 1] = sn
    s[h + column] = mag
    s[h + column + 1] = 0.0
    tmp = -sn * s[estimates + column]
    s[estimates + column] = c * s[estimates + column]
    s[estimates + column + 1] = tmp
    presid = abs(tmp)
    s[PRESID] = presid
    f[ITERATIONS] += 1
    f[COLUMN] = column + 1
    if presid <= s[PTOL] or breakdown or column + 1 == restart:
        f[STATE] |= INNER_DONE
        f[BREAKDOWN] = 1 if breakdown else 0
        s[COLUMNS] = column + 1


@dual
def lartg(f, g):
    """LAPACK's ``dlartg`` for values of ordinary size: ``(c, s, r)`` with c f + s g = r and
    −s f + c g = 0, r carrying f's sign."""
    if g == 0:
        return 1.0, 0.0, f
    if f == 0:
        return 0.0, math.copysign(1.0, g), abs(g)
    d = math.sqrt(f * f + g * g)
    r = math.copysign(d, f)
    return abs(f) / d, g / r, r


@dual
def triangular_solve(s, f, unused0, unused1):
    """SciPy's back substitution for y over the cycle's columns."""
    restart = f[RESTART]
    last = int(s[COLUMNS]) - 1
    estimates = residual_estimates(restart)
    y = coefficients(restart)
    if s[H + last * (restart + 1) + last] == 0:
        s[estimates + last] = 0.0
    for k in range(last + 1):
        s[y + k] = s[estimates + k]
    for k in range(last, 0, -1):
        if s[y + k] != 0:
            s[y + k] /= s[H + k * (restart + 1) + k]
            tmp = s[y + k]
            for j in range(k):
                s[y + j] -= tmp * s[H + k * (restart + 1) + j]
    if s[y] != 0:
        s[y] /= s[H]


@dual
def combine(W, ld, i, s, D, x, v0, y, d, e, g):
    """x += Σ_k y_k v_k over the cycle's columns."""
    W[x + i] = W[x + i] + combination(W, ld, i, s, v0, y, int(s[COLUMNS]))
    return 0.0, 0.0


def combine_host(W, ld, n, s, D, x, v0, y, d, e, g):
    """The CPU's :func:`combine` (see :class:`.steps.Step`), as SciPy forms it: x += y V, the
    coefficients times the basis through the BLAS's matrix-vector product, which reads each
    basis vector once, in order (a loop over elements reads all of them at every element)."""
    columns = int(s[COLUMNS])
    start, stride = int(v0), int(ld)
    basis = W[start:start + columns * stride].reshape(columns, stride)[:, :n]
    coefficients = s[int(y):int(y) + columns].astype(W.dtype)
    W[int(x):int(x) + n] += coefficients @ basis


@dual
def outer_tests(s, f, rr, unused):
    """SciPy's tests after a restart cycle, and the next ptol."""
    rnorm = math.sqrt(rr)
    cycles = f[CYCLES] + 1
    f[CYCLES] = cycles
    f[STATE] &= ~INNER_DONE
    f[COLUMN] = 0
    if rnorm <= s[TOL]:
        stop(f, 0)
        return
    if f[BREAKDOWN] != 0:
        stop(f, f[MAXITER])
        return
    presid = s[PRESID]
    if presid <= s[PTOL]:
        s[PTOL_FACTOR] = max(s[EPS], 0.25 * s[PTOL_FACTOR])
    else:
        s[PTOL_FACTOR] = min(1.0, 1.5 * s[PTOL_FACTOR])
    s[PTOL] = presid * min(s[PTOL_FACTOR], s[TOL] / rnorm)
    if cycles >= f[MAXITER]:
        stop(f, f[MAXITER])


@dual
def nothing(W, ld, i, s, D, a, b, c, d, e, g):
    return 0.0, 0.0


COLUMN_SKIP = STOPPED | INNER_DONE
SECOND_PASS_SKIP = COLUMN_SKIP | ORTHOGONAL
INITIAL_PTOL = Step(preconditioned_norm, initial_ptol)
INITIAL_PTOL_AFTER_PRODUCT = Step(dot, initial_ptol)
RESIDUAL = Step(residual, begin)
OUTER_RESIDUAL = Step(residual, outer_tests)
CYCLE_START = Step(preconditioned_norm, cycle_start)
CYCLE_START_AFTER_PRODUCT = Step(dot, cycle_start)
SCALE_V0 = Step(scale)
NEXT_VECTOR = Step(scale, None, COLUMN_SKIP)
TRIANGULAR_SOLVE = Step(nothing, triangular_solve)
COMBINE = Step(combine, host=combine_host)


class GMRES(Method):
    """The iteration of this module (one restart cycle) on a machine (:mod:`.machines`)."""

    name = "gmres"
    rows = ("x", "b", "q", "r", "w")
    products_per_iteration = 20

    def __init__(self, m, restart):
        super().__init__(m)
        self.restart = restart
        self.v = [m.offset(len(self.rows) + k) for k in range(self.restart + 1)]

    @classmethod
    def configure(cls, n, options):
        return {"restart": restart_of(n, options.get("restart"))}

    @classmethod
    def scalar_count(cls, options):
        return second_coefficients(options["restart"]) + options["restart"]

    @classmethod
    def partial_sums(cls, options):
        return options["restart"] + 2

    @classmethod
    def workspace_rows(cls, options):
        return len(cls.rows) + options["restart"] + 1

    def initial_scalars(self, *, bnrm2, rtol, atol, maxiter):
        self.m.set_flags({RESTART: self.restart})
        return {PTOL_FACTOR: 1.0, EPS: float(np.finfo(self.m.dtype).eps), BNRM2: bnrm2}

    def callbacks_due(self, flags) -> int:
        return int(flags[CYCLES])

    def iterations_per_replay(self, wanted: int) -> int:
        return 1

    def start(self, x0_given: bool) -> None:
        m = self.m
        if m.preconditioner_is_product:
            m.precondition(self.b, self.w)
            m.step(INITIAL_PTOL_AFTER_PRODUCT, self.w, self.w)
        else:
            m.step(INITIAL_PTOL, self.b, self.w)
        if x0_given:
            m.product(self.x, self.q)
        m.step(RESIDUAL, self.r, self.b, self.q, self.r)
        self._cycle_start()

    def _cycle_start(self) -> None:
        m, v0 = self.m, self.v[0]
        if m.preconditioner_is_product:
            m.precondition(self.r, v0)
            m.step(CYCLE_START_AFTER_PRODUCT, v0, v0)
        else:
            m.step(CYCLE_START, self.r, v0)
        m.step(SCALE_V0, v0, v0)

    def iteration(self, eager: bool = False) -> None:
        m = self.m
        for column in range(self.restart):
            self.column(column)
            if eager and m.flags()[STATE] & COLUMN_SKIP:
                break  # the rest of the cycle's columns would do nothing
        m.step(TRIANGULAR_SOLVE, n=0)
        m.step(COMBINE, self.x, self.v[0], coefficients(self.restart))
        m.product(self.x, self.q)
        m.step(OUTER_RESIDUAL, self.r, self.b, self.q, self.r)
        self._cycle_start()

    def column(self, c: int) -> None:
        m, v, w = self.m, self.v, self.w
        if m.preconditioner_is_product:
            m.product(v[c], self.q)
            m.precondition(self.q, w)
        else:
            m.product(v[c], w)
        project_first, subtract_first, project_again, subtract_again = gram_schmidt_steps(
            self.restart + 2)
        m.step(project_first, w, v[0], c + 1, 0, 1)
        m.step(subtract_first, w, v[0], 0, H + c * (self.restart + 1), c + 1)
        m.step(project_again, w, v[0], c + 1, 0, 0)
        m.step(subtract_again, w, v[0], 0, second_coefficients(self.restart), c + 1)
        m.step(NEXT_VECTOR, v[c + 1], w)


@functools.lru_cache(maxsize=None)
def gram_schmidt_steps(sums: int) -> tuple:
    """A column's Gram-Schmidt passes, for a restart of ``sums − 2``: project and subtract,
    then both again where :func:`subtracted` finds it needed."""
    return (MultiStep(project, projections, sums, COLUMN_SKIP, project_host),
            MultiStep(subtract_projections, subtracted, sums, COLUMN_SKIP, norm_host,
                      combines=True),
            MultiStep(project, reprojections, sums, SECOND_PASS_SKIP, project_host),
            MultiStep(subtract_projections, orthogonalised, sums, SECOND_PASS_SKIP, norm_host,
                      combines=True))


MAX_RESTART = 254
"""The longest restart cycle: a Gram-Schmidt pass sums one product per basis vector plus the
norm, which each block of the GPU's pass keeps in shared memory (2 KiB at this length)."""


def restart_of(n: int, restart) -> int:
    """SciPy's restart: 20 by default, at most n."""
    if restart is None:
        restart = 20
    if (isinstance(restart, bool) or not isinstance(restart, (int, np.integer))
            or not 1 <= restart <= MAX_RESTART):
        raise ValueError(f"restart must be a whole number from 1 to {MAX_RESTART}; "
                         f"got {restart!r}")
    return int(min(restart, n))
