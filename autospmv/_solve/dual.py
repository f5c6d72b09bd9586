"""Functions written once and compiled for both targets: numba's CPU (``njit``) and the GPU
(numba-cuda device functions).

A solver's scalar logic (its tests and recurrences) and the per-element work of its fused vector
steps are plain Python functions marked :func:`dual`. :meth:`Dual.on` compiles one for a target,
with every other :class:`Dual` it calls replaced by that one's compilation for the same target,
so a step calls the same code on the CPU, on the GPU and under numba-cuda's simulator.

A :class:`Dual` may name another Python function to compile for one target in its place
(:meth:`Dual.variant`): the same result written for that target's compiler, such as the CPU's
branch-free form of a test that LLVM's loop vectoriser would otherwise stop at.
"""

from __future__ import annotations

import threading
import types

import numba


class Dual:
    """A plain Python function and its compilations, one per target (``"cpu"``, ``"cuda"``)."""

    def __init__(self, py_func: types.FunctionType):
        self.py_func = py_func
        self.__name__ = py_func.__name__
        self.__doc__ = py_func.__doc__
        self._compiled: dict[str, object] = {}
        self._variants: dict[str, types.FunctionType] = {}
        self._lock = threading.Lock()

    def variant(self, target: str):
        """A decorator: the function it decorates is compiled for ``target`` in place of this
        one (it must compute the same, for every input this one takes); returned as it is."""
        if target not in ("cpu", "cuda"):
            raise ValueError(f"target must be 'cpu' or 'cuda'; got {target!r}")

        def register(py_func: types.FunctionType) -> types.FunctionType:
            self._variants[target] = py_func
            return py_func

        return register

    def on(self, target: str):
        """This function compiled for ``target``: ``"cpu"`` (``numba.njit``, NumPy's error
        model: a division by zero gives inf or nan, as in NumPy and on the GPU; without fast
        math, also where a caller compiled with fast-math flags, whose flags numba would
        otherwise pass on) or ``"cuda"``
        (a numba-cuda device function). Compiled once per target (lazily, at its first call)."""
        compiled = self._compiled.get(target)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(target)
                if compiled is None:
                    source = self._variants.get(target, self.py_func)
                    compiled = _compile(retargeted(source, target), target)
                    self._compiled[target] = compiled
        return compiled

    def __call__(self, *args):
        return self.py_func(*args)


def dual(py_func: types.FunctionType) -> Dual:
    """Mark ``py_func`` as compiled for both targets (see :class:`Dual`)."""
    return Dual(py_func)


def retargeted(py_func: types.FunctionType, target: str, **extra_globals) -> types.FunctionType:
    """A copy of ``py_func`` whose globals name, for each :class:`Dual` it calls, that one's
    compilation for ``target``, plus ``extra_globals`` (a generated kernel's parts, a
    :class:`Dual` among them also compiled for ``target``)."""
    names = {**py_func.__globals__, **extra_globals}
    for name in py_func.__code__.co_names:
        value = names.get(name)
        if isinstance(value, Dual):
            names[name] = value.on(target)
    function = types.FunctionType(py_func.__code__, names, py_func.__name__,
                                  py_func.__defaults__, py_func.__closure__)
    function.__qualname__ = py_func.__qualname__
    function.__module__ = py_func.__module__
    return function


def _compile(function: types.FunctionType, target: str):
    if target == "cpu":
        return numba.njit(error_model="numpy", fastmath=False)(function)
    if target == "cuda":
        from numba import cuda

        return cuda.jit(device=True)(function)
    raise ValueError(f"target must be 'cpu' or 'cuda'; got {target!r}")
