"""The CUDA backend's per-call path for vectors it has checked before (no GPU needed: fake CUDA
arrays and a fake device program that records its launches)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

from autospmv.kernels.cuda import backend, checked_vectors as remembered  # noqa: E402
from autospmv._support.validation import result_dtype  # noqa: E402

if backend.SIMULATOR:
    pytest.skip("the remembered launches are those of the real driver path",
                allow_module_level=True)

F64 = np.dtype(np.float64)


def fake_class(module: str):
    class FakeVector:
        reads = 0
        ndim = 1

        def __init__(self, length, pointer, typestr="<f8", read_only=False):
            self.length, self.pointer, self.typestr = length, pointer, typestr
            self.read_only = read_only

        @property
        def __cuda_array_interface__(self):
            type(self).reads += 1
            return {"shape": (self.length,), "typestr": self.typestr, "strides": None,
                    "data": (self.pointer, self.read_only), "version": 3}

    FakeVector.__module__ = module
    return FakeVector


class Program:
    """Records ``run(x, y, stream)``; fails the first ``failures`` calls as the driver does in
    a thread without a CUDA context."""

    def __init__(self, failures: int = 0):
        self.launches, self.failures = [], failures

    def run(self, x, y, stream):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("CUDA driver error CUDA_ERROR_INVALID_CONTEXT in cuLaunchKernel")
        self.launches.append((x, y, stream))


def fake_backend(m=10, n=10, program=None, checks_device=False):
    """A CudaBackend of an m×n float64 matrix on GPU 0 whose program is ``program``."""
    be = backend.CudaBackend.__new__(backend.CudaBackend)
    be.shape, be.dtype, be.device = (m, n), F64, 0
    be.program = program or Program()
    be._programs = {F64: be.program}
    be._y_dtypes = {d: result_dtype(F64, d) for d in backend.VECTOR_DTYPES}
    be._vectors = backend.CheckedVectors(None)
    be._remembered = remembered.RememberedProducts(m)
    be._checks_device, be._lock = checks_device, threading.Lock()
    return be


def test_a_checked_pair_launches_without_reading_the_vectors_again():
    Vector = fake_class("numba.cuda.cudadrv.devicearray")
    be = fake_backend()
    x, y = Vector(10, 1000), Vector(10, 5000)
    for _ in range(5):
        assert be.device_matvec(x, y) is y
    assert be.program.launches == [(1000, 5000, 0)] * 5
    assert Vector.reads == 2  # x and out, once each


def test_another_out_is_checked_and_then_remembered_with_x():
    Vector = fake_class("numba")
    be = fake_backend()
    x, y, z = Vector(10, 1000), Vector(10, 5000), Vector(10, 9000)
    be.device_matvec(x, y)
    be.device_matvec(x, z)
    be.device_matvec(x, z)
    assert [launch[1] for launch in be.program.launches] == [5000, 9000, 9000]
    with pytest.raises(ValueError, match="out overlaps x"):
        be.device_matvec(x, Vector(10, 1008))
    with pytest.raises(ValueError, match="out is read-only"):
        be.device_matvec(x, Vector(10, 20000, read_only=True))
    with pytest.raises(TypeError, match="out must have dtype float64"):
        be.device_matvec(x, Vector(10, 20000, typestr="<f4"))


def test_without_out_the_result_is_allocated_each_time(monkeypatch):
    Vector = fake_class("numba")
    made = []

    def allocator(x, length, dtype):
        def allocate():
            made.append(Vector(length, 7000 + 100 * len(made)))
            return made[-1], made[-1].pointer
        return allocate

    monkeypatch.setattr(remembered, "allocator", allocator)
    monkeypatch.setattr(backend, "empty_like_input",
                        lambda x, m, dtype: allocator(x, m, dtype)()[0])
    be = fake_backend()
    x = Vector(10, 1000)
    first, second = be.device_matvec(x, None), be.device_matvec(x, None)
    assert first is not second
    assert [launch[1] for launch in be.program.launches] == [first.pointer, second.pointer]


def test_a_dead_vector_whose_id_is_reused_is_checked_again():
    Vector = fake_class("numba")
    be = fake_backend()
    y = Vector(10, 5000)
    be.device_matvec(Vector(10, 1000), y)
    gc.collect()
    for pointer in range(20000, 20000 + 50 * 100, 100):  # some reuse the old id
        be.device_matvec(Vector(10, pointer), y)
    assert [launch[0] for launch in be.program.launches[1:]] == list(range(20000, 25000, 100))
    assert len(be._remembered) <= be._remembered.SIZE


def test_movable_kinds_are_not_remembered(monkeypatch):
    monkeypatch.setattr(backend, "stream_of", lambda x: 0)
    Vector = fake_class("torch")
    be = fake_backend()
    x, y = Vector(10, 1000), Vector(10, 5000)
    be.device_matvec(x, y)
    be.device_matvec(x, y)
    assert not be._remembered and Vector.reads == 4


def test_a_thread_without_a_context_gets_the_operators_gpu(monkeypatch):
    """One GPU: the launch is made without asking for the current device; when it fails for
    want of a context, the device is given to the thread and the launch made again."""
    selected = []
    state = {"current": None}
    monkeypatch.setattr(backend, "current_ordinal", lambda: state["current"])
    monkeypatch.setattr(backend.cuda, "select_device",
                        lambda device: (selected.append(device), state.update(current=device)))
    Vector = fake_class("numba")
    be = fake_backend(program=Program(failures=1))
    x, y = Vector(10, 1000), Vector(10, 5000)
    be.device_matvec(x, y)
    assert selected == [0] and be.program.launches == [(1000, 5000, 0)]
    be.program.failures = 1  # again, on the remembered path
    state["current"] = None
    be.device_matvec(x, y)
    assert selected == [0, 0] and len(be.program.launches) == 2


def test_a_launch_error_with_a_context_is_raised(monkeypatch):
    monkeypatch.setattr(backend, "current_ordinal", lambda: 0)
    Vector = fake_class("numba")
    be = fake_backend(program=Program(failures=1))
    with pytest.raises(RuntimeError, match="cuLaunchKernel"):
        be.device_matvec(Vector(10, 1000), Vector(10, 5000))


def test_with_several_gpus_the_current_one_is_checked_on_every_call(monkeypatch):
    monkeypatch.setattr(backend, "current_ordinal", lambda: 1)
    Vector = fake_class("numba")
    be = fake_backend(checks_device=True)
    x, y = Vector(10, 1000), Vector(10, 5000)
    for _ in range(2):
        with pytest.raises(ValueError, match="current GPU is 1"):
            be.device_matvec(x, y)
    assert not be.program.launches


def test_the_stream_follows_x_on_the_remembered_path(monkeypatch):
    """A CuPy x is queued on CuPy's current stream, read at every call; a numba x on the
    legacy default stream, whatever out is."""
    streams = iter([11, 22, 33])
    monkeypatch.setattr(remembered, "current_cupy_stream", lambda: next(streams))
    monkeypatch.setattr(remembered, "allocator", lambda x, length, dtype: None)
    monkeypatch.setattr(backend, "stream_of", lambda x: 0 if "numba" in type(x).__module__
                        else remembered.current_cupy_stream())
    Cupy, Numba = fake_class("cupy._core.core"), fake_class("numba")
    be = fake_backend()
    x, y = Cupy(10, 1000), Cupy(10, 5000)
    for _ in range(3):
        be.device_matvec(x, y)
    assert [launch[2] for launch in be.program.launches] == [11, 22, 33]
    x, y = Numba(10, 20000), Cupy(10, 30000)
    be.device_matvec(x, y)
    be.device_matvec(x, y)
    assert [launch[2] for launch in be.program.launches[3:]] == [0, 0]
