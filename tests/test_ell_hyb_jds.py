"""ELL, HYB and JDS: width strategies, layouts, round trips, fill limits, CPU kernels, CUDA PTX.

The matrices are ``matrices.PADDED``. The CUDA kernels are compiled to PTX here (no GPU needed);
running them is left to ``test_kernels.py`` (on a real GPU) and the simulator suite.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import autospmv
from autospmv.formats.base import FormatTooLargeError, row_lengths
from autospmv.formats.ell import ELL_SMALL, ELLFormat
from autospmv.formats.hyb import (
    HYBFormat, default_hyb_width, width_cost, width_cusp, width_cusp_of_histogram, width_quantile,
)
from autospmv.formats.jds import JDSFormat
from autospmv.kernels.cpu import coo as cpu_coo
from autospmv.kernels.cpu import ell as cpu_ell
from autospmv.kernels.cpu import hyb as cpu_hyb
from autospmv.kernels.cpu import jds as cpu_jds
from autospmv._support.validation import canonicalize
from matrices import DTYPES, PADDED, TOLERANCE


def _canonical(name, dtype=np.float64):
    return canonicalize(PADDED[name]().astype(dtype))


def _same_csr(a, b):
    return (a.shape == b.shape and a.dtype == b.dtype
            and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data, b.data))


# ---------------------------------------------------------------- width strategies

@pytest.mark.parametrize("q, expected", [(0, 0), (0.5, 1), (2 / 3, 2), (0.7, 5), (1, 9)])
def test_width_quantile(q, expected):
    assert width_quantile([9, 0, 1, 5, 1, 2], q) == expected


def test_width_quantile_rejects_bad_q():
    with pytest.raises(ValueError, match=r"q must lie in \[0, 1\]"):
        width_quantile([1, 2], 1.5)


@pytest.mark.parametrize("counts, expected", [
    ({3: 5000, 10: 4000}, 3),     # 4000 rows reach 4..10: fewer than 4096
    ({2: 9000, 7: 6000}, 7),      # threshold m/3 = 5000 rows: 6000 reach 7
    ({1: 20000, 5: 6000}, 1),     # 6000 reach 5, fewer than m/3 = 8667
    ({4: 5000}, 4),               # uniform rows: no COO part
    ({0: 50, 8: 50}, 0),          # below 4096 rows CUSP leaves everything to COO
])
def test_width_cusp(counts, expected):
    lengths = np.repeat(list(counts), list(counts.values()))
    assert width_cusp(lengths) == expected
    values, histogram = np.unique(lengths, return_counts=True)
    assert width_cusp_of_histogram(values, histogram) == expected


@pytest.mark.parametrize("seed", range(5))
def test_width_cusp_of_histogram_equals_width_cusp(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.geometric(rng.uniform(0.02, 0.5), size=int(rng.integers(3000, 30000))) - 1
    values, histogram = np.unique(lengths, return_counts=True)
    assert width_cusp_of_histogram(values, histogram) == width_cusp(lengths)


@pytest.mark.parametrize("lengths, coo_cost, expected", [
    ([1, 1, 1, 1, 10], 3.0, 1),   # cost(K) = 5K + 3 overflow(K): 42, 32, 34, ...
    ([3, 0, 0], 3.0, 0),          # cost 9 for every K: the tie goes to the smallest
    ([4, 4, 4, 4], 3.0, 4),       # uniform rows: all ELL
    ([4, 4, 4, 4], 0.5, 0),       # COO cheaper than a slot: all COO
    ([0, 0, 0], 3.0, 0),
])
def test_width_cost(lengths, coo_cost, expected):
    assert width_cost(lengths, coo_cost) == expected


def test_width_cost_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        lengths = np.minimum(rng.zipf(1.6, rng.integers(1, 300)), 150)
        costs = [lengths.size * k + 3.0 * np.maximum(lengths - k, 0).sum()
                 for k in range(lengths.max() + 1)]
        assert width_cost(lengths) == int(np.argmin(costs))


@pytest.mark.parametrize("strategy", [width_quantile, width_cusp, width_cost])
def test_width_strategies_on_empty_matrices(strategy):
    assert strategy(np.zeros(0, dtype=np.int64)) == 0
    assert strategy(np.zeros(7, dtype=np.int64)) == 0


def test_default_width_is_cusps_and_within_the_fill_limit():
    assert default_hyb_width is width_cusp
    rng = np.random.default_rng(3)
    lengths = np.minimum(1 + rng.zipf(1.8, 20_000), 2_000)  # skewed rows, enough for CUSP's K > 0
    indptr = np.concatenate(([0], np.cumsum(lengths)))
    csr = sp.csr_matrix((np.ones(indptr[-1]), rng.integers(0, 5_000, indptr[-1]), indptr),
                        shape=(20_000, 5_000))
    csr.sum_duplicates()
    width = default_hyb_width(row_lengths(csr))
    assert width > 0 and csr.shape[0] * width <= 3 * csr.nnz
    HYBFormat.from_csr(csr, width, max_fill=3.0)


# ---------------------------------------------------------------- layouts and round trips

SMALL = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 0, 0], [3, 0, 0]]))


def test_ell_layout_is_column_major_with_trailing_padding():
    ell = ELLFormat.from_csr(canonicalize(SMALL))
    assert ell.width == 2
    np.testing.assert_array_equal(ell.col, [0, -1, 0, 2, -1, -1])
    np.testing.assert_array_equal(ell.data, [1, 0, 3, 2, 0, 0])


def test_jds_layout_sorts_rows_stably_by_length():
    jds = JDSFormat.from_csr(canonicalize(SMALL))
    np.testing.assert_array_equal(jds.perm, [0, 2, 1])
    np.testing.assert_array_equal(jds.jd_ptr, [0, 2, 3])
    np.testing.assert_array_equal(jds.col, [0, 0, 2])
    np.testing.assert_array_equal(jds.data, [1, 3, 2])


def test_hyb_layout_splits_at_the_width():
    hyb = HYBFormat.from_csr(canonicalize(SMALL), 1)
    np.testing.assert_array_equal(hyb.ell.col, [0, -1, 0])
    np.testing.assert_array_equal(hyb.coo.row, [0])
    np.testing.assert_array_equal(hyb.coo.col, [2])
    np.testing.assert_array_equal(hyb.coo.data, [2])
    assert set(hyb.arrays()) == {"ell_col", "ell_data", "coo_row", "coo_col", "coo_data"}


def _conversions(csr):
    yield ELLFormat.from_csr(csr)
    yield JDSFormat.from_csr(csr)
    for width in (0, 1, 3, default_hyb_width(row_lengths(csr)), 10**9):
        yield HYBFormat.from_csr(csr, width)


@pytest.mark.parametrize("name", PADDED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_is_exact(name, dtype):
    csr = _canonical(name, dtype)
    for fmt in _conversions(csr):
        assert fmt.dtype == dtype
        assert _same_csr(fmt.to_csr(), csr), fmt.name


def test_hyb_clamps_the_width_to_the_longest_row():
    csr = _canonical("rect_37x61")
    hyb = HYBFormat.from_csr(csr, 1000)
    assert hyb.width == row_lengths(csr).max()
    assert hyb.coo.data.size == 0


def test_hyb_rejects_negative_width():
    with pytest.raises(ValueError, match="HYB width must be >= 0; got -1"):
        HYBFormat.from_csr(_canonical("diagonal"), -1)


def test_formats_keep_int64_indices():
    csr = _canonical("power_law")
    csr.indptr = csr.indptr.astype(np.int64)
    csr.indices = csr.indices.astype(np.int64)
    for fmt in _conversions(csr):
        for key, array in fmt.arrays().items():
            if not key.endswith("data"):
                assert array.dtype == np.int64, (fmt.name, key)
        assert _same_csr(fmt.to_csr(), csr)


# ---------------------------------------------------------------- fill limits

def _one_long_row(m, long_length):
    """m rows of one entry each, except row 0 with ``long_length`` entries (n = long_length)."""
    row = np.concatenate([np.zeros(long_length, dtype=int), np.arange(1, m)])
    col = np.concatenate([np.arange(long_length), np.arange(1, m) % long_length])
    return canonicalize(sp.csr_matrix((np.ones(row.size), (row, col)), shape=(m, long_length)))


def test_ell_refuses_excessive_padding():
    csr = _one_long_row(70_000, 10)  # 700,000 slots for 70,009 nonzeros
    with pytest.raises(FormatTooLargeError, match=(
            r"ELL would need 700,000 padded slots \(70,000 rows x width 10\) for 70,009 nonzeros "
            r"\(10\.0x\), above the fill limit of 3x nnz .*use kernel 'hyb' .* or 'csr5'")):
        ELLFormat.from_csr(csr)
    assert ELLFormat.from_csr(csr, max_fill=10.0).width == 10


def test_ell_accepts_small_matrices_whatever_the_fill():
    csr = _one_long_row(200, 300)  # 60,000 slots for 499 nonzeros
    assert csr.shape[0] * 300 <= ELL_SMALL
    assert _same_csr(ELLFormat.from_csr(csr).to_csr(), csr)


def test_hyb_refuses_a_width_beyond_the_fill_limit():
    csr = _one_long_row(70_000, 10)
    with pytest.raises(FormatTooLargeError, match=(
            r"HYB would need 700,000 ELL slots .* choose a smaller width "
            r"\(the default is 1\) or use kernel 'csr5'")):
        HYBFormat.from_csr(csr, 10)


def test_jds_refuses_idle_warp_slots():
    csr = _one_long_row(64, 3000)  # warps: 32 x 3000 + 32 x 1 slots for 3,063 nonzeros
    with pytest.raises(FormatTooLargeError, match=(
            r"JDS would need 96,032 GPU thread slots .* for 3,063 nonzeros .*"
            r"use kernel 'hyb' or 'csr5'")):
        JDSFormat.from_csr(csr)
    # The same long row among many rows is cheap: it idles one warp only.
    JDSFormat.from_csr(_one_long_row(100_000, 3000))


def test_jds_on_the_cpu_has_no_thread_slot_limit():
    """The limit counts GPU thread slots; the CPU kernel stops each row at its end."""
    csr = _one_long_row(64, 3000)
    assert _same_csr(JDSFormat.from_csr(csr, device="cpu").to_csr(), csr)
    op = autospmv.prepare(csr, kernel="jds", device="cpu")
    x = np.arange(csr.shape[1], dtype=np.float64)
    np.testing.assert_allclose(op @ x, csr @ x, rtol=1e-12)
    with pytest.raises(FormatTooLargeError, match="JDS would need 96,032 GPU thread slots"):
        autospmv._registry.get("jds").convert(csr, {}, "cuda")


# ---------------------------------------------------------------- CPU kernels

@pytest.fixture(params=[False, True], ids=["serial", "parallel"])
def parallel(request, monkeypatch):
    """Run each kernel's serial or parallel specialisation whatever the matrix size."""
    for module in (cpu_coo, cpu_ell, cpu_jds):
        monkeypatch.setattr(module, "use_parallel", lambda nnz: request.param)
    return request.param


CPU_CASES = [
    ("ell", ELLFormat.from_csr, cpu_ell.bind),
    ("jds", JDSFormat.from_csr, cpu_jds.bind),
    ("hyb-default", lambda c: HYBFormat.from_csr(c, default_hyb_width(row_lengths(c))),
     cpu_hyb.bind),
    ("hyb-0", lambda c: HYBFormat.from_csr(c, 0), cpu_hyb.bind),
    ("hyb-2", lambda c: HYBFormat.from_csr(c, 2), cpu_hyb.bind),
]


@pytest.mark.parametrize("name", PADDED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_kernels_match_scipy(name, dtype, parallel):
    csr = _canonical(name, dtype)
    x = np.random.default_rng(1).standard_normal(csr.shape[1]).astype(dtype)
    reference = csr.astype(np.float64) @ x.astype(np.float64)
    for case, convert, bind in CPU_CASES:
        y = np.full(csr.shape[0], 7.0, dtype=dtype)  # the kernel must overwrite, not add
        bind(convert(csr), {})(x, y)
        error = np.linalg.norm(y - reference) / max(np.linalg.norm(reference), np.finfo(float).tiny)
        assert error <= TOLERANCE[np.dtype(dtype)], (case, error)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_kernels_propagate_nan_and_inf_like_scipy(dtype, parallel):
    csr = _canonical("power_law", dtype)
    x = np.random.default_rng(2).standard_normal(csr.shape[1]).astype(dtype)
    x[[0, 5]] = np.nan
    x[-1] = np.inf  # padding (col = -1) must never read it
    reference = csr @ x
    for case, convert, bind in CPU_CASES:
        y = np.empty(csr.shape[0], dtype=dtype)
        bind(convert(csr), {})(x, y)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(reference), err_msg=case)
        np.testing.assert_array_equal(np.isinf(y), np.isinf(reference), err_msg=case)


@pytest.mark.parametrize("kernel", ["ell", "hyb", "jds"])
def test_prepare_runs_the_registered_cpu_kernel(kernel):
    A = PADDED["rect_37x61"]()
    x = np.arange(61.0)
    op = autospmv.prepare(A, kernel=kernel, device="cpu")
    assert op.format.name == kernel
    np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12)


# ---------------------------------------------------------------- CUDA programs (PTX, no GPU)

def _program(kernel, csr, params):
    from autospmv import _registry as registry

    spec = registry.get(kernel)
    fmt = spec.convert(csr, params)
    return spec.cuda_builder()(fmt, params, fmt.arrays())


@pytest.mark.parametrize("kernel, params", [("coo", {}), ("ell", {}), ("jds", {}),
                                            ("hyb", {"width": 2})])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_programs_compile_to_ptx(kernel, params, dtype):
    from autospmv.kernels.cuda.launch import Launch

    program = _program(kernel, _canonical("power_law", dtype), params)
    launches = [step for step in program.steps if isinstance(step, Launch)]
    assert len(launches) == (2 if kernel == "hyb" else 1)
    suffix = "f32" if dtype == np.float32 else "f64"
    for launch in launches:
        ptx = launch.ptx((9, 0))
        assert ".visible .entry" in ptx
        if launch.dispatcher.__name__ == "coo_kernel":
            assert "shfl.sync.down" in ptx and f"atom.global.add.{suffix}" in ptx


def test_cuda_programs_skip_needless_steps():
    from autospmv.kernels.cuda.launch import Launch, ZeroY

    def steps(kernel, name, params=None):
        return [type(s) for s in _program(kernel, _canonical(name), params or {}).steps]

    for kernel in ("coo", "ell", "jds", "hyb"):
        params = {"width": 0} if kernel == "hyb" else {}
        assert steps(kernel, "0x4", params) == []
    assert steps("coo", "empty_rows") == [ZeroY]
    assert steps("hyb", "empty_rows", {"width": 0}) == [ZeroY]
    assert steps("hyb", "power_law", {"width": 0}) == [ZeroY, Launch]
    assert steps("hyb", "power_law", {"width": 10**9}) == [Launch]
    assert steps("ell", "empty_rows") == [Launch]
    assert steps("jds", "empty_rows") == [Launch]
