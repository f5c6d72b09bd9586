"""Label records as training arrays: one row per matrix, one time column per kernel.

The columns are the registry's kernels that the records timed (:func:`kernels_timed`), so a
kernel added with :func:`autospmv.register` and labelled is trained on like a built-in.

:func:`dataset` checks the records (one per matrix, one set of feature names, the features
this trainer reads) and takes each matrix's times in the timing mode the size rule gives
(:func:`training.records.target_mode`); noisy records and records without an ``ok`` kernel are
left out. Kept apart from the metrics, the fitting and the cross-validation, which all read a
:class:`Dataset` and none of which needs to know the label file's layout.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from autospmv import _registry as registry
from autospmv._decide.features.extract import FEATURE_NAMES
from .records import LARGE_NNZ, TRAINING_MODES, is_noisy, target_mode


@dataclasses.dataclass
class Dataset:
    """Label records as arrays: one row per matrix, one time column per kernel."""

    names: list[str]
    families: np.ndarray
    real: np.ndarray
    feature_names: tuple[str, ...]
    X: np.ndarray
    times: np.ndarray
    """Microseconds by the timing mode; inf where the kernel is not ``ok``."""
    nnz: np.ndarray
    row_max: np.ndarray
    grown: np.ndarray
    """Copies of a real file (1: the file as given, or synthetic)."""
    kernels: tuple[str, ...] = dataclasses.field(default_factory=registry.names)
    """The time columns: the registry's kernels that the records timed (:func:`kernels_timed`)."""
    noisy: list[str] = dataclasses.field(default_factory=list)
    """Names of the records left out because their timings stayed disturbed."""
    large_nnz: float | None = None
    """The nonzeros from which the rows were timed back-to-back, smaller ones per call (timing
    mode ``auto``: :data:`training.records.LARGE_NNZ`); None when one mode times every row."""

    def __post_init__(self):
        self.groups = np.array([f"{f}/{'real' if r else 'synthetic'}"
                                for f, r in zip(self.families, self.real)])
        """CV groups: family and whether the matrix is real or synthetic."""
        self.labels = np.array(self.kernels)[np.argmin(self.times, axis=1)]
        """The fastest kernel of each matrix."""
        self.as_given = self.real & (self.grown == 1)
        """Real matrices as their files hold them: the set the real-matrix figures are on."""
        self.large = (self.nnz >= self.large_nnz if self.large_nnz is not None
                      else np.zeros(len(self.names), dtype=bool))
        """Rows timed back-to-back by the size rule (from :attr:`large_nnz` nonzeros); all
        False when one timing mode times every row."""

    def __len__(self) -> int:
        return len(self.names)


def dataset(records, mode: str = "auto") -> tuple[Dataset, list[str]]:
    """(the usable records as a Dataset, names of records dropped because no kernel was ok).

    Each record's times are taken in ``target_mode(nnz, mode)``; records whose timings stayed
    disturbed in that mode (:func:`training.records.is_noisy`) are left out and listed in
    ``Dataset.noisy``."""
    if mode not in TRAINING_MODES:
        raise ValueError(f"unknown timing mode {mode!r}; choose one of "
                         f"{', '.join(TRAINING_MODES)}")
    records = list(records)
    if not records:
        raise ValueError("no label records to train on")
    seen, feature_names = set(), tuple(records[0]["features"])
    kernels = kernels_timed(records)
    kept, dropped, noisy = [], [], []
    for record in records:
        if record["name"] in seen:
            raise ValueError(f"matrix {record['name']!r} appears in more than one label record "
                             "(labelled twice into one file); start over with `autospmv "
                             "retrain --fresh`, or delete all but one of its records")
        seen.add(record["name"])
        if tuple(record["features"]) != feature_names:
            raise ValueError(f"record {record['name']!r} has different feature names than "
                             f"{records[0]['name']!r}; label all matrices with one autospmv")
        if is_noisy(record, mode):
            noisy.append(record["name"])
            continue
        row_mode = target_mode(record["nnz"], mode)
        times = [result_time(record["kernels"].get(k), row_mode) for k in kernels]
        (kept if np.isfinite(times).any() else dropped).append((record, times))
    if not kept:
        raise ValueError("no record has a kernel that ran correctly and steady timings; "
                         f"nothing to train on ({len(noisy)} noisy, {len(dropped)} without an "
                         "ok kernel)")
    missing = [f for f in FEATURE_NAMES if f not in feature_names]
    if missing:
        shown = ", ".join(missing[:4]) + (", …" if len(missing) > 4 else "")
        raise ValueError(f"the label records lack features this trainer needs ({shown}); "
                         "relabel with this autospmv")
    recs = [r for r, _ in kept]
    return Dataset(
        names=[r["name"] for r in recs],
        families=np.array([r["family"] for r in recs]),
        real=np.array([r["source"] != "synthetic" for r in recs]),
        feature_names=feature_names,
        X=np.array([[r["features"][f] for f in feature_names] for r in recs], dtype=np.float64),
        times=np.array([t for _, t in kept], dtype=np.float64),
        nnz=np.array([r["nnz"] for r in recs], dtype=np.float64),
        row_max=np.array([r["features"].get("row_max", np.inf) for r in recs], np.float64),
        grown=np.array([r.get("grown", 1) for r in recs], dtype=np.int64),
        kernels=kernels,
        noisy=noisy,
        large_nnz=LARGE_NNZ if mode == "auto" else None,
    ), [r["name"] for r, _ in dropped]


def kernels_timed(records) -> tuple[str, ...]:
    """The kernels of the registry (:func:`autospmv.kernel_names`, in its order) that at least
    one record timed: a kernel registered in this process but absent from the labels gets no
    column (a model trained on them cannot know it), and a kernel in the labels that is not
    registered here is ignored (no model could run it)."""
    timed = set().union(*(record["kernels"] for record in records))
    return tuple(kernel for kernel in registry.names() if kernel in timed)


def result_time(result: dict | None, mode: str) -> float:
    if not result or result["status"] != "ok":
        return math.inf
    return float(result[f"time_{mode}_us"])
