"""When a client tries to reconnect, and when it gives up: a backoff policy without I/O.

A client that lost its server retries with exponential backoff and jitter, so that a
restarted server is not met by every client at the same instant, and a server that is
gone for good is not polled every few milliseconds for ever. :class:`Backoff` is pure: it
takes the attempt's number (or the previous delay) and a random source and returns the
delay; :class:`ReconnectSchedule` adds the overall deadline, with the time passed in.
The client's shell (:mod:`endpoint.client`) sleeps, connects and tells listeners.

Jitter (as in "Exponential Backoff And Jitter", AWS architecture blog, 2015):

- ``full``: a delay drawn uniformly from ``[0, min(max_delay, initial_delay * 2**(attempt-1))]``.
- ``decorrelated``: each delay drawn from ``[initial_delay, 3 * previous]``, capped at ``max_delay``; it
  spreads clients as well and never retries at once.
"""

from __future__ import annotations

import math
import random
from typing import Literal, Protocol

import attrs

__all__ = ["Backoff", "Jitter", "RandomSource", "ReconnectSchedule", "Reconnecting"]

Jitter = Literal["full", "decorrelated"]

_DECORRELATED_FACTOR = 3.0
"""How far above the previous delay a decorrelated one may go."""


class RandomSource(Protocol):
    """What the policy needs of a random generator (``random.Random`` fits; tests seed one)."""

    def uniform(self, a: float, b: float) -> float: ...


@attrs.frozen(kw_only=True)
class Backoff:
    """Delays before reconnect attempts: exponential growth from ``initial_delay`` up to ``max_delay``, jittered.

    Pure: the same attempt, previous delay and random source give the same delay.
    """

    initial_delay: float = 0.1
    max_delay: float = 10.0
    jitter: Jitter = "full"

    def __attrs_post_init__(self) -> None:
        if not (0 < self.initial_delay <= self.max_delay and math.isfinite(self.max_delay)):
            raise ValueError(
                f"need 0 < initial_delay <= max_delay (finite): initial_delay={self.initial_delay!r}, "
                f"max_delay={self.max_delay!r}"
            )
        if self.jitter not in ("full", "decorrelated"):
            raise ValueError(f"jitter={self.jitter!r}: 'full' or 'decorrelated'")

    def ceiling(self, attempt: int) -> float:
        """The largest delay before attempt ``attempt`` (1 is the first) under full jitter."""
        if attempt < 1:
            raise ValueError(f"attempt={attempt!r}: attempts count from 1")
        # 2**(attempt-1) overflows a float near attempt 1025; the cap is reached long before.
        exponent = min(attempt - 1, 1023)
        return min(self.max_delay, self.initial_delay * 2.0**exponent)

    def delay(self, attempt: int, rng: RandomSource, previous: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt``; ``previous`` is the delay before the last one (decorrelated
        jitter grows from it; None before the first attempt)."""
        if self.jitter == "full":
            return rng.uniform(0.0, self.ceiling(attempt))
        if attempt < 1:
            raise ValueError(f"attempt={attempt!r}: attempts count from 1")
        base = self.initial_delay if previous is None else max(previous, self.initial_delay)
        return min(self.max_delay, rng.uniform(self.initial_delay, base * _DECORRELATED_FACTOR))


@attrs.frozen(kw_only=True)
class Reconnecting:
    """What ``on_reconnecting`` listeners are told before each wait: attempt ``attempt`` starts in ``delay``
    seconds; ``cause`` is why the previous one failed (for the first: why the connection went away, or None);
    ``elapsed`` is the time since the connection was lost."""

    attempt: int
    delay: float
    cause: BaseException | None
    elapsed: float


class ReconnectSchedule:
    """One episode of reconnecting: attempt numbers, the delays between them and the overall deadline.

    ``next_delay(now)`` gives the wait before the next attempt, or None when that attempt could not start
    before ``deadline`` seconds after ``start`` (give up). ``remaining(now)`` bounds the attempt itself, so
    the whole episode ends by the deadline. Time is passed in (seconds on any monotonic clock).
    """

    def __init__(self, backoff: Backoff, deadline: float, start: float, rng: RandomSource | None = None) -> None:
        if not deadline > 0:
            raise ValueError(f"deadline={deadline!r}: must be > 0")
        self.backoff = backoff
        self.start = start
        self.deadline = deadline
        self.attempts = 0
        """Attempts begun so far (the one the last ``next_delay`` announced included)."""
        self._rng: RandomSource = rng if rng is not None else random.Random()
        self._previous: float | None = None

    def elapsed(self, now: float) -> float:
        return now - self.start

    def remaining(self, now: float) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.start + self.deadline - now)

    def next_delay(self, now: float) -> float | None:
        """The wait before the next attempt (counted in ``attempts``), or None: give up."""
        delay = self.backoff.delay(self.attempts + 1, self._rng, self._previous)
        if delay >= self.remaining(now):
            return None
        self.attempts += 1
        self._previous = delay
        return delay
