"""The CUDA side of an operator: uploads the format once, then launches its program per call.

Host vectors go through two device buffers allocated once per operator; device vectors (anything
with ``__cuda_array_interface__``: CuPy, PyTorch, numba) are used in place, without a copy, and the
result is allocated as the same kind of array as x unless ``out`` is given. Launches go to the
legacy default stream, which orders them after work that CuPy, PyTorch or numba queued there.
"""

from __future__ import annotations

import weakref

import numpy as np
from numba import cuda

from .launch import SIMULATOR, DeviceProgram, device_pointer, upload


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
    return cai["data"][0]


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

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self._entries = {}  # id(vector) -> (weak reference, length checked, data pointer)

    def pointer(self, vector, length: int, what: str) -> int | None:
        """The data pointer of a valid device vector of ``length``; None if ``vector`` is not a
        CUDA array. Raises like :func:`_check_device_vector` for a CUDA array that does not fit."""
        entry = self._entries.get(id(vector))
        if entry is not None and entry[0]() is vector and entry[1] == length:
            return entry[2]
        cai = getattr(vector, "__cuda_array_interface__", None)
        if cai is None:
            return None
        pointer = _check_device_vector(cai, length, self.dtype, what)
        if type(vector).__module__.split(".")[0] in _FIXED_POINTER_MODULES:
            try:
                reference = weakref.ref(vector)
            except TypeError:  # a kind without weak references is checked on every call
                return pointer
            if len(self._entries) >= self.SIZE:
                self._entries.pop(next(iter(self._entries)))  # the oldest
            self._entries[id(vector)] = (reference, length, pointer)
        return pointer


class CudaBackend:
    def __init__(self, spec, fmt, params: dict):
        self.shape = fmt.shape
        self.dtype = np.dtype(fmt.dtype)
        arrays = upload(fmt)
        self.program: DeviceProgram = spec.cuda_builder()(fmt, params, arrays).load()
        self._x = cuda.device_array(self.shape[1], dtype=self.dtype)
        self._y = cuda.device_array(self.shape[0], dtype=self.dtype)
        # What the program takes for these buffers: the arrays under the simulator, their
        # addresses (fixed for the buffers' life) on a GPU.
        self._x_arg, self._y_arg = ((self._x, self._y) if SIMULATOR
                                    else (device_pointer(self._x), device_pointer(self._y)))
        self._vectors = CheckedVectors(self.dtype)
        self.device_nbytes = (sum(a.nbytes for a in arrays.values())
                              + self._x.nbytes + self._y.nbytes)
        """Device bytes held: the uploaded format and the two vector buffers."""

    def host_matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        if not y.shape[0]:
            return
        self._x.copy_to_device(x)
        self.program.run(self._x_arg, self._y_arg)
        self._y.copy_to_host(y)

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
        if m:
            self.program.run(x, y) if SIMULATOR else self.program.run(x_ptr, y_ptr)
        return y
