"""``benchmarks/gmres_projection.py``'s projection by warp slices sums the basis's dot products
with w and w·w as NumPy does in float64, both dtypes, in numba-cuda's simulator (a grid of two
blocks, so that the last block adds another's sums)."""

from __future__ import annotations

from simulator_run import REPO_ROOT, run_simulator_worker


def test_the_projection_by_slices_gives_numpys_sums():
    differences = run_simulator_worker(REPO_ROOT / "benchmarks" / "gmres_projection.py", 300,
                                       "--check")
    assert set(differences) == {f"{dtype}-{count}" for dtype in ("float32", "float64")
                                for count in (3, 9)}
    for difference in differences.values():
        assert difference <= 1e-13
