"""Measuring instead of predicting: ``prepare(A, tune="measure")`` and the workload hint
``prepare(A, products=...)``.

:func:`measure` builds the decision's best-ranked kernels that A's formats accept, times them on
A back-to-back with the labeller's timer (:class:`autospmv._support.timing.Bench`) and keeps the
fastest; :func:`measuring_pays` weighs, for a workload of a given number of products, the
expected saving of measuring against its cost, from the decision's time estimates.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .. import _registry as registry
from .._decide.selection import Decision
from ..formats.base import FormatTooLargeError
from .device_input import Input
from .operator import SpMVOperator

TUNE_CANDIDATES = 3
"""How many of the tree's best-ranked kernels ``tune="measure"`` times at most."""
TUNE_MARGIN = 3.0
"""A candidate the tree ranks this far behind its first choice (in the model's units: log2 of
the estimated slow-down for a correction tree) is not built or timed. Calibrated on the shipped
GPU models' own labels, where the fastest kernel of a labelled matrix is ranked at most 2.6
behind the first choice (the H100's float64 model; at most 0.6 on the H200's): no labelled
fastest kernel lies this far behind (``tests/test_tune.py`` checks it on every shipped model
and label file)."""
TUNE_PRODUCTS = 70
"""About how many products :data:`TUNE_TIMING` runs per candidate (a warm-up, then the
back-to-back batches and per-call repeats of its rounds): the timing part of the cost of
measuring that :func:`measuring_pays` weighs."""
MEASURE_GAIN = 0.01
"""The share of product time measuring is expected to save over the tree's prediction, for
:func:`measuring_pays`: about what the measured kernel gained over the predicted one on the
held-out matrices grown to 2·10⁷ nonzeros (0.6–1.2 % in geometric mean, by device and dtype,
in the ``tune="measure"`` benchmark, ``benchmarks/tune_measure.py``)."""
TUNE_TIMING = dict(warmup=1, repeats=3, min_repeats=3, max_seconds=0.02, b2b_calls=10,
                   b2b_repeats=3, vectors=2, rounds=2, retries=1)
"""The timer's options for ``tune="measure"`` (:class:`autospmv._support.timing.TimingOptions`): a
few batches of back-to-back products per candidate, interleaved, enough to order kernels that
differ by more than a few per cent."""


def measure_candidates(decision: Decision) -> list[str]:
    """The kernels ``tune="measure"`` would time for ``decision`` when every format accepts A:
    the tree's first choice and its next-ranked kernels less than :data:`TUNE_MARGIN` behind,
    :data:`TUNE_CANDIDATES` at most."""
    ranking = [decision.kernel] + [k for k in decision.candidates if k != decision.kernel]
    near = [k for k in ranking[1:] if decision.margins.get(k, np.inf) < TUNE_MARGIN]
    return [decision.kernel] + near[:TUNE_CANDIDATES - 1]


def measuring_pays(decision: Decision, products: int, conversion_s: float) -> tuple[bool, str]:
    """Whether measuring the candidates pays for ``products`` products, and the note that says
    why: it pays when ``products × t̂ × MEASURE_GAIN`` (the expected saving; t̂ the chosen
    kernel's estimated µs per product) exceeds ``(c − 1) × conversion_s + c × TUNE_PRODUCTS ×
    t̂`` (the expected cost: the other candidates' conversions, each costed as the chosen
    kernel's ``conversion_s``, and the timed products), c the number of
    :func:`measure_candidates`. A decision without a time estimate (the built-in rule, a model
    without a cost model) or with a single candidate never measures."""
    head = f"workload hint: {products:,} products"
    estimate = decision.estimates_us.get(decision.kernel)
    if estimate is None:
        return False, head + "; the decision has no time estimate, so nothing is measured"
    candidates = measure_candidates(decision)
    if len(candidates) < 2:
        return False, (head + f"; no other kernel is ranked within {TUNE_MARGIN:g} of "
                       f"{decision.kernel}, so nothing is measured")
    product_s = estimate * 1e-6
    saving = products * product_s * MEASURE_GAIN
    cost = ((len(candidates) - 1) * conversion_s
            + len(candidates) * TUNE_PRODUCTS * product_s)
    pays = saving > cost
    return pays, (
        f"{head} × {estimate:.3g} µs estimated × {MEASURE_GAIN:.0%} expected gain = "
        f"{saving * 1e3:.3g} ms {'>' if pays else '≤'} {cost * 1e3:.3g} ms to measure "
        f"{', '.join(candidates)} ({len(candidates) - 1} more conversions of "
        f"{conversion_s * 1e3:.3g} ms, {TUNE_PRODUCTS} timed products each): "
        + ("measured" if pays else "kept the prediction"))


def tune(given: Input, decision: Decision, threads=None, *, built: SpMVOperator | None = None,
         products: int | None = None, conversion_s: float = 0.0,
         against: SpMVOperator | None = None, gathers: bool = True) -> SpMVOperator:
    """The operator that :func:`prepare` returns after deciding, where measuring is asked for:
    with ``tune="measure"`` (``built`` None) the fastest of the decision's candidates
    (:func:`measure`); with ``against``, an operator of A in its own order, the faster of it
    and ``built``, stored in another order (:func:`faster_order`, ``gathers`` as its); with
    the workload hint, ``built`` (the decision's operator, converted in ``conversion_s``)
    unless measuring pays for ``products`` products (:func:`measuring_pays`), with the note
    that says why. Measuring needs a host matrix and a real GPU: where it would pay without
    them, the note says so and ``built`` is returned."""
    if built is None:
        return measure(given, decision, threads)
    if against is not None:
        return faster_order(built, against, gathers)
    pays, note = measuring_pays(built.decision, products, conversion_s)
    if pays and given.source is not None:
        pays, note = False, note.replace(": measured", ": not measured, as the matrix lives on "
                                         "the GPU (measuring needs a host matrix)")
    elif pays and _simulated(given.device):
        pays, note = False, note.replace(": measured", ": not measured under numba-cuda's "
                                         "simulator")
    built.decision.notes.append(note)
    if not pays:
        return built
    return measure(given, built.decision, threads, built=built)


def faster_order(in_order: SpMVOperator, kept: SpMVOperator, gathers: bool = True
                 ) -> SpMVOperator:
    """Of two operators of one matrix, one stored in another order (its products gather x and
    y around the kernel) and one in A's own, the faster back to back, timed as
    ``tune="measure"`` times its candidates; a note in its decision gives both times.
    ``gathers=False`` (products inside the solvers, which iterate in the stored order) times
    ``in_order``'s product in its stored order, without the gathers."""
    from .._support.timing import Bench, TimingOptions

    x = np.full(kept.shape[1], 0.5, dtype=kept.dtype)
    started = time.perf_counter()
    name = in_order.order
    bench = Bench(kept.device, x, kept.shape[0], TimingOptions(**TUNE_TIMING))
    ops = {name: in_order if gathers else in_order.in_own_order(), "keep": kept}
    times, rounds = {}, 0
    while rounds < ORDER_TIMINGS and (rounds == 0 or _unsettled(times, name)):
        timings = bench.time_all(ops)
        for key, timing in timings.items():
            if isinstance(timing, dict):
                times[key] = min(times.get(key, np.inf), timing["b2b"]["median"])
        rounds += 1
    best = min(times, key=times.get) if name in times else "keep"
    op = in_order if best == name else kept
    measured = ", ".join(f"{k} {t:.3g} µs" for k, t in times.items())
    how = "" if gathers else f"; {name} without the gathers, as inside the solvers"
    again = f", the least of {rounds} timings each" if rounds > 1 else ""
    op.decision.notes.append(
        f"order: timed back to back in both orders ({measured}{how}{again}, in "
        f"{(time.perf_counter() - started) * 1e3:.0f} ms); kept the {best} order")
    return op


ORDER_TIMINGS = 2
"""Most timings of the two orders by :func:`faster_order`: where the first leaves them within
:data:`ORDER_CLOSE` of each other, or has A's own order faster against the cost rule's choice,
they are timed again (up to this many times in all) and each keeps its least, so that one
disturbed batch on a shared machine, which can add a fifth to a product's time or more, does
not decide alone against the rule."""

ORDER_CLOSE = 0.10
"""How close (relative to the faster) two orders' times are for :func:`faster_order` to time
them again."""


def _unsettled(times: dict, name: str) -> bool:
    """Whether both orders were timed and lie within :data:`ORDER_CLOSE` of each other, or A's
    own order (``"keep"``) timed faster than the order ``name`` the cost rule chose."""
    if len(times) < 2:
        return False
    low, high = sorted(times.values())
    return high <= (1 + ORDER_CLOSE) * low or times["keep"] < times[name]


def _simulated(device: str) -> bool:
    from .._support import devices

    return device == "cuda" and devices.cuda_simulator()


def measure(given: Input, decision: Decision, threads=None,
            built: SpMVOperator | None = None) -> SpMVOperator:
    """``prepare(..., tune="measure")``: build the top candidates (on the GPU from the CSR
    uploaded once, when CuPy is there), time them back-to-back, keep the fastest. Candidates the
    tree ranks :data:`TUNE_MARGIN` or more behind its first choice are skipped. ``built``: the
    operator of the decision's own kernel, already converted."""
    from .._support import devices

    csr, device, borrowed, uploaded = given.csr, given.device, given.borrowed, given.uploaded
    from .._support.timing import Bench, TimingOptions, release_device_memory

    if device == "cuda" and devices.cuda_simulator():
        raise RuntimeError("tune='measure' under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1) "
                           "would time a Python interpreter, not a GPU; use tune=None")
    started = time.perf_counter()
    ranking = [decision.kernel] + list(decision.candidates)
    ranking += [k for k in registry.names() if k not in ranking]
    ops, refused = ({} if built is None else {decision.kernel: built}), []
    far = {k for k, m in decision.margins.items() if m >= TUNE_MARGIN}
    for k in ranking:
        if len(ops) == TUNE_CANDIDATES:
            break
        if k in ops or (k in far and k != decision.kernel):
            continue
        params = decision.params if k == decision.kernel else registry.choose_params(k, csr,
                                                                                      device)
        candidate = dataclasses.replace(
            decision, kernel=k, params=params, notes=list(decision.notes),
            candidates=[c for c in ranking if c != k])
        try:
            ops[k] = SpMVOperator._canonical(csr, candidate, device, threads,
                                             borrowed=borrowed, uploaded=uploaded)
        except (FormatTooLargeError, MemoryError):
            refused.append(k)
    x = np.full(csr.shape[1], 0.5, dtype=csr.dtype)  # x's values do not change a kernel's time
    options = TimingOptions(**TUNE_TIMING)
    timings = Bench(device, x, csr.shape[0], options).time_all(ops)
    times = {k: t for k, t in timings.items() if isinstance(t, dict)}
    if not times:
        raise RuntimeError(f"tune='measure': no candidate could be timed ({timings})")
    best = min(times, key=lambda k: times[k]["b2b"]["median"])
    op = ops[best]
    del ops  # the other candidates' buffers go now, not at the next collection
    release_device_memory(device)
    seconds = time.perf_counter() - started
    best_us = times[best]["b2b"]["median"]
    op.decision.tuning = {
        "predicted": decision.kernel, "kept": best, "timing": "b2b",
        "times_us": {k: {"b2b": t["b2b"]["median"], "per_call": t["per_call"]["median"]}
                     for k, t in times.items()},
        "refused": refused, "skipped": sorted(far - {decision.kernel}),
        "seconds": seconds, "products": seconds * 1e6 / best_us,
    }
    measured = ", ".join(f"{k} {t['b2b']['median']:.3g}" for k, t in
                         sorted(times.items(), key=lambda kt: kt[1]["b2b"]["median"]))
    op.decision.notes.append(
        f"tune='measure': back-to-back µs per product: {measured}; kept {best} (predicted "
        f"{decision.kernel}); tuning took {seconds * 1e3:.1f} ms, the time of "
        f"{seconds * 1e6 / best_us:.0f} products")
    return op
