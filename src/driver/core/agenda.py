"""Which of an agent's many publications or images need this duty cycle, without a Python call for each.

A server with hundreds of UDP connections has hundreds of publications and
images that are idle almost all the time: their next heartbeat or status
message is due in tens of milliseconds. Visiting each one every duty cycle, as
Aeron's C and Java agents can afford to, costs a Python call apiece and makes a
duty cycle grow with the number of connections. An agenda keeps one deadline
per item in an int64 array; one native call finds the due ones, and whatever
changes an item's needs (a datagram for it, a status message) wakes it by
setting its deadline to zero. The agent writes the next deadline after each
visit. Only the agent's own thread touches its agenda.
"""

from __future__ import annotations

import array
from typing import Generic, Protocol, TypeVar

from driver.concurrent._watches import deadlines_due

__all__ = ["ALWAYS", "Agenda", "Scheduled", "no_wake"]


class Scheduled(Protocol):
    agenda_index: int


T = TypeVar("T", bound=Scheduled)

ALWAYS = 0
"""A deadline that is always due: the item needs every duty cycle (a gap to repair, a resend pending)."""


def no_wake() -> None:
    """An item's ``wake`` while no agent holds it."""


class Agenda(Generic[T]):
    """Items and their deadlines (monotonic ns); ``items[i]`` has its deadline at slot ``i`` (``agenda_index``).

    ``entries[i]`` is what the agent gave with ``items[i]`` for a native scan of its own (e.g. where the
    item's next frame would be), kept in the same order.
    """

    __slots__ = ("_deadlines", "entries", "items")

    def __init__(self) -> None:
        self.items: list[T] = []
        self.entries: list[object] = []
        self._deadlines = array.array("q")

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: T, entry: object = None) -> None:
        """Add ``item``, due at once (its first visit sets its real deadline)."""
        item.agenda_index = len(self.items)
        self.items.append(item)
        self.entries.append(entry)
        self._deadlines.append(ALWAYS)

    def remove(self, item: T) -> bool:
        """Remove ``item`` (the last item moves into its slot); False if it is not here."""
        index = item.agenda_index
        items = self.items
        if not 0 <= index < len(items) or items[index] is not item:
            return False
        last = items.pop()
        entry = self.entries.pop()
        deadline = self._deadlines.pop()
        if last is not item:
            items[index] = last
            self.entries[index] = entry
            self._deadlines[index] = deadline
            last.agenda_index = index
        item.agenda_index = -1
        return True

    def wake(self, item: T) -> None:
        """Make ``item`` due now (no-op if it is not here)."""
        index = item.agenda_index
        if 0 <= index < len(self.items) and self.items[index] is item:
            self._deadlines[index] = ALWAYS

    def wake_all(self) -> None:
        for index in range(len(self._deadlines)):
            self._deadlines[index] = ALWAYS

    @property
    def deadlines(self) -> array.array[int]:
        """The deadlines themselves (int64, by index): a native step may write the ones it visited."""
        return self._deadlines

    def schedule(self, index: int, deadline_ns: int) -> None:
        self._deadlines[index] = deadline_ns

    def due(self, now_ns: int) -> list[int]:
        """Indices of the items due at ``now_ns``."""
        return deadlines_due(self._deadlines, now_ns)
