"""Fault injection on a datagram path: loss, reordering and duplication.

For tests and benchmarks, as Aeron's debug channel endpoints are: each direction
(send, receive) of each transport gets its own injector with a seeded RNG, so a
run is repeatable. Reordering holds one datagram back and releases it after the
next one (or after ``max_hold`` further attempts with nothing else to pass).
"""

from __future__ import annotations

import random
from typing import Generic, TypeVar

import attrs

__all__ = ["FaultInjector", "FaultSpec"]

T = TypeVar("T")


@attrs.frozen
class FaultSpec:
    """Rates in [0, 1] of dropping, reordering and duplicating a datagram."""

    loss_rate: float = 0.0
    reorder_rate: float = 0.0
    duplicate_rate: float = 0.0
    seed: int = 0

    @property
    def enabled(self) -> bool:
        return self.loss_rate > 0 or self.reorder_rate > 0 or self.duplicate_rate > 0


class FaultInjector(Generic[T]):
    """Decides the fate of each datagram (with whatever travels with it, e.g. its address).

    ``process`` returns what to pass on, in order.
    """

    def __init__(self, spec: FaultSpec, max_hold: int = 8) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed)
        self._held: T | None = None
        self._held_age = 0
        self._max_hold = max_hold
        self.dropped = 0
        self.reordered = 0
        self.duplicated = 0

    def process(self, datagram: T) -> list[T]:
        rng = self._rng.random
        spec = self.spec
        if spec.loss_rate and rng() < spec.loss_rate:
            self.dropped += 1
            return self.release_held()
        out = [datagram]
        if spec.duplicate_rate and rng() < spec.duplicate_rate:
            self.duplicated += 1
            out.append(datagram)
        if self._held is not None:
            out.append(self._held)
            self._held = None
        elif spec.reorder_rate and rng() < spec.reorder_rate:
            self.reordered += 1
            self._held = out.pop(0)
            self._held_age = 0
        return out

    def release_held(self) -> list[T]:
        """Datagrams held back too long; call when the path is otherwise idle."""
        if self._held is None:
            return []
        self._held_age += 1
        if self._held_age < self._max_hold:
            return []
        held, self._held = self._held, None
        return [held]
