"""ERR frames (today's Aeron layout): a receiver telling a sender it rejected the stream.

Theory of operation
-------------------
40 bytes plus up to 1023 ASCII bytes of message, little-endian::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-------------------------------------------------------------+
    |R|              Frame Length (= 40 + message)                  |  0
    +-+-------------+-------+-+-----+-------------------------------+
    |   Version     | flags |G|     |          Type (= 0x04)        |  4
    +---------------+-------+-+-----+-------------------------------+
    |                         Session ID                            |  8
    +---------------------------------------------------------------+
    |                         Stream ID                             | 12
    +---------------------------------------------------------------+
    |                     Receiver ID (int64)                       | 16
    |                                                               |
    +---------------------------------------------------------------+
    |           Group Tag (int64, meaningful when G is set)         | 24
    |                                                               |
    +---------------------------------------------------------------+
    |                         Error Code                            | 32
    +---------------------------------------------------------------+
    |                     Error Message Length                      | 36
    +---------------------------------------------------------------+
    |                  Error Message (ASCII)                       ... 40

G = HAS_GROUP_TAG 0x08. Aeron 1.15.1 defines the type code but never sends or
reads ERR, so never send one to a 1.15.1 peer; today's Aeron sends it instead of
an SM when it rejects an image.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.errors import MalformedFrameError
from driver.logbuffer.frame import CURRENT_VERSION, HDR_TYPE_ERR
from driver.wire._common import checked_header, frame_view, int32, int64, uint8

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "ERR",
    "ERR_HEADER_LENGTH",
    "ERR_MAX_FRAME_LENGTH",
    "ERR_MAX_MESSAGE_LENGTH",
    "HAS_GROUP_TAG_FLAG",
    "ErrorFrame",
    "unpack_error",
    "write_error",
]

ERR_HEADER_LENGTH = 40
ERR_MAX_MESSAGE_LENGTH = 1023
ERR_MAX_FRAME_LENGTH = ERR_HEADER_LENGTH + ERR_MAX_MESSAGE_LENGTH
HAS_GROUP_TAG_FLAG = 0x08

ERR = struct.Struct("<iBBHiiqqii")
"""frame_length, version, flags, type, session_id, stream_id, receiver_id, group_tag, error_code, message_length."""

unpack_error = ERR.unpack_from
"""``unpack_error(buf, offset=0)`` -> the 10 fields of :data:`ERR`; unchecked."""


def write_error(
    buf: Buffer,
    offset: int,
    session_id: int,
    stream_id: int,
    receiver_id: int,
    group_tag: int | None,
    error_code: int,
    message: bytes,
) -> int:
    """Write an ERR frame, truncating ``message`` (ASCII bytes) to 1023; returns the frame length."""
    text = message[:ERR_MAX_MESSAGE_LENGTH]
    frame_length = ERR_HEADER_LENGTH + len(text)
    flags = 0 if group_tag is None else HAS_GROUP_TAG_FLAG
    ERR.pack_into(
        buf,
        offset,
        frame_length,
        CURRENT_VERSION,
        flags,
        HDR_TYPE_ERR,
        session_id,
        stream_id,
        receiver_id,
        0 if group_tag is None else group_tag,
        error_code,
        len(text),
    )
    memoryview(buf).cast("B")[offset + ERR_HEADER_LENGTH : offset + frame_length] = text
    return frame_length


def _ascii_message(instance: object, attribute: object, value: str) -> None:
    if not isinstance(value, str) or not value.isascii():
        raise ValueError(f"ErrorFrame.error_message={value!r} is not ASCII text")
    if len(value) > ERR_MAX_MESSAGE_LENGTH:
        raise ValueError(f"ErrorFrame.error_message is {len(value)} characters, more than {ERR_MAX_MESSAGE_LENGTH}")


@attrs.frozen
class ErrorFrame:
    """An ERR frame; HAS_GROUP_TAG is derived from ``group_tag`` and never kept in ``flags``."""

    LENGTH: ClassVar[int] = ERR_HEADER_LENGTH

    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    receiver_id: int = attrs.field(validator=int64)
    error_code: int = attrs.field(validator=int32)
    error_message: str = attrs.field(default="", validator=_ascii_message)
    group_tag: int | None = attrs.field(default=None, validator=attrs.validators.optional(int64))
    flags: int = attrs.field(default=0, validator=uint8)

    def encode(self) -> bytes:
        text = self.error_message.encode("ascii")
        flags = self.flags | HAS_GROUP_TAG_FLAG if self.group_tag is not None else self.flags & ~HAS_GROUP_TAG_FLAG
        return (
            ERR.pack(
                ERR_HEADER_LENGTH + len(text),
                CURRENT_VERSION,
                flags,
                HDR_TYPE_ERR,
                self.session_id,
                self.stream_id,
                self.receiver_id,
                0 if self.group_tag is None else self.group_tag,
                self.error_code,
                len(text),
            )
            + text
        )

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> ErrorFrame:
        view = frame_view("ERR", buf, offset, length, ERR_HEADER_LENGTH)
        frame_length, flags = checked_header("ERR", view, HDR_TYPE_ERR, ERR_HEADER_LENGTH)
        _, _, _, _, session_id, stream_id, receiver_id, group_tag, error_code, text_length = ERR.unpack_from(view, 0)
        if not 0 <= text_length <= ERR_MAX_MESSAGE_LENGTH or ERR_HEADER_LENGTH + text_length > frame_length:
            raise MalformedFrameError(
                f"ERR: message length {text_length} does not fit a frame of {frame_length} bytes (max 1023)"
            )
        raw = bytes(view[ERR_HEADER_LENGTH : ERR_HEADER_LENGTH + text_length])
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError as exc:
            raise MalformedFrameError(f"ERR: message byte {exc.start} is not ASCII") from None
        return cls(
            session_id,
            stream_id,
            receiver_id,
            error_code,
            text,
            group_tag if flags & HAS_GROUP_TAG_FLAG else None,
            flags & ~HAS_GROUP_TAG_FLAG,
        )
