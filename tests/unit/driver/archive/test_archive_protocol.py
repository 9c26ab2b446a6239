"""The archive control protocol (sans-IO): requests, responses, events, and typed errors off the wire."""

from __future__ import annotations

from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from driver.archive.errors import (
    ArchiveError,
    ArchiveInUseError,
    ArchiveStorageError,
    CatalogError,
    InvalidPositionError,
    RecordingNotFoundError,
    RecordingStateError,
)
from driver.archive.protocol import (
    OPERATIONS,
    PROTOCOL_VERSION,
    ProtocolError,
    RecordingEvent,
    Request,
    Response,
    decode_event,
    decode_request,
    decode_response,
    encode_event,
    encode_request,
    encode_response,
    error_from_wire,
)
from driver.errors import DriverConfigurationError, InvalidChannelError

EXAMPLE_ARGS: dict[str, tuple[Any, ...]] = {
    "connect": ("aeron:ipc?term-length=64k", 20, PROTOCOL_VERSION),
    "close_session": (),
    "start_recording": ("aeron:udp?endpoint=127.0.0.1:40123", 1001, True),
    "stop_recording": ("aeron:ipc", 7),
    "stop_recording_subscription": (123456789012,),
    "list_recordings": (0, 1 << 30),
    "list_recordings_for_uri": (3, 10, "udp", None),
    "list_recording": (5,),
    "recording_position": (5,),
    "stop_position": (5,),
    "replay": (5, 4096, -1, "aeron:ipc", 99),
    "stop_replay": (1 << 30,),
    "extend_recording": (5, "aeron:ipc", 7, False),
    "truncate_recording": (5, 1 << 40),
    "purge_recording": (5,),
}


def test_every_operation_has_an_example() -> None:
    assert set(EXAMPLE_ARGS) == set(OPERATIONS)
    assert all(len(EXAMPLE_ARGS[name]) == count for name, count in OPERATIONS.items())


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_request_round_trip(operation: str) -> None:
    args = EXAMPLE_ARGS[operation]
    data = encode_request(-(1 << 62), 17, operation, *args)
    assert decode_request(data) == Request(-(1 << 62), 17, operation, args)
    assert decode_request(memoryview(data)) == Request(-(1 << 62), 17, operation, args)


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (b"", "undecodable"),
        (b"\xc1", "undecodable"),  # a msgpack byte that is never valid
        (b"\x94\x01", "undecodable"),  # a 4-array cut short
        (msgpack.packb({"op": "connect"}), "a request is"),
        (msgpack.packb("connect"), "a request is"),
        (msgpack.packb(42), "a request is"),
        (msgpack.packb([1, 2, "list_recording"]), "a request is"),
        (msgpack.packb([1, 2, "list_recording", [5], 6]), "a request is"),
        (msgpack.packb(["1", 2, "list_recording", [5]]), "a request is"),
        (msgpack.packb([1, 2.5, "list_recording", [5]]), "a request is"),
        (msgpack.packb([1, 2, "list_recording", 5]), "a request is"),
        (msgpack.packb([1, 2, "list_recording", {"id": 5}]), "a request is"),
        (msgpack.packb([1, 2, "drop_everything", []]), "unknown operation"),
        (msgpack.packb([1, 2, 7, [5]]), "unknown operation"),
        (msgpack.packb([1, 2, None, [5]]), "unknown operation"),
        (msgpack.packb([1, 2, "_op_list_recording", [5]]), "unknown operation"),
        (msgpack.packb([1, 2, "list_recording", []]), "takes 1 arguments, got 0"),
        (msgpack.packb([1, 2, "replay", [1, 2, 3]]), "takes 5 arguments, got 3"),
        (msgpack.packb([1, 2, "close_session", [1]]), "takes 0 arguments, got 1"),
    ],
)
def test_malformed_requests(message: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match) as info:
        decode_request(message)
    assert isinstance(info.value, ArchiveError)


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -1, 1 << 62, "text", [1, 2, 3], {"recording_id": 3, "session_id": -2}, [{"a": 1}, {"b": None}]],
)
def test_response_round_trip(value: Any) -> None:
    assert decode_response(encode_response(99, value)) == Response(99, True, value)


def test_map_with_int_keys_decodes() -> None:
    assert decode_response(encode_response(1, {1: "a"})).value == {1: "a"}


@pytest.mark.parametrize(
    "error",
    [
        ArchiveError("plain"),
        ArchiveInUseError("in use"),
        CatalogError("bad catalog"),
        InvalidPositionError("position 33 is not 32-byte aligned"),
        RecordingNotFoundError("no recording 5"),
        RecordingStateError("recording 5 is active"),
        ArchiveStorageError("disk full"),
    ],
)
def test_error_responses_come_back_typed(error: Exception) -> None:
    response = decode_response(encode_response(5, error=error))
    assert response.correlation_id == 5
    assert not response.ok
    rebuilt = error_from_wire(response.value)
    assert type(rebuilt) is type(error)
    assert str(rebuilt) == str(error)


def test_not_found_is_a_key_error_with_a_readable_message() -> None:
    rebuilt = error_from_wire(decode_response(encode_response(1, error=RecordingNotFoundError("no recording 9"))).value)
    assert isinstance(rebuilt, KeyError)
    assert str(rebuilt) == "no recording 9"
    assert str(RecordingNotFoundError()) == "recording not found"


def test_storage_error_keeps_its_errno_text() -> None:
    error = ArchiveStorageError(27, "recording 0: cannot write at position 4096: File too large")
    rebuilt = error_from_wire(decode_response(encode_response(1, error=error)).value)
    assert isinstance(rebuilt, ArchiveStorageError)
    assert isinstance(rebuilt, OSError)
    assert "File too large" in str(rebuilt)


@pytest.mark.parametrize(
    "error",
    [
        DriverConfigurationError("aeron.archive.segment.file.length", 3, "a power of two"),
        InvalidChannelError("endpoint", "x", "host:port"),
    ],
)
def test_driver_setting_errors_become_archive_errors_naming_them(error: Exception) -> None:
    rebuilt = error_from_wire(decode_response(encode_response(1, error=error)).value)
    assert type(rebuilt) is ArchiveError
    assert type(error).__name__ in str(rebuilt)
    assert str(error) in str(rebuilt)


@pytest.mark.parametrize(
    "value",
    [["TypeError", "f() takes 2 arguments"], ["KeyError", "'x'"], ["SystemExit", "bye"]],
)
def test_unknown_error_types_are_plain_archive_errors(value: list[str]) -> None:
    rebuilt = error_from_wire(value)
    assert type(rebuilt) is ArchiveError
    assert value[1] in str(rebuilt)


@pytest.mark.parametrize("value", [None, "boom", ["only one"], ["a", "b", "c"], {"type": "x"}])
def test_malformed_error_values(value: Any) -> None:
    rebuilt = error_from_wire(value)
    assert type(rebuilt) is ArchiveError
    assert "malformed" in str(rebuilt)


@pytest.mark.parametrize(
    "message",
    [b"\xc1", msgpack.packb([1, True]), msgpack.packb([1, True, 2, 3]), msgpack.packb(["1", True, 2]), b"\x93"],
)
def test_malformed_responses(message: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_response(message)


@pytest.mark.parametrize(
    "event",
    [
        RecordingEvent("started", 3, 4096, 4096, -17, 1001, "aeron:ipc?term-length=64k", "aeron:ipc"),
        RecordingEvent("progress", 3, 4096, 1 << 40),
        RecordingEvent("stopped", 3, 4096, 8192, reason="end of stream"),
        RecordingEvent("stopped", 3, 0, 0, reason="storage error: [Errno 27] File too large"),
    ],
)
def test_event_round_trip(event: RecordingEvent) -> None:
    assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize(
    "message",
    [
        b"\xc1",
        msgpack.packb(7),
        msgpack.packb(None),
        msgpack.packb(["started", 1]),
        msgpack.packb(["started", 1, 0, 5]),
        msgpack.packb(["progress", 1, 0]),
        msgpack.packb(["progress", 1, 0, 5, 6]),
        msgpack.packb(["stopped", 1, 0, 5]),
        msgpack.packb(["paused", 1, 0, 5]),
        msgpack.packb([]),
    ],
)
def test_malformed_events(message: bytes) -> None:
    with pytest.raises(ProtocolError, match=r"recording event|undecodable"):
        decode_event(message)
