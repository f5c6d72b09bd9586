"""Low-overhead kernel launches and the per-operator device program.

Why this module exists: a plain numba-cuda launch (``kernel[grid, block](*args)``) re-examines
every argument on every call (type checks, device-array wrapping, argument flattening) and costs
tens of microseconds of host time, while an SpMV on a million nonzeros is a few microseconds of GPU
work. A matrix's arrays never change between calls, so :class:`Launch` flattens the kernel's
arguments *once*, into the exact parameter buffer the driver expects, and each call only writes the
two pointers that change (``x`` and ``y``) before calling the driver's ``cuLaunchKernel`` (through
``cuda.bindings``, the thinnest wrapper available: about a microsecond above the driver itself).

numba passes a 1-D array to a kernel as seven parameters (meminfo, parent, nitems, itemsize, data
pointer, shape, stride); scalars are passed by value with their own width. The buffer below
reproduces that layout from the compiled kernel's argument types.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) there is no driver: :class:`Launch` then
calls the dispatcher normally with the same arguments, so the kernels' semantics are checked by
the same code path up to the launch itself.
"""

from __future__ import annotations

import copy
import ctypes
import functools

import numpy as np
from numba import cuda, types
from numba.np.numpy_support import from_dtype

from . import grid_dependency

SIMULATOR = bool(cuda.config.ENABLE_CUDASIM)

if not SIMULATOR:
    from cuda.bindings import driver

    from . import cubins


class Slot:
    """Placeholder for a vector that changes on every call (``X`` or ``Y``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name


X = Slot("X")
Y = Slot("Y")


def _driver_error(status, what: str) -> RuntimeError:
    return RuntimeError(f"CUDA driver error {status!r} in {what}")


def device_pointer(array) -> int:
    """Device address of anything exposing ``__cuda_array_interface__``."""
    return array.__cuda_array_interface__["data"][0]


_SCALAR_CTYPES = {
    types.int32: ctypes.c_int32, types.int64: ctypes.c_int64,
    types.uint32: ctypes.c_uint32, types.uint64: ctypes.c_uint64,
    types.float32: ctypes.c_float, types.float64: ctypes.c_double,
}


def numba_type(value) -> types.Type:
    """The numba type a kernel argument (an array or a numpy scalar) is compiled for."""
    if isinstance(value, (np.integer, np.floating)):
        return from_dtype(value.dtype)
    return types.Array(from_dtype(value.dtype), 1, "C")


def overlapping_config(grid: int, block: int, stream: int = 0):
    """The ``cuLaunchKernelEx`` configuration of a one-dimensional launch with programmatic
    stream serialization allowed (see :mod:`.grid_dependency`)."""
    attribute = driver.CUlaunchAttribute()
    ids = driver.CUlaunchAttributeID
    attribute.id = ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes, config.hStream = 0, stream
    config.attrs, config.numAttrs = [attribute], 1
    return config


@functools.lru_cache(maxsize=None)
def _ptx(py_func, argtypes: tuple, cc: tuple, bounds) -> str:
    """:meth:`Launch.ptx`'s compilation, kept per (kernel, argument types, compute capability,
    launch bounds)."""
    ptx, _ = cuda.compile_ptx(py_func, argtypes, cc=cc, launch_bounds=bounds)
    return ptx


_HANDLES: dict = {}
"""``(dispatcher, argument types, device ordinal)`` -> the loaded kernel's handle."""


def _function_handle(dispatcher, argtypes: tuple, device_id: int) -> int:
    """:func:`cubins.function_handle`, remembered for the process: launches of one kernel
    with other arrays (a solver's steps on each solve's workspace) find it without hashing the
    kernel's sources again."""
    key = (dispatcher, argtypes, device_id)
    handle = _HANDLES.get(key)
    if handle is None:
        handle = _HANDLES[key] = cubins.function_handle(dispatcher, argtypes)
    return handle


class Launch:
    """One kernel launch with its grid, block and arguments fixed in advance.

    ``args`` mixes arrays, numpy scalars (typed: ``np.int32(n)``) and the slots ``X``/``Y``,
    typed as 1-D arrays of ``vector_dtype`` (see :meth:`for_vectors` for other vector types).
    ``dispatcher`` is a ``cuda.jit`` function. Nothing is compiled until :meth:`load` (for the GPU)
    or :meth:`ptx` (for inspection, no GPU needed, so host arrays may stand in for device arrays).
    ``overlaps_previous``: launched as a programmatic dependent launch, which may start while the
    kernel before it runs, where the GPU has it (compute capability
    :data:`.grid_dependency.SUPPORTED_FROM`); the kernel must follow :mod:`.grid_dependency`.
    """

    def __init__(self, dispatcher, grid: int, block: int, args: list, vector_dtype,
                 overlaps_previous: bool = False):
        self.dispatcher = dispatcher
        self.grid = max(1, int(grid))
        self.block = int(block)
        self.args = list(args)
        self.overlaps_previous = overlaps_previous
        slot_type = vector_type(vector_dtype)
        self.argtypes = tuple(slot_type if isinstance(a, Slot) else numba_type(a)
                              for a in self.args)
        self._function = None

    def for_vectors(self, x_dtype, y_dtype) -> "Launch":
        """This launch (same grid, block and arrays) compiled for x of ``x_dtype`` and y of
        ``y_dtype``: numba-cuda compiles a kernel per argument types, so a float32 matrix's
        kernel runs on float64 vectors without a copy of the matrix."""
        launch = copy.copy(self)
        types_of = {"X": vector_type(x_dtype), "Y": vector_type(y_dtype)}
        launch.argtypes = tuple(types_of[a.name] if isinstance(a, Slot) else ty
                                for a, ty in zip(self.args, self.argtypes))
        launch._function = None
        return launch

    def ptx(self, cc=(9, 0)) -> str:
        """PTX for this launch's argument types (compiles without a GPU; the same kernel,
        argument types and compute capability compile once per process)."""
        bounds = getattr(self.dispatcher, "targetoptions", {}).get("launch_bounds")
        return _ptx(self.dispatcher.py_func, self.argtypes, tuple(cc), bounds)

    def load(self, x_len: int, y_len: int) -> None:
        """Compile for the argument types (or load the kernel from the cubin cache,
        :mod:`autospmv.kernels.cuda.cubins`) and build the driver's parameter buffer (GPU
        only)."""
        if SIMULATOR:
            return
        device = cuda.current_context().device
        self._overlaps = (self.overlaps_previous
                          and device.compute_capability >= grid_dependency.SUPPORTED_FROM)
        self._function = driver.CUkernel(_function_handle(self.dispatcher, self.argtypes,
                                                          device.id))
        lengths = {"X": x_len, "Y": y_len}
        self._storage = []  # the ctypes values the parameter array points into
        self._slots = {}  # slot name -> ctypes value holding that vector's data pointer
        for value, ty in zip(self.args, self.argtypes):
            if isinstance(ty, types.Array):
                is_slot = isinstance(value, Slot)
                length = lengths[value.name] if is_slot else value.shape[0]
                itemsize = ty.dtype.bitwidth // 8
                data = ctypes.c_uint64(0 if is_slot else device_pointer(value))
                if is_slot:
                    self._slots[value.name] = data
                self._storage += [ctypes.c_uint64(0), ctypes.c_uint64(0), ctypes.c_int64(length),
                                  ctypes.c_int64(itemsize), data, ctypes.c_int64(length),
                                  ctypes.c_int64(itemsize)]
            else:
                self._storage.append(_SCALAR_CTYPES[ty](value.item()))
        self._params = (ctypes.c_void_p * len(self._storage))(
            *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in self._storage]
        )
        self._x = self._slots.get("X", ctypes.c_uint64(0))
        self._y = self._slots.get("Y", ctypes.c_uint64(0))

    def fire(self):
        """A closure ``f(x_ptr, y_ptr, stream)`` doing exactly what a call does on a GPU, with
        every attribute look-up done in advance (the per-call path of an operator).

        The closure writes x and y into this launch's one parameter buffer, which the driver
        copies when the launch is queued: calls from several threads must not interleave
        (the CUDA backend holds a lock around them). The closure holds this launch, whose
        parameter buffer the driver reads through the address it passes, so a caller may keep
        the closure alone."""
        x_slot, y_slot, launch = self._x, self._y, driver.cuLaunchKernel
        function, grid, block, params = (self._function, self.grid, self.block,
                                         ctypes.addressof(self._params))
        if self._overlaps:
            return self._fire_overlapping(function, params)

        def launch_kernel(x, y, stream, _owner=self):
            x_slot.value = x
            y_slot.value = y
            status, = launch(function, grid, 1, 1, block, 1, 1, 0, stream, params, 0)
            if status:
                raise _driver_error(status, "cuLaunchKernel")

        return launch_kernel

    def _fire_overlapping(self, function, params):
        """:meth:`fire` through ``cuLaunchKernelEx`` with programmatic stream serialization
        allowed (see :mod:`.grid_dependency`); the launch configuration is built once."""
        config = overlapping_config(self.grid, self.block)
        x_slot, y_slot, launch = self._x, self._y, driver.cuLaunchKernelEx

        def launch_kernel(x, y, stream, _owner=self):
            x_slot.value = x
            y_slot.value = y
            config.hStream = stream
            status, = launch(config, function, params, 0)
            if status:
                raise _driver_error(status, "cuLaunchKernelEx")

        return launch_kernel

    def simulate(self, x, y, stream=0) -> None:
        """Run under the CUDA simulator, through the dispatcher, with device arrays x and y.
        NumPy arguments go in as the simulator's device arrays over the same memory, as the
        GPU would use them: given NumPy arrays, the simulator runs the kernel on copies and
        writes each back after it, so that of two arguments viewing one buffer the later
        write-back would undo the kernel's writes through the other."""
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        values = [x if a is X else y if a is Y
                  else FakeCUDAArray(a) if isinstance(a, np.ndarray) else a for a in self.args]
        self.dispatcher[self.grid, self.block](*values)


def launch_once(kernel, threads: int, block: int, args: list, xp) -> None:
    """``kernel`` on ``threads`` threads in blocks of ``block``, queued on the current stream of
    the array module ``xp`` (CuPy), or run by numba-cuda's simulator (on NumPy arrays): the
    launch of a pass that runs once per matrix (the feature passes, the conversions)."""
    repeatable_launch(Launch(kernel, -(-threads // block), block, args, np.float64), xp)()


def repeatable_launch(step: Launch, xp):
    """``run()``, which queues ``step`` (a :class:`Launch` without vector slots) on the current
    stream of the array module ``xp`` (CuPy), or runs it in numba-cuda's simulator (on NumPy
    arrays): for a pass queued many times over the same arrays, each time for a few
    microseconds of host time (the steps of a walk that the device drives through arrays of
    its own)."""
    if SIMULATOR:
        return lambda: step.simulate(None, None)
    step.load(0, 0)
    fire = step.fire()
    return lambda: fire(0, 0, xp.cuda.get_current_stream().ptr)


class ZeroY:
    """Set ``y`` to zero before a kernel that accumulates into it with atomics."""

    def __init__(self, m: int, itemsize: int):
        self.m = m
        self.words = m * itemsize // 4

    def for_vectors(self, x_dtype, y_dtype) -> "ZeroY":
        """The zeroing of a y of ``y_dtype`` (see :meth:`Launch.for_vectors`)."""
        return ZeroY(self.m, np.dtype(y_dtype).itemsize)

    def load(self, x_len: int, y_len: int) -> None:
        pass

    def ptx(self, cc=(9, 0)) -> str:
        return ""

    def fire(self):
        """See :meth:`Launch.fire`."""
        words, memset = self.words, driver.cuMemsetD32Async

        def zero(x, y, stream):
            if words:
                status, = memset(y, 0, words, stream)
                if status:
                    raise _driver_error(status, "cuMemsetD32Async")

        return zero

    def simulate(self, x, y, stream=0) -> None:
        y[:] = 0


class DeviceProgram:
    """A converted matrix on the GPU plus the launches that multiply it by a vector.

    ``arrays`` keeps the device arrays alive for as long as the launches reference them.
    ``dtype`` is the matrix's value dtype; the builders make programs for vectors of that
    dtype, and :meth:`for_vectors` the same program for other vector dtypes.
    """

    def __init__(self, shape: tuple[int, int], dtype: np.dtype, arrays: dict, steps: list,
                 with_dot=None):
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.arrays = arrays
        self.steps = steps
        self.with_dot = with_dot
        """Where the program is one launch in which one thread writes each row of y,
        ``with_dot((partials, tickets, sums, slot))``: that launch (the same grid, vectors of
        the matrix's dtype) with a kernel that also stores x · y in ``sums[slot]`` for a
        square matrix (:mod:`.grid_sum`; ``partials`` and ``tickets`` of the lengths
        :func:`.grid_sum.workspace` gives for the launch's grid); else None."""

    def for_vectors(self, x_dtype, y_dtype) -> "DeviceProgram":
        """This program (same arrays, not loaded) for x of ``x_dtype`` and y of ``y_dtype``,
        e.g. float64 vectors for a float32 matrix: every step is compiled for those types, and
        the kernels accumulate in y's dtype. The steps stay those chosen for the matrix's dtype
        (csr5's choice of clearing, for one, is correct for any y)."""
        steps = [step.for_vectors(x_dtype, y_dtype) for step in self.steps]
        return DeviceProgram(self.shape, self.dtype, self.arrays, steps)

    def load(self) -> "DeviceProgram":
        """Compile every launch and fix its parameters; returns self.

        Sets :attr:`run`, the per-call entry point ``run(x, y, stream)``: on a GPU x and y are
        device addresses, every step is queued on ``stream`` (a CUDA stream handle; 0 is the
        legacy default stream) and ``run`` is the single step's closure itself when there is one
        step, else a loop over the steps' closures; under the simulator x and y are device
        arrays and the stream is ignored. Not safe to call from two threads at once (see
        :meth:`Launch.fire`).
        """
        for step in self.steps:
            step.load(self.shape[1], self.shape[0])
        fires = [step.simulate if SIMULATOR else step.fire() for step in self.steps]
        if len(fires) == 1:
            self.run = fires[0]
        else:
            def run(x, y, stream):
                for fire in fires:
                    fire(x, y, stream)

            self.run = run
        return self


def vector_type(dtype) -> types.Array:
    return types.Array(from_dtype(np.dtype(dtype)), 1, "C")


def upload(fmt, extra_bytes: int = 0) -> dict:
    """Copy a format's arrays to the GPU (one device array per field); arrays already on the
    device (a format built there by :mod:`autospmv._prepare.device_input`) are used in place,
    without a copy.

    Raises MemoryError, naming the bytes needed and free, before allocating anything when the
    host arrays plus ``extra_bytes`` (what the caller allocates next, e.g. staging vectors)
    cannot fit; if an allocation still fails midway, the arrays already copied are freed with
    the dictionary that held them.
    """
    arrays = fmt.arrays()
    on_host = {name: a for name, a in arrays.items() if isinstance(a, np.ndarray)}
    if not SIMULATOR and (on_host or extra_bytes):
        needed = sum(a.nbytes for a in on_host.values()) + extra_bytes
        free, total = cuda.current_context().get_memory_info()
        if needed > free:
            raise MemoryError(
                f"the {fmt.name} format needs {needed:,} bytes on the GPU; "
                f"{free:,} of {total:,} bytes are free"
            )
    # An empty device array (no allocation behind it) is replaced by an empty numba array.
    return {name: cuda.to_device(np.ascontiguousarray(a)) if name in on_host
            else _view_without_stream(a) if a.size else cuda.device_array(0, dtype=a.dtype)
            for name, a in arrays.items()}


def _view_without_stream(array):
    """A numba view of a device array of another library (CuPy's), which keeps that array
    alive, made once the stream that array names is done with it, and tied to no stream:
    numba would otherwise queue the view's later copies on the stream that was current when
    it was made, which may not outlive the operator (a background decision's stream ends with
    its thread)."""
    view = cuda.as_cuda_array(array)  # synchronises the stream the array names
    view.stream = 0
    return view
