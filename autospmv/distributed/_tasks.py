"""One task per rank, sent to the scheduler in one message.

A Dask client sends its messages to the scheduler in batches, at most one batch every 10 ms,
so tasks submitted one at a time reach the scheduler up to 10 ms apart, and a collective task
(a product, a solve) starts only when the last rank's task arrives. :func:`on_workers` submits
all the ranks' tasks as one graph (``Client.map`` with one key per rank, each key pinned to its
worker through a ``workers`` annotation), so they arrive and start together.
"""

from __future__ import annotations

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
