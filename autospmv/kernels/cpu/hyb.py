"""HYB kernel on the CPU: the COO kernel writes the overflow, then the ELL kernel adds its part.

The COO kernel (:mod:`.coo`) overwrites ``y`` (zero for rows without overflow) and balances its
work by nonzeros, so a few very long rows do not serialise on one task; the ELL kernel
(:mod:`.ell`) then accumulates the first K entries of every row into ``y``.
"""

from __future__ import annotations

from . import coo, ell


def bind(fmt, params, parallel=None):
    overflow = coo.bind(fmt.coo, params, parallel)
    add_ell = ell.bind_ell(fmt.ell, True, parallel)

    def run(x, y):
        overflow(x, y)
        add_ell(x, y)

    return run
