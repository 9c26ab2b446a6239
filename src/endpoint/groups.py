"""Groups of a server's connections (rooms, teams, regions): one encoding per message for all their members.

A :class:`Group` is a named, ordered set of open connections of one server (``server.group(name)``). Broadcasting
encodes the message once and offers the same bytes to every member, so a room of a hundred players costs one
encoding, not a hundred; a newest-wins broadcast also frames it once, under one sequence number. A connection that
closes leaves every group it was in (before ``on_disconnect`` runs); a group holds nothing else.

Bounds: a group's members are open connections of its server, each at most once, so a group is never larger than
the server's connections (``max_clients``); a server has at most ``max_groups`` groups, so a connection is in at most
that many. ``broadcast`` never waits: a member whose log is full does not get the message (counted in
:attr:`Group.refused`), and the tick goes on; ``await group.send()`` waits out each member's back pressure instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from endpoint.connection.newest import Sequencer, frame
from endpoint.connection.shell import Connection
from endpoint.errors import BudgetExceededError, ConnectionClosedError, MessageTooLargeError, ServerError, TransmitError

if TYPE_CHECKING:
    from endpoint.serialization import Serialization

__all__ = ["Group"]


class Group:
    """A named set of one server's open connections (see the module's docstring). Made by ``server.group(name)``."""

    def __init__(
        self,
        name: str,
        *,
        serialization: Serialization,
        sequencer: Sequencer,
        owns: Callable[[Connection], bool],
        forget: Callable[[Group], None],
    ) -> None:
        self.name = name
        self._serialization = serialization
        self._sequencer = sequencer
        self._owns = owns
        self._forget = forget
        self._members: dict[Connection, None] = {}
        self._snapshot: tuple[Connection, ...] | None = ()
        self.closed = False
        """Removed from its server (:meth:`close`): nothing more can join."""
        self.broadcasts = 0
        """Messages broadcast to the group (each counted once, whatever the members)."""
        self.refused = 0
        """Member deliveries a broadcast skipped: the member's log was full (back pressure) or it was closing."""

    def __repr__(self) -> str:
        return f"<Group {self.name!r} {len(self._members)} members>"

    # ------------------------------------------------------------------ membership

    def add(self, connection: Connection) -> None:
        """Make ``connection`` a member (again: no change). It leaves by itself when it closes.

        Raises ConnectionClosedError for a closed connection, ValueError for another end point's, and
        ServerError once the group was closed.
        """
        if self.closed:
            raise ServerError(f"{self!r} was closed: get a new one from server.group()")
        if connection.is_closed or connection._closing:
            raise ConnectionClosedError(f"{connection!r} is closed: it cannot join {self!r}", connection.close_reason)
        if not self._owns(connection):
            raise ValueError(f"{connection!r} is not a connection of this group's server")
        if connection in self._members:
            return
        self._members[connection] = None
        connection.groups.add(self)
        self._snapshot = None

    def discard(self, connection: Connection) -> bool:
        """Remove ``connection``; False if it was not a member."""
        if connection not in self._members:
            return False
        del self._members[connection]
        connection.groups.discard(self)
        self._snapshot = None
        return True

    remove = discard

    def clear(self) -> None:
        """Remove every member."""
        for connection in self._members:
            connection.groups.discard(self)
        self._members.clear()
        self._snapshot = ()

    def close(self) -> None:
        """Empty the group and remove it from its server (``server.group(name)`` then makes a new one)."""
        self.clear()
        if not self.closed:
            self.closed = True
            self._forget(self)

    @property
    def members(self) -> tuple[Connection, ...]:
        """The members, in the order they joined (a snapshot: safe to hold while members come and go)."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self._snapshot = tuple(self._members)
        return snapshot

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Connection]:
        return iter(self.members)

    def __contains__(self, connection: object) -> bool:
        return connection in self._members

    # ------------------------------------------------------------------ sending

    def broadcast(self, message: object) -> int:
        """Send ``message`` to every member now, encoded once, without waiting; returns how many took it.

        A member whose log is full or who is closing is skipped (counted in :attr:`refused`). A class registered
        ``unreliable=True`` goes :meth:`broadcast_unreliable`. MessageTooLargeError (nobody gets it) when it is longer
        than some member's ``max_message_length``.
        """
        if type(message) in self._serialization.unreliable:
            return self.broadcast_unreliable(message)
        members = self.members
        data = self._serialization.encode(message)
        check_length(data, message, members, self)
        self.broadcasts += 1
        taken = offer_each(members, data, message)
        self.refused += len(members) - taken
        return taken

    def broadcast_unreliable(self, message: object) -> int:
        """Send ``message`` newest-wins (see ``Connection.send_unreliable``) to every member: encoded and framed once,
        under one sequence number; returns how many took it (the others are counted in :attr:`refused`)."""
        members = self.members
        data = frame(self._sequencer.next(type(message)), self._serialization.encode(message))
        check_length(data, message, members, self)
        self.broadcasts += 1
        taken = offer_each_newest(members, data, message)
        self.refused += len(members) - taken
        return taken

    async def send(self, message: object, *, timeout: float | None = None) -> int:
        """Send ``message`` to every member, encoded once, waiting out each member's back pressure (for up to
        ``timeout``, default ``send_timeout``) side by side; returns how many members took it. A member that closes
        or stays full meanwhile is counted in :attr:`refused`. A member carrying a buffered session gets it
        through its session (numbered, kept until acknowledged)."""
        members = self.members
        data = self._serialization.encode(message)
        check_length(data, message, members, self)
        self.broadcasts += 1
        waits = []
        taken = 0
        for connection in members:
            if connection.session is not None:
                waits.append(connection.session.send(message, timeout))
                continue
            try:
                if connection.outbox.offer_now(data):
                    taken += 1
                    continue
            except ConnectionClosedError:
                self.refused += 1
                continue
            waits.append(connection.outbox.send_bytes(data, timeout))
        if waits:
            for outcome in await asyncio.gather(*waits, return_exceptions=True):
                if isinstance(outcome, (ConnectionClosedError, TransmitError, BudgetExceededError)):
                    self.refused += 1
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    taken += 1
        return taken


# ---------------------------------------------------------------------------------------------- one encoding, many


def check_length(data: bytes, message: object, members: Sequence[Connection], where: object) -> None:
    """MessageTooLargeError, before anyone gets it, when ``data`` is longer than some member carries."""
    for connection in members:
        if len(data) > connection._max_length:
            raise MessageTooLargeError(
                f"{type(message).__name__} encodes to {len(data)} bytes; {connection!r} in {where!r} carries at "
                f"most {connection.max_message_length} (a broadcast sends only what fits every member at once)"
            )


def offer_each(members: Sequence[Connection], data: bytes, message: object) -> int:
    """Offer ``data`` (``message`` encoded) to each member now, as ``send_nowait`` would; how many took it. A member
    that is closing or whose log is full is skipped; one carrying a buffered session gets ``message`` numbered and
    kept by its session."""
    taken = 0
    poked = None
    for connection in members:
        try:
            session = connection.session  # numbered and kept like any send in the session
            if session is not None:
                if session.send_nowait(message):
                    taken += 1
            elif connection._offer_encoded(data, poke=False):
                taken += 1
                if connection._endpoint is not poked:  # its poller poked once per run of one end point's members
                    poked = connection._endpoint
                    connection._poke()
        except (ConnectionClosedError, BudgetExceededError):
            pass
    return taken


def offer_each_newest(members: Sequence[Connection], data: bytes, message: object) -> int:
    """Offer the newest-wins frame ``data`` to each member now (see ``Connection.send_unreliable``); how many took
    it."""
    taken = 0
    for connection in members:
        try:
            if not connection._closing and connection._send_newest(data, message):
                taken += 1
        except ConnectionClosedError:
            pass
    return taken
