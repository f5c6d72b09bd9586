"""The layout of a solver's device-side state, and the scalar helpers every method shares.

A solve keeps two small arrays where its vectors are (host memory on the CPU, device memory on
the GPU): ``s``, float64 scalars (tolerances, the recurrences' coefficients), and ``f``, int64
flags. The flags' first slots are common to every method:

* ``f[STATE]``: a bit mask; :data:`STOPPED` once the method has returned (its vectors no longer
  change), and method-specific bits (:data:`HALF`, :data:`INNER_DONE`, :data:`ORTHOGONAL`) that some steps skip on;
* ``f[ITERATIONS]``: the iterations done, counted as SciPy calls its callback;
* ``f[INFO]``: SciPy's ``info`` once stopped;
* ``f[MAXITER]``: the iteration limit;
* ``f[ERROR]``: a nonzero code when the method found its input unusable (:data:`ERRORS`).

Methods put their own slots after :data:`FIRST_FREE_FLAG` and, in ``s``, after
:data:`FIRST_FREE_SCALAR` (``s[TOL]`` is the absolute tolerance every method tests against).
"""

from __future__ import annotations

from .dual import dual

STATE, ITERATIONS, INFO, MAXITER, ERROR = 0, 1, 2, 3, 4
FIRST_FREE_FLAG = 5
FLAGS = 16
"""Length of ``f``."""

STOPPED = 1
HALF = 2
"""BiCGSTAB: the half-step residual passed; only the update of x is left."""
INNER_DONE = 4
"""GMRES: the current restart cycle's Arnoldi loop has ended."""
ORTHOGONAL = 8
"""GMRES: the column's first Gram-Schmidt pass kept enough of w's norm that its second pass is
skipped."""

TOL = 0
FIRST_FREE_SCALAR = 1

NOT_SYMMETRIC = 1
INDEFINITE_PRECONDITIONER = 2
ERRORS = {
    NOT_SYMMETRIC: "the matrix is not symmetric (minres found r·M⁻¹r < 0)",
    INDEFINITE_PRECONDITIONER: "the preconditioner is indefinite (minres found r·M⁻¹r < 0 at "
                               "the start)",
}
"""``f[ERROR]`` codes and the message of the ValueError they raise (SciPy raises the same)."""


@dual
def stop(f, info):
    """Stop with SciPy's ``info``: every later step leaves the vectors as they are."""
    f[STATE] |= STOPPED
    f[INFO] = info


@dual
def fail(f, code):
    """Stop because the input is unusable (``code`` from :data:`ERRORS`)."""
    f[ERROR] = code
    f[STATE] |= STOPPED


@dual
def keep(s, f, sum0, sum1):
    """Keep the first sum in ``s[KEPT]``, for a finish that a preconditioner's product
    separates from the pass that computed it."""
    s[KEPT] = sum0


KEPT = 1
"""Slot of :func:`keep`; methods that use it leave it free."""
