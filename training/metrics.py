"""Selection quality and the policies it is measured on.

The metrics (q = t(best) / t(chosen), geometric mean, share within 10 % of the best, …) are
defined in the :mod:`training.train` docstring. Here: the metrics themselves, the baseline
policies (a fixed kernel, the hand rule), the choices of a fitted tree or of the cost model
alone, the size bands the evaluation is reported in, and how close the parameter choosers come
to the best timed variant. Pure functions of a :class:`training.dataset.Dataset` and its times.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from autospmv._decide import selection as selector
from autospmv._decide.model.tree import CostModel
from .dataset import Dataset, result_time
from .records import target_mode

if TYPE_CHECKING:  # only named in an annotation; fitting.py does not import this module
    from .fitting import Fitted


RULE_ROW = selector.LONG_ROW
"""The hand rule's row threshold, the library rule's (:data:`autospmv._decide.selection.LONG_ROW`)."""
RULE_NNZ = 1_000_000
"""The hand rule's size threshold. The library's fallback rule (``selector.rule_decision``)
has no such clause: it reads the row lengths only, so that it also decides for matrices that
stay on the GPU. Both rules are kept as they are; the policy here is the baseline the trained
models were compared with in their reports."""


def selection_metrics(times: np.ndarray, chosen: np.ndarray) -> dict:
    """The metrics of the :mod:`training.train` docstring; ``chosen`` is a kernel column per
    row, -1 for none."""
    times = np.asarray(times, dtype=np.float64)
    chosen = np.asarray(chosen)
    n = len(chosen)
    if n == 0:
        return {"n": 0}
    best = times.min(axis=1)
    t = np.where(chosen >= 0, times[np.arange(n), np.maximum(chosen, 0)], np.inf)
    miss = ~np.isfinite(t)
    q = np.where(miss, 0.0, best / np.where(miss, 1.0, t))
    hit = q[~miss]
    return {
        "n": int(n),
        "geomean": float(np.exp(np.log(hit).mean())) if not miss.any() else 0.0,
        "geomean_feasible": float(np.exp(np.log(hit).mean())) if hit.size else None,
        "within_10pct": float(np.mean(t <= 1.1 * best)),
        "worst": float(q.min()),
        "top1": float(np.mean(t == best)),
        "top1_tie5": float(np.mean(t <= 1.05 * best)),
        "misses": int(miss.sum()),
    }


def selection_log_q(times: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """log q of every matrix, a miss scoring as the slowest ok kernel."""
    n = len(chosen)
    best = times.min(axis=1)
    worst = np.where(np.isfinite(times), times, -np.inf).max(axis=1)
    t = np.where(chosen >= 0, times[np.arange(n), np.maximum(chosen, 0)], np.inf)
    return np.log(best / np.where(np.isfinite(t), t, worst))


def selection_score(times: np.ndarray, chosen: np.ndarray) -> float:
    """Mean log q, a miss scoring as the slowest ok kernel (the model-selection criterion)."""
    return float(np.mean(selection_log_q(times, chosen)))


RULE_LONG, RULE_SHORT = selector.RULE_LONG, selector.RULE_SHORT
"""The hand rule's two kernels, the library rule's (``selector.rule_decision``): for large
matrices or long rows, and for the rest. Every other policy is derived from the dataset's
kernels, which come from the registry. Where the labels lack one of the two, the rule misses on
the rows that would pick it."""

FIXED = "always "
"""The prefix of the fixed-kernel policies' names: ``"always <kernel>"``, one per kernel."""


def fixed_name(kernel: str) -> str:
    """The name of the policy that always picks ``kernel``."""
    return FIXED + kernel


def fixed_kernel(name: str) -> str | None:
    """The kernel of a fixed-kernel policy's name, None for any other policy."""
    return name[len(FIXED):] if name.startswith(FIXED) else None


def best_fixed(fixed: dict[str, dict]) -> str:
    """The kernel whose fixed policy scores best in ``{kernel: metrics}``: the highest geometric
    mean q, ties broken by the share within 10 %."""
    return max(fixed, key=lambda k: (fixed[k]["geomean"], fixed[k]["within_10pct"]))


def _column(ds: Dataset, kernel: str) -> int:
    """``kernel``'s time column in ``ds``, -1 (a miss) when the labels have none."""
    return ds.kernels.index(kernel) if kernel in ds.kernels else -1


def fixed_policy(ds: Dataset, kernel: str) -> np.ndarray:
    return np.full(len(ds), ds.kernels.index(kernel))


def rule_policy(ds: Dataset) -> np.ndarray:
    """The Ginkgo-style hand rule of the :mod:`training.train` docstring."""
    long = (ds.nnz > RULE_NNZ) | (ds.row_max > RULE_ROW)
    return np.where(long, _column(ds, RULE_LONG), _column(ds, RULE_SHORT))


def first_feasible(times: np.ndarray, ranking: np.ndarray) -> np.ndarray:
    """Per row, the first kernel column of ``ranking`` with a finite time, else -1."""
    finite = np.isfinite(np.take_along_axis(times, ranking, axis=1))
    first = np.argmax(finite, axis=1)
    return np.where(finite.any(axis=1), ranking[np.arange(len(ranking)), first], -1)


def measure_policy(times: np.ndarray, ranking: np.ndarray, k: int) -> np.ndarray:
    """``prepare(A, tune="measure")`` replayed on labelled times: per row, the fastest of the
    first ``k`` kernel columns of ``ranking`` with a finite time (-1 when none has one). The
    labelled time stands in for the time measured while preparing."""
    ranked = np.take_along_axis(times, ranking, axis=1)
    feasible = np.isfinite(ranked)
    candidates = feasible & (np.cumsum(feasible, axis=1) <= k)
    best = np.argmin(np.where(candidates, ranked, np.inf), axis=1)
    return np.where(candidates.any(axis=1), ranking[np.arange(len(ranking)), best], -1)


def tree_policy(fitted: "Fitted", ds: Dataset, rows) -> np.ndarray:
    """The choices of a fitted model (see :func:`fit`), with fallback (see the module
    docstring), for ``ds`` rows ``rows``."""
    return first_feasible(ds.times[rows], fitted.ranking(ds, rows))


def cost_policy(cost_model: CostModel, ds: Dataset, rows) -> np.ndarray:
    """The cost model alone: the kernel with the smallest estimate that ran, per row."""
    estimates = cost_model.times(ds.X[rows], ds.feature_names)
    columns = np.array([ds.kernels.index(k) for k in cost_model.kernels])
    return first_feasible(ds.times[rows], columns[np.argsort(estimates, axis=1, kind="stable")])


def policies(ds: Dataset) -> dict[str, np.ndarray]:
    """The baseline policies' choices on every row."""
    out = {"hand rule": rule_policy(ds)}
    out.update({fixed_name(k): fixed_policy(ds, k) for k in ds.kernels})
    return out


BANDS = (("< 100K", 0, 100_000), ("100K-1M", 100_000, 1_000_000), ("≥ 1M", 1_000_000, math.inf))
"""Size bands (nonzeros) the evaluation is reported in; the last is :data:`LARGE_NNZ` up."""


def band_rows(ds: Dataset, band) -> np.ndarray:
    """Rows of ``ds`` whose nonzeros fall in ``band`` (a :data:`BANDS` entry)."""
    _, low, high = band
    return np.flatnonzero((ds.nnz >= low) & (ds.nnz < high))


def mean_metrics(runs: list[dict]) -> dict:
    """The per-key mean of several :func:`selection_metrics` results on the same rows."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if key != "n" and all(isinstance(r[key], (int, float)) for r in runs):
            out[key] = float(np.mean([r[key] for r in runs]))
    return out


def chooser_quality(records, mode: str = "auto") -> dict[str, dict]:
    """For kernels with parameter variants: how close each strategy (the chooser, each
    variant's strategy) comes to the best variant timed on the same matrix.

    Returns ``{kernel: {strategy: {"n", "geomean", "within_10pct"}}}`` with q = t(best variant)
    / t(strategy), over the matrices where every strategy of the kernel ran ``ok``.
    """
    per_kernel: dict[str, dict[str, list]] = {}
    for record in records:
        by_kernel: dict[str, dict[str, float]] = {}
        row_mode = target_mode(record["nnz"], mode)
        for variant in record.get("variants", []):
            by_kernel.setdefault(variant["kernel"], {})[variant["strategy"]] = \
                result_time(variant, row_mode)
        for kernel, strategies in by_kernel.items():
            strategies["chooser"] = result_time(record["kernels"].get(kernel), row_mode)
            times = np.array(list(strategies.values()))
            if not np.isfinite(times).all():
                continue
            for strategy, t in strategies.items():
                per_kernel.setdefault(kernel, {}).setdefault(strategy, []).append(
                    times.min() / t)
    return {
        kernel: {s: {"n": len(q), "geomean": float(np.exp(np.mean(np.log(q)))),
                     "within_10pct": float(np.mean(np.array(q) >= 1 / 1.1))}
                 for s, q in strategies.items()}
        for kernel, strategies in per_kernel.items()
    }
