"""One line per feature: what each name a decision tree may compare means.

:data:`FEATURE_DESCRIPTIONS` is the single glossary: ``explain`` (``python -m autospmv explain``)
prints the entry of every feature on a decision path, and the feature table of
``models/README.md`` is this dict (a test keeps the two equal; :func:`markdown_table` writes the
table). The full definitions, with the edge cases, are in :mod:`autospmv._decide.features.extract`
and :mod:`autospmv._decide.cost`.
"""

from __future__ import annotations

from .. import _registry as registry
from .._decide.features.quantities import QUANTITIES
from .._registry import KERNELS

_STRUCTURE = {
    "rows": "number of rows m",
    "cols": "number of columns n",
    "nnz": "number of stored entries",
    "density": "nnz / (m·n)",
    "log10_rows": "log10(1 + rows)",
    "log10_cols": "log10(1 + cols)",
    "log10_nnz": "log10(1 + nnz)",
    "row_mean": "mean row length (stored entries per row)",
    "row_std": "standard deviation of the row lengths",
    "row_cv": "row_std / row_mean: how unequal the rows are",
    "row_min": "shortest row length",
    "row_max": "longest row length",
    "row_median": "median row length",
    "row_p90": "90th percentile of the row lengths",
    "row_p99": "99th percentile of the row lengths",
    "row_max_over_mean": "longest row / mean row length (1 = all rows equal)",
    "row_gini": "Gini coefficient of the row lengths (0 = equal rows, near 1 = one row holds all)",
    "row_skew": "skewness of the row lengths (large = a few rows much longer than the rest)",
    "empty_row_share": "share of rows without entries",
    "top1pct_nnz_share": "share of the entries in the longest 1 % of the rows",
    "ell_fill": "ELL storage per entry, m·row_max / nnz (1 = no padding)",
    "hyb_width": "ELL width of HYB that the cost model prefers (entries per row)",
    "hyb_coo_share": "share of the entries HYB would leave to its COO part at that width",
    "warp_imbalance": "mean over groups of 32 rows of longest / mean row length (divergence)",
    "warp_imbalance_sorted": "warp_imbalance after sorting the rows by length, as JDS runs them",
    "bandwidth": "largest distance |i − j| of an entry from the diagonal",
    "bandwidth_rel": "bandwidth / max(m, n) (0 = diagonal, near 1 = entries far from it)",
    "narrow_band_share": "share of the entries within 1 % of max(m, n) of the diagonal",
    "diagonals": "number of distinct occupied diagonals j − i",
    "diagonals_per_row": "diagonals / m: DIA storage per row",
    "x_sectors_per_nnz_row": "32-byte pieces of x read per entry, one row at a time (low = reuse)",
    "x_sectors_per_nnz_warp": "32-byte pieces of x read per entry by 32 rows together (coalescing)",
}
_RULE = {"max_row_length": "longest row length (what the built-in rule reads; row_max in a model)"}
_BLOCKS = {
    f"block{b}_{kind}": text.format(b=b)
    for b in (2, 3, 4, 8)
    for kind, text in (("share", "share of the entries inside fully stored aligned {b}×{b} blocks"),
                       ("fill", "BSR storage per entry with {b}×{b} blocks (1 = blocks are full)"))
}
_QUANTITIES = {
    "bytes": "memory traffic in bytes (its arrays, x and y once)",
    "work": "thread steps (32 × each warp's longest loop, summed)",
    "span": "steps of the longest thread loop",
    "atomics": "most atomic additions into one entry of y",
    "launches": "device steps of one product (kernel launches and memsets)",
}


def _kernel_descriptions(kernel: str) -> dict[str, str]:
    """The descriptions of one kernel's cost quantities and estimate."""
    out = {f"{kernel}_{q}": f"{kernel}'s {_QUANTITIES[q]}, with its chosen parameters"
           for q in QUANTITIES}
    out[f"est_{kernel}"] = (f"log2(cost model's time for {kernel} / its fastest kernel's); "
                            "0 = expected fastest")
    return out


_COST = {name: text for kernel in KERNELS for name, text in _kernel_descriptions(kernel).items()
         if not name.startswith("est_")}
_ESTIMATES = {name: text for kernel in KERNELS
              for name, text in _kernel_descriptions(kernel).items() if name.startswith("est_")}

FEATURE_DESCRIPTIONS: dict[str, str] = {**_STRUCTURE, **_BLOCKS, **_COST, **_ESTIMATES, **_RULE}
"""Feature name -> one-line description, for every name of
:data:`autospmv._decide.features.extract.FEATURE_NAMES`, every estimate ``est_<kernel>`` a model
derives and the built-in rule's ``max_row_length``."""


def describe(name: str) -> str:
    """The one-line description of a feature name (a plain note for an unknown one); the cost
    quantities and estimates of registered kernels are described like the built-in ones'."""
    if name in FEATURE_DESCRIPTIONS:
        return FEATURE_DESCRIPTIONS[name]
    for kernel in registry.names():
        text = _kernel_descriptions(kernel).get(name)
        if text is not None:
            return text
    return "not in autospmv's glossary (autospmv/_tools/glossary.py)"


def markdown_table() -> str:
    """The glossary as the Markdown table of ``models/README.md``: the structural features one
    per row, the cost quantities and estimates as one row per pattern."""
    rows = [f"| `{name}` | {text} |" for name, text in {**_STRUCTURE, **_BLOCKS}.items()]
    rows += [f"| `<kernel>_{q}` | the kernel's {text}, with its chosen parameters |"
             for q, text in _QUANTITIES.items()]
    rows.append("| `est_<kernel>` | log2(cost model's time for the kernel / its fastest "
                "kernel's); 0 = expected fastest |")
    rows += [f"| `{name}` | {text} |" for name, text in _RULE.items()]
    return "\n".join(["| feature | meaning |", "|---|---|", *rows])
