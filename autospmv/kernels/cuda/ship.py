"""Build the archives of cubins shipped with the package (:mod:`autospmv.kernels.cuda.cubins`).

    python -m autospmv.kernels.cuda.ship --build autospmv/kernels/cuda/shipped [--cc 9.0 8.0]

Run it on a machine with a CUDA GPU (numba-cuda needs a context to compile, whatever the target)
and the numba-cuda version the package pins (the ``cuda`` extra): an entry's key holds that
version (:func:`.cubins.entry_key`), and entries of another version are never used. numba's
version does not matter (the archives serve every numba version the package allows).

It writes one archive per compute capability, ``sm_<cc>.cubins``, holding every kernel of the
package compiled for every argument types a product reaches: each kernel's
program for float32 and float64 matrices with 32-bit indices, for vectors of either dtype
(:meth:`autospmv.kernels.cuda.launch.DeviceProgram.for_vectors`), and the multi-vector kernels;
and the kernels that count the features of a matrix on the GPU
(:func:`.feature_passes.shipped_launches`) and that convert a matrix on the GPU to COO, ELL
and HYB (:func:`.conversions.shipped_launches`), so that deciding and converting compile nothing
either.
Each kernel is compiled exactly as numba-cuda's dispatcher compiles it on a GPU of that compute
capability (its ``_Kernel``, with the dispatcher's options), in worker processes.
Matrices with 64-bit indices are not covered: their kernels compile on first use.

Rebuild the archives whenever a kernel's sources (:func:`.cubins.kernel_sources`) or the pinned
numba-cuda version change; stale entries are harmless (never matched) but useless. The tests
check that the archives hold every specialization under the keys of the installed versions
(``tests/test_cubins.py``).
"""

from __future__ import annotations

import argparse
import json
import concurrent.futures
import importlib
import multiprocessing
import sys
import time
import types as pytypes
from pathlib import Path

import numpy as np
import scipy.sparse as sp

DEFAULT_CCS = ((9, 0), (8, 0))
"""The compute capabilities the archives are built for: those of the GPUs the shipped models
are for (H100, H200: 9.0), and the A100's (8.0)."""


def _sample_matrices(dtype) -> list[sp.csr_matrix]:
    """Matrices whose programs reach every launch of every kernel: short rows (csr5 clears its
    tile ends; hyb has no COO part) and a few long rows among short ones (hyb's COO part, csr5's
    memset, multi-vector pieces of long rows)."""
    from ..._support.validation import canonicalize

    rng = np.random.default_rng(0)
    m = 4096
    short = sp.random(m, m, density=2 / m, format="csr", random_state=rng, dtype=np.float64)
    lengths = np.where(np.arange(m) % 512 == 0, 1500, 6)
    rows = np.repeat(np.arange(m), lengths)
    cols = rng.integers(0, m, rows.size)
    mixed = sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(m, m))
    return [canonicalize(A.astype(dtype)) for A in (short, mixed)]


def specializations() -> list[tuple]:
    """``(kernel dispatcher, argument types)`` of every launch a product reaches (see the module
    docstring), without duplicates, found by building the programs from host arrays."""
    from ... import _registry as registry
    from ...formats.base import FormatTooLargeError
    from ..._support.validation import result_dtype
    from .backend import VECTOR_DTYPES
    from . import conversions, feature_passes
    from .launch import Launch
    from .spmm_programs import (FEW_COLUMNS, few_columns_group, launches, long_row_pieces,
                                programs_for)

    found = {}

    def add(steps):
        for step in steps:
            if isinstance(step, Launch):
                found.setdefault((step.dispatcher.py_func, step.argtypes), step.dispatcher)

    for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        for csr in _sample_matrices(dtype):
            arrays = {"indptr": csr.indptr, "indices": csr.indices, "data": csr.data}
            pieces = long_row_pieces(csr.indptr)
            group = few_columns_group(csr.shape, csr.indptr, pieces)
            for kernel in registry.names():
                spec = registry.get(kernel)
                params = registry.choose_params(kernel, csr, "cuda")
                try:
                    fmt = spec.convert(csr, params, "cuda")
                except FormatTooLargeError:
                    continue
                program = spec.cuda_builder()(fmt, params, fmt.arrays())
                for x_dtype in VECTOR_DTYPES:
                    y_dtype = result_dtype(dtype, x_dtype)
                    add(program.steps if x_dtype == dtype
                        else program.for_vectors(x_dtype, y_dtype).steps)
                    add(step.launch for step in launches(csr.shape, arrays, pieces, group,
                                                         2, x_dtype, y_dtype))
                    for name, _ in programs_for(FEW_COLUMNS + 1):
                        add(step.launch for step in launches(csr.shape, arrays, pieces, group,
                                                             FEW_COLUMNS + 1, x_dtype, y_dtype,
                                                             name))
    for dispatcher, argtypes in (feature_passes.shipped_launches()
                                 + conversions.shipped_launches()):
        found.setdefault((dispatcher.py_func, argtypes), dispatcher)
    return [(dispatcher, argtypes) for (_, argtypes), dispatcher in found.items()]


def compile_cubin(dispatcher, argtypes, cc) -> tuple[str, bytes] | None:
    """``(entry name, cubin)`` of ``dispatcher`` compiled for ``argtypes`` as numba-cuda's
    dispatcher compiles it on a GPU of compute capability ``cc`` (architecture-specific code,
    ``sm_90a``, from 9.0 on, as numba-cuda links it); None for a kernel that needs set-up
    functions. Needs a CUDA context (numba-cuda reads the current device while compiling)."""
    from numba.cuda import dispatcher as cuda_dispatcher

    from .cubins import cubin_bytes

    current = cuda_dispatcher.get_current_device
    cuda_dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(
        compute_capability=tuple(cc))
    try:
        kernel = cuda_dispatcher._Kernel(dispatcher.py_func, argtypes, **dispatcher.targetoptions)
    finally:
        cuda_dispatcher.get_current_device = current
    library = kernel._codelibrary
    if library._setup_functions or library._teardown_functions:
        return None
    arch = (cc[0], cc[1], "a" if tuple(cc) >= (9, 0) else "")
    image = cubin_bytes(library.get_cubin(cc=arch))
    return None if image is None else (library._entry_name, image)


def _job(module: str, name: str, argtypes, cc) -> tuple[str, tuple, str, bytes] | None:
    """A worker's compilation: ``(entry key, cc, entry name, cubin)`` or None."""
    from . import cubins

    dispatcher = getattr(importlib.import_module(module), name)
    compiled = compile_cubin(dispatcher, argtypes, cc)
    if compiled is None:
        return None
    return cubins.entry_key(dispatcher, argtypes, cc), tuple(cc), *compiled


BUILT_WITH = "built-with.json"
"""The file beside the archives naming the numba-cuda version they were built with, the one
version that enters their entries' keys: a check that finds no entry can say whether the
version or the sources changed."""


def built_with() -> dict:
    """The versions that enter every entry's key (:func:`.cubins.entry_key`), in this process:
    ``{"numba-cuda": version}``."""
    from .cubins import numba_cuda_version

    return {"numba-cuda": numba_cuda_version}


def build(folder: Path, ccs=DEFAULT_CCS, jobs: int | None = None, log=print) -> dict:
    """Compile every specialization for every compute capability of ``ccs`` in ``jobs`` worker
    processes (0: in this process; None: one per core) and write ``folder/sm_<cc>.cubins``.
    Returns ``{cc: (entries, bytes)}``."""
    from . import cubins

    started = time.perf_counter()
    work = [(d.py_func.__module__, d.py_func.__name__, argtypes, tuple(cc))
            for d, argtypes in specializations() for cc in ccs]
    log(f"{len(work)} compilations ({len(work) // len(ccs)} kernels and argument types "
        f"× {len(ccs)} compute capabilities)")
    entries = {tuple(cc): {} for cc in ccs}
    if jobs == 0:  # in this process
        results = [_job(*job) for job in work]
    else:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            results = list(pool.map(_job, *zip(*work)))
    for result in results:
        if result is not None:
            key, cc, name, image = result
            entries[cc][key] = (name, image)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / BUILT_WITH).write_text(json.dumps(built_with(), indent=1) + "\n", encoding="utf-8")
    sizes = {}
    for cc, found in entries.items():
        path = folder / f"sm_{cc[0]}{cc[1]}.cubins"
        cubins.write_archive(path, found)
        sizes[cc] = (len(found), path.stat().st_size)
        log(f"{path}: {len(found)} entries, {path.stat().st_size:,} bytes")
    log(f"built in {time.perf_counter() - started:.1f} s")
    return sizes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, required=True, metavar="FOLDER",
                        help="where to write the archives (the package's: "
                             "autospmv/kernels/cuda/shipped)")
    parser.add_argument("--cc", nargs="+", default=[f"{a}.{b}" for a, b in DEFAULT_CCS],
                        help="compute capabilities, e.g. 9.0 8.0")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: one per core; 0: none)")
    args = parser.parse_args(argv)
    ccs = [tuple(int(part) for part in cc.split(".")) for cc in args.cc]
    build(args.build, ccs, args.jobs, log=lambda text: print(text, file=sys.stderr, flush=True))


if __name__ == "__main__":
    main()
