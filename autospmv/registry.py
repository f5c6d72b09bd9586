"""The kernel registry: one entry per kernel name, tying together everything that name means.

An entry names the storage format the kernel reads, the parameter chooser that tunes it for a
matrix, and its CPU and CUDA implementations. Implementations are referenced as
``"module:attribute"`` strings and imported on first use, so that a CPU-only process never imports
numba-cuda and no kernel is compiled before a decision needs it. Adding a kernel means adding one
entry here plus its modules.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import scipy.sparse as sp

from .formats.base import SparseFormat, row_lengths


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """Everything the rest of autospmv needs to know about one kernel."""

    name: str
    format: str
    """``module:class`` of the storage format (a :class:`SparseFormat` subclass)."""
    cpu: str
    """``module:function`` ``bind(fmt, params) -> run`` where ``run(x, y)`` overwrites ``y``
    with ``A @ x`` (see ``kernels.cpu``)."""
    cuda: str
    """``module:function`` ``build(fmt, params) -> DeviceProgram`` (see ``kernels.cuda``)."""
    choose_params: Callable[[sp.csr_matrix], dict]
    """Tuning parameters for a canonical CSR matrix (pure function of its structure)."""
    format_params: tuple[str, ...] = ()
    """The entries of ``params`` that the format's ``from_csr`` takes."""

    def format_class(self) -> type[SparseFormat]:
        return _resolve(self.format)

    def convert(self, csr: sp.csr_matrix, params: dict) -> SparseFormat:
        """Build this kernel's storage format from canonical CSR."""
        kwargs = {key: params[key] for key in self.format_params}
        return self.format_class().from_csr(csr, **kwargs)

    def cpu_kernel(self) -> Callable:
        return _resolve(self.cpu)

    def cuda_builder(self) -> Callable:
        return _resolve(self.cuda)


def _resolve(reference: str):
    module, attribute = reference.split(":")
    return getattr(importlib.import_module(module), attribute)


def no_params(csr: sp.csr_matrix) -> dict:
    return {}


def choose_threads_per_row(csr: sp.csr_matrix) -> dict:
    """CSR-vector group size: the largest power of two ≤ a quarter of the mean row length,
    within [2, 32].

    Each lane then handles about four entries of an average row, which amortises the group's
    shuffle reduction; measured on an H200 (float64, 10–12M nonzeros), this was the fastest
    size or within 10 % of it on stencils, block FEM and uniform random rows, while one lane per
    entry (the group covering the whole row) was up to 2.6× slower.
    """
    m = csr.shape[0]
    quarter = csr.nnz / m / 4 if m else 0.0
    group = 2
    while group < 32 and 2 * group <= quarter:
        group *= 2
    return {"threads_per_row": group}


def choose_hyb_width(csr: sp.csr_matrix) -> dict:
    from .formats.hyb import default_hyb_width

    return {"width": int(default_hyb_width(row_lengths(csr)))}


def choose_csr5_sigma(csr: sp.csr_matrix) -> dict:
    from .formats.csr5 import choose_sigma

    return {"sigma": int(choose_sigma(csr))}


_REGISTRY = (
    KernelSpec(
        "coo", "autospmv.formats.coo:COOFormat", "autospmv.kernels.cpu.coo:bind",
        "autospmv.kernels.cuda.coo:build", no_params,
    ),
    KernelSpec(
        "csr_scalar", "autospmv.formats.csr:CSRFormat", "autospmv.kernels.cpu.csr:bind_scalar",
        "autospmv.kernels.cuda.csr:build_scalar", no_params,
    ),
    KernelSpec(
        "csr_vector", "autospmv.formats.csr:CSRFormat", "autospmv.kernels.cpu.csr:bind_vector",
        "autospmv.kernels.cuda.csr:build_vector", choose_threads_per_row,
    ),
    KernelSpec(
        "ell", "autospmv.formats.ell:ELLFormat", "autospmv.kernels.cpu.ell:bind",
        "autospmv.kernels.cuda.ell:build", no_params,
    ),
    KernelSpec(
        "hyb", "autospmv.formats.hyb:HYBFormat", "autospmv.kernels.cpu.hyb:bind",
        "autospmv.kernels.cuda.hyb:build", choose_hyb_width, ("width",),
    ),
    KernelSpec(
        "jds", "autospmv.formats.jds:JDSFormat", "autospmv.kernels.cpu.jds:bind",
        "autospmv.kernels.cuda.jds:build", no_params,
    ),
    KernelSpec(
        "csr5", "autospmv.formats.csr5:CSR5Format", "autospmv.kernels.cpu.csr5:bind",
        "autospmv.kernels.cuda.csr5:build", choose_csr5_sigma, ("sigma",),
    ),
)

KERNELS: tuple[str, ...] = tuple(spec.name for spec in _REGISTRY)
_BY_NAME = {spec.name: spec for spec in _REGISTRY}


def get(name: str) -> KernelSpec:
    """The registry entry for a kernel name, or a ValueError listing the valid names."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown kernel {name!r}; valid kernels: {', '.join(KERNELS)}"
        ) from None


def choose_params(name: str, csr: sp.csr_matrix, overrides: dict | None = None) -> dict:
    """The chooser's parameters for ``name`` on ``csr``, with explicit overrides applied."""
    params = get(name).choose_params(csr)
    for key, value in (overrides or {}).items():
        if key not in params:
            allowed = ", ".join(params) or "none"
            raise ValueError(f"kernel {name!r} has no parameter {key!r}; its parameters: {allowed}")
        params[key] = value
    return params


