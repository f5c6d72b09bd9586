"""Labelling: time every kernel on every corpus matrix and write one JSON line per matrix.

For each matrix the labeller canonicalises it, computes
:func:`autospmv._decide.features.extract.features` (timed), and measures every kernel of the
registry (:func:`autospmv.kernel_names`) with its chooser's parameters for the device, plus the
parameter variants its registry entry names, which show whether the choosers choose well:
``csr_vector`` with every group size, ``hyb`` with every width strategy and ``csr5`` with every
tile height (:mod:`autospmv._decide.choosers`: ``THREADS_PER_ROW_VARIANTS``, ``HYB_STRATEGIES``,
``CSR5_SIGMAS``). A configuration whose parameters equal one already measured is not timed again;
its record repeats the measurement. All configurations of a matrix are built and checked first and
then timed together, interleaved (:meth:`autospmv._support.timing.Bench.time_all`, through
:class:`training.timing.Bench`).

Each configuration gets a status:

=========== ========================================================================
ok          correct (relative error within :data:`training.timing.TOLERANCE`), timed
infeasible  the format refused the matrix (``FormatTooLargeError``) or memory ran out
incorrect   the result differs from SciPy's float64 product beyond the tolerance
failed      anything else raised (a bug, a missing module); the reason says what
=========== ========================================================================

Only ``ok`` kernels can be the label; the trainer treats the others as infinitely slow.

Record layout (one JSON object per line; ``schema`` = :data:`SCHEMA`)::

    name, family, source, size, shape [m, n], nnz, dtype,
    features {name: value}, features_ms, load_ms, canonicalize_ms,
    kernels {kernel: result},           # with the chooser's parameters
    variants [{kernel, strategy, ...result}],
    best {"per_call": kernel|null, "b2b": kernel|null},
    timing_mode,                        # the mode the row is decided on (target_mode)
    noise {"per_call": ratio, "b2b": ratio}, noisy,   # contention check (row_noise, is_noisy)
    device {...}, versions {...}, timing {TimingOptions fields}, date,
    rechosen [{date, kernels {kernel: {from, to}}}]   # only after python -m autospmv.training rechoose

    result = {params, status, feasible, reason, error, prepare_ms,
              time_per_call_us, time_b2b_us,           # medians, µs (null unless ok)
              spread {per_call: {median, min, p90, n}, b2b: {...}, b2b_calls, retimed}}

When a parameter chooser changes later, ``python -m autospmv.training rechoose`` (:mod:`training.rechoose`)
gives a kernel the time of the variant with its new parameters and recomputes the features,
noting it in ``rechosen``.

Every row records both times of every configuration. Which one decides the row's label is
:func:`target_mode`'s rule (one constant, :data:`LARGE_NNZ`): back-to-back time from 10⁶
nonzeros, per-call time below. ``noise`` is, per mode, the largest median/min ratio among the
row's ``ok`` kernels after the timer's re-timing; a row whose ratio in its own mode stays above
:data:`NOISE_LIMIT` is marked ``noisy`` and left out of training (:func:`is_noisy`).

The output file is plain JSON lines, or gzip-compressed when its name ends in ``.gz``
(``labels.jsonl.gz``, one gzip member per record); readers accept either. Runs are resumable:
matrices already in the output file are skipped, and a line (or gzip member) cut short by a
crash is dropped. Matrix generation runs in parallel (joblib) one chunk at a time, and never
while anything is being timed; features are computed in the timing process so that their time
is not distorted by other work. A time budget stops the run between matrices.

The record helpers (:func:`~training.records.target_mode`, :func:`~training.records.is_noisy`,
reading and appending the labels file) live in :mod:`training.records` and the time forecast
in :mod:`training.forecast`, so that the trainer and the CLI read labels without the labelling
machinery.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import joblib
import numpy as np

import autospmv
from autospmv import _registry as registry
from autospmv._decide.features.extract import features
from autospmv._support.timing import TimingOptions, relative_error, release_device_memory
from autospmv._support.validation import canonicalize
from autospmv.formats.base import FormatTooLargeError
from . import corpus as corpus_module
from .forecast import Forecast, minutes_text, predicted_seconds
from .generators import power_law
from .records import (SCHEMA, TIMING_MODES, append_record, is_noisy, resume_records, row_noise,
                      target_mode)
from .timing import TOLERANCE, Bench, device_info, require_real_gpu


@dataclasses.dataclass(frozen=True)
class Config:
    """One kernel with one parameter set; ``error`` when its parameters could not be chosen."""

    kernel: str
    params: dict | None
    strategy: str
    error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.kernel} {json.dumps(self.params, sort_keys=True)}"


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _chooser_config(kernel: str, csr, device: str) -> Config:
    try:
        return Config(kernel, registry.choose_params(kernel, csr, device), "chooser")
    except Exception as err:  # recorded as a failed configuration
        return Config(kernel, None, "chooser", _describe(err))


def _variant_config(kernel: str, strategy: str, params) -> Config:
    try:
        return Config(kernel, params(), strategy)
    except Exception as err:  # recorded as a failed configuration
        return Config(kernel, None, strategy, _describe(err))


def configurations(csr, device: str, variants: bool = True) -> tuple[list[Config], list[Config]]:
    """(one chooser configuration per kernel of the registry for ``device``, the parameter
    variants each registry entry names) for canonical ``csr``."""
    chosen = [_chooser_config(kernel, csr, device) for kernel in registry.names()]
    if not variants:
        return chosen, []
    extra = [_variant_config(spec.name, strategy, params) for spec in registry.specs()
             for strategy, params in spec.variants_of(csr)]
    return chosen, extra


def _result(config: Config, status: str, reason: str | None = None, **values) -> dict:
    """A configuration's result; ``feasible`` means the operator could be built."""
    out = {"params": config.params, "status": status, "feasible": status in ("ok", "incorrect"),
           "reason": reason, "error": None, "prepare_ms": None, "time_per_call_us": None,
           "time_b2b_us": None, "spread": None}
    out.update(values)
    return out


def _chooser_failed(config: Config) -> dict:
    """The result of a configuration whose parameters could not be chosen."""
    return _result(config, "failed", f"choosing parameters: {config.error}")


def build(csr, config: Config, bench: Bench, y_ref: np.ndarray) -> tuple[dict, object]:
    """Build and check one configuration: (its result, the operator to time, or None when the
    result is final: infeasible, incorrect or failed)."""
    if config.error:
        return _chooser_failed(config), None
    started = time.perf_counter()
    try:
        op = autospmv.prepare(csr, kernel=config.kernel, device=bench.device,
                              params=config.params)
    except (FormatTooLargeError, MemoryError) as err:
        return _result(config, "infeasible", _describe(err)), None
    except Exception as err:
        return _result(config, "failed", f"prepare: {_describe(err)}"), None
    prepare_ms = (time.perf_counter() - started) * 1e3
    try:
        error = relative_error(bench.result(op), y_ref)
    except MemoryError as err:
        return _result(config, "infeasible", _describe(err), prepare_ms=prepare_ms), None
    except Exception as err:
        return _result(config, "failed", f"matvec: {_describe(err)}", feasible=True,
                       prepare_ms=prepare_ms), None
    tolerance = TOLERANCE[np.dtype(csr.dtype)]
    if not error <= tolerance:
        return _result(config, "incorrect", f"relative error {error:.3g} > {tolerance:g}",
                       error=error, prepare_ms=prepare_ms), None
    return _result(config, "ok", error=error, prepare_ms=prepare_ms), op


def timed(config: Config, result: dict, timing) -> dict:
    """The result of a built configuration once timed (``timing`` from :meth:`Bench.time_all`:
    a dict, or the exception its operator raised)."""
    if isinstance(timing, MemoryError):
        return _result(config, "infeasible", _describe(timing), prepare_ms=result["prepare_ms"])
    if isinstance(timing, Exception):
        return _result(config, "failed", f"matvec: {_describe(timing)}", feasible=True,
                       prepare_ms=result["prepare_ms"])
    return dict(result, time_per_call_us=timing["per_call"]["median"],
                time_b2b_us=timing["b2b"]["median"], spread=timing)


def measure(csr, config: Config, bench: Bench, y_ref: np.ndarray) -> dict:
    """Build, check and time one configuration (see the module docstring for the statuses)."""
    result, op = build(csr, config, bench, y_ref)
    if op is None:
        return result
    try:
        return timed(config, result, bench.time_all({0: op})[0])
    finally:
        del op
        release_device_memory(bench.device)


def best_kernels(kernels: dict) -> dict:
    """The fastest ``ok`` kernel by each timing mode (None when no kernel is ok)."""
    out = {}
    for mode in TIMING_MODES:
        times = {k: r[f"time_{mode}_us"] for k, r in kernels.items() if r["status"] == "ok"}
        out[mode] = min(times, key=times.get) if times else None
    return out


def label_matrix(entry: corpus_module.Entry, csr, device: str, options: TimingOptions,
                 variants: bool = True) -> dict:
    """The label record of one canonical matrix (without the run-wide keys)."""
    started = time.perf_counter()
    feats = features(csr, device=device)
    features_ms = (time.perf_counter() - started) * 1e3
    m, n = csr.shape
    x = np.random.default_rng(0).uniform(-1.0, 1.0, n).astype(csr.dtype)
    y_ref = csr.astype(np.float64) @ x.astype(np.float64)
    bench = Bench(device, x, m, options)
    chosen, extra = configurations(csr, device, variants)
    done: dict[str, dict] = {}  # config key -> result (failed choosers apart)
    ops: dict[str, object] = {}
    for config in chosen + extra:
        if not config.error and config.key not in done:
            done[config.key], op = build(csr, config, bench, y_ref)
            if op is not None:
                ops[config.key] = op
    unique = {c.key: c for c in chosen + extra if not c.error}
    for key, timing in bench.time_all(ops).items():
        done[key] = timed(unique[key], done[key], timing)
    del ops, bench
    release_device_memory(device)

    def result(config: Config) -> dict:
        return _chooser_failed(config) if config.error else done[config.key]

    kernels = {c.kernel: result(c) for c in chosen}
    variant_records = [{"kernel": c.kernel, "strategy": c.strategy, **result(c)} for c in extra]
    record = {
        "schema": SCHEMA, "name": entry.name, "family": entry.family, "source": entry.source,
        "grown": entry.grown,
        "size": entry.size, "shape": [m, n], "nnz": int(csr.nnz), "dtype": str(csr.dtype),
        "features": feats, "features_ms": features_ms,
        "kernels": kernels, "variants": variant_records, "best": best_kernels(kernels),
        "timing_mode": target_mode(int(csr.nnz)), "noise": row_noise(kernels),
    }  # fmt: skip
    record["noisy"] = is_noisy(record)
    return record


def load_canonical(entry: corpus_module.Entry, dtype: str):
    """(canonical matrix of ``dtype``, load ms, canonicalise ms); runs in joblib workers."""
    started = time.perf_counter()
    A = entry.load()
    loaded = time.perf_counter()
    csr = canonicalize(A.astype(dtype, copy=False))
    return csr, (loaded - started) * 1e3, (time.perf_counter() - loaded) * 1e3


def library_versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version(), "autospmv": autospmv.__version__}
    for dist in ("numpy", "scipy", "numba", "numba-cuda", "scikit-learn"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _warm_up(device: str, dtype: str, options: TimingOptions, variants: bool) -> None:
    """Compile every kernel configuration (serial and parallel CPU variants) before timing, so
    that no recorded prepare time or first call includes compilation."""
    for nnz in (3_000, 60_000):
        entry = corpus_module.Entry(f"warm-up-{nnz}", "warm-up", corpus_module.SYNTHETIC,
                                    corpus_module.size_tag(nnz), nnz,
                                    lambda nnz=nnz: power_law("warm-up", nnz, 2.2))
        csr = load_canonical(entry, dtype)[0]
        label_matrix(entry, csr, device, dataclasses.replace(options, max_seconds=0.0),
                     variants)


def label(entries, out, device: str = "cpu", *, dtype: str = "float64",
          budget_seconds: float | None = None, jobs: int = 1, variants: bool = True,
          options: TimingOptions = TimingOptions(), progress: bool = True,
          forecast: Forecast | None = None) -> dict:
    """Label ``entries`` on ``device`` ("cuda" or "cpu") into the JSON-lines file ``out``.

    ``forecast``: the time forecast to print and update (one :class:`Forecast` carried over
    several calls keeps this machine's pace; default: a new one for ``device``).

    Returns a summary: ``labelled`` (this run), ``skipped`` (already in the file),
    ``remaining`` (left for lack of time), ``seconds``, ``failures`` (distinct failure reasons),
    ``estimated_seconds`` (the :class:`Forecast` for the pending matrices before the start, the
    labelling alone), ``warm_up_seconds`` (compiling, or loading, every kernel first).
    """
    from tqdm import tqdm

    if device not in ("cuda", "cpu"):
        raise ValueError(f"unknown device {device!r}; label on 'cuda' or 'cpu'")
    if np.dtype(dtype) not in TOLERANCE:
        raise ValueError(f"unsupported dtype {dtype!r}; label float32 or float64")
    dtype = np.dtype(dtype).name
    if device == "cuda":
        require_real_gpu()
    started = time.perf_counter()
    deadline = math.inf if budget_seconds is None else started + budget_seconds
    out = Path(out)
    timing = dataclasses.asdict(options)
    run_info = {"device": device_info(device), "versions": library_versions(), "timing": timing}
    done = resume_records(out, device, dtype, timing, machine=run_info["device"]["name"])
    pending = [e for e in entries if e.name not in done]
    summary = {"labelled": 0, "skipped": len(entries) - len(pending), "remaining": 0,
               "failures": {}}
    # tqdm's own estimate counts matrices; the forecast weighs them by their expected time.
    bar = tqdm(total=len(entries), initial=summary["skipped"], unit="matrix", file=sys.stderr,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
               **({} if progress else {"disable": True}))
    history: list[tuple[int, float]] = []
    forecast = forecast or Forecast.for_device(device)
    summary["estimated_seconds"] = forecast.remaining(pending)
    summary["warm_up_seconds"] = 0.0
    if pending and time.perf_counter() < deadline:
        # Compiling every kernel (seconds in a new environment, loading them from numba's cache
        # after that) comes first, so that the estimate below is of the labelling alone.
        warm_started = time.perf_counter()
        _warm_up(device, dtype, options, variants)
        summary["warm_up_seconds"] = time.perf_counter() - warm_started
        bar.write(f"compiled (or loaded from the cache) every kernel in "
                  f"{summary['warm_up_seconds']:.1f} s", file=sys.stderr)
    if pending:
        left = deadline - time.perf_counter()
        budget = ("" if budget_seconds is None else f"; the budget stops it after "
                  f"{minutes_text(max(left, 0.0))}{' more' if summary['warm_up_seconds'] else ''}")
        bar.write(f"labelling {len(pending)} matrices ({sum(e.nnz for e in pending):,} nonzeros) "
                  f"on {device}: about {minutes_text(summary['estimated_seconds'])} at the pace of "
                  f"{forecast.source}{budget}; the estimate follows this machine's pace as it "
                  "goes", file=sys.stderr)
    last = None  # the forecast counts from record to record, as in its reference run

    def in_time(entry) -> bool:
        return time.perf_counter() + predicted_seconds(history, entry.nnz) <= deadline

    with joblib.Parallel(n_jobs=jobs) as parallel:
        for position, (entry, loaded) in enumerate(
                _loaded(pending, dtype, jobs, parallel, in_time)):
            if not in_time(entry):
                break
            csr, load_ms, canonicalize_ms = loaded
            left = min(forecast.remaining(pending[position:]), deadline - time.perf_counter())
            bar.set_postfix_str(f"about {minutes_text(left)} left; {entry.name}")
            entry_started = time.perf_counter()
            record = label_matrix(entry, csr, device, options, variants)
            record.update(load_ms=load_ms, canonicalize_ms=canonicalize_ms, **run_info,
                          date=datetime.datetime.now(datetime.timezone.utc).isoformat())
            append_record(out, record)
            history.append((entry.nnz, time.perf_counter() - entry_started))
            forecast.record(entry, time.perf_counter() - (last or entry_started))
            last = time.perf_counter()
            summary["labelled"] += 1
            bar.update()
            _report_failures(record, summary["failures"], bar)
    bar.close()
    summary["remaining"] = len(pending) - summary["labelled"]
    summary["seconds"] = time.perf_counter() - started
    return summary


def _loaded(entries, dtype: str, jobs: int, parallel, in_time):
    """Yield (entry, load_canonical(entry)) with up to ``jobs`` matrices built in parallel at a
    time; the next chunk is built only after the previous one has been consumed (timed), and
    only if ``in_time(its first entry)``."""
    step = max(1, jobs)
    for start in range(0, len(entries), step):
        chunk = entries[start:start + step]
        if not in_time(chunk[0]):
            return
        yield from zip(chunk, parallel(joblib.delayed(load_canonical)(e, dtype) for e in chunk))


def _report_failures(record: dict, seen: dict, bar) -> None:
    """Print each distinct failure reason once (a failure usually means a bug)."""
    results = [(k, r) for k, r in record["kernels"].items()]
    results += [(f"{v['kernel']} {v['strategy']}", v) for v in record["variants"]]
    for what, result in results:
        if result["status"] == "failed" and result["reason"] not in seen:
            seen[result["reason"]] = what
            bar.write(f"{record['name']}: {what} failed: {result['reason']}", file=sys.stderr)
