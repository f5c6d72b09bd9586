"""autospmv's command line: demo, explain, bench, info, models, warmup and retrain.

Run as ``python -m autospmv`` or ``autospmv`` (the installed entry point).

``explain`` and ``bench`` take ``--model FILE`` to decide with a model file instead of the one
found for the device (see :func:`autospmv._decide.model.lookup.find_model`); ``info`` says which
model that is and why. ``retrain`` runs ``python -m autospmv.training retrain`` with the same
options; ``models`` lists the models it installed beside the shipped ones, and ``models --remove``
deletes them.

``demo`` and ``bench`` time with autospmv's one timer (:mod:`autospmv._support.timing`, the
labeller's): ``bench``'s rows, every kernel and the baseline (SciPy's ``A @ x`` on the CPU,
cuSPARSE's through CuPy on the GPU), are timed together by one
:class:`autospmv._support.timing.Bench` on the same vectors, in the same interleaved rounds: each
row's "µs per call" is its per-call median (one synchronised call between two readings of the
device's clock; the kernels fill ``out=``, the baseline allocates its result, as it does in use).
``demo``'s figures and ``select()`` are timed per call on the same clocks
(:func:`autospmv._support.timing.time_calls`).

User mistakes (a missing or unreadable file, an unknown kernel, a damaged model) end with a
one-line error and exit status 2, not a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import Decision, prepare, select
from . import _registry as registry
from ._decide import selection as selector
from ._decide.model import lookup
from ._decide.model.store import (
    device_slug, split_stem, user_data_dir, user_model_path, written_name,
)
from ._support import devices, timing
from ._support.devices import DEVICES
from ._support.threads import requested_threads
from ._support.validation import SUPPORTED_DTYPES, canonicalize, load_matrix_file
from ._tools import glossary
from ._tools.cli_checks import OneLineParser, bounded
from ._tools.examples import demo_matrices
from .formats.base import FormatTooLargeError


class UserError(Exception):
    """A mistake in the command line or its input files: reported without a traceback."""


def load_matrix(path: str) -> sp.csr_matrix:
    """Read a ``.npz`` (scipy.sparse.save_npz) or ``.mtx`` (Matrix Market) file as canonical
    CSR (:func:`autospmv._support.validation.load_matrix_file` checks it before anything converts it)."""
    try:
        A = load_matrix_file(path)
    except ValueError as error:
        raise UserError(str(error)) from None
    try:
        return canonicalize(A)
    except (ValueError, TypeError) as error:  # reported in one line, with the file
        raise UserError(f"cannot read a sparse matrix from {path}: {error}") from None


def resolve_device(requested: str | None) -> str:
    """The device a command runs on: ``requested``, else CUDA when a usable GPU is present."""
    if requested == "cuda" and not devices.cuda_available():
        raise UserError("--device cuda was given but no usable CUDA GPU was found")
    return requested or devices.default_device()


def resolve_model(device: str, model: str | None = None,
                  dtype: str = "float64") -> lookup.ModelChoice | None:
    """:func:`find_model` for ``device`` and matrices of ``dtype``, a damaged or missing model
    file being a user error."""
    try:
        return lookup.find_model(device, model, dtype)
    except ValueError as error:
        raise UserError(f"bad model for {device}: {error}") from None


def describe_model(device: str, model: str | None = None, dtype: str = "float64") -> str:
    """One line: the model that decides on ``device`` for ``dtype`` matrices (file, why, where
    it was trained, which dtype it is for), or that the built-in rule decides."""
    choice = resolve_model(device, model, dtype)
    if choice is None:
        shipped = ", ".join(sorted(lookup.shipped_models())) or "none"
        return (f"model: none for {device_slug(device)} {dtype} (shipped: {shipped}), so the "
                f"built-in rule decides: {selector.rule_summary(device)}; `autospmv retrain` "
                "trains a model for this machine")
    return (f"model: {choice.path or choice.name} ({choice.reason}"
            f"{selector.trained_on(choice.model.provenance)}); a {choice.dtype} model, "
            f"deciding for {dtype} matrices")


def time_per_call(fn, budget: float = 0.2, device: str = "cpu") -> float:
    """Median seconds per call of ``fn`` on ``device``'s clock, synchronised after each call on
    CUDA (:func:`autospmv._support.timing.time_calls`: a warm-up call, then at least five samples and
    ``budget`` seconds)."""
    return timing.time_calls(fn, device, budget)["median"] * 1e-6


CLI_TIMING = timing.TimingOptions(warmup=1, repeats=1_000_000, min_repeats=5, max_seconds=0.2,
                                  b2b_calls=1, b2b_repeats=1, vectors=1, retries=0, rounds=1)
"""``bench``'s per-kernel timing: per-call samples for about 0.2 s (at least five) on one pair of
vectors, a single back-to-back call (not printed), no re-timing: a quick look at one matrix,
where the labeller's defaults would take seconds per kernel."""


def check_thread_setting() -> None:
    """A user error for an ``AUTOSPMV_NUM_THREADS`` that is no positive integer, before a
    command that runs products starts."""
    try:
        requested_threads()
    except ValueError as error:
        raise UserError(str(error)) from None


def cmd_demo(args) -> None:
    check_thread_setting()
    device = devices.default_device()
    resolve_model(device)
    baseline = "cuSPARSE (CuPy)" if device == "cuda" else "SciPy"
    print(f"autospmv demo on {device}; baseline: {baseline}\n")
    for name, A in demo_matrices().items():
        A = canonicalize(A)
        op = prepare(A, device=device)
        x = np.random.default_rng(0).standard_normal(A.shape[1])
        error = timing.relative_error(op @ x, A @ x)
        ours, theirs = _demo_timings(op, A, x, device)
        print(f"{name}: {A.shape[0]}×{A.shape[1]}, {A.nnz:,} nonzeros")
        print("  " + op.explain().replace("\n", "\n  "))
        print(f"  {ours * 1e6:9.1f} µs per call vs {baseline} {theirs * 1e6:9.1f} µs "
              f"({theirs / ours:.2f}×), relative error {error:.1e}\n")


def _demo_timings(op, A, x, device):
    """Seconds per call of ``op`` and of the baseline (SciPy's ``A @ x``, or cuSPARSE's
    through CuPy: NaN without CuPy), the per-call medians of :data:`DEMO_REPEATS`
    measurements of the two together, interleaved (:class:`autospmv._support.timing.Bench`, as
    ``bench`` times its rows), so that a change in the machine's load hits both alike."""
    bench = timing.Bench(device, x.astype(op.dtype), A.shape[0], CLI_TIMING)
    bench.result(op)
    _, product = baseline(A, device, bench.xs)
    rows = {"autospmv": op} if product is None else {"autospmv": op, "baseline": product}
    seconds = bench_repeats(bench, rows, DEMO_REPEATS)
    return (float(np.median(seconds["autospmv"])),
            float(np.median(seconds["baseline"])) if product is not None else float("nan"))


DEMO_REPEATS = 3
"""Measurements of the operator and the baseline per demo matrix (about 0.4 s each)."""


def cmd_explain(args) -> None:
    """The decision for a matrix file on a device, as :func:`autospmv.select` makes it: deciding
    needs no GPU, so ``--device cuda`` works on any machine (nothing runs)."""
    A = load_matrix(args.file)
    device = args.device or devices.default_device()
    line = describe_model(device, args.model, A.dtype.name)
    decision = select(A, device=device, model=args.model)
    where = f"on {device}"
    if device == "cuda" and not devices.cuda_available():
        where += (" (no usable GPU here: decided as autospmv.select(A, device='cuda') does; "
                  "nothing runs)")
    print(f"{args.file}: {A.shape[0]}×{A.shape[1]}, {A.nnz:,} nonzeros, {where}")
    print(line)
    print(without_model_note(decision).explain())
    names = list(dict.fromkeys(step.split(" = ")[0] for step in decision.path))
    names = [name for name in names if name in decision.features]
    if names:
        print("features on the path:")
        width = max(len(name) for name in names)
        for name in names:
            print(f"  {name:<{width}} = {decision.features[name]:<10.4g} "
                  f"{glossary.describe(name)}")


def without_model_note(decision: Decision) -> Decision:
    """``decision`` without its first note, which names the model (or says that the built-in
    rule decided): the ``model:`` line printed above it says that already."""
    if decision.source == "forced":
        return decision
    return dataclasses.replace(decision, notes=decision.notes[1:])


class Baseline:
    """Another library's product as :class:`autospmv._support.timing.Bench` times an operator:
    ``matvec(x, out)`` returns ``product(x)`` and leaves ``out`` alone (the library allocates
    its result, as it does in use)."""

    def __init__(self, product):
        self.product = product

    def matvec(self, x, out=None):
        return self.product(x)


def baseline(A, device: str, vectors: list):
    """(row name, :class:`Baseline`) of the library ``bench`` compares with on ``device``:
    SciPy's CSR product on the CPU; on CUDA, cuSPARSE's through CuPy over ``vectors`` (the
    bench's device vectors, viewed as CuPy arrays once), or None for it without CuPy."""
    if device == "cpu":
        return "SciPy", Baseline(lambda x: A @ x)
    try:
        import cupy
        import cupyx.scipy.sparse as csp
    except ImportError:
        return "cuSPARSE", None
    M = csp.csr_matrix(A)
    views = {id(v): cupy.asarray(v) for v in vectors}
    return "cuSPARSE", Baseline(lambda x: M @ views[id(x)])


def cmd_bench(args) -> None:
    check_thread_setting()
    A = load_matrix(args.file)
    device = resolve_device(args.device)
    resolve_model(device, args.model)
    x = np.random.default_rng(0).standard_normal(A.shape[1]).astype(A.dtype)
    print(f"{args.file}: {A.shape[0]}×{A.shape[1]}, {A.nnz:,} nonzeros, {A.dtype}, on {device}")
    bench = timing.Bench(device, x, A.shape[0], CLI_TIMING)
    rows = {}
    for kernel in registry.names():
        try:
            op = prepare(A, kernel=kernel, device=device)
        except FormatTooLargeError as error:
            print(f"  {kernel:11s}  not feasible: {error}")
            continue
        bench.result(op)  # compiled (or loaded) first, so the warm-up estimates one call
        rows[kernel] = op
    name, product = baseline(A, device, bench.xs)
    if product is None:
        print(f"  {name:11s}  not timed: CuPy is not installed")
    else:
        rows[name] = product
    repeats = bench_repeats(bench, rows, args.repeats)
    times = {row: float(np.median(seconds)) for row, seconds in repeats.items()}
    print(f"  {'':11s} {'median':>10s}  {'min':>8s}  {'max':>8s}  µs per call over "
          f"{args.repeats} repeats")
    for row in rows:
        print(f"  {row:11s} {times[row] * 1e6:10.1f}  {min(repeats[row]) * 1e6:8.1f}  "
              f"{max(repeats[row]) * 1e6:8.1f}")
    # Timed after every kernel and the feature extractor have run once, so that it excludes
    # one-off JIT compilation (or loading it from numba's cache).
    select(A, device=device, model=args.model)
    select_s = time_per_call(lambda: select(A, device=device, model=args.model), 0.5)
    host = timing.clock("cpu")
    host.start()
    picked = prepare(A, device=device, model=args.model)
    prepare_s = host.stop() * 1e-6
    kernels = [kernel for kernel in rows if kernel in registry.names()]
    best = min(kernels, key=times.get)
    spmv_s = times[picked.kernel]
    line = (f"picked {picked.kernel} ({spmv_s * 1e6:.1f} µs), best {best} "
            f"({times[best] * 1e6:.1f} µs): quality {times[best] / spmv_s:.3f}")
    if name in times:
        ratios = [theirs / ours for theirs, ours in zip(repeats[name], repeats[picked.kernel])]
        line += (f"; {times[name] / spmv_s:.2f}× {name}'s speed (per repeat "
                 f"{min(ratios):.2f}–{max(ratios):.2f}×)")
    print(line)
    scipy_s = times.get("SciPy") or timing.time_calls(lambda: A @ x)["median"] * 1e-6
    print(f"deciding (features and prediction, select()) took {select_s * 1e3:.2f} ms = "
          f"{select_s / scipy_s:.1f}× SciPy's A @ x on the CPU ({scipy_s * 1e3:.2f} ms) = "
          f"{select_s / spmv_s:.0f} SpMVs of {picked.kernel}")
    stored = registry.get(picked.kernel).format_class().name
    print(f"prepare() in all (deciding, conversion to {stored}, set-up) took "
          f"{prepare_s * 1e3:.2f} ms = {prepare_s / spmv_s:.0f} SpMVs of {picked.kernel}")


def bench_repeats(bench, rows: dict, repeats: int) -> dict[str, list[float]]:
    """Each row's per-call median (seconds) in each of ``repeats`` measurements of all rows
    together (:meth:`autospmv._support.timing.Bench.time_all`): the spread between repeats is what
    a second run of ``bench`` would show."""
    seconds = {row: [] for row in rows}
    for _ in range(repeats):
        for row, measured in bench.time_all(rows).items():
            if isinstance(measured, Exception):
                raise measured
            seconds[row].append(measured["per_call"]["median"] * 1e-6)
    return seconds


def cmd_bench_solvers(options: list[str]) -> int:
    """Run the solver benchmark (:mod:`autospmv._tools.bench_solvers`) with ``options``."""
    from ._tools.bench_solvers import main as bench_solvers

    return bench_solvers(options)


def cmd_info(args) -> None:
    import numba

    import autospmv

    print(f"autospmv {autospmv.__version__}, numba {numba.__version__}, numpy {np.__version__}")
    if devices.cuda_available():
        if devices.cuda_simulator():
            print("device: CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
        else:
            from numba import cuda

            dev = cuda.get_current_device()
            print(f"device: cuda, {dev.name}, compute capability {dev.compute_capability}")
    else:
        print("device: cpu (no usable CUDA GPU found)")
    for dtype in ("float64", "float32"):
        print(describe_model(devices.default_device(), dtype=dtype))
        rejected = last_rejected(devices.default_device(), dtype)
        if rejected:
            print(rejected)
    print(f"kernels: {', '.join(registry.names())}")
    from ._support.cache import configure

    state = configure()
    print(f"compiled-code cache: {state.path} ({state.source})")


def last_rejected(device: str, dtype: str) -> str | None:
    """One line on the last ``retrain`` for ``device`` and ``dtype`` that installed no model
    (its ``<model>.rejected.md``: when, and why), or None when there is none."""
    try:
        path = user_model_path(device_slug(device), dtype).with_suffix(".rejected.md")
        with open(path, encoding="utf-8", errors="replace") as report:
            first = report.readline(2000).strip()
        when = datetime.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M")
    except (OSError, ValueError):
        return None
    reason = first.removeprefix("Not installed: ") if first.startswith("Not installed: ") \
        else "the install guard rejected its model"
    return f"last retrain for {dtype} ({when}) installed nothing: {reason} (report: {path})"


def cmd_warmup(args) -> None:
    from ._support.cache import configure
    from ._tools.warmup import warmup

    device = resolve_device(args.device)
    state = configure()
    print(f"compiling for {device} into {state.path} ({state.source})", flush=True)

    def report(step):
        status = f"  FAILED: {step.error}" if step.error else ""
        print(f"{step.name:36s} {step.seconds * 1e3:9.1f} ms  (numba {step.compile_seconds * 1e3:9.1f}"
              f" ms){status}", flush=True)

    steps = warmup(device, args.dtype or ("float32", "float64"), progress=report)
    total = sum(step.seconds for step in steps)
    compiled = sum(step.compile_seconds for step in steps)
    print(f"{'total':36s} {total * 1e3:9.1f} ms  (numba {compiled * 1e3:9.1f} ms)")
    failed = [step.name for step in steps if step.error]
    if failed:
        raise UserError(f"warm-up failed for {', '.join(failed)}")


def cmd_models(args) -> None:
    """List the shipped and installed models and the one used for each device and dtype, or
    (``--remove``) delete installed models so that the shipped ones decide again."""
    try:
        user_data_dir()
    except ValueError as error:  # AUTOSPMV_HOME names no folder: said in one line
        raise UserError(str(error)) from None
    if args.remove is not None:
        remove_installed(args.remove, labels=args.labels)
        print()
    shipped, installed = lookup.shipped_models(), lookup.installed_models()
    folders = sorted({str(path.parent) for path in shipped.values()})
    print(f"shipped with autospmv ({', '.join(folders) or 'none'}):")
    for slug, path in sorted(shipped.items()):
        print(f"  {slug}.json{_trained(path)}")
    print(f"installed by `autospmv retrain` ({user_data_dir() / 'models'}):")
    for slug, path in installed.items():
        print(f"  {slug}.json{_trained(path)}")
    if not installed:
        print("  none")
    print("used on this machine (the first of: model=, $AUTOSPMV_MODEL, installed, shipped for "
          "this device, nearest shipped of the same kind):")
    for device, dtype, choice in models_in_use():
        used = (f"{choice.path} ({choice.reason})" if choice is not None
                else "none: the built-in rule decides")
        print(f"  {device:<4} {dtype:<7} {used}")


def models_in_use() -> list[tuple[str, str, lookup.ModelChoice | None]]:
    """(device, dtype, the model that decides there) for every device and dtype (a device
    without a model for one dtype uses its other dtype's model: see :func:`find_model`)."""
    return [(device, dtype.name, resolve_model(device, dtype=dtype.name))
            for device in DEVICES for dtype in SUPPORTED_DTYPES]


def _trained(path) -> str:
    """``" (trained on …)"`` for a model file, or why it cannot be read."""
    try:
        return " (" + selector.trained_on(lookup.load_model(path).provenance)[2:] + ")"
    except ValueError as error:
        return f" (unreadable: {error})"


MODEL_SUFFIXES = (".json", ".md", ".rejected.md")
"""The files ``retrain`` writes per model in the models folder: the model, its report, and the
report of a run that installed none."""

LABEL_SUFFIXES = (".jsonl", ".jsonl.gz")
"""The label files ``retrain`` writes per model in the labels folder (``.lock`` beside each
while a run holds it)."""

LOCKED_LABEL_SUFFIXES = LABEL_SUFFIXES + tuple(suffix + ".lock" for suffix in LABEL_SUFFIXES)

def written_stems(folder: Path, suffixes) -> set[str]:
    """The stems of the files in ``folder`` that ``retrain`` could have written (a
    :func:`~autospmv._decide.model.store.written_name` with one of ``suffixes``; regular files or links, never folders),
    listed without following links out of it."""
    stems = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder (nothing installed yet), or one that cannot be read
        return stems
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            continue
        for suffix in suffixes:
            stem = entry.name.removesuffix(suffix)
            if entry.name.endswith(suffix) and written_name(stem):
                stems.add(stem)
    return stems


def resolve_removal(names: list[str], stems: set[str]) -> list[str]:
    """The model stems that ``models --remove NAME…`` removes: a name is a stem itself
    (``cpu-amd-epyc-7b13-float64``) or a device (``cpu-amd-epyc-7b13``: both its dtypes),
    exactly; all of ``stems`` when no name is given.

    Raises
    ------
    UserError
        For a name that is neither, listing the stems that start with it (a prefix is refused,
        never widened) or, when none does, the stems there are.
    """
    if not names:
        return sorted(stems)
    chosen = []
    for name in names:
        name = name.removesuffix(".json")
        exact = [stem for stem in sorted(stems) if stem == name or split_stem(stem)[0] == name]
        if not exact:
            near = sorted(stem for stem in stems if stem.startswith(name))
            if near:
                raise UserError(f"{name!r} is not the exact name of an installed model or its "
                                f"device; names starting with it: {', '.join(near)}; name one "
                                "of them (or its device) exactly")
            raise UserError(f"no installed model {name}; installed: "
                            f"{', '.join(sorted(stems)) or 'none'}")
        chosen += [stem for stem in exact if stem not in chosen]
    return chosen


def remove_installed(names: list[str], labels: bool = False) -> None:
    """Undo ``autospmv retrain``: delete the installed models named by ``names`` (see
    :func:`resolve_removal`; all when empty) with their reports (also those of runs that
    installed no model) and, with ``labels``, their label files and locks.

    Only files named as ``retrain`` names them are deleted
    (:func:`~autospmv._decide.model.store.written_name`, the model's exact stem); a link among them is removed itself, never what it points to, and a
    label file is removed under its lock (waiting for a retrain that holds it).

    Raises
    ------
    UserError
        For a name that is not exact (see :func:`resolve_removal`).
    """
    from ._decide.model.store import labels_lock

    models, label_dir = user_data_dir() / "models", user_data_dir() / "labels"
    stems = written_stems(models, MODEL_SUFFIXES)
    if labels:
        stems |= written_stems(label_dir, LOCKED_LABEL_SUFFIXES)
    chosen = resolve_removal(names, stems)
    removed = [models / f"{stem}{suffix}" for stem in chosen for suffix in MODEL_SUFFIXES
               if _remove(models / f"{stem}{suffix}")]
    if labels:
        for stem in chosen:
            for suffix in LABEL_SUFFIXES:
                path = label_dir / f"{stem}{suffix}"
                lock = path.with_name(path.name + ".lock")
                had_lock = os.path.lexists(lock)
                if os.path.lexists(path) or had_lock:
                    with labels_lock(path):  # waits for a retrain; the lock goes at the end
                        removed += [path] if _remove(path) else []
                    removed += [lock] if had_lock and not os.path.lexists(lock) else []
    for file in removed:
        print(f"removed {file}")
    if not removed:
        print(f"nothing to remove in {user_data_dir()}")
    kept = sorted(written_stems(label_dir, LOCKED_LABEL_SUFFIXES))
    if kept:
        print(f"kept the labels of {', '.join(kept)} in {label_dir}: a later retrain resumes "
              "from them (`autospmv retrain --fresh` starts over; `autospmv models --remove "
              "NAME --labels` deletes them)")


def _remove(path: Path) -> bool:
    """Delete the file or link ``path`` (never a folder); False when there is none."""
    try:
        if path.is_dir() and not path.is_symlink():
            return False
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def cmd_retrain(options: list[str]) -> int:
    """Run ``python -m autospmv.training retrain`` with ``options``."""
    from .training.__main__ import main as training_main

    return training_main(["retrain", *options], prog="autospmv")


MATRIX_FILE_HELP = "the matrix: a .npz file (scipy.sparse.save_npz) or a .mtx file (Matrix Market)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="autospmv", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True,
                                help="what to do (`autospmv COMMAND --help` describes each)")

    def command(name: str, summary: str, **options):
        return sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:],
                              **options)

    command("demo", "prepare four generated matrices on this machine's device (the GPU when "
                    "usable) and show each decision, its explanation and the time per product "
                    "against SciPy's (or cuSPARSE's on the GPU); takes no options")
    p = command("explain", "show the decision for a matrix file (.npz or .mtx): the model, the "
                           "path through the tree, feature values")
    p.add_argument("file", help=MATRIX_FILE_HELP)
    p.add_argument("--device", choices=["cuda", "cpu"],
                   help="decide for this device (default: cuda when usable, else cpu)")
    p.add_argument("--model", metavar="FILE", help="decide with this model file")
    p = command("bench", "time every kernel on a matrix file on this device, with min, median "
                         "and max over the repeats")
    p.add_argument("file", help=MATRIX_FILE_HELP)
    p.add_argument("--solver", action="store_true",
                   help="instead: SciPy solvers with the operator against the SciPy matrix on "
                        "generated matrices or --matrices DIR (takes its options, no file; "
                        "`autospmv bench --solver --help` lists them)")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   help="run on this device (default: cuda when usable, else cpu)")
    p.add_argument("--model", metavar="FILE", help="decide with this model file")
    p.add_argument("--repeats", type=bounded(int, 1, 100), default=5,
                   help="measurements of all the kernels together, each about 0.2 s per "
                        "kernel, 1 to 100 (default: %(default)s); the table shows the median, "
                        "min and max of their per-call medians")
    command("info", "device, versions, the model in use and kernels, and the last retrain "
                    "whose model was not installed")
    p = command("models", "list the shipped and installed models and which one decides for "
                          "each device and dtype")
    p.add_argument("--remove", nargs="*", metavar="NAME",
                   help="undo `autospmv retrain`: delete the installed models named (a device, "
                        "such as cpu-amd-epyc-7b13, for both dtypes, or a model file's name, "
                        "such as cpu-amd-epyc-7b13-float64; exact names only; all when none is "
                        "named) with their reports, so that the shipped models decide again")
    p.add_argument("--labels", action="store_true",
                   help="with --remove: also delete those models' labels (a later retrain "
                        "then starts over)")
    p = command("warmup", "compile every kernel and conversion for this machine into the "
                          "on-disk cache, and report the time per kernel")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   help="compile for this device (default: cuda when usable, else cpu)")
    p.add_argument("--dtype", choices=["float32", "float64"], action="append",
                   help="value dtype to compile for (repeatable; default: both)")
    sub.add_parser("retrain", add_help=False,
                   help="label this machine's device, train and install a model (python -m "
                        "autospmv.training retrain; `autospmv retrain --help` lists its options)")
    return parser


COMMANDS = {"demo": cmd_demo, "explain": cmd_explain, "bench": cmd_bench, "info": cmd_info,
            "models": cmd_models, "warmup": cmd_warmup}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["retrain"]:  # every option belongs to the training pipeline's parser
        command, run = "retrain", lambda: cmd_retrain(argv[1:])
    elif argv[:1] == ["bench"] and "--solver" in argv:  # options belong to the solver benchmark
        command, run = "bench", lambda: cmd_bench_solvers([a for a in argv[1:] if a != "--solver"])
    else:
        args = build_parser().parse_args(argv)
        command, run = args.command, lambda: COMMANDS[args.command](args)
    try:
        status = run() or 0
        sys.stdout.flush()  # a reader that went away shows here, not at the exit's flush
        return status
    except (UserError, MemoryError) as error:
        print(f"autospmv {command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return reader_gone()
    except OSError as error:  # a file the command writes or reads that the system refuses
        where = f" ({str(error.filename)[:200]})" if error.filename else ""
        print(f"autospmv {command}: error: {error.strerror or error}{where}", file=sys.stderr)
        return 2


def reader_gone() -> int:
    """Stop quietly when the reader of stdout has gone (``autospmv info | head``), as
    command-line tools do, rather than with a traceback: stdout is pointed at the null device,
    so that Python's flush at exit meets no closed pipe either. Returns 141, the status of a
    tool stopped by the closed pipe (128 + SIGPIPE)."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141


if __name__ == "__main__":
    sys.exit(main())
