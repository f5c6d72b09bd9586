"""How long a labelling run will take: per-matrix times of a reference run, scaled to this machine.

:class:`Forecast` is what ``retrain`` prints before and during labelling; it reads a shipped
label file of the same kind of device (:func:`reference_labels`, :func:`labelling_seconds`).
Kept apart from the labeller, which only feeds it the seconds each matrix took.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import numpy as np

from .records import read_records


def predicted_seconds(history: list[tuple[int, float]], nnz: int) -> float:
    """Time for a matrix of ``nnz``: that of the nearest size labelled so far, scaled up
    linearly if this one is larger."""
    if not history:
        return 0.0
    near_nnz, seconds = min(history, key=lambda h: abs(math.log((h[0] + 1) / (nnz + 1))))
    return seconds * max(1.0, nnz / max(near_nnz, 1))


def labelling_seconds(records) -> dict[str, tuple[int, float]]:
    """Seconds each matrix of a labelling run took, by name, with its nonzeros: the gaps
    between consecutive records' dates (they include generating the matrix; the first record,
    without a predecessor, is left out)."""
    dates = [datetime.datetime.fromisoformat(r["date"]) for r in records]
    return {r["name"]: (int(r["nnz"]), (later - earlier).total_seconds())
            for r, earlier, later in zip(records[1:], dates, dates[1:])}


def reference_labels(device: str) -> Path | None:
    """A shipped label file of ``device``'s kind ("cuda" or "cpu") to forecast with, or None."""
    from autospmv._decide.model.lookup import shipped_models

    folders = {path.parent / "labels" for path in shipped_models().values()}
    files = sorted(f for folder in folders for f in folder.glob(f"{device}-*.jsonl*"))
    return files[0] if files else None


class Forecast:
    """How long a labelling run has left, from the corpus and the times measured so far.

    Matrices differ in cost by a factor of a hundred (a 10⁶-nonzero matrix takes about 40 times
    as long as a 10⁴ one on a 2-core CPU), and the corpus runs small ones first, so counting
    matrices misleads. Each matrix is expected to take what it took in a reference run (a
    shipped label file of the same kind of device: the same matrix by name, else the nearest
    size there, scaled by nonzeros when larger; without one, ``FALLBACK`` seconds = a + b·nnz),
    and those expectations are scaled by how this machine compared on the matrices labelled
    so far: remaining = Σ expected(pending) × Σ measured / Σ expected(labelled).
    """

    FALLBACK = (0.2, 1.2e-5)
    """(seconds per matrix, seconds per nonzero): a + b·nnz fitted to the committed 2-core CPU
    retrain (``benchmarks/results/retrain-cpu-2026-11-22``)."""

    def __init__(self, reference: dict[str, tuple[int, float]] | None = None,
                 source: str = "a 2-core CPU (built-in figures)"):
        self.reference = dict(reference or {})
        self.source = source
        """What the expectations come from, for messages."""
        self._sizes = np.array([nnz for nnz, _ in self.reference.values()], dtype=np.float64)
        self._seconds = np.array([sec for _, sec in self.reference.values()], dtype=np.float64)
        self.measured = 0.0
        self.expected_done = 0.0

    @classmethod
    def for_device(cls, device: str) -> "Forecast":
        """The forecast from :func:`reference_labels` of ``device``, else the fallback."""
        path = reference_labels(device)
        if path is None:
            return cls()
        records = read_records(path)
        name = records[0]["device"].get("name", device) if records else device
        return cls(labelling_seconds(records), f"{name} ({path.name})")

    def expected(self, entry) -> float:
        """Seconds ``entry`` took in the reference run (see the class docstring)."""
        if entry.name in self.reference:
            return self.reference[entry.name][1]
        if not self._sizes.size:
            return self.FALLBACK[0] + self.FALLBACK[1] * entry.nnz
        nearest = int(np.argmin(np.abs(np.log((self._sizes + 1) / (entry.nnz + 1)))))
        return float(self._seconds[nearest] * max(1.0, entry.nnz / max(self._sizes[nearest], 1)))

    def record(self, entry, seconds: float) -> None:
        """Account for ``entry``, which took ``seconds`` here."""
        self.measured += seconds
        self.expected_done += self.expected(entry)

    @property
    def speed(self) -> float:
        """Measured over expected seconds so far (1 before any matrix is labelled)."""
        return self.measured / self.expected_done if self.expected_done > 0 else 1.0

    def remaining(self, entries) -> float:
        """Estimated seconds to label ``entries``."""
        return self.speed * sum(self.expected(entry) for entry in entries)


def minutes_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
