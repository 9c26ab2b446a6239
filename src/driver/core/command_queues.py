"""Bounded command queues between agents, and what happens when one is full.

Agents never call each other: the conductor hands the sender and receiver work
by queueing a callable, and they answer the same way. ``deque.append`` and
``popleft`` are atomic in CPython, so one queue per receiving agent needs no lock.

Nothing is dropped silently. A full queue refuses an :meth:`CommandQueue.offer`
and counts it (Aeron's proxy-fail counters); what the conductor sends then waits,
in order, in its :class:`Backlog` and is offered again on the next duty cycle
(counted once as deferred), while the conductor reads no new client commands, so
the clients' to-driver ring back-pressures them. An agent's answer that
completes a teardown (:meth:`CommandQueue.put`) is never refused: there is at
most one per resource the conductor asked to tear down, and refusing it would
leak that resource for good. Work that input from the network asks for (a SETUP)
is offered and, if refused, asked for again by the next packet.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from driver.concurrent.counters import AtomicCounter

__all__ = ["Backlog", "CommandQueue"]


class CommandQueue:
    def __init__(self, fail_counter: AtomicCounter, capacity: int = 1024) -> None:
        self._queue: collections.deque[Callable[[], object]] = collections.deque()
        self._capacity = capacity
        self._fail_counter = fail_counter

    @property
    def capacity(self) -> int:
        return self._capacity

    def offer(self, command: Callable[[], object]) -> bool:
        """Queue ``command`` unless the queue is full (then count the failure and return False)."""
        if len(self._queue) >= self._capacity:
            self._fail_counter.increment()
            return False
        self._queue.append(command)
        return True

    def put(self, command: Callable[[], object]) -> None:
        """Queue a teardown's completion whatever the fill (bounded by the resources being torn down)."""
        self._queue.append(command)

    def drain(self, limit: int = 10) -> int:
        queue = self._queue
        count = 0
        while queue and count < limit:
            queue.popleft()()
            count += 1
        return count

    def __len__(self) -> int:
        return len(self._queue)


class Backlog:
    """What one sending agent's commands a full queue did not take: kept in order and offered again first."""

    def __init__(self, queue: CommandQueue, deferred: AtomicCounter) -> None:
        self._queue = queue
        self._deferred = deferred
        self._waiting: collections.deque[Callable[[], object]] = collections.deque()

    def send(self, command: Callable[[], object]) -> None:
        """Queue ``command`` behind anything still waiting; keep it if the queue is full."""
        if self._waiting or not self._queue.offer(command):
            self._waiting.append(command)
            self._deferred.increment()

    def flush(self) -> int:
        """Offer what waits, oldest first, until the queue refuses; returns how many it took."""
        waiting = self._waiting
        count = 0
        while waiting and self._queue.offer(waiting[0]):
            waiting.popleft()
            count += 1
        return count

    def __len__(self) -> int:
        return len(self._waiting)
