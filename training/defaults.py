"""Default kernels per size band, and the margin at which the tree may replace them.

The selection a model file makes is :class:`autospmv._decide.model.default_policy.DefaultPolicy`:
per band of nonzeros (:data:`DEFAULT_BANDS`) the best fixed kernel of the training labels, replaced
by the tree's first choice only when the tree's margin for it over the default reaches the band's
threshold. This module chooses those defaults and calibrates the thresholds.

Calibration is leave-one-kind-out: for each group of :attr:`training.dataset.Dataset.groups`
(a structure kind, real or synthetic) a tree with the final hyperparameters is fitted on all
other groups and scores the group's matrices, so every matrix is judged by a tree that never saw
its kind. For each candidate threshold of :data:`THRESHOLDS` the band's out-of-kind choices are
scored against the default's; the gain is the mean over bases (a real file and its grown copies
are one base) of the per-matrix log-quality difference, and its error the standard error of that
mean. A threshold is eligible only when its gain exceeds its error; the eligible one of largest
gain wins, and a band with none keeps its default always (threshold infinite). So the tree
overrides only where, on kinds it had not seen, overriding paid by more than its noise.
"""

from __future__ import annotations

import math
import re

import numpy as np

from autospmv._decide.model.default_policy import Band, DefaultPolicy

from .dataset import Dataset
from .fitting import STREAMED_NNZ, fit
from .metrics import best_fixed, first_feasible, fixed_policy, selection_log_q, selection_metrics
from .records import LARGE_NNZ

DEFAULT_BANDS = (0, LARGE_NNZ, STREAMED_NNZ)
"""Where the bands of nonzeros start: per-call timing below 10⁶ (launch-bound), back-to-back
from 10⁶ with the matrix still largely in the GPU's L2 cache below 10⁷, and streamed from
memory above."""

THRESHOLDS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
"""Candidate margins (in the model's units: log2 of the estimated speed-up for a correction
tree)."""

MARGIN_BINS = (0.0, 0.1, 0.25, 0.5, 1.0, math.inf)
"""Margin intervals of the calibration table in the training report."""

_GROWN = re.compile(r"-[xcp]\d+$")


def base_names(names) -> np.ndarray:
    """The base of each matrix: a real file's name for the file and its grown copies
    (``bcsstk16-p40`` → ``bcsstk16``), the matrix's own name otherwise."""
    return np.array([_GROWN.sub("", name) for name in names])


def tree_scores(fitted, ds: Dataset, rows) -> np.ndarray:
    """Per row, per kernel column of ``ds``: the score the tree ranks by, smaller better, so
    that the margin of kernel a over kernel b is ``score[b] - score[a]``: the corrected log2
    time estimate for a correction tree, minus the leaf value otherwise (the units of
    :func:`autospmv._decide.model.default_policy.margins`). Kernels the tree does not know score
    inf."""
    estimates = fitted.estimates(ds, rows)
    values = fitted.tree.predict_proba(fitted.inputs(ds, rows, estimates))
    values = np.log2(estimates) + values if fitted.objective == "correction" else -values
    scores = np.full((len(rows), len(ds.kernels)), np.inf)
    scores[:, [ds.kernels.index(c) for c in fitted.tree.classes_]] = values
    return scores


def out_of_kind(ds: Dataset, hyper) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-kind-out: (ranking, scores) of every row of ``ds`` by a tree with ``hyper``
    fitted without the row's group. Kernels a group's tree never saw rank last (in column
    order) and score inf."""
    ranking = np.zeros((len(ds), len(ds.kernels)), dtype=np.int64)
    scores = np.full((len(ds), len(ds.kernels)), np.inf)
    for group in np.unique(ds.groups):
        test, train = np.flatnonzero(ds.groups == group), np.flatnonzero(ds.groups != group)
        if train.size == 0:
            continue
        fitted = fit(ds, train, hyper)
        ranked = fitted.ranking(ds, test)
        unknown = [k for k in range(len(ds.kernels)) if k not in ranked[0]]
        ranking[test] = np.hstack([ranked, np.tile(unknown, (len(test), 1))]).astype(np.int64)
        scores[test] = tree_scores(fitted, ds, test)
    return ranking, scores


def policy_choices(ds: Dataset, rows, ranking: np.ndarray, scores: np.ndarray,
                   policy: DefaultPolicy) -> np.ndarray:
    """The kernel column a model with ``policy`` uses on ``ds`` rows ``rows`` whose tree
    ranked ``ranking`` with ``scores`` (rows aligned with ``rows``): as
    :meth:`DefaultPolicy.decide` and prepare()'s fall-back do it."""
    rows = np.asarray(rows)
    times = ds.times[rows]
    top = ranking[:, 0]
    defaults = np.empty(len(rows), dtype=np.int64)
    thresholds = np.empty(len(rows))
    for i, row in enumerate(rows):
        band, _ = policy.band(ds.nnz[row])
        defaults[i], thresholds[i] = ds.kernels.index(band.kernel), band.threshold
    at = np.arange(len(rows))
    with np.errstate(invalid="ignore"):
        margin = scores[at, defaults] - scores[at, top]
    stands = (top != defaults) & ~(margin >= thresholds) & np.isfinite(times[at, defaults])
    return np.where(stands, defaults, first_feasible(times, ranking))


def first_in_ranking(ranking: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """``ranking`` with each row's ``chosen`` column moved to the front (the order prepare()
    tries and ``tune="measure"`` times the candidates in); a row whose choice is -1 keeps
    its order."""
    out = ranking.copy()
    for i, c in enumerate(chosen):
        if c >= 0:
            out[i] = [c] + [k for k in ranking[i] if k != c]
    return out


def _gain(ds: Dataset, rows, chosen, default_chosen, bases) -> tuple[float, float]:
    """Mean over bases of the per-matrix log-quality gain of ``chosen`` over
    ``default_chosen`` on ``rows``, and its standard error."""
    diff = (selection_log_q(ds.times[rows], chosen)
            - selection_log_q(ds.times[rows], default_chosen))
    per_base = np.array([diff[bases[rows] == b].mean() for b in np.unique(bases[rows])])
    if per_base.size < 2:
        return float(per_base.mean()) if per_base.size else 0.0, math.inf
    return float(per_base.mean()), float(per_base.std(ddof=1) / math.sqrt(per_base.size))


def calibrate(ds: Dataset, ranking: np.ndarray, scores: np.ndarray,
              bands=DEFAULT_BANDS) -> tuple[DefaultPolicy, list[dict]]:
    """The default policy of ``ds`` from its out-of-kind ``ranking`` and ``scores``
    (:func:`out_of_kind`), and per band what the choice rests on (for the report)."""
    bases = base_names(ds.names)
    chosen_bands, table = [], []
    edges = list(bands) + [math.inf]
    for low, high in zip(edges[:-1], edges[1:]):
        rows = np.flatnonzero((ds.nnz >= low) & (ds.nnz < high))
        if rows.size == 0:
            continue
        fixed = {k: selection_metrics(ds.times[rows], fixed_policy(ds, k)[rows])
                 for k in ds.kernels}
        default = best_fixed(fixed)
        default_chosen = first_feasible(
            ds.times[rows], np.column_stack([fixed_policy(ds, default)[rows], ranking[rows]]))
        candidates = []
        for threshold in THRESHOLDS:
            trial = DefaultPolicy([Band(0, default, threshold)])
            chosen = policy_choices(ds, rows, ranking[rows], scores[rows], trial)
            gain, error = _gain(ds, rows, chosen, default_chosen, bases)
            candidates.append({"threshold": threshold, "gain": gain, "error": error,
                               "metrics": selection_metrics(ds.times[rows], chosen)})
        eligible = [c for c in candidates if c["gain"] > c["error"]]
        best = max(eligible, key=lambda c: (c["gain"], c["threshold"])) if eligible else None
        threshold = best["threshold"] if best else math.inf
        chosen_bands.append(Band(int(low), default, threshold))
        table.append({
            "low": low, "high": high, "n": int(rows.size),
            "bases": int(np.unique(bases[rows]).size), "default": default,
            "default_metrics": selection_metrics(ds.times[rows], default_chosen),
            "tree_metrics": selection_metrics(ds.times[rows],
                                              first_feasible(ds.times[rows], ranking[rows])),
            "threshold": threshold, "candidates": candidates,
            "gain": best["gain"] if best else 0.0, "error": best["error"] if best else None,
            "calibration": _calibration(ds, rows, ranking[rows], scores[rows], default),
        })
    if not chosen_bands:
        raise ValueError("no labelled matrices to choose default kernels from")
    chosen_bands[0] = Band(0, chosen_bands[0].kernel, chosen_bands[0].threshold)
    return DefaultPolicy(chosen_bands), table


def _calibration(ds: Dataset, rows, ranking, scores, default: str) -> list[dict]:
    """Per margin bin, over the rows whose tree ranks another kernel than ``default`` first:
    how many, the mean realised log2 speed-up of the tree's kernel over the default's, and the
    share where it was faster."""
    d = ds.kernels.index(default)
    top = ranking[:, 0]
    times = ds.times[rows]
    differs = top != d
    with np.errstate(invalid="ignore", divide="ignore"):  # kernels that never ran: inf
        margin = scores[np.arange(len(rows)), d] - scores[np.arange(len(rows)), top]
        realised = np.log2(times[:, d] / times[np.arange(len(rows)), top])
    out = []
    for low, high in zip(MARGIN_BINS[:-1], MARGIN_BINS[1:]):
        sel = differs & (margin >= low) & (margin < high) & np.isfinite(realised)
        out.append({"low": low, "high": high, "n": int(sel.sum()),
                    "realised": float(realised[sel].mean()) if sel.any() else None,
                    "faster": float(np.mean(realised[sel] > 0)) if sel.any() else None})
    return out


def overrides_lose(table: list[dict]) -> list[str]:
    """The bands whose calibrated overrides lost to the default out of kind (each a short
    description); empty when none did. A model with any is not installed."""
    return [f"{row['low']:,}+ nonzeros: gain {row['gain']:.4f}" for row in table
            if row["gain"] < 0]
