"""The training report: the Markdown that ``train`` writes next to the model.

Tables of the nested cross-validation per fold, every policy, the size bands, the held-out
matrices, the real families each left out of training, the cost model's coefficients, the
parameter choosers and the tree itself. Only formatting: every figure is computed by
:mod:`training.train`, :mod:`training.metrics` and :mod:`training.crossval`.
"""

from __future__ import annotations

import math

import numpy as np

from autospmv._decide.model.tree import CostModel, TreeModel
from .dataset import Dataset
from .fitting import QUALITY_FLOOR, STREAMED_NNZ, Hyper, RegimeHyper
from .records import LARGE_NNZ, NOISE_LIMIT
from .metrics import (best_fixed, chooser_quality, fixed_policy, rule_policy,
                      selection_metrics)


def _table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _metric_cells(m: dict) -> list[str]:
    return [str(m["n"]), _fmt(m["geomean"]), _fmt(m["geomean_feasible"]),
            _pct(m["within_10pct"]), _fmt(m["worst"]), _pct(m["top1"]), _pct(m["top1_tie5"]),
            str(m["misses"])]


METRIC_HEADERS = ["n", "geomean q", "geomean q (not missed)", "within 10 %", "worst q",
                  "top-1", "top-1 (5 % ties)", "misses"]


_MODE_WORDS = {"auto": f"back-to-back from {LARGE_NNZ:,} nonzeros, per call below",
               "per_call": "per call", "b2b": "back-to-back"}


def _band_table(bands: dict) -> str:
    """One row per (size band, policy): geomean q, within 10 %, worst q; per band the tree,
    the cost model alone, the hand rule and the fixed kernels by falling geomean."""
    rows = []
    for band, by_policy in bands.items():
        learned = [p for p in ("tree", "cost model alone") if p in by_policy]
        fixed = sorted((p for p in by_policy if p not in learned),
                       key=lambda p: -by_policy[p]["geomean"])
        for policy in learned + fixed:
            m = by_policy[policy]
            rows.append([band, policy, m["n"], _fmt(m["geomean"]), _pct(m["within_10pct"]),
                         _fmt(m["worst"]), int(m["misses"])])
    return _table(["nonzeros", "policy", "n", "geomean q", "within 10 %", "worst q", "misses"],
                  rows)


def _describe(hyper: Hyper | RegimeHyper) -> str:
    """``objective/depth/leaf/weighting`` (``cost model alone`` for the uncorrected leaf); per
    size regime, ``small …; large …``."""
    if isinstance(hyper, RegimeHyper):
        streamed = (f"; streamed {_describe(hyper.streamed)}" if hyper.streamed is not None
                    else "")
        return f"small {_describe(hyper.small)}; large {_describe(hyper.large)}{streamed}"
    if not hyper.corrected:
        return "cost model alone"
    return (f"{hyper.objective}/{hyper.max_depth}/{hyper.min_samples_leaf}/"
            f"{hyper.weighting}")


def _settings(hyper: Hyper) -> str:
    if not hyper.corrected:
        return "the cost model alone (a single leaf correcting nothing)"
    return (f"max_depth={hyper.max_depth}, min_samples_leaf={hyper.min_samples_leaf}, "
            f"weighting={hyper.weighting}")


def _chosen(hyper: Hyper | RegimeHyper, large_nnz: float | None) -> str:
    """The chosen hyperparameters in words, per size regime where there are two."""
    objective = f"objective={hyper.objective}" + (
        f" (floor {QUALITY_FLOOR})" if hyper.objective == "quality" else "")
    if not isinstance(hyper, RegimeHyper):
        return f"{objective}, {_settings(hyper)}"
    words = (f"{objective}; per size regime, each by the out-of-fold score on its own "
             f"matrices: small (below {large_nnz:,.0f} nonzeros, per call) "
             f"{_settings(hyper.small)}; ")
    if hyper.streamed is None:
        return words + f"large (from {large_nnz:,.0f}, back-to-back) {_settings(hyper.large)}"
    return (words + f"large (from {large_nnz:,.0f} to {STREAMED_NNZ - 1:,}, back-to-back) "
            f"{_settings(hyper.large)}; streamed (from {STREAMED_NNZ:,}, back-to-back) "
            f"{_settings(hyper.streamed)}")


def _all_real_row(ds: Dataset, tree: dict) -> list:
    """The pooled row of the leave-one-family-out table."""
    real = np.flatnonzero(ds.as_given)
    sub = ds.times[real]
    fixed = {k: selection_metrics(sub, fixed_policy(ds, k)[real]) for k in ds.kernels}
    best = best_fixed(fixed)
    rule = selection_metrics(sub, rule_policy(ds)[real])
    return ["**all real**", tree["n"], f"**{_fmt(tree['geomean'])}**",
            _pct(tree["within_10pct"]), _fmt(tree["worst"]), _fmt(rule["geomean"]),
            f"{best} {_fmt(fixed[best]['geomean'])}"]


def _real_matrix_table(ds: Dataset, chosen: np.ndarray) -> str:
    """One row per real matrix: the tree's choice (trained without its family) and the best."""
    rows = []
    for i in np.flatnonzero(ds.as_given):
        best, pick = int(np.argmin(ds.times[i])), int(chosen[i])
        q = ds.times[i, best] / ds.times[i, pick] if pick >= 0 else 0.0
        rows.append([ds.names[i], ds.families[i], int(ds.nnz[i]),
                     ds.kernels[pick] if pick >= 0 else "none", ds.kernels[best],
                     f"{ds.times[i, best]:.1f}", _fmt(q)])
    return _table(["matrix", "family", "nnz", "tree's kernel", "fastest kernel",
                   "fastest µs", "q"], rows)


def _real_counts(ds: Dataset) -> str:
    real, grown = int(ds.real.sum()), int((ds.real & ~ds.as_given).sum())
    if not grown:
        return f"{real} real"
    return f"{real} real: {real - grown} as given, {grown} grown copies"


def _cost_model_table(cost_model: CostModel) -> str:
    """The exported cost model's coefficients, one row per kernel; one table per size regime
    where it has two."""
    headers = ["kernel", "constant µs", "ns per row", "ns per nonzero", "ns per x sector",
               "ps per nonzero × row length", "bytes: GB/s", "ps per thread step",
               "ns per span step", "ns per atomic", "µs per launch"]

    def table(coefficients) -> str:
        rows = []
        for kernel, (constant, per_row, per_nnz, per_sector, per_row_length, per_byte,
                     per_step, per_span, per_atomic, per_launch) in zip(cost_model.kernels,
                                                                         coefficients):
            rows.append([kernel, _fmt(constant, 2), _fmt(per_row * 1e3), _fmt(per_nnz * 1e3),
                         _fmt(per_sector * 1e3), _fmt(per_row_length * 1e6),
                         _fmt(1e-3 / per_byte, 0) if per_byte else "–", _fmt(per_step * 1e6),
                         _fmt(per_span * 1e3), _fmt(per_atomic * 1e3), _fmt(per_launch, 2)])
        return _table(headers, rows)

    intro = ("## Cost model (fitted on all matrices)\n\nt̂ = constant + Σ coefficient × "
             "quantity (`autospmv/_decide/cost.py`); \"bytes\" as the bandwidth it implies.")
    if not cost_model.regimes:
        return intro + "\n\n" + table(cost_model.coefficients)
    starts = [start for start, _ in cost_model.regimes]
    parts = [f"Below {starts[0]:,.0f} nonzeros (per-call times):\n\n"
             + table(cost_model.coefficients)]
    for i, (start, coefficients) in enumerate(cost_model.regimes):
        upto = f" to {starts[i + 1]:,.0f}" if i + 1 < len(starts) else ""
        parts.append(f"From {start:,.0f}{upto} nonzeros (back-to-back times):\n\n"
                     + table(coefficients))
    return (f"{intro} One table per size regime, each fitted on its own matrices.\n\n"
            + "\n\n".join(parts))


def _band_name(low: float, high: float) -> str:
    return f"≥ {low:,.0f}" if math.isinf(high) else f"{low:,.0f}–{high:,.0f}"


def _defaults_section(table: list[dict]) -> str:
    """The default kernel per size band, the tree's out-of-kind score beside it, the margin
    threshold calibrated for overriding (``training.defaults``) and the calibration table."""
    rows = []
    for row in table:
        chosen = next((c for c in row["candidates"] if c["threshold"] == row["threshold"]),
                      None)
        policy = chosen["metrics"] if chosen else row["default_metrics"]
        rows.append([_band_name(row["low"], row["high"]), row["n"], row["bases"],
                     row["default"], _fmt(row["default_metrics"]["geomean"]),
                     _fmt(row["tree_metrics"]["geomean"]),
                     "never" if math.isinf(row["threshold"]) else _fmt(row["threshold"], 2),
                     _fmt(policy["geomean"]), _pct(policy["within_10pct"]),
                     _fmt(policy["worst"]),
                     f"{row['gain']:+.4f} ± {row['error']:.4f}" if row["error"] is not None
                     else "–"])
    intro = ("## Default kernels and the tree's overrides, leave one kind out\n\n"
             "Per band of nonzeros the default is the best fixed kernel of the labels; the tree "
             "replaces it only where its margin (log2 of its estimated speed-up over the default) "
             "reaches the threshold. Each matrix is scored by a tree fitted without its group "
             "(kind × real/synthetic); a threshold is eligible only when its gain in mean log q "
             "over the default, averaged per base (a file and its grown copies), exceeds the "
             "gain's standard error, and the eligible one of largest gain is kept.")
    parts = [intro, _table(["nonzeros", "n", "bases", "default", "default geomean q",
                            "tree alone geomean q", "threshold", "model geomean q",
                            "within 10 %", "worst q", "gain ± error (mean log q)"], rows)]
    calibration = []
    for row in table:
        for b in row["calibration"]:
            if b["n"]:
                calibration.append([_band_name(row["low"], row["high"]),
                                    f"{b['low']:g}–{b['high']:g}", b["n"],
                                    f"{b['realised']:+.3f}", _pct(b["faster"])])
    if calibration:
        parts.append("Calibration: where the out-of-kind tree ranked another kernel first, by "
                     "its margin over the default: how often, the realised log2 speed-up of "
                     "its kernel over the default's (mean), and the share where it was faster.")
        parts.append(_table(["nonzeros", "margin", "n", "realised log2 speed-up",
                             "faster"], calibration))
    return "\n\n".join(parts)


def report_text(ds: Dataset, model: TreeModel, scores: dict, records, mode: str) -> str:
    hyper, cv, folds = scores["hyper"], scores["cv"], scores["folds"]
    device = (records[0].get("device") or {}).get("name", "unknown device")
    labels, counts = np.unique(ds.labels, return_counts=True)
    parts = [
        "# autospmv selection tree: training report",
        f"{len(ds)} matrices ({_real_counts(ds)}) in {len(set(ds.groups))} groups "
        f"(family × synthetic/real), labelled on {device} in "
        f"{(records[0].get('dtype', 'float64') if records else 'float64')}; times: "
        f"{_MODE_WORDS[mode]}. q = t(best)/t(chosen); misses count as q = 0.",
    ]
    if scores["dropped"]:
        parts.append(f"Dropped (no kernel ran correctly): {', '.join(scores['dropped'])}.")
    parts.append(f"Left out as noisy (a kernel's median time above {NOISE_LIMIT} × its minimum "
                 f"after re-timing): {len(ds.noisy)} matrices"
                 + (f" ({', '.join(ds.noisy)})." if ds.noisy else "."))
    verdict = scores["guard"]
    parts.append(f"Guard (install only if the tree beats the best fixed kernel): "
                 f"{'passed' if verdict['passed'] else 'FAILED'}: {verdict['reason']}.")
    parts.append("Fastest kernel: " + ", ".join(f"{k} {c}" for k, c in zip(labels, counts))
                 + " matrices.")
    searched = ", ".join(dict.fromkeys(h.objective for h in scores["grid"]))
    shape = f"{model.n_nodes} nodes, depth {model.depth}"
    if isinstance(hyper, RegimeHyper):
        shape += ", its root splitting the regimes on nnz"
        if hyper.streamed is not None:
            shape += " and its large side splitting again at the streamed size"
    parts.append(f"Chosen by grouped CV on all matrices among {len(scores['grid'])} settings "
                 f"(objectives: {searched}): {_chosen(hyper, ds.large_nnz)}; tree: {shape}.")
    if folds:
        parts.append("## Nested cross-validation, per outer fold")
        rows = []
        for i, fold in enumerate(folds, start=1):
            m = selection_metrics(ds.times[fold.test], fold.chosen)
            rule = selection_metrics(ds.times[fold.test], rule_policy(ds)[fold.test])
            rows.append([i, ", ".join(sorted(set(ds.groups[fold.test]))), m["n"],
                         _fmt(m["geomean"]), _pct(m["within_10pct"]), _fmt(m["worst"]),
                         _pct(m["top1_tie5"]), _fmt(rule["geomean"]),
                         _describe(fold.hyper)])
        parts.append(_table(["fold", "test groups", "n", "tree geomean q", "within 10 %",
                             "worst q", "top-1 (5 % ties)", "hand rule geomean q",
                             "objective/depth/leaf/weighting"], rows))
    repeats = scores["repeats"]
    parts.append(f"## All policies (tree: out-of-fold choices of the nested CV, mean of "
                 f"{len(repeats)} repeats on shuffled grouped folds)")
    parts.append(_table(["policy"] + METRIC_HEADERS,
                        [[name] + _metric_cells(m) for name, m in cv.items() if m]))
    if len(repeats) > 1:
        parts.append("Per repeat, tree: " + "; ".join(
            f"{_fmt(m['geomean'])} / {_pct(m['within_10pct'])} / worst {_fmt(m['worst'])}"
            for m in repeats) + " (geomean q / within 10 % / worst q).")
    parts.append("## By size (nonzeros), out of fold\n\n" + _band_table(scores["bands"]))
    if scores.get("defaults"):
        parts.append(_defaults_section(scores["defaults"]))
    held = scores["held_out"]
    if held:
        parts.append(f"## Held-out matrices ({len(held['names'])}; never used for training "
                     "or tuning)\n\n" + _band_table(
                         {k: v for k, v in held.items() if k not in ("names", "noisy")})
                     + (f"\n\nLeft out as noisy: {', '.join(held['noisy'])}."
                        if held["noisy"] else ""))
    if scores["lofo"]:
        parts.append("## Real matrices, each family left out of training\n\n"
                     "Each family's tree has its hyperparameters chosen and is fitted without "
                     "that family.")
        rows = [[family, r["tree"]["n"], _fmt(r["tree"]["geomean"]),
                 _pct(r["tree"]["within_10pct"]), _fmt(r["tree"]["worst"]),
                 _fmt(r["hand rule"]["geomean"]),
                 f"{r['best fixed']['kernel']} {_fmt(r['best fixed']['geomean'])}"]
                for family, r in scores["lofo"].items()]
        rows.append(_all_real_row(ds, scores["lofo_all"]))
        parts.append(_table(["family", "n", "tree geomean q", "within 10 %", "worst q",
                             "hand rule geomean q", "best fixed kernel, geomean q"], rows))
        parts.append(_real_matrix_table(ds, scores["lofo_chosen"]))
    if model.cost_model is not None:
        parts.append(_cost_model_table(model.cost_model))
    quality = chooser_quality(records, mode)
    if quality:
        parts.append("## Parameter choosers against the best timed variant")
        rows = [[kernel, strategy, m["n"], _fmt(m["geomean"]), _pct(m["within_10pct"])]
                for kernel, strategies in quality.items()
                for strategy, m in sorted(strategies.items())]
        parts.append(_table(["kernel", "strategy", "n", "geomean q", "within 10 %"], rows))
    parts.append("## Tree\n\n```\n" + model.export_text() + "```")
    return "\n\n".join(parts) + "\n"
