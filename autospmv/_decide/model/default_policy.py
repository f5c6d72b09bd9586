"""A default kernel per size band that a tree's choice must clearly beat to replace.

A decision tree trained on a few hundred matrices is right on average but can be confidently
wrong on a structure it has never seen, while one fixed kernel (csr5 on large matrices, say)
is rarely far from the best. A :class:`DefaultPolicy` combines the two: each size band (by
nonzeros) has a default kernel, the best fixed kernel of that band in the training labels, and
the tree's first choice replaces it only when the tree's own *margin* for it over the default
reaches the band's threshold. The thresholds are calibrated by leave-one-kind-out
cross-validation (``autospmv.training.defaults``): a band keeps a finite threshold only where
overriding at it gained more, on kinds of matrices the tree had not seen, than the error of
that gain; otherwise the threshold is infinite and the default always stands.

The margin is in the model's own units (:func:`margin`): for a ``"correction"`` ranking the
log2 ratio of the default's corrected time estimate to the choice's (0.5 = the tree expects the
choice to be 1.41× faster); for a ``"value"`` ranking the difference of their leaf scores.

File layout (the ``"defaults"`` entry of a model file, schema version 3)::

    {"bands": [{"min_nnz": 0, "kernel": "csr_vector", "threshold": 0.1},
               {"min_nnz": 1000000, "kernel": "csr_vector", "threshold": 0.25},
               {"min_nnz": 10000000, "kernel": "csr5", "threshold": null}]}   # null: never

Bands are sorted by ``min_nnz``; the first starts at 0.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np


@dataclasses.dataclass(frozen=True)
class Band:
    """Matrices of at least ``min_nnz`` nonzeros (up to the next band's): the ``kernel`` that
    stands unless the tree's margin reaches ``threshold`` (``math.inf``: always stands)."""

    min_nnz: int
    kernel: str
    threshold: float

    def describe(self, upper: int | None) -> str:
        if upper is None:
            return f"matrices of at least {self.min_nnz:,} nonzeros"
        if self.min_nnz == 0:
            return f"matrices of fewer than {upper:,} nonzeros"
        return f"matrices of {self.min_nnz:,} to {upper - 1:,} nonzeros"


@dataclasses.dataclass(frozen=True)
class Override:
    """What :meth:`DefaultPolicy.decide` did for one matrix: the kernel to use, whether the
    tree's choice replaced the default, and the sentence ``explain()`` shows."""

    kernel: str
    overridden: bool
    note: str


class DefaultPolicy:
    """Per size band a default kernel and the margin the tree needs to replace it."""

    def __init__(self, bands):
        bands = [b if isinstance(b, Band) else Band(*b) for b in bands]
        if not bands:
            raise ValueError("a default policy needs at least one band")
        if bands[0].min_nnz != 0:
            raise ValueError("the first band of a default policy must start at 0 nonzeros")
        starts = [b.min_nnz for b in bands]
        if starts != sorted(set(starts)):
            raise ValueError("the bands of a default policy must have increasing min_nnz")
        for band in bands:
            if math.isnan(band.threshold) or band.threshold < 0:
                raise ValueError(f"a band's threshold must be >= 0 or null; got {band.threshold}")
        self.bands: tuple[Band, ...] = tuple(bands)

    def band(self, nnz: float) -> tuple[Band, int | None]:
        """The band of a matrix of ``nnz`` nonzeros and the next band's start (None: last)."""
        index = int(np.searchsorted([b.min_nnz for b in self.bands], nnz, side="right")) - 1
        upper = self.bands[index + 1].min_nnz if index + 1 < len(self.bands) else None
        return self.bands[index], upper

    def decide(self, nnz: float, ranked, margins: Mapping[str, float]) -> Override:
        """The kernel for a matrix of ``nnz`` nonzeros whose tree ranked the kernels
        ``ranked`` (best first), with ``margins[k]`` the tree's margin of ``ranked[0]`` over
        ``k`` (:func:`margin`)."""
        band, upper = self.band(nnz)
        choice, default = ranked[0], band.kernel
        where = band.describe(upper)
        if choice == default:
            return Override(default, False, f"the default for {where} is {default}, which the "
                                            "tree also ranks first")
        gap = margins.get(default, math.inf) if default in ranked else math.inf
        if gap >= band.threshold:
            return Override(choice, True, (
                f"the tree's {choice} replaces the default {default} for {where}: its margin "
                f"{gap:.3g} reaches the threshold {band.threshold:.3g} that leave-one-kind-out "
                "cross-validation calibrated for this band"))
        why = ("cross-validation found no threshold at which overriding it gained more than "
               "its error on kinds of matrices left out of training" if math.isinf(band.threshold)
               else f"the tree's margin for {choice} ({gap:.3g}) is below the band's calibrated "
                    f"threshold {band.threshold:.3g}")
        return Override(default, False, f"the default {default} for {where} stood: {why}")

    def to_dict(self) -> dict:
        return {"bands": [{"min_nnz": b.min_nnz, "kernel": b.kernel,
                           "threshold": None if math.isinf(b.threshold) else b.threshold}
                          for b in self.bands]}

    @classmethod
    def from_dict(cls, doc, known_kernels=None) -> "DefaultPolicy":
        """Validate a parsed ``"defaults"`` entry; ValueError naming the problem."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("bands"), list):
            raise ValueError("the model's 'defaults' must be an object with a 'bands' list")
        bands = []
        for entry in doc["bands"]:
            if not isinstance(entry, Mapping):
                raise ValueError("each band of 'defaults' must be an object")
            min_nnz, kernel, threshold = (entry.get("min_nnz"), entry.get("kernel"),
                                          entry.get("threshold"))
            if isinstance(min_nnz, bool) or not isinstance(min_nnz, int) or min_nnz < 0:
                raise ValueError(f"a band's min_nnz must be an integer >= 0; got {min_nnz!r}")
            if not isinstance(kernel, str) or (known_kernels is not None
                                               and kernel not in known_kernels):
                raise ValueError(f"a band's kernel must be a known kernel name; got {kernel!r}")
            if threshold is None:
                threshold = math.inf
            elif isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
                raise ValueError(f"a band's threshold must be a number or null; got {threshold!r}")
            bands.append(Band(min_nnz, kernel, float(threshold)))
        return cls(bands)


def margins(ranking: str, classes, scores) -> dict[str, float]:
    """The margin of the best-ranked class over each class, from one evaluation's per-class
    ``scores`` in class order: corrected log2 time estimates for a ``"correction"`` ranking
    (smaller is better: the margin over k is ``score[k] - min``), leaf values for a
    ``"value"`` ranking (larger is better: ``max - score[k]``)."""
    scores = np.asarray(scores, dtype=np.float64)
    gaps = scores - scores.min() if ranking == "correction" else scores.max() - scores
    return dict(zip(classes, gaps.tolist()))
