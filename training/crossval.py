"""Model selection: the hyperparameter grid, grouped and nested cross-validation, and the guard.

Folds are grouped by (family, synthetic or real) so that no family is on both sides of a split
(:func:`group_splits`); :func:`select_hyper` picks a grid point by its pooled out-of-fold
score (in size regimes, one per regime by that regime's score), :func:`nested_cv` scores
that choice without bias, :func:`leave_one_family_out` scores
each real family with a tree trained without it, and :func:`guard` decides whether a model may
be installed. The reasons for the grid's shape are in the :mod:`training.train` docstring.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from sklearn.model_selection import GroupKFold

from .dataset import Dataset
from .fitting import (OBJECTIVES, STREAMED_NNZ, WEIGHTINGS, Hyper, RegimeHyper, fit,
                      fit_cost_model, regimes, streamed_split)
from .metrics import (best_fixed, cost_policy, fixed_kernel, fixed_name, fixed_policy,
                              rule_policy, selection_log_q, selection_metrics, tree_policy)


DEFAULT_OBJECTIVES = ("correction",)
"""The objectives cross-validation searches unless told otherwise (see "Model selection" in
:mod:`training.train`)."""


def hyper_grid(objectives=DEFAULT_OBJECTIVES) -> tuple[Hyper, ...]:
    """The hyperparameters cross-validation chooses among for ``objectives``: depth up to 4
    (0 too for ``correction``, and first of all the cost model alone, a single leaf correcting
    nothing), leaves of at least 4 matrices, every weighting. Simplest first (shallow, large
    leaves, unweighted): the first within one standard error of the best score wins
    (:func:`_best`)."""
    unknown = [o for o in objectives if o not in OBJECTIVES]
    if unknown or not objectives:
        raise ValueError(f"objectives must be among {', '.join(OBJECTIVES)}; got "
                         f"{', '.join(map(str, objectives)) or 'none'}")
    alone = ((Hyper(0, 8, "none", "correction", corrected=False),)
             if "correction" in objectives else ())
    return alone + tuple(
        Hyper(depth, leaf, weighting, objective)
        for objective in objectives
        for depth in ((0,) if objective == "correction" else ()) + (1, 2, 3, 4)
        for leaf in (8, 4)
        for weighting in WEIGHTINGS
    )


GRID = hyper_grid()
FALLBACK_HYPER = Hyper(4, 2, "log_ratio")
"""Used when the data has fewer than two groups, so that nothing can be cross-validated."""


def group_splits(groups: np.ndarray, n_splits: int,
                 seed: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Grouped k-fold splits (positions into ``groups``); none when there are fewer than 2
    groups. ``seed`` None: scikit-learn's GroupKFold (deterministic, balanced by size); else
    the groups in an order shuffled by ``seed``, each put into the fold with the fewest rows so
    far, so that repeated splits differ while folds stay balanced."""
    unique = np.unique(groups)
    k = min(n_splits, len(unique))
    if k < 2:
        return []
    if seed is None:
        return list(GroupKFold(n_splits=k).split(np.zeros(len(groups)), groups=groups))
    fold_of, sizes = {}, np.zeros(k, dtype=np.int64)
    for group in np.random.default_rng(seed).permutation(unique):
        fold = int(np.argmin(sizes))
        fold_of[group] = fold
        sizes[fold] += int(np.sum(groups == group))
    folds = np.array([fold_of[g] for g in groups])
    return [(np.flatnonzero(folds != f), np.flatnonzero(folds == f)) for f in range(k)]


def select_hyper(ds: Dataset, rows: np.ndarray, n_splits: int,
                 grid=GRID) -> tuple[Hyper | RegimeHyper, float]:
    """The grid point chosen by its pooled out-of-fold selection score on ``rows`` (the
    simplest within one standard error of the best, :func:`_best`), and its score.

    Where a model of ``rows`` has two size regimes (:func:`training.fitting.regimes`), each
    regime's tree is chosen by the out-of-fold score on that regime's matrices: the large
    matrices' tree by how it does on large matrices, not by a score that small ones dominate;
    where the large regime is split at the streamed size
    (:func:`training.fitting.streamed_split`), each part's tree by the score on its own
    matrices. The pooled score is a mean over matrices, the regimes' scores weighted by their
    matrices; the choices share an objective (the best set per objective, then the objective
    whose set pools best), and the score returned is the set's pooled one."""
    splits = group_splits(ds.groups[rows], n_splits)
    if not splits:
        return FALLBACK_HYPER, math.nan
    chosen = {hyper: np.empty(len(rows), dtype=np.int64) for hyper in grid}
    for train, test in splits:
        cost_model = fit_cost_model(ds, rows[train])
        for hyper in grid:
            fitted = fit(ds, rows[train], hyper, cost_model)
            chosen[hyper][test] = tree_policy(fitted, ds, rows[test])
    times = ds.times[rows]
    everything = np.arange(len(rows))
    if regimes(ds, rows) is None:
        return _best(grid, times, chosen, everything)
    large = ds.large[rows]
    parts = [everything[~large], everything[large]]
    if streamed_split(ds, rows[large]) is not None:
        streamed = ds.nnz[rows] >= STREAMED_NNZ
        parts = [everything[~large], everything[large & ~streamed], everything[large & streamed]]
    best, best_score = None, -math.inf
    for objective in dict.fromkeys(hyper.objective for hyper in grid):
        options = [hyper for hyper in grid if hyper.objective == objective]
        picks = [_best(options, times, chosen, positions) for positions in parts]
        score = sum(len(positions) * part_score
                    for positions, (_, part_score) in zip(parts, picks)) / len(rows)
        if score > best_score + 1e-12:
            best, best_score = RegimeHyper(*(hyper for hyper, _ in picks)), score
    return best, best_score


def _best(grid, times: np.ndarray, chosen: dict, positions: np.ndarray) -> tuple[Hyper, float]:
    """The simplest setting of ``grid`` (the first) whose out-of-fold choices (``chosen``)
    score within one standard error of the best score on ``positions``, and its score.

    The standard error is that of the mean per-matrix difference in log q between the best
    setting and the candidate (paired: both chose for the same matrices). A deeper tree must
    so beat the simpler one by more than the spread of its gains over the matrices, not by
    the luck of a few of them (the "one standard error" rule of CART; ``models/README.md``,
    *One standard error*)."""
    log_q = {hyper: selection_log_q(times[positions], chosen[hyper][positions])
             for hyper in grid}
    best = grid[0]
    for hyper in grid[1:]:
        if log_q[hyper].mean() > log_q[best].mean() + 1e-12:
            best = hyper
    for hyper in grid:
        gain = log_q[best] - log_q[hyper]
        error = gain.std(ddof=1) / math.sqrt(len(gain)) if len(gain) > 1 else 0.0
        if gain.mean() <= error + 1e-12:
            return hyper, float(log_q[hyper].mean())
    raise AssertionError("the best setting is within its own standard error")


@dataclasses.dataclass
class Fold:
    test: np.ndarray
    hyper: Hyper | RegimeHyper
    chosen: np.ndarray
    """The tree's choices for the test rows."""
    cost_chosen: np.ndarray
    """The choices of the fold's cost model alone."""


def nested_cv(ds: Dataset, n_splits: int, grid=GRID, seed: int | None = None) -> list[Fold]:
    """Outer grouped folds (shuffled by ``seed``, see :func:`group_splits`); each fold's
    hyperparameters are chosen on its training rows."""
    folds = []
    for train, test in group_splits(ds.groups, n_splits, seed):
        hyper, _ = select_hyper(ds, train, n_splits, grid)
        fitted = fit(ds, train, hyper)
        folds.append(Fold(test, hyper, tree_policy(fitted, ds, test),
                          cost_policy(fitted.cost_model, ds, test)))
    return folds


REPEATS = 3
"""Repetitions of the nested cross-validation: GroupKFold's folds, then shuffled grouped folds
(:func:`group_splits`). One split decides which families are left out together; on the H200
labels the worst case ranged 0.56-0.66 over shuffled splits, so one split says little."""


def guard(cv: dict) -> dict:
    """Whether the tree's cross-validated geometric mean q beats the best fixed kernel's on the
    same labels: the condition for installing a model (``retrain``) and for shipping one.
    Returns ``{"passed", "tree", "best_fixed", "best_fixed_geomean", "reason"}``."""
    fixed = {fixed_kernel(name): m for name, m in cv.items() if fixed_kernel(name)}
    best = best_fixed(fixed)
    best_q = fixed[best]["geomean"]
    tree = cv.get("tree")
    if tree is None:
        return {"passed": False, "tree": None, "best_fixed": best, "best_fixed_geomean": best_q,
                "reason": "the labels have fewer than two groups, so the tree could not be "
                          "cross-validated"}
    passed = tree["geomean"] > best_q
    return {"passed": passed, "tree": tree["geomean"], "best_fixed": best,
            "best_fixed_geomean": best_q,
            "reason": f"cross-validated geomean q {tree['geomean']:.4f} "
                      f"{'>' if passed else '≤'} {fixed_name(best)} {best_q:.4f}"}


def leave_one_family_out(ds: Dataset, n_splits: int,
                         grid=GRID) -> tuple[dict[str, dict], np.ndarray]:
    """Per real family: a tree whose hyperparameters are chosen (grouped CV) and which is fitted
    on everything but that family, evaluated on it, next to the hand rule and the best fixed
    kernel on the same matrices.

    Returns (``{family: {"tree", "hand rule", "best fixed"}}``, the tree's choice per row of
    ``ds``: a kernel column on the real matrices, -1 elsewhere).
    """
    out, chosen = {}, np.full(len(ds), -1)
    for family in sorted(set(ds.families[ds.as_given].tolist())):
        test = np.flatnonzero(ds.as_given & (ds.families == family))
        train = np.flatnonzero(~(ds.real & (ds.families == family)))
        if train.size == 0:
            continue
        hyper, _ = select_hyper(ds, train, n_splits, grid)
        chosen[test] = tree_policy(fit(ds, train, hyper), ds, test)
        sub = ds.times[test]
        fixed = {k: selection_metrics(sub, fixed_policy(ds, k)[test]) for k in ds.kernels}
        best = best_fixed(fixed)
        out[family] = {
            "tree": selection_metrics(sub, chosen[test]),
            "hand rule": selection_metrics(sub, rule_policy(ds)[test]),
            "best fixed": dict(fixed[best], kernel=best),
        }
    return out, chosen
