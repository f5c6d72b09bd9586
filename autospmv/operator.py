"""SpMVOperator: a converted matrix bound to one kernel on one device.

All checking of vectors happens here, once per call, before a kernel sees them; kernels only know
their arrays. Everything that can be done once (conversion, upload, launch parameters) is done when
the operator is built, so a call only validates, launches and (for host vectors) copies.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from . import registry
from .formats.base import SparseFormat
from .cache import compile_timer
from .device import (DeviceCSR, canonical_device_csr, csr_from_format, device_format,
                     is_device_matrix, transposed, upload_csr)
from .cpu_threads import choose_threads
from .formats.csr import CSRFormat
from .kernels.cpu import bind_threaded
from .kernels.cpu.csr import bind_transposed
from .selector import Decision, forced_decision
from .validation import canonicalize, check_out, check_vector


class SpMVOperator(LinearOperator):
    """``y = A @ x`` with a fixed kernel; a ``scipy.sparse.linalg.LinearOperator``.

    Attributes: ``kernel``, ``params``, ``device``, ``decision``, ``shape``, ``dtype``, ``nnz``;
    ``format``, the converted storage the CPU kernel runs on (None on the GPU: the format lives
    in device memory only, and the host copy is released after the upload); ``memory``, the
    bytes the operator holds, ``{"host": ..., "device": ...}``, and ``nbytes``, their sum;
    ``threads`` (on the CPU, the most threads a product uses; see :mod:`autospmv.cpu_threads`).

    The operator is a snapshot of A: changing A afterwards changes neither ``op`` nor ``op.T``.
    Besides what it runs, it keeps what :meth:`transpose_operator` builds Aᵀ from when first
    asked: a GPU-resident input matrix itself; on the GPU (with CuPy) a copy of the row pointer,
    counted in ``memory["host"]`` (Aᵀ is rebuilt there from the format); on the CPU the
    canonical CSR when ``canonicalize`` made it (a copy the operator owns), and nothing more
    when the caller's CSR was already canonical (Aᵀ is rebuilt from the format).
    """

    def __init__(self, csr: sp.csr_matrix, decision: Decision, device: str, threads=None, *,
                 source=None, borrowed: bool = False, uploaded=None):
        """``source``: a matrix on the GPU (CuPy, torch) the operator was prepared from; its
        transpose is built from it. ``borrowed``: csr's arrays belong to the caller, who may
        change them later; the operator then copies the arrays of its format that share memory
        with them (a CSR kernel's format is csr's own arrays), so that it is a snapshot of the
        matrix as it was when built (see :meth:`transpose_operator` for Aᵀ). ``uploaded``: the
        host ``csr`` already on the GPU (:func:`autospmv.device.upload_csr`, a copy), converted
        from instead of uploading again."""
        super().__init__(dtype=csr.dtype, shape=csr.shape)
        self.decision = decision
        self.device = device
        self.nnz = int(csr.nnz)
        spec = registry.get(decision.kernel)
        spec.check_params(decision.params)
        if device == "cuda":
            from .kernels.cuda.backend import CudaBackend  # imported outside the compile timer
            from .kernels.cuda.launch import SIMULATOR as SIMULATED
        host_csr = csr
        with compile_timer() as compiled:
            started = time.perf_counter()
            if device == "cuda" and not isinstance(csr, DeviceCSR) and not SIMULATED:
                # with CuPy: upload the CSR (unless prepare() did), convert on the GPU
                csr = uploaded or upload_csr(csr) or csr
            if isinstance(csr, DeviceCSR):  # a matrix on the GPU: converted there
                fmt = device_format(decision.kernel, csr, decision.params)
            else:
                fmt = spec.convert(csr, decision.params, device)
                if borrowed:
                    fmt = _own_arrays(fmt, (csr.data, csr.indices, csr.indptr))
            if device == "cuda":
                self._backend = CudaBackend(spec, fmt, decision.params)
            else:
                self._backend = CpuBackend(spec, fmt, decision.params, csr.nnz, threads)
                decision.notes.append(f"CPU threads per product: {self._backend.threads} "
                                      f"({self._backend.threads_reason})")
            elapsed = time.perf_counter() - started
        self.format = fmt if device == "cpu" else None
        self._threads_request = threads
        decision.notes.append(
            f"conversion to {fmt.name} {'on the GPU ' if isinstance(csr, DeviceCSR) else ''}"
            f"and set-up took {(elapsed - compiled.total) * 1e3:.2f} ms"
        )
        if compiled.total:
            decision.notes.append(compiled.note(f"the conversion to {fmt.name} and the set-up"))
        # What Aᵀ is built from, as the operator saw A: a matrix on the GPU itself; on the GPU
        # with CuPy, the format converted there and the row pointer (copied if the caller's),
        # rebuilt to CSR on first use; otherwise the canonical CSR when it is the operator's own
        # (canonicalize copied it), and for the caller's own CSR the CPU format (rebuilt to CSR
        # when needed) or, under numba-cuda's simulator, a copy taken now.
        self._on_device = None
        """(GPU format, host row pointer, array module) that Aᵀ is rebuilt from, or None."""
        if source is not None:
            self._source = source
        elif isinstance(csr, DeviceCSR):
            self._source = None
            indptr = host_csr.indptr.copy() if borrowed else host_csr.indptr
            self._on_device = (fmt, indptr, csr.xp)
        elif not borrowed:
            self._source = host_csr
        else:
            self._source = None if device == "cpu" else host_csr.copy()
        host = fmt.nbytes if device == "cpu" else 0
        if isinstance(self._source, sp.csr_matrix) and (borrowed or device == "cuda"):
            host += self._source.data.nbytes + self._source.indices.nbytes
            host += self._source.indptr.nbytes
        if self._on_device is not None:
            host += self._on_device[1].nbytes
        self._host_nbytes = host
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
    def memory(self) -> dict[str, int]:
        """Bytes the operator holds now, ``{"host": ..., "device": ...}``.

        Host bytes are those of the CPU format's arrays, some of which may be the canonical
        CSR's own (CSR kernels run on it directly, COO shares its column and value arrays), and
        what Aᵀ is built from (see the class docstring); device bytes are the uploaded format,
        plus the two staging buffers of host vectors from the first product of a host vector
        on (:mod:`autospmv.kernels.cuda.backend`)."""
        return {"host": self._host_nbytes,
                "device": getattr(self._backend, "device_nbytes", 0)}

    @property
    def nbytes(self) -> int:
        """Bytes the operator holds on the host and the device now (see :attr:`memory`)."""
        memory = self.memory
        return memory["host"] + memory["device"]

    def explain(self) -> str:
        """Human-readable account of the decision (see :class:`Decision`)."""
        return self.decision.explain()

    def __repr__(self):
        m, n = self.shape
        return (f"<SpMVOperator {m}x{n} {self.dtype} nnz={self.nnz} kernel={self.kernel} "
                f"device={self.device}>")

    def matvec(self, x, out=None):
        """``A @ x``. Host (numpy) x gives a numpy result; a CUDA array gives a device result.

        ``out`` (optional) receives the result: same kind as x, shape (m,), the operator's dtype,
        writable, not overlapping x (refused with ValueError: the kernels read x while they
        write out). x is converted to the operator's dtype. An (n, 1) column gives an (m, 1)
        result. Any number of threads may call one operator at once.
        """
        y = self._device_matvec(x, out)
        if y is not None:
            return y
        column = np.ndim(x) == 2
        x = check_vector(x, self.shape[1], self.dtype)
        if out is None:
            y = np.empty(self.shape[0], dtype=self.dtype)
        else:
            check_out(out, self.shape[0], self.dtype, x)
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
        y = self._device_product(x)
        return y if y is not None else super().__matmul__(x)

    def dot(self, x):
        y = self._device_product(x)
        return y if y is not None else super().dot(x)

    def matmat(self, X):
        """``A @ X`` for a 2-D X: a numpy array (or anything SciPy's ``matmat`` takes) gives a
        numpy result; a 2-D CuPy array or PyTorch tensor gives a device result of its kind,
        column by column on the GPU."""
        if _is_device_array(X) and len(getattr(X, "shape", ())) == 2:
            return self._backend.device_matmat(X)
        return super().matmat(X)

    def rmatvec(self, x):
        """``Aᵀ @ x``. A CUDA array goes to the transposed operator on the device (see
        :meth:`transpose_operator`) and gives a device result; anything else is SciPy's
        ``rmatvec``."""
        if _is_device_array(x):
            return self.transpose_operator().matvec(x)
        return super().rmatvec(x)

    def rmatmat(self, X):
        """``Aᵀ @ X`` for a 2-D X, on the device for a CuPy array or PyTorch tensor (as
        :meth:`matmat` of the transposed operator)."""
        if _is_device_array(X):
            return self.transpose_operator().matmat(X)
        return super().rmatmat(X)

    def _device_matvec(self, x, out):
        """``A @ x`` when x is a CUDA array (the backend's result); None for anything else.
        A numpy array is never one, and is let through without asking for the interface."""
        return None if type(x) is np.ndarray else self._backend.device_matvec(x, out)

    def _device_product(self, x):
        """``A @ x`` for a CUDA array x: a vector as :meth:`matvec`, a 2-D array as
        :meth:`matmat`; None for anything else."""
        if _is_device_array(x) and len(getattr(x, "shape", ())) == 2:
            return self._backend.device_matmat(x)
        return self._device_matvec(x, None)

    def _matmat(self, X):
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[0] != self.shape[1]:
            raise ValueError(f"X must have shape ({self.shape[1]}, k); got {X.shape}")
        Y = np.empty((self.shape[0], X.shape[1]), dtype=self.dtype)
        for j in range(X.shape[1]):
            Y[:, j] = self.matvec(np.ascontiguousarray(X[:, j]))
        return Y

    def transpose_operator(self) -> "SpMVOperator":
        """The operator for Aᵀ with the same kernel and device (built on first use, from the
        matrix the operator was prepared from)."""
        if self._transposed is None and self._on_device is not None:
            fmt, indptr, xp = self._on_device
            self._transposed = self._transpose_on_device(csr_from_format(fmt, indptr, xp).sparse())
            self._on_device = None  # the rebuilt CSR goes with this call
            self._host_nbytes -= indptr.nbytes
        if self._transposed is None and is_device_matrix(self._source):
            self._transposed = self._transpose_on_device(self._source)
        if self._transposed is None:
            source = self._source if self._source is not None else self.format.to_csr()
            csr_t = canonicalize(source.T)
            decision = forced_decision(csr_t, self.kernel, self.device)
            self._transposed = SpMVOperator(csr_t, decision, self.device, self._threads_request)
        return self._transposed

    def _transpose_on_device(self, source) -> "SpMVOperator":
        source_t = transposed(source)
        csr_t = canonical_device_csr(source_t)
        decision = forced_decision(csr_t.structure(), self.kernel, self.device)
        return SpMVOperator(csr_t, decision, self.device, self._threads_request, source=source_t)

    def _rmatvec(self, x):
        run = getattr(self._backend, "host_rmatvec", None)
        if run is None:
            return self.transpose_operator().matvec(x)
        z = check_vector(x, self.shape[0], self.dtype)
        y = np.empty(self.shape[1], dtype=self.dtype)
        run(z, y)
        return y

    def __reduce__(self):
        """Pickling: an operator on the CPU pickles as its matrix (the canonical CSR) and its
        decision, and unpickles by converting that matrix again with the same kernel, parameters
        and thread request; nothing is decided again. An operator on the GPU refuses: its matrix
        lives in device memory, and pickling would copy it to the host. ``copy.copy`` and
        ``copy.deepcopy`` go the same way (a converted copy on the CPU, a TypeError on the GPU)."""
        if self.device != "cpu":
            raise TypeError("an operator on the GPU cannot be pickled (its matrix lives in device "
                            "memory); pickle the matrix and prepare it again where it is loaded")
        csr = self._source if self._source is not None else self.format.to_csr()
        return _unpickled_operator, (csr, self.decision, self._threads_request)

    def _adjoint(self):  # real matrices only, so the adjoint is the transpose
        return self.transpose_operator()

    def _transpose(self):
        return self.transpose_operator()


def _unpickled_operator(csr, decision: Decision, threads) -> SpMVOperator:
    """The CPU operator that :meth:`SpMVOperator.__reduce__` pickled."""
    return SpMVOperator(csr, decision, "cpu", threads)


def _is_device_array(x) -> bool:
    """Whether x is a CUDA array (it has ``__cuda_array_interface__``); a numpy array is not,
    and is answered without asking."""
    return type(x) is not np.ndarray and getattr(x, "__cuda_array_interface__", None) is not None


def _own_arrays(fmt: SparseFormat, sources: tuple) -> SparseFormat:
    """``fmt`` with copies of its arrays (also those of nested formats) that may share memory
    with any of ``sources``."""
    changes = {}
    for field in dataclasses.fields(fmt):
        value = getattr(fmt, field.name)
        if isinstance(value, np.ndarray) and any(np.may_share_memory(value, s) for s in sources):
            changes[field.name] = value.copy()
        elif isinstance(value, SparseFormat):
            owned = _own_arrays(value, sources)
            if owned is not value:
                changes[field.name] = owned
    return dataclasses.replace(fmt, **changes) if changes else fmt


class CpuBackend:
    """Runs the registry's numba CPU kernel on host arrays, on at most ``threads`` threads
    (:func:`autospmv.cpu_threads.choose_threads`: ``threads=``, ``AUTOSPMV_NUM_THREADS`` or a
    rule from the matrix size and the usable cores; 1 runs the serial kernel)."""

    def __init__(self, spec: registry.KernelSpec, fmt, params: dict, nnz: int, threads=None):
        self.threads, self.threads_reason = choose_threads(nnz, threads, max(fmt.shape))
        self._run = bind_threaded(spec.cpu_kernel(), fmt, params, self.threads)
        self.host_rmatvec = None
        """``run(z, y)``: y = Aᵀ z without building Aᵀ, for a CSR format run serially (its
        transposed operator would run serially too: same nonzeros, same dimensions); None
        otherwise (the operator's rmatvec then uses Aᵀ's own operator)."""
        if isinstance(fmt, CSRFormat) and self.threads == 1:
            self.host_rmatvec = bind_transposed(fmt)

    def host_matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        if y.shape[0]:
            self._run(x, y)

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
