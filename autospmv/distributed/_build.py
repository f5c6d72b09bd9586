"""Building the ranks on their workers: row blocks in, :class:`~._rank.Rank` objects out.

Everything here runs on the workers, except :func:`block_sources`, which tells the client how
each rank gets its row block. A rank's block never passes through the client unless the user
passed the whole matrix (the convenience form of :func:`~autospmv.distributed.prepare`).
"""

from __future__ import annotations

import os
import time

import numpy as np
import scipy.sparse as sp

from . import _comm
from ._partition import canonical_block, split_block
from ._rank import CPU_LOCK, Rank


def probe(device):
    """On a worker: ``(device, why NCCL does not work or "")`` with ``device`` resolved (None:
    CUDA where the worker sees a GPU and has CuPy)."""
    import autospmv

    if device is None:
        device = "cuda" if autospmv.cuda_available() else "cpu"
    if device == "cuda":
        if not autospmv.cuda_available():
            raise ValueError(f"device='cuda', but worker {_worker_address()} has no usable GPU "
                             "(numba-cuda finds none); pass device='cpu' for CPU workers, or "
                             "start workers with GPUs (e.g. dask_cuda.LocalCUDACluster())")
        try:
            import cupy  # noqa: F401
        except ImportError:
            raise ImportError("GPU ranks keep their vectors as CuPy arrays: install CuPy on the "
                              "workers ('autospmv[distributed-cuda]'), or pass device='cpu'") \
                from None
        return device, _comm.nccl_works()
    return device, "CPU workers"


def _worker_address() -> str:
    """The address of the worker this task runs on (for messages)."""
    from distributed import get_worker

    try:
        return get_worker().address
    except ValueError:  # not in a worker
        return "(not a worker)"


def call_block(start: int, stop: int, rank: int, *, function, n: int):
    """On a worker: rank ``rank``'s row block ``function(start, stop)``, checked
    (:func:`~._partition.canonical_block`)."""
    return canonical_block(function(start, stop), stop - start, n,
                           f"rank {rank}'s row block (rows {start}:{stop})")


def load_block(source, rank: int):
    """On a worker: rank ``rank``'s row block from its per-part source: a path to a
    ``scipy.sparse.save_npz`` file, or a function of no arguments; checked
    (:func:`~._partition.canonical_block`)."""
    if callable(source):
        block = source()
    elif isinstance(source, (str, os.PathLike)):
        try:
            block = sp.load_npz(source)
        except Exception as error:  # any failure to read is the file's, named with it
            raise ValueError(f"rank {rank}'s part source {os.fspath(source)!r} cannot be read "
                             f"as a scipy.sparse.save_npz file: {error}") from None
    else:
        raise TypeError("a part source must be a path to a .npz file (scipy.sparse.save_npz) or "
                        f"a function of no arguments returning a row block; got "
                        f"{type(source).__name__}")
    if not sp.issparse(block) or block.ndim != 2:
        raise TypeError(f"rank {rank}'s part source must give a 2-D SciPy sparse matrix; got "
                        f"{type(block).__name__}")
    return canonical_block(block, block.shape[0], block.shape[1], f"rank {rank}'s row block")


def block_shape(block):
    return block.shape


def build_rank(block, rank: int, *, row_bounds, col_bounds, comm_id: str, device: str,
               kwargs: dict) -> Rank:
    """On a worker, on all ranks at once: split the block, agree with the other ranks on what
    each sends to whom (through the communicator), and prepare both blocks with
    :func:`autospmv.prepare` (the ghost block, rectangular, in its own order)."""
    import autospmv

    size = len(row_bounds) - 1
    clock = _Clock()
    block = canonical_block(block, int(row_bounds[rank + 1] - row_bounds[rank]),
                            int(col_bounds[-1]), f"rank {rank}'s row block")
    clock.lap("check")
    split = split_block(block, col_bounds, rank)
    nnz = int(block.nnz)
    del block
    clock.lap("split")
    send_indices = _agree_on_sends(split, rank, size, col_bounds, _comm.get(comm_id, rank),
                                   device)
    clock.lap("agree")
    with CPU_LOCK:
        owned = autospmv.prepare(split.owned, device=device, **kwargs)
        clock.lap("prepare_owned")
        ghost = (autospmv.prepare(split.ghost, device=device, **{**kwargs, "order": "keep"})
                 if split.ghost_rows.size else None)
        clock.lap("prepare_ghost")
    if device == "cuda":
        import cupy

        split.ghost_rows = cupy.asarray(split.ghost_rows)
    split.owned = split.ghost = None  # the operators hold what they need
    rows = (int(row_bounds[rank]), int(row_bounds[rank + 1]))
    cols = (int(col_bounds[rank]), int(col_bounds[rank + 1]))
    built = Rank(rank, size, rows, cols, comm_id, split, owned, ghost, send_indices, device, nnz)
    built.build_seconds = clock.laps
    return built


class _Clock:
    """Seconds spent in each step of a rank's build, for :attr:`Rank.build_seconds`."""

    def __init__(self):
        self.laps = {}
        self._last = time.perf_counter()

    def lap(self, name):
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now


def _agree_on_sends(split, rank, size, col_bounds, comm, device) -> dict:
    """``{peer: indices into this rank's x chunk that peer needs}``: each rank tells each owner
    how many ghost entries it needs and which, in two exchanges."""
    xp = np
    if device == "cuda" and comm.kind == "nccl":
        import cupy as xp
    peers = [p for p in range(size) if p != rank]
    counts = {p: xp.asarray([_needed(split, p)[1] - _needed(split, p)[0]], dtype=np.int64)
              for p in peers}
    incoming = {p: xp.empty(1, dtype=np.int64) for p in peers}
    comm.start_exchange(lambda: counts, incoming)()
    wanted = {p: xp.asarray(split.ghost_columns[slice(*_needed(split, p))] - col_bounds[p])
              for p in peers if _needed(split, p)[1] > _needed(split, p)[0]}
    sizes = {p: int(incoming[p][0]) for p in peers}
    asked = {p: xp.empty(sizes[p], dtype=np.int64) for p in peers if sizes[p]}
    comm.start_exchange(lambda: wanted, asked)()
    if device == "cuda":
        import cupy

        return {p: cupy.asarray(indices) for p, indices in asked.items()}
    return {p: np.asarray(indices) for p, indices in asked.items()}


def _needed(split, peer) -> tuple:
    return split.sources.get(peer, (0, 0))
