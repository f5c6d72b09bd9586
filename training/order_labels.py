"""Order labels: the product timed in each order on the local device, and the order's cost rule
fitted to them.

Whether renumbering a matrix pays (:mod:`autospmv._decide.ordering`) is decided by a cost rule
over the x locality before and after the order; its constants (:class:`OrderRule`: bandwidth,
latency, on the CPU the price of a sector of x the cache does not hold, and the bandwidth of
the two gathers around a product in the caller's order) are the device's. This module measures
them where the rule runs:

* :func:`label_orders` takes each square matrix of the given folders (at least
  :data:`MIN_NNZ` nonzeros) grown block-diagonally to each size of ``grown_nnz``
  (:func:`training.corpus.grow`), in two numberings: as given, and numbered at random
  (:func:`training.corpus.grow_permuted`), as graph and mesh data often arrive. For each it
  builds the automatic operator in A's own order (``order="keep"``) and in the bfs order
  (``order="bfs"``), checks both against SciPy, and times, interleaved
  (:class:`training.timing.Bench`, with its contention check): the product in A's own order,
  the renumbered product in the caller's order (with its gathers), and the renumbered product
  in its stored order (``op.in_own_order()``, as the solvers run it). The record
  (:data:`SCHEMA`) keeps the times, the kernels, the order's features before and after and what
  computing the order and renumbering A cost, as the bfs operator's decision records them
  (``order_features``, ``order_seconds``).
* :func:`fit_order_rule` fits the rule's constants to those records by relative least squares
  (:func:`fit_rule`), and :func:`agreement` counts how often the fitted rule, and the built-in
  one, predict a gain of at least
  :data:`~autospmv._decide.ordering.MIN_RELATIVE_GAIN` of a product where the labels measured one.
* ``python -m autospmv.training fit-orders`` prints both and, with ``--model``, writes the fitted
  rule into model files (``order_rule``, schema version 6), where ``prepare(A, products=...)``
  then reads it for that device and dtype (:func:`autospmv._decide.ordering.rule_for`), unless
  it decides worse than the built-in rule on the same labels (:func:`guard`).

Products that take less than :data:`FIT_MIN_SECONDS` are left out of the fit: a launch or a
thread pool's wake-up bounds them, not bytes.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import nnls

import autospmv
from autospmv._decide import ordering
from autospmv._decide.model.order_rule import OrderRule
from autospmv._support.timing import TimingOptions, relative_error, release_device_memory
from autospmv._support.validation import canonicalize
from .corpus import files_by_size, grow, grow_permuted, load_file, size_tag
from .fitted_rules import Fit
from .records import append_record, read_records, resume_records
from .timing import TOLERANCE, Bench, device_info

SCHEMA = "order-labels-1"
"""The layout of an order label record (see the module docstring)."""

NUMBERINGS = ("given", "at_random")
"""The numberings each matrix is labelled in."""

MIN_NNZ = 1000
"""Smallest matrix labelled (before growing)."""

TIMED = ("keep", "bfs", "bfs_own")
"""The products each record times: A's own order; the bfs order in the caller's order; the bfs
order in its stored order."""

FIT_MIN_SECONDS = {"cuda": 2e-5, "cpu": 2e-4}
"""Shortest product (back to back) the fit takes: shorter ones are bound by launches."""

CACHE_SHARES = (0.125, 0.25, 0.5, 1.0)
"""The CPU rule's cache shares :func:`fit_rule` tries."""

WINDOWS = (0, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20)
"""The rule's ``window_bytes`` :func:`fit_rule` tries (0: every sector of x costs its
bytes)."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One matrix to label: a file's matrix grown to ``copies`` copies in one numbering."""

    name: str
    source: str
    copies: int
    numbering: str

    def load(self) -> sp.csr_matrix:
        A = load_file(self.source)
        if self.numbering == "at_random":
            return sp.csr_matrix(grow_permuted(A, self.copies, Path(self.source).stem))
        return sp.csr_matrix(grow(A, self.copies))


def cases(folders, grown_nnz=(1e6,), limit: int | None = None) -> list[Case]:
    """The square matrices of ``folders`` (:func:`training.corpus.files_by_size`) of at least
    :data:`MIN_NNZ` nonzeros, each grown to each of ``grown_nnz`` (at least as given) in each
    numbering; ``limit``: at most this many files, spread over sizes."""
    out = []
    for entry, nnz in files_by_size(folders, MIN_NNZ, limit, square=True):
        for target in grown_nnz:
            copies = max(1, round(target / nnz))
            for numbering in NUMBERINGS:
                out.append(Case(f"{entry.name}@{size_tag(copies * nnz)}/{numbering}",
                                entry.source, copies, numbering))
    return out


def order_record(case: Case, A: sp.csr_matrix, device: str, options: TimingOptions) -> dict:
    """Build, check and time the products of :data:`TIMED` for one matrix (see the module
    docstring): the record without its device and date."""
    csr = canonicalize(A)
    m = csr.shape[0]
    x = np.random.default_rng(0).standard_normal(m).astype(csr.dtype)
    keep = autospmv.prepare(csr, device=device, order="keep")
    bfs = autospmv.prepare(csr, device=device, order="bfs")
    ops = {"keep": keep, "bfs": bfs, "bfs_own": bfs.in_own_order()}
    bench = Bench(device, x, m, options)
    reference = csr.astype(np.float64) @ x.astype(np.float64)
    for key in ("keep", "bfs"):
        error = relative_error(bench.result(ops[key]), reference)
        if not error <= TOLERANCE[csr.dtype]:
            raise RuntimeError(f"{case.name}: the {key} product differs from SciPy's by "
                               f"{error:.3g} (relative)")
    timings = bench.time_all(ops)
    failed = {key: t for key, t in timings.items() if isinstance(t, BaseException)}
    if failed:
        key, err = next(iter(failed.items()))
        raise RuntimeError(f"{case.name}: timing the {key} product failed: {err!r}")
    return {
        "schema": SCHEMA, "name": case.name, "source": case.source, "copies": case.copies,
        "numbering": case.numbering, "shape": list(csr.shape), "nnz": int(csr.nnz),
        "dtype": csr.dtype.name, "features": bfs.decision.order_features,
        "ordering_seconds": bfs.decision.order_seconds,
        "kernels": {key: op.kernel for key, op in ops.items()},
        "times": {key: {"b2b_us": timings[key]["b2b"]["median"],
                        "per_call_us": timings[key]["per_call"]["median"]} for key in TIMED},
    }


def label_orders(folders, out, device: str = "cpu", *, dtype: str = "float64",
                 grown_nnz=(1e6,), limit: int | None = None,
                 options: TimingOptions | None = None, progress=sys.stderr) -> Path:
    """Label every case of :func:`cases` into the JSON-lines file ``out`` (resumed: cases
    already there are skipped; a file of another device, dtype, machine or timing is refused).
    A line per case goes to ``progress`` (None: silent). Returns ``out``."""
    out = Path(out)
    options = options or TimingOptions()
    info = device_info(device)
    timing = dataclasses.asdict(options)
    done = resume_records(out, device, dtype, timing, info.get("name"), SCHEMA)
    todo = [case for case in cases(folders, grown_nnz, limit) if case.name not in done]
    started = time.perf_counter()
    for i, case in enumerate(todo, 1):
        A = case.load().astype(dtype)
        record = order_record(case, A, device, options)
        record.update(device=info, timing=timing,
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat())
        append_record(out, record)
        release_device_memory(device)
        if progress is not None:
            t = record["times"]
            elapsed = time.perf_counter() - started
            print(f"[{i}/{len(todo)}, {elapsed:.0f} s, about "
                  f"{elapsed / i * (len(todo) - i):.0f} s left] {case.name}: "
                  f"{record['nnz']:,} nonzeros, keep {t['keep']['b2b_us']:.1f} µs "
                  f"({record['kernels']['keep']}), bfs {t['bfs']['b2b_us']:.1f} "
                  f"({t['bfs_own']['b2b_us']:.1f} in its own order, "
                  f"{record['kernels']['bfs']}), ordering {record['ordering_seconds']:.2f} s",
                  file=progress, flush=True)
    return out


def _layout(record: dict):
    """A stand-in with the shape, nnz and dtype the rule's functions read."""
    return _Layout(tuple(record["shape"]), record["nnz"], np.dtype(record["dtype"]))


@dataclasses.dataclass(frozen=True)
class _Layout:
    shape: tuple
    nnz: int
    dtype: np.dtype


def observations(records, window: float = 0.0) -> list[dict]:
    """The products of ``records`` as a rule with ``window_bytes`` = ``window`` sees them: per
    product its bytes, the x sectors that cost their bytes
    (:func:`autospmv._decide.ordering.window_miss`), its x window's bytes and its time (back to
    back, seconds), and per record the time of its two gathers (the caller's order less the
    stored order)."""
    sizes = OrderRule(bytes_per_second=1.0, latency_seconds=0.0, window_bytes=window)
    out = []
    for record in records:
        layout = _layout(record)
        features, times = record["features"], record["times"]
        for key, suffix in (("keep", "_before"), ("bfs_own", "_after")):
            locality = ordering.locality_of(features, suffix)
            costly = locality.sectors_per_nnz * ordering.window_miss(layout, locality.reach, sizes)
            traffic, sectors = ordering.product_traffic(layout, costly)
            out.append({"kind": "product", "bytes": traffic, "sectors": sectors,
                        "x_bytes": ordering.window_bytes(layout, locality.reach),
                        "seconds": times[key]["b2b_us"] * 1e-6})
        out.append({"kind": "gathers", "bytes": ordering.permutation_traffic(layout),
                    "seconds": (times["bfs"]["b2b_us"] - times["bfs_own"]["b2b_us"]) * 1e-6})
    return out


def _relative_fit(columns: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative coefficients c minimising Σ ((columns @ c − t) / t)², and the median
    relative error of the fit."""
    scaled = columns / seconds[:, None]
    coefficients, _ = nnls(scaled, np.ones(seconds.size))
    error = np.abs(scaled @ coefficients - 1.0)
    return coefficients, float(np.median(error)) if error.size else math.inf


def _gather_rate(records, device: str) -> tuple[float | None, float | None, int]:
    """The gathers' bandwidth fitted to ``records`` (None with fewer than two gathers of at
    least a quarter of :data:`FIT_MIN_SECONDS`), its median relative error, and how many
    records it saw."""
    gathers = [o for o in observations(records) if o["kind"] == "gathers"
               and o["seconds"] >= FIT_MIN_SECONDS[device] / 4]
    if len(gathers) < 2:
        return None, None, len(gathers)
    seconds = np.array([o["seconds"] for o in gathers])
    traffic = np.array([[o["bytes"]] for o in gathers], dtype=np.float64)
    coefficients, error = _relative_fit(traffic, seconds)
    return (float(1.0 / coefficients[0]) if coefficients[0] > 0 else None), error, len(gathers)


def fit_rule(records, device: str) -> tuple[OrderRule, dict]:
    """The rule's constants fitted to ``records`` of one device and dtype, and what the fit
    saw: ``(rule, {"products", "gathers", "median_error", "gathers_median_error"})``.

    For each x window of :data:`WINDOWS` (and on the CPU each cache share of
    :data:`CACHE_SHARES`) the bandwidth (and the CPU's price of a missed sector) are fitted by
    :func:`_relative_fit` to the products of at least :data:`FIT_MIN_SECONDS`; the candidate
    kept is the one whose decisions disagree least with the labels (:func:`disagreements`),
    then the one of the smallest window (which renumbers where a larger one would not: a
    wrong renumbering costs only the order, which ``prepare``'s timing of both orders then
    discards, where a wrong keep loses the gain unseen), then the one that fits their times
    best. Without enough products, or where no bandwidth fits, ValueError."""
    built_in = ordering.BUILT_IN_RULES[device]
    gather_rate, gather_error, gathers = _gather_rate(records, device)
    best = None
    for window in WINDOWS:
        products = [o for o in observations(records, window) if o["kind"] == "product"
                    and o["seconds"] >= FIT_MIN_SECONDS[device]]
        if len(products) < 4:
            raise ValueError(f"{len(products)} labelled products take at least "
                             f"{FIT_MIN_SECONDS[device] * 1e6:.0f} µs; the fit needs 4 or more "
                             "(label larger matrices: --grown-nnz)")
        seconds = np.array([o["seconds"] for o in products])
        traffic = np.array([o["bytes"] for o in products], dtype=np.float64)
        for share in (CACHE_SHARES if device == "cpu" else (None,)):
            if share is None:
                columns = traffic[:, None]
            else:
                misses = np.array([o["sectors"] * ordering.miss_chance(o["x_bytes"], share)
                                   for o in products])
                columns = np.column_stack([traffic, misses])
            coefficients, error = _relative_fit(columns, seconds)
            if coefficients[0] <= 0:
                continue
            rule = OrderRule(bytes_per_second=float(1.0 / coefficients[0]),
                             latency_seconds=built_in.latency_seconds,
                             miss_seconds=float(coefficients[1]) if share is not None else 0.0,
                             cache_share=share if share is not None else 0.0,
                             window_bytes=float(window),
                             permutation_bytes_per_second=gather_rate, labels=len(products))
            score = (disagreements(records, device, rule), window, error)
            if best is None or score < best[0]:
                best = (score, rule)
    if best is None:
        raise ValueError("the labelled products do not grow with their bytes; no bandwidth "
                         "fits them")
    (_, _, error), rule = best
    return rule, {"products": rule.labels, "gathers": gathers, "median_error": error,
                  "gathers_median_error": gather_error}


def predicted_gains(record: dict, device: str, rule: OrderRule) -> dict:
    """The rule's gain per product of the bfs order, relative to a product in A's own order:
    ``{"caller": ..., "stored": ...}`` (with and without the gathers;
    :func:`autospmv._decide.ordering.gain_per_product`)."""
    layout = _layout(record)
    before = ordering.locality_of(record["features"], "_before")
    after = ordering.locality_of(record["features"], "_after")
    out = {}
    for way, gathers in (("caller", True), ("stored", False)):
        gain, now = ordering.gain_per_product(layout, before, after, device, rule, gathers)
        out[way] = gain / now
    return out


def measured_gains(record: dict) -> dict:
    """The labels' gain per product of the bfs order, relative to A's own order."""
    times = record["times"]
    keep = times["keep"]["b2b_us"]
    return {"caller": (keep - times["bfs"]["b2b_us"]) / keep,
            "stored": (keep - times["bfs_own"]["b2b_us"]) / keep}


def agreement(records, device: str, rule: OrderRule) -> dict:
    """How the rule's decisions (a gain of at least
    :data:`~autospmv._decide.ordering.MIN_RELATIVE_GAIN`) meet the labels', per way of
    running the products: ``{way: {"agree", "missed", "wrong", "cases"}}`` (missed: the labels
    gain and the rule says no; wrong: the rule says yes and the labels do not gain)."""
    threshold = ordering.MIN_RELATIVE_GAIN
    out = {}
    for way in ("caller", "stored"):
        counts = {"agree": 0, "missed": 0, "wrong": 0, "cases": 0}
        for record in records:
            says = predicted_gains(record, device, rule)[way] >= threshold
            gains = measured_gains(record)[way] >= threshold
            counts["cases"] += 1
            counts["agree" if says == gains else "missed" if gains else "wrong"] += 1
        out[way] = counts
    return out


def disagreements(records, device: str, rule: OrderRule) -> int:
    """How many of ``rule``'s decisions the labels contradict (:func:`agreement`'s missed and
    wrong, both ways of running the products)."""
    return sum(c["missed"] + c["wrong"] for c in agreement(records, device, rule).values())


def guard(records, device: str, rule: OrderRule) -> tuple[bool, str]:
    """Whether ``rule`` decides at least as well as the device's built-in rule on ``records``:
    its missed and wrong decisions (:func:`agreement`, both ways of running the products)
    number no more than the built-in rule's."""
    fitted = disagreements(records, device, rule)
    built_in = disagreements(records, device, ordering.BUILT_IN_RULES[device])
    if fitted <= built_in:
        return True, (f"the fitted rule disagrees with the labels {fitted} times, the built-in "
                      f"rule {built_in} times")
    return False, (f"the fitted rule disagrees with the labels {fitted} times, more than the "
                   f"built-in rule's {built_in}: the built-in rule stays")


def fit_order_rule(paths, device: str | None = None) -> Fit:
    """Fit the rule to the order label files ``paths`` (one device and dtype), describe the
    fit against the built-in rule and apply :func:`guard`."""
    records = [r for path in paths for r in read_records(Path(path), SCHEMA)]
    if not records:
        raise ValueError("the order label files hold no records")
    kinds = {(r["device"]["device"], r["dtype"]) for r in records}
    if len(kinds) > 1:
        raise ValueError("the order label files mix devices or dtypes: "
                         + ", ".join(f"{d} {t}" for d, t in sorted(kinds)))
    (labelled, dtype), = kinds
    device = device or labelled
    rule, fit = fit_rule(records, device)
    built_in = ordering.BUILT_IN_RULES[device]
    lines = [f"order labels: {len(records)} matrices ({dtype}, {records[0]['device'].get('name')})",
             f"fitted to {fit['products']} products: {rule.bytes_per_second / 1e9:.4g} GB/s "
             f"(built-in {built_in.bytes_per_second / 1e9:.4g})"
             + f", x window {rule.window_bytes / 1024:g} KiB (built-in "
               f"{built_in.window_bytes / 1024:g})"
             + (f", {rule.miss_seconds * 1e9:.3g} ns a missed sector with {rule.cache_share:g} "
                f"of the cache (built-in {built_in.miss_seconds * 1e9:.3g} ns, "
                f"{built_in.cache_share:g})" if device == "cpu" else "")
             + f"; median relative error {fit['median_error']:.1%}",
             (f"gathers: {rule.permutation_bytes_per_second / 1e9:.4g} GB/s from {fit['gathers']}"
              f" records, median relative error {fit['gathers_median_error']:.1%}"
              if rule.permutation_bytes_per_second else
              "gathers: too few timed; priced at the product's bandwidth")]
    for name, candidate in (("fitted", rule), ("built-in", built_in)):
        counts = agreement(records, device, candidate)
        lines.append(f"{name} rule against the labels (gain ≥ "
                     f"{ordering.MIN_RELATIVE_GAIN:.0%} of a product): " + "; ".join(
                         f"{way} order {c['agree']}/{c['cases']} agree, {c['missed']} missed, "
                         f"{c['wrong']} wrong" for way, c in counts.items()))
    passed, reason = guard(records, device, rule)
    lines.append(("guard passed: " if passed else "guard failed: ") + reason)
    return Fit(rule, "\n".join(lines), passed, reason)
