"""Bring label records up to date after a parameter chooser changed, without timing again.

A record's ``kernels`` hold each kernel timed with the parameters its chooser picked when the
matrix was labelled, and its cost features (``<kernel>_bytes`` …) count with those parameters.
When a chooser changes (say CSR5's tile height on some structure), the records no longer show
what the library now runs. The labeller also timed every parameter variant of the registry
(``variants``: every CSR-vector group size, HYB width strategy and CSR5 tile height), so a
changed choice can be looked up instead of measured:

- the kernel's result becomes the variant timed with the parameters the chooser now picks,
  from the same interleaved timing run as the rest of the record;
- the features are computed again from the matrix (the cost features depend on the choice);
- ``best``, ``noise`` and ``noisy`` follow from the updated kernels;
- the record's ``rechosen`` list gains an entry: the date and, per kernel, the parameters it
  had (``from``) and has now (``to``).

A record whose choosers all still agree is left as it is. A changed choice that no variant
timed cannot be looked up: the record is kept unchanged and reported, and only labelling
again can bring it up to date.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from pathlib import Path

from autospmv import _registry as registry
from autospmv._decide.features.extract import features
from .label import best_kernels
from .records import is_noisy, read_records, rewrite_records, row_noise

VARIANT_ONLY_KEYS = ("kernel", "strategy")
"""Keys of a variant result that a kernel result does not have."""


@dataclasses.dataclass
class Change:
    """What :func:`rechoose_record` did to one record."""

    name: str
    kernels: dict
    """kernel -> (parameters in the record, parameters the chooser picks now)."""
    features: tuple = ()
    """Names of the features whose value changed."""
    missing: tuple = ()
    """Kernels whose new parameters no variant timed (the record was left unchanged)."""


def _variant(record: dict, kernel: str, params: dict) -> dict | None:
    """The result of ``kernel`` timed with ``params`` among the record's variants, or None."""
    for variant in record.get("variants", []):
        if variant["kernel"] == kernel and variant.get("params") == params:
            return {k: v for k, v in variant.items() if k not in VARIANT_ONLY_KEYS}
    return None


def rechoose_record(record: dict, csr, features_of=None) -> tuple[dict, Change | None]:
    """``record`` brought up to date with the current choosers, and what changed (None when
    nothing did). ``csr``: the record's matrix, canonical and of the record's dtype;
    ``features_of(device)``: its features for the device (default: computed here), so that
    records of one matrix in several label files compute them once."""
    if tuple(csr.shape) != tuple(record["shape"]) or int(csr.nnz) != int(record["nnz"]):
        raise ValueError(f"{record['name']}: the matrix given is {csr.shape} with {csr.nnz} "
                         f"nonzeros; the record's is {tuple(record['shape'])} with "
                         f"{record['nnz']}")
    device = record["device"]["device"]
    changed, missing, results = {}, [], {}
    for kernel, result in record["kernels"].items():
        if result.get("params") is None or kernel not in registry.names():
            continue
        params = registry.choose_params(kernel, csr, device)
        if params == result["params"]:
            continue
        changed[kernel] = (result["params"], params)
        found = _variant(record, kernel, params)
        if found is None:
            missing.append(kernel)
        else:
            results[kernel] = found
    if not changed:
        return record, None
    if missing:
        return record, Change(record["name"], changed, missing=tuple(missing))
    out = {**record, "kernels": {**record["kernels"], **results}}
    stamp = {"date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
             "kernels": {k: {"from": old, "to": new} for k, (old, new) in changed.items()}}
    out["rechosen"] = [*record.get("rechosen", []), stamp]
    out["features"] = (features_of or (lambda d: features(csr, device=d)))(device)
    out["best"] = best_kernels(out["kernels"])
    out["noise"] = row_noise(out["kernels"])
    out["noisy"] = is_noisy(out)
    moved = tuple(name for name, value in out["features"].items()
                  if record["features"].get(name) != value)
    return out, Change(record["name"], changed, moved)


def rechoose_files(paths, load, names=None, progress: bool = True) -> dict[str, list[Change]]:
    """Bring label files up to date in place (:func:`rechoose_record`); ``load(name, dtype)``
    returns a record's canonical matrix, built once for all the files. ``names``: only these
    records (all if None). Returns each file's changes, including records left unchanged for a
    missing variant."""
    files = {str(path): read_records(path) for path in paths}
    where: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for path, records in files.items():
        for i, record in enumerate(records):
            if names is None or record["name"] in names:
                where.setdefault((record["name"], record["dtype"]), []).append((path, i))
    from tqdm import tqdm

    changes: dict[str, list[Change]] = {path: [] for path in files}
    for (name, dtype), places in tqdm(where.items(), unit="matrix", file=sys.stderr,
                                      disable=not progress):
        csr = load(name, dtype)
        computed: dict[str, dict] = {}

        def features_of(device: str) -> dict:
            if device not in computed:
                computed[device] = features(csr, device=device)
            return computed[device]

        for path, i in places:
            files[path][i], change = rechoose_record(files[path][i], csr, features_of)
            if change is not None:
                changes[path].append(change)
        del csr
    for path, records in files.items():
        rewrite_records(Path(path), "".join(json.dumps(r, allow_nan=False) + "\n" for r in records))
    return changes
