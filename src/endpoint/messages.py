"""The end point's own messages on a connection, registered under reserved type ids.

Besides these, stream chunks travel in a hand-built frame (see :mod:`endpoint.streaming`) so their bytes
skip msgpack entirely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from endpoint.serialization import Serialization

__all__ = [
    "CHUNK_EXT",
    "CHUNK_HEADER_LENGTH",
    "INTERNAL_TYPE_IDS",
    "SAMPLE_SEQ",
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
    "internal_problem",
    "is_chunk",
    "register_internal_messages",
]


SAMPLE_SEQ = (1 << 64) - 1
"""The ``seq`` of a ping that samples the round trip for the connection's counters: answered like any ping, but
neither it nor its pong is work for the poller (``seq`` 0 is a keepalive, never answered)."""


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
    """A call failed remotely; ``kind`` is one of :mod:`endpoint.rpc.calls`'s failure kinds."""

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

# The msgpack ext codes a connection frames by hand, so a reader knows each kind from its first six bytes (registered
# objects use serialization.ATTRS_EXT, 1). One place, so two kinds never share a code.
CHUNK_EXT = 2
"""A stream chunk: not encoded by the codec but framed as a msgpack ext value."""
NEWEST_EXT = 3
"""A newest-wins message (:mod:`endpoint.connection.newest`)."""
SESSION_EXT = 4
"""A buffered session's data or acknowledgement (:mod:`endpoint.connection.session`)."""
CHUNK_HEADER_LENGTH = 10
"""0xC9, the 4-byte big-endian ext length, the ext code, then the 4-byte little-endian stream id."""


def is_chunk(data: bytes | bytearray | memoryview) -> bool:
    view = memoryview(data)
    return len(view) >= CHUNK_HEADER_LENGTH and view[0] == 0xC9 and view[5] == CHUNK_EXT


_U32 = 1 << 32
_U64 = 1 << 64
_I64 = 1 << 63


def _uint(limit: int) -> Callable[[object], bool]:
    return lambda v: type(v) is int and 0 <= v < limit


def _int64(v: object) -> bool:
    return type(v) is int and -_I64 <= v < _I64


def _size(v: object) -> bool:
    return type(v) is int and -1 <= v < _I64


def _str(v: object) -> bool:
    return type(v) is str


def _any(v: object) -> bool:
    return True


_FIELDS: dict[type, tuple[Callable[[object], bool], ...]] = {
    Ping: (_uint(_U64), _int64),
    Pong: (_uint(_U64), _int64),
    Disconnect: (_str,),
    RpcCall: (_uint(_U64), _uint(_U32), _str, lambda v: type(v) is list, lambda v: v is None or type(v) is dict),
    RpcReply: (_uint(_U64), _any),
    RpcFailure: (_uint(_U64), _uint(_U32), _str, _str, _str),
    RpcCancel: (_uint(_U64),),
    StreamOpen: (_uint(_U32), lambda v: v in (0, 1) and type(v) is int, _str, _size, _any),
    StreamEnd: (_uint(_U32), _uint(_U64), _uint(_U32)),
    StreamAbort: (_uint(_U32), _str),
    StreamCancel: (_uint(_U32), _str),
}

_CHECKS: dict[type, tuple[tuple[str, Callable[[object], bool]], ...]] = {
    cls: tuple(zip((f.name for f in attrs.fields(cls)), checks, strict=True)) for cls, checks in _FIELDS.items()
}


def internal_problem(message: object) -> str | None:
    """What is wrong with one of the end point's own messages as decoded (fields of the wrong type or range).

    The codec builds any registered class from whatever the peer sent, so a peer can send ``Ping("x", None)``;
    such a message is dropped and counted by the connection before anything acts on it. None when it is fine.
    """
    checks = _CHECKS.get(type(message))
    if checks is None:
        return None
    for name, check in checks:
        value = getattr(message, name)
        if not check(value):
            return f"{type(message).__name__}.{name}={value!r:.60} is malformed"
    if isinstance(message, RpcCall) and message.kwargs and not all(type(key) is str for key in message.kwargs):
        return "RpcCall.kwargs has a key that is not a string"
    return None


def register_internal_messages(serialization: Serialization) -> None:
    """Add the internal messages once (both ends must, so the registration hashes agree)."""
    for cls, type_id in _INTERNAL:
        if serialization.type_id_of(cls) is None:
            serialization.register_internal(cls, type_id)
