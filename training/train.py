"""Training: fit the kernel-selection tree on label records, cross-validate it, export it.

Times come from the chosen timing mode: ``auto`` (default) takes each matrix's time by the
size rule of :func:`training.records.target_mode` (back-to-back from 10⁶ nonzeros, what an
iterative solver sees on a large matrix; per call below, where launch and synchronisation
dominate); ``per_call`` or ``b2b`` take one mode for every matrix. A kernel whose status is not
``ok`` counts as infinitely slow. A label row whose timings stayed disturbed
(:func:`training.records.is_noisy`) is left out and counted in the report. The tree names a
kernel only: its parameters come from the registry's choosers when the model is used.

Selection quality of a policy on a matrix is ``q = t(best kernel) / t(chosen kernel)`` (1 is
perfect, 0 when the policy chose an infinitely slow kernel). Over a set of matrices:

================ ===========================================================================
geomean          geometric mean of q; 0 as soon as one choice is infeasible (a *miss*)
geomean_feasible geometric mean of q over the matrices the policy did not miss
within_10pct     share of matrices with t(chosen) ≤ 1.1 · t(best)
worst            smallest q
top1             share with t(chosen) = t(best) (the label itself, or an exact tie)
top1_tie5        share with t(chosen) ≤ 1.05 · t(best): top-1 accuracy counting 5 % ties
misses           matrices where the policy's kernel was infeasible, incorrect or failed
================ ===========================================================================

Policies compared: the tree, every fixed kernel ("always csr_vector", no fallback), and a
Ginkgo-style hand rule (``nnz > 10⁶ or longest row > 1024 → csr5, else csr_vector``). The tree
falls back: when its predicted kernel is infeasible for a matrix, the next class by predicted
value is used (ties in class order), as ``TreeModel.ranked`` orders them; it misses only when
every class it knows is infeasible.

The cost model: before any tree, :func:`fit_cost_model` fits, per kernel, a linear model of
its time over the matrix's cost quantities (:mod:`autospmv._decide.cost`: bytes moved, thread steps,
the longest thread's loop, atomics into one entry, device steps; plus a constant, rows and
nnz) by non-negative least squares on relative error. The quantities are structural counts (for the
parameters the device's choosers pick); the coefficients are this device's (µs per byte, per
step, per launch…). Its estimates reach the tree as ``est_<kernel> = log2(t̂_k / min_j t̂_j)``
(0 for the kernel it expects fastest). The tree reads them next to the sizes (``fastest``, ``quality``) or next to every
structural feature (``correction``), and can so follow the cost model where it is right and
overrule it where the labels showed it wrong. The cost model is fitted on each training part
of the cross-validation like the tree, and its own out-of-fold choices are reported as the
policy "cost model alone".

Size regimes: in timing mode ``auto`` the labels hold two targets, per-call times below
:data:`training.records.LARGE_NNZ` nonzeros and back-to-back times from it. Where the training
rows hold at least :data:`training.fitting.MIN_REGIME_MATRICES` matrices of each, the model is
fitted per regime (:func:`training.fitting.regimes`): a cost-model coefficient table each, and a
tree each with its own hyperparameters, joined under a root that splits on ``nnz`` at the
boundary, so that the exported model is still one cost model and one tree. On the H100 labels
this raised the cross-validated geometric mean q of both dtypes, overall and on the matrices
of at least 10⁶ nonzeros (``models/README.md`` has the figures per size band).

Objectives (what a tree is fitted to):

``correction``
    a multi-output regression tree predicting, for every kernel, how far its time lies from
    the cost model's estimate: ``log2(t / t̂)``, clipped to ±:data:`CORRECTION_CLIP`. A
    matrix's kernels rank by the corrected estimate ``log2 t̂ + correction``, smallest first.
    Depth 0 (a single leaf) is the cost model with one correction per kernel.
``fastest``
    a classification tree whose label is the fastest kernel. Near-ties are decided by timing
    noise (two kernels within 2 % get different labels on similar matrices), and a wrong label
    costs the same whether the kernel chosen instead is 3 % or 3× slower.
``quality``
    a multi-output regression tree predicting, for every kernel, ``log max(q, QUALITY_FLOOR)``;
    a leaf picks the kernel with the highest mean, i.e. the best geometric-mean quality over its
    training matrices. This fits the selection criterion itself: near-ties have nearly equal
    targets, and the cost of a mistake is its slowdown. The floor (½) says that a kernel at
    half the best speed is a wrong choice however slow it is, so that the 100–1000× slowdowns
    of one-thread-per-row kernels on long rows do not dominate the squared error.
    It is exported in the classifier layout of :class:`autospmv._decide.model.tree.TreeModel`: a
    node's value for kernel k is ``Σ w_i · log(max(q_ik, floor) / floor)`` over its training
    matrices (w_i their sample weight), normalised to sum to 1, a non-negative score whose
    argmax is the leaf's choice and whose order is the fallback order.

Model selection: cross-validation grouped by (family, synthetic or real), so no family is in
both the training and the test part, chooses among :func:`hyper_grid` the objective,
``max_depth``, ``min_samples_leaf`` and the sample weighting (``none``; ``ratio`` = t(worst ok
kernel)/t(best); ``log_ratio`` = 1 + ln of that ratio: how much is at stake on a matrix) by
the mean log q of the out-of-fold choices (a miss scores as the worst ok kernel): the
simplest setting whose score is within one standard error of the best one wins (the error of
the paired per-matrix differences, :func:`training.crossval._best`), so that a deeper tree
is kept only for a gain larger than its spread over the matrices. In size regimes (per call
below 10⁶ nonzeros, back to back from 10⁶, streamed from memory from 10⁷), each regime's tree
is chosen by that score on the regime's own matrices (:func:`training.crossval.select_hyper`).
The reported per-fold scores come from nested cross-validation (the hyperparameters of each
outer fold are chosen on its training part alone), so they are not biased by that choice. The
exported model uses the hyperparameters chosen by cross-validation on all matrices and is
fitted on all of them. Real matrices are also evaluated family by family, each family left
out of training and of the hyperparameter choice for its model.

The grid is small on purpose. With about 20 groups, choosing among many objectives, depths and
leaf sizes fits the inner folds' noise (the outer folds each picked a different objective and
depth). On three H200 labellings of one corpus, searching only ``correction`` trees of depth
≤ 4 with leaves of ≥ 4 matrices, instead of all three objectives at any depth and leaf size,
raised the nested-CV geometric mean on all three and the share within 10 % of the best on
two (``models/README.md`` has the figures). ``--objectives`` widens the search.

Layout: this module holds the whole job (:func:`train`, :func:`train_files`, the held-out
evaluation and the provenance); the label records as arrays are in :mod:`training.dataset`,
the metrics and policies in :mod:`training.metrics`, the cost-model and tree fitting in
:mod:`training.fitting`, the grid, cross-validation and guard in :mod:`training.crossval` and
the Markdown report in :mod:`training.report`.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
from pathlib import Path

import numpy as np

import autospmv
from autospmv._decide.model.tree import TreeModel
from autospmv._decide.model.store import write_atomically
from autospmv._prepare.tuning import TUNE_CANDIDATES
from .corpus import read_names
from .crossval import (DEFAULT_OBJECTIVES, GRID, REPEATS, guard, hyper_grid, leave_one_family_out,
                       nested_cv, select_hyper)
from .dataset import dataset
from .defaults import (calibrate, first_in_ranking, out_of_kind, overrides_lose, policy_choices,
                       tree_scores)
from .fitting import QUALITY_FLOOR, Fitted, fit
from .metrics import (BANDS, band_rows, cost_policy, mean_metrics, measure_policy, policies,
                      selection_metrics, tree_policy)
from .records import LARGE_NNZ, read_records
from .report import report_text

@dataclasses.dataclass
class TrainResult:
    model: TreeModel
    report: str
    """Markdown."""
    scores: dict


def split_holdout(records, names) -> tuple[list[dict], list[dict]]:
    """(records to train on, held-out records). A record is held out when its name, or for a
    real matrix its file's name (so that grown and permuted copies go with it), is in
    ``names``."""
    names = set(names or ())
    train_part, held = [], []
    for record in records:
        source = record.get("source", "synthetic")
        stem = Path(source).stem if source != "synthetic" else None
        (held if record["name"] in names or stem in names else train_part).append(record)
    return train_part, held


@dataclasses.dataclass
class CrossValidation:
    """What decides whether a model is installed: the nested cross-validations (``runs``, the
    tree's and the cost model's out-of-fold choices per run), the hyperparameters chosen on all
    matrices and their score, every policy's mean metrics overall (``cv``) and per size band,
    the default kernels with the tree's calibrated overrides (``policy``, ``default_table``),
    and the guard's ``verdict``."""

    runs: list
    oofs: list
    cost_oofs: list
    hyper: object
    score: float
    cv: dict
    bands: dict
    policy: object
    default_table: list
    verdict: dict


def cross_validate(ds, n_splits: int = 5, grid=GRID, repeats: int = REPEATS) -> CrossValidation:
    """The cross-validation and the install guard of :func:`train` on a dataset: the tree must
    beat every fixed kernel (:func:`~training.crossval.guard`), and its overrides must not lose
    to the default kernels out of kind (:func:`~training.defaults.overrides_lose`)."""
    runs = [nested_cv(ds, n_splits, grid, seed) for seed in [None] + list(range(1, repeats))]
    oofs, cost_oofs = [], []
    for run in runs:
        oof, cost_oof = np.full(len(ds), -1), np.full(len(ds), -1)
        for fold in run:
            oof[fold.test] = fold.chosen
            cost_oof[fold.test] = fold.cost_chosen
        oofs.append(oof)
        cost_oofs.append(cost_oof)
    hyper, score = select_hyper(ds, np.arange(len(ds)), n_splits, grid)
    baselines = policies(ds)
    chosen = {"tree": oofs, "cost model alone": cost_oofs} if runs[0] else {}
    chosen.update({name: [c] for name, c in baselines.items()})
    cv = {"tree": None, "cost model alone": None}
    cv.update({name: mean_metrics([selection_metrics(ds.times, c) for c in cs])
               for name, cs in chosen.items()})
    bands = {band[0]: {name: mean_metrics([selection_metrics(ds.times[rows], c[rows])
                                           for c in cs])
                       for name, cs in chosen.items()}
             for band in BANDS if (rows := band_rows(ds, band)).size}
    verdict = guard(cv)
    ranking_ok, scores_ok = out_of_kind(ds, hyper)
    policy, default_table = calibrate(ds, ranking_ok, scores_ok)
    lost = overrides_lose(default_table)
    if lost:
        verdict = dict(verdict, passed=False,
                       reason=verdict["reason"] + "; but the tree's overrides lose to the "
                       "default out of kind in " + ", ".join(lost))
    return CrossValidation(runs, oofs, cost_oofs, hyper, score, cv, bands, policy,
                           default_table, verdict)


def install_verdict(records, mode: str = "auto") -> dict:
    """The guard :func:`train` applies before a model is installed, on ``records`` in timing
    ``mode``, computed as :func:`train` computes it (without fitting the final tree or
    building the report)."""
    ds, _ = dataset(list(records), mode)
    return cross_validate(ds).verdict


def train(records, *, mode: str = "auto", n_splits: int = 5, grid=GRID,
          label_files: list[dict] | None = None, repeats: int = REPEATS,
          holdout=()) -> TrainResult:
    """Cross-validate, fit the final tree and build the report (see the module docstring).

    ``label_files``: ``[{"file", "sha256", "records"}]`` for the provenance. ``repeats``:
    nested cross-validations, the first on scikit-learn's size-balanced grouped folds, the
    others on grouped folds shuffled by their seed; the tree's figures are their mean.
    ``holdout``: names of matrices (or real files) kept out of everything (cross-validation,
    hyperparameters, the final fit) and scored separately at the end.
    """
    records = list(records)
    devices = {(r.get("device") or {}).get("name") for r in records}
    if len(devices) > 1:
        raise ValueError(f"the labels come from different devices ({', '.join(map(str, devices))});"
                         " train one model per device")
    dtypes = {r.get("dtype", "float64") for r in records}
    if len(dtypes) > 1:
        raise ValueError(f"the labels mix value types ({', '.join(sorted(dtypes))}); models "
                         "are per (device, dtype): train one per dtype")
    records, held = split_holdout(records, holdout)
    ds, dropped = dataset(records, mode)
    checked = cross_validate(ds, n_splits, grid, repeats)
    runs, oofs, hyper, score = checked.runs, checked.oofs, checked.hyper, checked.score
    cv, bands, verdict = checked.cv, checked.bands, checked.verdict
    policy, default_table = checked.policy, checked.default_table
    folds = runs[0]
    fitted = fit(ds, np.arange(len(ds)), hyper)
    lofo, lofo_chosen = leave_one_family_out(ds, n_splits, grid)
    real = np.flatnonzero(ds.as_given)
    lofo_all = selection_metrics(ds.times[real], lofo_chosen[real]) if lofo else None
    held_out = evaluate_holdout(fitted, held, mode, policy) if held else None
    provenance = {
        "trained": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "timing_mode": mode,
        "large_nnz": LARGE_NNZ if mode == "auto" else None,
        "dtype": dtypes.pop(),
        "device": records[0].get("device") if records else None,
        "label_versions": records[0].get("versions") if records else None,
        "training_versions": _versions(),
        "labels": label_files or [],
        "matrices": len(ds),
        "noisy_excluded": len(ds.noisy),
        "held_out": len(held),
        "families": sorted(set(ds.groups.tolist())),
        "objective": hyper.objective,
        "quality_floor": QUALITY_FLOOR if hyper.objective == "quality" else None,
        "hyperparameters": hyper.as_dict(),
        "cv_selection_score": None if math.isnan(score) else score,
        "cv_repeats": len(runs) if folds else 0,
        "cv": {name: cv[name] for name in ("tree", "cost model alone", "hand rule")},
        "cv_by_size": {band: {name: m[name] for name in ("tree", "cost model alone")
                              if name in m}
                       for band, m in bands.items()},
        "guard": verdict,
        "defaults_out_of_kind": [
            {"min_nnz": int(row["low"]), "kernel": row["default"],
             "threshold": None if math.isinf(row["threshold"]) else row["threshold"],
             "default": row["default_metrics"], "tree": row["tree_metrics"],
             "gain": row["gain"], "error": row["error"]} for row in default_table],
        "real_leave_one_family_out": lofo_all,
        "held_out_scores": held_out["all"][MODEL_POLICY] if held_out else None,
        "in_sample": selection_metrics(ds.times, tree_policy(fitted, ds, np.arange(len(ds)))),
    }
    model = fitted.export(provenance, policy)
    scores = {"hyper": hyper, "grid": grid, "cv": cv, "folds": folds, "lofo": lofo,
              "lofo_all": lofo_all, "lofo_chosen": lofo_chosen, "dropped": dropped,
              "noisy": ds.noisy, "repeats": [selection_metrics(ds.times, o) for o in oofs]
              if folds else [], "bands": bands, "guard": verdict, "held_out": held_out,
              "defaults": default_table}
    report = report_text(ds, model, scores, records, mode)
    return TrainResult(model, report, scores)


MODEL_POLICY = "model (defaults and overrides)"
"""The held-out policy name of what prepare() does with the exported model."""


def evaluate_holdout(fitted: "Fitted", records, mode: str, policy=None) -> dict:
    """The fitted model on held-out records (with ``policy``, its default kernels and the
    tree's calibrated overrides, as prepare() decides; the tree alone too), next to the hand
    rule and every fixed kernel: ``{"all" | band: {policy: metrics}}`` (noisy held-out records
    left out as in training)."""
    ds, _ = dataset(records, mode)
    rows = np.arange(len(ds))
    ranking = fitted.ranking(ds, rows)
    choices = {}
    if policy is not None:
        chosen = policy_choices(ds, rows, ranking, tree_scores(fitted, ds, rows), policy)
        choices[MODEL_POLICY] = chosen
        ranking = first_in_ranking(ranking, chosen)
    choices.update({"tree": tree_policy(fitted, ds, rows),
                    f"tune='measure' (top {TUNE_CANDIDATES})":
                        measure_policy(ds.times, ranking, TUNE_CANDIDATES),
                    "cost model alone": cost_policy(fitted.cost_model, ds, rows)})
    choices.update(policies(ds))
    out = {"all": {name: selection_metrics(ds.times, c) for name, c in choices.items()}}
    for band in BANDS:
        rows = band_rows(ds, band)
        if rows.size:
            out[band[0]] = {name: selection_metrics(ds.times[rows], c[rows])
                            for name, c in choices.items()}
    out["names"] = ds.names
    out["noisy"] = ds.noisy
    return out


def _versions() -> dict:
    import sklearn

    return {"autospmv": autospmv.__version__, "scikit-learn": sklearn.__version__,
            "numpy": np.__version__}


def file_digest(path) -> dict:
    data = Path(path).read_bytes()
    return {"file": Path(path).name, "sha256": hashlib.sha256(data).hexdigest()}


def train_files(paths, out=None, report=None, *, mode: str = "auto", n_splits: int = 5,
                objectives=DEFAULT_OBJECTIVES, repeats: int = REPEATS,
                holdout=None) -> TrainResult:
    """Train on label files, write the model JSON to ``out`` (unless None) and the report to
    ``report``; cross-validation searches :func:`hyper_grid` of ``objectives``. ``holdout``:
    a file listing held-out matrices (:func:`training.corpus.read_names`), or None."""
    records, files = [], []
    for path in paths:
        recs = read_records(path)
        records += recs
        files.append(dict(file_digest(path), records=len(recs)))
    held = read_names(holdout) if holdout else ()
    result = train(records, mode=mode, n_splits=n_splits, grid=hyper_grid(objectives),
                   label_files=files, repeats=repeats, holdout=held)
    if holdout:
        result.model.provenance["holdout_file"] = file_digest(holdout)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        result.model.to_json(out)
    if report is not None:
        Path(report).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(report, result.report)
    return result
