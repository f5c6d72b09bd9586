"""Tests of the device-specific parameter choosers (CSR-vector group size, CSR5 tile height):
the formulas of their docstrings on matrices whose answer is worked out by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from matrices import ALL, from_row_lengths, numpy_device_csr, poisson2d

import autospmv
from autospmv._decide import choosers
from autospmv import _registry as registry
from autospmv._decide.features.extract import features
from autospmv._decide.features.sampling import SAMPLE_TARGET_NNZ, x_locality
from autospmv._support.validation import canonicalize


def rows_of(lengths, n: int = 400) -> sp.csr_matrix:
    return canonicalize(from_row_lengths(np.asarray(lengths), n, seed=3))


def group(csr, device: str) -> int:
    return choosers.choose_threads_per_row(csr, device)["threads_per_row"]


@pytest.mark.parametrize("name", sorted(ALL))
def test_cpu_group_is_two_and_every_choice_is_valid(name):
    csr = canonicalize(ALL[name]())
    assert group(csr, "cpu") == 2
    assert group(csr, "cuda") in (2, 4, 8, 16, 32)
    assert choosers.choose_csr5_sigma(csr, "cuda")["sigma"] in (4, 6, 8, 12, 16)
    assert choosers.choose_csr5_sigma(csr, "cpu")["sigma"] in (16, 24, 32)


def test_cuda_group_on_regular_rows(monkeypatch):
    # 200 rows of 64: L = 64, g₀ = 16. Few warps: rows·g/(8W) is tiny and the shorter loop of
    # g = 32 (2 steps against 4) wins; on a saturated GPU (W = 1) the throughput term keeps 16.
    csr = rows_of([64] * 200)
    assert group(csr, "cuda") == 32
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", 1)
    assert group(csr, "cuda") == 16


def test_cuda_group_for_one_long_row_among_short_ones(monkeypatch):
    # 100 000 rows of 1 and one of 300: L = (10⁵ + 300²)/100 300 ≈ 1.9, so g₀ = 2; the costs
    # 10⁵·g/32768 + ⌈300/g⌉ are 156.1, 87.2, 62.4, 67.8 and 107.7 for g = 2…32.
    csr = rows_of([1] * 100_000 + [300], n=1000)
    assert group(csr, "cuda") == 8
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", 10**9)  # the long row alone counts
    assert group(csr, "cuda") == 32
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", 1)  # the warps alone count
    assert group(csr, "cuda") == 2


def test_empty_matrices_get_the_smallest_group():
    for shape in [(0, 0), (5, 0), (7, 3)]:
        assert group(canonicalize(sp.csr_matrix(shape)), "cuda") == 2


def test_cuda_sigma_halves_for_few_tiles_or_very_short_rows(monkeypatch):
    nine = rows_of([9] * 300)  # structural σ 16, one tile's worth of warps: halved
    assert choosers.structural_sigma(nine) == 16
    assert choosers.choose_csr5_sigma(nine, "cuda") == {"sigma": 8}
    assert choosers.choose_csr5_sigma(nine, "cpu") == {"sigma": 32}
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", 1)  # as many tiles as warps in flight
    # Then the locality of x counts too (see the next test): these 9 random columns of 400 a
    # row come from few sectors per warp, so the wide tile.
    assert x_locality(nine) < choosers.LOCAL_X
    assert choosers.choose_csr5_sigma(nine, "cuda") == {"sigma": choosers.WIDE_SIGMA}
    short = rows_of([1] * 300 + [2] * 100)  # mean 1.25 < 2: halved even with many tiles
    assert choosers.structural_sigma(short) == 12  # rounded up to 16 on CUDA, then halved
    assert choosers.choose_csr5_sigma(short, "cuda") == {"sigma": 8}


def banded(half_width: int, m: int, dtype=np.float64) -> sp.csr_matrix:
    """Rows of 2·half_width + 1 consecutive columns around the diagonal (fewer at the ends)."""
    offsets = range(-half_width, half_width + 1)
    return canonicalize(sp.diags([np.ones(m)] * len(offsets), offsets, shape=(m, m),
                                 format="csr", dtype=dtype))


def scattered(length: int, m: int, dtype=np.float64) -> sp.csr_matrix:
    """Rows of ``length`` random columns out of a million: each entry reads its own sector."""
    return canonicalize(from_row_lengths(np.full(m, length), 10**6, seed=4).astype(dtype))


def test_cuda_sigma_follows_the_locality_of_x(monkeypatch):
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", 1)  # every matrix has tiles enough
    local_wide = banded(4, 3000)  # 9 a row from a few sectors: the wide tile
    local_short = banded(2, 3000)  # 5 a row: rows shorter than SHORT_ROWS keep 16
    far = scattered(9, 3000)  # a sector per entry: the short tile
    assert x_locality(local_wide) < choosers.LOCAL_X
    assert x_locality(local_short) < choosers.LOCAL_X
    assert x_locality(far) >= choosers.SCATTERED_X
    sigma = {name: choosers.choose_csr5_sigma(csr, "cuda")["sigma"]
             for name, csr in [("wide", local_wide), ("short", local_short), ("far", far)]}
    assert sigma == {"wide": choosers.WIDE_SIGMA, "short": 16, "far": 8}
    # The wide tile needs as many tiles as σ = 16 does.
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", local_wide.nnz // (32 * 20))
    assert choosers.choose_csr5_sigma(local_wide, "cuda") == {"sigma": 16}
    # The CPU's tiles do not depend on x.
    assert choosers.choose_csr5_sigma(local_wide, "cpu") == {"sigma": 32}
    assert choosers.choose_csr5_sigma(far, "cpu") == {"sigma": 32}


def test_cuda_sigma_on_long_rows_depends_on_the_dtype(monkeypatch):
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", 1)
    lengths = np.full(8, choosers.LONG_ROWS)
    single = canonicalize(from_row_lengths(lengths, 10**6, seed=5).astype(np.float32))
    double = canonicalize(single.astype(np.float64))
    assert choosers.choose_csr5_sigma(single, "cuda") == {"sigma": 16}
    assert choosers.choose_csr5_sigma(double, "cuda") == {"sigma": 8}
    monkeypatch.setattr(choosers, "CUDA_WARPS_IN_FLIGHT", 10**6)  # few tiles: halved
    assert choosers.choose_csr5_sigma(single, "cuda") == {"sigma": 8}
    assert choosers.choose_csr5_sigma(double, "cuda") == {"sigma": 4}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_x_locality_is_the_feature_on_a_small_matrix_and_close_on_a_large_one(dtype):
    rng = np.random.default_rng(7)
    for m, n, density in [(1, 1, 1.0), (33, 70, 0.2), (500, 3000, 0.01), (2000, 900, 0.015)]:
        csr = canonicalize(sp.random(m, n, density=density, random_state=rng, dtype=dtype))
        assert csr.nnz <= SAMPLE_TARGET_NNZ
        assert x_locality(csr) == features(csr)["x_sectors_per_nnz_warp"]
    assert x_locality(canonicalize(sp.csr_matrix((4, 4), dtype=dtype))) == 0.0
    large = banded(6, 200_000, dtype)  # 2.6 M nonzeros: about 1/80 of its windows are read
    assert abs(x_locality(large) - features(large)["x_sectors_per_nnz_warp"]) <= 0.02


def test_x_locality_of_a_matrix_on_the_device_reads_its_sampled_indices():
    csr = scattered(5, 40_000)
    device = numpy_device_csr(csr)
    structure = device.structure()
    assert structure.device_matrix is device
    assert x_locality(structure) == x_locality(csr)


def test_choosers_refuse_an_unknown_device():
    csr = rows_of([3] * 10)
    for kernel in ("csr_vector", "csr5"):
        with pytest.raises(ValueError, match="parameters are chosen for a device"):
            registry.choose_params(kernel, csr, None)


def test_select_tunes_for_the_requested_device():
    # select() decides for a GPU even where none is present.
    nine = rows_of([9] * 300)
    assert autospmv.select(nine, kernel="csr5", device="cuda").params == {"sigma": 8}
    assert autospmv.select(nine, kernel="csr5", device="cpu").params == {"sigma": 32}


def _refusing_chooser(csr, device):
    raise AssertionError("the chooser ran")


@pytest.mark.parametrize("kernel, params", [
    ("hyb", {"width": 7}), ("csr_vector", {"threads_per_row": 4}), ("csr5", {"sigma": 8}),
])
def test_overrides_giving_every_parameter_skip_the_chooser(monkeypatch, kernel, params):
    spec = dataclasses.replace(registry.get(kernel), choose_params=_refusing_chooser)
    monkeypatch.setitem(registry._BY_NAME, kernel, spec)
    csr = rows_of([3] * 10)
    assert registry.choose_params(kernel, csr, "cpu", params) == params
    # Overrides that leave a parameter open still ask the chooser; a full set is still checked.
    with pytest.raises(AssertionError, match="the chooser ran"):
        registry.choose_params(kernel, csr, "cpu", {})
    with pytest.raises(ValueError, match="has no parameter 'bogus'"):
        registry.choose_params(kernel, csr, "cpu", {**params, "bogus": 1})


def test_a_forced_hyb_with_its_width_computes_the_row_lengths_once(row_length_passes):
    """The width is given, so no chooser runs, and the format needs only the longest row."""
    A = canonicalize(poisson2d(40))  # 1600 rows of 3 to 5 entries
    m = A.shape[0]
    autospmv.prepare(A, kernel="hyb", params={"width": 7}, device="cpu")  # compiles first
    row_length_passes.clear()
    op = autospmv.prepare(A, kernel="hyb", params={"width": 7}, device="cpu")
    assert op.params == {"width": 7} and op.format.width == 5  # clamped to the longest row
    assert row_length_passes[m] == 1
    np.testing.assert_allclose(op @ np.ones(A.shape[1]), A @ np.ones(A.shape[1]))


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("kind", ["cpu", "cuda"])
@pytest.mark.parametrize("kernel, chooser", [("hyb", choosers.choose_hyb_width),
                                             ("csr_vector", choosers.choose_threads_per_row)])
def test_parameters_from_the_scans_histogram_are_the_choosers(name, kind, kernel, chooser):
    from autospmv._decide.features.extract import features_and_lengths

    csr = canonicalize(ALL[name]())
    lengths = features_and_lengths(csr, device=kind)[1]
    assert registry.choose_params(kernel, csr, kind, lengths=lengths) == chooser(csr, kind)


@pytest.mark.parametrize("name", sorted(ALL))
def test_hyb_width_chooser_is_cusps_rule_on_the_row_lengths(name):
    # The chooser counts the histogram in compiled passes; the rule reads the lengths.
    from autospmv.formats.base import row_lengths
    from autospmv.formats.hyb import default_hyb_width

    csr = canonicalize(ALL[name]())
    assert choosers.choose_hyb_width(csr, "cuda") == {"width": default_hyb_width(row_lengths(csr))}
