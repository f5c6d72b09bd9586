"""Distributed vectors: one chunk per rank, kept on the rank's worker (CuPy on a GPU, NumPy on
the CPU), cut like the operator's rows (or columns).

A :class:`DistributedVector` is a handle on the client: its layout (workers, bounds, device)
and one Dask future per chunk. Arithmetic (``+``, ``-``, scalar ``*``, :meth:`axpy`) runs one
task per chunk where the chunk lives and gives a new vector; :meth:`dot` and :meth:`norm` sum
the ranks' partial dots on the client, in rank order. Nothing crosses the client until
:meth:`gather` (NumPy) or a ``compute`` of :meth:`to_dask`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._support.validation import result_dtype
from ._tasks import connected, naming_lost_workers, on_workers


@dataclasses.dataclass(frozen=True, eq=False)
class Layout:
    """How a vector is cut: chunk r is entries ``bounds[r]:bounds[r + 1]`` on ``workers[r]``,
    as an array of ``device`` ("cuda": CuPy, "cpu": NumPy)."""

    workers: tuple
    bounds: np.ndarray
    device: str

    @property
    def size(self) -> int:
        return int(self.bounds[-1])

    @property
    def sizes(self) -> tuple:
        return tuple(int(s) for s in np.diff(self.bounds))

    def __eq__(self, other):
        return (isinstance(other, Layout) and self.workers == other.workers
                and np.array_equal(self.bounds, other.bounds) and self.device == other.device)

    def __hash__(self):
        return hash((self.workers, tuple(self.bounds.tolist()), self.device))


# Functions that run on the workers.

def _on_device(chunk, *, device, dtype):
    if device == "cuda":
        import cupy

        return cupy.asarray(chunk, dtype=dtype)
    return np.asarray(chunk, dtype=dtype)


def _to_host(chunk):
    return chunk if isinstance(chunk, np.ndarray) else chunk.get()


def _full(size, *, value, device, dtype):
    xp = _array_module(device)
    return xp.full(size, value, dtype=dtype)


def _array_module(device):
    if device == "cuda":
        import cupy

        return cupy
    return np


def _dot(a, b):
    return float(a.dot(b)) if a.size else 0.0


def _axpy(x, y, *, alpha):
    return y + alpha * x


def _scale(chunk, *, alpha):
    return alpha * chunk


def _copy(chunk):
    return chunk.copy()


def _astype(chunk, *, to):
    return chunk.astype(to)


class DistributedVector:
    """A vector whose chunks live on the ranks' workers (CuPy on a GPU, NumPy on the CPU).

    Made by :meth:`DistributedOperator.vector`, :meth:`DistributedOperator.zeros`, products,
    the solvers, :meth:`scatter`, :meth:`from_dask` and :meth:`full`. Arithmetic (``+``,
    ``-``, scalar ``*``, :meth:`axpy`) runs one task per chunk where the chunk lives and gives
    a new vector; :meth:`dot` and :meth:`norm` sum the ranks' partial dots on the client, in
    rank order. Nothing crosses the client until :meth:`gather` (NumPy) or a ``compute`` of
    :meth:`to_dask`.

    Parameters
    ----------
    client : dask.distributed.Client
        The Dask client its chunks belong to.
    layout : Layout
        Chunk r is entries ``bounds[r]:bounds[r + 1]`` on ``workers[r]``.
    chunks : list
        One Dask future per rank, in rank order.
    dtype : numpy.dtype
        The entries' dtype.

    Attributes
    ----------
    shape, size : tuple, int
        ``(size,)`` and the length.

    Raises
    ------
    ValueError
        ``chunks`` does not hold one chunk per worker of ``layout``.

    Examples
    --------
    >>> x = op.vector(np.ones(1000))  # doctest: +SKIP
    >>> y = 2.0 * x - op @ x  # doctest: +SKIP
    >>> y.norm()  # doctest: +SKIP
    63.198101237299845
    """

    ndim = 1

    def __init__(self, client, layout: Layout, chunks: list, dtype):
        if len(chunks) != len(layout.workers):
            raise ValueError("a DistributedVector needs one chunk per worker of its layout")
        self.client = client
        self.layout = layout
        self.chunks = list(chunks)
        self.dtype = np.dtype(dtype)

    @property
    def shape(self) -> tuple:
        return (self.layout.size,)

    @property
    def size(self) -> int:
        return self.layout.size

    def __len__(self):
        return self.layout.size

    def __repr__(self):
        return (f"<DistributedVector size={self.size} {self.dtype} chunks={self.layout.sizes} "
                f"on {self.layout.device}>")

    # Making and reading back.

    @classmethod
    def scatter(cls, x, layout: Layout, client, dtype=None) -> "DistributedVector":
        """Cut a NumPy or CuPy vector (or a dask array) along ``layout`` and send each chunk to
        its worker, once.

        Parameters
        ----------
        x : array of length ``layout.size``
            A NumPy or CuPy vector (a 1×n or n×1 array too), or a dask array
            (:meth:`from_dask`).
        layout : Layout
            How to cut it, usually an operator's ``col_layout`` or ``row_layout``.
        client : distributed.Client
            The client of the layout's workers.
        dtype : dtype, optional
            The vector's dtype (default: x's).

        Returns
        -------
        DistributedVector
            The vector, its chunks on the layout's workers (CuPy on a GPU, NumPy on the CPU).

        Raises
        ------
        ValueError
            x not a vector of length ``layout.size``; a closed client.
        TypeError
            A complex or non-numeric dtype, or one the kernels do not compute in
            (``numpy.longdouble``), refused as a product would refuse it.
        RuntimeError
            A rank's worker has left the cluster (the message names the rank and worker).

        Examples
        --------
        >>> from autospmv.distributed import DistributedVector
        >>> DistributedVector.scatter(np.arange(1000.0), op.col_layout, client,
        ...                           np.float32)  # doctest: +SKIP
        <DistributedVector size=1000 float32 chunks=(500, 500) on cpu>
        """
        if is_dask_array(x):
            return cls.from_dask(x, layout, client, dtype)
        if type(x).__module__.startswith("cupy"):
            import cupy

            x = cupy.asnumpy(x) if layout.device == "cpu" else x
        else:
            x = np.asarray(x)
        if x.ndim == 2 and 1 in x.shape:
            x = x.reshape(-1)
        if x.shape != (layout.size,):
            raise ValueError(f"x must be a vector of length {layout.size}; got shape {x.shape}")
        dtype = np.dtype(x.dtype if dtype is None else dtype)
        result_dtype(np.float32, dtype)  # refused as a product would (longdouble, complex)
        with naming_lost_workers(connected(client), layout.workers):
            pieces = [client.scatter(x[start:stop], workers=[worker], hash=False)
                      for worker, start, stop in zip(layout.workers, layout.bounds[:-1],
                                                     layout.bounds[1:])]
        return cls(client, layout, _on(client, layout, _on_device, pieces, device=layout.device,
                                       dtype=dtype), dtype)

    @classmethod
    def from_dask(cls, x, layout: Layout, client, dtype=None) -> "DistributedVector":
        """A dask array's chunks, rechunked to ``layout`` and computed where they will live.

        Parameters
        ----------
        x : dask.array.Array
            A vector of length ``layout.size``.
        layout : Layout
            How to cut it.
        client : distributed.Client
            The client of the layout's workers.
        dtype : dtype, optional
            The vector's dtype (default: x's).

        Returns
        -------
        DistributedVector
            The vector; the chunks are computed on their workers, not on the client.

        Raises
        ------
        ValueError
            x not a vector of length ``layout.size``.
        TypeError
            A complex or non-numeric dtype, or one the kernels do not compute in
            (``numpy.longdouble``).

        Examples
        --------
        >>> import dask.array as da
        >>> b = da.ones(1000, chunks=250)
        >>> DistributedVector.from_dask(b, op.row_layout, client)  # doctest: +SKIP
        <DistributedVector size=1000 float64 chunks=(500, 500) on cpu>
        """
        if x.ndim != 1 or x.shape[0] != layout.size:
            raise ValueError(f"x must be a vector of length {layout.size}; got a dask array with "
                             f"shape {x.shape}")
        dtype = np.dtype(x.dtype if dtype is None else dtype)
        result_dtype(np.float32, dtype)  # refused as a product would (longdouble, complex)
        pieces = x.rechunk((layout.sizes,)).to_delayed().ravel()
        if len(pieces) != len(layout.workers):  # dask drops no chunks, but say so if it did
            raise RuntimeError("rechunking the dask array did not give one chunk per worker")
        computed = [client.compute(piece, workers=[worker])
                    for worker, piece in zip(layout.workers, pieces)]
        return cls(client, layout, _on(client, layout, _on_device, computed,
                                       device=layout.device, dtype=dtype), dtype)

    @classmethod
    def full(cls, layout: Layout, client, value=0.0, dtype=np.float64) -> "DistributedVector":
        """A vector of one value, made on the workers.

        Parameters
        ----------
        layout : Layout
            How to cut it.
        client : distributed.Client
            The client of the layout's workers.
        value : float, default 0.0
            Every entry's value.
        dtype : dtype, default numpy.float64
            The vector's dtype.

        Returns
        -------
        DistributedVector
            The vector; no data passes through the client.

        Examples
        --------
        >>> DistributedVector.full(op.col_layout, client, 2.0).norm()  # doctest: +SKIP
        63.245553203367585
        """
        chunks = _on(client, layout, _full, layout.sizes, value=value, device=layout.device,
                     dtype=np.dtype(dtype))
        return cls(client, layout, chunks, dtype)

    def gather(self) -> np.ndarray:
        """The whole vector as a NumPy array on the client.

        Returns
        -------
        numpy.ndarray
            The chunks, copied to the host and joined in rank order, in the vector's dtype.

        Raises
        ------
        RuntimeError
            A rank's worker has left the cluster (the message names the rank and worker).

        Examples
        --------
        >>> (op @ op.vector(np.ones(1000))).gather()[:3]  # doctest: +SKIP
        array([1., 0., 0.])
        """
        with naming_lost_workers(self.client, self.layout.workers):
            parts = self.client.gather(_on(self.client, self.layout, _to_host, self.chunks))
        return np.concatenate(parts).astype(self.dtype, copy=False) if parts else \
            np.empty(0, self.dtype)

    def to_dask(self):
        """The vector as a dask array, without moving it.

        Returns
        -------
        dask.array.Array
            A dask array whose chunks are this vector's, already on the workers (CuPy chunks
            on GPU workers), one per rank, empty ones included.

        Examples
        --------
        >>> float(op.vector(np.ones(1000)).to_dask().sum().compute())  # doctest: +SKIP
        1000.0
        """
        import dask.array as da

        meta = _array_module(self.layout.device).empty(0, dtype=self.dtype) \
            if self.layout.device == "cuda" else np.empty(0, dtype=self.dtype)
        blocks = [da.from_delayed(chunk, shape=(size,), dtype=self.dtype, meta=meta)
                  for chunk, size in zip(self.chunks, self.layout.sizes)]
        y = da.concatenate(blocks) if blocks else da.empty(0, dtype=self.dtype)
        # concatenate may drop empty blocks; the chunks are the ranks', empty ones included.
        return y if y.chunks == (self.layout.sizes,) else y.rechunk((self.layout.sizes,))

    # Arithmetic, where the chunks live.

    def _check(self, other) -> "DistributedVector":
        if not isinstance(other, DistributedVector):
            raise TypeError(f"expected a DistributedVector; got {type(other).__name__}")
        if other.layout != self.layout:
            raise ValueError("the two vectors are cut differently (their layouts differ); "
                             "use vectors of the same operator side")
        return other

    def _map(self, fn, *columns, dtype=None, **kwargs) -> "DistributedVector":
        """``fn(*column[k], chunk k, **kwargs)`` where each chunk lives, as a new vector."""
        chunks = _on(self.client, self.layout, fn, *columns, self.chunks, **kwargs)
        return DistributedVector(self.client, self.layout, chunks, dtype or self.dtype)

    def _dtype_with(self, other_dtype):
        return np.result_type(self.dtype, other_dtype)

    def axpy(self, alpha, x: "DistributedVector") -> "DistributedVector":
        """``self + alpha * x``, as a new vector.

        Parameters
        ----------
        alpha : float
            The scale of x.
        x : DistributedVector
            A vector cut like this one.

        Returns
        -------
        DistributedVector
            The sum, computed where the chunks live, in ``numpy.result_type`` of the two
            vectors' dtypes.

        Raises
        ------
        TypeError
            x not a :class:`DistributedVector`.
        ValueError
            x cut differently (the layouts differ).

        Examples
        --------
        >>> x, ones = op.zeros(), op.vector(np.ones(1000))  # doctest: +SKIP
        >>> x.axpy(2.0, ones).gather()[:2]  # doctest: +SKIP
        array([2., 2.])
        """
        x = self._check(x)
        return self._map(_axpy, x.chunks, alpha=float(alpha), dtype=self._dtype_with(x.dtype))

    def __add__(self, other):
        return self.axpy(1.0, other)

    def __sub__(self, other):
        return self.axpy(-1.0, other)

    def __mul__(self, alpha):
        if not np.isscalar(alpha):
            return NotImplemented
        return self._map(_scale, alpha=float(alpha))

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1.0

    def copy(self) -> "DistributedVector":
        """A copy, made where the chunks live.

        Returns
        -------
        DistributedVector
            A new vector with the same layout, dtype and values, its own chunks.

        Examples
        --------
        >>> y = x.copy()  # doctest: +SKIP
        """
        return self._map(_copy)

    def astype(self, dtype) -> "DistributedVector":
        """The vector converted to another dtype, where the chunks live.

        Parameters
        ----------
        dtype : dtype
            The new dtype.

        Returns
        -------
        DistributedVector
            A new vector with the same layout.

        Raises
        ------
        TypeError
            ``dtype`` is not a NumPy dtype.

        Examples
        --------
        >>> op.vector(np.ones(1000)).astype(np.float32)  # doctest: +SKIP
        <DistributedVector size=1000 float32 chunks=(500, 500) on cpu>
        """
        return self._map(_astype, dtype=np.dtype(dtype), to=np.dtype(dtype))

    def dot(self, other: "DistributedVector") -> float:
        """``self · other``: each rank's partial dot, summed on the client in rank order.

        Parameters
        ----------
        other : DistributedVector
            A vector cut like this one.

        Returns
        -------
        float
            The dot product.

        Raises
        ------
        TypeError
            ``other`` not a :class:`DistributedVector`.
        ValueError
            ``other`` cut differently (the layouts differ).
        RuntimeError
            A rank's worker has left the cluster (the message names the rank and worker).

        Examples
        --------
        >>> x = op.vector(np.ones(1000))  # doctest: +SKIP
        >>> x.dot(x)  # doctest: +SKIP
        1000.0
        """
        other = self._check(other)
        with naming_lost_workers(self.client, self.layout.workers):
            partial = self.client.gather(_on(self.client, self.layout, _dot, self.chunks,
                                             other.chunks))
        return float(sum(partial))

    def norm(self) -> float:
        """The Euclidean norm, ``sqrt(self · self)`` (:meth:`dot`).

        Returns
        -------
        float
            The norm.

        Raises
        ------
        RuntimeError
            A rank's worker has left the cluster (the message names the rank and worker).

        Examples
        --------
        >>> op.vector(np.ones(1000)).norm()  # doctest: +SKIP
        31.622776601683793
        """
        return float(np.sqrt(self.dot(self)))


def _on(client, layout, fn, *columns, **kwargs) -> list:
    """One task per chunk of ``layout``, where the chunk lives (see :mod:`._tasks`)."""
    return on_workers(client, fn, layout.workers, *columns, **kwargs)


def is_dask_array(x) -> bool:
    return type(x).__module__.startswith("dask.array") and hasattr(x, "chunks")
