"""Variant of autospmv/kernels/cuda/csr5.py for ``benchmarks/kernel_profile.py --compare``:
float32 complete tiles read as pairs, one 8-byte load for two values and one for two column
indices (half the load instructions of the matrix's arrays). Full tiles are re-laid out on the
device from (tiles, σ, ω) to (tiles, σ/2, ω, 2); other cases run the registered kernel. Not
kept: 1-8 % slower than the registered kernel in float32 on an H200
(``benchmarks/results/csr5-variants-h200-2026-11-23.md``)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import cuda, types, uint32, uint64
from numba.cuda.extending import intrinsic

from autospmv.formats.csr5 import OMEGA
from autospmv.kernels.cuda import csr5 as base_module
from autospmv.kernels.cuda import jit
from autospmv.kernels.cuda.launch import X, Y, DeviceProgram, Launch, ZeroY, unsigned



@intrinsic
def low_float(typingctx, word):
    """The float32 in the low half of a uint64 (the first of a pair: little-endian)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())
    return types.float32(types.uint64), codegen


@intrinsic
def high_float(typingctx, word):
    """The float32 in the high half of a uint64 (the second of a pair)."""
    def codegen(context, builder, signature, args):
        high = builder.lshr(args[0], ir.Constant(ir.IntType(64), 32))
        return builder.bitcast(builder.trunc(high, ir.IntType(32)), ir.FloatType())
    return types.float32(types.uint64), codegen


BLOCK = 256
STEP = 8
_FULL_MASK = 0xFFFFFFFF


@jit(cache=True)
def csr5_wide_kernel(tile_ptr, bit_flag, y_offset, seg_offset, empty_ptr, empty_offset, indices,
                     data, pair_indices, pair_data, x, y, sigma):
    lane = cuda.threadIdx.x % OMEGA
    tile = cuda.grid(1) // OMEGA
    ntiles = tile_ptr.shape[0] - 1
    nnz = data.shape[0]
    zero = data.dtype.type(0)
    active = tile < ntiles
    if not active:
        tile = ntiles - 1
    size = OMEGA * sigma
    base = tile * size
    full = base + size <= nnz
    row0 = tile_ptr[tile]
    dirty = row0 < 0
    if dirty:
        row0 = ~row0
    next_row0 = tile_ptr[tile + 1]
    if next_row0 < 0:
        next_row0 = ~next_row0
    if active and full and next_row0 == row0:  # a complete tile inside one row
        k = uint64(base // 2 + lane)
        stop = uint64((base + size) // 2)
        acc = zero
        other = zero
        while k < stop:  # sigma/2 pairs per lane, a multiple of 4
            d0 = pair_data[k]
            c0 = pair_indices[k]
            d1 = pair_data[k + uint64(OMEGA)]
            c1 = pair_indices[k + uint64(OMEGA)]
            d2 = pair_data[k + uint64(2 * OMEGA)]
            c2 = pair_indices[k + uint64(2 * OMEGA)]
            d3 = pair_data[k + uint64(3 * OMEGA)]
            c3 = pair_indices[k + uint64(3 * OMEGA)]
            acc += ((low_float(d0) * x[uint32(c0)] + high_float(d0) * x[c0 >> uint64(32)])
                    + (low_float(d1) * x[uint32(c1)] + high_float(d1) * x[c1 >> uint64(32)]))
            other += ((low_float(d2) * x[uint32(c2)] + high_float(d2) * x[c2 >> uint64(32)])
                      + (low_float(d3) * x[uint32(c3)] + high_float(d3) * x[c3 >> uint64(32)]))
            k += uint64(4 * OMEGA)
        acc += other
        offset = OMEGA // 2
        while offset > 0:
            acc += cuda.shfl_down_sync(_FULL_MASK, acc, offset)
            offset //= 2
        if lane == 0:
            cuda.atomic.add(y, row0, acc)
        return
    empty_base = empty_ptr[tile]
    descriptor = tile * OMEGA + lane
    bits = bit_flag[descriptor]
    segment = y_offset[descriptor]
    next_start = seg_offset[descriptor]
    head = zero
    starts = False
    acc = zero
    if full:
        start = base + lane
        stride = OMEGA
        count = sigma
    else:
        start = base + lane * sigma
        stride = 1
        count = min(sigma, max(0, nnz - start))
    if not active:
        count = 0
    pair_start = uint64(base // 2 + lane)
    last = start + (count - 1) * stride
    j = 0
    while j < count:
        if full:
            q = pair_start + uint64((j // 2) * OMEGA)
            d0 = pair_data[q]
            c0 = pair_indices[q]
            d1 = pair_data[q + uint64(OMEGA)]
            c1 = pair_indices[q + uint64(OMEGA)]
            d2 = pair_data[q + uint64(2 * OMEGA)]
            c2 = pair_indices[q + uint64(2 * OMEGA)]
            d3 = pair_data[q + uint64(3 * OMEGA)]
            c3 = pair_indices[q + uint64(3 * OMEGA)]
            p0 = low_float(d0) * x[uint32(c0)]
            p1 = high_float(d0) * x[c0 >> uint64(32)]
            p2 = low_float(d1) * x[uint32(c1)]
            p3 = high_float(d1) * x[c1 >> uint64(32)]
            p4 = low_float(d2) * x[uint32(c2)]
            p5 = high_float(d2) * x[c2 >> uint64(32)]
            p6 = low_float(d3) * x[uint32(c3)]
            p7 = high_float(d3) * x[c3 >> uint64(32)]
        else:
            q0 = start + j * stride
            q1 = min(q0 + stride, last)
            q2 = min(q0 + 2 * stride, last)
            q3 = min(q0 + 3 * stride, last)
            q4 = min(q0 + 4 * stride, last)
            q5 = min(q0 + 5 * stride, last)
            q6 = min(q0 + 6 * stride, last)
            q7 = min(q0 + 7 * stride, last)
            p0 = data[q0] * x[indices[q0]]
            p1 = data[q1] * x[indices[q1]] if j + 1 < count else zero
            p2 = data[q2] * x[indices[q2]] if j + 2 < count else zero
            p3 = data[q3] * x[indices[q3]] if j + 3 < count else zero
            p4 = data[q4] * x[indices[q4]] if j + 4 < count else zero
            p5 = data[q5] * x[indices[q5]] if j + 5 < count else zero
            p6 = data[q6] * x[indices[q6]] if j + 6 < count else zero
            p7 = data[q7] * x[indices[q7]] if j + 7 < count else zero
        flags = (bits >> j) & 0xFF
        if flags == 0:
            acc += ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
        else:
            for step in range(STEP):
                if (flags >> step) & 1:
                    if starts:
                        row = row0 + (empty_offset[empty_base + segment] if dirty else segment)
                        if segment == 0:
                            cuda.atomic.add(y, row, acc)
                        else:
                            y[row] = acc
                        segment += 1
                    else:
                        head = acc
                        starts = True
                    acc = zero
                acc += p0
                p0 = p1
                p1 = p2
                p2 = p3
                p3 = p4
                p4 = p5
                p5 = p6
                p6 = p7
        j += STEP
    reach = 0
    if not starts:
        head = acc
        reach = min(next_start, OMEGA - 1 - lane)
    offset = 1
    while offset < OMEGA:
        other = cuda.shfl_down_sync(_FULL_MASK, head, offset)
        if offset <= reach:
            head += other
        offset *= 2
    following = cuda.shfl_down_sync(_FULL_MASK, head, 1)
    if starts:
        if lane == OMEGA - 1:
            following = zero
        total = acc + following
        row = row0 + (empty_offset[empty_base + segment] if dirty else segment)
        if segment == 0 or lane + next_start == OMEGA:
            cuda.atomic.add(y, row, total)
        else:
            y[row] = total


def pair_layout(values, sigma, xp):
    """Full tiles from (tiles, sigma, omega) to (tiles, sigma/2, omega, 2)."""
    size = OMEGA * sigma
    full = values.shape[0] // size * size
    out = values.copy()
    tiles = full // size
    paired = values[:full].reshape(tiles, sigma // 2, 2, OMEGA).transpose(0, 1, 3, 2)
    out[:full] = paired.reshape(-1)
    return out, full


def build(fmt, params, arrays) -> DeviceProgram:
    if fmt.dtype != np.float32 or fmt.sigma % STEP or not fmt.ntiles:
        return base_module.build(fmt, params, arrays)
    import cupy as cp

    data, full = pair_layout(cp.asarray(arrays["data"]), fmt.sigma, cp)
    indices, _ = pair_layout(cp.asarray(unsigned(arrays["indices"])), fmt.sigma, cp)
    keep = dict(arrays, pair_data=data, pair_indices=indices)
    m = fmt.shape[0]
    steps = [ZeroY(m, fmt.dtype.itemsize)] if m else []
    args = [arrays[name] for name in ("tile_ptr", "bit_flag", "y_offset", "seg_offset",
                                      "empty_ptr", "empty_offset")]
    args += [indices, data, indices[:full].view(cp.uint64), data[:full].view(cp.uint64)]
    steps.append(Launch(csr5_wide_kernel, -(-fmt.ntiles * OMEGA // BLOCK), BLOCK,
                        args + [X, Y, np.int32(fmt.sigma)], fmt.dtype))
    return DeviceProgram(fmt.shape, fmt.dtype, keep, steps)
