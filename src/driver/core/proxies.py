"""Bounded command queues between agents.

Agents never call each other: the conductor hands the sender and receiver work
by queueing a callable, and they answer the same way. ``deque.append`` and
``popleft`` are atomic in CPython, so one queue per receiving agent needs no lock.
A full queue counts a proxy failure and refuses, as Aeron's proxies do.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from driver.concurrent.counters import AtomicCounter

__all__ = ["CommandQueue"]


class CommandQueue:
    def __init__(self, fail_counter: AtomicCounter, capacity: int = 1024) -> None:
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        self._capacity = capacity
        self._fail_counter = fail_counter

    def offer(self, command: Callable[[], None]) -> bool:
        if len(self._queue) >= self._capacity:
            self._fail_counter.increment()
            return False
        self._queue.append(command)
        return True

    def drain(self, limit: int = 10) -> int:
        queue = self._queue
        count = 0
        while queue and count < limit:
            queue.popleft()()
            count += 1
        return count

    def __len__(self) -> int:
        return len(self._queue)
