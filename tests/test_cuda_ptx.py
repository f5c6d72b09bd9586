"""Every CUDA kernel compiles to PTX for compute capability 9.0, without a GPU.

Each kernel's device program is built from host arrays (they stand in for device arrays: only
their types matter) and every launch is compiled with ``cuda.compile_ptx``. This gives real numba
type inference and code generation for every kernel, in float32 and float64, on any machine, and
for vectors of the other dtype than the matrix's (a float32 matrix with float64 vectors).
Compilation is memoised: a kernel compiles once per argument types per session.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

cuda = pytest.importorskip("numba.cuda")
if cuda.config.ENABLE_CUDASIM:
    pytest.skip("PTX compilation needs the real numba-cuda, not its simulator",
                allow_module_level=True)

import autospmv  # noqa: E402
from autospmv import _registry as registry  # noqa: E402
from autospmv.formats.base import FormatTooLargeError  # noqa: E402
from autospmv._support.validation import canonicalize  # noqa: E402
from matrices import DTYPE_IDS, DTYPES, FAMILY, compiled_ptx, conversion_refused  # noqa: E402

CC = (9, 0)
KERNELS = autospmv.KERNELS
MATRICES = ["empty_0x0", "empty_5x0", "all_rows_empty_9x11", "row_1x300", "column_300x1",
            "dense_row_among_empty_50x2000", "huge_row_among_short_300x3000", "power_law_500",
            "poisson2d_169"]

def build_program(kernel: str, csr):
    spec = registry.get(kernel)
    params = registry.choose_params(kernel, csr, "cuda")
    fmt = spec.convert(csr, params)
    return spec.cuda_builder()(fmt, params, fmt.arrays())


def check_program(program, csr, y_dtype=None):
    """Every launch compiles to PTX with its kernel's entry; the steps can write all of y.
    Arithmetic is in y's dtype (the matrix's unless ``y_dtype`` names another): no float64
    operation in a float32 product, and no float32 one in a float64 product, whose float32
    operands are converted first."""
    from autospmv.kernels.cuda.launch import DeviceProgram, Launch

    assert isinstance(program, DeviceProgram)
    assert program.shape == csr.shape and program.dtype == csr.dtype
    launches = [step for step in program.steps if isinstance(step, Launch)]
    if csr.shape[0]:
        assert program.steps, "a matrix with rows needs at least one step to write y"
    if csr.nnz:
        assert launches, "a matrix with nonzeros needs a kernel launch"
    for step in program.steps:
        if not isinstance(step, Launch):
            assert step.ptx(CC) == "", f"{type(step).__name__} is not a kernel"
    for launch in launches:
        assert launch.grid >= 1
        assert launch.block % 32 == 0 and 32 <= launch.block <= 1024, "whole warps per block"
        ptx = compiled_ptx(launch, CC)
        assert f".target sm_{CC[0]}{CC[1]}" in ptx
        entries = [line for line in ptx.splitlines() if ".entry" in line]
        assert len(entries) == 1
        assert launch.dispatcher.py_func.__name__ in entries[0]
        if launch.overlaps_previous:  # it may start before the kernel it follows has ended
            assert "griddepcontrol.wait;" in ptx, "an overlapping launch that never waits"
        if np.dtype(y_dtype or csr.dtype) == np.float32:
            float64_ops = sorted(set(re.findall(r"^\s*[a-z][\w.]*\.f64\b", ptx, re.MULTILINE)))
            assert not float64_ops, f"a float32 kernel computes in float64: {float64_ops}"
        elif launch.dispatcher.py_func.__name__ != "csr5_clear_tile_ends":  # it only stores 0
            float32_ops = sorted(set(re.findall(r"^\s*(?:add|sub|mul|fma|mad)[\w.]*\.f32\b",
                                                ptx, re.MULTILINE)))
            assert not float32_ops, f"a float64 product computes in float32: {float32_ops}"
            if y_dtype is not None and csr.nnz:
                assert "cvt.f64.f32" in ptx, "no float32 operand converted to float64"


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_compiles_to_ptx(kernel, dtype, name):
    csr = canonicalize(FAMILY[name]().astype(dtype))
    if conversion_refused(kernel, csr):
        with pytest.raises(FormatTooLargeError, match="fill limit"):
            build_program(kernel, csr)
        return
    check_program(build_program(kernel, csr), csr)


MIXED = [(np.float32, np.float64), (np.float64, np.float32)]
"""(matrix dtype, x dtype) pairs whose product is float64 with a matrix kept in its own dtype."""


@pytest.mark.parametrize("name", ["power_law_500", "huge_row_among_short_300x3000"])
@pytest.mark.parametrize("matrix_dtype, x_dtype", MIXED,
                         ids=["float32_matrix-float64_x", "float64_matrix-float32_x"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_compiles_for_vectors_of_the_other_dtype(kernel, matrix_dtype, x_dtype, name):
    """The program for x of the other dtype (``DeviceProgram.for_vectors``) takes the matrix's
    arrays as they are, x and y in their own types, and computes in float64."""
    from autospmv.kernels.cuda.launch import Launch

    csr = canonicalize(FAMILY[name]().astype(matrix_dtype))
    if conversion_refused(kernel, csr):
        return  # test_compiles_to_ptx checks the refusal
    program = build_program(kernel, csr).for_vectors(np.dtype(x_dtype), np.dtype(np.float64))
    for launch in (step for step in program.steps if isinstance(step, Launch)):
        types = dict(zip(map(repr, launch.args), launch.argtypes))
        assert str(types["Y"].dtype) == "float64"
        assert "X" not in types or str(types["X"].dtype) == np.dtype(x_dtype).name
    check_program(program, csr, np.float64)


@pytest.mark.parametrize("kernel", KERNELS)
def test_compiles_with_int64_indices(kernel):
    """Matrices beyond 2**31 entries get int64 indices; the kernels must type-check for them."""
    csr = canonicalize(FAMILY["odd_65x47"]())
    csr.indptr = csr.indptr.astype(np.int64)
    csr.indices = csr.indices.astype(np.int64)
    program = build_program(kernel, csr)
    assert any(a.dtype == np.int64 for a in program.arrays.values())
    check_program(program, csr)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kernel", ["csr_scalar", "csr_vector", "ell", "jds"])
def test_one_launch_products_overlap_the_kernel_before(kernel, dtype):
    """A product of one launch is a programmatic dependent launch: its blocks start while the
    kernel before it ends (a solver's vector step) and wait for it before their first load from
    memory, and release their own dependents at once. Older GPUs have neither instruction."""
    csr = canonicalize(FAMILY["poisson2d_169"]().astype(dtype))
    launch, = build_program(kernel, csr).steps
    assert launch.overlaps_previous
    ptx = compiled_ptx(launch, CC)
    assert "griddepcontrol.launch_dependents;" in ptx
    assert ptx.index("griddepcontrol.wait;") < ptx.index("ld.global")
    assert "griddepcontrol" not in compiled_ptx(launch, (8, 0))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_csr_vector_carries_its_launch_bounds(dtype):
    """csr_vector is held to full occupancy (autospmv.kernels.cuda.csr.BLOCKS_PER_SM): the bound
    must reach the compiled kernel, or float64 takes more registers and runs slower."""
    from autospmv.kernels.cuda import csr as cuda_csr

    csr = canonicalize(FAMILY["power_law_500"]().astype(dtype))
    launch = build_program("csr_vector", csr).steps[0]
    ptx = compiled_ptx(launch, CC)
    assert re.search(rf"\.maxntid\s+{cuda_csr.BLOCK}\b", ptx)
    assert re.search(rf"\.minnctapersm\s+{cuda_csr.BLOCKS_PER_SM}\b", ptx)


@pytest.mark.parametrize("symmetric", [True, False], ids=["symmetric", "with_transpose"])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_the_walk_of_the_bfs_order_compiles(index, symmetric):
    """Every kernel of the bfs order's walk on the GPU, for both index dtypes, with Aᵀ's
    structure and without (a symmetric A)."""
    from autospmv.kernels.cuda.ordering import DeviceWalk

    A = canonicalize(FAMILY["power_law_500"]())
    indptr, indices = A.indptr.astype(index), A.indices.astype(index)
    transposed = (None, None) if symmetric else (indptr, indices)
    walk = DeviceWalk(indptr, indices, *transposed, A.shape[0], np)
    assert set(walk.launches) == {"degree", "hook", "jump", "least", "claim", "count", "scan",
                                  "place"}
    for name, launch in walk.launches.items():
        assert launch.block % 32 == 0 and launch.grid >= 1
        assert ".entry" in compiled_ptx(launch, CC), name
