"""Krylov solvers with SciPy's signatures and iterates, run where the operator runs
(see :mod:`autospmv.solvers` for the public functions)."""
