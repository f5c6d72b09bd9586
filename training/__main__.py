"""Command line of the training pipeline.

::

    python -m autospmv.training corpus  [--corpus default] [--matrices DIR ...]
    python -m autospmv.training label   --corpus default --device cuda --out labels.jsonl[.gz]
                                        [--budget-minutes 15] [--matrices DIR ...]
                                        [--dtype float64]
    python -m autospmv.training train   labels.jsonl[.gz] [...] --out model.json
                                        [--report report.md] [--timing auto|per_call|b2b]
                                        [--objectives correction ...] [--repeats 3]
                                        [--holdout FILE]
    python -m autospmv.training retrain [--device cuda|cpu] [--budget-minutes N]
                                        [--dtype float64] [--fresh]
    python -m autospmv.training label-orders --matrices DIR ... --out order-labels.jsonl
                                        [--device cuda] [--dtype float64]
                                        [--grown-nnz 1e6 1e7] [--limit N]
    python -m autospmv.training fit-orders order-labels.jsonl [...] [--model model.json ...]
    python -m autospmv.training label-spmm --matrices DIR ... --out spmm-labels.jsonl
                                        [--dtype float64] [--grown-nnz 4e6]
                                        [--columns 8 16 32 64] [--limit N]
    python -m autospmv.training fit-spmm spmm-labels.jsonl [...] [--model model.json ...]
    python -m autospmv.training fit-spmm --benchmark spmm-h200.json --dtype float32 [--model ...]

``retrain`` labels a corpus sized for this machine's device within the time budget (default
15 minutes on a GPU with the ``default`` corpus, 30 minutes on the CPU with ``small``), trains,
prints the report and installs the model where autospmv looks for it
(:func:`autospmv._decide.model.store.user_model_path`: ``<device>-<dtype>.json``, so a float32
retrain never replaces the float64 model), but only if its cross-validated score beats the best
fixed kernel on the same labels (:func:`.train.guard`); otherwise the previous model stays and the
reason is printed. The labels are kept in the same per-user folder
(``labels/<device>-<dtype>.jsonl``), so an interrupted retrain continues where it stopped;
``--fresh`` deletes them first and starts over. Labels timed with other options (``--quick``)
are refused rather than mixed in.
``label-orders`` times the product in A's own order and in the bfs order on the square matrices
of ``--matrices``, as given and numbered at random; ``fit-orders`` fits the order's cost rule to
those labels, prints how its decisions meet them (and the built-in rule's), and with
``--model`` writes it into model files (:mod:`training.order_labels`).
``label-spmm`` checks and times every multi-vector program for a few column counts on the GPU;
``fit-spmm`` fits the program each band of column counts runs where none can be timed, and with
``--model`` writes it into model files (:mod:`training.spmm_labels`).
``--matrices`` defaults to the folders in ``$AUTOSPMV_MATRICES`` (separated by ``os.pathsep``).
Label files are JSON lines, gzip-compressed when their name ends in ``.gz``.
Data goes to files or stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path

from .forecast import Forecast

RETRAIN = {"cuda": ("kinds", 15.0), "cpu": ("small", 30.0)}
"""Corpus preset and default labelling budget (minutes) of ``retrain`` per device. On a GPU it
is the shipped models' own corpus: the real matrices of ``--matrices`` grown by the ``kinds``
preset, with its synthetic families."""


def _default_folders() -> list[str]:
    return [p for p in os.environ.get("AUTOSPMV_MATRICES", "").split(os.pathsep) if p]


def _default_device() -> str:
    """The device to label and train for when none is named: CUDA on a real GPU, else the CPU
    (under numba-cuda's simulator too, whose times would be an interpreter's)."""
    from autospmv._support.devices import real_gpu_available

    return "cuda" if real_gpu_available() else "cpu"


HOLDOUT_HELP = ("file listing held-out matrices (one name a line; a real file's name holds out "
                "its grown copies too): never trained or tuned on, scored separately")

TRAINING_EXTRA = ("tqdm",)
"""The modules the ``training`` extra installs (``pip install 'autospmv[training]'``), which a
command reports as missing in one line instead of a traceback."""


def _parser(prog: str = "python -m autospmv.training") -> argparse.ArgumentParser:
    from .corpus import PRESETS
    from .crossval import DEFAULT_OBJECTIVES, REPEATS
    from .fitting import OBJECTIVES
    from .records import TRAINING_MODES
    from autospmv._tools.cli_checks import OneLineParser, bounded

    parser = OneLineParser(prog=prog, description=(
        "Label matrices with every kernel's time, train the kernel-selection tree, export it."))
    commands = parser.add_subparsers(dest="command", required=True,
                                     help="the step to run (each takes --help)")

    def corpus_options(p):
        p.add_argument("--corpus", choices=tuple(PRESETS), default="default",
                       help="synthetic corpus preset (default: %(default)s)")
        p.add_argument("--matrices", nargs="*", default=_default_folders(), metavar="DIR",
                       help="folders of .npz/.mtx files to add (default: $AUTOSPMV_MATRICES)")

    def label_options(p):
        p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                       help="value type of the matrices timed, and of the model (default: "
                            "%(default)s)")
        p.add_argument("--jobs", type=bounded(int, 1, 1024), default=min(8, os.cpu_count() or 1),
                       help="processes generating matrices, 1 to 1024 (never while timing; "
                            "default: %(default)s)")
        p.add_argument("--no-variants", dest="variants", action="store_false",
                       help="time only the choosers' parameters")
        p.add_argument("--quick", action="store_true",
                       help="short, noisy timings (smoke tests)")

    p = commands.add_parser("corpus", help="list the corpus (TSV on stdout)",
                            description="List the corpus of a preset, with the matrices of "
                                        "--matrices, as TSV on stdout.")
    corpus_options(p)

    p = commands.add_parser("label", help="time every kernel on every corpus matrix",
                            description="Time every kernel on every corpus matrix into a label "
                                        "file (resumed if it exists).")
    corpus_options(p)
    label_options(p)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when a GPU is usable")
    p.add_argument("--out", required=True,
                   help="JSON-lines file, gzip-compressed if named *.gz (resumed if it exists; "
                        "its folder must exist)")
    p.add_argument("--budget-minutes", type=bounded(float, high=10_000, above=0), default=None,
                   help="stop labelling after this many minutes (default: no limit)")

    p = commands.add_parser("train", help="fit, cross-validate and export the tree",
                            description="Fit, cross-validate and export the tree from label "
                                        "files; the report says whether it passes the install "
                                        "guard.")
    p.add_argument("labels", nargs="+", help="JSON-lines label files (.jsonl or .jsonl.gz)")
    p.add_argument("--out", required=True,
                   help="model JSON file to write (its folder must exist)")
    p.add_argument("--report", help="write the Markdown report here (default: stdout)")
    p.add_argument("--timing", choices=TRAINING_MODES, default="auto",
                   help="timing mode that defines the fastest kernel (default: %(default)s: "
                        "back-to-back from 10^6 nonzeros, per call below)")
    p.add_argument("--folds", type=bounded(int, 2, 100), default=5,
                   help="cross-validation folds, 2 to 100 (default: %(default)s)")
    p.add_argument("--repeats", type=bounded(int, 1, 100), default=REPEATS,
                   help="nested cross-validations on differently shuffled grouped folds "
                        "(default: %(default)s)")
    p.add_argument("--holdout", metavar="FILE", help=HOLDOUT_HELP)
    p.add_argument("--objectives", nargs="+", choices=OBJECTIVES, default=list(DEFAULT_OBJECTIVES),
                   help="tree objectives cross-validation may choose among (default: "
                        "%(default)s; see training/train.py)")

    p = commands.add_parser("rechoose", help="update label files after a parameter chooser "
                            "changed, from their timed variants (no timing)",
                            description=RECHOOSE_HELP)
    p.add_argument("labels", nargs="+", help="JSON-lines label files, updated in place")
    corpus_options(p)
    p.set_defaults(corpus="large")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="only these matrices (default: every record; each is rebuilt)")

    p = commands.add_parser("retrain", help="label, train and install a model for this machine",
                            description=RETRAIN_HELP)
    p.add_argument("--matrices", nargs="*", default=_default_folders(), metavar="DIR",
                   help="folders of .npz/.mtx files whose matrices the corpus adds (on cuda "
                        "grown into variants; default: $AUTOSPMV_MATRICES); without them the "
                        "corpus is synthetic, and retrain says so")
    label_options(p)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="device to label and train for (default: cuda on a real GPU, else cpu)")
    p.add_argument("--corpus", choices=tuple(PRESETS), default=None,
                   help="corpus preset (default: kinds on cuda, the shipped models' corpus, which "
                        "grows the real matrices of --matrices; small on cpu)")
    p.add_argument("--budget-minutes", type=bounded(float, high=10_000, above=0), default=None,
                   help="labelling budget (default: 15 on cuda, 30 on cpu)")
    p.add_argument("--timing", choices=TRAINING_MODES, default="auto",
                   help="timing mode that defines the fastest kernel (default: %(default)s: "
                        "back-to-back from 10^6 nonzeros, per call below)")
    p.add_argument("--labels", help="label file (default: <data dir>/labels/<device>-<dtype>"
                                    ".jsonl, where an interrupted retrain resumes); its folder "
                                    "must exist")
    p.add_argument("--fresh", action="store_true",
                   help="start over: delete the earlier labels in the label file first "
                        "(without it, matrices labelled before are kept and skipped)")
    p.add_argument("--holdout", metavar="FILE", help=HOLDOUT_HELP)
    p.add_argument("--no-probe", dest="probe", action="store_false",
                   help="on the CPU, label the whole corpus without first checking on a few "
                        "matrices whether any kernel beats the built-in rule here")

    p = commands.add_parser("label-orders", help="time the product in each order",
                            description="Time the product in A's own order and in the bfs "
                                        "order on the square matrices of --matrices, as given "
                                        "and numbered at random (resumed if the file exists).")
    p.add_argument("--matrices", nargs="+", default=_default_folders(), metavar="DIR",
                   help="folders of .npz/.mtx files (default: $AUTOSPMV_MATRICES)")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda when a GPU is usable")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="value type of the matrices timed (default: %(default)s)")
    p.add_argument("--grown-nnz", nargs="+", type=bounded(float, 1, 1e10), default=[1e6],
                   help="sizes each matrix is grown to block-diagonally (default: %(default)s)")
    p.add_argument("--limit", type=bounded(int, 1, 100_000), default=None,
                   help="at most this many files, spread over sizes (default: all)")
    p.add_argument("--quick", action="store_true", help="short, noisy timings (smoke tests)")
    p.add_argument("--out", required=True,
                   help="JSON-lines file (resumed if it exists; its folder must exist)")

    p = commands.add_parser("label-spmm", help="time every multi-vector program on the GPU",
                            description="Check and time every multi-vector (SpMM) program for "
                                        "each --columns on the matrices of --matrices grown to "
                                        "--grown-nnz (resumed if the file exists); needs a GPU.")
    p.add_argument("--matrices", nargs="+", default=_default_folders(), metavar="DIR",
                   help="folders of .npz/.mtx files (default: $AUTOSPMV_MATRICES)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="value type of the matrices and X (default: %(default)s)")
    p.add_argument("--grown-nnz", nargs="+", type=bounded(float, 1, 1e10), default=[4e6],
                   help="sizes each matrix is grown to block-diagonally (default: %(default)s)")
    p.add_argument("--columns", nargs="+", type=bounded(int, 5, 4096), default=None,
                   help="column counts of X, each above 4 (default: 8 16 32 64)")
    p.add_argument("--limit", type=bounded(int, 1, 100_000), default=None,
                   help="at most this many files, spread over sizes (default: all)")
    p.add_argument("--out", required=True,
                   help="JSON-lines file (resumed if it exists; its folder must exist)")

    p = commands.add_parser("fit-spmm", help="fit the multi-vector program rule to SpMM labels",
                            description="Fit the program each multi-vector product runs where "
                                        "none can be timed to SpMM label files, print how it "
                                        "meets them, and with --model write it into model "
                                        "files, unless held-out matrices show it losing to the "
                                        "many-columns kernel alone.")
    p.add_argument("labels", nargs="*", help="SpMM label files (one device and dtype)")
    p.add_argument("--benchmark", metavar="FILE",
                   help="instead of label files: the SpMM benchmark's results file "
                        "(benchmarks/spmm.py), whose records list the programs the first "
                        "product timed")
    p.add_argument("--dtype", choices=("float64", "float32"), default=None,
                   help="with --benchmark: the dtype whose records are fitted")
    p.add_argument("--model", nargs="+", default=[], metavar="FILE",
                   help="model files to write the fitted rule into (rewritten in place)")

    p = commands.add_parser("fit-orders", help="fit the order's cost rule to order labels",
                            description="Fit the order's cost rule to order label files, print "
                                        "how it meets them, and with --model write it into "
                                        "model files, unless it decides worse than the built-in "
                                        "rule on the same labels.")
    p.add_argument("labels", nargs="+", help="order label files (one device and dtype)")
    p.add_argument("--model", nargs="+", default=[], metavar="FILE",
                   help="model files to write the fitted rule into (rewritten in place)")
    return parser


RETRAIN_HELP = """Label this machine's device, train a model and install it where autospmv finds
it: <data dir>/models/<device>-<dtype>.json, where <data dir> is $AUTOSPMV_HOME, else
$XDG_DATA_HOME/autospmv, else ~/.local/share/autospmv. The labels are kept in <data
dir>/labels/ so that an interrupted retrain resumes; --fresh starts over. `autospmv models`
lists the installed and shipped models; `autospmv models --remove` undoes a retrain."""


RECHOOSE_HELP = """Where a parameter chooser now picks other parameters than a label record
holds, give the kernel the timing of the variant with those parameters and compute the record's
features again (see training/rechoose.py). Each record's matrix is rebuilt from the corpus
(--corpus, default large, and --matrices), so the corpus must hold its name."""


def _rechoose(args) -> None:
    from .label import load_canonical
    from .rechoose import rechoose_files

    entries = {e.name: e for e in _entries(args.corpus, args.matrices)}

    def load(name: str, dtype: str):
        if name not in entries:
            raise ValueError(f"matrix {name!r} of the labels is not in the corpus "
                             f"{args.corpus!r} with --matrices {args.matrices}")
        return load_canonical(entries[name], dtype)[0]

    changed = rechoose_files(args.labels, load, set(args.only) if args.only else None)
    for path, changes in changed.items():
        for c in changes:
            what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in c.kernels.items())
            if c.missing:
                print(f"{path}: {c.name}: {what}: no variant timed {', '.join(c.missing)} "
                      "with these parameters; left unchanged (label it again)",
                      file=sys.stderr)
            else:
                print(f"{path}: {c.name}: {what}; features changed: "
                      f"{', '.join(c.features) or 'none'}", file=sys.stderr)
        updated = sum(not c.missing for c in changes)
        print(f"{path}: {updated} records updated", file=sys.stderr)


def _entries(preset: str, folders):
    from .corpus import corpus

    return corpus(preset, folders)


def _label(args, entries, out, budget_minutes, forecast=None) -> dict:
    from autospmv._support.timing import TimingOptions

    from .label import label
    from .timing import QUICK

    summary = label(
        entries, out, args.device, dtype=args.dtype,
        budget_seconds=None if budget_minutes is None else 60 * budget_minutes,
        jobs=args.jobs, variants=args.variants, options=QUICK if args.quick else TimingOptions(),
        forecast=forecast,
    )
    print(f"labelled {summary['labelled']} matrices in {summary['seconds']:.0f} s "
          f"({summary['skipped']} were already in {out} and kept; {summary['remaining']} left "
          "for lack of time)", file=sys.stderr)
    for reason, where in summary["failures"].items():
        print(f"failure ({where}): {reason}", file=sys.stderr)
    return summary


def _retrain(args) -> None:
    """``retrain``: label, train and install, holding the labels file's lock throughout
    (:func:`.records.labels_lock`), so that a second retrain for the same device and dtype
    waits for the first and then resumes from its labels."""
    from autospmv._decide.model.store import device_slug, user_data_dir, user_model_path
    from autospmv._tools.cli_checks import output_path
    import tqdm  # noqa: F401  (the training extra's package: missing, retrain stops here)
    from .records import labels_lock
    from .train import train_files

    args.device = args.device or _default_device()
    preset, budget = RETRAIN[args.device]
    slug = device_slug(args.device)
    model_path = user_model_path(slug, args.dtype)
    if args.labels:
        labels = output_path(args.labels, "--labels")
    else:
        labels = user_data_dir() / "labels" / f"{slug}-{args.dtype}.jsonl"
        labels.parent.mkdir(parents=True, exist_ok=True)  # autospmv's own data folder
    with labels_lock(labels):
        if args.fresh and labels.exists():
            labels.unlink()
            print(f"--fresh: deleted the earlier labels {labels}", file=sys.stderr)
        preset = args.corpus or preset
        if not args.matrices:
            what = ("its synthetic matrices only (the kinds corpus grows the real matrices of "
                    "--matrices)" if preset == "kinds" else f"the {preset} corpus's generated "
                    "matrices only")
            print(f"no --matrices (nor $AUTOSPMV_MATRICES): labelling {what}", file=sys.stderr)
        entries = _entries(preset, args.matrices)
        forecast = Forecast.for_device(args.device)
        if args.device == "cpu" and args.probe:
            found = _probe(args, entries, labels, forecast, args.budget_minutes or budget)
            if not found.worth_labelling:
                report = write_rejected(model_path, found.reason, found.report())
                print(f"not labelling the whole corpus: {found.reason}; the built-in rule stays "
                      f"(figures: {report}; --no-probe labels everything anyway)",
                      file=sys.stderr)
                return
        _label(args, entries, labels, args.budget_minutes or budget, forecast)
        result = train_files([labels], None, None, mode=args.timing, holdout=args.holdout)
        print(result.report)
        install(result, model_path)


def _probe(args, entries, labels, forecast, budget_minutes: float):
    """Label the probe's matrices (:mod:`training.probe`) into ``labels``, within the run's
    labelling budget, and read the oracle gain over the CPU rule from them; prints the
    figures."""
    from autospmv._decide.selection import RULE_CPU

    from .probe import PROBE_SECONDS, oracle_gain, probe_entries
    from .records import read_records

    chosen = probe_entries(entries)
    print(f"probe: can any kernel beat the built-in rule ({RULE_CPU}) here? labelling up to "
          f"{len(chosen)} matrices first (for at most {PROBE_SECONDS:.0f} s)",
          file=sys.stderr)
    _label(args, chosen, labels, min(PROBE_SECONDS / 60, budget_minutes), forecast)
    names = {entry.name for entry in chosen}
    records = read_records(labels) if labels.exists() else []
    found = oracle_gain([r for r in records if r["name"] in names], RULE_CPU)
    print(f"probe:\n{found.report()}", file=sys.stderr)
    return found


REJECTED_PREFIX = "Not installed: "
"""The first line of a ``<model>.rejected.md`` report starts with this, then the reason
(``autospmv info`` shows it)."""


def write_rejected(model_path: Path, reason: str, body: str) -> Path:
    """Write a run's ``<model>.rejected.md``: the reason in its first line, then ``body``;
    returns its path."""
    from autospmv._decide.model.store import write_atomically

    report_path = model_path.with_suffix(".rejected.md")
    model_path.parent.mkdir(parents=True, exist_ok=True)  # autospmv's own data folder
    write_atomically(report_path, f"{REJECTED_PREFIX}{reason}\n\n{body}\n")
    return report_path


def install(result, model_path) -> bool:
    """Install ``result``'s model at ``model_path``, with its report beside it (``.md``), if
    it passes the guard (:func:`.train.guard`: its cross-validated score beats the best fixed
    kernel on the same labels); otherwise keep the model there and its report, if any, write
    this run's report as ``<model>.rejected.md`` (which a later installed model removes) and
    say why."""
    from autospmv._decide.model.store import write_atomically

    verdict = result.scores["guard"]
    model_path.parent.mkdir(parents=True, exist_ok=True)
    if not verdict["passed"]:
        report_path = write_rejected(
            model_path, f"{verdict['reason']}; the best fixed kernel (always "
                        f"{verdict['best_fixed']}) would do better on these labels",
            result.report)
        kept = f"kept {model_path}" if model_path.is_file() else "no model installed"
        print(f"not installed ({kept}): {verdict['reason']}; the best fixed kernel "
              f"(always {verdict['best_fixed']}) would do better on these labels "
              f"(report: {report_path})", file=sys.stderr)
        return False
    report_path = model_path.with_suffix(".md")
    result.model.to_json(model_path)
    write_atomically(report_path, result.report)
    model_path.with_suffix(".rejected.md").unlink(missing_ok=True)
    print(f"installed {model_path} ({verdict['reason']}; report: {report_path})",
          file=sys.stderr)
    return True


@contextlib.contextmanager
def exit_on_sigterm():
    """For the block, SIGTERM ends the process through Python's exit path (status 143), so
    that the blocks being left clean up (the labels lock is removed) as after Ctrl-C; the
    previous handler is restored afterwards. Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv=None, prog: str = "python -m autospmv.training") -> int:
    """Run a command; ``prog`` names the program in help and usage messages (``autospmv``
    delegates ``autospmv retrain`` here)."""
    args = _parser(prog).parse_args(argv)
    try:
        if args.command == "corpus":
            for e in _entries(args.corpus, args.matrices):
                print(f"{e.name}\t{e.family}\t{e.size}\t{e.nnz}\t{e.source}")
        elif args.command == "label":
            from autospmv._tools.cli_checks import output_path
            from .records import labels_lock

            output_path(args.out, "--out")
            args.device = args.device or _default_device()
            with exit_on_sigterm(), labels_lock(args.out):
                _label(args, _entries(args.corpus, args.matrices), args.out,
                       args.budget_minutes)
        elif args.command == "train":
            from autospmv._tools.cli_checks import output_path
            from .train import train_files

            output_path(args.out, "--out")
            if args.report:
                output_path(args.report, "--report")
            result = train_files(args.labels, args.out, args.report, mode=args.timing,
                                 n_splits=args.folds, objectives=args.objectives,
                                 repeats=args.repeats, holdout=args.holdout)
            if args.report is None:
                print(result.report)
            verdict = result.scores["guard"]
            print(f"wrote {args.out}: {result.model!r}; guard "
                  f"{'passed' if verdict['passed'] else 'FAILED'}: {verdict['reason']}",
                  file=sys.stderr)
        elif args.command == "rechoose":
            _rechoose(args)
        elif args.command == "label-orders":
            from autospmv._tools.cli_checks import output_path
            from .order_labels import label_orders
            from .timing import QUICK

            output_path(args.out, "--out")
            with exit_on_sigterm():
                label_orders(args.matrices, args.out, args.device or _default_device(),
                             dtype=args.dtype, grown_nnz=args.grown_nnz, limit=args.limit,
                             options=QUICK if args.quick else None)
        elif args.command == "label-spmm":
            from autospmv._tools.cli_checks import output_path
            from .spmm_labels import COLUMNS, label_spmm

            output_path(args.out, "--out")
            with exit_on_sigterm():
                label_spmm(args.matrices, args.out, dtype=args.dtype, grown_nnz=args.grown_nnz,
                           columns=tuple(args.columns or COLUMNS), limit=args.limit)
        elif args.command == "fit-spmm":
            from .fitted_rules import write_fit
            from .spmm_labels import benchmark_records, fit_spmm_rule, read_labels

            if bool(args.labels) == bool(args.benchmark):
                raise ValueError("give SpMM label files or --benchmark FILE (one of them)")
            if args.benchmark and not args.dtype:
                raise ValueError("--benchmark needs --dtype")
            sources = args.labels or [args.benchmark]
            fit = fit_spmm_rule(read_labels(args.labels) if args.labels else
                                benchmark_records(args.benchmark, args.dtype))
            print(fit.report)
            write_fit(fit, args.model, "spmm_rule", "spmm_labels", sources, "SpMM rule")
        elif args.command == "fit-orders":
            from .fitted_rules import write_fit
            from .order_labels import fit_order_rule

            fit = fit_order_rule(args.labels)
            print(fit.report)
            write_fit(fit, args.model, "order_rule", "order_labels", args.labels, "order rule")
        else:
            with exit_on_sigterm():
                _retrain(args)
    except ModuleNotFoundError as err:
        if err.name not in TRAINING_EXTRA:
            raise
        print(f"{prog} {args.command}: error: the training pipeline needs {err.name}, which is "
              "not installed; install it with pip install 'autospmv[training]'", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError, OSError) as err:
        print(f"{prog} {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
