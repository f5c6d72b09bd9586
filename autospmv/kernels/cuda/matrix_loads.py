"""Reading a matrix entry that a kernel reads once: its value and column, with a cache hint.

A kernel streams the matrix (each value and column index is read once per product) but gathers
x (each element is read by every entry of its column, from nearby tiles). Loaded plainly, both
compete for the SM's L1 cache, and the stream, far larger, pushes out the pieces of x that the
next gathers would find there. Both readers below take the value and the column with the PTX
eviction hint ``L1::evict_first``, so that the L1 keeps x rather than lines of the matrix that
will not be read again:

* :func:`matrix_entry` emits the hint for 4-byte values only (float32): in csr5's lanes, which
  also store rows, float64 runs faster with plain loads;
* :func:`streamed_entry` emits it for every value type: csr5's tiles inside one row, which only
  read the matrix and x.

Every GPU that numba-cuda compiles for with the CUDA 13 toolkit (compute capability 7.5 and
later) has the hint (PTX 7.4, sm_70).

The loads are emitted as inline PTX without side effects, so the compiler may schedule them as
freely as plain loads (the kernels never write the matrix). Under numba-cuda's simulator,
both are plain indexing.
"""

from __future__ import annotations

from numba import cuda

HINTED_VALUE_BYTES = 4
""":func:`matrix_entry` loads values of this many bytes with the hint, others plainly."""

if cuda.config.ENABLE_CUDASIM:
    def matrix_entry(data, indices, q):
        """``(data[q], indices[q])``."""
        return data[q], indices[q]

    streamed_entry = matrix_entry

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def _hinted_load(context, builder, array_type, array, position):
        """array[position] with the eviction hint (no bounds or sign test: ``position``, an
        int64, is in range)."""
        pointer = builder.gep(context.make_array(array_type)(context, builder, value=array).data,
                              [position])
        width = array_type.dtype.bitwidth
        word = ir.IntType(width)
        asm = ir.InlineAsm(ir.FunctionType(word, [pointer.type]),
                           f"ld.global.L1::evict_first.b{width} $0, [$1];",
                           f"={'r' if width == 32 else 'l'},l")
        return builder.bitcast(builder.call(asm, [pointer]),
                               context.get_value_type(array_type.dtype))

    def _getitem(array, q):
        return array[q]

    def _entry(name, hinted):
        """The intrinsic ``name``: ``(data[q], indices[q])`` for a position ``q`` in range,
        both read with the eviction hint where ``hinted(value_bits)``, else as plain indexing."""
        def entry(typingctx, data, indices, q):
            def codegen(context, builder, signature, args):
                data_type, indices_type, q_type = signature.args
                data, indices, q = args
                if not hinted(data_type.dtype.bitwidth):
                    # Plain indexing, compiled as the kernel's own `data[q]` would be.
                    value, column = (
                        context.compile_internal(builder, _getitem, ty.dtype(ty, q_type), [a, q])
                        for ty, a in ((data_type, data), (indices_type, indices)))
                else:
                    position = q
                    if q.type.width < 64:
                        extend = builder.sext if q_type.signed else builder.zext
                        position = extend(q, ir.IntType(64))
                    value = _hinted_load(context, builder, data_type, data, position)
                    column = _hinted_load(context, builder, indices_type, indices, position)
                return context.make_tuple(builder, signature.return_type, (value, column))

            return types.Tuple((data.dtype, indices.dtype))(data, indices, q), codegen

        entry.__name__ = entry.__qualname__ = name
        return intrinsic(entry)

    matrix_entry = _entry("matrix_entry", lambda bits: bits == 8 * HINTED_VALUE_BYTES)
    """``(data[q], indices[q])`` for a position ``q`` in range, read with the eviction hint
    where the values are :data:`HINTED_VALUE_BYTES` bytes."""

    streamed_entry = _entry("streamed_entry", lambda bits: True)
    """``(data[q], indices[q])`` for a position ``q`` in range, read with the eviction hint."""
