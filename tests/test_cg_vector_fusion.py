"""``benchmarks/cg_vector_fusion.py``'s two forms of cg's vector work (a kernel per pass, and
one kernel with grid barriers; three passes, and the two where the product forms p·q) leave the
same bits, run in numba-cuda's simulator (one block, the
only grid whose barrier the simulator's blocks, run one after another, can pass)."""

from __future__ import annotations

from simulator_run import REPO_ROOT, run_simulator_worker


def test_one_kernel_with_grid_barriers_leaves_the_three_passes_bits():
    differences = run_simulator_worker(REPO_ROOT / "benchmarks" / "cg_vector_fusion.py",
                                       300, "--check")
    assert set(differences) == {f"{dtype}-{form}" for dtype in ("float32", "float64")
                                for form in ("three", "two")}
    for by_vector in differences.values():
        assert by_vector == {"x": 0.0, "r": 0.0, "p": 0.0, "q": 0.0, "s": 0.0}
