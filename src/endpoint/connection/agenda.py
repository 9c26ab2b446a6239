"""One timer agenda for every connection of an end point: pure, time passed in.

Theory of operation. A connection's timers (keepalive owed, peer presumed dead, the rest of
:meth:`endpoint.connection.shell.Connection._tick`) only need looking at when one of them can have come due, and
:meth:`endpoint.connection.liveness.Liveness.next_check_ns` says when that is. The end point files each connection
here under that time and, at each of its ticks, takes back only the connections that are due
(:meth:`Agenda.pop_due`): an idle end point does work for what is due, not for every connection it has. A connection
looked at files itself again; hearing from the peer or sending only ever moves its next check later, so a check
that comes early finds nothing to do and files it again.

Times are put on a grid (:func:`grid_after`, and see
:meth:`~endpoint.connection.liveness.Liveness.next_check_ns`): the checks of many connections then fall on the same
instants, and one wake-up serves them all (their keepalives leave together). :meth:`Agenda.pop_due` also takes what
is due within a small slack after ``now_ns``, so deadlines a few milliseconds apart (off the grid, or on the grids
of different settings) share a wake-up rather than making one each.

An entry filed again replaces its earlier time: the old heap entry stays until it surfaces and is skipped, and the
heap is rebuilt when such stale entries outnumber live ones, so its size stays bounded by the live entries.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["NEVER_NS", "Agenda", "grid_after"]

T = TypeVar("T", bound=Hashable)

_COMPACT_FLOOR = 64
"""Stale heap entries tolerated beyond the live ones before the heap is rebuilt."""
NEVER_NS = 1 << 62
"""A due time that never comes (a timer with nothing to wait for)."""


def grid_after(t_ns: int, grid_ns: int) -> int:
    """The first point of the grid strictly after ``t_ns``."""
    return (t_ns // grid_ns + 1) * grid_ns


class Agenda(Generic[T]):
    """Items filed under the time they are next due; at most one time per item (see the module's docstring)."""

    __slots__ = ("_due", "_heap", "_order")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, T]] = []
        self._due: dict[T, int] = {}
        self._order = 0
        """Ties are taken in the order they were filed (and items are never compared)."""

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, item: object) -> bool:
        return item in self._due

    def due_of(self, item: T) -> int | None:
        """When ``item`` is due, None if it is not filed."""
        return self._due.get(item)

    def file(self, item: T, due_ns: int) -> None:
        """Have ``item`` due at ``due_ns``, replacing the time it was filed under."""
        due = self._due
        if due.get(item) == due_ns:
            return
        due[item] = due_ns
        self._order += 1
        heap = self._heap
        heapq.heappush(heap, (due_ns, self._order, item))
        if len(heap) > 2 * len(due) + _COMPACT_FLOOR:
            self._compact()

    def discard(self, item: T) -> None:
        """``item`` is no longer due at all (a closed connection)."""
        if self._due.pop(item, None) is not None and len(self._heap) > 2 * len(self._due) + _COMPACT_FLOOR:
            self._compact()

    @property
    def next_due_ns(self) -> int | None:
        """The earliest time anything is due, None when nothing is filed."""
        heap, due = self._heap, self._due
        while heap:
            at, _, item = heap[0]
            if due.get(item) == at:
                return at
            heapq.heappop(heap)  # filed again since, or discarded
        return None

    def pop_due(self, now_ns: int, slack_ns: int = 0) -> list[T]:
        """Every item due by ``now_ns + slack_ns``, earliest first, taken off the agenda (file each again)."""
        limit = now_ns + slack_ns
        heap, due = self._heap, self._due
        out: list[T] = []
        while heap and heap[0][0] <= limit:
            at, _, item = heapq.heappop(heap)
            if due.get(item) == at:
                del due[item]
                out.append(item)
        return out

    def _compact(self) -> None:
        due = self._due
        self._heap = [entry for entry in self._heap if due.get(entry[2]) == entry[0]]
        heapq.heapify(self._heap)
