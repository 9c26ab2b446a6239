"""Idle strategies: what an agent's thread does when a duty cycle found no work.

Aeron busy-spins by default. Here the default is a backoff that ends in
parking, so an idle driver or client costs (almost) nothing; busy-spin is for
latency tuning on a machine with cores to spare. Under the GIL a spinning
thread also starves the other Python threads, which is one more reason not to
spin by default.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from driver.errors import DriverConfigurationError

__all__ = [
    "BackoffIdleStrategy",
    "BusySpinIdleStrategy",
    "IdleStrategy",
    "NoOpIdleStrategy",
    "SleepingIdleStrategy",
    "YieldingIdleStrategy",
    "idle_strategy_from_name",
]


Park = Callable[[float], None]
"""Sleep for up to the given seconds."""


class IdleStrategy(Protocol):
    def idle(self, work_count: int) -> None:
        """Called after each duty cycle with the amount of work it did."""

    def reset(self) -> None: ...


class NoOpIdleStrategy:
    def idle(self, work_count: int) -> None:
        pass

    def reset(self) -> None:
        pass


class BusySpinIdleStrategy:
    """Never gives up the core; lowest latency, one core per agent thread."""

    def idle(self, work_count: int) -> None:
        pass

    def reset(self) -> None:
        pass


class YieldingIdleStrategy:
    """Yields the GIL and the core (``sleep(0)``) when there was no work."""

    def idle(self, work_count: int) -> None:
        if work_count <= 0:
            time.sleep(0)

    def reset(self) -> None:
        pass


class SleepingIdleStrategy:
    """Sleeps a fixed period when there was no work."""

    def __init__(self, sleep_period_ns: int = 1_000_000) -> None:
        if sleep_period_ns <= 0:
            raise DriverConfigurationError("sleep_period_ns", sleep_period_ns, "must be > 0")
        self._period_s = sleep_period_ns / 1e9
        self.park: Park = time.sleep
        """How a sleep is taken; a runner may swap in one that also ends when the agent's sockets are readable."""

    def idle(self, work_count: int) -> None:
        if work_count <= 0:
            self.park(self._period_s)

    def reset(self) -> None:
        pass


class BackoffIdleStrategy:
    """Spin, then yield, then park with a period doubling up to a maximum; then idle deeper.

    Any work resets it to spinning. Parks cap at ``max_park_period_ns`` (1 ms, as
    Aeron's) while idleness is fresh; after ``deep_idle_after`` parks at that cap
    (about 100 ms with nothing to do) the park deepens to ``deep_park_period_ns``
    (4 ms), and after as many again (about half a second more) to
    ``deeper_park_period_ns`` (10 ms). A Python thread waking every millisecond
    costs over 1% of a core in wake-ups alone, and a duty cycle over hundreds of
    idle publications costs more; the deep parks keep a long-idle driver or
    client well under that, at the price of a few milliseconds on the first
    command after a quiet spell.
    """

    __slots__ = (
        "_deep_after",
        "_deep_park_s",
        "_deeper_park_s",
        "_max_park_s",
        "_max_spins",
        "_max_yields",
        "_min_park_s",
        "_park_s",
        "_parks_at_max",
        "_spins",
        "_yields",
        "park",
    )

    def __init__(
        self,
        max_spins: int = 10,
        max_yields: int = 20,
        min_park_period_ns: int = 1_000,
        max_park_period_ns: int = 1_000_000,
        deep_park_period_ns: int = 4_000_000,
        deep_idle_after: int = 100,
        deeper_park_period_ns: int = 10_000_000,
    ) -> None:
        if max_spins < 0 or max_yields < 0:
            raise DriverConfigurationError("max_spins/max_yields", (max_spins, max_yields), "must be >= 0")
        if not 0 < min_park_period_ns <= max_park_period_ns <= deep_park_period_ns <= deeper_park_period_ns:
            raise DriverConfigurationError(
                "park_period_ns",
                (min_park_period_ns, max_park_period_ns, deep_park_period_ns, deeper_park_period_ns),
                "0 < min <= max <= deep <= deeper required",
            )
        self._max_spins = max_spins
        self._max_yields = max_yields
        self._min_park_s = min_park_period_ns / 1e9
        self._max_park_s = max_park_period_ns / 1e9
        self._deep_park_s = deep_park_period_ns / 1e9
        self._deeper_park_s = deeper_park_period_ns / 1e9
        self._deep_after = deep_idle_after
        self._spins = 0
        self._yields = 0
        self._parks_at_max = 0
        self._park_s: float = self._min_park_s
        self.park: Park = time.sleep
        """How a park is taken; a runner may swap in one that also ends when the agent's sockets are readable."""

    def park_s(self) -> float:
        """How long the next park sleeps (seconds)."""
        return self._park_s

    def idle(self, work_count: int) -> None:
        if work_count > 0:
            if self._spins or self._yields or self._parks_at_max or self._park_s != self._min_park_s:
                self.reset()
            return
        if self._spins < self._max_spins:
            self._spins += 1
        elif self._yields < self._max_yields:
            self._yields += 1
            time.sleep(0)
        else:
            self.park(self._park_s)
            if self._park_s < self._max_park_s:
                self._park_s = min(self._park_s * 2, self._max_park_s)
            elif self._parks_at_max < self._deep_after:
                self._parks_at_max += 1
            elif self._parks_at_max < 2 * self._deep_after:
                self._parks_at_max += 1
                self._park_s = self._deep_park_s
            else:
                self._park_s = self._deeper_park_s

    def reset(self) -> None:
        self._spins = 0
        self._yields = 0
        self._parks_at_max = 0
        self._park_s = self._min_park_s


_ALIASES: dict[str, type[IdleStrategy]] = {
    "backoff": BackoffIdleStrategy,
    "busy_spin": BusySpinIdleStrategy,
    "busyspin": BusySpinIdleStrategy,
    "spin": BusySpinIdleStrategy,
    "yielding": YieldingIdleStrategy,
    "sleeping": SleepingIdleStrategy,
    "noop": NoOpIdleStrategy,
}


def idle_strategy_from_name(name: str) -> IdleStrategy:
    """Build a strategy from a short name or Aeron's Java class name."""
    key = name.rsplit(".", 1)[-1].lower()
    key = key.removesuffix("idlestrategy") or key
    key = {"busyspin": "busy_spin", "sleepingmillis": "sleeping", "noop": "noop"}.get(key, key)
    factory = _ALIASES.get(key)
    if factory is None:
        raise DriverConfigurationError("idle strategy", name, f"one of {sorted(set(_ALIASES))} or an Aeron class name")
    return factory()
