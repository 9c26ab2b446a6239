"""Clocks. Agents read the time once per duty cycle and pass it down as ints."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["CachedClock", "EpochClock", "ManualClock", "NanoClock", "SystemEpochClock", "SystemNanoClock"]


class NanoClock(Protocol):
    def nano_time(self) -> int: ...


class EpochClock(Protocol):
    def time_ms(self) -> int: ...


class SystemNanoClock:
    """Monotonic nanoseconds."""

    nano_time = staticmethod(time.monotonic_ns)


class SystemEpochClock:
    """Milliseconds since the Unix epoch, as Aeron's timestamps are."""

    @staticmethod
    def time_ms() -> int:
        return time.time_ns() // 1_000_000


class CachedClock:
    """A clock an agent updates once per duty cycle so its steps agree on 'now'."""

    __slots__ = ("_ms", "_ns")

    def __init__(self) -> None:
        self._ns = 0
        self._ms = 0

    def update(self, now_ns: int, now_ms: int) -> None:
        self._ns = now_ns
        self._ms = now_ms

    def nano_time(self) -> int:
        return self._ns

    def time_ms(self) -> int:
        return self._ms


class ManualClock:
    """A clock tests move by hand; serves as both nano and epoch clock."""

    __slots__ = ("_ns",)

    def __init__(self, start_ns: int = 0) -> None:
        self._ns = start_ns

    def advance_ns(self, delta_ns: int) -> None:
        self._ns += delta_ns

    def advance_ms(self, delta_ms: int) -> None:
        self._ns += delta_ms * 1_000_000

    def nano_time(self) -> int:
        return self._ns

    def time_ms(self) -> int:
        return self._ns // 1_000_000
