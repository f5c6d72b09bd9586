"""Compile everything autospmv runs on a device ahead of time (``python -m autospmv warmup``).

numba compiles a function for each combination of argument types on its first call, then keeps
the machine code in its on-disk cache (:mod:`autospmv._support.cache`), from which later processes
load it far faster than compiling. :func:`warmup` makes those first calls for every kernel on two
matrices per value dtype: a small one (the serial CPU specialisations, below
:data:`autospmv.kernels.cpu.PARALLEL_MIN_NNZ`) and a larger one (the parallel ones and the
feature scan's threaded path: about a million nonzeros), each through
``prepare(A, kernel=...)`` (conversion, set-up) and one product (for a float32 matrix, also one
with a float64 x: the float64-accumulating specialisations that SciPy's solvers reach with a
float64 right-hand side), and the multi-vector products (``op @ X``: the kernels for a few and
for many columns, with X of the same dtypes). The feature scan, the prediction and the sampled
locality of x that CSR5's tile height reads are compiled the same way, and the index range
check that validates large matrices (:func:`autospmv._support.validation.index_range`) for both
index dtypes. Matrices with int64 indices (more than 2**31 - 1 nonzeros or rows) use other
specialisations, compiled on first use. On a GPU whose compute capability the package ships
cubins for, with the numba-cuda version they were built with (:mod:`autospmv.kernels.cuda.cubins`),
the GPU kernels load from those and only the CPU code (the feature scan, the prediction) compiles.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import scipy.sparse as sp

from .._support.cache import compile_timer

DTYPES = ("float32", "float64")


@dataclasses.dataclass
class Step:
    """One thing warmed up: its name, wall time and the part of it spent in numba."""

    name: str
    seconds: float
    compile_seconds: float
    error: str | None = None


def warmup_matrices(dtype) -> list[sp.csr_matrix]:
    """A small and a large matrix (both kernels' specialisations) that every format accepts:
    four entries per row, so no ELL padding limit applies and HYB has a non-zero ELL width."""
    from .._support.threads import PASSES_PARALLEL_MIN_NNZ
    from ..kernels import cpu
    from .._support.validation import canonicalize

    large = max(cpu.PARALLEL_MIN_NNZ, PASSES_PARALLEL_MIN_NNZ)
    rng = np.random.default_rng(0)
    out = []
    for m in (64, large // 4 + 4096):
        rows = np.repeat(np.arange(m), 4)
        cols = rng.integers(0, m, rows.size)
        out.append(canonicalize(sp.csr_matrix(
            (rng.standard_normal(rows.size).astype(dtype), (rows, cols)), shape=(m, m))))
    return out


def _compile_index_range():
    """The compiled range check that validation runs on large index arrays (both index
    dtypes), which the small warm-up matrices do not reach."""
    from .._support.validation import COMPILED_MIN_SIZE, index_range

    for itype in (np.int32, np.int64):
        index_range(np.zeros(COMPILED_MIN_SIZE, dtype=itype))


def _compile_x_locality(matrices) -> list:
    """The sampled locality of x that CSR5's tile height reads on the GPU for matrices of more
    tiles than the warm-up matrices have
    (:func:`autospmv._decide.features.sampling.x_locality`)."""
    from .._decide.features.sampling import x_locality

    return [x_locality(A) for A in matrices]


def warmup(device: str = "cpu", dtypes=DTYPES, kernels=None, progress=None) -> list[Step]:
    """Compile the feature scan, the prediction and every kernel (with its conversion) for
    ``device`` and ``dtypes``; returns one :class:`Step` per kernel and dtype.
    ``progress(step)``, if given, is called after each step."""
    from .. import _registry as registry
    from .. import prepare, select

    steps = []

    def run(name, fn):
        with compile_timer() as compiled:
            started = time.perf_counter()
            error = None
            try:
                fn()
            except Exception as exc:  # reported, so one failure does not hide the rest
                error = f"{type(exc).__name__}: {exc}"
            elapsed = time.perf_counter() - started
        step = Step(name, elapsed, compiled.total, error)
        steps.append(step)
        if progress:
            progress(step)

    run("index range check (large matrices)", _compile_index_range)
    for dtype in dtypes:
        matrices = warmup_matrices(np.dtype(dtype))
        run(f"features and prediction ({dtype})",
            lambda: [select(A, device=device) for A in matrices] + _compile_x_locality(matrices))
        for kernel in kernels or registry.names():
            def multiply(kernel=kernel):
                for A in matrices:
                    op = prepare(A, kernel=kernel, device=device)
                    for x_dtype in {A.dtype, np.result_type(A.dtype, np.float64)}:
                        op @ np.ones(A.shape[1], dtype=x_dtype)
            run(f"{kernel} ({dtype})", multiply)

        def multiply_blocks(matrices=matrices):
            for A in matrices:
                op = prepare(A, kernel="csr_scalar", device=device)
                for x_dtype in {A.dtype, np.result_type(A.dtype, np.float64)}:
                    for k in (2, 5):  # a few columns, many columns
                        op @ np.ones((A.shape[1], k), dtype=x_dtype)
        run(f"multi-vector products ({dtype})", multiply_blocks)
    return steps
