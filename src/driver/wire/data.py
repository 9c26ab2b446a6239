"""DATA and PAD frames (and the heartbeat) on the wire.

Theory of operation
-------------------
A DATA frame is the log-buffer frame itself: the sender transmits straight out
of the term, so the wire header is byte for byte the one in
:mod:`driver.logbuffer.frame` (little-endian)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-------------------------------------------------------------+
    |R|                       Frame Length                          |  0
    +-+-------------+-+-+-+-+-+-+-+-+-------------------------------+
    |   Version     |B|E|S|R| flags |          Type (1 / 0)         |  4
    +---------------+-+-+-+-+-+-+-+-+-------------------------------+
    |                         Term Offset                           |  8
    +---------------------------------------------------------------+
    |                         Session ID                            | 12
    +---------------------------------------------------------------+
    |                         Stream ID                             | 16
    +---------------------------------------------------------------+
    |                          Term ID                              | 20
    +---------------------------------------------------------------+
    |                       Reserved Value                          | 24
    |                          (int64)                              |
    +---------------------------------------------------------------+
    |                     Payload (frame_length - 32)              ... 32

Flags: BEGIN 0x80, END 0x40 (0xC0 = unfragmented), EOS 0x20; today's Aeron adds
REVOKED 0x10, never sent to a 1.15.1 peer. A datagram carries one or more whole
frames, each padded to 32 bytes; a PAD frame (type 0) that ends a batch is sent
as its 32-byte header only while its frame_length still covers the padding.

A *heartbeat* is a lone 32-byte DATA header with frame_length 0 at the sender's
position, flags BEGIN|END (|EOS when the publication has ended).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.errors import MalformedFrameError
from driver.logbuffer.frame import (
    BEGIN_FRAG_FLAG,
    CURRENT_VERSION,
    END_FRAG_FLAG,
    EOS_FLAG,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    RESERVED_VALUE_OFFSET,
    SESSION_ID_OFFSET,
    STREAM_ID_OFFSET,
    TERM_ID_OFFSET,
    TERM_OFFSET_OFFSET,
    UNFRAGMENTED,
)
from driver.wire._common import frame_view, int32, int64, uint8

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "BEGIN_FRAG_FLAG",
    "DATA_HEADER",
    "DATA_HEADER_LENGTH",
    "DATA_ROUTING",
    "END_FRAG_FLAG",
    "EOS_FLAG",
    "HEARTBEAT_EOS_FLAGS",
    "HEARTBEAT_FLAGS",
    "RESERVED_VALUE_OFFSET",
    "REVOKED_FLAG",
    "SESSION_ID_OFFSET",
    "STREAM_ID_OFFSET",
    "TERM_ID_OFFSET",
    "TERM_OFFSET_OFFSET",
    "UNFRAGMENTED",
    "DataFrame",
    "DataHeader",
    "is_heartbeat",
    "unpack_data_header",
    "unpack_data_routing",
    "write_data_header",
    "write_heartbeat",
]

DATA_HEADER_LENGTH = HEADER_LENGTH
REVOKED_FLAG = 0x10  # today's Aeron only
HEARTBEAT_FLAGS = UNFRAGMENTED
HEARTBEAT_EOS_FLAGS = UNFRAGMENTED | EOS_FLAG

DATA_HEADER = struct.Struct("<iBBHiiiiq")
"""frame_length, version, flags, type, term_offset, session_id, stream_id, term_id, reserved_value."""

DATA_ROUTING = struct.Struct("<iiii")
"""term_offset, session_id, stream_id, term_id: the 16 bytes at offset 8 that route a datagram to an image."""

unpack_data_header = DATA_HEADER.unpack_from
"""``unpack_data_header(buf, offset=0)`` -> the 9 header fields; unchecked (hot path)."""

_pack_header = DATA_HEADER.pack_into
_unpack_routing = DATA_ROUTING.unpack_from
_unpack_length = struct.Struct("<i").unpack_from


def unpack_data_routing(buf: Buffer, offset: int = 0) -> tuple[int, int, int, int]:
    """(term_offset, session_id, stream_id, term_id) of the frame at ``offset``; unchecked (hot path)."""
    fields: tuple[int, int, int, int] = _unpack_routing(buf, offset + TERM_OFFSET_OFFSET)
    return fields


def write_data_header(
    buf: Buffer,
    offset: int,
    frame_length: int,
    flags: int,
    frame_type: int,
    term_offset: int,
    session_id: int,
    stream_id: int,
    term_id: int,
    reserved_value: int = 0,
) -> int:
    """Write a 32-byte DATA/PAD header; returns 32."""
    _pack_header(
        buf,
        offset,
        frame_length,
        CURRENT_VERSION,
        flags,
        frame_type,
        term_offset,
        session_id,
        stream_id,
        term_id,
        reserved_value,
    )
    return DATA_HEADER_LENGTH


def write_heartbeat(
    buf: Buffer,
    offset: int,
    session_id: int,
    stream_id: int,
    term_id: int,
    term_offset: int,
    flags: int = HEARTBEAT_FLAGS,
) -> int:
    """Write a heartbeat (32-byte DATA header, frame_length 0) at the sender position; returns 32.

    Pass ``flags=HEARTBEAT_EOS_FLAGS`` once the publication has reached end of stream.
    """
    _pack_header(buf, offset, 0, CURRENT_VERSION, flags, HDR_TYPE_DATA, term_offset, session_id, stream_id, term_id, 0)
    return DATA_HEADER_LENGTH


def is_heartbeat(buf: Buffer, length: int) -> bool:
    """A datagram is a heartbeat when it is exactly one header with frame_length 0 (Aeron's test)."""
    return length == DATA_HEADER_LENGTH and _unpack_length(buf, 0)[0] == 0


def _frame_type(instance: object, attribute: object, value: int) -> None:
    if value not in (HDR_TYPE_DATA, HDR_TYPE_PAD):
        raise ValueError(f"DataHeader.frame_type={value!r} is not DATA (1) or PAD (0)")


@attrs.frozen
class DataHeader:
    """A DATA/PAD header as on the wire (tools and tests; the data path uses the struct)."""

    LENGTH: ClassVar[int] = DATA_HEADER_LENGTH

    frame_length: int = attrs.field(validator=int32)
    term_offset: int = attrs.field(validator=int32)
    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    term_id: int = attrs.field(validator=int32)
    flags: int = attrs.field(default=UNFRAGMENTED, validator=uint8)
    frame_type: int = attrs.field(default=HDR_TYPE_DATA, validator=_frame_type)
    reserved_value: int = attrs.field(default=0, validator=int64)

    @classmethod
    def heartbeat(
        cls, session_id: int, stream_id: int, term_id: int, term_offset: int, eos: bool = False
    ) -> DataHeader:
        flags = HEARTBEAT_EOS_FLAGS if eos else HEARTBEAT_FLAGS
        return cls(0, term_offset, session_id, stream_id, term_id, flags)

    @property
    def is_heartbeat(self) -> bool:
        return self.frame_length == 0 and self.frame_type == HDR_TYPE_DATA

    @property
    def is_padding(self) -> bool:
        return self.frame_type == HDR_TYPE_PAD

    @property
    def is_end_of_stream(self) -> bool:
        return bool(self.flags & EOS_FLAG)

    def encode(self) -> bytes:
        return DATA_HEADER.pack(
            self.frame_length,
            CURRENT_VERSION,
            self.flags,
            self.frame_type,
            self.term_offset,
            self.session_id,
            self.stream_id,
            self.term_id,
            self.reserved_value,
        )

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> DataHeader:
        """Read a header; its frame_length is not checked against the bytes given (see :class:`DataFrame`)."""
        view = frame_view("DATA header", buf, offset, length, DATA_HEADER_LENGTH)
        frame_length, version, flags, frame_type, term_offset, session_id, stream_id, term_id, reserved = (
            DATA_HEADER.unpack_from(view, 0)
        )
        if version != CURRENT_VERSION:
            raise MalformedFrameError(f"DATA header: version {version} is not {CURRENT_VERSION}")
        if frame_type not in (HDR_TYPE_DATA, HDR_TYPE_PAD):
            raise MalformedFrameError(f"DATA header: type 0x{frame_type:04x} is not DATA or PAD")
        if frame_length < 0 or 0 < frame_length < DATA_HEADER_LENGTH:
            raise MalformedFrameError(f"DATA header: frame_length {frame_length} is neither 0 nor >= 32")
        return cls(frame_length, term_offset, session_id, stream_id, term_id, flags, frame_type, reserved)


@attrs.frozen
class DataFrame:
    """A whole DATA frame (header + payload), a PAD frame (header only) or a heartbeat."""

    header: DataHeader
    payload: bytes = attrs.field(default=b"", converter=bytes)

    @classmethod
    def data(
        cls,
        payload: bytes,
        term_offset: int,
        session_id: int,
        stream_id: int,
        term_id: int,
        flags: int = UNFRAGMENTED,
        reserved_value: int = 0,
    ) -> DataFrame:
        header = DataHeader(
            DATA_HEADER_LENGTH + len(payload),
            term_offset,
            session_id,
            stream_id,
            term_id,
            flags,
            HDR_TYPE_DATA,
            reserved_value,
        )
        return cls(header, payload)

    def __attrs_post_init__(self) -> None:
        header = self.header
        if header.frame_type == HDR_TYPE_DATA and header.frame_length != 0:
            if header.frame_length != DATA_HEADER_LENGTH + len(self.payload):
                raise ValueError(
                    f"DataFrame: frame_length {header.frame_length} != 32 + payload of {len(self.payload)} bytes"
                )
        elif self.payload:
            raise ValueError("DataFrame: a PAD frame or heartbeat carries no payload")

    def encode(self, aligned: bool = False) -> bytes:
        """Header and payload; ``aligned`` zero-pads to 32 bytes as frames are when batched in a datagram."""
        out = self.header.encode() + self.payload
        if aligned and len(out) % 32:
            out += bytes(32 - len(out) % 32)
        return out

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> DataFrame:
        view = frame_view("DATA frame", buf, offset, length, DATA_HEADER_LENGTH)
        header = DataHeader.decode(view)
        if header.frame_type == HDR_TYPE_PAD or header.frame_length == 0:
            return cls(header)
        if header.frame_length > len(view):
            raise MalformedFrameError(
                f"DATA frame: frame_length {header.frame_length} exceeds the {len(view)} bytes given"
            )
        return cls(header, bytes(view[DATA_HEADER_LENGTH : header.frame_length]))
