"""Labelling: time every kernel on every corpus matrix and write one JSON line per matrix.

For each matrix the labeller canonicalises it, computes :func:`autospmv.features.features`
(timed), and measures every kernel of the registry (:func:`autospmv.registry.names`) with its
chooser's parameters for the device, plus the parameter variants its registry entry names, which
show whether the choosers choose well: ``csr_vector``
with every group size, ``hyb`` with every width strategy of :mod:`autospmv.formats.hyb`,
``csr5`` with every tile height of :data:`CSR5_SIGMAS`. A configuration whose parameters equal
one already measured is not timed again; its record repeats the measurement. All
configurations of a matrix are built and checked first and then timed together, interleaved
(:meth:`training.timing.Bench.time_all`).

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
    device {...}, versions {...}, timing {TimingOptions fields}, date

    result = {params, status, feasible, reason, error, prepare_ms,
              time_per_call_us, time_b2b_us,           # medians, µs (null unless ok)
              spread {per_call: {median, min, p90, n}, b2b: {...}, b2b_calls, retimed}}

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
"""

from __future__ import annotations

import dataclasses
import datetime
import gzip
import json
import math
import os
import platform
import sys
import time
import zlib
from pathlib import Path

import joblib
import numpy as np

import autospmv
from autospmv import registry
from autospmv.features import features
from autospmv.formats.base import FormatTooLargeError
from autospmv.validation import canonicalize
from training import corpus as corpus_module
from training.timing import (QUICK, TOLERANCE, Bench, TimingOptions, device_info,
                             relative_error, release_device_memory, require_real_gpu)

SCHEMA = "autospmv-labels/1"
THREADS_PER_ROW = registry.THREADS_PER_ROW_VARIANTS
HYB_STRATEGIES = registry.HYB_STRATEGIES
CSR5_SIGMAS = registry.CSR5_SIGMAS
"""The built-in kernels' parameter variants (each kernel's ``KernelSpec.variants``)."""
TIMING_MODES = ("per_call", "b2b")
"""The two times every label records (see :mod:`training.timing`)."""
TRAINING_MODES = ("auto",) + TIMING_MODES
"""What a model may be trained on: ``auto`` applies :func:`target_mode` per matrix."""
LARGE_NNZ = 1_000_000
"""Matrices with at least this many nonzeros are decided on back-to-back time."""
NOISE_LIMIT = TimingOptions.noise_limit
"""A label row is noisy when a kernel's median time in the row's timing mode exceeds this many
times its minimum even after re-timing (:class:`training.timing.Bench`)."""


def target_mode(nnz: int, mode: str = "auto") -> str:
    """The timing mode a matrix of ``nnz`` nonzeros is decided on: for ``auto``, back-to-back
    from :data:`LARGE_NNZ` nonzeros (what an iterative solver sees: on a large matrix the
    kernel's own time, not the launch, is what a loop of products costs), per call below (a
    small matrix's products are dominated by the launch and the synchronisation a user's loop
    pays). ``per_call`` or ``b2b`` apply to every matrix."""
    if mode == "auto":
        return "b2b" if nnz >= LARGE_NNZ else "per_call"
    if mode not in TIMING_MODES:
        raise ValueError(f"unknown timing mode {mode!r}; choose one of "
                         f"{', '.join(TRAINING_MODES)}")
    return mode


def row_noise(kernels: dict) -> dict:
    """Per timing mode, the largest median / min over the ``ok`` kernels' timings (1 is
    noise-free; None when no kernel recorded its spread)."""
    out = {}
    for mode in TIMING_MODES:
        ratios = [r["spread"][mode]["median"] / r["spread"][mode]["min"]
                  for r in kernels.values()
                  if r.get("status") == "ok" and r.get("spread") and r["spread"][mode]["min"] > 0]
        out[mode] = max(ratios) if ratios else None
    return out


def is_noisy(record: dict, mode: str = "auto") -> bool:
    """Whether a label row's kernel timings in the mode it is decided on (:func:`target_mode`)
    stayed disturbed: a ratio above :data:`NOISE_LIMIT`. Computed from the recorded spreads,
    so label files written before the check are judged the same way."""
    ratio = row_noise(record["kernels"])[target_mode(record["nnz"], mode)]
    return ratio is not None and ratio > NOISE_LIMIT


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
             for strategy, params in spec.variants(csr)]
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


# -- the output file ------------------------------------------------------------------------


GZIP_MAGIC = b"\x1f\x8b"


def _decode(path) -> tuple[str, bool]:
    """(the text of a labels file, whether its bytes were complete).

    gzip files (recognised by their magic bytes, whatever their name) are decompressed member
    by member, because :func:`_append` adds one gzip member per record; a member cut short by
    a crash yields what it holds and makes the result incomplete. Plain files are complete by
    definition: a cut line is recognised by its missing newline.
    """
    data = Path(path).read_bytes()
    if not data.startswith(GZIP_MAGIC):
        return data.decode("utf-8"), True
    parts = []
    while data:
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip header and trailer
        try:
            parts.append(member.decompress(data))
        except zlib.error as err:
            raise ValueError(f"{path} is a damaged gzip file ({err})") from None
        if not member.eof:
            return b"".join(parts).decode("utf-8", errors="ignore"), False
        data = member.unused_data
    return b"".join(parts).decode("utf-8"), True


def _compressed(path) -> bool:
    """Whether records appended to ``path`` are gzip-compressed (a ``.gz`` name)."""
    return Path(path).suffix == ".gz"


def read_records(path) -> list[dict]:
    """All records of a labels file (JSON lines, plain or gzip-compressed such as
    ``labels.jsonl.gz``); a final line without newline is ignored."""
    return _parse(_decode(path)[0], path)


def _parse(text: str, path) -> list[dict]:
    """The records of the complete lines of ``text``, read from ``path``."""
    records = []
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise ValueError(f"line {number} of {path} is not valid JSON ({err}); remove it "
                             "to continue") from None
        if not isinstance(record, dict) or record.get("schema") != SCHEMA:
            raise ValueError(f"line {number} of {path} is not an autospmv label record "
                             f"(expected schema {SCHEMA!r})")
        records.append(record)
    return records


def _resume(path: Path, device: str, dtype: str, timing: dict | None = None) -> set[str]:
    """Names already labelled in ``path`` (created empty if missing), after dropping an
    unfinished last line (or, in a gzip file, an unfinished last member). Records of another
    device or dtype, or timed with other ``timing`` options (records without them predate
    the key and are accepted), are refused: they must not mix."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return set()
    with open(path, "rb") as handle:
        packed = handle.read(len(GZIP_MAGIC)) == GZIP_MAGIC
    if path.stat().st_size and packed != _compressed(path):
        raise ValueError(f"{path} is {'' if packed else 'not '}gzip-compressed but its name "
                         "says otherwise; name compressed label files *.gz and plain ones "
                         "anything else")
    text, intact = _decode(path)
    records = _parse(text, path)
    if not intact or (text and not text.endswith("\n")):
        _rewrite(path, text[:text.rfind("\n") + 1])
    for record in records:
        if record["dtype"] != dtype or record["device"]["device"] != device:
            raise ValueError(
                f"{path} holds {record['dtype']} labels from device "
                f"{record['device']['device']!r}; write {dtype} labels for {device!r} to "
                "another file"
            )
        if timing is not None and record.get("timing", timing) != timing:
            raise ValueError(
                f"{path} holds labels timed with other options ({_timing_name(record['timing'])}"
                f", this run: {_timing_name(timing)}); label with the same options, write to "
                "another file, or start over (`autospmv retrain --fresh`)"
            )
    return {record["name"] for record in records}


def _timing_name(timing: dict) -> str:
    """``"--quick"`` or ``"full timing"`` for a record's ``timing`` entry."""
    return "--quick" if timing == dataclasses.asdict(QUICK) else "full timing"


def _rewrite(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (compressed if the file is), atomically."""
    data = text.encode("utf-8")
    if _compressed(path):
        data = gzip.compress(data, mtime=0)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def _append(path: Path, record: dict) -> None:
    """Append one record as a line, durably; to a gzip file as a gzip member of its own, so
    that a crash can only damage the last record."""
    data = (json.dumps(record, allow_nan=False) + "\n").encode("utf-8")
    if _compressed(path):
        data = gzip.compress(data, mtime=0)
    with open(path, "ab") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _predicted_seconds(history: list[tuple[int, float]], nnz: int) -> float:
    """Time for a matrix of ``nnz``: that of the nearest size labelled so far, scaled up
    linearly if this one is larger."""
    if not history:
        return 0.0
    near_nnz, seconds = min(history, key=lambda h: abs(math.log((h[0] + 1) / (nnz + 1))))
    return seconds * max(1.0, nnz / max(near_nnz, 1))


def labelling_seconds(records) -> dict[str, tuple[int, float]]:
    """Seconds each matrix of a labelling run took, by name, with its nonzeros: the gaps
    between consecutive records' dates (they include generating the matrix; the first record,
    without a predecessor, is left out)."""
    dates = [datetime.datetime.fromisoformat(r["date"]) for r in records]
    return {r["name"]: (int(r["nnz"]), (later - earlier).total_seconds())
            for r, earlier, later in zip(records[1:], dates, dates[1:])}


def reference_labels(device: str) -> Path | None:
    """A shipped label file of ``device``'s kind ("cuda" or "cpu") to forecast with, or None."""
    from autospmv.selector import shipped_models

    folders = {path.parent / "labels" for path in shipped_models().values()}
    files = sorted(f for folder in folders for f in folder.glob(f"{device}-*.jsonl*"))
    return files[0] if files else None


class Forecast:
    """How long a labelling run has left, from the corpus and the times measured so far.

    Matrices differ in cost by a factor of a hundred (a 10⁶-nonzero matrix takes about 40 times
    as long as a 10⁴ one on a 2-core CPU), and the corpus runs small ones first, so counting
    matrices misleads. Each matrix is expected to take what it took in a reference run (a
    shipped label file of the same kind of device: the same matrix by name, else the nearest
    size there, scaled by nonzeros when larger; without one, ``FALLBACK`` seconds = a + b·nnz),
    and those expectations are scaled by how this machine compared on the matrices labelled
    so far: remaining = Σ expected(pending) × Σ measured / Σ expected(labelled).
    """

    FALLBACK = (0.2, 1.2e-5)
    """(seconds per matrix, seconds per nonzero): a + b·nnz fitted to the committed 2-core CPU
    retrain (``benchmarks/results/retrain-cpu-2026-11-22``)."""

    def __init__(self, reference: dict[str, tuple[int, float]] | None = None,
                 source: str = "a 2-core CPU (built-in figures)"):
        self.reference = dict(reference or {})
        self.source = source
        """What the expectations come from, for messages."""
        self._sizes = np.array([nnz for nnz, _ in self.reference.values()], dtype=np.float64)
        self._seconds = np.array([sec for _, sec in self.reference.values()], dtype=np.float64)
        self.measured = 0.0
        self.expected_done = 0.0

    @classmethod
    def for_device(cls, device: str) -> "Forecast":
        """The forecast from :func:`reference_labels` of ``device``, else the fallback."""
        path = reference_labels(device)
        if path is None:
            return cls()
        records = read_records(path)
        name = records[0]["device"].get("name", device) if records else device
        return cls(labelling_seconds(records), f"{name} ({path.name})")

    def expected(self, entry) -> float:
        """Seconds ``entry`` took in the reference run (see the class docstring)."""
        if entry.name in self.reference:
            return self.reference[entry.name][1]
        if not self._sizes.size:
            return self.FALLBACK[0] + self.FALLBACK[1] * entry.nnz
        nearest = int(np.argmin(np.abs(np.log((self._sizes + 1) / (entry.nnz + 1)))))
        return float(self._seconds[nearest] * max(1.0, entry.nnz / max(self._sizes[nearest], 1)))

    def record(self, entry, seconds: float) -> None:
        """Account for ``entry``, which took ``seconds`` here."""
        self.measured += seconds
        self.expected_done += self.expected(entry)

    @property
    def speed(self) -> float:
        """Measured over expected seconds so far (1 before any matrix is labelled)."""
        return self.measured / self.expected_done if self.expected_done > 0 else 1.0

    def remaining(self, entries) -> float:
        """Estimated seconds to label ``entries``."""
        return self.speed * sum(self.expected(entry) for entry in entries)


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _warm_up(device: str, dtype: str, options: TimingOptions, variants: bool) -> None:
    """Compile every kernel configuration (serial and parallel CPU variants) before timing, so
    that no recorded prepare time or first call includes compilation."""
    for nnz in (3_000, 60_000):
        entry = corpus_module.Entry(f"warm-up-{nnz}", "warm-up", corpus_module.SYNTHETIC,
                                    corpus_module.size_tag(nnz), nnz,
                                    lambda nnz=nnz: corpus_module.power_law("warm-up", nnz, 2.2))
        csr = load_canonical(entry, dtype)[0]
        label_matrix(entry, csr, device, dataclasses.replace(options, max_seconds=0.0),
                     variants)


def label(entries, out, device: str = "cpu", *, dtype: str = "float64",
          budget_seconds: float | None = None, jobs: int = 1, variants: bool = True,
          options: TimingOptions = TimingOptions(), progress: bool = True) -> dict:
    """Label ``entries`` on ``device`` ("cuda" or "cpu") into the JSON-lines file ``out``.

    Returns a summary: ``labelled`` (this run), ``skipped`` (already in the file),
    ``remaining`` (left for lack of time), ``seconds``, ``failures`` (distinct failure reasons),
    ``estimated_seconds`` (the :class:`Forecast` for the pending matrices before the start).
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
    done = _resume(out, device, dtype, timing)
    pending = [e for e in entries if e.name not in done]
    summary = {"labelled": 0, "skipped": len(entries) - len(pending), "remaining": 0,
               "failures": {}}
    run_info = {"device": device_info(device), "versions": library_versions(), "timing": timing}
    # tqdm's own estimate counts matrices; the forecast weighs them by their expected time.
    bar = tqdm(total=len(entries), initial=summary["skipped"], unit="matrix", file=sys.stderr,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
               **({} if progress else {"disable": True}))
    history: list[tuple[int, float]] = []
    forecast = Forecast.for_device(device)
    summary["estimated_seconds"] = forecast.remaining(pending)
    if pending:
        budget = ("" if budget_seconds is None
                  else f"; the budget stops it after {_minutes(budget_seconds)}")
        bar.write(f"labelling {len(pending)} matrices ({sum(e.nnz for e in pending):,} nonzeros) "
                  f"on {device}: about {_minutes(summary['estimated_seconds'])} at the pace of "
                  f"{forecast.source}{budget}; the estimate follows this machine's pace as it "
                  "goes", file=sys.stderr)
    if pending and time.perf_counter() < deadline:
        _warm_up(device, dtype, options, variants)
    last = None  # the forecast counts from record to record, as in its reference run

    def in_time(entry) -> bool:
        return time.perf_counter() + _predicted_seconds(history, entry.nnz) <= deadline

    with joblib.Parallel(n_jobs=jobs) as parallel:
        for position, (entry, loaded) in enumerate(
                _loaded(pending, dtype, jobs, parallel, in_time)):
            if not in_time(entry):
                break
            csr, load_ms, canonicalize_ms = loaded
            left = min(forecast.remaining(pending[position:]), deadline - time.perf_counter())
            bar.set_postfix_str(f"about {_minutes(left)} left; {entry.name}")
            entry_started = time.perf_counter()
            record = label_matrix(entry, csr, device, options, variants)
            record.update(load_ms=load_ms, canonicalize_ms=canonicalize_ms, **run_info,
                          date=datetime.datetime.now(datetime.timezone.utc).isoformat())
            _append(out, record)
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
