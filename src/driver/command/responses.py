"""Driver -> client responses (bodies of to-clients broadcast records), Aeron 1.15.1 layouts.

Theory of operation: responses have no correlated header; each starts with the
id it answers or announces. Offsets from the start of the body::

    ErrorResponse        ON_ERROR
        0 offending_correlation_id int64, 8 error_code int32, 12 error_message (UTF-8)
    ImageReady           ON_AVAILABLE_IMAGE
        0 correlation_id int64 (the image's id), 8 session_id, 12 stream_id,
        16 subscription_registration_id int64, 24 subscriber_position_id int32,
        28 log_file_name (ASCII, zero padded to 4), then source_identity (ASCII)
    PublicationReady     ON_PUBLICATION_READY, ON_EXCLUSIVE_PUBLICATION_READY
        0 correlation_id int64, 8 registration_id int64, 16 session_id, 20 stream_id,
        24 publication_limit_counter_id, 28 channel_status_indicator_id, 32 log_file_name
    OperationSucceeded   ON_OPERATION_SUCCESS        0 correlation_id int64        (8 bytes)
    ImageMessage         ON_UNAVAILABLE_IMAGE
        0 correlation_id int64, 8 subscription_registration_id int64, 16 stream_id,
        20 channel (ASCII)
    SubscriptionReady    ON_SUBSCRIPTION_READY       0 correlation_id, 8 channel_status_indicator_id (12)
    CounterUpdate        ON_COUNTER_READY, ON_UNAVAILABLE_COUNTER
        0 correlation_id int64, 8 counter_id int32                                 (12 bytes)
    ClientTimeout        ON_CLIENT_TIMEOUT           0 client_id int64             (8 bytes)

Strings are an int32 byte count and the bytes. As with commands, trailing bytes
are ignored and anything running past the record is a MalformedCommandError.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.command._codec import Reader, ascii_text, encode_string, int32, int64, string_length
from driver.command.types import CurrentCommandType, ResponseType
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import ErrorCode, MalformedCommandError

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "ClientTimeout",
    "CounterUpdate",
    "ErrorResponse",
    "ImageMessage",
    "ImageReady",
    "OperationSucceeded",
    "PublicationReady",
    "Response",
    "SubscriptionReady",
    "decode_response",
]

_LONG = struct.Struct("<q")
_LONG_INT = struct.Struct("<qi")
_LONG_LONG_INT = struct.Struct("<qqi")
_IMAGE_READY = struct.Struct("<qiiqi")
_PUBLICATION_READY = struct.Struct("<qqiiii")


def _text(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str):
        raise MalformedCommandError(f"{type(instance).__name__}.{attribute.name}={value!r} is not a str")


@attrs.frozen
class ErrorResponse:
    """ON_ERROR: the driver refused the command with ``offending_correlation_id``."""

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (ResponseType.ON_ERROR,)
    ERROR_CODE_OFFSET: ClassVar[int] = 8
    ERROR_MESSAGE_OFFSET: ClassVar[int] = 12

    offending_correlation_id: int = attrs.field(validator=int64)
    error_code: int = attrs.field(validator=int32)
    error_message: str = attrs.field(validator=_text)

    @property
    def code(self) -> ErrorCode | None:
        """The 1.15.1 error code, or None for a code this generation does not know."""
        try:
            return ErrorCode(self.error_code)
        except ValueError:
            return None

    def encode(self) -> bytes:
        return _LONG_INT.pack(self.offending_correlation_id, self.error_code) + encode_string(
            self.error_message.encode("utf-8", "replace")
        )

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> ErrorResponse:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                r.int64(0, "offending_correlation_id"),
                r.int32(8, "error_code"),
                r.utf8(12, "error_message")[0],
            )


@attrs.frozen
class ImageReady:
    """ON_AVAILABLE_IMAGE: an image joined a subscription; map ``log_file_name`` to read it."""

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (ResponseType.ON_AVAILABLE_IMAGE,)
    SESSION_ID_OFFSET: ClassVar[int] = 8
    STREAM_ID_OFFSET: ClassVar[int] = 12
    SUBSCRIPTION_REGISTRATION_ID_OFFSET: ClassVar[int] = 16
    SUBSCRIBER_POSITION_ID_OFFSET: ClassVar[int] = 24
    LOG_FILE_NAME_OFFSET: ClassVar[int] = 28

    correlation_id: int = attrs.field(validator=int64)
    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    subscription_registration_id: int = attrs.field(validator=int64)
    subscriber_position_id: int = attrs.field(validator=int32)
    log_file_name: str = attrs.field(validator=ascii_text)
    source_identity: str = attrs.field(validator=ascii_text)

    @property
    def source_identity_offset(self) -> int:
        return self.LOG_FILE_NAME_OFFSET + string_length(len(self.log_file_name), pad=True)

    def encoded_length(self) -> int:
        return self.source_identity_offset + string_length(len(self.source_identity))

    def encode(self) -> bytes:
        return (
            _IMAGE_READY.pack(
                self.correlation_id,
                self.session_id,
                self.stream_id,
                self.subscription_registration_id,
                self.subscriber_position_id,
            )
            + encode_string(self.log_file_name.encode("ascii"), pad=True)
            + encode_string(self.source_identity.encode("ascii"))
        )

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> ImageReady:
        with Reader(cls.__name__, buf, offset, length) as r:
            correlation_id = r.int64(0, "correlation_id")
            session_id = r.int32(8, "session_id")
            stream_id = r.int32(12, "stream_id")
            subscription_registration_id = r.int64(16, "subscription_registration_id")
            subscriber_position_id = r.int32(24, "subscriber_position_id")
            log_file_name, end = r.ascii(28, "log_file_name")
            source_identity, _ = r.ascii((end + 3) & ~3, "source_identity")
            return cls(
                correlation_id,
                session_id,
                stream_id,
                subscription_registration_id,
                subscriber_position_id,
                log_file_name,
                source_identity,
            )


@attrs.frozen
class PublicationReady:
    """ON_PUBLICATION_READY / ON_EXCLUSIVE_PUBLICATION_READY.

    ``registration_id`` is the id of the publication the driver shares, which
    differs from ``correlation_id`` when an existing concurrent publication is reused.
    """

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (
        ResponseType.ON_PUBLICATION_READY,
        ResponseType.ON_EXCLUSIVE_PUBLICATION_READY,
    )
    REGISTRATION_ID_OFFSET: ClassVar[int] = 8
    SESSION_ID_OFFSET: ClassVar[int] = 16
    STREAM_ID_OFFSET: ClassVar[int] = 20
    PUBLICATION_LIMIT_COUNTER_ID_OFFSET: ClassVar[int] = 24
    CHANNEL_STATUS_INDICATOR_ID_OFFSET: ClassVar[int] = 28
    LOG_FILE_NAME_OFFSET: ClassVar[int] = 32

    correlation_id: int = attrs.field(validator=int64)
    registration_id: int = attrs.field(validator=int64)
    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    publication_limit_counter_id: int = attrs.field(validator=int32)
    channel_status_indicator_id: int = attrs.field(validator=int32)
    log_file_name: str = attrs.field(validator=ascii_text)

    def encoded_length(self) -> int:
        return self.LOG_FILE_NAME_OFFSET + string_length(len(self.log_file_name))

    def encode(self) -> bytes:
        return _PUBLICATION_READY.pack(
            self.correlation_id,
            self.registration_id,
            self.session_id,
            self.stream_id,
            self.publication_limit_counter_id,
            self.channel_status_indicator_id,
        ) + encode_string(self.log_file_name.encode("ascii"))

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> PublicationReady:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                r.int64(0, "correlation_id"),
                r.int64(8, "registration_id"),
                r.int32(16, "session_id"),
                r.int32(20, "stream_id"),
                r.int32(24, "publication_limit_counter_id"),
                r.int32(28, "channel_status_indicator_id"),
                r.ascii(32, "log_file_name")[0],
            )


@attrs.frozen
class OperationSucceeded:
    """ON_OPERATION_SUCCESS."""

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (ResponseType.ON_OPERATION_SUCCESS,)
    LENGTH: ClassVar[int] = 8

    correlation_id: int = attrs.field(validator=int64)

    def encode(self) -> bytes:
        return _LONG.pack(self.correlation_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> OperationSucceeded:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "correlation_id"))


@attrs.frozen
class ImageMessage:
    """ON_UNAVAILABLE_IMAGE: the image ``correlation_id`` left subscription ``subscription_registration_id``."""

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (ResponseType.ON_UNAVAILABLE_IMAGE,)
    SUBSCRIPTION_REGISTRATION_ID_OFFSET: ClassVar[int] = 8
    STREAM_ID_OFFSET: ClassVar[int] = 16
    CHANNEL_OFFSET: ClassVar[int] = 20

    correlation_id: int = attrs.field(validator=int64)
    subscription_registration_id: int = attrs.field(validator=int64)
    stream_id: int = attrs.field(validator=int32)
    channel: str = attrs.field(validator=ascii_text)

    def encoded_length(self) -> int:
        return self.CHANNEL_OFFSET + string_length(len(self.channel))

    def encode(self) -> bytes:
        return _LONG_LONG_INT.pack(
            self.correlation_id, self.subscription_registration_id, self.stream_id
        ) + encode_string(self.channel.encode("ascii"))

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> ImageMessage:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(
                r.int64(0, "correlation_id"),
                r.int64(8, "subscription_registration_id"),
                r.int32(16, "stream_id"),
                r.ascii(20, "channel")[0],
            )


@attrs.frozen
class SubscriptionReady:
    """ON_SUBSCRIPTION_READY (channel status indicator -1 for IPC and spies)."""

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (ResponseType.ON_SUBSCRIPTION_READY,)
    CHANNEL_STATUS_INDICATOR_ID_OFFSET: ClassVar[int] = 8
    LENGTH: ClassVar[int] = 12

    correlation_id: int = attrs.field(validator=int64)
    channel_status_indicator_id: int = attrs.field(validator=int32)

    def encode(self) -> bytes:
        return _LONG_INT.pack(self.correlation_id, self.channel_status_indicator_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> SubscriptionReady:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "correlation_id"), r.int32(8, "channel_status_indicator_id"))


@attrs.frozen
class CounterUpdate:
    """ON_COUNTER_READY (correlation id of ADD_COUNTER) and ON_UNAVAILABLE_COUNTER (registration id)."""

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (
        ResponseType.ON_COUNTER_READY,
        ResponseType.ON_UNAVAILABLE_COUNTER,
    )
    COUNTER_ID_OFFSET: ClassVar[int] = 8
    LENGTH: ClassVar[int] = 12

    correlation_id: int = attrs.field(validator=int64)
    counter_id: int = attrs.field(validator=int32)

    def encode(self) -> bytes:
        return _LONG_INT.pack(self.correlation_id, self.counter_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> CounterUpdate:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "correlation_id"), r.int32(8, "counter_id"))


@attrs.frozen
class ClientTimeout:
    """ON_CLIENT_TIMEOUT: the driver dropped ``client_id`` for missing keepalives."""

    TYPE_IDS: ClassVar[tuple[ResponseType, ...]] = (ResponseType.ON_CLIENT_TIMEOUT,)
    LENGTH: ClassVar[int] = 8

    client_id: int = attrs.field(validator=int64)

    def encode(self) -> bytes:
        return _LONG.pack(self.client_id)

    @classmethod
    def decode(cls, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None) -> ClientTimeout:
        with Reader(cls.__name__, buf, offset, length) as r:
            return cls(r.int64(0, "client_id"))


Response = (
    ErrorResponse
    | ImageReady
    | PublicationReady
    | OperationSucceeded
    | ImageMessage
    | SubscriptionReady
    | CounterUpdate
    | ClientTimeout
)

_DECODERS: dict[int, type[Response]] = {
    type_id: codec
    for codec in (
        ErrorResponse,
        ImageReady,
        PublicationReady,
        OperationSucceeded,
        ImageMessage,
        SubscriptionReady,
        CounterUpdate,
        ClientTimeout,
    )
    for type_id in codec.TYPE_IDS
}


def decode_response(
    msg_type_id: int, buf: Buffer | AtomicBuffer, offset: int = 0, length: int | None = None
) -> tuple[ResponseType, Response]:
    """Decode one to-clients record body by its type id."""
    codec = _DECODERS.get(msg_type_id)
    if codec is None:
        try:
            later = CurrentCommandType(msg_type_id)
        except ValueError:
            raise MalformedCommandError(f"unknown response type id 0x{msg_type_id:x}") from None
        raise MalformedCommandError(f"response {later.name} (0x{msg_type_id:x}) is not part of the 1.15.1 protocol")
    return ResponseType(msg_type_id), codec.decode(buf, offset, length)
