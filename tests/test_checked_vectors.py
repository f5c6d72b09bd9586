"""The CUDA backend's cache of validated device vectors (no GPU needed: fake CUDA arrays)."""

import gc

import numpy as np
import pytest

from autospmv.kernels.cuda import backend
from autospmv.kernels.cuda.backend import CheckedVectors


F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)


def pointer(vectors: CheckedVectors, vector, length: int, what: str, dtypes=(F64,)):
    """The pointer that ``vectors.check`` gives for a float64 vector, or None."""
    found = vectors.check(vector, length, what, dtypes)
    return None if found is None else found[0]


def fake_cuda_vector_class(module: str):
    """A class exposing ``__cuda_array_interface__`` as numba/CuPy/torch do: a property."""

    class FakeVector:
        reads = 0

        def __init__(self, length, typestr="<f8", pointer=4096, read_only=False):
            self.length, self.typestr, self.address = length, typestr, pointer
            self.read_only = read_only

        @property
        def __cuda_array_interface__(self):
            type(self).reads += 1
            return {"shape": (self.length,), "typestr": self.typestr, "strides": None,
                    "data": (self.address, self.read_only), "version": 3}

    FakeVector.__module__ = module
    return FakeVector


@pytest.mark.parametrize("module", ["numba.cuda.cudadrv.devicearray", "cupy._core.core"])
def test_fixed_pointer_kinds_are_read_once(module):
    Vector = fake_cuda_vector_class(module)
    vectors = CheckedVectors()
    v = Vector(10, pointer=1234)
    assert [pointer(vectors, v, 10, "x") for _ in range(5)] == [1234] * 5
    assert Vector.reads == 1


def test_movable_kinds_are_read_on_every_call():
    Vector = fake_cuda_vector_class("torch")
    vectors = CheckedVectors()
    v = Vector(10)
    for _ in range(3):
        pointer(vectors, v, 10, "x")
    assert Vector.reads == 3


def test_a_cached_vector_is_checked_again_for_another_length():
    vectors = CheckedVectors()
    v = fake_cuda_vector_class("numba")(10)
    pointer(vectors, v, 10, "x")
    with pytest.raises(ValueError, match=r"out must have shape \(11,\); got \(10,\)"):
        pointer(vectors, v, 11, "out")


def test_wrong_dtype_is_refused_and_not_cached():
    Vector = fake_cuda_vector_class("numba")
    vectors = CheckedVectors()
    v = Vector(10, typestr="<f4")
    for _ in range(2):
        with pytest.raises(TypeError, match="x must have dtype float64; got float32"):
            pointer(vectors, v, 10, "x")
    assert Vector.reads == 2


def test_non_cuda_objects_give_none():
    vectors = CheckedVectors()
    assert pointer(vectors, np.zeros(3), 3, "x") is None
    assert pointer(vectors, [1.0, 2.0], 2, "x") is None


def test_vectors_are_not_kept_alive_and_a_reused_id_is_not_trusted():
    Vector = fake_cuda_vector_class("numba")
    vectors = CheckedVectors()
    v = Vector(10, pointer=1)
    pointer(vectors, v, 10, "x")
    del v
    gc.collect()
    assert Vector.reads == 1
    survivors = [Vector(10, pointer=p) for p in range(2, 200)]  # some may reuse the old id
    assert [pointer(vectors, w, 10, "x") for w in survivors] == list(range(2, 200))


def test_at_most_size_vectors_are_remembered():
    Vector = fake_cuda_vector_class("numba")
    vectors = CheckedVectors()
    kept = [Vector(4, pointer=p) for p in range(CheckedVectors.SIZE + 1)]
    for v in kept:
        pointer(vectors, v, 4, "x")
    assert len(vectors._entries) == CheckedVectors.SIZE
    pointer(vectors, kept[0], 4, "x")  # evicted first, read again
    assert Vector.reads == CheckedVectors.SIZE + 2


@pytest.mark.parametrize("module", ["numba", "cupy._core.core", "torch"])
def test_read_only_vector_is_refused_as_out_every_time(module):
    Vector = fake_cuda_vector_class(module)
    vectors = CheckedVectors()
    v = Vector(10, pointer=64, read_only=True)
    assert pointer(vectors, v, 10, "x") == 64  # reading from it is fine
    for _ in range(2):  # also once it is remembered
        with pytest.raises(ValueError, match="out is read-only"):
            pointer(vectors, v, 10, "out")


def test_vector_on_another_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(backend, "device_ordinal", lambda pointer: 1 if pointer >= 1000 else 0)
    Vector = fake_cuda_vector_class("numba")
    vectors = CheckedVectors(device=0)
    assert pointer(vectors, Vector(10, pointer=64), 10, "x") == 64
    message = "out is on GPU 1, but the operator's matrix is on GPU 0"
    with pytest.raises(ValueError, match=message):
        pointer(vectors, Vector(10, pointer=4096), 10, "out")
    assert pointer(vectors, Vector(0, pointer=4096), 0, "x") == 4096  # empty: nothing to read


def test_the_dtype_comes_back_and_a_remembered_vector_is_checked_for_other_dtypes():
    Vector = fake_cuda_vector_class("numba")
    vectors = CheckedVectors()
    v = Vector(10, typestr="<f4", pointer=64)
    assert vectors.check(v, 10, "x", (F32, F64)) == (64, F32)
    assert vectors.check(v, 10, "x", (F32, F64)) == (64, F32)
    assert Vector.reads == 1
    with pytest.raises(TypeError, match="out must have dtype float64; got float32"):
        vectors.check(v, 10, "out", (F64,))
    with pytest.raises(TypeError, match="x must have dtype float32 or float64; got int32"):
        vectors.check(Vector(10, typestr="<i4"), 10, "x", (F32, F64))
