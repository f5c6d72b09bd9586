"""Label records: the timing mode a record is decided on, its noise, and the labels file.

A label record (its layout is in the :mod:`training.label` docstring) is read by the trainer,
the CLI and the benchmarks, which need none of the labelling machinery: which timing mode a
matrix is decided on (:func:`target_mode`), whether a record's timings stayed disturbed
(:func:`row_noise`, :func:`is_noisy`), and reading and appending the JSON-lines file, plain or
gzip-compressed (:func:`read_records`, and the resumption and durable appends the labeller
uses), and the lock a run holds on a labels file (:func:`labels_lock`, which the command
line's ``models --remove`` shares, from :mod:`autospmv._decide.model.store`).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import zlib
from pathlib import Path

from autospmv._decide.cost import launches_of_features
from autospmv._decide.model.store import labels_lock  # noqa: F401 (the pipeline's lock)
from autospmv._support.timing import TimingOptions

from .timing import QUICK


SCHEMA = "autospmv-labels/1"
TIMING_MODES = ("per_call", "b2b")
"""The two times every label records (see :mod:`autospmv._support.timing`)."""
TRAINING_MODES = ("auto",) + TIMING_MODES
"""What a model may be trained on: ``auto`` applies :func:`target_mode` per matrix."""
LARGE_NNZ = 1_000_000
"""Matrices with at least this many nonzeros are decided on back-to-back time."""
NOISE_LIMIT = TimingOptions.noise_limit
"""A label row is noisy when a kernel's median time in the row's timing mode exceeds this many
times its minimum even after re-timing (:meth:`autospmv._support.timing.Bench.time_all`)."""


def target_mode(nnz: int, mode: str = "auto") -> str:
    """The timing mode a matrix of ``nnz`` nonzeros is decided on: for ``auto``, back-to-back
    from :data:`LARGE_NNZ` nonzeros (what an iterative solver sees: on a large matrix the
    kernel's own time, not the launch, is what a loop of products costs), per call below (a
    small matrix's products are dominated by the launch and the synchronisation a user's loop
    pays). ``per_call`` or ``b2b`` apply to every matrix."""
    if mode == "auto":
        return "b2b" if nnz >= LARGE_NNZ else "per_call"
    if mode not in TIMING_MODES:
        raise ValueError(f"unknown timing mode {mode!r}; choose one of "
                         f"{', '.join(TRAINING_MODES)}")
    return mode


def row_noise(kernels: dict) -> dict:
    """Per timing mode, the largest median / min over the ``ok`` kernels' timings (1 is
    noise-free; None when no kernel recorded its spread)."""
    out = {}
    for mode in TIMING_MODES:
        ratios = [r["spread"][mode]["median"] / r["spread"][mode]["min"]
                  for r in kernels.values()
                  if r.get("status") == "ok" and r.get("spread") and r["spread"][mode]["min"] > 0]
        out[mode] = max(ratios) if ratios else None
    return out


def is_noisy(record: dict, mode: str = "auto") -> bool:
    """Whether a label row's kernel timings in the mode it is decided on (:func:`target_mode`)
    stayed disturbed: a ratio above :data:`NOISE_LIMIT`. Computed from the recorded spreads,
    so label files written before the check are judged the same way."""
    ratio = row_noise(record["kernels"])[target_mode(record["nnz"], mode)]
    return ratio is not None and ratio > NOISE_LIMIT


# -- the output file ------------------------------------------------------------------------


GZIP_MAGIC = b"\x1f\x8b"


def _decode(path) -> tuple[str, bool]:
    """(the text of a labels file, whether its bytes were complete).

    gzip files (recognised by their magic bytes, whatever their name) are decompressed member
    by member, because :func:`append_record` adds one gzip member per record; a member cut short by
    a crash yields what it holds and makes the result incomplete. Plain files are complete by
    definition: a cut line is recognised by its missing newline.
    """
    data = Path(path).read_bytes()
    if not data.startswith(GZIP_MAGIC):
        return data.decode("utf-8"), True
    parts = []
    while data:
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip header and trailer
        try:
            parts.append(member.decompress(data))
        except zlib.error as err:
            raise ValueError(f"{path} is a damaged gzip file ({err})") from None
        if not member.eof:
            return b"".join(parts).decode("utf-8", errors="ignore"), False
        data = member.unused_data
    return b"".join(parts).decode("utf-8"), True


def _compressed(path) -> bool:
    """Whether records appended to ``path`` are gzip-compressed (a ``.gz`` name)."""
    return Path(path).suffix == ".gz"


def read_records(path, schema: str = SCHEMA) -> list[dict]:
    """All records of a labels file (JSON lines, plain or gzip-compressed such as
    ``labels.jsonl.gz``) of ``schema`` (the kernel labels', or the order labels' of
    :mod:`training.order_labels`); a final line without newline is ignored."""
    return _parse(_decode(path)[0], path, schema)


def _parse(text: str, path, schema: str = SCHEMA) -> list[dict]:
    """The records of the complete lines of ``text``, read from ``path``."""
    records = []
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise ValueError(f"line {number} of {path} is not valid JSON ({err}); remove it "
                             "to continue") from None
        if not isinstance(record, dict) or record.get("schema") != schema:
            raise ValueError(f"line {number} of {path} is not an autospmv label record "
                             f"(expected schema {schema!r})")
        records.append(_with_launches(record) if schema == SCHEMA else record)
    return records


def _with_launches(record: dict) -> dict:
    """``record`` with its built-in kernels' ``<kernel>_launches`` features when it was labelled
    before launches were counted: derived exactly from its other features
    (:func:`autospmv._decide.cost.launches_of_features`) and placed after each kernel's ``_atomics``,
    where a newer record holds them. Other records are returned as they are."""
    features = record.get("features")
    if not isinstance(features, dict) or "coo_atomics" not in features \
            or "coo_launches" in features:
        return record
    launches = launches_of_features(features)
    upgraded = {}
    for name, value in features.items():
        upgraded[name] = value
        launch_name = name.removesuffix("_atomics") + "_launches"
        if name.endswith("_atomics") and launch_name in launches:
            upgraded[launch_name] = launches[launch_name]
    return dict(record, features=upgraded)


def resume_records(path: Path, device: str, dtype: str, timing: dict | None = None,
            machine: str | None = None, schema: str = SCHEMA) -> set[str]:
    """Names already labelled in ``path`` (created empty if missing), after dropping an
    unfinished last line (or, in a gzip file, an unfinished last member). Records of another
    device or dtype, of another ``machine`` (the GPU's or CPU's name, as
    :func:`training.timing.device_info` gives it), or timed with other ``timing`` options
    (records without them predate the key and are accepted), are refused: they must not mix."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return set()
    with open(path, "rb") as handle:
        packed = handle.read(len(GZIP_MAGIC)) == GZIP_MAGIC
    if path.stat().st_size and packed != _compressed(path):
        raise ValueError(f"{path} is {'' if packed else 'not '}gzip-compressed but its name "
                         "says otherwise; name compressed label files *.gz and plain ones "
                         "anything else")
    text, intact = _decode(path)
    records = _parse(text, path, schema)
    if not intact or (text and not text.endswith("\n")):
        rewrite_records(path, text[:text.rfind("\n") + 1])
    for record in records:
        if record["dtype"] != dtype or record["device"]["device"] != device:
            raise ValueError(
                f"{path} holds {record['dtype']} labels from device "
                f"{record['device']['device']!r}; write {dtype} labels for {device!r} to "
                "another file"
            )
        if machine is not None and record["device"].get("name", machine) != machine:
            raise ValueError(
                f"{path} holds labels timed on {record['device']['name']!r}, not on this "
                f"machine's {machine!r}; write them to another file"
            )
        if timing is not None and record.get("timing", timing) != timing:
            raise ValueError(
                f"{path} holds labels timed with other options ({_timing_name(record['timing'])}"
                f", this run: {_timing_name(timing)}); label with the same options, write to "
                "another file, or start over (`autospmv retrain --fresh`)"
            )
    return {record["name"] for record in records}


def _timing_name(timing: dict) -> str:
    """``"--quick"`` or ``"full timing"`` for a record's ``timing`` entry."""
    return "--quick" if timing == dataclasses.asdict(QUICK) else "full timing"


def rewrite_records(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (compressed if the file is), atomically."""
    data = text.encode("utf-8")
    if _compressed(path):
        data = gzip.compress(data, mtime=0)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def append_record(path: Path, record: dict) -> None:
    """Append one record as a line, durably; to a gzip file as a gzip member of its own, so
    that a crash can only damage the last record."""
    data = (json.dumps(record, allow_nan=False) + "\n").encode("utf-8")
    if _compressed(path):
        data = gzip.compress(data, mtime=0)
    with open(path, "ab") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


