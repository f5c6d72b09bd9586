"""Timing SpMV products on one device: the one timer of the labeller, the benchmarks, the
command line and ``prepare(..., tune="measure")``.

Two figures per operator, as the project's measurement method prescribes:

* **per call**: one user-facing ``op.matvec(x, out=y)`` between two clock readings, synchronised
  each time, so host-side work (argument checks, the launch) counts: what a solver loop with host
  logic between products sees. The median of ``repeats`` samples is reported.
* **back-to-back**: ``b2b_calls`` calls between two clock readings, divided by the count. On a
  GPU the host runs ahead of the device, so this approaches the kernel's own time. Repeated
  ``b2b_repeats`` times; the median batch is reported.

On CUDA the clock (:func:`clock`) is a pair of CUDA events (resolution about half a microsecond);
on the CPU it is ``time.perf_counter``. Every timing starts with ``warmup`` calls, which also
estimate the cost of one call: when ``repeats`` calls would take longer than ``max_seconds``,
fewer samples are taken (never fewer than ``min_repeats``), so a hopelessly slow kernel cannot
stall a labelling run; the sample count is recorded next to the figures. Calls rotate over
``vectors`` pairs of x and y so that a small matrix's x is not always read from cache.

The operators of one matrix are timed together (:meth:`Bench.time_all`): after each one's
warm-up, ``rounds`` rounds each take an equal share of every operator's samples in turn, so that
a slow phase of the machine affects all kernels of the matrix alike.

Contention check: a timing whose median is more than ``noise_limit`` (1.5) times its minimum
was disturbed (another process, a clock change) and is taken again, up to ``retries`` times;
the least disturbed attempt is kept and the figures record the ratio, so that the labeller
(:func:`autospmv.training.records.row_noise`) can leave a matrix whose timings stay disturbed out
of training rather than silently use it.

Callables that are not operators (SciPy's or CuPy's ``A @ x``, :func:`autospmv.select`) are
timed per call on the same clocks by :func:`time_calls`, as the command line's ``demo`` and
``bench`` compare them with the operators.

This module imports only NumPy and the standard library when imported (numba-cuda when a CUDA
clock or CUDA vectors are made), so every part of autospmv may use it; the training pipeline
adds what only labelling needs (:mod:`autospmv.training.timing`: the correctness tolerance, the
quick options, the refusal to time numba-cuda's simulator, the device description).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class TimingOptions:
    """How much to sample (the defaults are the labeller's)."""

    warmup: int = 3
    repeats: int = 200
    """Per-call samples. The method asks for at least 50; with 200 the medians of kernels a few
    per cent apart (common on small matrices, where launches dominate) keep their order from
    one labelling run to the next more often."""
    min_repeats: int = 5
    max_seconds: float = 1.0
    """Time allowed for each of the two measurements of one operator (beyond the warm-up)."""
    b2b_calls: int = 50
    b2b_repeats: int = 5
    vectors: int = 4
    noise_limit: float = 1.5
    """Contention check: a timing whose median exceeds this many times its minimum is taken
    again (see :meth:`Bench.time_all`)."""
    retries: int = 2
    """Extra attempts for a timing that stays above ``noise_limit``."""
    rounds: int = 5
    """The operators of one matrix are timed in turn, this many times over, each round taking
    an equal share of every operator's samples: a slow phase of the machine (another process,
    a clock change) then weighs on all kernels of the matrix alike instead of on whichever was
    being timed."""


def summary(samples_us) -> dict:
    """median, min, p90 (µs) and the sample count."""
    samples = np.asarray(samples_us, dtype=np.float64)
    return {
        "median": float(np.median(samples)),
        "min": float(samples.min()),
        "p90": float(np.percentile(samples, 90)),
        "n": int(samples.size),
    }


def relative_error(y, y_ref) -> float:
    """‖y − y_ref‖₂ / ‖y_ref‖₂ in float64 (the absolute error when y_ref is zero)."""
    y = np.asarray(y, dtype=np.float64)
    y_ref = np.asarray(y_ref, dtype=np.float64)
    diff = float(np.linalg.norm(y - y_ref))
    scale = float(np.linalg.norm(y_ref))
    return diff / scale if scale else diff


class CpuClock:
    """Host wall-clock time (``time.perf_counter``)."""

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Microseconds since :meth:`start`."""
        return (time.perf_counter() - self._t0) * 1e6


class CudaClock:
    """Two CUDA events on a stream (``stream``: a CUDA stream handle; the default stream when
    0); :meth:`stop` waits for the work before it."""

    def __init__(self, stream: int = 0):
        from numba import cuda

        self._cuda = cuda
        self._stream = cuda.external_stream(stream) if stream else 0
        self._start, self._end = cuda.event(timing=True), cuda.event(timing=True)

    def start(self) -> None:
        self._start.record(self._stream)

    def stop(self) -> float:
        """Microseconds since :meth:`start`, once the device has finished the work between."""
        self._end.record(self._stream)
        self._end.synchronize()
        return self._cuda.event_elapsed_time(self._start, self._end) * 1e3


def clock(device: str) -> CpuClock | CudaClock:
    """The clock products on ``device`` are timed with: CUDA events on ``"cuda"``, else the
    host's ``time.perf_counter``."""
    return CudaClock() if device == "cuda" else CpuClock()


def time_calls(fn, device: str = "cpu", budget: float = 0.2, min_samples: int = 5) -> dict:
    """:func:`summary` (µs) of single calls of ``fn``, each between two readings of ``device``'s
    :func:`clock` (on CUDA, so synchronised after each call): one untimed warm-up call, then
    samples until there are ``min_samples`` and ``budget`` seconds have passed."""
    fn()
    timer = clock(device)
    samples = []
    deadline = time.perf_counter() + budget
    while len(samples) < min_samples or time.perf_counter() < deadline:
        timer.start()
        fn()
        samples.append(timer.stop())
    return summary(samples)


class Bench:
    """Vectors and clock for timing operators of one matrix on one device.

    ``x`` is the host input vector; on CUDA it and ``vectors - 1`` rotated copies (other
    arrays, so other addresses; a rotation costs one copy, where a random permutation of a
    vector of millions costs more than timing the kernels) are uploaded once and reused by
    every operator of the matrix.
    """

    def __init__(self, device: str, x: np.ndarray, m: int, options: TimingOptions):
        self.device = device
        self.options = options
        xs = [x] + [np.roll(x, shift) for shift in range(1, options.vectors)]
        self.clock = clock(device)
        if device == "cuda":
            from numba import cuda

            self.xs = [cuda.to_device(v) for v in xs]
            self.ys = [cuda.device_array(m, dtype=x.dtype) for _ in xs]
        else:
            self.xs = xs
            self.ys = [np.empty(m, dtype=x.dtype) for _ in xs]

    def result(self, op) -> np.ndarray:
        """``op @ xs[0]`` as a host array (for the correctness check; also compiles)."""
        y = op.matvec(self.xs[0], out=self.ys[0])
        return y.copy_to_host() if self.device == "cuda" else y.copy()

    def _run(self, op, calls: int, offset: int = 0) -> float:
        """Microseconds for ``calls`` back-to-back calls."""
        xs, ys, k = self.xs, self.ys, len(self.xs)
        matvec = op.matvec
        self.clock.start()
        for i in range(offset, offset + calls):
            matvec(xs[i % k], out=ys[i % k])
        return self.clock.stop()

    def time_all(self, ops: dict) -> dict:
        """Time every operator of ``ops`` (``{key: op}``), interleaved in ``options.rounds``
        rounds. Returns ``{key: timing}`` with ``timing = {"per_call": summary, "b2b":
        summary, "b2b_calls": n, "retimed": k}`` in microseconds (see the module doc), or the
        exception the operator raised (it then takes no further part).

        Contention check: an operator whose per-call or back-to-back median exceeds
        ``options.noise_limit`` times its minimum is timed again from scratch, up to
        ``options.retries`` times (the noisy ones interleaved among themselves); the attempt
        with the smallest such ratio is kept and ``retimed`` counts the extra attempts."""
        opt = self.options
        budget = opt.max_seconds * 1e6
        rounds = max(1, opt.rounds)
        plans, out = {}, {}
        for key, op in ops.items():
            try:
                estimate = max(self._run(op, max(1, opt.warmup)) / max(1, opt.warmup), 1e-3)
            except Exception as err:
                out[key] = err
                continue
            repeats = int(np.clip(budget // estimate, opt.min_repeats, opt.repeats))
            batches = max(rounds, opt.b2b_repeats)
            calls = int(np.clip(budget // (batches * estimate), 1, opt.b2b_calls))
            plans[key] = (_shares(repeats, rounds), _shares(batches, rounds), calls)
        best = self._sample(ops, plans, out)
        for attempt in range(1, opt.retries + 1):
            noisy = {key: plans[key] for key, timing in best.items()
                     if noise_ratio(timing) > opt.noise_limit}
            if not noisy:
                break
            for key, timing in self._sample(ops, noisy, out).items():
                if key in best and noise_ratio(timing) < noise_ratio(best[key]):
                    best[key] = timing
                if key in best:
                    best[key]["retimed"] = attempt
        out.update({key: timing for key, timing in best.items() if key not in out})
        return out

    def _sample(self, ops: dict, plans: dict, failures: dict) -> dict:
        """One timing of every planned operator, in interleaved rounds: ``{key: timing}``;
        an operator that raises goes to ``failures`` instead."""
        samples = {key: ([], []) for key in plans}
        plans = dict(plans)
        for r in range(max(1, self.options.rounds)):
            for key, (per_call_shares, batch_shares, calls) in list(plans.items()):
                per_call, b2b = samples[key]
                try:
                    per_call += [self._run(ops[key], 1, len(per_call) + i)
                                 for i in range(per_call_shares[r])]
                    b2b += [self._run(ops[key], calls, len(b2b) + i) / calls
                            for i in range(batch_shares[r])]
                except Exception as err:
                    failures[key] = err
                    del plans[key]
        return {key: {"per_call": summary(samples[key][0]), "b2b": summary(samples[key][1]),
                      "b2b_calls": calls, "retimed": 0}
                for key, (_, _, calls) in plans.items()}


def noise_ratio(timing: dict, modes=("per_call", "b2b")) -> float:
    """The largest median / min of ``timing``'s summaries in ``modes`` (1 is noise-free)."""
    return max(timing[mode]["median"] / timing[mode]["min"] if timing[mode]["min"] > 0
               else math.inf for mode in modes)


def _shares(total: int, rounds: int) -> list[int]:
    """``total`` split into ``rounds`` nearly equal parts, larger ones first."""
    return [total // rounds + (r < total % rounds) for r in range(rounds)]


def release_device_memory(device: str) -> None:
    """Free device buffers of dropped operators now rather than at numba's next threshold."""
    if device == "cuda":
        from numba import cuda

        cuda.current_context().deallocations.clear()
