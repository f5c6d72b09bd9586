"""HYB kernel on the GPU: the ELL kernel writes ``y``, then the COO kernel adds the overflow.

Two launches of the kernels in :mod:`.ell` (one thread per row, coalesced column-major slots) and
:mod:`.coo` (one thread per overflow entry, a warp-segmented reduction, one atomic per run). The
ELL launch writes every row, so ``y`` needs no zeroing; with width 0 a memset takes its place.

Weak where the width is poorly chosen: too small and most entries go through the slower COO path,
too large and the ELL part pads. The default width (:func:`autospmv.formats.hyb.width_cusp`) is
reached by at least a third of the rows (and 4096 of them), so padding stays within 3× the ELL
part's entries and small matrices go to COO entirely.
"""

from __future__ import annotations

import functools

import numpy as np

from .coo import coo_launch
from .ell import ell_launch
from .launch import DeviceProgram, ZeroY


def build(fmt, params, arrays) -> DeviceProgram:
    m = fmt.shape[0]
    nnz = fmt.coo.data.shape[0]
    steps = []
    with_dot = None
    if m:
        if fmt.width:
            launch = functools.partial(ell_launch, m, fmt.width, arrays["ell_col"],
                                       arrays["ell_data"], fmt.dtype)
            steps.append(launch())
            if not nnz:  # the ELL launch alone writes every row once
                with_dot = launch
        else:
            steps.append(ZeroY(m, np.dtype(fmt.dtype).itemsize))
    if nnz:
        steps.append(coo_launch(nnz, arrays["coo_row"], arrays["coo_col"], arrays["coo_data"],
                                fmt.dtype))
    return DeviceProgram(fmt.shape, fmt.dtype, arrays, steps, with_dot=with_dot)
