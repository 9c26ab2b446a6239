"""STATUS MESSAGE (SM) frames: a receiver's consumption position and window.

Theory of operation
-------------------
36 bytes (44 with today's optional group tag), little-endian::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-------------------------------------------------------------+
    |R|                 Frame Length (= 36 or 44)                   |  0
    +-+-------------+-+-+-------------------------------------------+
    |   Version     |S|E|  flags    |          Type (= 0x03)        |  4
    +---------------+-+-+-----------+-------------------------------+
    |                         Session ID                            |  8
    +---------------------------------------------------------------+
    |                         Stream ID                             | 12
    +---------------------------------------------------------------+
    |                   Consumption Term ID                         | 16
    +---------------------------------------------------------------+
    |                  Consumption Term Offset                      | 20
    +---------------------------------------------------------------+
    |                      Receiver Window                          | 24
    +---------------------------------------------------------------+
    |                   Receiver ID (int64, unaligned)              | 28
    |                                                               |
    +---------------------------------------------------------------+
    |            Group Tag (int64, only when length is 44)          | 36
    |                                                               |
    +---------------------------------------------------------------+

Flags: SEND_SETUP 0x80 (the receiver asks for a SETUP; such an SM carries zero
position and window and must not feed flow control); today's Aeron adds
END_OF_STREAM 0x40 (the receiver is leaving). Send 36-byte SMs to a 1.15.1 peer.
A frame_length between 37 and 43 is tolerated as 1.15.1-style application
feedback (ignored); longer than 44 is refused, as today's Aeron does.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.errors import MalformedFrameError
from driver.logbuffer.frame import CURRENT_VERSION, HDR_TYPE_SM
from driver.wire._common import checked_header, frame_view, int32, int64, uint8

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "END_OF_STREAM_FLAG",
    "SEND_SETUP_FLAG",
    "SM",
    "SM_GROUP_TAG_OFFSET",
    "SM_LENGTH",
    "SM_WITH_GROUP_TAG",
    "SM_WITH_GROUP_TAG_LENGTH",
    "StatusMessage",
    "read_sm_group_tag",
    "unpack_sm",
    "write_sm",
    "write_sm_with_group_tag",
]

SM_LENGTH = 36
SM_WITH_GROUP_TAG_LENGTH = 44
SM_GROUP_TAG_OFFSET = 36
SEND_SETUP_FLAG = 0x80
END_OF_STREAM_FLAG = 0x40  # today's Aeron only

SM = struct.Struct("<iBBHiiiiiq")
"""frame_length, version, flags, type, session_id, stream_id, consumption_term_id, consumption_term_offset,
receiver_window, receiver_id."""

SM_WITH_GROUP_TAG = struct.Struct("<iBBHiiiiiqq")

unpack_sm = SM.unpack_from
"""``unpack_sm(buf, offset=0)`` -> the 10 fields of :data:`SM`; unchecked (hot path)."""

_pack = SM.pack_into
_pack_tagged = SM_WITH_GROUP_TAG.pack_into
_unpack_long = struct.Struct("<q").unpack_from


def write_sm(
    buf: Buffer,
    offset: int,
    session_id: int,
    stream_id: int,
    term_id: int,
    term_offset: int,
    window: int,
    receiver_id: int,
    flags: int = 0,
) -> int:
    """Write a 36-byte SM (the only form a 1.15.1 peer knows); returns 36."""
    _pack(
        buf,
        offset,
        SM_LENGTH,
        CURRENT_VERSION,
        flags,
        HDR_TYPE_SM,
        session_id,
        stream_id,
        term_id,
        term_offset,
        window,
        receiver_id,
    )
    return SM_LENGTH


def write_sm_with_group_tag(
    buf: Buffer,
    offset: int,
    session_id: int,
    stream_id: int,
    term_id: int,
    term_offset: int,
    window: int,
    receiver_id: int,
    group_tag: int,
    flags: int = 0,
) -> int:
    """Write a 44-byte SM carrying a group tag (today's Aeron, for tagged flow control); returns 44."""
    _pack_tagged(
        buf,
        offset,
        SM_WITH_GROUP_TAG_LENGTH,
        CURRENT_VERSION,
        flags,
        HDR_TYPE_SM,
        session_id,
        stream_id,
        term_id,
        term_offset,
        window,
        receiver_id,
        group_tag,
    )
    return SM_WITH_GROUP_TAG_LENGTH


def read_sm_group_tag(buf: Buffer, offset: int, frame_length: int) -> int | None:
    """The group tag of an SM whose header said ``frame_length``, or None when it has none."""
    if frame_length == SM_WITH_GROUP_TAG_LENGTH:
        tag: int = _unpack_long(buf, offset + SM_GROUP_TAG_OFFSET)[0]
        return tag
    if frame_length > SM_WITH_GROUP_TAG_LENGTH:
        raise MalformedFrameError(f"SM: frame_length {frame_length} is longer than an SM with a group tag")
    return None


@attrs.frozen
class StatusMessage:
    LENGTH: ClassVar[int] = SM_LENGTH

    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    consumption_term_id: int = attrs.field(validator=int32)
    consumption_term_offset: int = attrs.field(validator=int32)
    receiver_window: int = attrs.field(validator=int32)
    receiver_id: int = attrs.field(validator=int64)
    flags: int = attrs.field(default=0, validator=uint8)
    group_tag: int | None = attrs.field(default=None, validator=attrs.validators.optional(int64))

    @property
    def is_setup_request(self) -> bool:
        return bool(self.flags & SEND_SETUP_FLAG)

    @property
    def is_end_of_stream(self) -> bool:
        return bool(self.flags & END_OF_STREAM_FLAG)

    def encode(self) -> bytes:
        if self.group_tag is None:
            return SM.pack(
                SM_LENGTH,
                CURRENT_VERSION,
                self.flags,
                HDR_TYPE_SM,
                self.session_id,
                self.stream_id,
                self.consumption_term_id,
                self.consumption_term_offset,
                self.receiver_window,
                self.receiver_id,
            )
        return SM_WITH_GROUP_TAG.pack(
            SM_WITH_GROUP_TAG_LENGTH,
            CURRENT_VERSION,
            self.flags,
            HDR_TYPE_SM,
            self.session_id,
            self.stream_id,
            self.consumption_term_id,
            self.consumption_term_offset,
            self.receiver_window,
            self.receiver_id,
            self.group_tag,
        )

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> StatusMessage:
        view = frame_view("SM", buf, offset, length, SM_LENGTH)
        frame_length, flags = checked_header("SM", view, HDR_TYPE_SM, SM_LENGTH)
        group_tag = read_sm_group_tag(view, 0, frame_length)
        _, _, _, _, session_id, stream_id, term_id, term_offset, window, receiver_id = SM.unpack_from(view, 0)
        return cls(session_id, stream_id, term_id, term_offset, window, receiver_id, flags, group_tag)
