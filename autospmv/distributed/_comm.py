"""Communicators between the ranks (one rank per Dask worker): ghost exchange and all-reduce.

Dask starts the workers and places the data; the ranks then talk to each other directly, as
raft-dask's comms do for cuML and cuGraph. Three communicators share one interface:

* :class:`NcclComm` (GPU workers, CuPy arrays): NCCL through ``cupy.cuda.nccl``. Rank 0 makes
  the unique id, the client hands it to every rank, and each rank joins the communicator in a
  task that runs on all workers at once. Sends and receives are queued on a stream of their
  own, so the exchange overlaps the owned block's product on the compute stream; the vectors
  move GPU to GPU (NVLink or PCIe, as NCCL finds them) and never touch host memory.
* :class:`SocketComm` (CPU workers, or GPU workers without NCCL): one authenticated socket per
  pair of ranks (``multiprocessing.connection``), set up through Dask the same way. GPU arrays
  are staged through host memory. A sender thread per exchange lets every rank send and receive
  at once, so no pair waits on the other; on the CPU the exchange runs while the owned block's
  product does.
* :class:`SelfComm`: one rank, nothing to exchange (also the one-device baseline).

All-reduce results are identical on every rank: NCCL reduces in one order for all ranks, and
the socket communicator sums the ranks' contributions in rank order on each rank.

Communicators live in a per-process registry (:data:`_COMMS`) keyed by ``(comm id, rank)``,
so that a rank's state can be pickled (Dask may spill it) without its connections.
"""

from __future__ import annotations

import os
import secrets
import threading
from multiprocessing.connection import Client as _Connect
from multiprocessing.connection import Listener

import numpy as np

_COMMS: dict = {}
_PENDING: dict = {}

EXCHANGE_PRIORITY = -5
"""The exchange stream's priority: the highest of current NVIDIA GPUs (lower numbers are higher;
CUDA clamps a number outside the device's range to the range)."""

COMM_ENV = "AUTOSPMV_DISTRIBUTED_COMM"
"""Environment variable naming the communicator of GPU workers: ``nccl`` (default where
``cupy.cuda.nccl`` works) or ``socket``."""


def get(comm_id: str, rank: int):
    try:
        return _COMMS[comm_id, rank]
    except KeyError:
        raise RuntimeError("this worker holds no communicator for the operator (the worker was "
                           "restarted, or the operator was closed); prepare it again") from None


def release(comm_id: str, rank: int) -> None:
    comm = _COMMS.pop((comm_id, rank), None)
    if comm is not None:
        comm.close()


class SelfComm:
    """One rank: exchanges nothing, all-reduces to itself."""

    kind = "self"
    size = 1
    rank = 0

    def start_exchange(self, sends, receives, ready=None):
        return lambda: None

    def allreduce(self, values, xp, out=None):
        if out is None:
            return values
        out[...] = values
        return out

    def close(self):
        pass


class SocketComm:
    """Pairwise sockets between ranks; see the module docs."""

    kind = "socket"

    def __init__(self, rank: int, size: int, connections: dict):
        self.rank, self.size = rank, size
        self._connections = connections  # peer -> Connection

    def start_exchange(self, sends, receives: dict, ready=None):
        """Send ``sends()[peer]`` to each peer and fill ``receives[peer]`` (an array of the
        size the peer sends) from each; returns ``wait()``, which returns once all is
        received. (``ready`` is for the NCCL communicator's interface.)"""
        sends = {peer: _to_host(array) for peer, array in sends().items()}
        errors = []

        def send_all():
            peer = None
            try:
                for peer in sorted(sends):
                    self._connections[peer].send_bytes(memoryview(sends[peer]).cast("B"))
            except (EOFError, OSError) as error:  # re-raised by wait()
                errors.append(self._lost(peer, error))
            except BaseException as error:  # re-raised by wait()
                errors.append(error)

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()

        def wait():
            for peer in sorted(receives):
                target = receives[peer]
                try:
                    received = self._connections[peer].recv_bytes()
                except (EOFError, OSError) as error:
                    raise self._lost(peer, error) from None
                data = np.frombuffer(received, dtype=target.dtype)
                if data.size != target.size:
                    raise RuntimeError(f"rank {self.rank} expected {target.size} entries from "
                                       f"rank {peer}, received {data.size}")
                target[...] = data if isinstance(target, np.ndarray) else _like(target, data)
            sender.join()
            if errors:
                raise errors[0]

        return wait

    def _lost(self, peer: int, error: BaseException) -> RuntimeError:
        """The error of a connection to ``peer`` that broke: its worker died or left."""
        return RuntimeError(f"rank {self.rank} lost its connection to rank {peer} "
                            f"({type(error).__name__}: {error or 'closed'}): rank {peer}'s worker "
                            "died, was restarted or closed the connection; prepare the operator "
                            "again on the workers that remain")

    def allreduce(self, values, xp, out=None):
        """The sum over ranks of ``values`` (a 1-D array), in rank order on every rank; into
        ``out`` when given."""
        host = np.ascontiguousarray(_to_host(values))
        peers = [p for p in range(self.size) if p != self.rank]
        received = {p: np.empty_like(host) for p in peers}
        self.start_exchange(lambda: {p: host for p in peers}, received)()
        received[self.rank] = host
        total = received[0].copy()
        for p in range(1, self.size):
            total += received[p]
        total = xp.asarray(total) if xp is not np else total
        if out is None:
            return total
        out[...] = total
        return out

    def close(self):
        for connection in self._connections.values():
            connection.close()
        self._connections = {}


class NcclComm:
    """NCCL through CuPy; see the module docs."""

    kind = "nccl"

    def __init__(self, rank: int, size: int, unique_id):
        import cupy
        from cupy.cuda import nccl

        self.rank, self.size = rank, size
        self._nccl = nccl
        self._comm = nccl.NcclCommunicator(size, unique_id, rank)
        self.stream = cupy.cuda.Stream(non_blocking=True, priority=EXCHANGE_PRIORITY)
        """The stream the exchange runs on (the compute stream is the caller's current one);
        of the highest priority, so that the GPU starts the exchange's blocks as soon as the
        owned product's leave room, rather than after all of them."""

    def _type(self, dtype):
        nccl = self._nccl
        return {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64,
                np.dtype(np.int64): nccl.NCCL_INT64}[np.dtype(dtype)]

    def start_exchange(self, sends, receives: dict, ready=None):
        """Queue the sends of ``sends()[peer]`` and the receives into ``receives[peer]``
        (contiguous CuPy arrays) on :attr:`stream`, after the event ``ready`` (default: the
        current stream's work so far, which produced x); ``sends()`` runs on that stream too.
        Returns ``wait()``, which makes the current stream wait for the exchange."""
        import cupy

        self.stream.wait_event(cupy.cuda.get_current_stream().record() if ready is None else ready)
        with self.stream:
            sends = sends()
        nccl = self._nccl
        nccl.groupStart()
        try:
            for peer in sorted(set(sends) | set(receives)):
                buffer = sends.get(peer)
                if buffer is not None and buffer.size:
                    self._comm.send(buffer.data.ptr, buffer.size, self._type(buffer.dtype), peer,
                                    self.stream.ptr)
                buffer = receives.get(peer)
                if buffer is not None and buffer.size:
                    self._comm.recv(buffer.data.ptr, buffer.size, self._type(buffer.dtype), peer,
                                    self.stream.ptr)
        finally:
            nccl.groupEnd()
        done = self.stream.record()

        def wait(_keep=sends):  # the send buffers must outlive the queued sends
            cupy.cuda.get_current_stream().wait_event(done)

        return wait

    def allreduce(self, values, xp, out=None):
        """The sum over ranks of ``values`` (a 1-D CuPy array), on the current stream; into
        ``out`` (contiguous, of values' size and dtype) when given."""
        import cupy

        values = cupy.ascontiguousarray(values)
        total = cupy.empty_like(values) if out is None else out
        if total.size != values.size or total.dtype != values.dtype \
                or not total.flags.c_contiguous:
            raise ValueError("the all-reduce's out must be contiguous, of the values' size and "
                             "dtype")
        self._comm.allReduce(values.data.ptr, total.data.ptr, values.size,
                             self._type(values.dtype), self._nccl.NCCL_SUM,
                             cupy.cuda.get_current_stream().ptr)
        return total

    def close(self):
        if self._comm is not None:
            self._comm.destroy()
            self._comm = None


def _like(target, data):
    """``data`` (a host array) as an array of ``target``'s kind (CuPy)."""
    import cupy

    return cupy.asarray(data)


def _to_host(array):
    if isinstance(array, np.ndarray):
        return np.ascontiguousarray(array)
    return array.get()  # CuPy


# Set-up, in tasks that run on every rank's worker. Three rounds for sockets (listen, then
# connect and accept), two for NCCL (rank 0 makes the id, then all join), through the client.

def nccl_works() -> str:
    """'' when this worker can use NCCL through CuPy (and is not told otherwise), else why
    not."""
    choice = os.environ.get(COMM_ENV, "nccl")
    if choice == "socket":
        return f"{COMM_ENV}=socket"
    try:
        from cupy.cuda import nccl

        if not nccl.available:
            return "cupy.cuda.nccl is not available (CuPy found no NCCL library)"
        nccl.get_version()
    except Exception as error:  # any import or library failure means: no NCCL
        return f"NCCL through CuPy failed: {type(error).__name__}: {error}"
    return ""


def nccl_unique_id():
    from cupy.cuda import nccl

    return nccl.get_unique_id()


def nccl_join(comm_id: str, rank: int, size: int, unique_id) -> str:
    _COMMS[comm_id, rank] = NcclComm(rank, size, unique_id)
    return "nccl"


def socket_listen(comm_id: str, rank: int, host: str, authkey: bytes):
    listener = Listener((host, 0), authkey=authkey)
    _PENDING[comm_id, rank] = listener
    return listener.address


def socket_join(comm_id: str, rank: int, addresses: list, authkey: bytes) -> str:
    """Connect to every lower rank and accept every higher one; each connection starts with the
    connecting rank's number."""
    listener = _PENDING.pop((comm_id, rank))
    connections = {}
    try:
        for peer in range(rank):
            connection = _Connect(tuple(addresses[peer]), authkey=authkey)
            connection.send(rank)
            connections[peer] = connection
        for _ in range(rank + 1, len(addresses)):
            connection = listener.accept()
            connections[connection.recv()] = connection
    finally:
        listener.close()
    _COMMS[comm_id, rank] = SocketComm(rank, len(addresses), connections)
    return "socket"


def self_join(comm_id: str, rank: int) -> str:
    _COMMS[comm_id, rank] = SelfComm()
    return "self"


def new_comm_id() -> str:
    return secrets.token_hex(8)


def new_authkey() -> bytes:
    return secrets.token_bytes(32)
