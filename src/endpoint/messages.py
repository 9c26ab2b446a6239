"""The end point's own messages on a connection, registered under reserved type ids."""

from __future__ import annotations

import attrs

from endpoint.serialization import Serialization

__all__ = ["Disconnect", "Ping", "Pong", "register_internal_messages"]


@attrs.define(slots=True)
class Ping:
    """Asks the peer for a :class:`Pong`; also keeps a quiet connection alive."""

    seq: int
    sent_ns: int


@attrs.define(slots=True)
class Pong:
    seq: int
    sent_ns: int


@attrs.define(slots=True)
class Disconnect:
    """A graceful close; ``reason`` reaches the peer's ``on_disconnect`` through ``connection.close_reason``."""

    reason: str


_INTERNAL: tuple[tuple[type, int], ...] = ((Ping, 0x7F00), (Pong, 0x7F01), (Disconnect, 0x7F02))


def register_internal_messages(serialization: Serialization) -> None:
    """Add the internal messages once (both ends must, so the registration hashes agree)."""
    for cls, type_id in _INTERNAL:
        if serialization.type_id_of(cls) is None:
            serialization.register_internal(cls, type_id)
