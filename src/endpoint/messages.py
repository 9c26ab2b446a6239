"""The end point's own messages on a connection, registered under reserved type ids.

Besides these, stream chunks travel in a hand-built frame (see :mod:`endpoint.streaming`) so their bytes
skip msgpack entirely.
"""

from __future__ import annotations

from typing import Any

import attrs

from endpoint.serialization import Serialization

__all__ = [
    "INTERNAL_TYPE_IDS",
    "Disconnect",
    "Ping",
    "Pong",
    "RpcCall",
    "RpcCancel",
    "RpcFailure",
    "RpcReply",
    "StreamAbort",
    "StreamCancel",
    "StreamEnd",
    "StreamOpen",
    "register_internal_messages",
]


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


@attrs.define(slots=True)
class RpcCall:
    """Call ``method`` of the peer's object ``object_id``; ``call_id`` 0 means one-way (no answer wanted)."""

    call_id: int
    object_id: int
    method: str
    args: list[Any]
    kwargs: dict[str, Any] | None


@attrs.define(slots=True)
class RpcReply:
    call_id: int
    value: Any


@attrs.define(slots=True)
class RpcFailure:
    """A call failed remotely; ``kind`` is one of :mod:`endpoint.rpc`'s failure kinds."""

    call_id: int
    kind: int
    type_name: str
    message: str
    traceback: str


@attrs.define(slots=True)
class RpcCancel:
    """The caller gave up on ``call_id`` (cancelled or timed out): stop the invocation."""

    call_id: int


@attrs.define(slots=True)
class StreamOpen:
    """A stream of chunks follows under ``stream_id``; ``size`` is -1 when unknown. ``kind`` 1: one large message."""

    stream_id: int
    kind: int
    name: str
    size: int
    metadata: Any


@attrs.define(slots=True)
class StreamEnd:
    """Every chunk of ``stream_id`` is sent; the receiver checks ``length`` and ``crc32``."""

    stream_id: int
    length: int
    crc32: int


@attrs.define(slots=True)
class StreamAbort:
    """Sender to receiver: the stream stops here, incomplete."""

    stream_id: int
    reason: str


@attrs.define(slots=True)
class StreamCancel:
    """Receiver to sender: stop sending ``stream_id``."""

    stream_id: int
    reason: str


_INTERNAL: tuple[tuple[type, int], ...] = (
    (Ping, 0x7F00),
    (Pong, 0x7F01),
    (Disconnect, 0x7F02),
    (RpcCall, 0x7F10),
    (RpcReply, 0x7F11),
    (RpcFailure, 0x7F12),
    (RpcCancel, 0x7F13),
    (StreamOpen, 0x7F20),
    (StreamEnd, 0x7F21),
    (StreamAbort, 0x7F22),
    (StreamCancel, 0x7F23),
)

INTERNAL_TYPE_IDS: dict[type, int] = dict(_INTERNAL)


def register_internal_messages(serialization: Serialization) -> None:
    """Add the internal messages once (both ends must, so the registration hashes agree)."""
    for cls, type_id in _INTERNAL:
        if serialization.type_id_of(cls) is None:
            serialization.register_internal(cls, type_id)
