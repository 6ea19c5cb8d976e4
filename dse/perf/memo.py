"""A bounded memo for the performance model's pure builders, keyed by the identity of their
inputs.

A study trial builds the same few pools again and again (its hardware's shapes, the design's
prefill and decode units, the engine-level simulation's instances) and derives the same
batch-independent terms from them: at 1,000 trials of the headline study that was about 8% of a
trial's own time. The builders are pure functions of immutable inputs (catalog entries, frozen
parameter sets, numbers), so the memo keys an object by its ``id`` and keeps the object itself
in the entry: an id cannot be reused while its entry lives, and a what-if catalog's hardware (a
new object) never meets another's entry. What the memo returns is shared, so its arrays are made
read-only: a caller that wrote into one would raise instead of changing another's result.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

MAX_ENTRIES = 1024  # a study meets a few hundred; a full memo of pools (<= 257 candidates) and their
# terms holds at most about 70 MB


class Memo:
    """``get(key, keep, make)``: ``make()``'s result for ``key``, made once while the entry lives.
    ``keep`` holds the objects whose ids the key uses. Full, the memo starts afresh (a study uses
    a few hundred entries; one that does not repeat gains nothing from an eviction order)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._entries: dict[Hashable, tuple[Any, Any]] = {}
        self._made: set[int] = set()  # ids of the values it holds
        self._max = max_entries

    def get(self, key: Hashable, keep: Any, make: Callable[[], T]) -> T:
        try:
            hit = self._entries.get(key)
        except TypeError:  # an unhashable part (a list where a tuple is typed, from the API): not kept
            return make()
        if hit is not None:
            return hit[1]  # type: ignore[no-any-return]
        value = frozen(make())
        if len(self._entries) >= self._max:
            self.clear()
        self._entries[key] = (keep, value)
        self._made.add(id(value))
        return value

    def holds(self, value: object) -> bool:
        """Whether ``value`` is one of the memo's (then it lives as long as its entry)."""
        return id(value) in self._made

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._made.clear()


def frozen(value: T) -> T:
    """``value`` with every numpy array among its dataclass fields read-only (in place)."""
    if is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            v = getattr(value, f.name)
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
    return value
