"""What one rank holds on its worker, and the product it runs there.

A :class:`Rank` holds the rank's owned and ghost blocks (each an :class:`autospmv.SpMVOperator`
with its own kernel decision), the indices of its owned x entries that each neighbour needs
(:attr:`Rank.send_indices`) and the key of its communicator. Its vectors are plain arrays on
the worker: CuPy on a GPU, NumPy on the CPU (see :attr:`Rank.xp`).

A product (:meth:`Rank.matvec`), in the order of PETSc's ``MatMult_MPIAIJ``: start the ghost
exchange (gather the entries the neighbours need, send them, receive ours), multiply the owned
block meanwhile, finish the exchange, then add the ghost block's product to the rows that have
ghost entries. On a GPU the exchange runs on the communicator's stream and the products on the
current (compute) stream, so they overlap on the device; the host returns at once.

The solvers (:mod:`._solvers`) see a rank through :meth:`Rank.matvec`, :meth:`Rank.dot`,
:meth:`Rank.sum_dot`, :meth:`Rank.norm` and :attr:`Rank.xp`.
"""

from __future__ import annotations

import threading

import numpy as np

from .._support.validation import result_dtype
from . import _comm
from ._kernels import scatter_add
from ._partition import Split

CPU_LOCK = threading.Lock()
"""Serialises the CPU products of ranks that share a process (``LocalCluster(processes=False)``):
each numba CPU kernel uses all cores already, and numba's default threading layer (workqueue)
aborts the process when two threads run parallel regions at once. Never held while
communicating."""


class Rank:
    """One rank's blocks and exchange plan; built on its worker by :func:`build_rank`."""

    def __init__(self, rank, size, rows, cols, comm_id, split: Split, owned_op, ghost_op,
                 send_indices, device, nnz):
        self.rank, self.size = rank, size
        self.rows, self.cols = rows, cols
        """``(start, stop)`` of the rank's rows of A (and entries of y) and of its x entries."""
        self.comm_id = comm_id
        self.owned = owned_op
        self.ghost = ghost_op
        """None when no row of the block has ghost entries."""
        self.ghost_rows = split.ghost_rows
        """The rows with ghost entries (on the rank's device)."""
        self.all_rows_ghost = split.ghost_rows.size == rows[1] - rows[0]
        self.sources = split.sources
        """``{peer: (start, stop)}``: the ghost entries each peer sends, as a slice of the ghost
        vector."""
        self.ghost_size = int(split.ghost_columns.size)
        self.send_indices = send_indices
        """``{peer: indices}``: the entries of this rank's x chunk each peer needs."""
        self.device = device
        self.nnz = nnz
        self.dtype = owned_op.dtype
        self.build_seconds = {}
        """Seconds each step of the build took on the worker (check, split, agree,
        prepare_owned, prepare_ghost); set by :func:`~._build.build_rank`."""

    @property
    def xp(self):
        if self.device == "cuda":
            import cupy

            return cupy
        return np

    @property
    def comm(self):
        return _comm.get(self.comm_id, self.rank)

    def _product(self, op, x):
        if self.device == "cpu":
            with CPU_LOCK:
                return op.matvec(x)
        return op.matvec(x)

    def matvec(self, x):
        """This rank's rows of ``A @ x``, from this rank's chunk of x (all ranks at once). A
        dtype the kernels cannot take is refused before the exchange starts, as on every rank,
        so that no rank is left with entries sent and never received."""
        result_dtype(self.dtype, x.dtype)
        xp = self.xp
        comm = self.comm
        ghost_x = self._ghost_buffer(x.dtype)
        receives = {peer: ghost_x[start:stop] for peer, (start, stop) in self.sources.items()}

        def sends():
            return {peer: x[indices] for peer, indices in self.send_indices.items()}

        if self.device == "cuda":
            # The owned product is queued first, so the GPU starts on it while the host queues
            # the exchange on the communicator's stream.
            ready = xp.cuda.get_current_stream().record()
            y = self.owned.matvec(x)
            finish = comm.start_exchange(sends, receives, ready)
        else:
            # The CPU product returns when done: the exchange starts first, and runs meanwhile.
            finish = comm.start_exchange(sends, receives)
            y = self._product(self.owned, x)
        finish()
        if self.ghost is not None:
            product = self._product(self.ghost, ghost_x)
            if self.all_rows_ghost:
                y += product
            else:
                scatter_add(xp, product, self.ghost_rows, y)
        return y

    def _ghost_buffer(self, dtype):
        """The ghost entries' buffer for x of this dtype, made once: each exchange waits for
        the work queued before it, so the last product's reads are done when it is refilled."""
        buffers = self.__dict__.setdefault("_buffers", {})
        if dtype not in buffers:
            buffers[dtype] = self.xp.empty(self.ghost_size, dtype=dtype)
        return buffers[dtype]

    def dot(self, a, b):
        """``a · b`` over all ranks (an all-reduce), as a host float, identical on all ranks."""
        xp = self.xp
        local = xp.asarray(xp.dot(a, b)).reshape(1)
        if local.dtype != np.float64:
            local = local.astype(np.float64)
        return float(self.comm.allreduce(local, xp)[0])

    def dots(self, *pairs):
        """Several dot products over all ranks in one all-reduce, as host floats."""
        xp = self.xp
        local = xp.stack([xp.dot(a, b) for a, b in pairs]).astype(np.float64)
        return [float(v) for v in self.comm.allreduce(local, xp).tolist()]

    def sum_dot(self, a, b, out):
        """``out[0] = a · b`` over all ranks (``out``: a one-element float64 array on the
        rank's device), queued on the device: on a GPU the host does not wait for it."""
        xp = self.xp
        local = xp.asarray(xp.dot(a, b)).reshape(1)
        if local.dtype != np.float64:
            local = local.astype(np.float64)
        self.comm.allreduce(local, xp, out=out)

    def norm(self, a):
        return float(np.sqrt(self.dot(a, a)))

    def synchronize(self):
        if self.device == "cuda":
            import cupy

            cupy.cuda.get_current_stream().synchronize()

    def describe(self) -> dict:
        """What the client records of this rank (see :class:`~._operator.Part`)."""
        return {"decision": self.owned.decision,
                "ghost_decision": None if self.ghost is None else self.ghost.decision,
                "device": self.device, "comm": self.comm.kind, "dtype": np.dtype(self.dtype),
                "owned_nnz": int(self.owned.nnz),
                "ghost_nnz": 0 if self.ghost is None else int(self.ghost.nnz),
                "ghost_rows": int(self.ghost_rows.size), "ghost_columns": self.ghost_size,
                "receives_from": {p: b - a for p, (a, b) in self.sources.items()},
                "sends_to": {p: int(i.size) for p, i in self.send_indices.items()},
                "build_seconds": dict(self.build_seconds)}

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_buffers"}

