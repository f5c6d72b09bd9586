"""Representative sparse matrices generated in well under a second: what ``autospmv demo``
shows, and the solver benchmark's matrices when it is given no folder
(:mod:`autospmv._tools.bench_solvers`)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def demo_matrices() -> dict[str, sp.csr_matrix]:
    """A handful of representative structures, generated in well under a second."""
    rng = np.random.default_rng(0)

    def from_rows(lengths, n: int, columns=None) -> sp.csr_matrix:
        rows = np.repeat(np.arange(lengths.size), lengths)
        cols = rng.integers(0, n, rows.size) if columns is None else columns
        return sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)),
                             shape=(lengths.size, n))

    lap1 = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(300, 300))
    poisson = sp.kronsum(lap1, lap1, format="csr")
    powerlaw = from_rows(np.minimum((rng.pareto(1.5, 50_000) * 3 + 1).astype(int), 5_000), 50_000)
    mesh = from_rows(rng.integers(4, 9, 20_000), 20_000) + sp.identity(20_000)
    fem = sp.kron(mesh, np.ones((3, 3)), format="csr")
    lengths = 1 + rng.poisson(3.0, 60_000)
    lengths[:3] = 60_000
    dense_rows = from_rows(lengths, 60_000)
    return {"2-D Poisson 300×300 grid": poisson, "power-law rows": powerlaw,
            "3×3-block FEM-like": fem, "3 dense rows among short ones": dense_rows}
