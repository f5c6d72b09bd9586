"""SpMVOperator: a converted matrix bound to one kernel on one device.

All checking of vectors happens here, once per call, before a kernel sees them; kernels only know
their arrays. Everything that can be done once (conversion, upload, launch parameters) is done when
the operator is built, so a call only validates, launches and (for host vectors) copies.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import scipy.sparse as sp

from .. import _registry as registry
from .._decide.model.lookup import find_model
from .._decide.selection import Decision, decide
from .._support.cache import compile_timer
from .._support.threads import check_threads
from .._support.validation import (
    byte_ranges, canonicalize, check_out, check_vector, result_dtype,
)
from ..formats.base import DeviceCSR, FormatTooLargeError, SparseFormat
from ..formats.coo import COOFormat, tall_transpose
from ..kernels.cpu.backend import CpuBackend
from . import background
from .device_input import (
    canonical_device_csr, canonical_input, is_device_matrix, transposed, upload_csr,
)
from .linear_operator import LinearOperator


class SpMVOperator(LinearOperator):
    """``y = A @ x`` with a fixed kernel; a ``scipy.sparse.linalg.LinearOperator``.

    :func:`autospmv.prepare` decides and builds in one call; ``SpMVOperator(A, decision,
    device)`` builds from a decision the caller holds (``select``'s, or one written by hand)
    and checks A and the decision's parameters just as ``prepare`` does.

    The operator may store A in another order of rows and columns (``order``; see
    :func:`autospmv.prepare`'s ``order=``). That order is invisible to the caller: every
    product takes and returns vectors in A's own order (x gathered into the stored order and
    the result gathered back, one pass each; :meth:`in_own_order` gives the operator without
    those passes).

    The operator is a snapshot of A: changing A afterwards changes neither ``op`` nor ``op.T``.
    Besides what it runs, it keeps what :meth:`transpose_operator` builds Aᵀ from when first
    asked: a GPU-resident input matrix itself; on the GPU (with CuPy) a copy of the row pointer,
    counted in ``memory["host"]`` (Aᵀ is rebuilt there from the format); on the CPU the
    canonical CSR when canonicalising made it (a copy the operator owns), and nothing more
    when the caller's CSR was already canonical (Aᵀ is rebuilt from the format).

    Parameters
    ----------
    A : sparse matrix, array-like or GPU sparse matrix
        As :func:`autospmv.prepare` takes it; canonicalised the same way (a malformed matrix
        raises before any kernel reads it; a matrix on the GPU is canonicalised there).
    decision : Decision
        The kernel and parameters to build (:func:`autospmv.select`'s, or one written by hand).
    device : {"cuda", "cpu"} or None
        None: CUDA when a usable GPU is present, else the CPU.
    threads : int, optional
        On the CPU, the most threads a product uses (default: as ``prepare`` chooses).

    Attributes
    ----------
    kernel, params : str, dict
        The kernel that runs and its parameters.
    device : str
        ``"cuda"`` or ``"cpu"``.
    decision : Decision
        Why this kernel (``op.explain()`` prints it).
    shape, nnz : tuple, int
        A's shape and stored entries.
    dtype : numpy.dtype
        The matrix's value dtype (float32 or float64), as a SciPy matrix's: a product's dtype is
        ``numpy.result_type(op.dtype, x.dtype)`` (see :meth:`matvec`).
    format : SparseFormat or None
        The converted storage the CPU kernel runs on (None on the GPU: the format lives in
        device memory only, and the host copy is released after the upload).
    threads : int or None
        On the CPU, the most threads a product uses.
    order : {"keep", "rcm", "bfs"}
        The order of rows and columns the matrix is stored and multiplied in: ``"keep"``, A's
        own; ``"rcm"``, SciPy's reverse Cuthill–McKee; ``"bfs"``, reverse Cuthill–McKee over
        the graph of A's rows (see :func:`autospmv.prepare`).
    permutation : numpy.ndarray or None
        None when the order is kept, else ``perm`` such that the operator stores ``P A Pᵀ``
        with ``(P A Pᵀ)[i, j] = A[perm[i], perm[j]]``.

    Raises
    ------
    TypeError
        ``decision`` is not a :class:`Decision`, or A is not a matrix.
    ValueError
        A malformed matrix or parameter, or a GPU matrix with ``device="cpu"``.
    FormatTooLargeError
        The decision's format refuses A (padding beyond its fill limit).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv
    >>> A = sp.random(500, 500, density=0.02, format="csr", random_state=1)
    >>> op = autospmv.SpMVOperator(A, autospmv.Decision("ell", {}, "forced"), "cpu")
    >>> op.kernel, op.shape
    ('ell', (500, 500))
    >>> bool(np.allclose(op @ np.ones(500), A @ np.ones(500)))
    True
    """

    def __init__(self, A, decision: Decision, device: str | None, threads=None):
        if not isinstance(decision, Decision):
            raise TypeError(f"decision must be an autospmv.Decision; got "
                            f"{type(decision).__name__}")
        threads = check_threads(threads)
        given = canonical_input(A, device)
        self._build(given.csr, decision, given.device, threads, source=given.source,
                    borrowed=given.borrowed, uploaded=given.uploaded)

    @classmethod
    def _canonical(cls, csr, decision: Decision, device: str, threads=None,
                   **options) -> "SpMVOperator":
        """The operator of a matrix that :func:`~autospmv._support.validation.canonicalize` (or
        :func:`autospmv._prepare.device_input.canonical_device_csr`) has just returned, built without checking
        it again: :func:`autospmv.prepare` and the transposes hand over what they checked.
        ``threads``: checked by the caller; ``options``: as :meth:`_build`'s."""
        op = cls.__new__(cls)
        op._build(csr, decision, device, threads, **options)
        return op

    def _build(self, csr, decision: Decision, device: str, threads=None, *, source=None,
               borrowed: bool = False, uploaded=None) -> None:
        """Convert and bind. ``csr``: a canonical host CSR matrix, a
        :class:`~autospmv.formats.base.DeviceCSR`, or the kernel's format already built (the COO
        transpose of a very wide matrix, :meth:`_coo_transpose`). ``source``: a matrix on the GPU
        (CuPy, torch) the operator was prepared from; its transpose is built from it.
        ``borrowed``: csr's arrays belong to the caller, who may change them later; the operator
        then copies the arrays of its format that share memory with them (a CSR kernel's format
        is csr's own arrays), so that it is a snapshot of the matrix as it was when built (see
        :meth:`transpose_operator` for Aᵀ). ``uploaded``: the host ``csr`` already on the GPU
        (:func:`autospmv._prepare.device_input.upload_csr`, a copy), converted from instead of uploading
        again."""
        super().__init__(dtype=csr.dtype, shape=csr.shape)
        self.decision = decision
        self.device = device
        self.nnz = int(csr.nnz)
        spec = registry.get(decision.kernel)
        spec.check_params(decision.params)
        if device == "cuda":
            from ..kernels.cuda.backend import CudaBackend  # imported outside the compile timer
            from ..kernels.cuda.launch import SIMULATOR as SIMULATED
        host_csr = csr
        with compile_timer() as compiled:
            started = time.perf_counter()
            if device == "cuda" and not isinstance(csr, DeviceCSR) and not SIMULATED:
                # with CuPy: upload the CSR (unless prepare() did), convert on the GPU
                csr = uploaded or upload_csr(csr) or csr
            if isinstance(csr, SparseFormat):  # built by the caller
                fmt = csr
            else:  # on the host, or for a DeviceCSR on the GPU, there
                fmt = spec.convert(csr, decision.params, device)
                if borrowed and not isinstance(csr, DeviceCSR):
                    fmt = own_arrays(fmt, (csr.data, csr.indices, csr.indptr))
            if device == "cuda":
                self._backend = CudaBackend(spec, fmt, decision.params)
            else:
                self._backend = CpuBackend(spec, fmt, decision.params, csr.nnz, threads)
                decision.notes.append(f"CPU threads per product: {self._backend.threads} "
                                      f"({self._backend.threads_reason})")
                if self._backend.engine_note:
                    decision.notes.append(self._backend.engine_note)
            elapsed = time.perf_counter() - started
        self.format = fmt if device == "cpu" else None
        self._threads_request = threads
        decision.notes.append(
            f"conversion to {fmt.name} {'on the GPU ' if isinstance(csr, DeviceCSR) else ''}"
            f"and set-up took {(elapsed - compiled.total) * 1e3:.2f} ms"
        )
        if compiled.total:
            decision.notes.append(compiled.note(f"the conversion to {fmt.name} and the set-up"))
        # What Aᵀ is built from, as the operator saw A: a matrix on the GPU itself; on the GPU
        # with CuPy, the format converted there and the row pointer (copied if the caller's),
        # rebuilt to CSR on first use; otherwise the canonical CSR when it is the operator's own
        # (canonicalize copied it), and for the caller's own CSR the CPU format (rebuilt to CSR
        # when needed) or, under numba-cuda's simulator, a copy taken now.
        self._on_device = None
        """(GPU format, host row pointer, array module, conversions) that Aᵀ is rebuilt from,
        or None (:meth:`~autospmv.formats.base.SparseFormat.to_device_csr`)."""
        if source is not None:
            self._source = source
        elif isinstance(csr, DeviceCSR):
            self._source = None
            indptr = host_csr.indptr.copy() if borrowed else host_csr.indptr
            self._on_device = (fmt, indptr, csr.xp, csr.conversions)
        elif isinstance(csr, SparseFormat):
            self._source = None
        elif not borrowed:
            self._source = host_csr
        else:
            self._source = None if device == "cpu" else host_csr.copy()
        host = fmt.nbytes if device == "cpu" else 0
        if isinstance(self._source, sp.csr_matrix) and (borrowed or device == "cuda"):
            host += self._source.data.nbytes + self._source.indices.nbytes
            host += self._source.indptr.nbytes
        if self._on_device is not None:
            host += self._on_device[1].nbytes
        self._host_nbytes = host
        self._kept = kept_host_arrays(self.format, self._source)
        """The host arrays the operator holds, which ``out=`` must not overlap."""
        self._kept_ranges = byte_ranges(self._kept)  # their memory, for that check
        self._transposed = None

    _switch = None
    """The background decision still to switch to (:mod:`autospmv._prepare.background`), or None."""

    permutation = None  # see the class docstring
    _inverse = None
    """``inverse[perm[i]] = i``, with :attr:`permutation`."""
    _own_order = None
    """The operator of :meth:`in_own_order`, made at its first call."""

    @property
    def order(self) -> str:
        """The order of rows and columns the matrix is stored in: ``"keep"``, ``"rcm"`` or
        ``"bfs"``."""
        return "keep" if self.permutation is None else self.decision.order

    def _apply_order(self, perm: np.ndarray, inverse: np.ndarray, decision: Decision) -> None:
        """Make this operator of ``P A Pᵀ`` (built on the permuted matrix) take and return
        vectors in A's own order: its backend is wrapped by the gathers of
        :mod:`autospmv.kernels.cpu.permute` or :mod:`autospmv.kernels.cuda.permute`."""
        inner = self._runner
        if self.device == "cuda":
            from ..kernels.cuda.permute import PermutedCudaBackend

            self._runner = PermutedCudaBackend(inner, perm, inverse)
        else:
            from ..kernels.cpu.permute import PermutedCpuBackend

            self._runner = PermutedCpuBackend(inner, perm, inverse)
        self._inner_runner = inner
        self.permutation, self._inverse = perm, inverse
        self._host_nbytes += perm.nbytes + inverse.nbytes
        if decision is not self.decision:
            self.decision.order = decision.order

    def order_arrays(self, xp):
        """``(perm, inverse)`` of the stored order as arrays of ``xp`` (NumPy, or CuPy for an
        operator on a GPU), with ``inverse[perm[i]] = i``: on a GPU the device copies the
        operator's products gather with (uploaded once, with the matrix), so that a solve
        permutes b and x without copying the order to the device again.

        Parameters
        ----------
        xp : module
            ``numpy``, or ``cupy`` for an operator on a GPU.

        Returns
        -------
        tuple of arrays, or None
            None when the operator runs in A's own order.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, autospmv
        >>> A = sp.random(50, 50, density=0.1, format="csr", random_state=0) + sp.eye(50)
        >>> perm, inverse = autospmv.prepare(A, device="cpu", order="rcm").order_arrays(np)
        >>> bool((perm[inverse] == np.arange(50)).all())
        True
        """
        if self.permutation is None:
            return None
        if xp is np:
            return self.permutation, self._inverse
        arrays = getattr(self._runner, "device_order", (self.permutation, self._inverse))
        return tuple(xp.asarray(a) for a in arrays)

    def in_own_order(self) -> "SpMVOperator":
        """The operator of the matrix in the order it is stored in, ``P A Pᵀ``, whose products
        take and return vectors in that order (no gathers); the operator itself when it runs
        in A's own order. The solvers iterate on it, permuting b and x once per solve.

        Returns
        -------
        SpMVOperator
            The same object on every call; it shares this operator's matrix and decision.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, autospmv
        >>> A = sp.random(50, 50, density=0.1, format="csr", random_state=0) + sp.eye(50)
        >>> op = autospmv.prepare(A, device="cpu", order="rcm")
        >>> p = op.permutation
        >>> x = np.arange(50.0)
        >>> bool(np.allclose(op.in_own_order() @ x[p], (A @ x)[p]))
        True
        """
        if self.permutation is None:
            return self
        view = self._own_order
        if view is None:
            view = SpMVOperator.__new__(SpMVOperator)
            view.__dict__.update({k: v for k, v in self.__dict__.items()
                                  if k not in ("permutation", "_inverse", "_own_order",
                                               "_inner_runner")})
            view._runner = self._inner_runner
            view._transposed = None
            self._own_order = view
        return view

    @property
    def _backend(self):
        """What runs the products: the kernel bound to its format on its device. Taking it
        switches to a background decision that is ready (:meth:`wait`). A product reads it
        once and runs on what it read, whichever kernel another thread switches to meanwhile."""
        switch = self._switch
        if switch is not None and switch.done:
            background.adopt(self, switch)
        return self._runner

    @_backend.setter
    def _backend(self, runner) -> None:
        self._runner = runner

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a background decision (``prepare(A, background=True)``) and switch to its
        kernel.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most; None waits until the decision is ready.

        Returns
        -------
        bool
            True once the operator runs its final kernel (at once without a background
            decision), False when ``timeout`` seconds passed first.

        Examples
        --------
        >>> op = autospmv.prepare(A, background=True)  # doctest: +SKIP
        >>> op.wait(timeout=10.0)                      # doctest: +SKIP
        True
        """
        switch = self._switch
        if switch is None:
            return True
        if not switch.join(timeout):
            return False
        background.adopt(self, switch)
        return True

    @property
    def kernel(self) -> str:
        return self.decision.kernel

    @property
    def params(self) -> dict:
        return dict(self.decision.params)

    @property
    def threads(self) -> int | None:
        """The most threads one CPU product uses (None on CUDA)."""
        return getattr(self._backend, "threads", None)

    @property
    def memory(self) -> dict[str, int]:
        """Bytes the operator holds now.

        Returns
        -------
        dict
            ``{"host": bytes, "device": bytes}``.

        Notes
        -----

        Host bytes are those of the CPU format's arrays, some of which may be the canonical
        CSR's own (CSR kernels run on it directly, COO shares its column and value arrays), and
        what Aᵀ is built from (see the class docstring); device bytes are the uploaded format,
        plus the two staging buffers of host vectors from the first product of a host vector
        on (:mod:`autospmv.kernels.cuda.backend`). From the first multi-vector product on
        (:meth:`matmat`), the CSR arrays it runs on where they are not the format's or the kept
        CSR's, and on the GPU its list of long-row pieces, count too."""
        backend = self._backend
        return {"host": self._host_nbytes + getattr(backend, "workspace_nbytes", 0),
                "device": getattr(backend, "device_nbytes", 0)}

    @property
    def nbytes(self) -> int:
        """Bytes the operator holds now.

        Returns
        -------
        int
            The host and device bytes of :attr:`memory` together.
        """
        memory = self.memory
        return memory["host"] + memory["device"]

    def diagonal(self):
        """A's main diagonal, as ``scipy.sparse.csr_matrix.diagonal`` gives it: a NumPy array
        of length min(m, n) in the operator's dtype (zeros where A has no entry). It is read
        from the matrix the operator keeps (on the GPU, copied to the host once per call).

        Returns
        -------
        numpy.ndarray
            The entries ``A[i, i]``.

        Examples
        --------
        >>> import scipy.sparse as sp, autospmv
        >>> autospmv.prepare(sp.diags([1.0, 2.0, 3.0]), device="cpu").diagonal()
        array([1., 2., 3.])
        """
        csr = self._matrix_csr()
        if isinstance(csr, DeviceCSR):
            diagonal = csr.sparse().diagonal()
            diagonal = diagonal.get() if hasattr(diagonal, "get") else np.asarray(diagonal)
        else:
            diagonal = np.asarray(csr.diagonal(), dtype=self.dtype)
        if self.permutation is None:
            return diagonal
        ordered = np.empty_like(diagonal)
        ordered[self.permutation] = diagonal
        return ordered

    def explain(self) -> str:
        """A readable account of the decision: the kernel, who chose it and why.

        Returns
        -------
        str
            :meth:`Decision.explain` of :attr:`decision`: the comparisons the model made, the
            features they read, the guardrails and the conversion.

        Examples
        --------
        >>> import scipy.sparse as sp, autospmv
        >>> print(autospmv.prepare(sp.eye(100, format="csr"), device="cpu").explain())
        ... # doctest: +ELLIPSIS
        kernel ...
        """
        return self.decision.explain()

    def __repr__(self):
        m, n = self.shape
        order = f" order={self.order}" if self.permutation is not None else ""
        return (f"<SpMVOperator {m}x{n} {self.dtype} nnz={self.nnz} kernel={self.kernel} "
                f"device={self.device}{order}>")

    def matvec(self, x, out=None):
        """``A @ x``. Host (numpy) x gives a numpy result; a CUDA array gives a device result.

        The result's dtype is SciPy's, ``numpy.result_type(op.dtype, x.dtype)``: a float32
        operator gives float32 for a float32 x (the fast path: half the bytes of x and y) and
        float64, accumulated in float64, for a float64 x; integer and bool x count as NumPy
        says (int64 as float64). Any number of threads may call one operator at once.

        Parameters
        ----------
        x : array of shape (n,) or (n, 1)
            A NumPy array, or a CuPy array, PyTorch CUDA tensor or numba device array (read in
            place, on the caller's current stream).
        out : array of shape (m,), optional
            Receives the result: the same kind as x, exactly the result's dtype, writable, not
            overlapping x (the kernels read x while they write out).

        Returns
        -------
        array of shape (m,), or (m, 1) for an (n, 1) x
            ``out`` when given, else a new array of x's kind.

        Raises
        ------
        TypeError
            For complex x, or a dtype the kernels cannot compute in (e.g. ``longdouble``).
        ValueError
            For x of the wrong length, or an ``out`` of the wrong shape, dtype or kind, or one
            that overlaps x or is read-only.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, autospmv
        >>> op = autospmv.prepare(sp.eye(3, format="csr"), device="cpu")
        >>> op.matvec(np.array([1.0, 2.0, 3.0]))
        array([1., 2., 3.])
        """
        backend = self._backend
        if type(x) is not np.ndarray:  # (a numpy x is never a CUDA array: not asked)
            y = backend.device_matvec(x, out)
            if y is not None:
                return y
        column = (x.ndim if type(x) is np.ndarray else np.ndim(x)) == 2
        x = check_vector(x, self.shape[1], self.dtype)
        if out is None:
            y = np.empty(self.shape[0], dtype=x.dtype)
        else:
            check_out(out, self.shape[0], x.dtype, x, self._kept_ranges)
            y = out
        backend.host_matvec(x, y)
        return y.reshape(-1, 1) if column and out is None else y

    def product_with_dot(self, dtype, sums, slot: int):
        """A launcher of ``y = A @ x`` on the GPU whose kernel also stores ``x · y`` in
        ``sums[slot]``: a solver's ``p · Ap`` (conjugate gradients' step length) with no pass
        over p and Ap of its own and no launch of its own.

        The kernels that own whole rows (csr_scalar, ell, jds, and hyb without a COO part) have
        this form; each thread adds its row's term, and the last block to finish adds the
        blocks' sums in a fixed order (the total is the same from run to run).

        Parameters
        ----------
        dtype : numpy dtype
            The dtype of x and y (the product's dtype for an x of that dtype).
        sums : CUDA device array of float64
            Receives the sum, in float64, at ``slot``, once the launch has run.
        slot : int
            Where in ``sums``.

        Returns
        -------
        callable or None
            ``run(x, y, stream)`` taking the device addresses of x and y and a CUDA stream
            handle (device arrays under numba-cuda's simulator). It is the caller's own: its
            arguments are fixed in it, so one caller at a time may run it. None on the CPU, for
            another kernel, for a matrix that is not square, or for a ``dtype`` that is not the
            product's.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, autospmv
        >>> op = autospmv.prepare(sp.eye(3, format="csr"), device="cpu")
        >>> op.product_with_dot(np.float64, np.zeros(1), 0) is None
        True
        """
        method = getattr(self._backend, "product_with_dot", None)
        return None if method is None else method(dtype, sums, slot)

    def _matvec(self, x):
        return self.matvec(x)

    def __matmul__(self, x):
        # Vectors go straight to matvec, blocks to matmat (LinearOperator's generic dispatch
        # costs microseconds); device arrays must, since LinearOperator would turn them into
        # numpy arrays.
        if isinstance(x, np.ndarray) and x.ndim == 1:
            return self.matvec(x)
        if isinstance(x, np.ndarray) and x.ndim == 2:
            return self.matmat(x)
        _check_at_most_two_dimensions(x)
        y = self._device_product(x)
        return y if y is not None else super().__matmul__(x)

    def dot(self, x):
        _check_at_most_two_dimensions(x)
        y = self._device_product(x)
        return y if y is not None else super().dot(x)

    def matmat(self, X):
        """``A @ X`` for a 2-D X of k columns, in one pass over the matrix for all columns (a
        multi-vector product, SpMM; see :meth:`_multi_vector`): a numpy array (or anything
        SciPy's ``matmat`` takes) gives a numpy result; a 2-D CuPy array, PyTorch tensor or
        numba device array gives a device result of its kind. The result is row-major (C
        order) with the dtype :meth:`matvec` gives. Row-major X is read in place; other host X,
        and CuPy or torch X, are copied to row-major first (numba device X must be row-major).
        On the CPU, k = 1 runs the operator's own kernel (:meth:`matvec`).

        Parameters
        ----------
        X : array of shape (n, k)
            Host or device, as above.

        Returns
        -------
        array of shape (m, k)
            ``A @ X``, row-major, of X's kind.

        Raises
        ------
        TypeError, ValueError
            As :meth:`matvec` for its vectors.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, autospmv
        >>> op = autospmv.prepare(sp.eye(3, format="csr"), device="cpu")
        >>> op.matmat(np.ones((3, 2))).shape
        (3, 2)
        """
        if _is_device_array(X) and len(getattr(X, "shape", ())) == 2:
            return self._device_matmat(X)
        return super().matmat(X)

    def rmatvec(self, x):
        """``Aᵀ @ x``. A CUDA array goes to the transposed operator on the device (see
        :meth:`transpose_operator`) and gives a device result; anything else is SciPy's
        ``rmatvec``.

        Parameters
        ----------
        x : array of shape (m,)
            Host or device, as :meth:`matvec` takes it.

        Returns
        -------
        array of shape (n,)
            ``Aᵀ @ x``, of x's kind.

        Raises
        ------
        ValueError
            For a host x that is not a vector of length m (nor m × 1).

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, autospmv
        >>> op = autospmv.prepare(sp.csr_matrix([[1.0, 2.0], [0.0, 3.0]]), device="cpu")
        >>> op.rmatvec(np.array([1.0, 1.0]))
        array([1., 5.])
        """
        if _is_device_array(x):
            return self.transpose_operator().matvec(x)
        m = self.shape[0]
        if np.shape(x) not in ((m,), (m, 1)):
            raise ValueError(f"Aᵀ @ x needs x of length {m} (A's rows); got an array with "
                             f"shape {np.shape(x)}")
        return super().rmatvec(x)

    def rmatmat(self, X):
        """``Aᵀ @ X`` for a 2-D X: the multi-vector product of the transposed operator
        (:meth:`matmat` of :meth:`transpose_operator`), for host X and device arrays alike.

        Parameters
        ----------
        X : array of shape (m, k)
            Host or device, as :meth:`matmat` takes it.

        Returns
        -------
        array of shape (n, k)
            ``Aᵀ @ X``, of X's kind.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, autospmv
        >>> op = autospmv.prepare(sp.eye(3, format="csr"), device="cpu")
        >>> op.rmatmat(np.ones((3, 2))).shape
        (3, 2)
        """
        return self.transpose_operator().matmat(X)

    def _device_matvec(self, x, out):
        """``A @ x`` when x is a CUDA array (the backend's result); None for anything else.
        A numpy array is never one, and is let through without asking for the interface."""
        return None if type(x) is np.ndarray else self._backend.device_matvec(x, out)

    def _device_product(self, x):
        """``A @ x`` for a CUDA array x: a vector as :meth:`matvec`, a 2-D array as
        :meth:`matmat`; None for anything else. An x that says it is not 2-D (``ndim``, as
        CuPy, PyTorch and numba arrays do) goes to the vector product without building its
        ``__cuda_array_interface__`` here."""
        ndim = getattr(x, "ndim", None)
        if ndim in (2, None) and _is_device_array(x) and len(getattr(x, "shape", ())) == 2:
            return self._device_matmat(x)
        return self._device_matvec(x, None)

    def _device_matmat(self, X):
        """``A @ X`` for a 2-D CUDA array X (the backend's result, or its refusal on the CPU)."""
        backend = self._backend
        if self.device == "cuda":
            self._multi_vector(backend)
        return backend.device_matmat(X)

    def _matmat(self, X):
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[0] != self.shape[1]:
            raise ValueError(f"X must have shape ({self.shape[1]}, k); got {X.shape}")
        if X.shape[1] == 1 and self.device == "cpu":
            return self.matvec(X)
        dtype = result_dtype(self.dtype, X.dtype, "X")
        Y = np.empty((self.shape[0], X.shape[1]), dtype=dtype)
        if Y.size:
            backend = self._backend
            self._multi_vector(backend)
            backend.host_matmat(np.ascontiguousarray(X, dtype=dtype), Y)
        return Y

    def _multi_vector(self, backend) -> None:
        """Set up ``backend``'s multi-vector product at its first 2-D product (once, whichever
        thread gets here first); ``backend`` is the one the product read and runs on, which a
        background switch may have replaced since. It runs on A's CSR arrays: a CSR kernel's
        format holds them; for any other format they are taken from the host CSR the operator
        keeps, or rebuilt from its format (:meth:`_matrix_csr`) and kept from then on, counted
        in :attr:`memory`. The rule and where the arrays came from go to the decision's notes
        (``op.explain()``), for the backend the operator runs on. On the GPU the model's SpMM rule
        (:meth:`_spmm_rule`) picks the program of a product whose first one cannot time them."""
        if backend.multi is not None:
            return
        with _MULTI_VECTOR_SET_UP:
            if backend.multi is None:
                note, arrays = backend.set_up_multi(self._matrix_csr, self.decision.notes,
                                                    self._spmm_rule())
                if backend is not self._runner:  # switched away from: released with it
                    return
                extra = sum(a.nbytes for a in arrays if not any(
                    np.may_share_memory(a, kept) for kept in self._kept))
                self._host_nbytes += extra
                self.decision.notes.append(
                    f"{note}; {extra:,} bytes more kept on the host for it" if extra else note)

    def _spmm_rule(self):
        """The SpMM rule of the model :func:`~autospmv._decide.model.lookup.find_model` finds for
        the GPU and this operator's dtype (:mod:`autospmv._decide.model.spmm_rule`), or None (on
        the CPU, or without one)."""
        if self.device != "cuda":
            return None
        choice = find_model("cuda", None, self.dtype)
        return choice.model.spmm_rule if choice is not None else None

    def _matrix_csr(self):
        """A as CSR (valid, not necessarily with sorted columns), for a backend whose format is
        not CSR: the host CSR the operator keeps, else rebuilt from what it keeps for Aᵀ (on the
        GPU, there: a :class:`~autospmv.formats.base.DeviceCSR`), else from the CPU format."""
        if isinstance(self._source, sp.csr_matrix):
            return self._source
        if self._on_device is not None:
            fmt, indptr, xp, conversions = self._on_device
            return fmt.to_device_csr(indptr, xp, conversions)
        source = self._source
        if source is None and self._transposed is not None:  # Aᵀ's operator holds it now
            source_t = self._transposed._source
            source = transposed(source_t) if is_device_matrix(source_t) else None
        if is_device_matrix(source):
            return canonical_device_csr(source)
        return canonicalize(self.format.to_csr())

    def transpose_operator(self) -> "SpMVOperator":
        """The operator for Aᵀ with the same kernel and device (built on first use, from the
        matrix the operator was prepared from), but for two cases that its decision notes:
        a kernel whose format refuses Aᵀ (ELL or JDS beyond the fill limit) gives way to
        :data:`TRANSPOSE_FALLBACK`, and on the CPU an Aᵀ whose row pointer would outweigh A
        (:func:`~autospmv.formats.coo.tall_transpose`: A has far more columns than nonzeros) runs on the COO kernel,
        built from A's arrays (:meth:`_coo_transpose`).

        Returns
        -------
        SpMVOperator
            The same object on every call.

        Examples
        --------
        >>> import scipy.sparse as sp, autospmv
        >>> op = autospmv.prepare(sp.random(30, 20, density=0.2, format="csr"), device="cpu")
        >>> op.transpose_operator().shape
        (20, 30)
        """
        if self._transposed is None and self._on_device is not None:
            fmt, indptr, xp, conversions = self._on_device
            self._transposed = self._transpose_on_device(
                fmt.to_device_csr(indptr, xp, conversions).sparse())
            self._on_device = None  # the rebuilt CSR goes with this call
            self._host_nbytes -= indptr.nbytes
        if self._transposed is None and is_device_matrix(self._source):
            self._transposed = self._transpose_on_device(self._source)
        if self._transposed is None:
            source = self._source if self._source is not None else self.format.to_csr()
            if self.device == "cpu" and tall_transpose(source):
                self._transposed = self._coo_transpose(source)
            else:
                csr_t = canonicalize(source.T)
                self._transposed = self._transpose_with(csr_t, csr_t)
        if self.permutation is not None and self._transposed.permutation is None:
            self._transposed._apply_order(self.permutation, self._inverse, self.decision)
        return self._transposed

    def _transpose_on_device(self, source) -> "SpMVOperator":
        source_t = transposed(source)
        csr_t = canonical_device_csr(source_t)
        return self._transpose_with(csr_t, csr_t.structure(), source=source_t)

    def _transpose_with(self, csr_t, structure, source=None) -> "SpMVOperator":
        """The operator of Aᵀ (``csr_t``, canonical, on the host or the GPU; ``structure``: what
        the kernel's parameters are chosen from) with this operator's kernel, or with
        :data:`TRANSPOSE_FALLBACK` when that kernel's format refuses Aᵀ: A's own operator was
        built, so its transpose is too, whatever the shape of Aᵀ."""
        decision = decide(structure, self.kernel, self.device)
        try:
            return SpMVOperator._canonical(csr_t, decision, self.device, self._threads_request,
                                           source=source)
        except FormatTooLargeError as error:
            decision = decide(structure, TRANSPOSE_FALLBACK, self.device)
            decision.path[:] = [f"{self.kernel} refused Aᵀ"]
            decision.notes.append(f"guardrail: {self.kernel} could not be built for Aᵀ "
                                  f"({error}); fell back to {TRANSPOSE_FALLBACK}")
            return SpMVOperator._canonical(csr_t, decision, self.device, self._threads_request,
                                           source=source)

    def _coo_transpose(self, csr) -> "SpMVOperator":
        """The operator of Aᵀ on the COO kernel, from A's canonical host CSR ``csr`` without
        Aᵀ's row pointer (:meth:`autospmv.formats.coo.COOFormat.transposed`); its own
        transpose is this operator."""
        n, nnz = csr.shape[1], csr.nnz
        decision = Decision("coo", {}, "forced", [f"transpose of a {self.kernel} operator"],
                            notes=[f"Aᵀ has {n:,} rows for {nnz:,} nonzeros: as CSR its row "
                                   "pointer alone would outweigh A, so it runs on coo, which "
                                   f"needs none, instead of {self.kernel}"])
        op = SpMVOperator._canonical(COOFormat.transposed(csr), decision, "cpu",
                                     self._threads_request)
        op._transposed = self
        return op

    def _rmatvec(self, x):
        run = getattr(self._backend, "host_rmatvec", None)
        if run is None:
            return self.transpose_operator().matvec(x)
        z = check_vector(x, self.shape[0], self.dtype)
        y = np.empty(self.shape[1], dtype=z.dtype)
        run(z, y)
        return y

    def __reduce__(self):
        """Pickling: an operator on the CPU pickles as its matrix (the canonical CSR) and its
        decision, and unpickles by converting that matrix again with the same kernel, parameters
        and thread request; nothing is decided again. An operator on the GPU refuses: its matrix
        lives in device memory, and pickling would copy it to the host. ``copy.copy`` and
        ``copy.deepcopy`` go the same way (a converted copy on the CPU, a TypeError on the GPU)."""
        self.wait()
        if self.device != "cpu":
            raise TypeError("an operator on the GPU cannot be pickled (its matrix lives in device "
                            "memory); pickle the matrix and prepare it again where it is loaded")
        csr = self._source if self._source is not None else self.format.to_csr()
        if self.permutation is not None:  # the matrix in its stored order, and the order
            return _unpickled_operator, (csr, self.decision, self._threads_request,
                                         self.permutation)
        return _unpickled_operator, (csr, self.decision, self._threads_request)

    def _adjoint(self):  # real matrices only, so the adjoint is the transpose
        return self.transpose_operator()

    def _transpose(self):
        return self.transpose_operator()


def kept_host_arrays(fmt, source) -> tuple:
    """The host arrays of an operator: its CPU format's (None on the GPU) and those of the
    host CSR it keeps for its transpose, if any."""
    arrays = list(fmt.arrays().values()) if fmt is not None else []
    if isinstance(source, sp.csr_matrix):
        arrays += [source.data, source.indices, source.indptr]
    return tuple(arrays)


def own_arrays(fmt, sources: tuple):
    """``fmt`` with copies of its arrays (also those of nested formats) that may share memory
    with any of ``sources``."""
    return fmt.map_arrays(lambda a: a.copy() if isinstance(a, np.ndarray) and any(
        np.may_share_memory(a, s) for s in sources) else a)


_MULTI_VECTOR_SET_UP = threading.Lock()
"""Serialises the set-up of multi-vector products (:meth:`SpMVOperator._multi_vector`)."""


def _unpickled_operator(csr, decision: Decision, threads, permutation=None) -> SpMVOperator:
    """The CPU operator that :meth:`SpMVOperator.__reduce__` pickled, its matrix checked as
    any input is (the unpickled arrays are its own: nothing is copied again); ``permutation``:
    the order it was stored in (``csr`` is already in that order), checked to be one."""
    op = SpMVOperator._canonical(canonicalize(csr), decision, "cpu", check_threads(threads))
    if permutation is not None:
        permutation = np.asarray(permutation)
        n = csr.shape[0]
        if (csr.shape[0] != csr.shape[1] or permutation.shape != (n,)
                or permutation.dtype.kind not in "iu"
                or not np.array_equal(np.sort(permutation), np.arange(n))):
            raise ValueError("the pickled operator's permutation is not a permutation of its "
                             "matrix's rows")
        inverse = np.empty_like(permutation)
        inverse[permutation] = np.arange(n, dtype=permutation.dtype)
        op._apply_order(permutation, inverse, decision)
    return op


TRANSPOSE_FALLBACK = "hyb"
"""The kernel of Aᵀ when the operator's own kernel's format refuses it (ELL, or JDS on a GPU,
beyond the fill limit): ELL for the typical row and COO for the rest, which fits any matrix."""


def _check_at_most_two_dimensions(x) -> None:
    """Refuse an array of more than two dimensions in ``A @ x`` by its shape (SciPy's own
    message would print the whole array)."""
    if (getattr(x, "ndim", 0) or 0) > 2:
        raise ValueError(f"A @ x takes a vector or a 2-D block of columns; got an array with "
                         f"shape {tuple(x.shape)}")


def _is_device_array(x) -> bool:
    """Whether x is a CUDA array (it has ``__cuda_array_interface__``); a numpy array is not,
    and is answered without asking."""
    return type(x) is not np.ndarray and getattr(x, "__cuda_array_interface__", None) is not None
