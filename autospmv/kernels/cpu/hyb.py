"""HYB kernel on the CPU: the COO kernel writes the overflow, then the ELL kernel adds its part.

The COO kernel (:mod:`.coo`) overwrites ``y`` (zero for rows without overflow) and balances its
work by nonzeros, so a few very long rows do not serialise on one task; the ELL kernel
(:mod:`.ell`) then accumulates the first K entries of every row into ``y``.
"""

from __future__ import annotations

from .coo import spmv as coo_spmv
from .ell import ell_spmv


def spmv(fmt, x, y, params):
    coo_spmv(fmt.coo, x, y, params)
    ell_spmv(fmt.ell, x, y, True)
