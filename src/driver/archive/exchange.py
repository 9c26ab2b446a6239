"""The client's half of the control protocol (sans-IO): which request an operation sends, and what its answers mean.

:func:`request_for` turns one of :class:`~driver.archive.operations.ArchiveOperations`' operations into the
request's bytes; an :class:`Exchange` collects the answers with its correlation id (a ControlResponse, or a
listing's descriptors up to its count or a RECORDING_UNKNOWN end); :func:`result_of` gives the operation's value
or raises its typed error. No IO and no clock: the clients wait, this decides.
"""

from __future__ import annotations

from typing import Any, Final

from driver.archive import control
from driver.archive.control import ControlResponse, RecordingDescriptorMessage, ResponseCode
from driver.archive.errors import (
    ArchiveError,
    ArchiveInUseError,
    ArchiveStorageError,
    CatalogError,
    InvalidPositionError,
    MaxRecordingsError,
    MaxReplaysError,
    RecordingNotFoundError,
    RecordingStateError,
    ReplayLimitError,
)
from driver.archive.sessions import SessionLimitError

__all__ = ["INT32_MAX", "NULL_VALUE", "Exchange", "error_of", "request_for", "result_of"]

NULL_VALUE: Final = -1
INT32_MAX: Final = (1 << 31) - 1

_ERROR_TYPES: Final[dict[str, type[ArchiveError]]] = {
    cls.__name__: cls
    for cls in (
        ArchiveError,
        ArchiveInUseError,
        ArchiveStorageError,
        CatalogError,
        InvalidPositionError,
        MaxRecordingsError,
        MaxReplaysError,
        RecordingNotFoundError,
        RecordingStateError,
        ReplayLimitError,
        SessionLimitError,
    )
}
_CODE_TYPES: Final[dict[int, type[ArchiveError]]] = {
    control.ErrorCode.ACTIVE_LISTING: RecordingStateError,
    control.ErrorCode.ACTIVE_RECORDING: RecordingStateError,
    control.ErrorCode.ACTIVE_SUBSCRIPTION: RecordingStateError,
    control.ErrorCode.UNKNOWN_RECORDING: RecordingNotFoundError,
    control.ErrorCode.INVALID_EXTENSION: InvalidPositionError,
    control.ErrorCode.MAX_REPLAYS: MaxReplaysError,
    control.ErrorCode.MAX_RECORDINGS: MaxRecordingsError,
}


def error_of(response: ControlResponse) -> ArchiveError:
    """The typed error an ERROR answer stands for: by the type name our archive puts first, else by its code."""
    text = response.error_message
    name, sep, rest = text.partition(": ")
    if sep and name in _ERROR_TYPES:
        return _ERROR_TYPES[name](rest)
    if sep and name.endswith("Error") and name.isidentifier():
        return ArchiveError(text)  # a type of ours the client does not map (e.g. a channel error): keep its name
    return _CODE_TYPES.get(response.relevant_id, ArchiveError)(text or f"archive error {response.relevant_id}")


class Exchange:
    """One request's answer (sans-IO): a ControlResponse, or for a listing the descriptors up to its count or
    a RECORDING_UNKNOWN end."""

    __slots__ = ("correlation_id", "descriptors", "done", "expected", "operation", "response")

    def __init__(self, correlation_id: int, operation: str, expected_descriptors: int = 0) -> None:
        self.correlation_id = correlation_id
        self.operation = operation
        self.expected = expected_descriptors
        self.descriptors: list[RecordingDescriptorMessage | control.RecordingSubscriptionDescriptor] = []
        self.response: ControlResponse | None = None
        self.done = False

    @property
    def is_listing(self) -> bool:
        return self.expected > 0

    def on_message(self, message: control.Message) -> bool:
        """Take a message with this exchange's correlation id; True when something new arrived."""
        if isinstance(message, (RecordingDescriptorMessage, control.RecordingSubscriptionDescriptor)):
            self.descriptors.append(message)
            if len(self.descriptors) >= max(self.expected, 1):
                self.done = True
            return True
        if isinstance(message, ControlResponse):
            self.response = message
            self.done = True
            return True
        return False


def request_for(operation: str, args: tuple[Any, ...], session_id: int, correlation_id: int) -> tuple[bytes, int]:
    """The request bytes for one of :class:`ArchiveOperations`' operations, and how many descriptors answer it."""
    c = control
    m: control.Message
    expected = 0
    if operation == "start_recording":
        channel, stream_id, local = args
        m = c.StartRecordingRequest(session_id, correlation_id, stream_id, _location(local), channel)
    elif operation == "stop_recording":
        channel, stream_id = args
        m = c.StopRecordingRequest(session_id, correlation_id, stream_id, channel)
    elif operation == "stop_recording_subscription":
        m = c.StopRecordingSubscriptionRequest(session_id, correlation_id, args[0])
    elif operation == "extend_recording":
        recording_id, channel, stream_id, local = args
        m = c.ExtendRecordingRequest(session_id, correlation_id, recording_id, stream_id, _location(local), channel)
    elif operation == "list_recordings":
        from_id, count = args
        expected = min(count, INT32_MAX)
        m = c.ListRecordingsRequest(session_id, correlation_id, from_id, expected)
    elif operation == "list_recordings_for_uri":
        from_id, count, fragment, stream_id = args
        expected = min(count, INT32_MAX)
        m = c.ListRecordingsForUriRequest(session_id, correlation_id, from_id, expected, stream_id, fragment)
    elif operation == "list_recording_subscriptions":
        pseudo_index, count, fragment, stream_id = args
        expected = min(count, INT32_MAX)
        apply = stream_id is not None
        m = c.ListRecordingSubscriptionsRequest(
            session_id, correlation_id, pseudo_index, expected, int(apply), stream_id if apply else 0, fragment
        )
    elif operation == "list_recording":
        expected = 1
        m = c.ListRecordingRequest(session_id, correlation_id, args[0])
    elif operation == "recording_position":
        m = c.RecordingPositionRequest(session_id, correlation_id, args[0])
    elif operation == "stop_position":
        m = c.StopPositionRequest(session_id, correlation_id, args[0])
    elif operation == "replay":
        recording_id, position, length, channel, stream_id = args
        m = c.ReplayRequest(session_id, correlation_id, recording_id, position, length, stream_id, channel)
    elif operation == "bounded_replay":
        recording_id, position, length, limit_counter_id, channel, stream_id = args
        m = c.BoundedReplayRequest(
            session_id, correlation_id, recording_id, position, length, limit_counter_id, stream_id, channel
        )
    elif operation == "archive_id":
        m = c.ArchiveIdRequest(session_id, correlation_id)
    elif operation == "stop_replay":
        m = c.StopReplayRequest(session_id, correlation_id, args[0])
    elif operation == "truncate_recording":
        m = c.TruncateRecordingRequest(session_id, correlation_id, args[0], args[1])
    elif operation == "purge_recording":
        m = c.PurgeRecordingRequest(session_id, correlation_id, args[0])
    elif operation == "find_last_matching_recording":
        min_id, rec_session_id, stream_id, fragment = args
        m = c.FindLastMatchingRecordingRequest(session_id, correlation_id, min_id, rec_session_id, stream_id, fragment)
    elif operation == "keep_alive":
        m = c.KeepAliveRequest(session_id, correlation_id)
    elif operation == "close_session":
        m = c.CloseSessionRequest(session_id)
    elif operation == "connect":
        channel, stream_id = args
        m = c.ConnectRequest(correlation_id, stream_id, channel)
    else:
        raise ArchiveError(f"unknown archive operation {operation!r}")
    return control.encode(m), expected


def _location(local: bool) -> int:
    return control.SourceLocation.LOCAL if local else control.SourceLocation.REMOTE


def result_of(exchange: Exchange) -> Any:
    """The value an operation returns, from its completed exchange (raises the typed error of an ERROR answer)."""
    r = exchange.response
    operation = exchange.operation
    if r is not None and r.code == ResponseCode.ERROR:
        if operation in ("stop_recording", "stop_recording_subscription") and r.relevant_id in (
            control.ErrorCode.UNKNOWN_SUBSCRIPTION,
        ):
            return False
        if operation == "stop_replay" and r.relevant_id == control.ErrorCode.UNKNOWN_REPLAY:
            return False
        raise error_of(r)
    if exchange.is_listing:
        if operation == "list_recording":
            if not exchange.descriptors:
                raise RecordingNotFoundError(f"no recording {r.relevant_id if r is not None else '?'}")
            first = exchange.descriptors[0]
            if not isinstance(first, RecordingDescriptorMessage):
                raise ArchiveError(f"{operation}: answered with a {type(first).__name__}")
            return _row(first)
        return [
            (d.subscription_id, d.stream_id, d.stripped_channel)
            if isinstance(d, control.RecordingSubscriptionDescriptor)
            else _row(d)
            for d in exchange.descriptors
        ]
    if r is None:
        raise ArchiveError(f"{operation}: no answer")
    if r.code == ResponseCode.RECORDING_UNKNOWN:
        raise RecordingNotFoundError(f"no recording {r.relevant_id}")
    if operation in ("stop_recording", "stop_recording_subscription", "stop_replay"):
        return True
    if operation in ("recording_position", "stop_position", "find_last_matching_recording"):
        return None if r.relevant_id == NULL_VALUE else r.relevant_id
    if operation in ("truncate_recording", "purge_recording", "keep_alive"):
        return None
    if operation == "connect":
        return r.control_session_id
    return r.relevant_id


def _row(d: RecordingDescriptorMessage) -> dict[str, object]:
    """A descriptor as :class:`RecordingDescriptor`'s fields (an active one's recorded position: its start until
    the client asks for the live position)."""
    return {
        "recording_id": d.recording_id,
        "start_timestamp": d.start_timestamp,
        "stop_timestamp": d.stop_timestamp,
        "start_position": d.start_position,
        "stop_position": d.stop_position,
        "recorded_position": d.stop_position if d.stop_position != NULL_VALUE else d.start_position,
        "initial_term_id": d.initial_term_id,
        "segment_file_length": d.segment_file_length,
        "term_buffer_length": d.term_buffer_length,
        "mtu_length": d.mtu_length,
        "session_id": d.session_id,
        "stream_id": d.stream_id,
        "stripped_channel": d.stripped_channel,
        "original_channel": d.original_channel,
        "source_identity": d.source_identity,
    }
