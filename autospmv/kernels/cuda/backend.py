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

Dtypes: the result has SciPy's dtype, ``numpy.result_type`` of the matrix's and x's. A device x
may be float32 or float64; a host x arrives already in the result's dtype
(:func:`autospmv._support.validation.check_vector`). The matrix stays in its own dtype on the GPU:
for vectors of another dtype (float64 vectors for a float32 matrix, or a float32 device x for a
float64 matrix) the same kernels run compiled for those vector types, accumulating in y's dtype
(:meth:`autospmv.kernels.cuda.launch.DeviceProgram.for_vectors`), compiled at the first such
product; host vectors of each dtype get their own pair of staging buffers.

Multi-vector products (``A @ X`` for a 2-D X, :mod:`.spmm_programs`) follow the same rules for
streams, dtypes and threads. A device X (CuPy, PyTorch, numba) is read in place when row-major; a
host X is copied to and from device buffers made for the call.

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

from ..._support.validation import OUT_OVERLAPS_X, result_dtype, unsupported_vector
from ...formats.base import DeviceCSR
from ...formats.csr import CSRFormat
from . import grid_sum
from .checked_vectors import FIXED_POINTER_MODULES, RememberedProducts
from .launch import SIMULATOR, DeviceProgram, device_pointer, upload

if not SIMULATOR:
    from cuda.bindings import driver


VECTOR_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""The dtypes a device x may have (the kernels are compiled for float vectors only)."""


def _check_device_vector(cai: dict, length: int, dtypes: tuple, what: str
                         ) -> tuple[int, np.dtype]:
    """Validate a ``__cuda_array_interface__`` dict for a vector of one of ``dtypes``; return
    its data pointer and dtype.

    Runs on every call, so the common case costs a few dictionary look-ups: the type string is
    compared as a string (``dtype.str``) before anything is parsed.
    """
    shape = cai["shape"]
    if len(shape) != 1 or shape[0] != length:
        raise ValueError(f"{what} must have shape ({length},); got {tuple(shape)}")
    typestr = cai["typestr"]
    for dtype in dtypes:
        if dtype.str == typestr:
            break
    else:
        dtype = np.dtype(typestr)
    if dtype not in dtypes:
        if what == "x" and dtype not in VECTOR_DTYPES:  # no kernel takes it: say the fix
            raise TypeError(unsupported_vector(dtype, what))
        allowed = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"{what} must have dtype {allowed}; got {dtype}")
    strides = cai.get("strides")
    if strides is not None and length > 1 and strides[0] != dtype.itemsize:
        raise ValueError(f"{what} must be contiguous; got strides {tuple(strides)}")
    pointer, read_only = cai["data"]
    if read_only and what == "out":
        raise ValueError(READ_ONLY_OUT)
    return pointer, dtype


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


def device_count() -> int:
    """The number of CUDA devices this process sees."""
    status, count = driver.cuDeviceGetCount()
    if status:
        raise RuntimeError(f"CUDA driver error {status!r} in cuDeviceGetCount")
    return int(count)


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


def row_major(X, cai: dict) -> tuple:
    """``(X, its interface)`` for a 2-D device array X with interface ``cai``: X itself when
    row-major (C-contiguous), else a row-major copy made by its library (CuPy, PyTorch);
    ValueError for other kinds (numba), which have no such copy."""
    rows, columns = cai["shape"]
    itemsize = np.dtype(cai["typestr"]).itemsize
    strides = cai.get("strides")
    if (strides is None or rows * columns == 0
            or ((rows == 1 or strides[0] == columns * itemsize)
                and (columns == 1 or strides[1] == itemsize))):
        return X, cai
    module = type(X).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        X = cupy.ascontiguousarray(X)
        return X, X.__cuda_array_interface__
    if module == "torch":
        X = X.contiguous()
        return X, X.__cuda_array_interface__
    raise ValueError(f"X must be row-major (C-contiguous); got strides {tuple(strides)}")


def empty_like_input(x, shape, dtype: np.dtype):
    """A device array of ``shape`` (an int for a vector) of the same kind as x (CuPy, PyTorch,
    else numba)."""
    module = type(x).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy.empty(shape, dtype=dtype)
    if module == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype.name), device=x.device)
    return cuda.device_array(shape, dtype=dtype)




class CheckedVectors:
    """Device vectors already validated for this operator, recognised by identity.

    numba and CuPy arrays build their ``__cuda_array_interface__`` dictionary on every access,
    about a microsecond each, a large part of a launch's host time. Solvers pass the same few
    vectors again and again, so the pointers of arrays whose pointer is fixed for life are kept,
    through weak references (an operator never keeps a vector alive), at most :attr:`SIZE` of them.
    """

    SIZE = 16

    def __init__(self, device: int | None = None):
        """``device``: the ordinal of the GPU the vectors must be on (None: not checked)."""
        self.device = device
        # id(vector) -> (weak reference, length checked, data pointer, read-only, dtype)
        self._entries = {}

    def check(self, vector, length: int, what: str, dtypes: tuple
              ) -> tuple[int, np.dtype] | None:
        """The data pointer and dtype of a valid device vector of ``length`` and one of
        ``dtypes``; None if ``vector`` is not a CUDA array. Raises like
        :func:`_check_device_vector` for a CUDA array that does not fit (or, as ``out``, is
        read-only), and ValueError for one on another GPU than :attr:`device`."""
        entry = self._entries.get(id(vector))
        if (entry is not None and entry[0]() is vector and entry[1] == length
                and entry[4] in dtypes):
            if entry[3] and what == "out":
                raise ValueError(READ_ONLY_OUT)
            return entry[2], entry[4]
        cai = getattr(vector, "__cuda_array_interface__", None)
        if cai is None:
            return None
        pointer, dtype = _check_device_vector(cai, length, dtypes, what)
        if self.device is not None and length:
            ordinal = device_ordinal(pointer)
            if ordinal != self.device:
                raise ValueError(f"{what} is on GPU {ordinal}, but the operator's matrix is on "
                                 f"GPU {self.device}; move {what} there or prepare the matrix "
                                 f"on GPU {ordinal}")
        if type(vector).__module__.split(".")[0] in FIXED_POINTER_MODULES:
            try:
                reference = weakref.ref(vector)
            except TypeError:  # a kind without weak references is checked on every call
                return pointer, dtype
            if len(self._entries) >= self.SIZE:
                try:  # the oldest; other threads may be evicting at the same time
                    self._entries.pop(next(iter(self._entries)), None)
                except (StopIteration, RuntimeError):
                    pass
            self._entries[id(vector)] = (reference, length, pointer, bool(cai["data"][1]), dtype)
        return pointer, dtype


FUSED_ROWS_PER_THREAD = 2
"""The most rows per thread of :meth:`CudaBackend.product_with_dot`, whose grid is one wave of
a summing kernel (:data:`.grid_sum.BLOCKS_PER_SM` blocks per multiprocessor, each thread taking
rows a grid apart). A product of more rows runs faster on its own grid of many waves (a thread
per row, which keeps more gathers in flight) followed by a dot pass than on one wave that
forms its dot, and than on its own grid forming its dot, where every block waits through the
fence and ticket of :mod:`.grid_sum` and the last block adds thousands of blocks' sums."""


class CudaBackend:
    """An operator's matrix on the current GPU and the calls that multiply it (see the module
    docstring for dtypes, streams, threads and checks)."""

    def __init__(self, spec, fmt, params: dict):
        self.shape = fmt.shape
        self.dtype = np.dtype(fmt.dtype)
        self.device = None if SIMULATOR else cuda.current_context().device.id
        arrays = upload(fmt, extra_bytes=sum(self.shape) * self.dtype.itemsize)  # + staging
        self.program: DeviceProgram = spec.cuda_builder()(fmt, params, arrays).load()
        """The program for vectors of the matrix's dtype."""
        self._programs = {self.dtype: self.program}  # x's dtype -> its loaded program
        self._y_dtypes = {d: result_dtype(self.dtype, d) for d in VECTOR_DTYPES}
        """x's dtype -> the product's dtype, looked up on every device call."""
        self._format_nbytes = sum(a.nbytes for a in arrays.values())
        self._format_name = fmt.name
        self._csr_arrays = arrays if isinstance(fmt, CSRFormat) else None
        self.multi = None
        """The multi-vector product (:meth:`set_up_multi`), None until the first one."""
        self._multi_nbytes = 0
        self._staging = {}  # dtype -> (x buffer, y buffer, what the program takes for them)
        self._vectors = CheckedVectors(self.device)
        self._remembered = RememberedProducts(self.shape[0])
        """What a call with a checked x needs (:meth:`device_matvec`)."""
        self._checks_device = self.device is not None and device_count() > 1
        """Whether a call asks for the calling thread's current GPU (:meth:`_launch`)."""
        self._lock = threading.Lock()

    @property
    def device_nbytes(self) -> int:
        """Device bytes held: the uploaded format, the two staging buffers of host vectors of
        each dtype that a product of a host vector has allocated, and what the multi-vector
        product keeps (:meth:`set_up_multi`)."""
        return (self._format_nbytes + self._multi_nbytes
                + sum(x.nbytes + y.nbytes for x, y, _ in self._staging.values()))

    def _program_for(self, x_dtype: np.dtype) -> DeviceProgram:
        """The loaded program for an x of ``x_dtype`` (and y of the product's dtype), compiled
        at its first use; called with the lock held."""
        program = self._programs.get(x_dtype)
        if program is None:
            program = self.program.for_vectors(x_dtype, self._y_dtypes[x_dtype]).load()
            self._programs[x_dtype] = program
        return program

    def product_with_dot(self, dtype, sums, slot: int):
        """``run(x, y, stream)``: y = A x for vectors of ``dtype`` (the product's dtype for an x
        of that dtype), which also stores x · y in ``sums[slot]`` (a float64 device array) from
        the same kernel: a solver's ``p · Ap`` without a pass of its own. None where the
        program cannot (:attr:`.launch.DeviceProgram.with_dot`), A is not square, or A has
        more rows than :data:`FUSED_ROWS_PER_THREAD` per thread of a summing grid.

        The launch is the caller's own (its arguments are fixed in it), not the operator's:
        it holds its own partial sums and needs no lock. x and y are device addresses (device
        arrays under the simulator), as :attr:`DeviceProgram.run` takes them."""
        dtype = np.dtype(dtype)
        program = self.program
        if (program.with_dot is None or self.shape[0] != self.shape[1]
                or self._y_dtypes.get(dtype) != dtype):
            return None
        multiprocessors = 1 if SIMULATOR else cuda.get_current_device().MULTIPROCESSOR_COUNT
        grid = grid_sum.BLOCKS_PER_SM * multiprocessors
        if program.steps[0].grid > FUSED_ROWS_PER_THREAD * grid:
            return None
        grid = min(program.steps[0].grid, grid)
        partials_length, tickets_length = grid_sum.workspace(grid)
        partials = cuda.device_array(partials_length, dtype=np.float64)
        tickets = cuda.to_device(np.zeros(tickets_length, dtype=np.int32))
        launch = program.with_dot((partials, tickets, sums, np.int64(slot)))
        launch.grid = grid  # one wave; each thread takes rows a grid apart
        if dtype != self.dtype:
            launch = launch.for_vectors(dtype, dtype)
        if SIMULATOR:
            return lambda x, y, stream: launch.simulate(x, y)
        launch.load(*self.shape)
        return launch.fire()

    def _staging_buffers(self, dtype: np.dtype):
        """The staging buffers of host vectors of ``dtype`` and the program's arguments for
        them (the arrays under the simulator, their addresses, fixed for the buffers' life, on
        a GPU), allocated on first use; called with the lock held."""
        staging = self._staging.get(dtype)
        if staging is None:
            x = cuda.device_array(self.shape[1], dtype=dtype)
            y = cuda.device_array(self.shape[0], dtype=dtype)
            staging = (x, y, (x, y) if SIMULATOR else (device_pointer(x), device_pointer(y)))
            self._staging[dtype] = staging
        return staging

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
        """y = A @ x for host vectors of one dtype, the product's."""
        if not y.shape[0]:
            return
        self._check_current_device()
        with self._lock:
            program = self._program_for(x.dtype)
            staged_x, staged_y, (x_arg, y_arg) = self._staging_buffers(x.dtype)
            staged_x.copy_to_device(x)
            program.run(x_arg, y_arg, 0)
            staged_y.copy_to_host(y)

    def set_up_multi(self, matrix_csr, notes: list | None = None, spmm_rule=None
                     ) -> tuple[str, tuple]:
        """Set up :attr:`multi` (:mod:`.spmm_programs`) on A's CSR arrays on the device: the
        format's own for a CSR kernel, else those of ``matrix_csr()`` (a host CSR, uploaded, or a
        :class:`~autospmv.formats.base.DeviceCSR`, used in place). Returns the decision's note and
        the host arrays it keeps (none); the choices timed or picked (by ``spmm_rule``, the
        model's, where nothing can be timed) at later products go to ``notes``."""
        if self._csr_arrays is not None:
            arrays = self._csr_arrays
            host_indptr = arrays["indptr"].copy_to_host()
            where = "the format's own CSR arrays"
        else:
            csr = matrix_csr()
            host_indptr = csr.host_indptr if isinstance(csr, DeviceCSR) else csr.indptr
            arrays = upload(CSRFormat(csr.shape, csr.indptr, csr.indices, csr.data))
            where = f"CSR arrays besides the {self._format_name} format"
        from .spmm_programs import RULE, MultiVectorProgram  # (imported at the first one)

        multi = MultiVectorProgram(self.shape, arrays, host_indptr, notes, spmm_rule)
        held = {device_pointer(a) for a in self.program.arrays.values() if a.size}
        self._multi_nbytes = multi.nbytes + sum(a.nbytes for a in arrays.values()
                                                if a.size and device_pointer(a) not in held)
        self.multi = multi
        kept = (f"; {self._multi_nbytes:,} bytes more kept on the GPU for it"
                if self._multi_nbytes else "")
        return f"{RULE} (on {where}{kept})", ()

    def host_matmat(self, X: np.ndarray, Y: np.ndarray) -> None:
        """Y = A @ X for host arrays (C-contiguous, the product's dtype), through device copies
        made for the call (after :meth:`set_up_multi`)."""
        m, n = self.shape
        k = X.shape[1]
        self._check_current_device()
        with self._lock:
            x = (cuda.to_device(X.reshape(n * k)) if n else
                 cuda.device_array(0, dtype=X.dtype))  # (no copy of an empty X)
            y = cuda.device_array(m * k, dtype=Y.dtype)
            if SIMULATOR:
                self.multi.run(k, X.dtype, Y.dtype, x, y, 0)
            else:
                self.multi.run(k, X.dtype, Y.dtype, device_pointer(x), device_pointer(y), 0)
            if Y.flags.c_contiguous:
                y.copy_to_host(Y.reshape(m * k))  # a view: the copy lands in Y
            else:  # reshape would copy: the result goes through a host array of its own
                Y[...] = y.copy_to_host().reshape(m, k)

    def device_matmat(self, X):
        """``A @ X`` for a 2-D CUDA array X of shape (n, k), float32 or float64 (CuPy, PyTorch,
        numba): one multi-vector product (:attr:`multi`, set up first) queued as
        :meth:`device_matvec` queues its kernels; the result (m, k), row-major, of X's kind and
        the product's dtype. CuPy and PyTorch X that is not row-major is copied first. None if
        X is not a CUDA array."""
        cai = getattr(X, "__cuda_array_interface__", None)
        if cai is None:
            return None
        m, n = self.shape
        shape = tuple(cai["shape"])
        if len(shape) != 2 or shape[0] != n:
            raise ValueError(f"X must have shape ({n}, k); got {shape}")
        k = shape[1]
        x_dtype = np.dtype(cai["typestr"])
        if x_dtype not in VECTOR_DTYPES:
            raise TypeError(unsupported_vector(x_dtype, "X"))
        y_dtype = self._y_dtypes[x_dtype]
        X, cai = row_major(X, cai)
        Y = empty_like_input(X, (m, k), y_dtype)
        if m and k:
            x_ptr = cai["data"][0]
            if n and self.device is not None and device_ordinal(x_ptr) != self.device:
                raise ValueError(f"X is on GPU {device_ordinal(x_ptr)}, but the operator's "
                                 f"matrix is on GPU {self.device}; move X there or prepare the "
                                 f"matrix on GPU {device_ordinal(x_ptr)}")
            self._check_current_device()
            stream = stream_of(X)
            with self._lock:
                if SIMULATOR:
                    self.multi.run(k, x_dtype, y_dtype, X.reshape(n * k), Y.reshape(m * k),
                                   stream)
                else:
                    self.multi.run(k, x_dtype, y_dtype, x_ptr, device_pointer(Y), stream)
        return Y

    def device_matvec(self, x, out):
        """``y = A @ x`` for a CUDA array x, on the device; None if x is not a CUDA array.

        An x that an earlier call has checked is remembered (:mod:`.remembered`) with the out
        it was last given: a call with that out only launches, and one without out only
        allocates the result and launches."""
        entry = self._remembered.get(id(x))
        if entry is not None and entry[0]() is x:
            _, out_ref, run, x_ptr, y_ptr, stream, allocate = entry
            if out is None:
                out, y_ptr = allocate()
            elif out_ref is None or out_ref() is not out:
                return self._checked_matvec(x, out)
            if self._checks_device:
                self._check_current_device()
            stream = stream() if stream else 0
            with self._lock:
                try:
                    run(x_ptr, y_ptr, stream)
                except RuntimeError:  # see _launch
                    self._give_thread_the_gpu()
                    run(x_ptr, y_ptr, stream)
            return out
        return self._checked_matvec(x, out)

    def checked_pair(self, x, out):
        """``(y, x_ptr, y_ptr, x_dtype, y_dtype)`` of a product of the CUDA array x into
        ``out`` (or into a y made here, of the right shape, dtype and GPU, writable), every
        check made: None where x is not a CUDA array; TypeError or ValueError for an ``out``
        that is not one of the right shape and dtype, or that overlaps x."""
        m, n = self.shape
        checked = self._vectors.check(x, n, "x", VECTOR_DTYPES)
        if checked is None:
            return None
        x_ptr, x_dtype = checked
        y_dtype = self._y_dtypes[x_dtype]
        if out is None:
            y = empty_like_input(x, m, y_dtype)
            y_ptr = device_pointer(y)
        else:
            y = out
            checked = self._vectors.check(y, m, "out", (y_dtype,))
            if checked is None:
                raise TypeError(f"out must be a CUDA device array like x; got "
                                f"{type(y).__name__}")
            y_ptr = checked[0]
        if (m and n and x_ptr < y_ptr + m * y_dtype.itemsize
                and y_ptr < x_ptr + n * x_dtype.itemsize):
            raise ValueError(OUT_OVERLAPS_X)
        return y, x_ptr, y_ptr, x_dtype, y_dtype

    def _checked_matvec(self, x, out):
        """:meth:`device_matvec` with every check (and the pair remembered where it can be)."""
        checked = self.checked_pair(x, out)
        if checked is None:
            return None
        y, x_ptr, y_ptr, x_dtype, y_dtype = checked
        if self.shape[0]:
            with self._lock:
                run = self._program_for(x_dtype).run
            if SIMULATOR:
                self._check_current_device()
                run(x, y, stream_of(x))
                return y
            self._launch(run, x_ptr, y_ptr, stream_of(x))
            self._remembered.remember(x, out, run, x_ptr, y_ptr, y_dtype)
        return y

    def _launch(self, run, x_ptr: int, y_ptr: int, stream: int) -> None:
        """``run(x_ptr, y_ptr, stream)`` under the lock, on the operator's GPU.

        With several GPUs the calling thread's current GPU is checked first. With one, any
        current context is on the operator's GPU, so nothing is asked before the launch: a
        thread without a current context makes the launch fail (nothing is queued then), and
        it is given the operator's GPU and the launch is made again."""
        if self._checks_device:
            self._check_current_device()
        with self._lock:
            try:
                run(x_ptr, y_ptr, stream)
            except RuntimeError:
                self._give_thread_the_gpu()
                run(x_ptr, y_ptr, stream)

    def _give_thread_the_gpu(self) -> None:
        """After a failed launch: re-raise its error unless the calling thread has no current
        CUDA context, which it is then given (the operator's GPU)."""
        if self.device is None or current_ordinal() is not None:
            raise  # the launch's error, being handled by the caller
        cuda.select_device(self.device)
