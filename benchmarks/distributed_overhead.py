"""What a call from the client adds to the work of :mod:`autospmv.distributed`: a product
(``op @ x`` of a DistributedVector, waited for) and a one-iteration cg, each against the same
work timed inside a rank's task, on W = 2, 3, ... ranks of one cluster (one worker per GPU).

It uses only the package's public calls (``prepare``, ``vector``, ``map_ranks``, ``cg``) and
no private module, so the same script times an older version of the package (put it first on
``PYTHONPATH``; the workers inherit it) against the current one on the same machine::

    python benchmarks/distributed_overhead.py --out overhead.json
    PYTHONPATH=/path/to/old/tree python benchmarks/distributed_overhead.py --out old.json

Each timed call starts 20 ms after the client's last message (a Dask client sends at most one
batch of messages every 10 ms). Results: milliseconds, medians of ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

QUIET_S = 0.02


def band(start, stop, *, n):
    """Rows start:stop of a symmetric positive definite tridiagonal n×n matrix."""
    rows = np.arange(start, stop)
    columns = np.stack([rows - 1, rows, rows + 1], axis=1)
    values = np.broadcast_to([-1.0, 4.0, -1.0], columns.shape)
    keep = (columns >= 0) & (columns < n)
    indptr = np.concatenate(([0], np.cumsum(keep.sum(axis=1))))
    return sp.csr_matrix((values[keep], columns[keep], indptr), shape=(stop - start, n))


def in_task(rank, chunk, what, repeats):
    """On a rank: median seconds of one product, or of a one-iteration cg step set (a product
    and two all-reduced dots), each waited for."""
    xp = rank.xp
    samples = []
    for _ in range(repeats + 2):
        started = time.perf_counter()
        y = rank.matvec(chunk)
        if what == "cg":
            rank.dot(chunk, chunk)
            rank.dot(y, chunk)
        if xp is not np:
            xp.cuda.get_current_stream().synchronize()
        samples.append(time.perf_counter() - started)
    return float(np.median(samples[2:]))


def from_client(call, repeats):
    samples, kept = [], []
    for _ in range(repeats + 2):
        time.sleep(QUIET_S)
        started = time.perf_counter()
        kept.append(call())
        samples.append(time.perf_counter() - started)
        kept = kept[-2:]
    return float(np.median(samples[2:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per rank")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--cpu", action="store_true", help="CPU workers (a dry run)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import autospmv.distributed as adist
    from distributed import Client, LocalCluster, wait

    counts = [int(w) for w in args.ranks.split(",")]
    result = {"package": adist.__file__, "rows_per_rank": args.rows, "ranks": {}}
    if args.cpu:
        cluster = LocalCluster(n_workers=max(counts), threads_per_worker=1,
                               dashboard_address=":0", silence_logs=40)
    else:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(n_workers=max(counts), threads_per_worker=1, memory_limit=0,
                                   device_memory_limit=0)
    with cluster, Client(cluster) as client:
        for w in counts:
            n = w * args.rows
            op = adist.prepare(lambda a, b, n=n: band(a, b, n=n), client=client, shape=(n, n),
                               parts=w)
            x = op.vector(np.random.default_rng(0).random(n))
            entry = {"comm": op.comm}
            for what in ("product", "cg"):
                entry[f"{what}_in_task_ms"] = 1e3 * max(client.gather(
                    op.map_ranks(in_task, x, what=what, repeats=args.repeats)))

            def product():
                y = op @ x
                wait(y.chunks)
                return y

            entry["product_from_client_ms"] = 1e3 * from_client(product, args.repeats)
            entry["cg_from_client_ms"] = 1e3 * from_client(
                lambda: adist.cg(op, x, rtol=0.0, maxiter=1), args.repeats)
            entry["product_call_ms"] = (entry["product_from_client_ms"]
                                        - entry["product_in_task_ms"])
            entry["cg_call_ms"] = entry["cg_from_client_ms"] - entry["cg_in_task_ms"]
            result["ranks"][str(w)] = entry
            print(w, json.dumps(entry), file=sys.stderr, flush=True)
            op.close()
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
