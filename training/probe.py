"""``retrain``'s first step on the CPU: can any kernel beat the built-in rule on this machine?

On the CPU the built-in rule runs ``csr_scalar`` for every matrix, and a trained model replaces
it only if it passes the install guard (:func:`training.train.guard`: its cross-validated score
beats the best fixed kernel). A tree can gain no more over the rule than a perfect choice
would: the *oracle gain*, one minus the mean over matrices of (fastest kernel's time / the
rule's time). On the committed 2-core CPU labels that gain was 0.029 (115 matrices,
``models/labels/cpu-intel-r-xeon-r-processor-2-10ghz-float64.jsonl.gz``), and the trees trained
on them scored at or below the rule (``models/README.md``).

So before labelling the whole corpus, ``retrain`` labels a few of its matrices (one per family
at about 10⁴ nonzeros, then one per family at 10⁵, :func:`probe_entries`) into its own label
file, for :data:`PROBE_SECONDS` of labelling (the labeller's warm-up included), and
:func:`oracle_gain` reads the gain from their labels (noisy ones included: on a shared machine
most are, and their medians are still the best figures at hand). Below
:data:`MIN_GAIN` no model could win on this machine: ``retrain`` says so with the figures and
stops, its labels kept (``--no-probe`` labels the whole corpus anyway). The probe's matrices are
labelled as the full run labels them, so the run that follows skips them, and its pace on this
machine sets the full run's time estimate (:class:`training.forecast.Forecast`).
"""

from __future__ import annotations

import dataclasses

from .records import target_mode

PROBE_SECONDS = 45.0
"""Labelling time the probe may take, the labeller's warm-up included (it stops between
matrices; on a shared 2-core machine it labelled 14 matrices in 25 s)."""

PROBE_SIZES = ("1e4", "1e5")
"""The corpus size tags of the probe's matrices, in order (one labelled in about 1 s and 2-9 s
on a shared 2-core machine)."""

MIN_ROWS = 3
"""Fewest probe matrices that make a verdict; with fewer the whole corpus is labelled."""

MIN_GAIN = 0.05
"""Smallest oracle gain over the rule for which ``retrain`` labels the whole corpus: a tree
scores below the oracle, and the committed CPU trees did not beat the rule where the gain was
0.029."""


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What the probe measured: per matrix (name, nonzeros, fastest kernel, rule's time / the
    fastest's), the oracle gain over them and the rule's kernel."""

    rows: list[tuple[str, int, str, float]]
    gain: float
    rule: str

    @property
    def worth_labelling(self) -> bool:
        """Whether a model could beat the rule here (:data:`MIN_GAIN`); True with fewer than
        :data:`MIN_ROWS` matrices measured (no verdict)."""
        return len(self.rows) < MIN_ROWS or self.gain >= MIN_GAIN

    @property
    def reason(self) -> str:
        """Why the whole corpus is not labelled (when :attr:`worth_labelling` is False)."""
        return (f"no kernel beats the built-in rule ({self.rule}) by enough on this machine: "
                f"oracle gain {self.gain:.3f} < {MIN_GAIN} on {len(self.rows)} probe matrices")

    def report(self) -> str:
        """The figures as lines of text: one per matrix, then the verdict."""
        lines = [f"  {name:32s} {nnz:>9,d} nonzeros  fastest {best:11s} {speedup:5.2f}× "
                 f"{self.rule}'s speed" for name, nnz, best, speedup in self.rows]
        verdict = (f"a perfect choice among the kernels would take {1 - self.gain:.3f} of "
                   f"{self.rule}'s time on these {len(self.rows)} matrices (gain {self.gain:.3f}; "
                   f"a model needs a gain of at least {MIN_GAIN} to have a chance of passing the "
                   "install guard)")
        return "\n".join(lines + [verdict])


def probe_entries(entries) -> list:
    """For each size of :data:`PROBE_SIZES` in turn, the first corpus entry of that size of
    every family that has one."""
    chosen = []
    for size in PROBE_SIZES:
        families = set()
        for entry in entries:
            if entry.size == size and entry.family not in families:
                families.add(entry.family)
                chosen.append(entry)
    return chosen


def oracle_gain(records, rule: str) -> ProbeResult:
    """The probe's figures from label ``records`` (those where the rule's kernel failed are left
    out)."""
    rows = []
    for record in records:
        mode = target_mode(int(record["nnz"]))
        times = {kernel: result[f"time_{mode}_us"] for kernel, result in record["kernels"].items()
                 if result["status"] == "ok"}
        if rule not in times:
            continue
        best = min(times, key=times.get)
        rows.append((record["name"], int(record["nnz"]), best, times[rule] / times[best]))
    gain = 1.0 - sum(1.0 / speedup for *_, speedup in rows) / len(rows) if rows else 0.0
    return ProbeResult(rows, gain, rule)
