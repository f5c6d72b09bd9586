"""What the simulator workers share: each case's check run once, its outcome kept for the test
that asserts it, and its time reported on stderr."""

from __future__ import annotations

import sys
import time


def run_case(out: dict, name: str, check) -> None:
    """``out[name] = {"diff": check()}`` (None: as expected; else what differs), or the
    exception ``check`` raised, as its ``diff``."""
    started = time.perf_counter()
    try:
        out[name] = {"diff": check()}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out[name] = {"diff": f"{type(exc).__name__}: {exc}"}
    print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
