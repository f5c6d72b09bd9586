"""Permutations on the GPU: the gathers that carry vectors between the caller's order and the
order an operator's matrix is stored in (:mod:`autospmv.kernels.cpu.permute` says how the
product is composed).

``gather_kernel`` writes ``dst[i] = src[index[i]]``, one thread per element of dst: the writes
and the index reads are coalesced, the reads of src follow the permutation. ``gather_rows_kernel``
does the same for the rows of a row-major (n, k) block. These kernels are not part of the
shipped cubin archives (:mod:`.ship`): they compile on first use (well under a second) and are
cached on disk like every other kernel.

:class:`PermutedCudaBackend` wraps the CUDA backend of ``P A Pᵀ``: a device x is gathered on
x's stream (the stream the inner product is queued on, :func:`.backend.stream_of`) into a
workspace of x's kind and dtype, allocated once per (kind, dtype, stream); the inner backend
multiplies it into a second workspace, which is gathered into the result on the same stream.
Nothing waits for the GPU. Host vectors are gathered on the host around the inner backend's
host product, which copies synchronously.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import cuda

from ..._support.validation import result_dtype
from ..cpu.permute import permute as host_permute
from . import jit
from .backend import VECTOR_DTYPES, empty_like_input, row_major, stream_of
from .launch import SIMULATOR, X, Y, Launch, device_pointer

BLOCK = 256


@jit(cache=True)
def gather_kernel(index, src, dst):
    i = cuda.grid(1)
    if i < dst.shape[0]:
        dst[i] = src[index[i]]


@jit(cache=True)
def gather_rows_kernel(index, k, src, dst):
    i = cuda.grid(1)
    if i < dst.shape[0]:
        row = i // k
        dst[i] = src[index[row] * k + (i - row * k)]


class Gather:
    """``dst = src[index]`` for device vectors of given dtypes, launched with the arguments
    fixed once (:class:`.launch.Launch`); ``k`` > 1 gathers rows of k elements."""

    def __init__(self, index, length: int, src_dtype, dst_dtype, k: int = 1):
        if k == 1:
            args = [index, X, Y]
        else:
            args = [index, np.int64(k), X, Y]
        kernel = gather_kernel if k == 1 else gather_rows_kernel
        total = length * k
        launch = Launch(kernel, -(-total // BLOCK), BLOCK, args, src_dtype)
        self.launch = launch.for_vectors(src_dtype, dst_dtype)
        self.total = total
        if SIMULATOR:
            self.run = self.launch.simulate
        else:
            self.launch.load(total, total)
            self.run = self.launch.fire()

    def __call__(self, src, dst, stream: int) -> None:
        """Queue the gather: on a GPU ``src`` and ``dst`` are device addresses, under the
        simulator device arrays."""
        if self.total:
            self.run(src, dst, stream)


class PermutedCudaBackend:
    """The CUDA backend of ``P A Pᵀ`` seen in the caller's order (see the module docstring).
    ``perm`` and ``inverse``: host arrays, uploaded once."""

    def __init__(self, inner, perm: np.ndarray, inverse: np.ndarray):
        self.inner = inner
        self.perm = perm
        self.inverse = inverse
        self._perm = cuda.to_device(perm)
        self._inverse = cuda.to_device(inverse)
        self._gathers = {}  # (which, src dtype, dst dtype, k) -> Gather
        self._workspaces = {}  # (module, x dtype, stream) -> (x_p, y_p, x_p ptr, y_p ptr)
        self._lock = threading.Lock()

    @property
    def device_order(self) -> tuple:
        """``(perm, inverse)`` on the device (numba device arrays, uploaded once)."""
        return self._perm, self._inverse

    def __getattr__(self, name):  # multi, program, shape, dtype
        return getattr(self.inner, name)

    @property
    def device_nbytes(self) -> int:
        """The inner backend's bytes, the permutation's two arrays and the workspaces."""
        return (self.inner.device_nbytes + self._perm.nbytes + self._inverse.nbytes
                + sum(w[0].nbytes + w[1].nbytes for w in self._workspaces.values()))

    def _gather(self, which: str, src_dtype, dst_dtype, k: int = 1) -> Gather:
        key = (which, np.dtype(src_dtype), np.dtype(dst_dtype), k)
        gather = self._gathers.get(key)
        if gather is None:
            index = self._perm if which == "perm" else self._inverse
            gather = self._gathers[key] = Gather(index, index.shape[0], src_dtype, dst_dtype, k)
        return gather

    def host_matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        if not y.shape[0]:
            return
        x_p = np.empty_like(x)
        y_p = np.empty_like(y)
        host_permute(self.perm, self.inverse, x, x_p)
        self.inner.host_matvec(x_p, y_p)
        host_permute(self.inverse, self.perm, y_p, y)

    def set_up_multi(self, matrix_csr, notes: list | None = None, spmm_rule=None
                     ) -> tuple[str, tuple]:
        return self.inner.set_up_multi(matrix_csr, notes, spmm_rule)

    def host_matmat(self, X: np.ndarray, Y: np.ndarray) -> None:
        X_p = np.empty_like(X)
        Y_p = np.empty_like(Y)
        host_permute(self.perm, self.inverse, X, X_p)
        self.inner.host_matmat(X_p, Y_p)
        host_permute(self.inverse, self.perm, Y_p, Y)

    def device_matvec(self, x, out):
        """``A @ x`` in the caller's order for a CUDA array x (None for anything else): x
        gathered into the matrix's order, the inner product, the result gathered back, all
        queued on x's stream."""
        inner = self.inner
        m, n = inner.shape
        checked = inner.checked_pair(x, out)
        if checked is None:
            return None
        y, x_ptr, y_ptr, x_dtype, y_dtype = checked
        if not m:
            return y
        stream = 0 if SIMULATOR else stream_of(x)
        module = type(x).__module__.split(".")[0]
        with self._lock:
            key = (module, x_dtype, stream)
            work = self._workspaces.get(key)
            if work is None:
                x_p = empty_like_input(x, n, x_dtype)
                y_p = empty_like_input(x, m, y_dtype)
                work = self._workspaces[key] = (x_p, y_p, device_pointer(x_p),
                                                device_pointer(y_p))
            x_p, y_p, xp_ptr, yp_ptr = work
            to_matrix = self._gather("perm", x_dtype, x_dtype)
            back = self._gather("inverse", y_dtype, y_dtype)
            if SIMULATOR:
                to_matrix(x, x_p, 0)
                inner.device_matvec(x_p, y_p)
                back(y_p, y, 0)
            else:
                to_matrix(x_ptr, xp_ptr, stream)
                inner.device_matvec(x_p, y_p)
                back(yp_ptr, y_ptr, stream)
        return y

    def device_matmat(self, X):
        """``A @ X`` in the caller's order for a 2-D CUDA array X (None for anything else):
        the rows of X gathered into an array made for the call, the inner multi-vector
        product, its rows gathered back into the result, on X's stream."""
        cai = getattr(X, "__cuda_array_interface__", None)
        if cai is None:
            return None
        inner = self.inner
        m, n = inner.shape
        shape = tuple(cai["shape"])
        if len(shape) != 2 or shape[0] != n:
            raise ValueError(f"X must have shape ({n}, k); got {shape}")
        x_dtype = np.dtype(cai["typestr"])
        if x_dtype not in VECTOR_DTYPES:
            return inner.device_matmat(X)  # refused there, with its message
        k = shape[1]
        y_dtype = result_dtype(inner.dtype, x_dtype)
        X, cai = row_major(X, cai)
        X_p = empty_like_input(X, (n, k), x_dtype)
        if n and k:
            stream = 0 if SIMULATOR else stream_of(X)
            with self._lock:
                to_matrix = self._gather("perm", x_dtype, x_dtype, k)
            if SIMULATOR:
                to_matrix(X.reshape(n * k), X_p.reshape(n * k), 0)
            else:
                to_matrix(cai["data"][0], device_pointer(X_p), stream)
        Y_p = inner.device_matmat(X_p)
        Y = empty_like_input(X, (m, k), y_dtype)
        if m and k:
            with self._lock:
                back = self._gather("inverse", y_dtype, y_dtype, k)
            if SIMULATOR:
                back(Y_p.reshape(m * k), Y.reshape(m * k), 0)
            else:
                back(device_pointer(Y_p), device_pointer(Y), stream_of(X))
        return Y
