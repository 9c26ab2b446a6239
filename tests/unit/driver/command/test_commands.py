"""Client <-> driver command codecs: ids, byte layouts (Aeron 1.15.1), round trips, malformed input."""

from __future__ import annotations

import mmap
import struct
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.command import (
    ClientTimeout,
    CommandType,
    CorrelatedMessage,
    CounterMessage,
    CounterUpdate,
    CurrentCommandType,
    DestinationMessage,
    ErrorResponse,
    ImageMessage,
    ImageReady,
    OperationSucceeded,
    PublicationMessage,
    PublicationReady,
    RemoveMessage,
    ResponseType,
    SubscriptionMessage,
    SubscriptionReady,
    decode_command,
    decode_response,
)
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import ErrorCode, MalformedCommandError

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=300)
TEXT = st.text(max_size=200)
KEY = st.binary(max_size=120)

# ------------------------------------------------------------------------------------------- ids


def test_command_type_ids_are_aeron_1_15_1() -> None:
    assert {t.name: t.value for t in CommandType} == {
        "ADD_PUBLICATION": 0x01,
        "REMOVE_PUBLICATION": 0x02,
        "ADD_EXCLUSIVE_PUBLICATION": 0x03,
        "ADD_SUBSCRIPTION": 0x04,
        "REMOVE_SUBSCRIPTION": 0x05,
        "CLIENT_KEEPALIVE": 0x06,
        "ADD_DESTINATION": 0x07,
        "REMOVE_DESTINATION": 0x08,
        "ADD_COUNTER": 0x09,
        "REMOVE_COUNTER": 0x0A,
        "CLIENT_CLOSE": 0x0B,
        "ADD_RCV_DESTINATION": 0x0C,
        "REMOVE_RCV_DESTINATION": 0x0D,
    }


def test_response_type_ids_are_aeron_1_15_1() -> None:
    assert {t.name: t.value for t in ResponseType} == {
        "ON_ERROR": 0x0F01,
        "ON_AVAILABLE_IMAGE": 0x0F02,
        "ON_PUBLICATION_READY": 0x0F03,
        "ON_OPERATION_SUCCESS": 0x0F04,
        "ON_UNAVAILABLE_IMAGE": 0x0F05,
        "ON_EXCLUSIVE_PUBLICATION_READY": 0x0F06,
        "ON_SUBSCRIPTION_READY": 0x0F07,
        "ON_COUNTER_READY": 0x0F08,
        "ON_UNAVAILABLE_COUNTER": 0x0F09,
        "ON_CLIENT_TIMEOUT": 0x0F0A,
    }


def test_current_ids_extend_without_overlap() -> None:
    assert {t.name: t.value for t in CurrentCommandType} == {
        "TERMINATE_DRIVER": 0x0E,
        "ADD_STATIC_COUNTER": 0x0F,
        "REJECT_IMAGE": 0x10,
        "REMOVE_DESTINATION_BY_ID": 0x11,
        "GET_NEXT_AVAILABLE_SESSION_ID": 0x12,
        "ON_STATIC_COUNTER": 0x0F0B,
        "ON_PUBLICATION_ERROR": 0x0F0C,
        "ON_NEXT_AVAILABLE_SESSION_ID": 0x0F0D,
    }
    old = {int(t) for t in CommandType} | {int(t) for t in ResponseType}
    assert old.isdisjoint(int(t) for t in CurrentCommandType)


def test_every_type_id_has_exactly_one_codec() -> None:
    command_codecs: list[Any] = [CorrelatedMessage, PublicationMessage, RemoveMessage, SubscriptionMessage]
    command_codecs += [DestinationMessage, CounterMessage]
    ids = [t for codec in command_codecs for t in codec.TYPE_IDS]
    assert sorted(ids) == sorted(CommandType)
    response_codecs: list[Any] = [ErrorResponse, ImageReady, PublicationReady, OperationSucceeded]
    response_codecs += [ImageMessage, SubscriptionReady, CounterUpdate, ClientTimeout]
    ids = [t for codec in response_codecs for t in codec.TYPE_IDS]
    assert sorted(ids) == sorted(ResponseType)


# ------------------------------------------------------------------------------------------- exact layouts


def ascii_string(text: str) -> bytes:
    return struct.pack("<i", len(text)) + text.encode("ascii")


def test_publication_message_layout() -> None:
    msg = PublicationMessage(client_id=0x1122334455667788, correlation_id=42, stream_id=1001, channel="aeron:ipc")
    encoded = msg.encode()
    assert encoded == struct.pack("<qqi", 0x1122334455667788, 42, 1001) + ascii_string("aeron:ipc")
    assert struct.unpack_from("<i", encoded, 16)[0] == 1001
    assert struct.unpack_from("<i", encoded, 20)[0] == 9
    assert encoded[24:] == b"aeron:ipc"
    assert len(encoded) == msg.encoded_length() == 33


def test_remove_message_layout() -> None:
    encoded = RemoveMessage(client_id=7, correlation_id=8, registration_id=-9).encode()
    assert encoded == struct.pack("<qqq", 7, 8, -9)
    assert len(encoded) == RemoveMessage.LENGTH == 24


def test_subscription_message_layout_and_default_registration_id() -> None:
    msg = SubscriptionMessage(client_id=1, correlation_id=2, stream_id=10, channel="aeron:udp?endpoint=x:1")
    encoded = msg.encode()
    assert msg.registration_correlation_id == -1
    assert struct.unpack_from("<qqqi", encoded) == (1, 2, -1, 10)
    assert encoded[28:] == ascii_string("aeron:udp?endpoint=x:1")


def test_correlated_message_layout() -> None:
    assert CorrelatedMessage(client_id=5, correlation_id=-1).encode() == struct.pack("<qq", 5, -1)


def test_destination_message_layout() -> None:
    encoded = DestinationMessage(1, 2, 3, "aeron:udp?endpoint=h:4").encode()
    assert encoded == struct.pack("<qqq", 1, 2, 3) + ascii_string("aeron:udp?endpoint=h:4")


@pytest.mark.parametrize(("key_length", "label_length_offset"), [(0, 24), (1, 28), (4, 28), (5, 32), (8, 32)])
def test_counter_message_pads_key_to_four(key_length: int, label_length_offset: int) -> None:
    key = bytes(range(1, key_length + 1))
    msg = CounterMessage(client_id=1, correlation_id=2, type_id=1001, key=key, label="my label")
    encoded = msg.encode()
    assert struct.unpack_from("<qqii", encoded) == (1, 2, 1001, key_length)
    assert encoded[24 : 24 + key_length] == key
    assert encoded[24 + key_length : label_length_offset] == b"\0" * (label_length_offset - 24 - key_length)
    assert msg.label_length_offset == label_length_offset
    assert encoded[label_length_offset:] == ascii_string("my label")
    assert len(encoded) == msg.encoded_length()


def test_error_response_layout_is_utf8() -> None:
    msg = ErrorResponse(offending_correlation_id=99, error_code=ErrorCode.INVALID_CHANNEL, error_message="bad µ")
    encoded = msg.encode()
    text = "bad µ".encode()
    assert encoded == struct.pack("<qii", 99, 1, len(text)) + text
    assert ErrorResponse.decode(encoded) == msg
    assert msg.code is ErrorCode.INVALID_CHANNEL
    assert ErrorResponse(1, 14, "revoked").code is None


@pytest.mark.parametrize("name_length", [0, 1, 3, 4, 5, 17])
def test_image_ready_layout(name_length: int) -> None:
    name = "n" * name_length
    msg = ImageReady(
        correlation_id=1,
        session_id=-2,
        stream_id=3,
        subscription_registration_id=4,
        subscriber_position_id=5,
        log_file_name=name,
        source_identity="192.168.0.1:40123",
    )
    encoded = msg.encode()
    assert struct.unpack_from("<qiiqii", encoded) == (1, -2, 3, 4, 5, name_length)
    assert encoded[32 : 32 + name_length] == name.encode()
    source_offset = 28 + 4 + ((name_length + 3) & ~3)
    assert msg.source_identity_offset == source_offset
    assert encoded[source_offset:] == ascii_string("192.168.0.1:40123")
    assert len(encoded) == msg.encoded_length()


def test_publication_ready_layout() -> None:
    msg = PublicationReady(
        correlation_id=10,
        registration_id=9,
        session_id=-5,
        stream_id=1001,
        publication_limit_counter_id=7,
        channel_status_indicator_id=-1,
        log_file_name="/dev/shm/aeron/publications/10.logbuffer",
    )
    encoded = msg.encode()
    assert struct.unpack_from("<qqiiii", encoded) == (10, 9, -5, 1001, 7, -1)
    assert encoded[32:] == ascii_string("/dev/shm/aeron/publications/10.logbuffer")


def test_fixed_length_response_layouts() -> None:
    assert OperationSucceeded(123).encode() == struct.pack("<q", 123)
    assert ClientTimeout(77).encode() == struct.pack("<q", 77)
    assert SubscriptionReady(5, -1).encode() == struct.pack("<qi", 5, -1)
    assert CounterUpdate(6, 12).encode() == struct.pack("<qi", 6, 12)
    assert len(SubscriptionReady(5, -1).encode()) == SubscriptionReady.LENGTH == 12
    assert len(CounterUpdate(6, 12).encode()) == CounterUpdate.LENGTH == 12


def test_image_message_layout() -> None:
    encoded = ImageMessage(1, 2, 3, "aeron:ipc").encode()
    assert encoded == struct.pack("<qqi", 1, 2, 3) + ascii_string("aeron:ipc")


# ------------------------------------------------------------------------------------------- round trips

MESSAGES = st.one_of(
    st.builds(CorrelatedMessage, INT64, INT64),
    st.builds(PublicationMessage, INT64, INT64, INT32, ASCII),
    st.builds(RemoveMessage, INT64, INT64, INT64),
    st.builds(SubscriptionMessage, INT64, INT64, INT32, ASCII, INT64),
    st.builds(DestinationMessage, INT64, INT64, INT64, ASCII),
    st.builds(CounterMessage, INT64, INT64, INT32, KEY, ASCII),
    st.builds(ErrorResponse, INT64, INT32, TEXT),
    st.builds(ImageReady, INT64, INT32, INT32, INT64, INT32, ASCII, ASCII),
    st.builds(PublicationReady, INT64, INT64, INT32, INT32, INT32, INT32, ASCII),
    st.builds(OperationSucceeded, INT64),
    st.builds(ImageMessage, INT64, INT64, INT32, ASCII),
    st.builds(SubscriptionReady, INT64, INT32),
    st.builds(CounterUpdate, INT64, INT32),
    st.builds(ClientTimeout, INT64),
)


@given(MESSAGES)
def test_round_trip(msg: Any) -> None:
    encoded = msg.encode()
    assert type(msg).decode(encoded) == msg
    if hasattr(msg, "encoded_length"):
        assert msg.encoded_length() == len(encoded)


@given(MESSAGES, st.binary(max_size=40), st.binary(max_size=40))
def test_round_trip_at_offset_inside_a_larger_buffer(msg: Any, before: bytes, after: bytes) -> None:
    encoded = msg.encode()
    buffer = bytearray(before + encoded + after)
    assert type(msg).decode(buffer, len(before), len(encoded)) == msg
    assert type(msg).decode(memoryview(buffer), len(before), len(encoded)) == msg


@given(MESSAGES)
def test_round_trip_from_an_atomic_buffer_over_mmap(msg: Any) -> None:
    encoded = msg.encode()
    with mmap.mmap(-1, 4096) as region:
        atomic = AtomicBuffer(region, 64, 2048)
        atomic.put_bytes(8, encoded)
        try:
            assert type(msg).decode(atomic, 8, len(encoded)) == msg
        finally:
            atomic.release()


@given(MESSAGES)
def test_every_truncation_is_malformed(msg: Any) -> None:
    encoded = msg.encode()
    for cut in range(len(encoded)):
        with pytest.raises(MalformedCommandError, match=type(msg).__name__):
            type(msg).decode(encoded[:cut])


@given(MESSAGES, st.binary(min_size=1, max_size=16))
def test_trailing_bytes_are_ignored(msg: Any, extra: bytes) -> None:
    assert type(msg).decode(msg.encode() + extra) == msg


def test_remove_publication_with_todays_flags_field_decodes() -> None:
    long_form = struct.pack("<qqqq", 1, 2, 3, 1)
    assert RemoveMessage.decode(long_form) == RemoveMessage(1, 2, 3)


# ------------------------------------------------------------------------------------------- malformed


def test_negative_string_length_names_the_field() -> None:
    body = struct.pack("<qqii", 1, 2, 3, -4)
    with pytest.raises(MalformedCommandError, match=r"PublicationMessage: channel length -4 is negative"):
        PublicationMessage.decode(body)


def test_string_length_past_the_end_names_the_field() -> None:
    body = struct.pack("<qqqi", 1, 2, 3, 100) + b"aeron:ipc"
    with pytest.raises(MalformedCommandError, match=r"DestinationMessage: channel length 100 exceeds the 9 bytes"):
        DestinationMessage.decode(body)


def test_short_fixed_part_names_the_field() -> None:
    with pytest.raises(MalformedCommandError, match=r"RemoveMessage: .*too short for registration_id"):
        RemoveMessage.decode(struct.pack("<qq", 1, 2))


def test_counter_label_after_key_padding_is_bounds_checked() -> None:
    body = struct.pack("<qqii", 1, 2, 3, 5) + b"12345"  # key ends, padding and label length missing
    with pytest.raises(MalformedCommandError, match=r"CounterMessage: .*label length"):
        CounterMessage.decode(body)


def test_image_ready_source_identity_is_bounds_checked() -> None:
    encoded = ImageReady(1, 2, 3, 4, 5, "abcde", "src").encode()
    with pytest.raises(MalformedCommandError, match=r"ImageReady: source_identity"):
        ImageReady.decode(encoded[:-1])


def test_non_ascii_channel_on_the_wire_is_malformed() -> None:
    body = struct.pack("<qqii", 1, 2, 3, 2) + b"\xc3\xa9"
    with pytest.raises(MalformedCommandError, match=r"PublicationMessage: channel is not ASCII"):
        PublicationMessage.decode(body)


def test_invalid_utf8_error_text_is_replaced_not_fatal() -> None:
    body = struct.pack("<qii", 1, 0, 2) + b"\xff\xfe"
    assert ErrorResponse.decode(body).error_message == "\ufffd\ufffd"


@pytest.mark.parametrize(("offset", "length"), [(-1, 4), (0, 100), (10, 10), (0, -1)])
def test_offset_and_length_outside_the_buffer(offset: int, length: int) -> None:
    with pytest.raises(MalformedCommandError, match="outside a buffer of 16 bytes"):
        CorrelatedMessage.decode(bytes(16), offset, length)


def test_atomic_buffer_bounds_are_checked() -> None:
    atomic = AtomicBuffer(bytearray(16))
    with pytest.raises(MalformedCommandError, match="outside"):
        CorrelatedMessage.decode(atomic, 8, 16)
    atomic.release()


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: PublicationMessage(1, 2, 1 << 31, "aeron:ipc"), r"PublicationMessage\.stream_id=2147483648"),
        (lambda: RemoveMessage(1, 2, 1 << 63), r"RemoveMessage\.registration_id=.*int64"),
        (lambda: PublicationMessage(1, 2, 3, "aeron:ipc?alias=é"), r"PublicationMessage\.channel=.*not ASCII"),
        (lambda: CounterMessage(1, 2, 3, cast(Any, "key"), "label"), r"CounterMessage\.key=.*not bytes"),
        (lambda: ImageReady(1, 2, 3, 4, 5, "log", cast(Any, 6)), r"ImageReady\.source_identity=6 is not a str"),
        (lambda: ErrorResponse(1, cast(Any, "1"), "x"), r"ErrorResponse\.error_code='1' is not an int"),
    ],
)
def test_construction_validates_fields(factory: Any, match: str) -> None:
    with pytest.raises(MalformedCommandError, match=match):
        factory()


# ------------------------------------------------------------------------------------------- dispatch


@given(MESSAGES)
def test_dispatch_by_type_id(msg: Any) -> None:
    encoded = msg.encode()
    for type_id in msg.TYPE_IDS:
        decode = decode_command if isinstance(type_id, CommandType) else decode_response
        kind, decoded = decode(type_id, encoded)
        assert kind == type_id
        assert decoded == msg


def test_dispatch_rejects_unknown_and_later_ids() -> None:
    with pytest.raises(MalformedCommandError, match="unknown command type id 0x99"):
        decode_command(0x99, b"")
    with pytest.raises(MalformedCommandError, match=r"TERMINATE_DRIVER \(0xe\) is not part of the 1\.15\.1"):
        decode_command(CurrentCommandType.TERMINATE_DRIVER, b"")
    with pytest.raises(MalformedCommandError, match="unknown response type id 0xf00"):
        decode_response(0x0F00, b"")
    with pytest.raises(MalformedCommandError, match=r"ON_PUBLICATION_ERROR \(0xf0c\)"):
        decode_response(CurrentCommandType.ON_PUBLICATION_ERROR, b"")
    with pytest.raises(MalformedCommandError, match="unknown command type id 0xf01"):
        decode_command(ResponseType.ON_ERROR, b"")
