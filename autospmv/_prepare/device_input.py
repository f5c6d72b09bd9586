"""Matrices that already live on the GPU: CuPy and torch sparse input, converted on the device.

:func:`prepare` accepts ``cupyx.scipy.sparse`` CSR, COO and CSC matrices and torch sparse COO and
CSR tensors on a CUDA device. Their nonzeros never travel to the host:

* **Canonical form on the device.** CuPy: ``tocsr()`` and ``sum_duplicates()`` (which also sorts
  the columns) when the matrix is not canonical yet, then the value and index dtypes of
  :mod:`autospmv._support.validation`. torch: ``coalesce()`` (sorted, summed) and
  ``to_sparse_csr()``, then the tensors are viewed as CuPy arrays through
  ``__cuda_array_interface__`` (no copy). CuPy is needed in both cases (the ``cuda`` extra's
  natural companion).
* **What goes to the host: the row pointer** (m + 1 integers, not nnz-sized). The parameter
  choosers and the fill limits depend on the row lengths alone and are computed from it on the
  host; the ELL width, the JDS row order and (for large matrices without empty rows) the CSR5
  tile descriptors are computed on the device.
* **The decision** (:func:`autospmv._decide.selection.decide`). With ``kernel=`` the kernel is
  used as on host input. Automatic selection on a matrix of more than
  :data:`autospmv._decide.features.sampling.SAMPLE_THRESHOLD` nonzeros uses the model, with the
  features a host matrix would get, counted on the GPU
  (:mod:`autospmv._decide.features.device_scan`): nothing of the nonzeros comes to the host. A
  smaller matrix is decided by the built-in rule of
  :func:`autospmv._decide.selection.rule_decision` (row lengths only). The decision's notes say
  which.
* **Conversion on the device**: every format builds itself from the uploaded CSR
  (:meth:`autospmv.formats.base.SparseFormat.from_device_csr`), also for host input on the GPU
  when CuPy is installed (:func:`upload_csr`): COO, ELL and HYB with shipped kernels
  (:mod:`autospmv.kernels.cuda.conversions`, nothing compiled on a first run), JDS and CSR5
  with CuPy array operations.
"""

from __future__ import annotations

import dataclasses
import time

from .._decide.ordering import OrderChoice, apply_order, choose_order
from .._support import devices
from .._support.validation import borrows, canonicalize, index_dtype, value_dtype
from ..formats.base import DeviceCSR


@dataclasses.dataclass
class Input:
    """A matrix as :func:`prepare` and :func:`select` go on with it (:func:`canonical_input`)."""

    csr: object
    """The canonical matrix in the order it is stored in: a host ``csr_matrix``, or a
    :class:`DeviceCSR` for a matrix that lives on the GPU."""
    device: str
    """Where the operator runs (or, for :func:`select`, what it decides for)."""
    order: OrderChoice
    """The order of rows and columns ``csr`` is in, and why (:func:`choose_order`)."""
    source: object = None
    """The GPU matrix as the caller gave it, or in the stored order when that differs (kept
    for transposes); None for a host matrix."""
    borrowed: bool = False
    """Whether ``csr`` shares the caller's arrays (:func:`borrows`)."""
    uploaded: DeviceCSR | None = None
    """The host ``csr`` already on the GPU (:func:`upload_for`), or None."""


def canonical_input(A, device: str | None, *, order: str = "keep", products: int | None = None,
                    runs: bool = True, host_only: str | None = None,
                    gathers: bool = True, model=None) -> Input:
    """A canonicalised (on the device for a GPU matrix, :func:`canonical_device_csr`; else
    :func:`canonicalize`), in the order ``order=`` chooses for ``products`` products
    (:func:`choose_order`; renumbered on the device for a GPU matrix), with the device it runs
    on and, for host input on the GPU, uploaded once (:func:`upload_for`): where it is
    renumbered, its order is walked and its copy renumbered there (:func:`renumbering_of`), and
    the host matrix in the new order is copied back from it (``DeviceCSR.to_host``; the copy
    counts in the order's seconds).

    ``runs=False`` (for :func:`select`): the device is only decided for, so it need not be
    present, and nothing is uploaded. ``host_only``: an option that needs a host matrix (e.g.
    ``"tune='measure'"``), for the ValueError a GPU matrix then raises. ``gathers`` and
    ``model`` (whose fitted order rule "auto" weighs with): as :func:`choose_order`'s."""
    if is_device_matrix(A):
        if host_only:
            raise ValueError(f"{host_only} needs a host (SciPy) matrix")
        if devices.check_device(device) == "cpu":
            raise ValueError("this matrix lives on the GPU; prepare it with device='cuda' (or "
                             "None), or pass a SciPy matrix for device='cpu'")
        device = devices.resolve_device("cuda") if runs else "cuda"
        choice, csr = choose_order(canonical_device_csr(A), order, products, device,
                                   permute=permuted_device_csr, gathers=gathers, model=model)
        return Input(csr, device, choice, source=A if choice.kept else csr.sparse())
    device = devices.resolve_device(device) if runs else devices.target_device(device)
    canonical = canonicalize(A)
    uploaded = upload_for(canonical, device) if runs else None
    choice, csr = choose_order(canonical, order, products, device,
                               permute=renumbering_of(uploaded), gathers=gathers, model=model,
                               walk_on=uploaded)
    if isinstance(csr, DeviceCSR):  # renumbered on the uploaded copy
        started = time.perf_counter()
        uploaded, csr = csr, csr.to_host()
        choice = dataclasses.replace(choice, seconds=choice.seconds + time.perf_counter()
                                     - started)
    return Input(csr, device, choice, borrowed=choice.kept and borrows(A, canonical),
                 uploaded=uploaded)


def is_device_matrix(A) -> bool:
    """True for a CuPy sparse matrix or a torch sparse CUDA tensor (the kinds :func:`prepare`
    takes on the device); False for anything else, without importing CuPy or torch."""
    module = type(A).__module__.split(".")[0]
    if module == "cupyx":
        return getattr(A, "format", None) in ("csr", "coo", "csc")
    if module == "torch":
        import torch

        return (isinstance(A, torch.Tensor) and A.is_cuda
                and A.layout in (torch.sparse_coo, torch.sparse_csr))
    return False


def canonical_device_csr(A) -> DeviceCSR:
    """A as a canonical :class:`DeviceCSR` (see the module docstring), computed on the GPU."""
    try:
        import cupy
        import cupyx.scipy.sparse as cusp
    except ImportError:
        raise ImportError("autospmv needs CuPy to take matrices that live on the GPU; install "
                          "cupy (e.g. pip install cupy-cuda12x) or pass a SciPy matrix") from None
    module = type(A).__module__.split(".")[0]
    if module == "torch":
        import torch

        if A.layout == torch.sparse_csr:
            A = A.to_sparse_coo()
        if A.ndim != 2:
            raise ValueError(f"autospmv needs a 2-D matrix; got a {A.ndim}-D sparse tensor")
        A = A.coalesce().to_sparse_csr()
        shape = tuple(int(s) for s in A.shape)
        values = cupy.asarray(A.values())  # integer, bool and float16 values converted first,
        values = values.astype(value_dtype(values.dtype), copy=False)  # as on the host
        matrix = cusp.csr_matrix((values, cupy.asarray(A.col_indices()),
                                  cupy.asarray(A.crow_indices())), shape=shape)
        canonical = True  # coalesce() sorted and summed
    else:
        matrix = A.tocsr() if A.format != "csr" else A
        shape = tuple(int(s) for s in matrix.shape)
        canonical = matrix.has_canonical_format
    if not canonical:
        matrix = matrix.copy()
        matrix.sum_duplicates()  # also sorts the columns
    dtype = value_dtype(matrix.dtype)
    itype = index_dtype(int(matrix.nnz), shape)
    indptr = matrix.indptr.astype(itype, copy=False)
    return DeviceCSR(shape, indptr, matrix.indices.astype(itype, copy=False),
                     matrix.data.astype(dtype, copy=False), cupy.asnumpy(indptr), cupy,
                     gpu_conversions())


def gpu_conversions():
    """The GPU's conversion kernels (:mod:`autospmv.kernels.cuda.conversions`), which every
    :class:`DeviceCSR` on the GPU carries (:attr:`DeviceCSR.conversions`)."""
    from ..kernels.cuda import conversions

    return conversions


def upload_csr(csr) -> DeviceCSR | None:
    """A canonical host CSR uploaded with CuPy (the same copy as
    ``cupyx.scipy.sparse.csr_matrix(csr)``), for conversion on the GPU; None without CuPy.

    This is how :func:`autospmv.prepare` builds GPU formats from host input: the host does no
    conversion and keeps no copy, and the GPU's conversion is a few passes at its bandwidth."""
    try:
        import cupy
    except ImportError:
        return None
    return DeviceCSR(csr.shape, cupy.asarray(csr.indptr), cupy.asarray(csr.indices),
                     cupy.asarray(csr.data), csr.indptr, cupy, gpu_conversions())


def upload_for(csr, device: str) -> DeviceCSR | None:
    """The canonical host matrix on the GPU (:func:`upload_csr`) when it will run there and CuPy
    is installed (not under numba-cuda's simulator), before the decision: the operator converts
    from it, and the feature passes run there; else None."""
    if device != "cuda" or devices.cuda_simulator():
        return None
    return upload_csr(csr)


def renumbering_of(uploaded: DeviceCSR | None):
    """:func:`choose_order`'s ``permute`` for a host matrix whose copy on the GPU is
    ``uploaded``: ``P A Pᵀ`` built there from the copy (:func:`permuted_device_csr`), a few
    passes at the GPU's bandwidth where the host's renumbering scatters reads over the whole
    matrix and the result would be uploaded again; the host's own renumbering where nothing
    was uploaded."""
    if uploaded is None:
        return apply_order
    return lambda csr, perm, inverse: permuted_device_csr(uploaded, perm, inverse)


def transposed(A):
    """Aᵀ of a device matrix, on the device (for :meth:`SpMVOperator.transpose_operator`)."""
    if type(A).__module__.split(".")[0] == "torch":
        import torch

        coo = A.to_sparse_coo() if A.layout == torch.sparse_csr else A
        return coo.t().coalesce()
    return A.T


def permuted_device_csr(csr: DeviceCSR, perm, inverse) -> DeviceCSR:
    """``P A Pᵀ`` of a canonical :class:`DeviceCSR` (row i is A's row ``perm[i]``, its columns
    renumbered by ``inverse``), computed on the GPU with CuPy's sparse indexing: the
    operator's matrix in the order :mod:`autospmv._decide.ordering` chose (``inverse`` is
    implied by ``perm``)."""
    xp = csr.xp
    index = xp.asarray(perm)
    return canonical_device_csr(csr.sparse()[index][:, index])
