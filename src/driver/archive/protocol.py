"""The archive control protocol (sans-IO): requests, responses and recording events as msgpack arrays.

Requests go to the archive's control channel; each carries the correlation id the
answer will echo and, after ``connect``, the control session id the archive
assigned. Answers go to the response channel the client named when it connected.

    request   [correlation id, control session id, operation, [arguments...]]
    response  [correlation id, true, value]  or  [correlation id, false, [error type, message]]
    event     ["started", recording id, start position, session id, stream id, channel, source identity]
              ["progress", recording id, start position, position]
              ["stopped", recording id, start position, stop position, reason]

A message that does not decode to one of these is a :class:`ProtocolError`;
the archive counts it and drops it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs
import msgpack  # type: ignore[import-untyped]

from driver.archive import errors
from driver.archive.errors import ArchiveError
from driver.errors import DriverConfigurationError, InvalidChannelError

__all__ = [
    "OPERATIONS",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "RecordingEvent",
    "Request",
    "Response",
    "decode_event",
    "decode_request",
    "decode_response",
    "encode_event",
    "encode_request",
    "encode_response",
    "error_from_wire",
]

PROTOCOL_VERSION = 1

_packb: Final[Callable[[Any], bytes]] = msgpack.packb

OPERATIONS: dict[str, int] = {
    # operation name -> number of arguments
    "connect": 3,  # response channel, response stream id, protocol version
    "close_session": 0,
    "start_recording": 3,  # channel, stream id, local source (bool)
    "stop_recording": 2,  # channel, stream id
    "stop_recording_subscription": 1,
    "list_recordings": 2,  # from id, count
    "list_recordings_for_uri": 4,  # from id, count, channel fragment, stream id
    "list_recording": 1,
    "recording_position": 1,
    "stop_position": 1,
    "replay": 5,  # recording id, position, length (-1 follow), replay channel, replay stream id
    "stop_replay": 1,
    "extend_recording": 4,  # recording id, channel, stream id, local source
    "truncate_recording": 2,  # recording id, position
    "purge_recording": 1,
}

_ERROR_TYPES: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        errors.ArchiveError,
        errors.ArchiveInUseError,
        errors.ArchiveStorageError,
        errors.CatalogError,
        errors.InvalidPositionError,
        errors.RecordingNotFoundError,
        errors.RecordingStateError,
        DriverConfigurationError,
        InvalidChannelError,
    )
}


class ProtocolError(ArchiveError):
    """A control message that is not one this protocol defines."""


@attrs.frozen
class Request:
    correlation_id: int
    session_id: int
    operation: str
    args: tuple[Any, ...]


@attrs.frozen
class Response:
    correlation_id: int
    ok: bool
    value: Any


@attrs.frozen
class RecordingEvent:
    kind: str
    recording_id: int
    start_position: int
    position: int = -1
    session_id: int = 0
    stream_id: int = 0
    channel: str = ""
    source_identity: str = ""
    reason: str = ""


def _unpack(data: bytes | memoryview) -> Any:
    try:
        return msgpack.unpackb(data, use_list=True, raw=False, strict_map_key=False)
    except Exception as exc:
        raise ProtocolError(f"undecodable control message: {exc}") from None


def encode_request(correlation_id: int, session_id: int, operation: str, *args: Any) -> bytes:
    return _packb([correlation_id, session_id, operation, list(args)])


def decode_request(data: bytes | memoryview) -> Request:
    message = _unpack(data)
    if (
        not isinstance(message, list)
        or len(message) != 4
        or not isinstance(message[0], int)
        or not isinstance(message[1], int)
        or not isinstance(message[3], list)
    ):
        raise ProtocolError(f"a request is [correlation id, session id, operation, [args]]; got {message!r:.200}")
    operation = message[2]
    expected = OPERATIONS.get(operation) if isinstance(operation, str) else None
    if expected is None:
        raise ProtocolError(f"unknown operation {operation!r:.100}; known: {', '.join(OPERATIONS)}")
    if len(message[3]) != expected:
        raise ProtocolError(f"{operation} takes {expected} arguments, got {len(message[3])}")
    return Request(message[0], message[1], operation, tuple(message[3]))


def encode_response(correlation_id: int, value: Any = None, error: BaseException | None = None) -> bytes:
    if error is not None:
        return _packb([correlation_id, False, [type(error).__name__, str(error)]])
    return _packb([correlation_id, True, value])


def decode_response(data: bytes | memoryview) -> Response:
    message = _unpack(data)
    if not isinstance(message, list) or len(message) != 3 or not isinstance(message[0], int):
        raise ProtocolError(f"a response is [correlation id, ok, value]; got {message!r:.200}")
    return Response(message[0], bool(message[1]), message[2])


def error_from_wire(value: Any) -> Exception:
    """The typed error an error response stands for (ArchiveError for a type we do not know)."""
    if isinstance(value, list) and len(value) == 2:
        kind, message = value
        cls = _ERROR_TYPES.get(str(kind), ArchiveError)
        if cls is DriverConfigurationError or cls is InvalidChannelError:
            return ArchiveError(f"{kind}: {message}")
        return cls(message)
    return ArchiveError(f"malformed error response: {value!r:.200}")


def encode_event(event: RecordingEvent) -> bytes:
    if event.kind == "started":
        body = [event.session_id, event.stream_id, event.channel, event.source_identity]
    elif event.kind == "progress":
        body = [event.position]
    else:
        body = [event.position, event.reason]
    return _packb([event.kind, event.recording_id, event.start_position, *body])


def decode_event(data: bytes | memoryview) -> RecordingEvent:
    message = _unpack(data)
    try:
        kind, recording_id, start, *body = message
        if kind == "started":
            session_id, stream_id, channel, source = body
            return RecordingEvent(kind, recording_id, start, start, session_id, stream_id, channel, source)
        if kind == "progress":
            (position,) = body
            return RecordingEvent(kind, recording_id, start, position)
        if kind == "stopped":
            position, reason = body
            return RecordingEvent(kind, recording_id, start, position, reason=reason)
    except (TypeError, ValueError):
        pass
    raise ProtocolError(f"not a recording event: {message!r:.200}")
