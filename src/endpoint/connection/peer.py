"""A connection as the parts below it see it: its remote calls and streams hold a :class:`Peer`.

:class:`endpoint.connection.shell.Connection` is one (structurally); the protocol lets :mod:`endpoint.rpc.calls` and
:mod:`endpoint.streaming` name what they hold without importing the connection that imports them.
"""

from __future__ import annotations

from typing import Protocol

from endpoint.connection.outbox import Outbox

__all__ = ["Peer"]


class Peer(Protocol):
    """Who is at the other end, and how to send to it."""

    @property
    def id(self) -> int: ...

    @property
    def remote_address(self) -> str: ...

    @property
    def is_ipc(self) -> bool: ...

    @property
    def is_closed(self) -> bool: ...

    @property
    def max_message_length(self) -> int: ...

    @property
    def outbox(self) -> Outbox: ...

    async def send(self, message: object, *, timeout: float | None = None) -> None: ...

    def send_nowait(self, message: object) -> bool: ...

    async def close(self, reason: str = "", *, timeout: float | None = None) -> None: ...
