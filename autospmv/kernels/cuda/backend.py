"""The CUDA side of an operator: uploads the format once, then launches its program per call.

Host vectors go through two device buffers of the operator, allocated at its first product of a
host vector (an operator fed only device vectors never holds them); device vectors (anything
with ``__cuda_array_interface__``: CuPy, PyTorch, numba) are used in place, without a copy, and the
result is allocated as the same kind of array as x unless ``out`` is given.

Streams: for a CuPy or PyTorch x the kernels are queued on that library's *current* stream
(``cupy.cuda.get_current_stream()``, ``torch.cuda.current_stream(x.device)``), so they run after
the work that produced x and before the work the caller queues next, as the library's own
operations would; the call returns without waiting. For numba and other device arrays, and for
host vectors, they go to the legacy default stream, which orders them after work queued on any
blocking stream (numba's default). Host vectors are copied synchronously: the result is ready
when the call returns.

Threads: any number of threads may call one operator. The staging buffers of host vectors and
the launches' parameter buffers belong to the operator, so a lock serialises what uses them: a
host call holds it for its copy in, kernels and copy out; a device call only while it queues its
kernels. Checks: x and out must live on the operator's GPU (the GPU current when it was built),
which must also be the calling thread's current device; a read-only out is refused; out must not
overlap x.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
from numba import cuda

from ...validation import OUT_OVERLAPS_X
from .launch import SIMULATOR, DeviceProgram, device_pointer, upload

if not SIMULATOR:
    from cuda.bindings import driver


def _check_device_vector(cai: dict, length: int, dtype: np.dtype, what: str) -> int:
    """Validate a ``__cuda_array_interface__`` dict and return its data pointer.

    Runs on every call, so the common case costs a few dictionary look-ups: the type string is
    compared as a string (``dtype.str``) before anything is parsed.
    """
    shape = cai["shape"]
    if len(shape) != 1 or shape[0] != length:
        raise ValueError(f"{what} must have shape ({length},); got {tuple(shape)}")
    if cai["typestr"] != dtype.str and np.dtype(cai["typestr"]) != dtype:
        raise TypeError(f"{what} must have dtype {dtype}; got {np.dtype(cai['typestr'])}")
    strides = cai.get("strides")
    if strides is not None and length > 1 and strides[0] != dtype.itemsize:
        raise ValueError(f"{what} must be contiguous; got strides {tuple(strides)}")
    pointer, read_only = cai["data"]
    if read_only and what == "out":
        raise ValueError(READ_ONLY_OUT)
    return pointer


READ_ONLY_OUT = ("out is read-only (its __cuda_array_interface__ says so); pass a writable "
                 "array")


def device_ordinal(pointer: int) -> int:
    """The ordinal of the GPU that holds device address ``pointer``, or ValueError."""
    status, ordinal = driver.cuPointerGetAttribute(
        driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer)
    if status:
        raise ValueError(f"address {pointer:#x} is not memory that CUDA knows ({status!r})")
    return int(ordinal)


def current_ordinal() -> int | None:
    """The ordinal of the calling thread's current CUDA device; None in a thread that has no
    current CUDA context yet."""
    status, device = driver.cuCtxGetDevice()
    if status == driver.CUresult.CUDA_ERROR_INVALID_CONTEXT:
        return None
    if status:
        raise RuntimeError(f"CUDA driver error {status!r} in cuCtxGetDevice")
    return int(device)


def stream_of(x) -> int:
    """The stream handle to queue work for x on: the current stream of CuPy or PyTorch for
    their arrays, else 0 (the legacy default stream). See the module docstring."""
    module = type(x).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    if module == "torch":
        import torch

        return torch.cuda.current_stream(x.device).cuda_stream
    return 0


def _columns_and_stack(X):
    """For a 2-D CuPy array or PyTorch tensor X: a function giving X's column j as a contiguous
    vector, and one stacking result vectors into a 2-D array of the same kind; TypeError for
    other 2-D device arrays."""
    module = type(X).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return (lambda j: cupy.ascontiguousarray(X[:, j]),
                lambda columns, m, dtype: (cupy.stack(columns, axis=1) if columns
                                           else cupy.empty((m, 0), dtype=dtype)))
    if module == "torch":
        import torch

        return (lambda j: X[:, j].contiguous(),
                lambda columns, m, dtype: (torch.stack(columns, dim=1) if columns else torch.empty(
                    (m, 0), dtype=getattr(torch, dtype.name), device=X.device)))
    raise TypeError(f"A @ X for a 2-D device array takes a CuPy array or a PyTorch tensor; got "
                    f"{type(X).__name__}: multiply its columns one at a time")


def _empty_like_input(x, m: int, dtype: np.dtype):
    """A device vector of length m of the same kind as x (CuPy, PyTorch, else numba)."""
    module = type(x).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy.empty(m, dtype=dtype)
    if module == "torch":
        import torch

        return torch.empty(m, dtype=getattr(torch, dtype.name), device=x.device)
    return cuda.device_array(m, dtype=dtype)


_FIXED_POINTER_MODULES = ("numba", "cupy")
"""Array kinds whose data pointer never changes during the array's life (unlike torch tensors,
which ``resize_``/``set_`` can move)."""


class CheckedVectors:
    """Device vectors already validated for this operator, recognised by identity.

    numba and CuPy arrays build their ``__cuda_array_interface__`` dictionary on every access,
    about a microsecond each, a large part of a launch's host time. Solvers pass the same few
    vectors again and again, so the pointers of arrays whose pointer is fixed for life are kept,
    through weak references (an operator never keeps a vector alive), at most :attr:`SIZE` of them.
    """

    SIZE = 16

    def __init__(self, dtype: np.dtype, device: int | None = None):
        """``device``: the ordinal of the GPU the vectors must be on (None: not checked)."""
        self.dtype = dtype
        self.device = device
        # id(vector) -> (weak reference, length checked, data pointer, read-only)
        self._entries = {}

    def pointer(self, vector, length: int, what: str) -> int | None:
        """The data pointer of a valid device vector of ``length``; None if ``vector`` is not a
        CUDA array. Raises like :func:`_check_device_vector` for a CUDA array that does not fit
        (or, as ``out``, is read-only), and ValueError for one on another GPU than
        :attr:`device`."""
        entry = self._entries.get(id(vector))
        if entry is not None and entry[0]() is vector and entry[1] == length:
            if entry[3] and what == "out":
                raise ValueError(READ_ONLY_OUT)
            return entry[2]
        cai = getattr(vector, "__cuda_array_interface__", None)
        if cai is None:
            return None
        pointer = _check_device_vector(cai, length, self.dtype, what)
        if self.device is not None and length:
            ordinal = device_ordinal(pointer)
            if ordinal != self.device:
                raise ValueError(f"{what} is on GPU {ordinal}, but the operator's matrix is on "
                                 f"GPU {self.device}; move {what} there or prepare the matrix "
                                 f"on GPU {ordinal}")
        if type(vector).__module__.split(".")[0] in _FIXED_POINTER_MODULES:
            try:
                reference = weakref.ref(vector)
            except TypeError:  # a kind without weak references is checked on every call
                return pointer
            if len(self._entries) >= self.SIZE:
                try:  # the oldest; other threads may be evicting at the same time
                    self._entries.pop(next(iter(self._entries)), None)
                except (StopIteration, RuntimeError):
                    pass
            self._entries[id(vector)] = (reference, length, pointer, bool(cai["data"][1]))
        return pointer


class CudaBackend:
    """An operator's matrix on the current GPU and the calls that multiply it (see the module
    docstring for streams, threads and checks)."""

    def __init__(self, spec, fmt, params: dict):
        self.shape = fmt.shape
        self.dtype = np.dtype(fmt.dtype)
        self.device = None if SIMULATOR else cuda.current_context().device.id
        arrays = upload(fmt, extra_bytes=sum(self.shape) * self.dtype.itemsize)  # + staging
        self.program: DeviceProgram = spec.cuda_builder()(fmt, params, arrays).load()
        self._format_nbytes = sum(a.nbytes for a in arrays.values())
        self._staging = None  # (x buffer, y buffer, what the program takes for them)
        self._vectors = CheckedVectors(self.dtype, self.device)
        self._lock = threading.Lock()

    @property
    def device_nbytes(self) -> int:
        """Device bytes held: the uploaded format, and the two staging buffers of host vectors
        once a product of a host vector has allocated them."""
        if self._staging is None:
            return self._format_nbytes
        return self._format_nbytes + self._staging[0].nbytes + self._staging[1].nbytes

    def _staging_buffers(self):
        """The staging buffers of host vectors and the program's arguments for them (the arrays
        under the simulator, their addresses, fixed for the buffers' life, on a GPU), allocated
        on first use; called with the lock held."""
        if self._staging is None:
            x = cuda.device_array(self.shape[1], dtype=self.dtype)
            y = cuda.device_array(self.shape[0], dtype=self.dtype)
            self._staging = (x, y, (x, y) if SIMULATOR else (device_pointer(x), device_pointer(y)))
        return self._staging

    def _check_current_device(self) -> None:
        """The calling thread's current GPU must be the operator's; a thread that has not used
        CUDA yet is given the operator's GPU (as numba would give it GPU 0)."""
        if self.device is None:
            return
        current = current_ordinal()
        if current is None:
            cuda.select_device(self.device)
        elif current != self.device:
            raise ValueError(f"this operator's matrix is on GPU {self.device}, but the calling "
                             f"thread's current GPU is {current}; call it inside "
                             f"numba.cuda.gpus[{self.device}] or the equivalent of your library")

    def host_matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        if not y.shape[0]:
            return
        self._check_current_device()
        with self._lock:
            staged_x, staged_y, (x_arg, y_arg) = self._staging_buffers()
            staged_x.copy_to_device(x)
            self.program.run(x_arg, y_arg, 0)
            staged_y.copy_to_host(y)

    def device_matmat(self, X):
        """``A @ X`` for a 2-D CUDA array X of shape (n, k), a CuPy array or a PyTorch tensor:
        its columns multiplied one at a time on the device (as :meth:`device_matvec`), the result
        (m, k) of the same kind; None if X is not a CUDA array."""
        if getattr(X, "__cuda_array_interface__", None) is None:
            return None
        m, n = self.shape
        if X.shape[0] != n:
            raise ValueError(f"X must have shape ({n}, k); got {tuple(X.shape)}")
        column, stack = _columns_and_stack(X)
        return stack([self.device_matvec(column(j), None) for j in range(X.shape[1])], m,
                     self.dtype)

    def device_matvec(self, x, out):
        """``y = A @ x`` for a CUDA array x, on the device; None if x is not a CUDA array."""
        m, n = self.shape
        x_ptr = self._vectors.pointer(x, n, "x")
        if x_ptr is None:
            return None
        y = _empty_like_input(x, m, self.dtype) if out is None else out
        y_ptr = self._vectors.pointer(y, m, "out")
        if y_ptr is None:
            raise TypeError(f"out must be a CUDA device array like x; got {type(y).__name__}")
        size = self.dtype.itemsize
        if m and n and x_ptr < y_ptr + m * size and y_ptr < x_ptr + n * size:
            raise ValueError(OUT_OVERLAPS_X)
        if m:
            self._check_current_device()
            stream = stream_of(x)
            with self._lock:
                if SIMULATOR:
                    self.program.run(x, y, stream)
                else:
                    self.program.run(x_ptr, y_ptr, stream)
        return y
