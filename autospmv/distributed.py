"""A row-partitioned operator on a Dask cluster: each part of A chooses its own kernel.

Usage (``A`` any matrix :func:`autospmv.prepare` accepts, ``x`` a vector)::

    from distributed import Client, LocalCluster
    client = Client(LocalCluster(n_workers=2, threads_per_worker=1))  # GPUs: LocalCUDACluster()
    op = autospmv.distributed.prepare(A, client=client)
    y = op @ x

Without ``client=``, the default client (the last one created) is used; when there is none,
:func:`prepare` raises a ValueError saying how to start one: it never starts a cluster itself.

How it works
------------
:func:`prepare` canonicalises A on the client, cuts its rows into ``parts`` contiguous blocks with
about the same number of nonzeros (:func:`row_partition`; by default one part per worker) and
assigns them to the workers in turn. For each part it computes the *column footprint* once: the
sorted distinct columns the part's nonzeros touch. When the footprint holds fewer than
``compact_below`` × n columns, the part is stored with its columns renumbered to positions in the
footprint (a rows × footprint matrix), and every product sends it only ``x[footprint]``.
Otherwise the part keeps all n columns and reads the whole x, which is then sent once per
product to each worker that needs it and shared by all its parts. Inputs up to
:data:`INLINE_BYTES` travel inside the parts' tasks; larger ones are scattered to the workers
first (see :meth:`DistributedOperator._run`).

Each part is scattered to its worker, where :func:`autospmv.prepare` runs on it: the worker
extracts the part's features, asks the tree for the part's own kernel and converts the part
once. The converted part stays on its worker (a Dask future, pinned there); only its
:class:`~autospmv.Decision` comes back, so that :meth:`DistributedOperator.explain` shows one
section per part (row range, nonzeros, footprint, worker, kernel and why).

A product ``op @ x``:

* NumPy x (or a list): sends each part its x (the footprint's entries or the shared whole),
  runs the parts' products where they live and gathers y as one NumPy array.
* dask array x: the parts' inputs are computed from x on the cluster (``x[footprint]`` moves only
  the chunks' needed entries) and the products start at once; y is a dask array whose chunks
  are the row parts, backed by results already on the workers (``y.compute()`` gathers them).
* CuPy x, with workers on GPUs (``dask_cuda.LocalCUDACluster``, one worker per GPU): the
  footprint is taken on the client's GPU, Dask's CUDA serialisation moves the pieces to the
  workers' GPUs, each part runs its CUDA kernel on its own device and y is gathered as a CuPy
  array on the client's GPU.

Limits: the client holds A while preparing (parts are cut on the client, then shipped); every
product costs a round of scatter, one task per part and a gather (about a millisecond of
scheduler work per part on a local cluster, more across nodes), plus moving x and y between
the client and the workers. The operator pays off when a part's product takes much longer than
that, i.e. for matrices with hundreds of millions of nonzeros per worker.

Workers: a ``LocalCluster`` of worker processes (``processes=True``, Dask's default) is what a
``LocalCUDACluster`` uses and what the tests run on. Workers sharing one process
(``processes=False``: no serialisation, quicker to start) work too; their CPU products then
take turns (:data:`_CPU_LOCK`), each using all cores through numba's threads.

The operator has no transpose (``rmatvec``); build one from ``A.T`` when it is needed.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .devices import check_device
from .validation import canonicalize, check_vector, result_dtype

COMPACT_BELOW = 0.8
"""A part whose column footprint has fewer than this share of A's columns receives only
``x[footprint]`` per product; any other part reads the whole (shared) x.

Taking ``x[footprint]`` on the client is one pass over the footprint, cheaper than sending the
entries it saves, so compaction pays well above half of n. The case that sets the bar: a square
band or mesh matrix on two workers, whose halves each touch just over half of the columns;
a 50 % bar would send both workers all of x. Near n, the saving is small and a worker's parts
share one copy of x instead of receiving overlapping pieces."""

INLINE_BYTES = 1 << 20
"""Per product, an input of x up to this size travels inside its part's task; a larger one is
scattered to the workers first (see :meth:`DistributedOperator._run`)."""


def _require_distributed():
    try:
        import distributed
    except ImportError as error:
        raise ImportError(
            "autospmv.distributed needs Dask: pip install 'autospmv[distributed]' "
            "(and dask-cuda for GPU workers: 'autospmv[distributed-cuda]')"
        ) from error
    return distributed


def _default_client():
    distributed = _require_distributed()
    try:
        return distributed.default_client()
    except ValueError:
        raise ValueError(
            "autospmv.distributed.prepare needs a Dask client: pass client=, or start one first, "
            "e.g. Client(LocalCluster(n_workers=2)) for CPU workers or "
            "Client(dask_cuda.LocalCUDACluster()) for one worker per GPU"
        ) from None


def row_partition(indptr: np.ndarray, parts: int) -> np.ndarray:
    """Row boundaries (``parts + 1`` of them, from 0 to m) of contiguous blocks of about equal
    work, where a row's work is its nonzeros plus one (its entry of y, and so that rows without
    nonzeros are spread too).

    Boundary k is the row boundary whose cumulative work is nearest to k/parts of the total, so
    a row longer than a share gets a block of its own rather than joining its neighbours'.
    Blocks may be empty when a row holds more than a share or there are more parts than rows.
    """
    m = indptr.size - 1
    work = indptr.astype(np.int64) + np.arange(m + 1, dtype=np.int64)  # cumulative work
    targets = work[-1] * np.arange(1, parts, dtype=np.float64) / parts
    above = np.minimum(np.searchsorted(work, targets, side="left"), m)
    below = np.maximum(above - 1, 0)
    nearest = np.where(targets - work[below] < work[above] - targets, below, above)
    return np.concatenate(([0], nearest, [m])).astype(np.int64)


@dataclasses.dataclass(eq=False)
class Part:
    """One row block of a :class:`DistributedOperator`, as recorded on the client."""

    index: int
    rows: tuple[int, int]
    """The block's rows ``start:stop`` in A."""
    nnz: int
    footprint: np.ndarray | None
    """The sorted distinct columns the block touches, when it is compacted (it receives only
    these entries of x); None when it reads the whole x."""
    columns: int
    """Columns of the stored part: the footprint's length when compacted, else n."""
    worker: str
    """Address of the worker that holds the converted part and runs its products."""
    decision: object = None
    """The part's :class:`~autospmv.Decision`, made on its worker."""
    device: str = ""
    """The device the part runs on (``"cpu"`` or ``"cuda"``), as resolved on its worker."""

    @property
    def compacted(self) -> bool:
        return self.footprint is not None

    @property
    def kernel(self) -> str:
        return self.decision.kernel


def _compact(block: sp.csr_matrix, n: int, compact_below: float):
    """(stored matrix, footprint or None) for one row block of a canonical CSR matrix."""
    footprint = np.unique(block.indices)
    if footprint.size >= compact_below * n:
        return block, None
    # Canonical CSR has sorted indices and the footprint is sorted, so renumbering keeps them so.
    indices = np.searchsorted(footprint, block.indices).astype(block.indices.dtype)
    stored = sp.csr_matrix((block.data, indices, block.indptr), shape=(block.shape[0],
                                                                       footprint.size))
    return stored, footprint.astype(np.int64)


# The functions below run on the workers.

_CPU_LOCK = threading.Lock()
"""Serialises CPU work of the workers that share a process (``LocalCluster(processes=False)``).
Each numba CPU kernel already uses all cores, so nothing is lost, and numba's default threading
layer (workqueue, used when neither OpenMP nor TBB is available) aborts the process when two
threads run parallel regions at once."""


def _prepare_part(matrix, device, kwargs):
    import autospmv

    with _CPU_LOCK:
        return autospmv.prepare(matrix, device=device, **kwargs)


def _describe_part(op):
    return op.decision, op.device


def _part_matvec(op, x):
    if op.device == "cpu":
        with _CPU_LOCK:
            return op.matvec(x)
    return op.matvec(x)


class DistributedOperator(LinearOperator):
    """``y = A @ x`` over row parts of A held by Dask workers; a ``scipy.sparse.linalg.LinearOperator``.

    Built by :func:`prepare`. Attributes: ``shape``, ``dtype``, ``nnz``, ``client``, ``parts``
    (a list of :class:`Part`: rows, nonzeros, footprint, worker, decision), ``kernels`` (the
    parts' kernels), ``decisions``, ``compact_below``, and ``last_transfer``: what the latest
    NumPy or CuPy product sent — ``{"per_part": [entries of x each part received], "shared":
    entries of the whole x sent to the workers that share it, "entries": their total}``.
    """

    def __init__(self, client, shape, dtype, nnz, parts, futures, compact_below):
        super().__init__(dtype=dtype, shape=shape)
        self._client = client
        self.nnz = nnz
        self.parts = parts
        self.compact_below = compact_below
        self._futures = futures
        self._device_footprints = {}
        self.last_transfer = None

    @property
    def client(self):
        """The Dask client the products go through; an unpickled operator takes the loading
        process's client at first use (in a task on a worker, that worker's client)."""
        if self._client is None:
            distributed = _require_distributed()
            try:
                self._client = distributed.get_client()
            except ValueError:
                raise ValueError("this unpickled DistributedOperator needs a Dask client "
                                 "connected to the cluster that holds its parts; start one "
                                 "first") from None
        return self._client

    @property
    def kernels(self) -> list[str]:
        return [part.kernel for part in self.parts]

    @property
    def decisions(self) -> list:
        return [part.decision for part in self.parts]

    def explain(self) -> str:
        """One section per part: its rows, nonzeros, footprint, worker and kernel decision."""
        m, n = self.shape
        workers = sorted({part.worker for part in self.parts})
        lines = [f"DistributedOperator {m}x{n} {self.dtype} nnz={self.nnz}: "
                 f"{len(self.parts)} row parts on {len(workers)} workers"]
        for part in self.parts:
            start, stop = part.rows
            if part.compacted:
                sends = (f"receives x[footprint]: {part.columns} of {n} entries "
                         f"({part.columns / max(n, 1):.1%})")
            else:
                sends = f"reads the whole x (footprint ≥ {self.compact_below:.0%} of {n})"
            lines.append(f"part {part.index}: rows {start}:{stop} ({stop - start} rows), "
                         f"nnz {part.nnz}, {sends}, worker {part.worker}, "
                         f"device {part.device}, kernel {part.kernel}")
            lines += ["  " + line for line in part.decision.explain().splitlines()]
        return "\n".join(lines)

    __str__ = explain

    def __repr__(self):
        m, n = self.shape
        return (f"<DistributedOperator {m}x{n} {self.dtype} nnz={self.nnz} "
                f"parts={len(self.parts)} kernels={self.kernels}>")

    # Dispatch: dask and CUDA arrays must not reach LinearOperator, which would turn them into
    # NumPy arrays.

    def matvec(self, x):
        """``A @ x`` for a NumPy, dask or CuPy vector (see the module docs for what comes back),
        in SciPy's dtype, ``numpy.result_type(op.dtype, x.dtype)``, as
        :meth:`autospmv.SpMVOperator.matvec`."""
        if _is_dask_array(x):
            return self._dask_matvec(x)
        if _is_cupy_array(x):
            return self._cupy_matvec(x)
        column = np.ndim(x) == 2
        y = self._matvec(check_vector(x, self.shape[1], self.dtype))
        return y.reshape(-1, 1) if column else y

    def __matmul__(self, x):
        if _is_dask_array(x) or _is_cupy_array(x) or (isinstance(x, np.ndarray) and x.ndim == 1):
            return self.matvec(x)
        return super().__matmul__(x)

    def dot(self, x):
        if _is_dask_array(x) or _is_cupy_array(x):
            return self.matvec(x)
        return super().dot(x)

    def _matvec(self, x):
        x = check_vector(x, self.shape[1], self.dtype)
        pieces = [x[part.footprint] if part.compacted else None for part in self.parts]
        shared = x if any(piece is None for piece in pieces) else None
        return np.concatenate(self.client.gather(self._run(pieces, shared)))

    def _run(self, pieces, shared) -> list:
        """Send each part its x (its piece, or the shared whole x) and start its product;
        the futures of the parts' results, in order.

        Inputs of at most :data:`INLINE_BYTES` travel inside the part's task (one message, no
        extra round trip); larger ones are scattered first: a part's piece to its worker, the
        shared x once to every worker whose parts read it (``broadcast=True``).
        """
        client = self.client
        sent = list(pieces)
        by_worker = {}
        for part, piece in zip(self.parts, pieces):
            if piece is not None and piece.nbytes > INLINE_BYTES:
                by_worker.setdefault(part.worker, []).append(part.index)
        for worker, indices in by_worker.items():
            futures = client.scatter([pieces[i] for i in indices], workers=[worker], hash=False)
            for i, future in zip(indices, futures):
                sent[i] = future
        shared_count = 0
        if shared is not None:
            readers = [p for p, piece in zip(self.parts, pieces) if piece is None]
            if shared.nbytes > INLINE_BYTES:
                workers = sorted({part.worker for part in readers})
                shared = client.scatter(shared, workers=workers, broadcast=True, hash=False)
                shared_count = self.shape[1] * len(workers)
            else:
                shared_count = self.shape[1] * len(readers)
            sent = [shared if piece is None else item for piece, item in zip(pieces, sent)]
        per_part = [0 if piece is None else int(piece.size) for piece in pieces]
        self.last_transfer = {"per_part": per_part, "shared": shared_count,
                              "entries": sum(per_part) + shared_count}
        return [client.submit(_part_matvec, op, xs, workers=[part.worker], pure=False)
                for part, op, xs in zip(self.parts, self._live_futures(), sent)]

    def _live_futures(self) -> list:
        if len(self._futures) != len(self.parts):
            raise RuntimeError("this DistributedOperator was closed; prepare it again")
        return self._futures

    def _dask_matvec(self, x):
        import dask.array as da

        if x.ndim != 1 or x.shape[0] != self.shape[1]:
            raise ValueError(f"x must be a vector of length {self.shape[1]}; got a dask array "
                             f"with shape {x.shape}")
        dtype = result_dtype(self.dtype, x.dtype)
        x = x.astype(dtype)
        inputs = [x[part.footprint] if part.compacted else x for part in self.parts]
        # One compute: x's chunks are computed once however many parts read them.
        computed = self.client.compute(inputs)
        futures = [self.client.submit(_part_matvec, op, xs, workers=[part.worker], pure=False)
                   for part, op, xs in zip(self.parts, self._live_futures(), computed)]
        blocks = [da.from_delayed(future, shape=(part.rows[1] - part.rows[0],), dtype=dtype)
                  for part, future in zip(self.parts, futures)]
        y = da.concatenate(blocks)
        rows = tuple(part.rows[1] - part.rows[0] for part in self.parts)
        # concatenate may drop empty blocks; the chunks are the row parts, empty ones included.
        return y if y.chunks == (rows,) else y.rechunk((rows,))

    def _cupy_matvec(self, x):
        import cupy

        if x.ndim == 2 and 1 in x.shape and x.size == self.shape[1]:
            x = x.reshape(-1)
        if x.ndim != 1 or x.shape[0] != self.shape[1]:
            raise ValueError(f"x must be a vector of length {self.shape[1]}; got a CuPy array "
                             f"with shape {x.shape}")
        x = cupy.ascontiguousarray(x, dtype=result_dtype(self.dtype, x.dtype))
        pieces = [x[self._device_footprint(part)] if part.compacted else None
                  for part in self.parts]
        shared = x if any(piece is None for piece in pieces) else None
        results = self.client.gather(self._run(pieces, shared))
        return cupy.concatenate([cupy.asarray(result) for result in results])

    def _device_footprint(self, part):
        """The part's footprint on the client's GPU (uploaded on first use)."""
        if part.index not in self._device_footprints:
            import cupy

            self._device_footprints[part.index] = cupy.asarray(part.footprint)
        return self._device_footprints[part.index]

    def _rmatvec(self, x):
        raise NotImplementedError("DistributedOperator has no transpose; prepare A.T for Aᵀ @ x")

    def __getstate__(self):
        """Pickling keeps the parts where they are: the state holds the parts' futures, which
        Dask pickles by key, and not the client (its connection and event-loop tasks cannot be
        pickled; see :attr:`client`) nor the client-side GPU copies of the footprints."""
        return {**self.__dict__, "_client": None, "_device_footprints": {}}

    def close(self):
        """Release the parts held on the workers now (otherwise when the operator is collected);
        a closed operator refuses products."""
        for future in self._futures:
            future.release()
        self._futures = []


def _is_dask_array(x) -> bool:
    return type(x).__module__.startswith("dask.array") and hasattr(x, "chunks")


def _is_cupy_array(x) -> bool:
    return type(x).__module__.startswith("cupy") and hasattr(x, "__cuda_array_interface__")


def prepare(A, client=None, parts: int | None = None, device: str | None = None, *,
            compact_below: float = COMPACT_BELOW, **prepare_kwargs) -> DistributedOperator:
    """Partition A's rows over a Dask cluster; each part chooses and builds its own kernel.

    ``client``: a ``distributed.Client`` (default: the current default client; without one a
    ValueError says how to start one — no cluster is created behind your back).
    ``parts``: number of contiguous row blocks, balanced by nonzeros (default: one per worker;
    more parts than workers are dealt to the workers in turn).
    ``device``: passed to :func:`autospmv.prepare` on each worker (None: CUDA where the worker
    sees a GPU). ``compact_below``: see :data:`COMPACT_BELOW` (0 never compacts).
    Other keywords (``kernel=``, ``model=``, ``params=``, ``tune=``) go to
    :func:`autospmv.prepare` for every part; a ``model=`` path must exist on the workers.
    """
    _require_distributed()
    client = _default_client() if client is None else client
    check_device(device)
    if not 0 <= compact_below <= 1:
        raise ValueError(f"compact_below must be a share of the columns in [0, 1]; got "
                         f"{compact_below!r}")
    workers = sorted(client.nthreads())
    if not workers:
        raise ValueError("the Dask cluster has no workers; start some (or wait for them with "
                         "client.wait_for_workers(n)) before preparing")
    if parts is None:
        parts = len(workers)
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise ValueError(f"parts must be a positive integer; got {parts!r}")
    csr = canonicalize(A)
    m, n = csr.shape
    bounds = row_partition(csr.indptr, int(parts))
    records, futures = [], []
    for k in range(int(parts)):
        start, stop = int(bounds[k]), int(bounds[k + 1])
        block = csr[start:stop]
        stored, footprint = _compact(block, n, compact_below)
        worker = workers[k % len(workers)]
        matrix = client.scatter(stored, workers=[worker], hash=False)
        futures.append(client.submit(_prepare_part, matrix, device, prepare_kwargs,
                                     workers=[worker], pure=False))
        records.append(Part(k, (start, stop), int(block.nnz), footprint, stored.shape[1], worker))
    described = client.gather([client.submit(_describe_part, future, workers=[part.worker],
                                             pure=False)
                               for part, future in zip(records, futures)])
    for part, (decision, part_device) in zip(records, described):
        part.decision, part.device = decision, part_device
    return DistributedOperator(client, (m, n), csr.dtype, int(csr.nnz), records, futures,
                               compact_below)
