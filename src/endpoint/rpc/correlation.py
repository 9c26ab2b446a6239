"""Correlation ids for calls awaiting answers: a bounded pool of slots, each reused under a new generation.

An id is ``generation << SLOT_BITS | slot``. A freed slot goes to the back of a FIFO, so it is reused only
after every other free slot, and then under the next generation: an answer that arrives after its call
gave up carries a stale generation and is recognised as such instead of completing a stranger's call.
Memory is bounded by the capacity however many calls pass through. Pure data structure: no I/O, no clock.
"""

from __future__ import annotations

import collections
from typing import Final, Generic, TypeVar

__all__ = ["SLOT_BITS", "CorrelationPool"]

T = TypeVar("T")

SLOT_BITS: Final = 20
"""Largest capacity is ``1 << SLOT_BITS``; generations take the bits above (ids stay below ``1 << 52``)."""
_SLOT_MASK: Final = (1 << SLOT_BITS) - 1
_GENERATION_MASK: Final = (1 << 32) - 1


class CorrelationPool(Generic[T]):
    """In-flight values by correlation id; at most ``capacity`` at once."""

    __slots__ = ("_free", "_generations", "_live", "_values", "capacity", "stale")

    def __init__(self, capacity: int) -> None:
        if not 1 <= capacity <= 1 << SLOT_BITS:
            raise ValueError(f"capacity={capacity!r} is outside 1..{1 << SLOT_BITS}")
        self.capacity = capacity
        self._values: list[T | None] = []
        self._generations: list[int] = []
        self._free: collections.deque[int] = collections.deque()
        self._live = 0
        self.stale = 0
        """Lookups of ids whose call had already ended (late answers): counted, otherwise ignored."""

    def __len__(self) -> int:
        return self._live

    @property
    def full(self) -> bool:
        return self._live >= self.capacity

    def acquire(self, value: T) -> int:
        """Store ``value`` and return its id (never 0); raises LookupError when the pool is full."""
        if value is None:
            raise TypeError("None marks a free slot: it cannot be stored")
        if self._free:
            slot = self._free.popleft()
            generation = (self._generations[slot] + 1) & _GENERATION_MASK or 1
            self._generations[slot] = generation
            self._values[slot] = value
        elif len(self._values) < self.capacity:
            slot = len(self._values)
            generation = 1
            self._generations.append(generation)
            self._values.append(value)
        else:
            raise LookupError(f"all {self.capacity} correlation ids are in use")
        self._live += 1
        return generation << SLOT_BITS | slot

    def get(self, correlation_id: int) -> T | None:
        slot = correlation_id & _SLOT_MASK
        if slot < len(self._values) and self._generations[slot] == correlation_id >> SLOT_BITS:
            return self._values[slot]
        return None

    def release(self, correlation_id: int) -> T | None:
        """Take the value of ``correlation_id`` out; None (and counted as stale) if it is not in flight."""
        value = self.discard(correlation_id)
        if value is None:
            self.stale += 1
        return value

    def discard(self, correlation_id: int) -> T | None:
        """As :meth:`release`, for an owner ending its own call: an id already gone is not counted as stale."""
        slot = correlation_id & _SLOT_MASK
        values = self._values
        if slot < len(values) and self._generations[slot] == correlation_id >> SLOT_BITS:
            value = values[slot]
            if value is not None:
                values[slot] = None
                self._free.append(slot)
                self._live -= 1
                return value
        return None

    def drain(self) -> list[T]:
        """Every value still in flight (the pool is left empty, generations kept)."""
        taken = [v for v in self._values if v is not None]
        for slot, value in enumerate(self._values):
            if value is not None:
                self._values[slot] = None
                self._free.append(slot)
        self._live = 0
        return taken
