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
* the matrix's row-length features (:func:`row_features`), from which a rule of which program
  to run (a per-band choice) can be fitted.

Records are JSON lines of schema :data:`SCHEMA`, resumable like the kernel labels. A GPU is
required: the programs are CUDA kernels.

    python -m autospmv.training label-spmm --matrices DIR --dtype float64 --grown-nnz 4e6 \\
        --columns 8 16 32 64 --out spmm-labels.jsonl
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import autospmv
from autospmv._support.timing import relative_error, release_device_memory
from autospmv._support.validation import canonicalize
from .corpus import folder_entries, grow, load_file, size_tag
from .records import append_record, resume_records
from .timing import TOLERANCE, device_info, require_real_gpu

SCHEMA = "spmm-labels-1"
"""The layout of an SpMM label record (see the module docstring)."""

COLUMNS = (8, 16, 32, 64)
"""The column counts labelled by default: one within the passes' and eight-columns kernel's
range, and three powers of two up to the widest untiled product on most matrices."""

MIN_NNZ = 1000
"""Smallest matrix labelled (before growing)."""

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
    """The matrices of ``folders`` (:func:`training.corpus.folder_entries`) of at least
    :data:`MIN_NNZ` nonzeros, each grown to each of ``grown_nnz`` (at least as given);
    ``limit``: at most this many files, spread over sizes."""
    files = []
    for folder in folders:
        for entry in folder_entries(folder):
            A = entry.load()
            if A.nnz >= MIN_NNZ:
                files.append((entry, A.nnz))
    files.sort(key=lambda item: item[1])
    if limit is not None and limit < len(files):
        step = len(files) / max(limit, 1)
        files = [files[int(i * step)] for i in range(limit)]
    return [Case(f"{entry.name}@{size_tag(max(1, round(target / nnz)) * nnz)}", entry.source,
                 max(1, round(target / nnz)))
            for entry, nnz in files for target in grown_nnz]


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
    built = [multi._build(k, dtype, dtype, candidate) for candidate in candidates]
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
    op = autospmv.prepare(csr, device="cuda", order="keep")
    return {
        "schema": SCHEMA, "name": case.name, "source": case.source, "copies": case.copies,
        "shape": list(csr.shape), "nnz": int(csr.nnz), "dtype": csr.dtype.name,
        "kernel": op.kernel, "features": row_features(csr),
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

