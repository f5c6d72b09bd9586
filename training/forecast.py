"""How long a labelling run will take: per-matrix times of a reference run, scaled to this machine.

:class:`Forecast` is what ``retrain`` prints before and during labelling. Its reference run is a
label file of the same kind of device that the shipped models came with; what the forecast needs
of it, each matrix's nonzeros and seconds (:func:`labelling_seconds`), ships as a summary beside
the models (:data:`SUMMARY`, :func:`reference_run`), while the label records themselves stay in
the repository. Kept apart from the labeller, which only feeds it the seconds each matrix took.

The summary is rebuilt from the repository's label files with

    python -m autospmv.training.forecast models/labels/*.jsonl.gz \\
        --out models/labels/labelling-times.json
"""

from __future__ import annotations

import datetime
import hashlib
import json
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


SUMMARY = "labelling-times.json"
"""The summary of the reference runs: the one file of the label folder (``labels/`` of the
shipped models' folder, ``autospmv.models``) that an install holds."""

SUMMARY_SCHEMA = "autospmv-labelling-times/1"


def summarise(label_files) -> dict:
    """The summary of ``label_files`` that :func:`reference_run` reads: for each kind of device
    ("cuda", "cpu"), the first of its files by name, with its device's name and the seconds
    each matrix took (:func:`labelling_seconds`)."""
    runs = {}
    for path in sorted(map(Path, label_files), key=lambda p: p.name):
        device = path.name.split("-", 1)[0]
        if device in runs:
            continue
        records = read_records(path)
        runs[device] = {
            "file": path.name,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "device": records[0]["device"].get("name", device) if records else device,
            "seconds": {name: [nnz, seconds]
                        for name, (nnz, seconds) in labelling_seconds(records).items()},
        }
    return {"schema": SUMMARY_SCHEMA, "runs": runs}


def summary_text(summary: dict) -> str:
    """``summary`` as JSON with one matrix per line, so that a change reads as a short diff."""
    lines = ["{", f'  "schema": {json.dumps(summary["schema"])},', '  "runs": {']
    runs = list(summary["runs"].items())
    for number, (device, run) in enumerate(runs):
        lines.append(f"    {json.dumps(device)}: {{")
        lines += [f"      {json.dumps(key)}: {json.dumps(run[key])},"
                  for key in ("file", "sha256", "device")]
        lines.append('      "seconds": {')
        matrices = list(run["seconds"].items())
        lines += [f"        {json.dumps(name)}: {json.dumps(times)}"
                  + ("," if position < len(matrices) - 1 else "")
                  for position, (name, times) in enumerate(matrices)]
        lines += ["      }", "    }" + ("," if number < len(runs) - 1 else "")]
    return "\n".join(lines + ["  }", "}"]) + "\n"


def reference_run(device: str, folder=None) -> dict | None:
    """The reference run of ``device``'s kind ("cuda" or "cpu") in the summary of ``folder``
    (default: the shipped models' label folder), or None where there is none. A run is a dict with
    its label ``file``, the ``device``'s name and the ``seconds`` of each matrix by name, as
    ``[nnz, seconds]``."""
    if folder is None:
        from importlib import resources

        try:
            folder = resources.files("autospmv.models") / "labels"
        except ModuleNotFoundError:
            return None
    try:
        summary = json.loads((folder / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("schema") != SUMMARY_SCHEMA:
        return None
    return summary["runs"].get(device)


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
    def for_device(cls, device: str, folder=None) -> "Forecast":
        """The forecast from the reference run of ``device``'s kind (:func:`reference_run`),
        else the fallback."""
        run = reference_run(device, folder)
        if run is None:
            return cls()
        seconds = {name: (int(nnz), float(sec)) for name, (nnz, sec) in run["seconds"].items()}
        return cls(seconds, f"{run['device']} ({run['file']})")

    @classmethod
    def from_records(cls, path, device: str) -> "Forecast":
        """The forecast from the label file ``path`` itself, as the summary gives it."""
        records = read_records(path)
        name = records[0]["device"].get("name", device) if records else device
        return cls(labelling_seconds(records), f"{name} ({Path(path).name})")

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


def main(argv=None) -> int:
    """Write the summary of label files (the module docstring's command)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m autospmv.training.forecast",
                                     description="Summarise label files for retrain's forecast.")
    parser.add_argument("labels", nargs="+", type=Path, help="label files (.jsonl[.gz])")
    parser.add_argument("--out", type=Path, required=True, help=f"the summary ({SUMMARY})")
    args = parser.parse_args(argv)
    args.out.write_text(summary_text(summarise(args.labels)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
