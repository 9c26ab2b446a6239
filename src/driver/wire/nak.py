"""NAK frames: a receiver asking the sender to retransmit a gap.

Theory of operation
-------------------
28 bytes, little-endian::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-------------------------------------------------------------+
    |R|                 Frame Length (= 28)                         |  0
    +-+-------------+---------------+-------------------------------+
    |   Version     |   Flags (0)   |          Type (= 0x02)        |  4
    +---------------+---------------+-------------------------------+
    |                         Session ID                            |  8
    +---------------------------------------------------------------+
    |                         Stream ID                             | 12
    +---------------------------------------------------------------+
    |                          Term ID                              | 16
    +---------------------------------------------------------------+
    |                   Term Offset (gap start)                     | 20
    +---------------------------------------------------------------+
    |                   Length (gap bytes)                          | 24
    +---------------------------------------------------------------+
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.logbuffer.frame import CURRENT_VERSION, HDR_TYPE_NAK
from driver.wire._common import checked_header, frame_view, int32, uint8

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["NAK", "NAK_LENGTH", "Nak", "unpack_nak", "write_nak"]

NAK_LENGTH = 28

NAK = struct.Struct("<iBBHiiiii")
"""frame_length, version, flags, type, session_id, stream_id, term_id, term_offset, length."""

unpack_nak = NAK.unpack_from
"""``unpack_nak(buf, offset=0)`` -> the 9 fields of :data:`NAK`; unchecked (hot path)."""

_pack = NAK.pack_into


def write_nak(
    buf: Buffer, offset: int, session_id: int, stream_id: int, term_id: int, term_offset: int, length: int
) -> int:
    """Write a NAK for ``length`` bytes from ``term_offset`` of ``term_id``; returns 28."""
    _pack(
        buf, offset, NAK_LENGTH, CURRENT_VERSION, 0, HDR_TYPE_NAK, session_id, stream_id, term_id, term_offset, length
    )
    return NAK_LENGTH


@attrs.frozen
class Nak:
    LENGTH: ClassVar[int] = NAK_LENGTH

    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    term_id: int = attrs.field(validator=int32)
    term_offset: int = attrs.field(validator=int32)
    length: int = attrs.field(validator=int32)
    flags: int = attrs.field(default=0, validator=uint8)

    def encode(self) -> bytes:
        return NAK.pack(
            NAK_LENGTH,
            CURRENT_VERSION,
            self.flags,
            HDR_TYPE_NAK,
            self.session_id,
            self.stream_id,
            self.term_id,
            self.term_offset,
            self.length,
        )

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> Nak:
        view = frame_view("NAK", buf, offset, length, NAK_LENGTH)
        _, flags = checked_header("NAK", view, HDR_TYPE_NAK, NAK_LENGTH)
        _, _, _, _, session_id, stream_id, term_id, term_offset, gap_length = NAK.unpack_from(view, 0)
        return cls(session_id, stream_id, term_id, term_offset, gap_length, flags)
