"""Commands and responses today's Aeron added after 1.15.1 (CnC 0.2.0 generation).

Theory of operation: the same framing as :mod:`driver.command.messages` (the
16-byte correlated header, then fields packed to 4 bytes; strings are an int32
length then the bytes). Layouts, offsets from the start of the body::

    TerminateDriverMessage   TERMINATE_DRIVER 0x0E
        16 token length int32, 20 token bytes
    StaticCounterMessage     ADD_STATIC_COUNTER 0x0F
        16 registration_id int64, 24 type_id int32, 28 key length int32,
        32 key (zero padded to 4), then label length int32 and ASCII label
    RejectImageMessage       REJECT_IMAGE 0x10
        16 image correlation id int64, 24 position int64, 32 reason (length + text)
    DestinationByIdMessage   REMOVE_DESTINATION_BY_ID 0x11
        16 resource registration id int64, 24 destination registration id int64
    NextSessionIdMessage     GET_NEXT_AVAILABLE_SESSION_ID 0x12
        16 stream_id int32

Responses (no correlated header)::

    ON_STATIC_COUNTER 0x0F0B             0 correlation id int64, 8 counter id int32
    ON_NEXT_AVAILABLE_SESSION_ID 0x0F0D  0 correlation id int64, 8 next session id int32
    ON_PUBLICATION_ERROR 0x0F0C          0 registration id int64, 8 destination registration id int64,
        16 session id, 20 stream id, 24 receiver id int64, 32 group tag int64,
        40 address type int16 (1 IPv4, 2 IPv6), 42 source port uint16, 44 address (16 bytes),
        60 error code int32, 64 message (int32 length @64, UTF-8 @68)
"""

from __future__ import annotations

import ipaddress
import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.command._codec import Reader, ascii_text, encode_string, int32, int64, string_length
from driver.command.types import CurrentCommandType
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import MalformedCommandError

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "ADDRESS_TYPE_IPV4",
    "ADDRESS_TYPE_IPV6",
    "CurrentCommand",
    "DestinationByIdMessage",
    "NextSessionIdMessage",
    "NextSessionIdResponse",
    "PublicationErrorResponse",
    "RejectImageMessage",
    "StaticCounterMessage",
    "StaticCounterResponse",
    "TerminateDriverMessage",
    "decode_current_command",
]

ADDRESS_TYPE_IPV4 = 1
ADDRESS_TYPE_IPV6 = 2

_HEADER_INT = struct.Struct("<qqi")
_HEADER_LONG = struct.Struct("<qqq")
_HEADER_LONG_LONG = struct.Struct("<qqqq")
_HEADER_LONG_INT = struct.Struct("<qqqi")
_LONG_INT = struct.Struct("<qi")
_PUBLICATION_ERROR = struct.Struct("<qqiiqqhH16si")  # then the message string at 64


def _bytes(instance: object, attribute: attrs.Attribute[bytes], value: bytes) -> None:
    if not isinstance(value, bytes):
        raise MalformedCommandError(f"{type(instance).__name__}.{attribute.name}={value!r} is not bytes")


@attrs.frozen
class TerminateDriverMessage:
    TYPE_IDS: ClassVar[tuple[CurrentCommandType, ...]] = (CurrentCommandType.TERMINATE_DRIVER,)

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    token: bytes = attrs.field(default=b"", validator=_bytes)

    def encode(self) -> bytes:
        return struct.pack("<qq", self.client_id, self.correlation_id) + encode_string(self.token)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> TerminateDriverMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "client_id"), r.int64(8, "correlation_id"), r.raw(16, "token")[0])


@attrs.frozen
class StaticCounterMessage:
    """ADD_STATIC_COUNTER: a counter no client owns, found again by (type id, registration id)."""

    TYPE_IDS: ClassVar[tuple[CurrentCommandType, ...]] = (CurrentCommandType.ADD_STATIC_COUNTER,)

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    registration_id: int = attrs.field(validator=int64)
    type_id: int = attrs.field(validator=int32)
    key: bytes = attrs.field(validator=_bytes)
    label: str = attrs.field(validator=ascii_text)

    def encoded_length(self) -> int:
        return 28 + string_length(len(self.key), pad=True) + string_length(len(self.label))

    def encode(self) -> bytes:
        return (
            _HEADER_LONG_INT.pack(self.client_id, self.correlation_id, self.registration_id, self.type_id)
            + encode_string(self.key, pad=True)
            + encode_string(self.label.encode("ascii"))
        )

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> StaticCounterMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            key, key_end = r.raw(28, "key")
            label, _ = r.ascii((key_end + 3) & ~3, "label")
            return cls(
                r.int64(0, "client_id"),
                r.int64(8, "correlation_id"),
                r.int64(16, "registration_id"),
                r.int32(24, "type_id"),
                key,
                label,
            )


@attrs.frozen
class RejectImageMessage:
    TYPE_IDS: ClassVar[tuple[CurrentCommandType, ...]] = (CurrentCommandType.REJECT_IMAGE,)

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    image_correlation_id: int = attrs.field(validator=int64)
    position: int = attrs.field(validator=int64)
    reason: str = attrs.field(validator=ascii_text)

    def encode(self) -> bytes:
        return _HEADER_LONG_LONG.pack(
            self.client_id, self.correlation_id, self.image_correlation_id, self.position
        ) + encode_string(self.reason.encode("ascii"))

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> RejectImageMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                r.int64(0, "client_id"),
                r.int64(8, "correlation_id"),
                r.int64(16, "image_correlation_id"),
                r.int64(24, "position"),
                r.ascii(32, "reason")[0],
            )


@attrs.frozen
class DestinationByIdMessage:
    TYPE_IDS: ClassVar[tuple[CurrentCommandType, ...]] = (CurrentCommandType.REMOVE_DESTINATION_BY_ID,)

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    resource_registration_id: int = attrs.field(validator=int64)
    destination_registration_id: int = attrs.field(validator=int64)

    def encode(self) -> bytes:
        return _HEADER_LONG_LONG.pack(
            self.client_id, self.correlation_id, self.resource_registration_id, self.destination_registration_id
        )

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> DestinationByIdMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                r.int64(0, "client_id"),
                r.int64(8, "correlation_id"),
                r.int64(16, "resource_registration_id"),
                r.int64(24, "destination_registration_id"),
            )


@attrs.frozen
class NextSessionIdMessage:
    TYPE_IDS: ClassVar[tuple[CurrentCommandType, ...]] = (CurrentCommandType.GET_NEXT_AVAILABLE_SESSION_ID,)

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    stream_id: int = attrs.field(validator=int32)

    def encode(self) -> bytes:
        return _HEADER_INT.pack(self.client_id, self.correlation_id, self.stream_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> NextSessionIdMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "client_id"), r.int64(8, "correlation_id"), r.int32(16, "stream_id"))


CurrentCommand = (
    TerminateDriverMessage | StaticCounterMessage | RejectImageMessage | DestinationByIdMessage | NextSessionIdMessage
)

_DECODERS: dict[int, type[CurrentCommand]] = {
    type_id: codec
    for codec in (
        TerminateDriverMessage,
        StaticCounterMessage,
        RejectImageMessage,
        DestinationByIdMessage,
        NextSessionIdMessage,
    )
    for type_id in codec.TYPE_IDS
}


def decode_current_command(
    msg_type_id: int, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None
) -> tuple[CurrentCommandType, CurrentCommand] | None:
    """Decode a command of today's protocol; None if ``msg_type_id`` is not one."""
    codec = _DECODERS.get(msg_type_id)
    if codec is None:
        return None
    return CurrentCommandType(msg_type_id), codec.decode(buf, offset, length)


@attrs.frozen
class StaticCounterResponse:
    correlation_id: int = attrs.field(validator=int64)
    counter_id: int = attrs.field(validator=int32)

    def encode(self) -> bytes:
        return _LONG_INT.pack(self.correlation_id, self.counter_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> StaticCounterResponse:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "correlation_id"), r.int32(8, "counter_id"))


@attrs.frozen
class NextSessionIdResponse:
    correlation_id: int = attrs.field(validator=int64)
    next_session_id: int = attrs.field(validator=int32)

    def encode(self) -> bytes:
        return _LONG_INT.pack(self.correlation_id, self.next_session_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> NextSessionIdResponse:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "correlation_id"), r.int32(8, "next_session_id"))


@attrs.frozen
class PublicationErrorResponse:
    """A receiver refused a publication (an ERR frame); told to the publication's owner."""

    registration_id: int = attrs.field(validator=int64)
    destination_registration_id: int = attrs.field(validator=int64)
    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    receiver_id: int = attrs.field(validator=int64)
    group_tag: int = attrs.field(validator=int64)
    address_type: int
    source_port: int
    source_address: bytes
    error_code: int = attrs.field(validator=int32)
    error_message: str

    MESSAGE_OFFSET: ClassVar[int] = _PUBLICATION_ERROR.size + 4

    def encode(self) -> bytes:
        return _PUBLICATION_ERROR.pack(
            self.registration_id,
            self.destination_registration_id,
            self.session_id,
            self.stream_id,
            self.receiver_id,
            self.group_tag,
            self.address_type,
            self.source_port,
            self.source_address.ljust(16, b"\0")[:16],
            self.error_code,
        ) + encode_string(self.error_message.encode("utf-8"))

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> PublicationErrorResponse:
        with Reader(cls.__name__, buf, offset, length) as r:
            message, _ = r.utf8(cls.MESSAGE_OFFSET - 4, "error_message")
        (registration, destination, session, stream, receiver, tag, family, port, address, code) = (
            _PUBLICATION_ERROR.unpack(_slice(buf, offset, _PUBLICATION_ERROR.size))
        )
        return cls(registration, destination, session, stream, receiver, tag, family, port, address, code, message)

    @property
    def source(self) -> str:
        """The receiver's address as text (``ip:port``)."""
        if self.address_type == ADDRESS_TYPE_IPV6:
            return f"[{ipaddress.IPv6Address(self.source_address[:16])}]:{self.source_port}"
        return f"{ipaddress.IPv4Address(self.source_address[:4])}:{self.source_port}"


def _slice(buf: Buffer | AtomicBuffer, offset: int, length: int) -> bytes:
    if isinstance(buf, AtomicBuffer):
        return buf.get_bytes(offset, length)
    return bytes(memoryview(buf)[offset : offset + length])
