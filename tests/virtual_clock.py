"""A clock for timing tests: the operators under test say how long each call took.

Timing logic (sampling plans, the contention check and its retries, keeping the fastest
candidate) is tested on what it is told, not on what a shared machine happens to measure: a
test hands :class:`VirtualClock` to the timer in place of the device's clock and its stand-in
operators :meth:`~VirtualClock.advance` it instead of sleeping. The outcome then cannot depend
on the machine's load, and the test takes no time.
"""

from __future__ import annotations


class VirtualClock:
    """The timer's clock interface (``start``, ``stop`` in microseconds) over virtual seconds."""

    def __init__(self):
        self.now = 0.0
        self._started = 0.0

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (what a call being timed took)."""
        self.now += seconds

    def start(self) -> None:
        self._started = self.now

    def stop(self) -> float:
        return (self.now - self._started) * 1e6
