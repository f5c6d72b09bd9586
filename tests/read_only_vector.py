"""A device-vector wrapper whose ``__cuda_array_interface__`` says the memory is read-only, for
the tests of how the CUDA backend treats read-only ``out`` and ``x`` (on a GPU and in the
simulator). It imports nothing, so the simulator worker can use it before numba starts."""

from __future__ import annotations


class ReadOnly:
    """Wraps a CUDA array; its interface is the array's with the read-only flag set."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        cai = dict(self.array.__cuda_array_interface__)
        cai["data"] = (cai["data"][0], True)
        return cai
