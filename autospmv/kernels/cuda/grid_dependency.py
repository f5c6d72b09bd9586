"""Programmatic dependent launch (compute capability 9.0): overlap a kernel with the one before.

A kernel launched with :attr:`autospmv.kernels.cuda.launch.Launch.overlaps_previous` may start
while the kernel before it in the stream still runs, once every block of that one has called
:func:`release_dependents` (or ended). It must call :func:`wait_for_previous` before it reads or
writes anything the previous kernel writes: that call returns when the previous kernel has ended
and its writes are visible. Every thread of such a kernel calls it before it ends, so that the
kernel cannot end before the one it overlaps.

Both are the PTX instructions ``griddepcontrol.launch_dependents`` and ``griddepcontrol.wait``;
in a kernel launched without overlap, ``wait`` returns at once and ``launch_dependents`` does
nothing. Compiled for a GPU older than :data:`SUPPORTED_FROM`, which has neither instruction,
they emit nothing, and such a GPU launches every kernel after the previous one has ended
(:meth:`autospmv.kernels.cuda.launch.Launch.load`). Under numba-cuda's simulator (one kernel at
a time) both do nothing.
"""

from __future__ import annotations

from numba import cuda

SUPPORTED_FROM = (9, 0)
"""The first compute capability with programmatic dependent launch (Hopper)."""

if cuda.config.ENABLE_CUDASIM:
    def wait_for_previous():
        """Nothing to wait for: the simulator runs one kernel at a time."""

    def release_dependents():
        """Nothing to release: the simulator runs one kernel at a time."""

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.core import targetconfig
    from numba.cuda.extending import intrinsic

    def _instruction(text: str):
        """An intrinsic emitting one PTX instruction with no operands, kept where it is
        written (it orders memory accesses, so the compiler may not move loads or stores across
        it); nothing when compiling for a compute capability below :data:`SUPPORTED_FROM`."""
        @intrinsic
        def emit(typingctx):
            def codegen(context, builder, signature, args):
                if targetconfig.ConfigStack().top().compute_capability >= SUPPORTED_FROM:
                    asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}",
                                       side_effect=True)
                    builder.call(asm, [])
                return context.get_dummy_value()

            return types.void(), codegen

        return emit

    wait_for_previous = _instruction("griddepcontrol.wait;")
    release_dependents = _instruction("griddepcontrol.launch_dependents;")
