"""The limit of a bounded replay (sans-IO): a counter's value, read by the shell, decides how far a replay may read.

Aeron Archive's BoundedReplayRequest names a counter (``limitCounterId``): a
live recording's ``rec-pos`` counter, or any counter the client keeps. The
replay never reads past that counter's value; while the value has not moved the
replay waits (it does not end); it ends at its own length. The counter is the
one that was allocated when the replay began (its registration id): once that
counter is freed or its slot reused, the bound stays at the last value seen and
the replay ends when it gets there -- as Aeron's ``ReplaySession`` does.

No IO and no clock: the shell reads the counter's state, registration id and
value and hands them to :meth:`CounterBound.observe`.
"""

from __future__ import annotations

from typing import Final

from driver.archive.errors import ReplayLimitError

__all__ = ["RECORD_ALLOCATED", "CounterBound", "ReplayLimitError", "check_limit_counter"]

RECORD_ALLOCATED: Final = 1
"""A counter slot's state while it is in use (Agrona's ``CountersReader.RECORD_ALLOCATED``)."""


def check_limit_counter(counter_id: int, max_counter_id: int, state: int | None) -> None:
    """Raise :class:`ReplayLimitError` unless ``counter_id`` names an allocated counter (``state`` None: the id is
    outside the counters file)."""
    if not 0 <= counter_id < max_counter_id or state is None:
        raise ReplayLimitError(
            f"unable to create replay limit counter id={counter_id}: no such counter (ids 0..{max_counter_id - 1})"
        )
    if state != RECORD_ALLOCATED:
        raise ReplayLimitError(f"unable to create replay limit counter id={counter_id}: counter is not allocated")


class CounterBound:
    """How far a bounded replay may read: the counter's value while it is the same counter, then frozen."""

    __slots__ = ("counter_id", "frozen", "registration_id", "value")

    def __init__(self, counter_id: int, registration_id: int, value: int) -> None:
        self.counter_id = counter_id
        self.registration_id = registration_id
        self.value = value
        self.frozen = False
        """The counter went away (freed or reused): ``value`` is final."""

    def observe(self, state: int, registration_id: int, value: int) -> int:
        """The bound, given what the counter slot holds now."""
        if not self.frozen:
            if state == RECORD_ALLOCATED and registration_id == self.registration_id:
                self.value = value
            else:
                self.frozen = True
        return self.value
