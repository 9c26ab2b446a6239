"""The end point's own messages are checked field by field after decoding: the codec builds any registered class
from whatever a peer sends, so these checks are all that stands between a hostile peer and the handlers."""

from __future__ import annotations

import pytest

from endpoint.errors import SerializationError
from endpoint.messages import (
    Disconnect,
    Ping,
    Pong,
    RpcCall,
    RpcCancel,
    RpcFailure,
    RpcReply,
    StreamAbort,
    StreamCancel,
    StreamEnd,
    StreamOpen,
    internal_problem,
    register_internal_messages,
)
from endpoint.serialization import Serialization


class _AnyValue:
    """A reply value of no wire type (its repr fixed, so the test ids are the same in every process)."""

    def __repr__(self) -> str:
        return "any value"


WELL_FORMED = [
    Ping(0, -5),
    Pong(3, 123),
    Disconnect(""),
    RpcCall(0, 1, "m", [], None),
    RpcCall(1 << 52, 0x7FFF_FFFF, "m", [1, "a"], {"k": 1}),
    RpcReply(9, _AnyValue()),
    RpcFailure(9, 4, "T", "msg", "tb"),
    RpcCancel(9),
    StreamOpen(1, 0, "", -1, None),
    StreamOpen(0xFFFF_FFFF, 1, "big", 1 << 40, {"any": "thing"}),
    StreamEnd(1, 0, 0xFFFF_FFFF),
    StreamAbort(1, "why"),
    StreamCancel(1, "why"),
]

MALFORMED = [
    (Ping("x", 0), "Ping.seq"),
    (Ping(True, 0), "Ping.seq"),  # bool is an int to Python, never to the wire format
    (Ping(-1, 0), "Ping.seq"),
    (Pong(0, "late"), "Pong.sent_ns"),
    (Disconnect(7), "Disconnect.reason"),
    (RpcCall("id", 1, "m", [], None), "RpcCall.call_id"),
    (RpcCall(1, -1, "m", [], None), "RpcCall.object_id"),
    (RpcCall(1, 1, b"m", [], None), "RpcCall.method"),
    (RpcCall(1, 1, "m", "args", None), "RpcCall.args"),
    (RpcCall(1, 1, "m", [], []), "RpcCall.kwargs"),
    (RpcCall(1, 1, "m", [], {1: 2}), "RpcCall.kwargs"),
    (RpcReply(None, 1), "RpcReply.call_id"),
    (RpcFailure(1, "kind", "", "", ""), "RpcFailure.kind"),
    (RpcCancel(1 << 64), "RpcCancel.call_id"),
    (StreamOpen(1 << 32, 0, "", -1, None), "StreamOpen.stream_id"),
    (StreamOpen(1, 2, "", -1, None), "StreamOpen.kind"),
    (StreamOpen(1, 0, None, -1, None), "StreamOpen.name"),
    (StreamOpen(1, 0, "", -2, None), "StreamOpen.size"),
    (StreamEnd(1, -5, 0), "StreamEnd.length"),
    (StreamEnd(1, 0, 1 << 32), "StreamEnd.crc32"),
    (StreamAbort(1, 0), "StreamAbort.reason"),
    (StreamCancel(-1, ""), "StreamCancel.stream_id"),
]


@pytest.mark.parametrize("message", WELL_FORMED, ids=repr)
def test_well_formed_internal_messages_pass(message: object) -> None:
    assert internal_problem(message) is None


@pytest.mark.parametrize(("message", "field"), MALFORMED, ids=[repr(m) for m, _ in MALFORMED])
def test_each_malformed_field_is_named(message: object, field: str) -> None:
    problem = internal_problem(message)
    assert problem is not None
    assert field in problem


def test_what_a_peer_can_make_the_codec_build_is_caught() -> None:
    serialization = Serialization()
    register_internal_messages(serialization)
    # Fields of the wrong type never get past the codec (it checks annotations on arrival)...
    with pytest.raises(SerializationError, match="stream_id"):
        serialization.decode(serialization.encode(StreamOpen("1", [], {}, "x", None)))  # type: ignore[arg-type]
    # ... values of the right type but out of range do, and the checks here catch them.
    decoded = serialization.decode(serialization.encode(StreamOpen(1 << 40, 7, "", -9, None)))
    assert type(decoded) is StreamOpen
    assert internal_problem(decoded) is not None


def test_other_messages_are_not_judged() -> None:
    assert internal_problem("a plain string") is None
    assert internal_problem(object()) is None
