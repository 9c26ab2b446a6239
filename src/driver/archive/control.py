"""Aeron Archive's control protocol (SBE schema 101) as plain values: requests, responses, descriptors, events.

Sans-IO: bytes in, values out and back. The messages are the 1.15.1 schema
(version 0), which every later Aeron Archive still decodes, plus the few
later messages our clients and today's clients use (keep-alive, purge,
archive id, authenticated connect without credentials, bounded replay).

Each message is an 8-byte SBE header (block length, template id, schema id,
version), a fixed block of little-endian fields and then the variable-length
ASCII fields, each a uint32 length and its bytes. A decoder reads the fixed
fields it knows and skips to the header's block length, so a newer sender's
longer block decodes (SBE's extension rule); a template we do not know is a
:class:`UnknownTemplateError`, a short or inconsistent message a
:class:`ProtocolError` -- the archive counts both and drops the message.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import attrs

from driver.archive.errors import ArchiveError

__all__ = [
    "HEADER",
    "MAX_VAR_LENGTH",
    "SCHEMA_ID",
    "SCHEMA_VERSION",
    "ArchiveIdRequest",
    "BoundedReplayRequest",
    "CloseSessionRequest",
    "ConnectRequest",
    "ControlResponse",
    "ErrorCode",
    "ExtendRecordingRequest",
    "FindLastMatchingRecordingRequest",
    "KeepAliveRequest",
    "ListRecordingRequest",
    "ListRecordingSubscriptionsRequest",
    "ListRecordingsForUriRequest",
    "ListRecordingsRequest",
    "Message",
    "ProtocolError",
    "PurgeRecordingRequest",
    "RecordingDescriptorMessage",
    "RecordingPositionRequest",
    "RecordingProgress",
    "RecordingSignal",
    "RecordingSignalEvent",
    "RecordingStarted",
    "RecordingStopped",
    "RecordingSubscriptionDescriptor",
    "ReplayRequest",
    "ResponseCode",
    "SourceLocation",
    "StartRecordingRequest",
    "StopPositionRequest",
    "StopRecordingRequest",
    "StopRecordingSubscriptionRequest",
    "StopReplayRequest",
    "TruncateRecordingRequest",
    "UnknownTemplateError",
    "decode",
    "encode",
]

SCHEMA_ID: Final = 101
SCHEMA_VERSION: Final = 0
HEADER: Final = struct.Struct("<HHHH")
MAX_VAR_LENGTH: Final = 1 << 16
"""Longest variable field we accept (a channel URI or error text); the schema allows 1 GiB, no message needs it."""
NULL_VALUE: Final = -1


class ProtocolError(ArchiveError):
    """Bytes that are not a well-formed message of this schema."""


class UnknownTemplateError(ProtocolError):
    """A well-formed header naming a template this side does not implement."""


class ResponseCode(enum.IntEnum):
    OK = 0
    ERROR = 1
    RECORDING_UNKNOWN = 2
    SUBSCRIPTION_UNKNOWN = 3


class SourceLocation(enum.IntEnum):
    LOCAL = 0
    REMOTE = 1


class RecordingSignal(enum.IntEnum):
    """What happened to a recording, told to the control session that asked for it (today's schema)."""

    START = 0
    STOP = 1
    EXTEND = 2
    REPLICATE = 3
    MERGE = 4
    SYNC = 5
    DELETE = 6
    REPLICATE_END = 7


class ErrorCode(enum.IntEnum):
    """The relevant id of an ERROR response (Aeron's ``ArchiveException`` codes)."""

    GENERIC = 0
    ACTIVE_LISTING = 1
    ACTIVE_RECORDING = 2
    ACTIVE_SUBSCRIPTION = 3
    UNKNOWN_SUBSCRIPTION = 4
    UNKNOWN_RECORDING = 5
    UNKNOWN_REPLAY = 6
    MAX_REPLAYS = 7
    MAX_RECORDINGS = 8
    INVALID_EXTENSION = 9


# -- messages ---------------------------------------------------------------------------------------


@attrs.frozen
class ControlResponse:
    control_session_id: int
    correlation_id: int
    relevant_id: int
    code: int
    error_message: str = ""


@attrs.frozen
class ConnectRequest:
    correlation_id: int
    response_stream_id: int
    response_channel: str
    version: int = SCHEMA_VERSION
    """The client's protocol version (an authenticated connect carries it; a 1.15.1 connect does not)."""


@attrs.frozen
class CloseSessionRequest:
    control_session_id: int


@attrs.frozen
class StartRecordingRequest:
    control_session_id: int
    correlation_id: int
    stream_id: int
    source_location: int
    channel: str


@attrs.frozen
class StopRecordingRequest:
    control_session_id: int
    correlation_id: int
    stream_id: int
    channel: str


@attrs.frozen
class ReplayRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int
    position: int
    length: int
    replay_stream_id: int
    replay_channel: str


@attrs.frozen
class BoundedReplayRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int
    position: int
    length: int
    limit_counter_id: int
    replay_stream_id: int
    replay_channel: str


@attrs.frozen
class StopReplayRequest:
    control_session_id: int
    correlation_id: int
    replay_session_id: int


@attrs.frozen
class ListRecordingsRequest:
    control_session_id: int
    correlation_id: int
    from_recording_id: int
    record_count: int


@attrs.frozen
class ListRecordingsForUriRequest:
    control_session_id: int
    correlation_id: int
    from_recording_id: int
    record_count: int
    stream_id: int
    channel: str


@attrs.frozen
class ListRecordingRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int


@attrs.frozen
class ListRecordingSubscriptionsRequest:
    control_session_id: int
    correlation_id: int
    pseudo_index: int
    subscription_count: int
    apply_stream_id: int
    """BooleanType: 1 to match ``stream_id`` as well as the channel fragment."""
    stream_id: int
    channel: str


@attrs.frozen
class RecordingSubscriptionDescriptor:
    control_session_id: int
    correlation_id: int
    subscription_id: int
    stream_id: int
    stripped_channel: str


@attrs.frozen
class ExtendRecordingRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int
    stream_id: int
    source_location: int
    channel: str


@attrs.frozen
class RecordingPositionRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int


@attrs.frozen
class TruncateRecordingRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int
    position: int


@attrs.frozen
class StopRecordingSubscriptionRequest:
    control_session_id: int
    correlation_id: int
    subscription_id: int


@attrs.frozen
class StopPositionRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int


@attrs.frozen
class FindLastMatchingRecordingRequest:
    control_session_id: int
    correlation_id: int
    min_recording_id: int
    session_id: int
    stream_id: int
    channel: str


@attrs.frozen
class KeepAliveRequest:
    control_session_id: int
    correlation_id: int


@attrs.frozen
class ArchiveIdRequest:
    control_session_id: int
    correlation_id: int


@attrs.frozen
class PurgeRecordingRequest:
    control_session_id: int
    correlation_id: int
    recording_id: int


@attrs.frozen
class RecordingDescriptorMessage:
    control_session_id: int
    correlation_id: int
    recording_id: int
    start_timestamp: int
    stop_timestamp: int
    start_position: int
    stop_position: int
    initial_term_id: int
    segment_file_length: int
    term_buffer_length: int
    mtu_length: int
    session_id: int
    stream_id: int
    stripped_channel: str
    original_channel: str
    source_identity: str


@attrs.frozen
class RecordingSignalEvent:
    control_session_id: int
    correlation_id: int
    recording_id: int
    subscription_id: int
    position: int
    signal: int


@attrs.frozen
class RecordingStarted:
    recording_id: int
    start_position: int
    session_id: int
    stream_id: int
    channel: str
    source_identity: str


@attrs.frozen
class RecordingProgress:
    recording_id: int
    start_position: int
    position: int


@attrs.frozen
class RecordingStopped:
    recording_id: int
    start_position: int
    stop_position: int


Message = (
    ControlResponse
    | ConnectRequest
    | CloseSessionRequest
    | StartRecordingRequest
    | StopRecordingRequest
    | ReplayRequest
    | BoundedReplayRequest
    | StopReplayRequest
    | ListRecordingsRequest
    | ListRecordingsForUriRequest
    | ListRecordingRequest
    | ListRecordingSubscriptionsRequest
    | RecordingSubscriptionDescriptor
    | ExtendRecordingRequest
    | RecordingPositionRequest
    | TruncateRecordingRequest
    | StopRecordingSubscriptionRequest
    | StopPositionRequest
    | FindLastMatchingRecordingRequest
    | KeepAliveRequest
    | ArchiveIdRequest
    | PurgeRecordingRequest
    | RecordingDescriptorMessage
    | RecordingSignalEvent
    | RecordingStarted
    | RecordingProgress
    | RecordingStopped
)


@attrs.frozen
class _Layout:
    """One template: its id, fixed block format (field order = attrs order), and how many string fields follow."""

    template_id: int
    block: struct.Struct
    strings: int
    cls: type


def _layout(template_id: int, block: str, strings: int, cls: type) -> _Layout:
    return _Layout(template_id, struct.Struct("<" + block), strings, cls)


# Fixed blocks as the schema lays them out (SBE packs fields without padding).
_LAYOUTS: Final[tuple[_Layout, ...]] = (
    _layout(1, "qqqi", 1, ControlResponse),
    _layout(2, "qi", 1, ConnectRequest),
    _layout(3, "q", 0, CloseSessionRequest),
    _layout(4, "qqiB", 1, StartRecordingRequest),
    _layout(5, "qqi", 1, StopRecordingRequest),
    _layout(6, "qqqqqi", 1, ReplayRequest),
    _layout(7, "qqq", 0, StopReplayRequest),
    _layout(8, "qqqi", 0, ListRecordingsRequest),
    _layout(9, "qqqii", 1, ListRecordingsForUriRequest),
    _layout(10, "qqq", 0, ListRecordingRequest),
    _layout(11, "qqqiB", 1, ExtendRecordingRequest),
    _layout(12, "qqq", 0, RecordingPositionRequest),
    _layout(13, "qqqq", 0, TruncateRecordingRequest),
    _layout(14, "qqq", 0, StopRecordingSubscriptionRequest),
    _layout(15, "qqq", 0, StopPositionRequest),
    _layout(16, "qqqii", 1, FindLastMatchingRecordingRequest),
    _layout(17, "qqiiii", 1, ListRecordingSubscriptionsRequest),
    _layout(18, "qqqqqii", 1, BoundedReplayRequest),
    _layout(22, "qqqqqqqiiiiii", 3, RecordingDescriptorMessage),
    _layout(23, "qqqi", 1, RecordingSubscriptionDescriptor),
    _layout(24, "qqqqqi", 0, RecordingSignalEvent),
    _layout(61, "qq", 0, KeepAliveRequest),
    _layout(68, "qq", 0, ArchiveIdRequest),
    _layout(101, "qqii", 2, RecordingStarted),
    _layout(102, "qqq", 0, RecordingProgress),
    _layout(103, "qqq", 0, RecordingStopped),
    _layout(104, "qqq", 0, PurgeRecordingRequest),
)
_BY_TEMPLATE: Final = {layout.template_id: layout for layout in _LAYOUTS}
_BY_CLASS: Final = {layout.cls: layout for layout in _LAYOUTS}
_AUTH_CONNECT: Final = 58
_AUTH_CONNECT_BLOCK: Final = struct.Struct("<qii")
_VAR_LENGTH: Final = struct.Struct("<I")


def encode(message: Message) -> bytes:
    """The message's bytes, header included."""
    layout = _BY_CLASS[type(message)]
    values = attrs.astuple(message, recurse=False)
    fixed = len(values) - layout.strings
    if isinstance(message, ConnectRequest):
        fixed -= 1  # the version travels only in an authenticated connect
        values = values[:-1]
    parts = [HEADER.pack(layout.block.size, layout.template_id, SCHEMA_ID, SCHEMA_VERSION)]
    parts.append(layout.block.pack(*values[:fixed]))
    for text in values[fixed:]:
        data = str(text).encode("ascii", "replace")
        parts.append(_VAR_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def _strings(data: memoryview, offset: int, count: int, template_id: int) -> tuple[list[str], int]:
    out: list[str] = []
    for _ in range(count):
        if offset + 4 > len(data):
            raise ProtocolError(f"template {template_id}: variable field header past the end ({len(data)} bytes)")
        (length,) = _VAR_LENGTH.unpack_from(data, offset)
        offset += 4
        if length > MAX_VAR_LENGTH or offset + length > len(data):
            raise ProtocolError(f"template {template_id}: variable field of {length} bytes does not fit")
        out.append(bytes(data[offset : offset + length]).decode("ascii", "replace"))
        offset += length
    return out, offset


def decode(data: bytes | bytearray | memoryview) -> Message:
    """The message in ``data`` (exactly one, as one fragment-assembled Aeron message holds)."""
    view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if len(view) < HEADER.size:
        raise ProtocolError(f"{len(view)} bytes: shorter than an SBE header")
    block_length, template_id, schema_id, _version = HEADER.unpack_from(view, 0)
    if schema_id != SCHEMA_ID:
        raise ProtocolError(f"schema id {schema_id}, expected {SCHEMA_ID}")
    if template_id == _AUTH_CONNECT:
        return _decode_auth_connect(view, block_length)
    layout = _BY_TEMPLATE.get(template_id)
    if layout is None:
        raise UnknownTemplateError(f"template id {template_id} is not one this archive implements")
    if block_length < layout.block.size or HEADER.size + block_length > len(view):
        raise ProtocolError(f"template {template_id}: block length {block_length} in a {len(view)}-byte message")
    values = list(layout.block.unpack_from(view, HEADER.size))
    strings, _ = _strings(view, HEADER.size + block_length, layout.strings, template_id)
    message: Message = layout.cls(*values, *strings)
    return message


def _decode_auth_connect(view: memoryview, block_length: int) -> ConnectRequest:
    if block_length < _AUTH_CONNECT_BLOCK.size or HEADER.size + block_length > len(view):
        raise ProtocolError(f"authenticated connect: block length {block_length} in a {len(view)}-byte message")
    correlation_id, stream_id, version = _AUTH_CONNECT_BLOCK.unpack_from(view, HEADER.size)
    (channel,), offset = _strings(view, HEADER.size + block_length, 1, _AUTH_CONNECT)
    if offset + 4 > len(view):
        raise ProtocolError("authenticated connect: no credentials field")
    (credentials,) = _VAR_LENGTH.unpack_from(view, offset)
    if credentials:
        raise ProtocolError("authenticated connect with credentials: this archive has no authenticator")
    return ConnectRequest(correlation_id, stream_id, channel, version)
