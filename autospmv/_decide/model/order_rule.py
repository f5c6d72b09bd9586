"""The constants of the order's cost rule (:mod:`autospmv._decide.ordering`) as a model file
carries them (``order_rule``, schema version 6): fitted to order labels timed on the device
(``python -m autospmv.training fit-orders``), so that the rule that decides whether to renumber
a matrix speaks for the machine it runs on."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class OrderRule:
    """The constants of the cost rule for one kind of device: the built-in ones
    (:data:`autospmv._decide.ordering.BUILT_IN_RULES`), or ones fitted to order labels timed on
    the device, which a model file carries."""

    bytes_per_second: float
    """The bandwidth of a product's traffic."""
    latency_seconds: float
    """The shortest product (a launch, a thread pool's wake-up)."""
    miss_seconds: float = 0.0
    """What a sector of x the cache does not hold costs beyond its bytes (the CPU's rule; 0
    on the GPU, whose many warps hide a miss)."""
    cache_share: float = 0.0
    """The part of the last-level cache counted on to hold x (with ``miss_seconds``)."""
    window_bytes: float = 0.0
    """The bytes of x around the rows being computed that the caches nearest the cores hold:
    a product whose x window (the columns within its rows' reach,
    :func:`autospmv._decide.ordering.window_miss`) fits them reads its sectors of x from there
    and pays nothing for them; a wider window pays for the share of its sectors beyond them.
    0: every sector costs its bytes."""
    permutation_bytes_per_second: float | None = None
    """The bandwidth of the two gathers around a product in the caller's order; None: that
    of the product."""
    labels: int = 0
    """How many labelled products the constants were fitted to; 0 for the built-in ones."""

    def __post_init__(self):
        for name, value in dataclasses.asdict(self).items():
            if value is None and name == "permutation_bytes_per_second":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"the order rule's {name} must be a number; found {value!r}")
            positive = name in ("bytes_per_second", "permutation_bytes_per_second")
            if not math.isfinite(value) or value < 0 or (positive and value == 0):
                raise ValueError(f"the order rule's {name} must be finite and "
                                 f"{'positive' if positive else 'non-negative'}; found {value!r}")
        if self.cache_share > 1:
            raise ValueError(f"the order rule's cache_share must be at most 1; found "
                             f"{self.cache_share!r}")
        if self.labels != int(self.labels):
            raise ValueError(f"the order rule's labels must be a whole number; found "
                             f"{self.labels!r}")

    @property
    def gather_bytes_per_second(self) -> float:
        """The bandwidth the two gathers of a product in the caller's order are priced at."""
        return self.permutation_bytes_per_second or self.bytes_per_second

    def describe(self) -> str:
        """How ``explain()`` names the rule."""
        return (f"the cost rule fitted to {int(self.labels):,} labelled products" if self.labels
                else "the built-in cost rule")

    def to_dict(self) -> dict:
        """The model file's ``order_rule`` entry."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc) -> "OrderRule":
        """A rule from a model file's ``order_rule`` entry; ValueError for a malformed one."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"the order rule must be a JSON object; found {type(doc).__name__}")
        names = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(doc) - set(names))
        if unknown:
            raise ValueError(f"the order rule has unknown entries: {', '.join(unknown)}")
        for name in ("bytes_per_second", "latency_seconds"):
            if name not in doc:
                raise ValueError(f"the order rule has no {name!r}")
        return cls(**{name: doc[name] for name in names if name in doc})
