"""Which multi-vector program runs a product ``A @ X`` of k columns on the GPU where none can be
timed, as a model file carries it (``spmm_rule``, schema version 7): fitted to the programs'
times on the device (``python -m autospmv.training fit-spmm``).

The first product of k > 4 columns times the programs of
:mod:`autospmv.kernels.cuda.spmm_programs` and keeps the fastest. Where it cannot time them (the
stream is being captured into a CUDA graph: nothing may wait for it), it runs the rule's program
for k and A's mean row length instead of the many-columns kernel alone."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

PROGRAMS = ("many_columns", "column_pairs", "column_pairs_wide_step", "column_quads", "passes",
            "eight_columns")
"""The programs a rule may name (:data:`autospmv.kernels.cuda.spmm_programs.PROGRAMS`)."""

TILED = ("column_pairs", "column_quads")
"""Those that may run in tiles of X's columns, named ``"<program>@tiled"``
(:data:`autospmv.kernels.cuda.spmm_programs.TILED`)."""

FEW_COLUMN_PROGRAMS = {"passes": 8, "eight_columns": 8}
"""Programs only for products of at most this many columns."""


def check_program(name) -> str:
    """``name`` as a rule names a program, or ValueError."""
    base, _, tiled = str(name).partition("@") if isinstance(name, str) else ("", "", "")
    if base not in PROGRAMS or (tiled and (tiled != "tiled" or base not in TILED)):
        raise ValueError(f"the SpMM rule names an unknown program {name!r}; valid: "
                         + ", ".join(PROGRAMS) + " and " + ", ".join(f"{p}@tiled" for p in TILED))
    return name


@dataclasses.dataclass(frozen=True)
class SpmmChoice:
    """The program for products of up to ``columns`` columns: ``below`` for a matrix whose mean
    row length is below ``threshold``, else ``above`` (both the same where ``threshold`` is
    None)."""

    columns: int
    threshold: float | None
    below: str
    above: str

    def __post_init__(self):
        if isinstance(self.columns, bool) or not isinstance(self.columns, int) or self.columns < 5:
            raise ValueError(f"an SpMM choice's columns must be a whole number of at least 5; "
                             f"found {self.columns!r}")
        if self.threshold is not None and (
                isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float))
                or not math.isfinite(self.threshold) or self.threshold < 0):
            raise ValueError(f"an SpMM choice's threshold must be a non-negative number or "
                             f"null; found {self.threshold!r}")
        for name in (self.below, self.above):
            check_program(name)
            limit = FEW_COLUMN_PROGRAMS.get(name.partition("@")[0])
            if limit is not None and self.columns > limit:
                raise ValueError(f"the SpMM rule names {name} for {self.columns} columns; it "
                                 f"runs at most {limit}")

    def program(self, row_mean: float) -> str:
        """The program for a matrix of this mean row length."""
        if self.threshold is not None and row_mean < self.threshold:
            return self.below
        return self.above


@dataclasses.dataclass(frozen=True)
class SpmmRule:
    """Per band of column counts (``choices``, by ascending ``columns``) the program to run, and
    how many labelled products (matrix and column count) it was fitted to."""

    choices: tuple[SpmmChoice, ...]
    labels: int = 0

    def __post_init__(self):
        if not self.choices:
            raise ValueError("an SpMM rule needs at least one choice")
        columns = [c.columns for c in self.choices]
        if columns != sorted(set(columns)):
            raise ValueError(f"an SpMM rule's column counts must ascend; found {columns}")
        if isinstance(self.labels, bool) or not isinstance(self.labels, int) or self.labels < 0:
            raise ValueError(f"an SpMM rule's labels must be a count; found {self.labels!r}")

    def program_for(self, k: int, row_mean: float) -> tuple[str, bool] | None:
        """``(program, tiled)`` for a product of k columns on a matrix of this mean row length:
        the choice of the fewest labelled columns at least k (the most columns beyond them);
        None for k ≤ 4 (one kernel serves them) or where the choice cannot run k columns."""
        if k <= 4:
            return None
        choice = next((c for c in self.choices if c.columns >= k), self.choices[-1])
        name = choice.program(row_mean)
        base, _, tiled = name.partition("@")
        if k > FEW_COLUMN_PROGRAMS.get(base, k):
            return None
        return base, bool(tiled)

    def describe(self) -> str:
        """How the decision's notes name the rule."""
        return f"the SpMM rule fitted to {self.labels:,} labelled products"

    def to_dict(self) -> dict:
        """The model file's ``spmm_rule`` entry."""
        return {"choices": [dataclasses.asdict(c) for c in self.choices], "labels": self.labels}

    @classmethod
    def from_dict(cls, doc) -> "SpmmRule":
        """A rule from a model file's ``spmm_rule`` entry; ValueError for a malformed one."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("choices"), list):
            raise ValueError("the SpMM rule must be a JSON object with a list of choices")
        unknown = sorted(set(doc) - {"choices", "labels"})
        if unknown:
            raise ValueError(f"the SpMM rule has unknown entries: {', '.join(unknown)}")
        names = [f.name for f in dataclasses.fields(SpmmChoice)]
        choices = []
        for entry in doc["choices"]:
            if not isinstance(entry, Mapping) or set(entry) != set(names):
                raise ValueError(f"an SpMM choice has the entries {', '.join(names)}; found "
                                 f"{entry!r}")
            choices.append(SpmmChoice(**entry))
        return cls(tuple(choices), doc.get("labels", 0))
