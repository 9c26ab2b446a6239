"""Random session and stream ids, unique while live and reused only after a cool-down.

Ids are drawn at random so a late or forged packet can't guess the next
connection's ids, and a released id waits ``reuse_delay_ns`` (the driver's
linger and then some) before it can be handed out again, so frames of a closed
connection still in flight can't land in a new one. Time is passed in.
"""

from __future__ import annotations

import random
import secrets
from collections import deque
from collections.abc import Collection

from endpoint.errors import AllocationError

__all__ = ["IdAllocator"]

_DENSE_LIMIT = 1 << 17
"""Ranges up to this size keep a shuffled pool; wider ones draw and retry."""


class IdAllocator:
    """Allocate ints from ``[low, high]`` minus ``reserved``, at random, none live twice."""

    __slots__ = (
        "_cooling",
        "_cooling_ids",
        "_free",
        "_high",
        "_live",
        "_low",
        "_random",
        "_reserved",
        "_size",
        "name",
        "reuse_delay_ns",
    )

    def __init__(
        self,
        low: int,
        high: int,
        *,
        reserved: Collection[int] = (),
        reuse_delay_ns: int = 0,
        name: str = "id",
        rng: random.Random | None = None,
    ) -> None:
        if low > high:
            raise ValueError(f"{name} range is empty: low {low} > high {high}")
        if reuse_delay_ns < 0:
            raise ValueError(f"{name} reuse delay must be >= 0, got {reuse_delay_ns}")
        self.name = name
        self.reuse_delay_ns = reuse_delay_ns
        self._low = low
        self._high = high
        self._reserved = frozenset(r for r in reserved if low <= r <= high)
        self._size = high - low + 1 - len(self._reserved)
        self._random: random.Random = rng if rng is not None else secrets.SystemRandom()
        self._live: set[int] = set()
        self._cooling: deque[tuple[int, int]] = deque()  # (ready_ns, id), ready times non-decreasing
        self._cooling_ids: set[int] = set()
        """The ids in ``_cooling`` (each at most once: only a live id is released, and none cooling is handed out),
        so that a wide range's draw checks one in O(1) however many connections came and went lately."""
        self._free: list[int] | None = None
        """A dense range's free ids, in no particular order: each allocation draws one of them at random (a
        shuffle done one draw at a time), so a server starts without ~60,000 calls to the system's random source
        for a pool it may never use much of."""
        if self._size <= _DENSE_LIMIT:
            reserved_ = self._reserved
            self._free = (
                [i for i in range(low, high + 1) if i not in reserved_] if reserved_ else list(range(low, high + 1))
            )

    @property
    def capacity(self) -> int:
        return self._size

    @property
    def live_count(self) -> int:
        return len(self._live)

    def cooling_count(self) -> int:
        return len(self._cooling)

    def _thaw(self, now_ns: int) -> None:
        cooling = self._cooling
        while cooling and cooling[0][0] <= now_ns:
            _, value = cooling.popleft()
            self._cooling_ids.discard(value)
            if self._free is not None:
                self._free.append(value)  # drawn at random like the rest: reuse order can't be predicted either

    def allocate(self, now_ns: int) -> int:
        """A fresh id; AllocationError when every id is live or still cooling down."""
        self._thaw(now_ns)
        if self._free is not None:
            free = self._free
            if not free:
                raise self._exhausted()
            j = self._random.randrange(len(free))
            free[j], free[-1] = free[-1], free[j]
            value = free.pop()
        else:
            if len(self._live) + len(self._cooling) >= self._size:
                raise self._exhausted()
            cooling = self._cooling_ids
            for _ in range(1024):
                value = self._random.randint(self._low, self._high)
                if value not in self._live and value not in self._reserved and value not in cooling:
                    break
            else:  # pragma: no cover - needs a nearly full range of 2^17+ ids
                raise self._exhausted()
        self._live.add(value)
        return value

    def release(self, value: int, now_ns: int) -> None:
        """Give ``value`` back; it can be allocated again ``reuse_delay_ns`` after ``now_ns``."""
        try:
            self._live.remove(value)
        except KeyError:
            raise ValueError(f"{self.name} {value} is not allocated") from None
        self._cooling.append((now_ns + self.reuse_delay_ns, value))
        self._cooling_ids.add(value)

    def is_live(self, value: int) -> bool:
        return value in self._live

    def _exhausted(self) -> AllocationError:
        return AllocationError(
            f"no free {self.name} in [{self._low}, {self._high}]: {len(self._live)} live, "
            f"{len(self._cooling)} cooling down for {self.reuse_delay_ns / 1e9:g} s"
        )

    def __repr__(self) -> str:
        return f"IdAllocator({self.name}, [{self._low}, {self._high}], live={len(self._live)})"
