"""One task per rank, sent to the scheduler in one message.

A Dask client sends its messages to the scheduler in batches, at most one batch every 10 ms,
so tasks submitted one at a time reach the scheduler up to 10 ms apart, and a collective task
(a product, a solve) starts only when the last rank's task arrives. :func:`on_workers` submits
all the ranks' tasks as one graph (``Client.map`` with one key per rank, each key pinned to its
worker through a ``workers`` annotation), so they arrive and start together.

A rank's tasks run on its worker only, so a worker that left the cluster (died, restarted,
retired) takes its part of the operator with it: :func:`naming_lost_workers` turns what Dask
raises then into an error that names the rank and the worker, and :func:`connected` refuses a
closed client before Dask's calls fail on it.
"""

from __future__ import annotations

import contextlib
import functools
import uuid


def on_workers(client, fn, workers, *columns, **kwargs) -> list:
    """``[client.submit(fn, *(column[k] for column in columns), **kwargs, workers=[workers[k]])
    for k in range(len(workers))]`` as one graph: one future per worker, each task run on its
    worker only. Futures among the arguments are resolved where the task runs."""
    import dask

    workers = list(workers)
    if not columns:
        raise ValueError("on_workers needs at least one column of arguments")
    for column in columns:
        if len(column) != len(workers):
            raise ValueError(f"on_workers needs one argument per worker ({len(workers)}); got "
                             f"{len(column)}")
    if not workers:
        return []
    # Keyword arguments go in a partial: Client.map would give a large one a key of its own,
    # named after the keyword alone.
    task = functools.partial(fn, **kwargs) if kwargs else fn
    name = getattr(fn, "__name__", "task").strip("_").replace("_", "-")
    token = uuid.uuid4().hex
    keys = [f"autospmv-{name}-{token}-{k}" for k in range(len(workers))]
    where = {key: [worker] for key, worker in zip(keys, workers)}
    with dask.annotate(workers=where.__getitem__):
        return client.map(task, *columns, key=keys, pure=False)


def check_workers(client, workers) -> None:
    """A RuntimeError naming the ranks whose workers (``workers``, in rank order) have left
    the cluster (died, were restarted or retired): their blocks and chunks are gone with
    them, and a task pinned to such a worker would wait for it."""
    alive = set(client.scheduler_info()["workers"])
    gone = [f"rank {r} (worker {w})" for r, w in enumerate(workers) if w not in alive]
    if gone:
        raise RuntimeError(f"{', '.join(gone)} left the cluster (the worker died, was "
                           "restarted or retired), and its part of the operator and of its "
                           "vectors with it; prepare the operator again on the workers that "
                           "remain")


@contextlib.contextmanager
def naming_lost_workers(client, workers):
    """Run the block; when it fails, and a rank's worker has left the cluster, raise
    :func:`check_workers`'s RuntimeError, which says which, instead of what Dask raises then
    (a KeyError naming an address, a cancelled future)."""
    try:
        yield
    except Exception as error:
        try:
            check_workers(client, workers)
        except RuntimeError as lost:
            raise lost from error
        except Exception:  # noqa: BLE001 - the cluster cannot say; the error stands
            pass
        raise


def connected(client):
    """``client``, or a ValueError saying that it is closed or has lost its scheduler (the
    cluster was closed): Dask's own calls would fail with an AttributeError, or wait to
    reconnect."""
    status = getattr(client, "status", "running")
    if status in ("closing", "closed"):
        raise ValueError(f"the Dask client is closed (status {status!r}): it was closed, or "
                         "its cluster was; connect a new client to a running cluster and "
                         "prepare the operator again")
    if status != "running":
        raise ValueError(f"the Dask client is not connected to its scheduler (status "
                         f"{status!r}): the cluster was closed or cannot be reached; start it "
                         "again and prepare the operator again")
    return client
