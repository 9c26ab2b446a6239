"""Client -> driver commands (bodies of to-driver ring buffer records), Aeron 1.15.1 layouts.

Theory of operation: every command starts with the 16-byte correlated header,
``client_id`` (int64 @0, the first id the client drew from the ring's
correlation counter) and ``correlation_id`` (int64 @8, the id the driver's
answer will carry). The rest, by class (offsets from the start of the body)::

    PublicationMessage    ADD_PUBLICATION, ADD_EXCLUSIVE_PUBLICATION
        16 stream_id int32, 20 channel (int32 length @20, ASCII @24)
    RemoveMessage         REMOVE_PUBLICATION, REMOVE_SUBSCRIPTION, REMOVE_COUNTER
        16 registration_id int64                                 (24 bytes)
    SubscriptionMessage   ADD_SUBSCRIPTION
        16 registration_correlation_id int64 (clients send -1), 24 stream_id int32,
        28 channel (length @28, ASCII @32)
    CorrelatedMessage     CLIENT_KEEPALIVE (correlation 0), CLIENT_CLOSE (correlation -1)
        header only                                              (16 bytes)
    DestinationMessage    ADD/REMOVE_DESTINATION, ADD/REMOVE_RCV_DESTINATION
        16 registration_correlation_id int64, 24 channel (length @24, ASCII @28)
    CounterMessage        ADD_COUNTER
        16 type_id int32, 20 key length int32, 24 key bytes (zero padded to 4),
        then label length int32 and ASCII label

Decoding accepts trailing bytes after the last field (Java reads by offset and
ignores them; today's REMOVE_PUBLICATION appends a flags field), but never a
field or string that runs past the message length.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.command._codec import (
    Reader,
    ascii_text,
    encode_string,
    int32,
    int64,
    string_length,
)
from driver.command.types import CommandType, CurrentCommandType
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import MalformedCommandError

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "CORRELATED_HEADER_LENGTH",
    "Command",
    "CorrelatedMessage",
    "CounterMessage",
    "DestinationMessage",
    "PublicationMessage",
    "RemoveMessage",
    "SubscriptionMessage",
    "decode_command",
]

CORRELATED_HEADER_LENGTH = 16
CLIENT_ID_OFFSET = 0
CORRELATION_ID_OFFSET = 8

_HEADER = struct.Struct("<qq")
_HEADER_INT = struct.Struct("<qqi")
_HEADER_LONG = struct.Struct("<qqq")
_HEADER_LONG_INT = struct.Struct("<qqqi")


@attrs.frozen
class CorrelatedMessage:
    """Header-only command: CLIENT_KEEPALIVE and CLIENT_CLOSE."""

    TYPE_IDS: ClassVar[tuple[CommandType, ...]] = (CommandType.CLIENT_KEEPALIVE, CommandType.CLIENT_CLOSE)
    LENGTH: ClassVar[int] = CORRELATED_HEADER_LENGTH

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)

    def encode(self) -> bytes:
        return _HEADER.pack(self.client_id, self.correlation_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> CorrelatedMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "client_id"), r.int64(8, "correlation_id"))


@attrs.frozen
class PublicationMessage:
    """ADD_PUBLICATION and ADD_EXCLUSIVE_PUBLICATION."""

    TYPE_IDS: ClassVar[tuple[CommandType, ...]] = (
        CommandType.ADD_PUBLICATION,
        CommandType.ADD_EXCLUSIVE_PUBLICATION,
    )
    STREAM_ID_OFFSET: ClassVar[int] = 16
    CHANNEL_OFFSET: ClassVar[int] = 20

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    stream_id: int = attrs.field(validator=int32)
    channel: str = attrs.field(validator=ascii_text)

    def encoded_length(self) -> int:
        return self.CHANNEL_OFFSET + string_length(len(self.channel))

    def encode(self) -> bytes:
        return _HEADER_INT.pack(self.client_id, self.correlation_id, self.stream_id) + encode_string(
            self.channel.encode("ascii")
        )

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> PublicationMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                r.int64(0, "client_id"),
                r.int64(8, "correlation_id"),
                r.int32(16, "stream_id"),
                r.ascii(20, "channel")[0],
            )


@attrs.frozen
class RemoveMessage:
    """REMOVE_PUBLICATION, REMOVE_SUBSCRIPTION and REMOVE_COUNTER."""

    TYPE_IDS: ClassVar[tuple[CommandType, ...]] = (
        CommandType.REMOVE_PUBLICATION,
        CommandType.REMOVE_SUBSCRIPTION,
        CommandType.REMOVE_COUNTER,
    )
    REGISTRATION_ID_OFFSET: ClassVar[int] = 16
    LENGTH: ClassVar[int] = 24

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    registration_id: int = attrs.field(validator=int64)

    def encode(self) -> bytes:
        return _HEADER_LONG.pack(self.client_id, self.correlation_id, self.registration_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> RemoveMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "client_id"), r.int64(8, "correlation_id"), r.int64(16, "registration_id"))


@attrs.frozen
class SubscriptionMessage:
    """ADD_SUBSCRIPTION."""

    TYPE_IDS: ClassVar[tuple[CommandType, ...]] = (CommandType.ADD_SUBSCRIPTION,)
    REGISTRATION_CORRELATION_ID_OFFSET: ClassVar[int] = 16
    STREAM_ID_OFFSET: ClassVar[int] = 24
    CHANNEL_OFFSET: ClassVar[int] = 28

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    stream_id: int = attrs.field(validator=int32)
    channel: str = attrs.field(validator=ascii_text)
    registration_correlation_id: int = attrs.field(default=-1, validator=int64)

    def encoded_length(self) -> int:
        return self.CHANNEL_OFFSET + string_length(len(self.channel))

    def encode(self) -> bytes:
        return _HEADER_LONG_INT.pack(
            self.client_id, self.correlation_id, self.registration_correlation_id, self.stream_id
        ) + encode_string(self.channel.encode("ascii"))

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> SubscriptionMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                client_id=r.int64(0, "client_id"),
                correlation_id=r.int64(8, "correlation_id"),
                registration_correlation_id=r.int64(16, "registration_correlation_id"),
                stream_id=r.int32(24, "stream_id"),
                channel=r.ascii(28, "channel")[0],
            )


@attrs.frozen
class DestinationMessage:
    """ADD/REMOVE_DESTINATION (publication side) and ADD/REMOVE_RCV_DESTINATION (subscription side)."""

    TYPE_IDS: ClassVar[tuple[CommandType, ...]] = (
        CommandType.ADD_DESTINATION,
        CommandType.REMOVE_DESTINATION,
        CommandType.ADD_RCV_DESTINATION,
        CommandType.REMOVE_RCV_DESTINATION,
    )
    REGISTRATION_CORRELATION_ID_OFFSET: ClassVar[int] = 16
    CHANNEL_OFFSET: ClassVar[int] = 24

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    registration_correlation_id: int = attrs.field(validator=int64)
    channel: str = attrs.field(validator=ascii_text)

    def encoded_length(self) -> int:
        return self.CHANNEL_OFFSET + string_length(len(self.channel))

    def encode(self) -> bytes:
        return _HEADER_LONG.pack(self.client_id, self.correlation_id, self.registration_correlation_id) + encode_string(
            self.channel.encode("ascii")
        )

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> DestinationMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                r.int64(0, "client_id"),
                r.int64(8, "correlation_id"),
                r.int64(16, "registration_correlation_id"),
                r.ascii(24, "channel")[0],
            )


def _bytes(instance: object, attribute: attrs.Attribute[bytes], value: bytes) -> None:
    if not isinstance(value, bytes):
        raise MalformedCommandError(f"{type(instance).__name__}.{attribute.name}={value!r} is not bytes")


@attrs.frozen
class CounterMessage:
    """ADD_COUNTER: a client-owned counter with an opaque key and an ASCII label."""

    TYPE_IDS: ClassVar[tuple[CommandType, ...]] = (CommandType.ADD_COUNTER,)
    TYPE_ID_OFFSET: ClassVar[int] = 16
    KEY_LENGTH_OFFSET: ClassVar[int] = 20
    KEY_OFFSET: ClassVar[int] = 24

    client_id: int = attrs.field(validator=int64)
    correlation_id: int = attrs.field(validator=int64)
    type_id: int = attrs.field(validator=int32)
    key: bytes = attrs.field(validator=_bytes)
    label: str = attrs.field(validator=ascii_text)

    @property
    def label_length_offset(self) -> int:
        return self.KEY_LENGTH_OFFSET + string_length(len(self.key), pad=True)

    def encoded_length(self) -> int:
        return self.label_length_offset + string_length(len(self.label))

    def encode(self) -> bytes:
        return (
            _HEADER_INT.pack(self.client_id, self.correlation_id, self.type_id)
            + encode_string(self.key, pad=True)
            + encode_string(self.label.encode("ascii"))
        )

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> CounterMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            client_id = r.int64(0, "client_id")
            correlation_id = r.int64(8, "correlation_id")
            type_id = r.int32(16, "type_id")
            key, key_end = r.raw(20, "key")
            label, _ = r.ascii((key_end + 3) & ~3, "label")
            return cls(client_id, correlation_id, type_id, key, label)


Command = (
    CorrelatedMessage | PublicationMessage | RemoveMessage | SubscriptionMessage | DestinationMessage | CounterMessage
)

_DECODERS: dict[int, type[Command]] = {
    type_id: codec
    for codec in (
        CorrelatedMessage,
        PublicationMessage,
        RemoveMessage,
        SubscriptionMessage,
        DestinationMessage,
        CounterMessage,
    )
    for type_id in codec.TYPE_IDS
}


def decode_command(
    msg_type_id: int, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None
) -> tuple[CommandType, Command]:
    """Decode one to-driver record body by its type id."""
    codec = _DECODERS.get(msg_type_id)
    if codec is None:
        try:
            later = CurrentCommandType(msg_type_id)
        except ValueError:
            raise MalformedCommandError(f"unknown command type id 0x{msg_type_id:x}") from None
        raise MalformedCommandError(f"command {later.name} (0x{msg_type_id:x}) is not part of the 1.15.1 protocol")
    return CommandType(msg_type_id), codec.decode(buf, offset, length)
