"""A counter the client asked the driver to allocate (ADD_COUNTER), visible to every AeronStat reader."""

from __future__ import annotations

from typing import Protocol, Self

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersReader

__all__ = ["Counter", "CounterOwner"]


class CounterOwner(Protocol):
    """What a counter needs from the client conductor that made it (which implements it)."""

    @property
    def counters_reader(self) -> CountersReader: ...

    def release_counter(self, counter: Counter) -> None: ...


class Counter:
    """An int64 counter in the driver's counters file; freed by :meth:`close`.

    Reads and writes go straight to shared memory; after close they become no-ops
    returning 0, so a late update from another thread is harmless.
    """

    __slots__ = ("_conductor", "_is_closed", "_value", "id", "registration_id")

    def __init__(self, conductor: CounterOwner, registration_id: int, counter_id: int, value: AtomicBuffer) -> None:
        self._conductor = conductor
        self.registration_id = registration_id
        self.id = counter_id
        self._value = value
        self._is_closed = False

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def label(self) -> str:
        return self._conductor.counters_reader.get_counter_label(self.id)

    def get(self) -> int:
        return 0 if self._is_closed else self._value.get_long_volatile(0)

    def get_weak(self) -> int:
        return 0 if self._is_closed else self._value.get_long(0)

    def set(self, value: int) -> None:
        if not self._is_closed:
            self._value.put_long_volatile(0, value)

    def set_ordered(self, value: int) -> None:
        if not self._is_closed:
            self._value.put_long_ordered(0, value)

    def increment(self) -> int:
        """Atomically add one; returns the previous value."""
        return 0 if self._is_closed else self._value.get_and_add_long(0, 1)

    def get_and_add(self, delta: int) -> int:
        return 0 if self._is_closed else self._value.get_and_add_long(0, delta)

    def compare_and_set(self, expected: int, update: int) -> bool:
        return False if self._is_closed else self._value.compare_and_set_long(0, expected, update)

    def propose_max_ordered(self, value: int) -> bool:
        """Raise the value to ``value`` if it is larger (single writer); True if it changed."""
        if self._is_closed or self._value.get_long(0) >= value:
            return False
        self._value.put_long_ordered(0, value)
        return True

    def close(self) -> None:
        """Free the counter in the driver (REMOVE_COUNTER; waits, bounded, for the answer)."""
        if not self._is_closed:
            self._conductor.release_counter(self)

    def _internal_close(self) -> None:
        self._is_closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Counter(id={self.id}, registration_id={self.registration_id}, closed={self._is_closed})"
