"""A row-partitioned operator, vectors and solvers on a Dask cluster, one rank per worker.

Usage::

    from distributed import Client, LocalCluster        # GPUs: dask_cuda.LocalCUDACluster()
    client = Client(LocalCluster(n_workers=2, threads_per_worker=1))
    op = autospmv.distributed.prepare(A, client=client)
    x = op.vector(x_numpy)                  # scattered once; chunks stay on the workers
    y = op @ x                              # a DistributedVector, computed on the workers
    x, info = autospmv.distributed.cg(op, b)

How it works
------------
Rank r (on the r-th worker) owns a contiguous block of A's rows, the same entries of y and,
for a square A, the same entries of x (:mod:`._partition`). Its row block splits into an
*owned block* (the columns it owns) and a *ghost block* (the others, only the rows that have
any), each prepared by :func:`autospmv.prepare` on the worker with its own kernel decision
(:meth:`DistributedOperator.explain` shows both). Per product, only the ghost entries of x move,
rank to rank: NCCL through CuPy between GPUs, sockets between CPU workers (:mod:`._comm`), while
the owned block's product runs (:mod:`._rank`).

Vectors (:class:`DistributedVector`) are chunks on the workers, cut like the rows: scattered
once, used by products, arithmetic and dots where they are, and gathered only by ``gather()``
(or a dask array from ``to_dask()``). NumPy, CuPy and dask arrays are accepted everywhere and
come back in their own kind. The solvers (:func:`cg`, :func:`bicgstab`) run their whole
iteration on the ranks, dots as all-reduces (:mod:`._solvers`); :meth:`map_ranks
<DistributedOperator.map_ranks>` runs any such function.

:func:`prepare` builds the ranks on the workers from a function of the row range or from
per-part files, so a large matrix never passes through the client; a whole matrix is accepted
too, cut on the client.

Requirements: one rank per worker, each worker with one task thread (``threads_per_worker=1``;
what ``LocalCUDACluster`` does), since a product runs on all ranks at once. Without ``client=``
the default client is used; without any client, :func:`prepare` raises a ValueError saying how
to start one: it never starts a cluster itself. There is no transpose product.
"""

from ._operator import DistributedOperator, Part, prepare
from ._partition import even_bounds, row_partition
from ._solvers import bicgstab, cg, gmres, minres
from ._vector import DistributedVector, Layout

__all__ = ["DistributedOperator", "DistributedVector", "Layout", "Part", "bicgstab", "cg",
           "even_bounds", "gmres", "minres", "prepare", "row_partition"]
