"""SpMVOperator: a converted matrix bound to one kernel on one device.

All checking of vectors happens here, once per call, before a kernel sees them; kernels only know
their arrays. Everything that can be done once (conversion, upload, launch parameters) is done when
the operator is built, so a call only validates, launches and (for host vectors) copies.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from . import registry
from .cpu_threads import choose_threads
from .kernels.cpu import bind_threaded
from .selector import Decision, forced_decision
from .validation import canonicalize, check_out, check_vector


class SpMVOperator(LinearOperator):
    """``y = A @ x`` with a fixed kernel; a ``scipy.sparse.linalg.LinearOperator``.

    Attributes: ``kernel``, ``params``, ``device``, ``decision``, ``format`` (the converted
    storage), ``nbytes`` (bytes of that storage), ``shape``, ``dtype``, ``threads`` (on the CPU,
    the most threads a product uses; see :mod:`autospmv.cpu_threads`).
    """

    def __init__(self, csr: sp.csr_matrix, decision: Decision, device: str, threads=None):
        super().__init__(dtype=csr.dtype, shape=csr.shape)
        self.decision = decision
        self.device = device
        self._csr = csr
        spec = registry.get(decision.kernel)
        started = time.perf_counter()
        self.format = spec.convert(csr, decision.params)
        if device == "cuda":
            from .kernels.cuda.backend import CudaBackend

            self._backend = CudaBackend(spec, self.format, decision.params)
        else:
            self._backend = CpuBackend(spec, self.format, decision.params, csr.nnz, threads)
            decision.notes.append(f"CPU threads per product: {self._backend.threads} "
                                  f"({self._backend.threads_reason})")
        self._threads_request = threads
        decision.notes.append(
            f"conversion to {self.format.name} and set-up took "
            f"{(time.perf_counter() - started) * 1e3:.2f} ms"
        )
        self._transposed = None

    @property
    def kernel(self) -> str:
        return self.decision.kernel

    @property
    def params(self) -> dict:
        return dict(self.decision.params)

    @property
    def threads(self) -> int | None:
        """The most threads one CPU product uses (None on CUDA)."""
        return getattr(self._backend, "threads", None)

    @property
    def nbytes(self) -> int:
        return self.format.nbytes

    def explain(self) -> str:
        """Human-readable account of the decision (see :class:`Decision`)."""
        return self.decision.explain()

    def __repr__(self):
        m, n = self.shape
        return (f"<SpMVOperator {m}x{n} {self.dtype} nnz={self._csr.nnz} kernel={self.kernel} "
                f"device={self.device}>")

    def matvec(self, x, out=None):
        """``A @ x``. Host (numpy) x gives a numpy result; a CUDA array gives a device result.

        ``out`` (optional) receives the result: same kind as x, shape (m,), the operator's dtype.
        x is converted to the operator's dtype. An (n, 1) column gives an (m, 1) result.
        """
        y = self._device_matvec(x, out)
        if y is not None:
            return y
        column = np.ndim(x) == 2
        x = check_vector(x, self.shape[1], self.dtype)
        if out is None:
            y = np.empty(self.shape[0], dtype=self.dtype)
        else:
            check_out(out, self.shape[0], self.dtype)
            y = out
        self._backend.host_matvec(x, y)
        return y.reshape(-1, 1) if column and out is None else y

    def _matvec(self, x):
        return self.matvec(x)

    def __matmul__(self, x):
        # Vectors go straight to matvec (LinearOperator's generic dispatch costs microseconds);
        # device arrays must, since LinearOperator would turn them into numpy arrays.
        if isinstance(x, np.ndarray) and x.ndim == 1:
            return self.matvec(x)
        y = self._device_matvec(x, None)
        return y if y is not None else super().__matmul__(x)

    def dot(self, x):
        y = self._device_matvec(x, None)
        return y if y is not None else super().dot(x)

    def _device_matvec(self, x, out):
        """``A @ x`` when x is a CUDA array (the backend's result); None for anything else.
        A numpy array is never one, and is let through without asking for the interface."""
        return None if type(x) is np.ndarray else self._backend.device_matvec(x, out)

    def _matmat(self, X):
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[0] != self.shape[1]:
            raise ValueError(f"X must have shape ({self.shape[1]}, k); got {X.shape}")
        Y = np.empty((self.shape[0], X.shape[1]), dtype=self.dtype)
        for j in range(X.shape[1]):
            Y[:, j] = self.matvec(np.ascontiguousarray(X[:, j]))
        return Y

    def transpose_operator(self) -> "SpMVOperator":
        """The operator for Aᵀ with the same kernel and device (built on first use)."""
        if self._transposed is None:
            csr_t = canonicalize(self._csr.T)
            self._transposed = SpMVOperator(csr_t, forced_decision(csr_t, self.kernel, self.device),
                                             self.device, self._threads_request)
        return self._transposed

    def _rmatvec(self, x):
        return self.transpose_operator().matvec(x)

    def _adjoint(self):  # real matrices only, so the adjoint is the transpose
        return self.transpose_operator()

    def _transpose(self):
        return self.transpose_operator()


class CpuBackend:
    """Runs the registry's numba CPU kernel on host arrays, on at most ``threads`` threads
    (:func:`autospmv.cpu_threads.choose_threads`: ``threads=``, ``AUTOSPMV_NUM_THREADS`` or a
    rule from the matrix size and the usable cores; 1 runs the serial kernel)."""

    def __init__(self, spec: registry.KernelSpec, fmt, params: dict, nnz: int, threads=None):
        self.threads, self.threads_reason = choose_threads(nnz, threads)
        self._run = bind_threaded(spec.cpu_kernel(), fmt, params, self.threads)

    def host_matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        if y.shape[0]:
            self._run(x, y)

    def device_matvec(self, x, out):
        """Refuses CUDA arrays; None for anything else (the caller takes the host path)."""
        if getattr(x, "__cuda_array_interface__", None) is None:
            return None
        raise TypeError(
            "this operator runs on the CPU and takes numpy arrays; got a CUDA device array "
            f"({type(x).__name__}); build the operator with device='cuda' to use device arrays"
        )
