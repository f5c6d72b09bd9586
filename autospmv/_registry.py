"""The kernel registry: one entry per kernel name, tying together everything that name means.

An entry (:class:`KernelSpec`) names the storage format the kernel reads, its CPU and CUDA
implementations, the parameter chooser that tunes it for a matrix, the parameter variants the
labeller times besides the chooser's (``training/label.py``) and the function counting its cost
quantities (:mod:`autospmv._decide.cost`). Formats, implementations, choosers and cost functions
are referenced as ``"module:attribute"`` strings (or given as the objects themselves) and imported
on first use, so that a CPU-only process never imports numba-cuda, no kernel is compiled before a
decision needs it, and the registry imports none of the modules it names: the formats stand below
it, and the kernels and the deciding, which read it, above.

The seven built-in kernels are :data:`KERNELS`. Another kernel joins with :func:`register` (and
leaves with :func:`unregister`); everything that enumerates kernels (the cost quantities and the
features, model loading, the labeller, the CLI) iterates :func:`names` / :func:`specs`, so adding a
kernel means one entry plus its modules. A trained model decides only among the kernels it was
trained on, so a registered kernel is chosen automatically only by a model that knows it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import numpy as np
import scipy.sparse as sp

from .formats.base import DeviceCSR, SparseFormat


@dataclasses.dataclass(frozen=True)
class Param:
    """A kernel parameter: its name, the integers it may take, and how to say so.

    Parameters
    ----------
    name : str
        The key in ``prepare(A, kernel=..., params={name: value})``.
    low : int
        Smallest allowed value.
    high : int, optional
        Largest allowed value (None: unbounded).
    powers_of_two : bool, default False
        Whether only powers of two are allowed.

    Examples
    --------
    >>> from autospmv import Param
    >>> Param("block_rows", 1, 64, powers_of_two=True).check("my_kernel", 8)
    8
    """

    name: str
    low: int
    high: int | None = None
    """Largest allowed value (None: unbounded)."""
    powers_of_two: bool = False

    def allowed(self) -> str:
        if self.powers_of_two:
            values = [1 << k for k in range(self.high.bit_length()) if self.low <= 1 << k]
            return "a power of two from {} to {} ({})".format(
                self.low, self.high, ", ".join(map(str, values)))
        if self.high is None:
            return f"an integer >= {self.low}"
        return f"an integer from {self.low} to {self.high}"

    def check(self, kernel: str, value) -> int:
        """``value`` checked for ``kernel``.

        Parameters
        ----------
        kernel : str
            The kernel's name, for the message.
        value : int
            The value given.

        Returns
        -------
        int
            ``value`` as a Python int.

        Raises
        ------
        ValueError
            Naming the allowed values, when ``value`` is not one of them.
        """
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
        if ok:
            value = int(value)
            ok = (value >= self.low and (self.high is None or value <= self.high)
                  and (not self.powers_of_two or value & (value - 1) == 0))
        if not ok:
            raise ValueError(f"kernel {kernel!r} parameter {self.name} must be {self.allowed()}; "
                             f"got {value!r}")
        return value


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """Everything the rest of autospmv needs to know about one kernel.

    Each field below is a constructor parameter. The parts are named as ``"module:attribute"``
    strings, imported when first used, so that the registry imports none of them.

    Parameters
    ----------
    name : str
        The kernel's name: a lower-case identifier.
    format, cpu, cuda, choose_params : str
        See the attributes of the same names.
    format_params, format_takes_device, params, cost, variants, choose_params_of_lengths
        Optional; see the attributes of the same names.

    Examples
    --------
    :doc:`/kernels` registers a whole kernel (three files and one entry).
    """

    name: str
    format: str
    """``module:class`` of the storage format (a :class:`SparseFormat` subclass)."""
    cpu: str
    """``module:function`` ``bind(fmt, params, parallel=None) -> run`` where ``run(x, y)``
    overwrites ``y`` with ``A @ x`` (see ``kernels.cpu``)."""
    cuda: str
    """``module:function`` ``build(fmt, params, arrays) -> DeviceProgram``, ``arrays`` being the
    format's arrays on the device (see ``kernels.cuda``)."""
    choose_params: str | Callable[[sp.csr_matrix, str], dict]
    """``module:function`` giving the tuning parameters for a canonical CSR matrix on a device
    (``"cpu"`` or ``"cuda"``): a pure function of the matrix's structure and the device kind."""
    format_params: tuple[str, ...] = ()
    """The entries of ``params`` that the format's ``from_csr`` takes."""
    format_takes_device: bool = False
    """Whether the format's ``from_csr`` takes ``device=`` (JDS: its fill limit bounds GPU
    thread slots and does not apply on the CPU)."""
    params: tuple[Param, ...] = ()
    """Every parameter the kernel takes, with its allowed values (:meth:`check_params`)."""
    cost: str | Callable | None = None
    """``module:function`` ``quantities(inputs) -> (bytes, work, span, atomics, launches)``
    over a :class:`autospmv._decide.features.quantities.CostInputs`: the kernel's cost quantities
    (see :mod:`autospmv._decide.cost`).
    None: the kernel has none (a model's cost model cannot then estimate it)."""
    variants: str | Callable[[sp.csr_matrix], list[tuple[str, Callable[[], dict]]]] = (
        dataclasses.field(default=lambda csr: []))
    """``module:function`` giving the parameter variants the labeller times besides the
    chooser's, for a canonical CSR matrix: ``(strategy, params)`` pairs, ``params`` a function
    returning the parameters (the labeller records an exception it raises as that variant's
    failure); none by default (:meth:`variants_of`)."""
    choose_params_of_lengths: str | Callable[[np.ndarray, np.ndarray, str], dict] | None = None
    """``module:function`` returning what :attr:`choose_params` returns, computed from the matrix's
    row-length histogram (the distinct row lengths, ascending, and how many rows have each) and the
    device kind, for a chooser that reads nothing else of the matrix. A caller that already holds
    the histogram (an automatic decision: the feature scan builds it) then does not compute the
    row lengths again. None: :attr:`choose_params` is always called."""

    def check_params(self, params: dict) -> dict:
        """``params`` checked against :attr:`params`: exactly this kernel's names, each an
        allowed value (Python ints in the result), or a ValueError saying what is allowed.
        The one place where parameter values are checked, for a chooser's values, a user's
        overrides and any Decision an operator is built from."""
        if not isinstance(params, dict):
            raise ValueError(f"params must be a dict; got {type(params).__name__}")
        known = {p.name: p for p in self.params}
        for key in params:
            if key not in known:
                allowed = ", ".join(known) or "none"
                raise ValueError(f"kernel {self.name!r} has no parameter {key!r}; "
                                 f"its parameters: {allowed}")
        missing = [name for name in known if name not in params]
        if missing:
            raise ValueError(f"kernel {self.name!r} needs parameter {', '.join(missing)}")
        return {name: known[name].check(self.name, value) for name, value in params.items()}

    def format_class(self) -> type[SparseFormat]:
        return _resolve(self.format)

    def convert(self, csr, params: dict, device: str = "cuda") -> SparseFormat:
        """Build this kernel's storage format from canonical CSR, for ``device`` (the GPU's
        limits by default): on the host from a ``scipy.sparse.csr_matrix``, on the device from
        a :class:`~autospmv.formats.base.DeviceCSR`."""
        kwargs = {key: params[key] for key in self.format_params}
        if self.format_takes_device:
            kwargs["device"] = device
        if isinstance(csr, DeviceCSR):
            return self.format_class().from_device_csr(csr, **kwargs)
        return self.format_class().from_csr(csr, **kwargs)

    def cpu_kernel(self) -> Callable:
        return _resolve(self.cpu)

    def cuda_builder(self) -> Callable:
        return _resolve(self.cuda)

    def cost_function(self) -> Callable | None:
        return None if self.cost is None else _resolve(self.cost)

    def chooser(self) -> Callable[[sp.csr_matrix, str], dict]:
        return _resolve(self.choose_params)

    def lengths_chooser(self) -> Callable[[np.ndarray, np.ndarray, str], dict] | None:
        return (None if self.choose_params_of_lengths is None
                else _resolve(self.choose_params_of_lengths))

    def variants_of(self, csr: sp.csr_matrix) -> list[tuple[str, Callable[[], dict]]]:
        """The ``(strategy, params)`` pairs of :attr:`variants` for ``csr``."""
        return _resolve(self.variants)(csr)


def _resolve(reference):
    """The object a ``"module:attribute"`` reference names (imported now), or ``reference``
    itself when it is already the object (a kernel defined outside a module autospmv knows)."""
    if not isinstance(reference, str):
        return reference
    module, attribute = reference.split(":")
    return getattr(importlib.import_module(module), attribute)


THREADS_PER_ROW = Param("threads_per_row", 1, 32, powers_of_two=True)
"""CSR-vector's group size: the lanes of a group reduce with warp shuffles, so the group must
divide the 32-thread warp."""
HYB_WIDTH = Param("width", 0)
"""HYB's ELL width (clamped to the longest row by the format)."""
CSR5_SIGMA = Param("sigma", 2, 32)
"""CSR5's tile height σ: a lane's σ bit flags fit one uint32 (``formats.csr5.SIGMA_RANGE``)."""

_BUILT_IN = (
    KernelSpec(
        "coo", "autospmv.formats.coo:COOFormat", "autospmv.kernels.cpu.coo:bind",
        "autospmv.kernels.cuda.coo:build", "autospmv._decide.choosers:no_params",
        cost="autospmv._decide.cost:coo",
    ),
    KernelSpec(
        "csr_scalar", "autospmv.formats.csr:CSRFormat", "autospmv.kernels.cpu.csr:bind_scalar",
        "autospmv.kernels.cuda.csr:build_scalar", "autospmv._decide.choosers:no_params",
        cost="autospmv._decide.cost:csr_scalar",
    ),
    KernelSpec(
        "csr_vector", "autospmv.formats.csr:CSRFormat", "autospmv.kernels.cpu.csr:bind_vector",
        "autospmv.kernels.cuda.csr:build_vector",
        "autospmv._decide.choosers:choose_threads_per_row",
        params=(THREADS_PER_ROW,), cost="autospmv._decide.cost:csr_vector",
        choose_params_of_lengths="autospmv._decide.choosers:choose_threads_per_row_of_lengths",
        variants="autospmv._decide.choosers:threads_per_row_variants",
    ),
    KernelSpec(
        "ell", "autospmv.formats.ell:ELLFormat", "autospmv.kernels.cpu.ell:bind",
        "autospmv.kernels.cuda.ell:build", "autospmv._decide.choosers:no_params",
        cost="autospmv._decide.cost:ell",
    ),
    KernelSpec(
        "hyb", "autospmv.formats.hyb:HYBFormat", "autospmv.kernels.cpu.hyb:bind",
        "autospmv.kernels.cuda.hyb:build", "autospmv._decide.choosers:choose_hyb_width",
        ("width",), params=(HYB_WIDTH,), cost="autospmv._decide.cost:hyb",
        variants="autospmv._decide.choosers:hyb_width_variants",
        choose_params_of_lengths="autospmv._decide.choosers:choose_hyb_width_of_lengths",
    ),
    KernelSpec(
        "jds", "autospmv.formats.jds:JDSFormat", "autospmv.kernels.cpu.jds:bind",
        "autospmv.kernels.cuda.jds:build", "autospmv._decide.choosers:no_params",
        format_takes_device=True, cost="autospmv._decide.cost:jds",
    ),
    KernelSpec(
        "csr5", "autospmv.formats.csr5:CSR5Format", "autospmv.kernels.cpu.csr5:bind",
        "autospmv.kernels.cuda.csr5:build", "autospmv._decide.choosers:choose_csr5_sigma",
        ("sigma",), params=(CSR5_SIGMA,), cost="autospmv._decide.cost:csr5",
        variants="autospmv._decide.choosers:csr5_sigma_variants",
    ),
)

KERNELS: tuple[str, ...] = tuple(spec.name for spec in _BUILT_IN)
"""The built-in kernels, in the order every listing uses (registered ones follow them)."""
_BY_NAME = {spec.name: spec for spec in _BUILT_IN}


def names() -> tuple[str, ...]:
    """The names of every kernel now in the registry.

    Returns
    -------
    tuple of str
        :data:`KERNELS`, then the kernels added by :func:`register`, in the order they were
        added.

    Examples
    --------
    >>> import autospmv
    >>> autospmv.kernel_names()[:3]
    ('coo', 'csr_scalar', 'csr_vector')
    """
    return tuple(_BY_NAME)


def specs() -> tuple[KernelSpec, ...]:
    """The registry's entries, in the order of :func:`names`."""
    return tuple(_BY_NAME.values())


def register(spec: KernelSpec) -> None:
    """Add a kernel to the registry, so that ``prepare(A, kernel=spec.name)``, ``bench`` and
    the labeller take it (the shipped models never choose it; a retrained one may).

    Parameters
    ----------
    spec : KernelSpec
        The kernel: its name, format and builders (:doc:`/kernels` shows a whole example).

    Raises
    ------
    ValueError
        When ``spec`` is not a :class:`KernelSpec`, or its name is taken or not a lower-case
        identifier (it becomes part of feature names such as ``<kernel>_bytes``).

    Examples
    --------
    >>> import autospmv
    >>> autospmv.register(spec)            # doctest: +SKIP
    >>> autospmv.prepare(A, kernel=spec.name)  # doctest: +SKIP
    """
    if not isinstance(spec, KernelSpec):
        raise ValueError(f"register() takes a KernelSpec; got {type(spec).__name__}")
    if not (isinstance(spec.name, str) and spec.name.isidentifier() and spec.name.islower()):
        raise ValueError(f"a kernel name must be a lower-case identifier; got {spec.name!r}")
    if spec.name in _BY_NAME:
        raise ValueError(f"kernel {spec.name!r} is already registered")
    _BY_NAME[spec.name] = spec


def unregister(name: str) -> None:
    """Remove a kernel added by :func:`register`.

    Parameters
    ----------
    name : str
        The kernel's name.

    Raises
    ------
    ValueError
        For a built-in kernel, or a name the registry does not hold.

    Examples
    --------
    >>> autospmv.unregister(spec.name)     # doctest: +SKIP
    """
    if name in KERNELS:
        raise ValueError(f"kernel {name!r} is built in and cannot be unregistered")
    get(name)
    del _BY_NAME[name]


def get(name: str) -> KernelSpec:
    """The registry entry for a kernel name, or a ValueError listing the valid names."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown kernel {name!r}; valid kernels: {', '.join(names())}"
        ) from None


def choose_params(name: str, csr: sp.csr_matrix, device: str,
                  overrides: dict | None = None, *,
                  lengths: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """The chooser's parameters for ``name`` on ``csr`` and ``device``, with explicit overrides
    applied.

    The chooser runs only for the parameters the overrides leave open: when they give every
    parameter of the kernel, its values would all be replaced, so it is not run (it may read
    the whole matrix, e.g. HYB's computes every row length). ``lengths``: the matrix's
    row-length histogram (distinct lengths ascending, their counts) when the caller has it;
    a kernel with :attr:`KernelSpec.choose_params_of_lengths` then chooses from it."""
    spec = get(name)
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError(f"params must be a dict; got {type(overrides).__name__}")
    overrides = overrides or {}
    if all(param.name in overrides for param in spec.params):
        return spec.check_params(dict(overrides))
    lengths_chooser = None if lengths is None else spec.lengths_chooser()
    if lengths_chooser is not None:
        params = lengths_chooser(*lengths, device)
    else:
        params = spec.chooser()(csr, device)
    params.update(overrides)
    return spec.check_params(params)
