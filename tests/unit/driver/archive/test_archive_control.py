"""Aeron Archive's control protocol (sans-IO): the SBE messages byte for byte, malformed input, and the
control session machine with a fake clock."""

from __future__ import annotations

import struct

import attrs
import pytest

from driver.archive import control
from driver.archive.control import (
    HEADER,
    ControlResponse,
    ProtocolError,
    ResponseCode,
    UnknownTemplateError,
    decode,
    encode,
)
from driver.archive.errors import (
    ArchiveError,
    InvalidPositionError,
    RecordingNotFoundError,
    RecordingStateError,
    ReplayLimitError,
)
from driver.archive.exchange import Exchange, request_for, result_of
from driver.archive.sessions import ControlSession, ControlSessions, SessionLimitError, SessionState

CHANNEL = "aeron:udp?endpoint=localhost:8020"

EVERY_MESSAGE: list[control.Message] = [
    ControlResponse(7, 8, 9, ResponseCode.ERROR, "no such thing"),
    control.ConnectRequest(1, 20, CHANNEL),
    control.CloseSessionRequest(7),
    control.StartRecordingRequest(7, 2, 1001, control.SourceLocation.REMOTE, "aeron:ipc"),
    control.StopRecordingRequest(7, 3, 1001, "aeron:ipc"),
    control.ReplayRequest(7, 4, 5, 4096, -1, 99, "aeron:ipc?term-length=64k"),
    control.BoundedReplayRequest(7, 4, 5, 4096, -1, 12, 99, "aeron:ipc"),
    control.StopReplayRequest(7, 5, (3 << 32) | 0xDEADBEEF),
    control.ListRecordingsRequest(7, 6, 0, 100),
    control.ListRecordingsForUriRequest(7, 7, 0, 100, 1001, "ipc"),
    control.ListRecordingRequest(7, 8, 3),
    control.ListRecordingSubscriptionsRequest(7, 19, 2, 10, 1, 1001, "aeron:udp"),
    control.RecordingSubscriptionDescriptor(7, 19, 44, 1001, "aeron:udp?endpoint=localhost:40123"),
    control.ExtendRecordingRequest(7, 9, 3, 1001, control.SourceLocation.LOCAL, "aeron:ipc"),
    control.RecordingPositionRequest(7, 10, 3),
    control.TruncateRecordingRequest(7, 11, 3, 1 << 40),
    control.StopRecordingSubscriptionRequest(7, 12, 44),
    control.StopPositionRequest(7, 13, 3),
    control.FindLastMatchingRecordingRequest(7, 14, 0, -17, 1001, "udp"),
    control.KeepAliveRequest(7, 15),
    control.ArchiveIdRequest(7, 16),
    control.PurgeRecordingRequest(7, 17, 3),
    control.RecordingDescriptorMessage(
        7, 18, 3, 1000, 2000, 0, 8192, -5, 1 << 27, 1 << 16, 1408, -17, 1001, "aeron:ipc", "aeron:ipc?x=1", "aeron:ipc"
    ),
    control.RecordingSignalEvent(7, 2, 3, 44, 4096, control.RecordingSignal.EXTEND),
    control.RecordingStarted(3, 0, -17, 1001, "aeron:ipc", "aeron:ipc"),
    control.RecordingProgress(3, 0, 4096),
    control.RecordingStopped(3, 0, 8192),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_round_trip(message: control.Message) -> None:
    assert decode(encode(message)) == message
    assert decode(memoryview(bytearray(encode(message)))) == message


def test_control_response_bytes_as_the_schema_lays_them_out() -> None:
    # header: block length 28, template 1, schema 101, version 0; then session, correlation, relevant id, code,
    # then the error message as a uint32 length and its ASCII bytes
    expected = struct.pack("<HHHHqqqiI", 28, 1, 101, 0, 7, 8, 9, 1, 4) + b"oops"
    assert encode(ControlResponse(7, 8, 9, 1, "oops")) == expected


def test_start_recording_bytes_pack_the_source_location_byte_unpadded() -> None:
    data = encode(control.StartRecordingRequest(1, 2, 3, control.SourceLocation.REMOTE, "aeron:ipc"))
    assert data == struct.pack("<HHHHqqiBI", 21, 4, 101, 0, 1, 2, 3, 1, 9) + b"aeron:ipc"


def test_descriptor_block_is_80_bytes_then_three_strings() -> None:
    descriptor = next(m for m in EVERY_MESSAGE if isinstance(m, control.RecordingDescriptorMessage))
    data = encode(descriptor)
    assert HEADER.unpack_from(data) == (80, 22, 101, 0)
    assert len(data) == 8 + 80 + 3 * 4 + len("aeron:ipc") * 2 + len("aeron:ipc?x=1")


def test_a_newer_senders_longer_block_is_read_by_its_block_length() -> None:
    # SBE's extension rule: fields a later version appends to the block are skipped, the strings still found
    block = struct.pack("<qqqi", 7, 8, 9, 0) + b"\x01\x02\x03\x04"  # four bytes of a field we do not know
    data = HEADER.pack(len(block), 1, 101, 5) + block + struct.pack("<I", 2) + b"ok"
    assert decode(data) == ControlResponse(7, 8, 9, 0, "ok")


def test_authenticated_connect_is_a_connect_with_its_version() -> None:
    block = struct.pack("<qii", 42, 20, 0x10E00)
    data = HEADER.pack(16, 58, 101, 14) + block + struct.pack("<I", len(CHANNEL)) + CHANNEL.encode()
    data += struct.pack("<I", 0) + struct.pack("<I", 0)  # no credentials, no client info (version 12 on)
    assert decode(data) == control.ConnectRequest(42, 20, CHANNEL, 0x10E00)
    with pytest.raises(ProtocolError, match="credentials"):
        decode(data[:-8] + struct.pack("<I", 3) + b"pw!" + struct.pack("<I", 0))
    # a version-10 client sends no client info: read by its acting version
    older = HEADER.pack(16, 58, 101, 10) + block + struct.pack("<I", len(CHANNEL)) + CHANNEL.encode()
    assert decode(older + struct.pack("<I", 0)) == control.ConnectRequest(42, 20, CHANNEL, 0x10E00)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "shorter than an SBE header"),
        (b"\x01\x02\x03", "shorter than an SBE header"),
        (HEADER.pack(8, 3, 102, 0) + bytes(8), "schema id"),
        (HEADER.pack(28, 8, 101, 0) + bytes(10), "block of 28 bytes"),
        (HEADER.pack(4, 8, 101, 0) + bytes(28), "block length 4"),
        (HEADER.pack(12, 2, 101, 0) + bytes(12), "length at 20 exceeds the buffer"),
        (HEADER.pack(12, 2, 101, 0) + bytes(12) + struct.pack("<I", 100) + b"short", "exceed the buffer"),
        (HEADER.pack(12, 2, 101, 0) + bytes(12) + struct.pack("<I", 1 << 30), "exceed the buffer"),
    ],
)
def test_malformed_messages_are_protocol_errors(data: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode(data)


def test_an_unknown_template_is_its_own_error() -> None:
    with pytest.raises(UnknownTemplateError, match="250"):
        decode(HEADER.pack(8, 250, 101, 0) + bytes(8))


# -- the control session machine -------------------------------------------------------------------

SECOND = 1_000_000_000


def answers(session: ControlSession) -> list[control.Message]:
    out = []
    while (answer := session.next_answer()) is not None:
        out.append(decode(answer))
        session.sent()
    return out


def test_connect_is_answered_once_the_response_channel_connects() -> None:
    session = ControlSession(77, 5, now_ns=0, timeout_ns=SECOND)
    assert session.poll(SECOND // 2, connected=False) == 0
    assert session.state is SessionState.CONNECTING
    assert session.next_answer() is None
    assert session.poll(SECOND // 2 + 1, connected=True) == 1
    assert answers(session) == [ControlResponse(77, 5, 77, ResponseCode.OK, "")]


def test_a_response_channel_that_never_connects_ends_the_session() -> None:
    session = ControlSession(77, 5, now_ns=0, timeout_ns=SECOND)
    session.poll(SECOND, connected=False)
    assert not session.is_done
    session.poll(SECOND + 1, connected=False)
    assert session.is_done
    assert "never connected" in session.reason


def test_a_client_that_disconnects_ends_the_session() -> None:
    session = ControlSession(77, 5, now_ns=0, timeout_ns=SECOND)
    session.poll(1, connected=True)
    session.poll(2, connected=False)
    assert session.is_done
    assert "disconnected" in session.reason


def test_answers_queue_up_to_the_bound_then_the_session_ends_with_a_counted_drop() -> None:
    session = ControlSession(77, 5, now_ns=0, timeout_ns=SECOND, max_queued=3)
    session.poll(1, connected=True)  # the connect answer takes one place
    session.respond(ResponseCode.OK, 6)
    session.respond(ResponseCode.OK, 7)
    assert session.room == 0
    session.respond(ResponseCode.OK, 8)
    assert session.is_done
    assert session.dropped == 1
    assert "answers queued" in session.reason
    assert session.next_answer() is None


def test_an_answer_the_publication_refuses_for_longer_than_the_timeout_ends_the_session() -> None:
    session = ControlSession(77, 5, now_ns=0, timeout_ns=SECOND)
    session.poll(0, connected=True)
    session.blocked(10)
    session.blocked(10 + SECOND)
    assert not session.is_done
    session.sent()  # progress resets the clock
    session.respond(ResponseCode.OK, 6)
    session.blocked(5 * SECOND)
    session.blocked(6 * SECOND + 1)
    assert session.is_done
    assert "stopped reading" in session.reason


def test_sessions_are_bounded_and_counted() -> None:
    sessions = ControlSessions(first_id=1000, max_sessions=2)
    sessions.max_refusals = 1
    one = sessions.open(1, 0, SECOND, version=0, max_queued=4)
    two = sessions.open(2, 0, SECOND, version=0, max_queued=4)
    assert (one.session_id, two.session_id) == (1000, 1001)
    # over the limit: a session that only answers the connect with an error, then ends
    refused = sessions.open(3, 0, SECOND, version=0, max_queued=4)
    assert sessions.get(refused.session_id) is None  # takes no requests
    with pytest.raises(SessionLimitError):  # and only so many refusals at once: the rest go unanswered
        sessions.open(4, 0, SECOND, version=0, max_queued=4)
    assert sessions.refused == 2
    refused.poll(1, connected=True)
    assert answers(refused) == [ControlResponse(1002, 3, 0, ResponseCode.ERROR, refused.refusal)]
    assert refused.refusal.startswith("SessionLimitError: ")
    assert refused.is_done
    sessions.remove(refused.session_id)
    one.end("test")
    assert sessions.get(1000) is None
    sessions.remove(1000)
    assert sessions.open(5, 0, SECOND, version=0, max_queued=4).session_id == 1003


def test_messages_are_immutable_values() -> None:
    response = ControlResponse(1, 2, 3, 0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        response.code = 1  # type: ignore[misc]


# -- the same bytes as the schema-driven SBE codec (itself checked against Java's generated codecs) -------------

_SCHEMA_NAMES = {control.RecordingDescriptorMessage: "RecordingDescriptor"}


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_bytes_match_the_schema_driven_codec(message: control.Message) -> None:
    from driver.archive.codecs import CURRENT, LEGACY

    name = _SCHEMA_NAMES.get(type(message), type(message).__name__)
    values = attrs.asdict(message, recurse=False)
    values.pop("version", None)  # a 1.15.1 connect carries no version
    ours = encode(message)
    if name in LEGACY.messages:
        assert ours == LEGACY[name].encode(values)
        assert decode(LEGACY[name].encode(values)) == message
    else:  # today's messages: the same body, sent with our version-0 header (read as version 0 by today's codecs)
        theirs = CURRENT[name].encode(values)
        if name == "BoundedReplayRequest":  # today's block adds fields of later versions after ours: skipped
            assert theirs[8:56] == ours[8:56]
            assert decode(theirs) == message
            return
        assert ours[2:6] == theirs[2:6]
        assert ours[8:] == theirs[8:]


# -- the client's half (sans-IO): requests out, answers to values and typed errors -------------------------------


def exchange_for(operation: str, *args: object, expected: int = 0) -> Exchange:
    data, wanted = request_for(operation, args, 77, 5)
    assert decode(data).correlation_id == 5  # type: ignore[union-attr]
    assert wanted == expected
    return Exchange(5, operation, wanted)


def test_a_listing_ends_at_its_count_or_at_recording_unknown() -> None:
    d = next(m for m in EVERY_MESSAGE if isinstance(m, control.RecordingDescriptorMessage))
    listing = exchange_for("list_recordings", 0, 2, expected=2)
    listing.on_message(d)
    assert not listing.done
    listing.on_message(d)
    assert listing.done
    assert [row["recording_id"] for row in result_of(listing)] == [3, 3]
    short = exchange_for("list_recordings_for_uri", 0, 1 << 40, "ipc", 7, expected=(1 << 31) - 1)
    short.on_message(d)
    short.on_message(ControlResponse(77, 5, 4, ResponseCode.RECORDING_UNKNOWN))
    assert short.done
    assert len(result_of(short)) == 1
    single = exchange_for("list_recording", 9, expected=1)
    single.on_message(ControlResponse(77, 5, 9, ResponseCode.RECORDING_UNKNOWN))
    with pytest.raises(RecordingNotFoundError):
        result_of(single)


@pytest.mark.parametrize(
    ("operation", "args", "response", "expected"),
    [
        ("start_recording", ("aeron:ipc", 7, True), ControlResponse(77, 5, 44, 0), 44),
        ("stop_recording", ("aeron:ipc", 7), ControlResponse(77, 5, 0, 0), True),
        ("stop_recording", ("aeron:ipc", 7), ControlResponse(77, 5, 4, 1, "no recording found"), False),
        ("stop_replay", (1,), ControlResponse(77, 5, 6, 1, "replay session not known"), False),
        ("recording_position", (3,), ControlResponse(77, 5, -1, 0), None),
        ("stop_position", (3,), ControlResponse(77, 5, 8192, 0), 8192),
        ("replay", (3, 0, -1, "aeron:ipc", 9), ControlResponse(77, 5, (2 << 32) | 17, 0), (2 << 32) | 17),
        ("connect", ("aeron:ipc", 20), ControlResponse(1234, 5, 1234, 0), 1234),
        ("bounded_replay", (3, 0, -1, 12, "aeron:ipc", 9), ControlResponse(77, 5, (3 << 32) | 18, 0), (3 << 32) | 18),
        ("archive_id", (), ControlResponse(77, 5, 1 << 62, 0), 1 << 62),
    ],
)
def test_answers_become_values(
    operation: str, args: tuple[object, ...], response: ControlResponse, expected: object
) -> None:
    exchange = exchange_for(operation, *args)
    exchange.on_message(response)
    assert result_of(exchange) == expected


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (ControlResponse(77, 5, 5, 1, "unknown recording id 9"), RecordingNotFoundError),  # Aeron's code
        (ControlResponse(77, 5, 2, 1, "cannot truncate active recording"), RecordingStateError),
        (ControlResponse(77, 5, 0, 1, "InvalidPositionError: not a frame"), InvalidPositionError),  # ours: the name
        (ControlResponse(77, 5, 0, 1, "ReplayLimitError: no counter 99"), ReplayLimitError),
        (ControlResponse(77, 5, 0, 1, "InvalidChannelError: bad uri"), ArchiveError),
        (ControlResponse(77, 5, 0, 1, "invalid position 16008"), ArchiveError),
    ],
)
def test_error_answers_are_typed(response: ControlResponse, error: type[Exception]) -> None:
    exchange = exchange_for("truncate_recording", 3, 16008)
    exchange.on_message(response)
    with pytest.raises(error) as info:
        result_of(exchange)
    assert type(info.value) is error
    assert str(info.value).split(": ")[-1] in response.error_message


def test_a_bounded_replay_request_carries_its_limit_counter() -> None:
    data, expected = request_for("bounded_replay", (3, 64, 4096, 12, "aeron:ipc", 9), 77, 5)
    assert expected == 0
    assert decode(data) == control.BoundedReplayRequest(77, 5, 3, 64, 4096, 12, 9, "aeron:ipc")
    assert decode(request_for("archive_id", (), 77, 6)[0]) == control.ArchiveIdRequest(77, 6)
