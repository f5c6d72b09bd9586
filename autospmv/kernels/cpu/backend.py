"""The CPU side of an operator: the registry's numba kernel bound to a format's host arrays, on
the threads :mod:`autospmv._support.threads` allows (the GPU's counterpart is
:mod:`autospmv.kernels.cuda.backend`)."""

from __future__ import annotations

import numpy as np

from ..._registry import KernelSpec
from ..._support.threads import choose_threads
from ...formats.csr import CSRFormat
from . import bind_threaded
from .csr import bind_transposed
from .scipy_product import bind_scipy, note, scipy_applies


class CpuBackend:
    """Runs the registry's numba CPU kernel on host arrays, on at most ``threads`` threads
    (:func:`autospmv._support.threads.choose_threads`: ``threads=``, ``AUTOSPMV_NUM_THREADS`` or a
    rule from the matrix size and the usable cores; 1 runs the serial kernel). A serial
    ``csr_scalar`` product runs SciPy's compiled CSR loop where that is the faster one
    (:mod:`autospmv.kernels.cpu.scipy_product`); :attr:`engine_note` then says so."""

    def __init__(self, spec: KernelSpec, fmt, params: dict, nnz: int, threads=None):
        self.threads, self.threads_reason = choose_threads(nnz, threads, max(fmt.shape))
        self._run = bind_threaded(spec.cpu_kernel(), fmt, params, self.threads)
        self.engine_note = None
        """The decision's note when the products run SciPy's loop, else None."""
        if scipy_applies(spec.name, fmt, self.threads):
            self._run, self.engine_note = bind_scipy(fmt, self._run), note(fmt)
        self._format = fmt
        self._threads_request = threads
        self.multi = None
        """The multi-vector product (:meth:`set_up_multi`), None until the first one."""
        self.host_rmatvec = None
        """``run(z, y)``: y = Aᵀ z without building Aᵀ, for a CSR format run serially (its
        transposed operator would run serially too: same nonzeros, same dimensions); None
        otherwise (the operator's rmatvec then uses Aᵀ's own operator)."""
        if isinstance(fmt, CSRFormat) and self.threads == 1:
            self.host_rmatvec = bind_transposed(fmt)

    def host_matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        if y.shape[0]:
            self._run(x, y)

    def set_up_multi(self, matrix_csr, notes: list | None = None, spmm_rule=None
                     ) -> tuple[str, tuple]:
        """Set up :attr:`multi` on A's CSR arrays: the format's own for a CSR kernel, else
        those of ``matrix_csr()``. Returns the decision's note and the arrays it runs on
        (``notes`` and ``spmm_rule`` are for the GPU's choices made at later products: none
        here)."""
        fmt = self._format
        if isinstance(fmt, CSRFormat):
            where = "the format's own"
        else:
            fmt = CSRFormat.from_csr(matrix_csr())
            where = f"besides the {self._format.name} format"
        from .spmm import MultiVector  # (imported at the first one)

        self.multi = MultiVector(fmt, self._threads_request)
        return (f"multi-vector products (A @ X, X of k ≥ 2 columns) run one pass over A's CSR "
                f"arrays ({where}) for all k columns, on the threads of a product of nnz·k "
                f"nonzeros"), tuple(fmt.arrays().values())

    def host_matmat(self, X: np.ndarray, Y: np.ndarray) -> None:
        """Y = A @ X for C-contiguous X and Y of the product's dtype (after
        :meth:`set_up_multi`)."""
        self.multi.run(X, Y)

    def device_matmat(self, X):
        """Refuses CUDA arrays, as :meth:`device_matvec`."""
        return self.device_matvec(X, None)

    def device_matvec(self, x, out):
        """Refuses CUDA arrays; None for anything else (the caller takes the host path)."""
        if getattr(x, "__cuda_array_interface__", None) is None:
            return None
        raise TypeError(
            "this operator runs on the CPU and takes numpy arrays; got a CUDA device array "
            f"({type(x).__name__}); build the operator with device='cuda' to use device arrays"
        )
