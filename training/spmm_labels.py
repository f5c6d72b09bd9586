"""SpMM labels: every multi-vector program timed on the local GPU for a few column counts.

A product ``op @ X`` of k > 4 columns runs one of several programs on A's CSR arrays
(:mod:`autospmv.kernels.cuda.spmm_programs`: the many-columns kernel, the column pairs of four
or eight nonzeros a step, the column quads, for up to 8 columns the few-columns kernel in passes
and the eight-columns kernel, and where X outgrows the L2 cache the column pairs and quads in
tiles of X's columns). No program wins everywhere, and the operator times them at the first
product of k columns. These labels record, for each matrix of the given folders grown
block-diagonally to each ``grown_nnz`` (:func:`training.corpus.grow`) and each column count of
``columns``:

* every program's result checked against SciPy's ``A @ X`` in float64;
* every program's time per product, back to back (:func:`.spmm_programs.time_programs`: the
  least of interleaved batches on one stream), twice: the record keeps the lesser of the two
  times of each program and their largest ratio (``spread``), so that a contended run shows;
* the matrix's row-length features (:func:`row_features`).

:func:`fit_spmm_rule` fits to them, per labelled column count, the program to run, or two
programs either side of a mean row length (:func:`fit_choice`), and reports how the rule does
against the best program on each matrix, fitted to all of them and to the others only (held
out), beside the many-columns kernel alone; ``python -m autospmv.training fit-spmm`` prints that
and with ``--model`` writes the rule into model files (``spmm_rule``, schema version 7) where it
beats the many-columns kernel on held-out matrices at every column count. The operator runs the
rule's program where the first product of k columns cannot time the programs (a CUDA graph
being captured: :mod:`autospmv._decide.model.spmm_rule`).

Records are JSON lines of schema :data:`SCHEMA`, resumable like the kernel labels. A GPU is
required: the programs are CUDA kernels.

    python -m autospmv.training label-spmm --matrices DIR --dtype float64 --grown-nnz 4e6 \\
        --columns 8 16 32 64 --out spmm-labels.jsonl
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

import autospmv
from autospmv._decide.model.spmm_rule import SpmmChoice, SpmmRule
from autospmv._support.timing import relative_error, release_device_memory
from autospmv._support.validation import canonicalize
from .corpus import files_by_size, grow, load_file, size_tag
from .fitted_rules import Fit
from .records import append_record, read_records, resume_records
from .timing import TOLERANCE, device_info, require_real_gpu

SCHEMA = "spmm-labels-1"
"""The layout of an SpMM label record (see the module docstring)."""

COLUMNS = (8, 16, 32, 64)
"""The column counts labelled by default: one within the passes' and eight-columns kernel's
range, and three powers of two up to the widest untiled product on most matrices."""

MIN_NNZ = 1000
"""Smallest matrix labelled (before growing)."""

MIN_SIDE = 3
"""Fewest matrices on each side of a fitted choice's threshold (:func:`fit_choice`)."""

ROUNDS, BATCH = 5, 10
"""Each timing pass: the least of this many interleaved batches of this many products per
program (:func:`autospmv.kernels.cuda.spmm_programs.time_programs`)."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One matrix to label: a file's matrix grown to ``copies`` copies."""

    name: str
    source: str
    copies: int

    def load(self) -> sp.csr_matrix:
        return sp.csr_matrix(grow(load_file(self.source), self.copies))


def cases(folders, grown_nnz=(4e6,), limit: int | None = None) -> list[Case]:
    """The matrices of ``folders`` (:func:`training.corpus.files_by_size`) of at least
    :data:`MIN_NNZ` nonzeros, each grown to each of ``grown_nnz`` (at least as given);
    ``limit``: at most this many files, spread over sizes."""
    return [Case(f"{entry.name}@{size_tag(max(1, round(target / nnz)) * nnz)}", entry.source,
                 max(1, round(target / nnz)))
            for entry, nnz in files_by_size(folders, MIN_NNZ, limit) for target in grown_nnz]


def row_features(csr) -> dict:
    """The row-length features a program's speed follows: the mean and largest row length, the
    rows' coefficient of variation, and the share of nonzeros in rows longer than a piece
    (:data:`autospmv.kernels.cuda.spmm.PIECE`, which several groups split)."""
    from autospmv.kernels.cuda.spmm import PIECE

    lengths = np.diff(np.asarray(csr.indptr, dtype=np.int64))
    mean = float(lengths.mean()) if lengths.size else 0.0
    return {"row_mean": mean, "row_max": int(lengths.max()) if lengths.size else 0,
            "row_cv": float(lengths.std() / mean) if mean else 0.0,
            "long_row_share": float(lengths[lengths > PIECE].sum() / max(csr.nnz, 1))}


def program_key(candidate: tuple[str, int]) -> str:
    """A program and its tile width as a record names it: ``"column_pairs"``,
    ``"column_pairs@64"`` (in tiles of 64 columns)."""
    program, tile = candidate
    return f"{program}@{tile}" if tile else program


def _time_columns(op, csr, k: int, dtype) -> dict:
    """Check and time every program of k columns on ``op`` (prepared on the GPU): ``{"times":
    {key: µs}, "spread": largest ratio of a program's two timings, "errors": {key: relative
    error}}``."""
    import cupy

    from autospmv.kernels.cuda.spmm_programs import programs_for, time_programs

    m, n = csr.shape
    rng = np.random.default_rng(k)
    X_host = rng.standard_normal((n, k)).astype(dtype)
    reference = csr.astype(np.float64) @ X_host.astype(np.float64)
    X = cupy.asarray(X_host)
    op @ X  # sets the multi-vector product up (its own first-product timing included)
    multi = op._runner.multi
    candidates = programs_for(k, n, np.dtype(dtype).itemsize, multi.cache_bytes)
    built = [multi.build(k, dtype, dtype, candidate) for candidate in candidates]
    Y = cupy.empty((m, k), dtype=dtype)
    stream = cupy.cuda.get_current_stream().ptr
    x_ptr, y_ptr = X.data.ptr, Y.data.ptr
    errors = {}
    for candidate, (_, fires) in zip(candidates, built):
        Y.fill(np.nan)
        for fire in fires:
            fire(x_ptr, y_ptr, stream)
        errors[program_key(candidate)] = relative_error(cupy.asnumpy(Y), reference)
    bad = {key: e for key, e in errors.items() if not e <= TOLERANCE[np.dtype(dtype)]}
    if bad:
        key, error = next(iter(bad.items()))
        raise RuntimeError(f"the {key} program's product of {k} columns differs from SciPy's "
                           f"by {error:.3g} (relative)")
    passes = [time_programs(built, x_ptr, y_ptr, stream, rounds=ROUNDS, batch=BATCH)
              for _ in range(2)]
    if any(p is None for p in passes):
        raise RuntimeError("the SpMM programs could not be timed (the stream is captured)")
    times = {program_key(c): float(min(a, b)) for c, a, b in zip(candidates, *passes)}
    spread = max(max(a, b) / min(a, b) for a, b in zip(*passes))
    return {"times": times, "spread": float(spread), "errors": errors}


def spmm_record(case: Case, A: sp.csr_matrix, columns=COLUMNS) -> dict:
    """Check and time every program of each column count on one matrix (see the module
    docstring): the record without its device and date."""
    csr = canonicalize(A)
    # the programs run on A's CSR arrays whatever the kernel: a CSR kernel holds them, and
    # forcing it skips the decision's feature passes
    op = autospmv.prepare(csr, device="cuda", kernel="csr_vector", order="keep")
    return {
        "schema": SCHEMA, "name": case.name, "source": case.source, "copies": case.copies,
        "shape": list(csr.shape), "nnz": int(csr.nnz), "dtype": csr.dtype.name,
        "features": row_features(csr),
        "columns": {str(k): _time_columns(op, csr, k, csr.dtype) for k in columns},
    }


def label_spmm(folders, out, *, dtype: str = "float64", grown_nnz=(4e6,), columns=COLUMNS,
               limit: int | None = None, progress=sys.stderr) -> Path:
    """Label every case of :func:`cases` into the JSON-lines file ``out`` (resumed: cases
    already there are skipped; a file of another dtype or machine is refused). A line per case
    goes to ``progress`` (None: silent). Returns ``out``."""
    try:
        require_real_gpu()
    except RuntimeError as err:
        raise RuntimeError(f"SpMM labels time CUDA kernels and need a real GPU ({err})") from None
    out = Path(out)
    info = device_info("cuda")
    timing = {"rounds": ROUNDS, "batch": BATCH, "passes": 2, "columns": list(columns)}
    done = resume_records(out, "cuda", dtype, timing, info.get("name"), SCHEMA)
    todo = [case for case in cases(folders, grown_nnz, limit) if case.name not in done]
    started = time.perf_counter()
    for i, case in enumerate(todo, 1):
        record = spmm_record(case, case.load().astype(dtype), columns)
        record.update(device=info, timing=timing,
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat())
        append_record(out, record)
        release_device_memory("cuda")
        if progress is not None:
            elapsed = time.perf_counter() - started
            best = ", ".join(f"k={k} {min(c['times'], key=c['times'].get)}"
                             for k, c in record["columns"].items())
            print(f"[{i}/{len(todo)}, {elapsed:.0f} s, about "
                  f"{elapsed / i * (len(todo) - i):.0f} s left] {case.name}: "
                  f"{record['nnz']:,} nonzeros; fastest {best}", file=progress, flush=True)
    return out



def _band_key(key: str) -> str:
    """A record's program key as a rule names it: a tile's width (which depends on X's size and
    the GPU's L2 cache) as ``@tiled``."""
    return key.split("@")[0] + "@tiled" if "@" in key else key


def _time_of(times: dict, key: str) -> float | None:
    """A record's time for a rule's program key: a tiled program where the record timed one,
    else the same program untiled (what runs where X needs no tiles); None if neither."""
    if key.endswith("@tiled"):
        tiled = [t for k, t in times.items() if _band_key(k) == key]
        return tiled[0] if tiled else times.get(key.split("@")[0])
    return times.get(key)


def _regret(rows, key: str) -> float:
    """Σ log(t(key) / t(best)) over ``rows`` (each ``(row_mean, times)``); inf where a row lacks
    the program."""
    total = 0.0
    for _, times in rows:
        t = _time_of(times, key)
        if t is None:
            return math.inf
        total += math.log(t / min(times.values()))
    return total


def fit_choice(rows, min_side: int = MIN_SIDE) -> dict:
    """The choice for one column count fitted to ``rows`` (``(row_mean, times)`` per matrix):
    ``{"threshold": t or None, "below": key, "above": key}``, the programs that lose least
    (:func:`_regret`) on the matrices whose mean row length is below and at least ``t``; the
    threshold (a midpoint between two matrices' row means, each side at least ``min_side``
    matrices) only where two programs lose less than one."""
    keys = sorted({_band_key(k) for _, times in rows for k in times})
    def best(subset):
        return min(keys, key=lambda key: (_regret(subset, key), key))

    single = best(rows)
    choice = {"threshold": None, "below": single, "above": single}
    score = _regret(rows, single)
    ordered = sorted(rows, key=lambda row: row[0])
    for i in range(min_side, len(ordered) - min_side + 1):
        if ordered[i - 1][0] == ordered[i][0]:
            continue
        low, high = ordered[:i], ordered[i:]
        below, above = best(low), best(high)
        split = _regret(low, below) + _regret(high, above)
        if below != above and split < score - 1e-12:
            score = split
            choice = {"threshold": (ordered[i - 1][0] + ordered[i][0]) / 2, "below": below,
                      "above": above}
    return choice


def pick(choice: dict, row_mean: float) -> str:
    """The program key ``choice`` (:func:`fit_choice`) runs for a matrix of this mean row
    length."""
    threshold = choice["threshold"]
    return choice["below"] if threshold is not None and row_mean < threshold else choice["above"]


def evaluate(records) -> dict:
    """Per column count, the geometric mean over the matrices of t(best) / t(program) for: the
    choice fitted to all of them (``fitted``), the choice fitted to the others, matrix by
    matrix (``held_out``: how it does on a matrix it did not see), and the many-columns kernel
    alone (``many_columns``: what a product runs where nothing was timed); with the fitted
    choice (``choice``) and the matrices' count."""
    out = {}
    for k in sorted({int(k) for r in records for k in r["columns"]}):
        rows = [(r["features"]["row_mean"], r["columns"][str(k)]["times"])
                for r in records if str(k) in r["columns"]]
        choice = fit_choice(rows)

        def share(key_of):
            logs = [math.log(min(times.values()) / _time_of(times, key_of(i, mean)))
                    for i, (mean, times) in enumerate(rows)]
            return math.exp(sum(logs) / len(logs))

        held = [fit_choice(rows[:i] + rows[i + 1:]) if len(rows) > 1 else choice
                for i in range(len(rows))]
        out[k] = {"matrices": len(rows), "choice": choice,
                  "fitted": share(lambda i, mean: pick(choice, mean)),
                  "held_out": share(lambda i, mean: pick(held[i], mean)),
                  "many_columns": share(lambda i, mean: "many_columns")}
    return out


def report(records) -> str:
    """:func:`evaluate` as lines of text."""
    lines = [f"SpMM timings: {len(records)} matrices ({records[0]['dtype']}, "
             f"{records[0]['device'].get('name')})"]
    for k, e in evaluate(records).items():
        c = e["choice"]
        rule = (c["above"] if c["threshold"] is None else
                f"{c['below']} below a mean row length of {c['threshold']:.3g}, else {c['above']}")
        lines.append(f"k={k}: {rule}; of the best program's speed (geomean over {e['matrices']} "
                     f"matrices): fitted {e['fitted']:.3f}, held out {e['held_out']:.3f}, "
                     f"the many-columns kernel alone {e['many_columns']:.3f}")
    return "\n".join(lines)


def check_record(record, where: str) -> dict:
    """``record`` if it holds what the fit reads (a dtype, a device's name, a finite mean row
    length, and per column count above 4 the positive µs of programs a rule may name), else
    ValueError naming ``where`` it came from."""
    from autospmv._decide.model.spmm_rule import check_program

    try:
        if record["dtype"] not in ("float32", "float64") or not isinstance(record["device"],
                                                                           dict):
            raise ValueError("a dtype of float32 or float64 and a device")
        mean = record["features"]["row_mean"]
        if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not (
                math.isfinite(mean) and mean >= 0):
            raise ValueError(f"a finite mean row length (found {mean!r})")
        if not isinstance(record["columns"], dict) or not record["columns"]:
            raise ValueError("timed column counts")
        for k, columns in record["columns"].items():
            if not str(k).isdigit() or int(k) <= 4:
                raise ValueError(f"column counts above 4 (found {k!r})")
            times = columns["times"]
            if not isinstance(times, dict) or not times:
                raise ValueError(f"the programs' times at k={k}")
            for key, value in times.items():
                check_program(_band_key(str(key)))
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                        math.isfinite(value) and value > 0):
                    raise ValueError(f"positive times (found {value!r} for {key} at k={k})")
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{where}: a record lacks what the SpMM fit reads ({err!r})") from None
    except ValueError as err:
        raise ValueError(f"{where}: a record needs {err}") from None
    return record


def read_labels(paths) -> list[dict]:
    """The records of the SpMM label files ``paths`` (one device and dtype), checked
    (:func:`check_record`), or ValueError."""
    records = [check_record(r, str(path)) for path in paths
               for r in read_records(Path(path), SCHEMA)]
    if not records:
        raise ValueError("the SpMM label files hold no records")
    return records


CHOICE_NOTE = (r"multi-vector products of (\d+) columns \((\w+) X, \w+ Y\) run (.+) "
               r"\(([^;]+) µs; (.+)\), timed at the first one$")
"""The form of the note the first product of k columns writes
(:func:`autospmv.kernels.cuda.spmm_programs.timed_choice_note`)."""


def choice_note_times(note: str) -> tuple[int, str, dict[str, float]] | None:
    """``(k, X's dtype, {program key: µs})`` from the note the first product of k columns
    writes on the programs it timed (:func:`program_key` names them); None for another note."""
    import re

    from autospmv.kernels.cuda.spmm_programs import PROGRAMS, TILED, program_name

    match = re.match(CHOICE_NOTE, note or "")
    if match is None:
        return None
    k = int(match.group(1))
    names = {program_name(p, k): p for p in PROGRAMS}
    names.update({program_name(p, k, tile): program_key((p, tile))
                  for p in TILED for tile in range(1, k + 1)})
    listed = [(match.group(3), match.group(4))] + [
        tuple(part.rsplit(" ", 2)[:2]) for part in match.group(5).split(", ")]
    return k, match.group(2), {names[name]: float(value) for name, value in listed}


def benchmark_records(path, dtype: str) -> list[dict]:
    """Records for :func:`fit_spmm_rule` from the SpMM benchmark's results file
    (``benchmarks/spmm.py``): the times of every program that the first product of k columns
    timed and kept the fastest of, as each record's ``choice`` note lists them
    (:func:`choice_note_times`; three interleaved batches of three products each: shorter than
    the labels' timings, so noisier), for the records of ``dtype``; a matrix's column counts
    from every run of the file are merged. Runs that timed fewer programs than this autospmv
    has for k are left out."""
    import json

    from autospmv.kernels.cuda.spmm_programs import programs_for

    doc = json.loads(Path(path).read_text())
    try:
        runs = list(doc["runs"].values()) if "runs" in doc else [doc]
        records = [(run, record) for run in runs for record in run["records"]]
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"{path} is not a results file of benchmarks/spmm.py (no runs with "
                         "records)") from None
    merged = {}
    for run, record in records:
        try:
            timed = choice_note_times(record.get("choice"))
            if record["dtype"] != dtype or timed is None:
                continue
            k, _, times = timed
            if not {program_key(c) for c in programs_for(k) if not c[1]} <= set(times):
                continue
            entry = merged.setdefault((record["matrix"], record["nnz"]), {
                "name": f"{record['matrix']}@{size_tag(record['nnz'])}", "source": str(path),
                "shape": record["shape"], "nnz": record["nnz"], "dtype": dtype,
                "device": {"name": run["device"].get("gpu", "")},
                "features": {"row_mean": record["nnz"] / max(record["shape"][0], 1)},
                "columns": {}})
        except (KeyError, TypeError, AttributeError, IndexError) as err:
            raise ValueError(f"{path}: a record of the benchmark lacks {err!r}") from None
        entry["columns"][str(k)] = {"times": times}
    if not merged:
        raise ValueError(f"{path} has no {dtype} records with timed programs")
    return [check_record(entry, str(path)) for entry in merged.values()]


def fit_spmm_rule(records) -> Fit:
    """Fit the SpMM rule to ``records`` (:func:`read_labels` or :func:`benchmark_records`; one
    device and dtype): a choice per labelled column count (:func:`fit_choice`), evaluated
    (:func:`evaluate`) and guarded: the guard passes where the rule, fitted to the other
    matrices, beats the many-columns kernel alone on the held-out matrix in geometric mean at
    every column count."""
    kinds = {(r["device"].get("name"), r["dtype"]) for r in records}
    if len(kinds) > 1:
        raise ValueError("the SpMM records mix devices or dtypes: "
                         + ", ".join(f"{d} {t}" for d, t in sorted(kinds)))
    evaluation = evaluate(records)
    choices = tuple(SpmmChoice(k, e["choice"]["threshold"], e["choice"]["below"],
                               e["choice"]["above"]) for k, e in evaluation.items())
    rule = SpmmRule(choices, labels=sum(e["matrices"] for e in evaluation.values()))
    losing = [k for k, e in evaluation.items() if e["held_out"] < e["many_columns"]]
    passed = not losing
    reason = ("held out, the rule beats the many-columns kernel alone at every column count"
              if passed else "held out, the rule loses to the many-columns kernel alone at "
              + ", ".join(f"k={k}" for k in losing))
    return Fit(rule, report(records) + ("\nguard passed: " if passed else "\nguard failed: ")
               + reason, passed, reason)
