"""Aeron Archive's control protocol (SBE schema 101) as plain values: requests, responses, descriptors, events.

Sans-IO: bytes in, values out and back. The messages are the 1.15.1 schema
(version 0), which every later Aeron Archive still decodes, plus the few
later messages our clients and today's clients use (keep-alive, purge,
archive id, authenticated connect without credentials, bounded replay).

The bytes come from the schema-driven SBE codecs (:mod:`driver.archive.codecs`,
Aeron's own schema files): a 1.15.1 message is sent in that schema's layout
(version 0), a later one in today's; a peer's message is read by the generation
its header names, a newer sender's longer block by its block length (SBE's
extension rule). Here they become immutable values. A template we do not
implement is an :class:`UnknownTemplateError`, a short or inconsistent message
a :class:`ProtocolError` -- the archive counts both and drops the message.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import attrs

from driver.archive.codecs import CURRENT, LEGACY, ArchiveDispatcher
from driver.archive.errors import ArchiveError
from driver.sbe import SbeDecodeError, SbeSchemaIdMismatchError, SbeUnknownTemplateError

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


_LEGACY_ONLY_CLASSES: Final[dict[str, type]] = {
    "ControlResponse": ControlResponse,
    "ConnectRequest": ConnectRequest,
    "CloseSessionRequest": CloseSessionRequest,
    "StartRecordingRequest": StartRecordingRequest,
    "StopRecordingRequest": StopRecordingRequest,
    "ReplayRequest": ReplayRequest,
    "StopReplayRequest": StopReplayRequest,
    "ListRecordingsRequest": ListRecordingsRequest,
    "ListRecordingsForUriRequest": ListRecordingsForUriRequest,
    "ListRecordingRequest": ListRecordingRequest,
    "ExtendRecordingRequest": ExtendRecordingRequest,
    "RecordingPositionRequest": RecordingPositionRequest,
    "TruncateRecordingRequest": TruncateRecordingRequest,
    "StopRecordingSubscriptionRequest": StopRecordingSubscriptionRequest,
    "StopPositionRequest": StopPositionRequest,
    "FindLastMatchingRecordingRequest": FindLastMatchingRecordingRequest,
    "RecordingDescriptor": RecordingDescriptorMessage,
    "RecordingStarted": RecordingStarted,
    "RecordingProgress": RecordingProgress,
    "RecordingStopped": RecordingStopped,
}
"""Messages of the 1.15.1 schema: sent in its layout (version 0), which every later archive and client reads."""
_TODAYS_CLASSES: Final[dict[str, type]] = {
    "ListRecordingSubscriptionsRequest": ListRecordingSubscriptionsRequest,
    "BoundedReplayRequest": BoundedReplayRequest,
    "RecordingSubscriptionDescriptor": RecordingSubscriptionDescriptor,
    "RecordingSignalEvent": RecordingSignalEvent,
    "KeepAliveRequest": KeepAliveRequest,
    "ArchiveIdRequest": ArchiveIdRequest,
    "PurgeRecordingRequest": PurgeRecordingRequest,
}
"""Messages only today's schema has: sent in its layout."""
_CLASSES: Final = {**_LEGACY_ONLY_CLASSES, **_TODAYS_CLASSES}
_NAMES: Final = {cls: name for name, cls in _CLASSES.items()}
_FIELDS: Final = {cls: [f.name for f in attrs.fields(cls)] for cls in _CLASSES.values()}
_DISPATCHER: Final = ArchiveDispatcher()


def encode(message: Message) -> bytes:
    """The message's bytes, header included (through the schema-driven SBE codecs of :mod:`driver.archive.codecs`)."""
    name = _NAMES[type(message)]
    codec = LEGACY[name] if name in _LEGACY_ONLY_CLASSES else CURRENT[name]
    values = attrs.asdict(message, recurse=False)
    if isinstance(message, ConnectRequest):
        del values["version"]  # a 1.15.1 connect carries no version
    return codec.encode(values)


def decode(data: bytes | bytearray | memoryview) -> Message:
    """The message in ``data`` (exactly one, as one fragment-assembled Aeron message holds)."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.nbytes < HEADER.size:
        raise ProtocolError(f"{view.nbytes} bytes: shorter than an SBE header")
    try:
        decoder = _DISPATCHER.wrap(view)
        values = decoder.to_dict()
    except SbeSchemaIdMismatchError as exc:
        raise ProtocolError(f"schema id: {exc}") from None
    except SbeUnknownTemplateError as exc:
        raise UnknownTemplateError(f"template id {HEADER.unpack_from(view)[1]}: {exc}") from None
    except SbeDecodeError as exc:
        raise ProtocolError(str(exc)) from None
    name = decoder.NAME
    if name == "AuthConnectRequest":
        if values.get("encoded_credentials"):
            raise ProtocolError("authenticated connect with credentials: this archive has no authenticator")
        return ConnectRequest(
            values["correlation_id"], values["response_stream_id"], values["response_channel"], values["version"]
        )
    cls = _CLASSES.get(name)
    if cls is None:
        raise UnknownTemplateError(
            f"template id {HEADER.unpack_from(view)[1]} ({name}) is not one this archive implements"
        )
    for field_name in _FIELDS[cls]:
        value = values.get(field_name)
        if isinstance(value, str) and len(value) > MAX_VAR_LENGTH:
            raise ProtocolError(f"{name}.{field_name}: {len(value)} characters, more than {MAX_VAR_LENGTH}")
    try:
        message: Message = cls(*(_plain(values[f]) for f in _FIELDS[cls] if f in values))
    except TypeError as exc:
        raise ProtocolError(f"{name}: {exc}") from None
    return message


def _plain(value: object) -> object:
    """Enum members as their ints, bytes of an ASCII field as text: the message classes hold plain values."""
    if isinstance(value, enum.Enum):
        return int(value.value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("ascii", "replace")
    return value
