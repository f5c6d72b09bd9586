"""The client's side: :func:`prepare` and :class:`DistributedOperator`."""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .._support.validation import canonicalize, result_dtype
from . import _build, _comm
from ._partition import check_bounds, even_bounds, row_partition
from ._tasks import connected, naming_lost_workers, on_workers
from ._vector import DistributedVector, Layout, is_dask_array


def require_distributed():
    try:
        import distributed
    except ImportError as error:
        raise ImportError(
            "autospmv.distributed needs Dask: pip install 'autospmv[distributed]' "
            "(and dask-cuda for GPU workers: 'autospmv[distributed-cuda]')"
        ) from error
    return distributed


def _default_client():
    distributed = require_distributed()
    try:
        return distributed.default_client()
    except ValueError:
        raise ValueError(
            "autospmv.distributed.prepare needs a Dask client: pass client=, or start one first, "
            "e.g. Client(LocalCluster(n_workers=2)) for CPU workers or "
            "Client(dask_cuda.LocalCUDACluster()) for one worker per GPU"
        ) from None


@dataclasses.dataclass(eq=False)
class Part:
    """One rank's row block, as recorded on the client."""

    index: int
    rows: tuple
    """The block's rows ``start:stop`` of A (and entries of y)."""
    cols: tuple
    """The entries ``start:stop`` of x the rank owns (its owned block's columns)."""
    nnz: int
    worker: str
    decision: object = None
    """The owned block's :class:`~autospmv.Decision`, made on the worker."""
    ghost_decision: object = None
    """The ghost block's decision; None when the block has no ghost entries."""
    device: str = ""
    comm: str = ""
    """The communicator: ``nccl``, ``socket`` or ``self`` (one rank)."""
    owned_nnz: int = 0
    ghost_nnz: int = 0
    ghost_rows: int = 0
    ghost_columns: int = 0
    receives_from: dict = dataclasses.field(default_factory=dict)
    """``{rank: entries of x received from it per product}``."""
    sends_to: dict = dataclasses.field(default_factory=dict)
    build_seconds: dict = dataclasses.field(default_factory=dict)
    """Seconds each step of the rank's build took on its worker (the row block's making is
    not counted: it is a task of its own)."""

    @property
    def kernel(self) -> str:
        return self.decision.kernel

    @property
    def ghost_kernel(self):
        return None if self.ghost_decision is None else self.ghost_decision.kernel


def _run_rank_function(rank, fn, token, *args, **kwargs):
    """On a worker: ``fn(rank, *args, **kwargs)``, then wait for the device, so the result is
    complete when the task ends. ``token`` (the rank's previous collective result) only orders
    the collective tasks of each rank as the client submitted them."""
    result = fn(rank, *args, **kwargs)
    rank.synchronize()
    return result


def _matvec_on_rank(rank, x):
    return rank.matvec(x)


def _describe(rank):
    return rank.describe()


def _close_rank(rank):
    _comm.release(rank.comm_id, rank.rank)


class DistributedOperator(LinearOperator):
    """``y = A @ x`` with A's rows cut over Dask workers, one rank per worker; a SciPy
    ``LinearOperator``.

    Built by :func:`prepare`, not by hand: its parameters are what ``prepare`` assembled.

    Parameters
    ----------
    client : dask.distributed.Client
        The Dask client it works through (the ``client`` attribute).
    shape : tuple of int
        ``(m, n)``.
    dtype : numpy.dtype
        float32 or float64.
    parts : list of Part
        One per rank, in rank order: rows, owned entries of x, worker, nonzeros, ghost
        exchange and decisions.
    ranks : list
        The ranks' handles on their workers (Dask futures).
    row_layout, col_layout : Layout
        The layouts of y and of x.
    comm_reason : str
        Why the ghost exchange is not NCCL, when it is not; else ``""``.

    Attributes
    ----------
    nnz : int
        Stored entries, summed over the ranks.
    comm : str
        The ghost exchange's communicator: ``nccl``, ``socket`` or ``self`` for one rank.

    Examples
    --------
    With ``op`` prepared as in :func:`prepare`'s example (a tridiagonal T of 1,000 rows on two
    CPU workers):

    >>> op  # doctest: +SKIP
    <DistributedOperator 1000x1000 float64 nnz=2998 ranks=2 comm=socket kernels=[...]>
    >>> [part.rows for part in op.parts]  # doctest: +SKIP
    [(0, 500), (500, 1000)]
    """

    def __init__(self, client, shape, dtype, parts, ranks, row_layout, col_layout, comm_reason):
        super().__init__(dtype=dtype, shape=shape)
        self._client = client
        self.parts = parts
        self.nnz = sum(part.nnz for part in parts)
        self._ranks = ranks
        self._last = list(ranks)
        self.row_layout, self.col_layout = row_layout, col_layout
        self.comm = parts[0].comm
        self.comm_reason = comm_reason

    @property
    def client(self):
        """The Dask client the operator works through; a ValueError when it is closed or has
        lost its scheduler (:func:`connected`)."""
        if self._client is None:
            distributed = require_distributed()
            try:
                self._client = distributed.get_client()
            except ValueError:
                raise ValueError("this unpickled DistributedOperator needs a Dask client "
                                 "connected to the cluster that holds its parts; start one "
                                 "first") from None
        return connected(self._client)

    @property
    def kernels(self) -> list:
        """The kernel of each rank's owned block, in rank order.

        Returns
        -------
        list of str
            ``op.parts[r].kernel`` for each rank r: the kernel :func:`autospmv.prepare` chose
            (or was given) on rank r's worker. A ghost block's kernel is in
            ``op.parts[r].ghost_kernel``.

        Examples
        --------
        >>> op.kernels  # doctest: +SKIP
        ['csr_scalar', 'csr_scalar']
        """
        return [part.kernel for part in self.parts]

    @property
    def decisions(self) -> list:
        """The kernel decision of each rank's owned block, in rank order.

        Returns
        -------
        list of Decision
            ``op.parts[r].decision`` for each rank r, an :class:`autospmv.Decision` made on
            rank r's worker. A ghost block's decision is in ``op.parts[r].ghost_decision``
            (None when the rank has no ghost entries).

        Examples
        --------
        >>> op.decisions[0].kernel  # doctest: +SKIP
        'csr_scalar'
        """
        return [part.decision for part in self.parts]

    def explain(self) -> str:
        """Describe how the operator is cut and why each block has its kernel.

        Returns
        -------
        str
            A header (shape, dtype, nonzeros, ranks, the ghost exchange's communicator and why
            not NCCL, when not), then one section per rank: its rows, owned entries of x,
            nonzeros (owned and ghost), worker, device, the ghost entries it receives per
            product from each rank, and the kernel decisions of its owned and ghost blocks.
            ``str(op)`` gives the same text.

        Examples
        --------
        >>> print(op.explain())  # doctest: +SKIP
        DistributedOperator 1000x1000 float64 nnz=2998: 2 ranks, ghost exchange through ...
        rank 0: rows 0:500 (500 rows), owns x[0:500], nnz 1499 (owned 1498, ghost 1), ...
          ghost entries received per product: 1 from rank 1
          owned block: kernel csr_scalar
        ...
        """
        m, n = self.shape
        via = self.comm + (f" ({self.comm_reason})" if self.comm_reason else "")
        lines = [f"DistributedOperator {m}x{n} {self.dtype} nnz={self.nnz}: {len(self.parts)} "
                 f"ranks, ghost exchange through {via}"]
        for part in self.parts:
            (r0, r1), (c0, c1) = part.rows, part.cols
            received = ", ".join(f"{count} from rank {p}"
                                 for p, count in sorted(part.receives_from.items())) or "none"
            lines.append(f"rank {part.index}: rows {r0}:{r1} ({r1 - r0} rows), owns x[{c0}:{c1}]"
                         f", nnz {part.nnz} (owned {part.owned_nnz}, ghost {part.ghost_nnz}), "
                         f"worker {part.worker}, device {part.device}")
            lines.append(f"  ghost entries received per product: {received}")
            lines.append(f"  owned block: kernel {part.kernel}")
            lines += ["    " + line for line in part.decision.explain().splitlines()]
            if part.ghost_decision is None:
                lines.append("  ghost block: none (no entry in another rank's columns)")
            else:
                lines.append(f"  ghost block: {part.ghost_rows} rows x {part.ghost_columns} "
                             f"ghost columns, kernel {part.ghost_kernel}")
                lines += ["    " + line for line in part.ghost_decision.explain().splitlines()]
        return "\n".join(lines)

    __str__ = explain

    def __repr__(self):
        m, n = self.shape
        return (f"<DistributedOperator {m}x{n} {self.dtype} nnz={self.nnz} "
                f"ranks={len(self.parts)} comm={self.comm} kernels={self.kernels}>")

    # Running code on all ranks at once.

    def map_ranks(self, fn, *vectors, **kwargs) -> list:
        """Run ``fn(rank, *chunks, **kwargs)`` on every rank at once (SPMD).

        The solvers are written this way. Calls are ordered per rank as submitted, and each
        task waits for its device before it ends, so its result is complete.

        Parameters
        ----------
        fn : callable
            Called on each rank's worker as ``fn(rank, *chunks, **kwargs)``. ``rank`` offers
            ``matvec(x_chunk)`` (this rank's rows of ``A @ x``; every rank must call it the
            same number of times), ``dot(a, b)`` and ``norm(a)`` (all-reduced over the ranks),
            ``xp`` (CuPy or NumPy), ``rows``, ``cols``, ``rank`` and ``size``.
        *vectors : DistributedVector
            Vectors whose chunks are passed to ``fn``: on rank r, ``chunks`` are their r-th
            chunks (CuPy arrays on GPU workers, NumPy on CPU workers).
        **kwargs
            Passed to ``fn`` on every rank.

        Returns
        -------
        list of distributed.Future
            One Dask future per rank, in rank order, holding what ``fn`` returned there.

        Raises
        ------
        TypeError
            A vector that is not a :class:`DistributedVector`.
        RuntimeError
            The operator is closed.
        ValueError
            The client is closed or has lost its scheduler.

        Examples
        --------
        >>> def residual_norm(rank, x, b):
        ...     return rank.norm(b - rank.matvec(x))
        >>> b = op.vector(np.ones(1000), side="rows")  # doctest: +SKIP
        >>> [f.result() for f in op.map_ranks(residual_norm, op.zeros(), b)]  # doctest: +SKIP
        [31.622776601683793, 31.622776601683793]
        """
        ranks = self._live_ranks()
        for vector in vectors:
            if not isinstance(vector, DistributedVector):
                raise TypeError(f"map_ranks takes DistributedVector arguments; got "
                                f"{type(vector).__name__}")
        futures = on_workers(self.client, _run_rank_function, self.workers, ranks,
                             [fn] * len(ranks), self._last, *(v.chunks for v in vectors),
                             **kwargs)
        self._last = futures
        return futures

    def _order_after(self, futures) -> None:
        """Make each rank's next collective task wait for ``futures`` (one per rank, each
        ordered after that rank's last collective task); the operator keeps them until then."""
        self._last = list(futures)

    @property
    def workers(self) -> list:
        """The ranks' workers, in rank order."""
        return [part.worker for part in self.parts]

    def _live_ranks(self) -> list:
        """The ranks; a RuntimeError once the operator is closed. (A rank whose worker left
        the cluster is named when a call's result is read: see
        :func:`~._tasks.naming_lost_workers`.)"""
        if not self._ranks:
            raise RuntimeError("this DistributedOperator was closed; prepare it again")
        return self._ranks

    # Vectors.

    def vector(self, x, side: str = "columns", dtype=None) -> DistributedVector:
        """Scatter ``x`` to the workers, cut like the operator's columns or rows.

        Parameters
        ----------
        x : array of length n (or m)
            A NumPy or CuPy vector, or a dask array; each chunk is sent to its worker once.
        side : {"columns", "rows"}, default "columns"
            ``"columns"``: cut like x of ``A @ x`` (an input); ``"rows"``: cut like y (an
            output, or a solver's right-hand side).
        dtype : dtype, optional
            The vector's dtype (default: x's).

        Returns
        -------
        DistributedVector
            The vector, its chunks on the ranks' workers (CuPy on GPU workers, NumPy on CPU
            workers).

        Raises
        ------
        ValueError
            An unknown ``side``; x not a vector of the side's length; a closed client.
        TypeError
            A complex or non-numeric dtype, or one the kernels do not compute in
            (``numpy.longdouble``).
        RuntimeError
            A rank's worker has left the cluster (the message names the rank and worker).

        Examples
        --------
        >>> x = op.vector(np.ones(1000))  # doctest: +SKIP
        >>> x  # doctest: +SKIP
        <DistributedVector size=1000 float64 chunks=(500, 500) on cpu>
        >>> b = op.vector(np.ones(1000), side="rows", dtype=np.float32)  # doctest: +SKIP
        """
        return DistributedVector.scatter(x, self._layout(side), self.client, dtype)

    def zeros(self, side: str = "columns", dtype=None) -> DistributedVector:
        """A vector of zeros made on the workers, cut like the operator's columns or rows.

        Parameters
        ----------
        side : {"columns", "rows"}, default "columns"
            As for :meth:`vector`.
        dtype : dtype, optional
            The vector's dtype (default: the operator's).

        Returns
        -------
        DistributedVector
            The zeros; no data passes through the client.

        Raises
        ------
        ValueError
            An unknown ``side``.

        Examples
        --------
        >>> op.zeros(side="rows")  # doctest: +SKIP
        <DistributedVector size=1000 float64 chunks=(500, 500) on cpu>
        """
        return DistributedVector.full(self._layout(side), self.client, 0.0, dtype or self.dtype)

    def _layout(self, side: str):
        """The layout of a vector of ``side`` ("columns": x's, "rows": y's)."""
        layout = {"columns": self.col_layout, "rows": self.row_layout}.get(side)
        if layout is None:
            raise ValueError(f"side must be 'columns' or 'rows'; got {side!r}")
        return layout

    # Products.

    def matvec(self, x):
        """``A @ x``, computed on the workers; ``op @ x`` calls it.

        Parameters
        ----------
        x : DistributedVector, dask array, CuPy array or array-like of length n
            The vector; a DistributedVector must be cut like the operator's columns
            (:meth:`vector`, or a product of an operator with the same layout). A NumPy n×1
            column is accepted too.

        Returns
        -------
        DistributedVector, dask array, CuPy array or numpy.ndarray
            y, of x's kind: for a :class:`DistributedVector` one cut like the rows (no data
            through the client); for a dask array a dask array; for a CuPy array a CuPy
            array on the client's GPU; for NumPy (or a list) NumPy, an m×1 column for an n×1
            one. The dtype is SciPy's, ``numpy.result_type(op.dtype, x.dtype)``.

        Raises
        ------
        ValueError
            x not of length n, or a DistributedVector cut differently from the operator's
            columns; a closed client.
        TypeError
            x complex or non-numeric, or of a dtype whose product the kernels do not compute
            in (``numpy.longdouble``).
        RuntimeError
            The operator is closed, or a rank's worker has left the cluster (the message
            names the rank and worker).

        Examples
        --------
        >>> y = op @ op.vector(np.ones(1000))  # doctest: +SKIP
        >>> y.gather()[:3]  # doctest: +SKIP
        array([1., 0., 0.])
        >>> bool(np.allclose(op @ np.ones(1000), T @ np.ones(1000)))  # doctest: +SKIP
        True
        """
        if isinstance(x, DistributedVector):
            return self._distributed_matvec(x)
        if is_dask_array(x):
            if x.ndim != 1 or x.shape[0] != self.shape[1]:
                raise ValueError(f"x must be a vector of length {self.shape[1]}; got a dask "
                                 f"array with shape {x.shape}")
            return self._distributed_matvec(self._scatter(x)).to_dask()
        if type(x).__module__.startswith("cupy"):
            import cupy

            y = self._distributed_matvec(self._scatter(x))
            with naming_lost_workers(self.client, self.workers):
                chunks = self.client.gather(y.chunks)
            return cupy.concatenate([cupy.asarray(c) for c in chunks])
        column = np.ndim(x) == 2
        x = np.asarray(x)
        if x.ndim == 2 and x.shape[1] == 1:
            x = x[:, 0]
        if x.ndim != 1 or x.shape[0] != self.shape[1]:
            raise ValueError(f"x has length {x.shape[0] if x.ndim else 0}, but the matrix has "
                             f"{self.shape[1]} columns")
        y = self._distributed_matvec(self._scatter(x)).gather()
        return y.reshape(-1, 1) if column else y

    def _scatter(self, x) -> DistributedVector:
        dtype = result_dtype(self.dtype, x.dtype)  # refused here, before any rank exchanges
        return DistributedVector.scatter(x, self.col_layout, self.client, dtype)

    def _distributed_matvec(self, x: DistributedVector) -> DistributedVector:
        if x.layout != self.col_layout:
            raise ValueError("x is cut differently from the operator's columns; make it with "
                             "op.vector(x) or as a product of an operator with the same "
                             "layout")
        dtype = result_dtype(self.dtype, x.dtype)
        return DistributedVector(self.client, self.row_layout,
                                 self.map_ranks(_matvec_on_rank, x), dtype)

    def _matvec(self, x):
        return self.matvec(x)

    def __matmul__(self, x):
        if (isinstance(x, DistributedVector) or is_dask_array(x)
                or type(x).__module__.startswith("cupy")
                or (isinstance(x, np.ndarray) and x.ndim == 1)):
            return self.matvec(x)
        return super().__matmul__(x)

    def dot(self, x):
        if isinstance(x, DistributedVector) or is_dask_array(x) \
                or type(x).__module__.startswith("cupy"):
            return self.matvec(x)
        return super().dot(x)

    def _rmatvec(self, x):
        raise NotImplementedError("DistributedOperator has no transpose; prepare A.T for Aᵀ @ x")

    def __getstate__(self):
        """Pickling keeps the ranks where they are (Dask pickles futures by key) and drops the
        client; an unpickled copy takes the loading process's client at first use."""
        return {**self.__dict__, "_client": None}

    def close(self):
        """Release the ranks and their communicators now.

        A closed operator refuses products (a RuntimeError says to prepare it again); closing
        it again does nothing.

        Raises
        ------
        ValueError
            The client is closed or has lost its scheduler.

        Examples
        --------
        >>> op.close()  # doctest: +SKIP
        >>> op @ np.ones(1000)  # doctest: +SKIP
        Traceback (most recent call last):
        ...
        RuntimeError: this DistributedOperator was closed; prepare it again
        """
        if self._ranks:
            self.client.gather(on_workers(self.client, _close_rank, self.workers, self._ranks))
        self._ranks, self._last = [], []


def _workers(client, parts):
    workers = sorted(connected(client).nthreads())
    if not workers:
        raise ValueError("the Dask cluster has no workers; start some (or wait for them with "
                         "client.wait_for_workers(n)) before preparing")
    if parts is None:
        return workers
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise ValueError(f"parts must be a positive integer; got {parts!r}")
    if parts > len(workers):
        raise ValueError(f"parts={parts} ranks need as many workers (one rank per worker); the "
                         f"cluster has {len(workers)}")
    return workers[:int(parts)]


def _set_up_comm(client, workers, device):
    """Probe the workers, then join them in one communicator; ``(device, comm kind, comm id,
    reason for not using NCCL)``."""
    probes = client.gather(on_workers(client, _build.probe, workers, [device] * len(workers)))
    devices = {d for d, _ in probes}
    if len(devices) > 1:
        raise ValueError(f"the workers resolve device=None differently ({sorted(devices)}); "
                         "pass device='cpu' or device='cuda'")
    device = devices.pop()
    reasons = sorted({why for _, why in probes if why})
    comm_id = _comm.new_comm_id()
    size = len(workers)

    def on_all(fn, args_of_rank):
        columns = zip(*[(comm_id, r, *args_of_rank(r)) for r in range(size)])
        return client.gather(on_workers(client, fn, workers, *columns))

    if size == 1:
        on_all(_comm.self_join, lambda r: ())
        return device, comm_id, ""
    if device == "cuda" and not reasons:
        unique_id = client.submit(_comm.nccl_unique_id, workers=[workers[0]], pure=False)
        on_all(_comm.nccl_join, lambda r: (size, unique_id))
        return device, comm_id, ""
    authkey = _comm.new_authkey()
    addresses = on_all(_comm.socket_listen, lambda r: (_host_of(workers[r]), authkey))
    on_all(_comm.socket_join, lambda r: (addresses, authkey))
    return device, comm_id, "; ".join(reasons)


RELEASE_TIMEOUT_S = 10
"""How long a failed :func:`prepare` waits for the workers to release its communicator."""


def _release_comm(client, workers, comm_id: str) -> None:
    """Release the communicator ``comm_id`` on every worker after a failed build, so that no
    worker keeps a half-built operator's connections; best effort (the build's error is the
    one to report), waiting at most :data:`RELEASE_TIMEOUT_S`."""
    distributed = require_distributed()
    try:
        released = on_workers(client, _comm.release, workers, [comm_id] * len(workers),
                              range(len(workers)))
        distributed.wait(released, timeout=RELEASE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - the build's own error follows
        pass


def _host_of(address: str) -> str:
    """The host part of a Dask worker address (in-process workers: the loopback)."""
    if "://" in address:
        scheme, rest = address.split("://", 1)
        if scheme in ("tcp", "tls", "ucx", "ucxx"):
            host = rest.rsplit(":", 1)[0]
            return host.strip("[]")
    return "127.0.0.1"


def prepare(A, client=None, parts: int | None = None, device: str | None = None, *,
            shape=None, row_bounds=None, **prepare_kwargs) -> DistributedOperator:
    """Cut A's rows over the workers of a Dask cluster, one rank per worker, and build each
    rank's owned and ghost blocks where they live.

    The package docs (:mod:`autospmv.distributed`) say how the operator works. Rank r takes
    the r-th worker in sorted address order.

    Parameters
    ----------
    A : sparse matrix, 2-D array, callable or list
        The matrix, in one of three forms:

        * a matrix :func:`autospmv.prepare` accepts (the convenience form: cut on the client
          into blocks of about equal nonzeros, each sent to its worker once);
        * a function ``block(row_start, row_stop)`` returning that row block (a SciPy sparse
          matrix with all n columns), called on the workers, so that a large matrix never
          passes through the client; needs ``shape=``;
        * a list of per-part sources, one per rank: paths to ``scipy.sparse.save_npz`` files
          or functions of no arguments, each giving its rank's row block, read on the
          workers; the blocks' rows add up to m.
    client : distributed.Client, optional
        The client of the cluster to run on. Default: the current one; without any, a
        ValueError says how to start one (prepare never starts a cluster).
    parts : int, optional
        The number of ranks (default: every worker); the first ``parts`` workers in sorted
        address order take them.
    device : {"cpu", "cuda"}, optional
        Default: CUDA where the workers see a GPU.
    shape : tuple of two ints, optional
        With a block function: the whole matrix's shape ``(m, n)``.
    row_bounds : sequence of int, optional
        With a block function: ``parts + 1`` non-decreasing integers from 0 to m; rank r gets
        rows ``row_bounds[r]:row_bounds[r + 1]``. Default: rows cut evenly.
    **prepare_kwargs
        Other keywords (``kernel=``, ``model=``, ``params=``, ``tune=``) go to
        :func:`autospmv.prepare` for each block; a ``model=`` path must exist on the workers.

    Returns
    -------
    DistributedOperator
        The operator, a ``scipy.sparse.linalg.LinearOperator``; ``op.explain()`` shows each
        rank's rows, ghost exchange and kernel decisions. For a square A, x is cut like the
        rows; otherwise x's entries are cut evenly.

    Raises
    ------
    ImportError
        Dask is not installed, or ``device="cuda"`` on workers without CuPy.
    ValueError
        No client (the message says how to start one), or a closed one; an unknown
        ``device``; ``parts`` not a positive integer, or more than the workers; a cluster
        without workers; workers that resolve ``device=None`` differently; ``device="cuda"``
        on a worker without a usable GPU (named); a block function without ``shape=``, or
        ``row_bounds`` that do not cut the rows into ``parts`` blocks; ``shape=`` or
        ``row_bounds=`` with a whole matrix; a list of part sources not one per rank, or
        whose blocks differ in columns; A not 2-D; a part file that cannot be read, or a row
        block of the wrong shape (the message names the rank); row blocks of different
        dtypes; what :func:`autospmv.prepare` refuses in a block (a malformed matrix, an
        unknown ``kernel``).
    TypeError
        A of another kind (a ``LinearOperator``, for instance); a part source that is not a
        path or a function, or gives no 2-D SciPy sparse matrix (the message names the
        rank); complex values.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, autospmv.distributed
    >>> from distributed import Client, LocalCluster
    >>> client = Client(LocalCluster(n_workers=2, threads_per_worker=1))  # doctest: +SKIP
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(1000, 1000), format="csr")
    >>> op = autospmv.distributed.prepare(T, client=client, device="cpu")  # doctest: +SKIP
    >>> bool(np.allclose(op @ np.ones(1000), T @ np.ones(1000)))  # doctest: +SKIP
    True

    The same operator, its row blocks made on the workers:

    >>> op = autospmv.distributed.prepare(lambda start, stop: T[start:stop],
    ...                                   shape=T.shape, device="cpu")  # doctest: +SKIP
    """
    require_distributed()
    client = _default_client() if client is None else client
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; use 'cpu', 'cuda' or None (CUDA where the "
                         "workers see a GPU)")
    workers = _workers(client, parts)
    size = len(workers)
    blocks, (m, n), bounds = _blocks(A, client, workers, shape, row_bounds)
    col_bounds = bounds if m == n else even_bounds(n, size)
    device, comm_id, reason = _set_up_comm(client, workers, device)
    try:
        ranks = on_workers(client, _build.build_rank, workers, blocks, range(size),
                           row_bounds=bounds, col_bounds=col_bounds, comm_id=comm_id,
                           device=device, kwargs=prepare_kwargs)
        described = client.gather(on_workers(client, _describe, workers, ranks))
        dtypes = {info.pop("dtype") for info in described}
        if len(dtypes) > 1:
            raise ValueError(f"the row blocks have different dtypes "
                             f"({sorted(map(str, dtypes))}); give them one dtype")
    except BaseException:
        _release_comm(client, workers, comm_id)
        raise
    parts_ = []
    for r, (w, info) in enumerate(zip(workers, described)):
        parts_.append(Part(r, (int(bounds[r]), int(bounds[r + 1])),
                           (int(col_bounds[r]), int(col_bounds[r + 1])),
                           info["owned_nnz"] + info["ghost_nnz"], w, **info))
    row_layout = Layout(tuple(workers), bounds, device)
    col_layout = Layout(tuple(workers), col_bounds, device)
    return DistributedOperator(client, (m, n), dtypes.pop(), parts_, ranks, row_layout,
                               col_layout, reason)


def _blocks(A, client, workers, shape, row_bounds):
    """``(one row-block future per rank, (m, n), row bounds)`` for each form of A."""
    size = len(workers)
    if callable(A) and not sp.issparse(A):
        if shape is None or len(shape) != 2:
            raise ValueError("a block function needs shape=(m, n), the whole matrix's shape")
        m, n = (int(s) for s in shape)
        bounds = (even_bounds(m, size) if row_bounds is None
                  else check_bounds(row_bounds, m, size, "row_bounds"))
        blocks = on_workers(client, _build.call_block, workers, bounds[:-1].tolist(),
                            bounds[1:].tolist(), range(size), function=A, n=n)
        # every block checked before any rank communicates: a rank whose block is refused
        # must not leave the others waiting for it in the exchange
        client.gather(on_workers(client, _build.block_shape, workers, blocks))
        return blocks, (m, n), bounds
    if isinstance(A, (list, tuple)):
        if len(A) != size:
            raise ValueError(f"give one part source per rank: {size} (the workers, or parts=); "
                             f"got {len(A)}")
        blocks = on_workers(client, _build.load_block, workers, list(A), range(size))
        shapes = client.gather(on_workers(client, _build.block_shape, workers, blocks))
        widths = {s[1] for s in shapes}
        if len(widths) != 1:
            raise ValueError(f"the part sources' row blocks have different numbers of columns: "
                             f"{[s[1] for s in shapes]}")
        bounds = np.concatenate(([0], np.cumsum([s[0] for s in shapes]))).astype(np.int64)
        return blocks, (int(bounds[-1]), widths.pop()), bounds
    if shape is not None or row_bounds is not None:
        raise ValueError("shape= and row_bounds= go with a block function; a whole matrix has "
                         "its own shape and is cut by nonzeros")
    csr = _canonical_matrix(A)
    m, n = csr.shape
    bounds = row_partition(csr.indptr, size)
    blocks = [client.scatter(csr[int(bounds[r]):int(bounds[r + 1])], workers=[w], hash=False)
              for r, w in enumerate(workers)]
    return blocks, (m, n), bounds


def _canonical_matrix(A) -> sp.csr_matrix:
    if isinstance(A, LinearOperator) or not (sp.issparse(A) or isinstance(A, np.ndarray)):
        raise TypeError(f"A must be a SciPy sparse matrix or a 2-D NumPy array, a block function "
                        f"or a list of part sources; got {type(A).__name__}")
    if A.ndim != 2:
        raise ValueError(f"A must be 2-D; got {A.ndim} dimensions")
    return canonicalize(A)  # checked as autospmv.prepare checks it
