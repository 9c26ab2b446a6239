"""The 8-byte header that starts every Aeron UDP frame.

Theory of operation
-------------------
Every frame on the wire, whatever its type, begins with (little-endian)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-------------------------------------------------------------+
    |R|                       Frame Length                          |
    +-+-------------+---------------+-------------------------------+
    |   Version     |     Flags     |              Type             |
    +---------------+---------------+-------------------------------+

``frame_length`` counts the whole frame including this header (0 in a DATA
heartbeat); ``version`` is always :data:`CURRENT_VERSION` (0) and receivers drop
anything else. The type codes are shared with the log buffer frames and so are
re-exported from :mod:`driver.logbuffer.frame`; the ones Aeron 1.15.1 does not
know (RES, ATS_*, RSP_SETUP) are listed so that a receiver can name and skip them.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.errors import MalformedFrameError
from driver.logbuffer.frame import (
    CURRENT_VERSION,
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HDR_TYPE_ERR,
    HDR_TYPE_EXT,
    HDR_TYPE_NAK,
    HDR_TYPE_PAD,
    HDR_TYPE_RTTM,
    HDR_TYPE_SETUP,
    HDR_TYPE_SM,
)
from driver.wire._common import frame_view, int32, uint8

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "CURRENT_VERSION",
    "FLAGS_OFFSET",
    "FRAME_ALIGNMENT",
    "FRAME_HEADER",
    "FRAME_HEADER_LENGTH",
    "FRAME_LENGTH_OFFSET",
    "HDR_TYPE_ATS_DATA",
    "HDR_TYPE_ATS_SETUP",
    "HDR_TYPE_ATS_SM",
    "HDR_TYPE_DATA",
    "HDR_TYPE_ERR",
    "HDR_TYPE_EXT",
    "HDR_TYPE_NAK",
    "HDR_TYPE_PAD",
    "HDR_TYPE_RES",
    "HDR_TYPE_RSP_SETUP",
    "HDR_TYPE_RTTM",
    "HDR_TYPE_SETUP",
    "HDR_TYPE_SM",
    "TYPES_1_15",
    "TYPE_NAMES",
    "TYPE_OFFSET",
    "VERSION_OFFSET",
    "FrameHeader",
    "type_name",
    "unpack_frame_header",
]

FRAME_LENGTH_OFFSET = 0
VERSION_OFFSET = 4
FLAGS_OFFSET = 5
TYPE_OFFSET = 6
FRAME_HEADER_LENGTH = 8

# Types added after 1.15.1 (a 1.15.1 peer never sends them and ignores them).
HDR_TYPE_RES = 0x07
HDR_TYPE_ATS_DATA = 0x08
HDR_TYPE_ATS_SETUP = 0x09  # Java's numbering; the C header swaps 0x09 and 0x0A
HDR_TYPE_ATS_SM = 0x0A
HDR_TYPE_RSP_SETUP = 0x0B

TYPES_1_15: frozenset[int] = frozenset(
    {HDR_TYPE_PAD, HDR_TYPE_DATA, HDR_TYPE_NAK, HDR_TYPE_SM, HDR_TYPE_ERR, HDR_TYPE_SETUP, HDR_TYPE_RTTM, HDR_TYPE_EXT}
)

TYPE_NAMES: dict[int, str] = {
    HDR_TYPE_PAD: "PAD",
    HDR_TYPE_DATA: "DATA",
    HDR_TYPE_NAK: "NAK",
    HDR_TYPE_SM: "SM",
    HDR_TYPE_ERR: "ERR",
    HDR_TYPE_SETUP: "SETUP",
    HDR_TYPE_RTTM: "RTTM",
    HDR_TYPE_RES: "RES",
    HDR_TYPE_ATS_DATA: "ATS_DATA",
    HDR_TYPE_ATS_SETUP: "ATS_SETUP",
    HDR_TYPE_ATS_SM: "ATS_SM",
    HDR_TYPE_RSP_SETUP: "RSP_SETUP",
    HDR_TYPE_EXT: "EXT",
}

FRAME_HEADER = struct.Struct("<iBBH")
"""frame_length, version, flags, type."""

unpack_frame_header = FRAME_HEADER.unpack_from
"""``unpack_frame_header(buf, offset=0) -> (frame_length, version, flags, type)``; unchecked (hot path)."""


def type_name(frame_type: int) -> str:
    return TYPE_NAMES.get(frame_type, f"0x{frame_type:04x}")


@attrs.frozen
class FrameHeader:
    """The common header alone: what every frame shares (tools and tests)."""

    LENGTH: ClassVar[int] = FRAME_HEADER_LENGTH

    frame_length: int = attrs.field(validator=int32)
    flags: int = attrs.field(validator=uint8)
    frame_type: int = attrs.field(validator=attrs.validators.and_(attrs.validators.ge(0), attrs.validators.le(0xFFFF)))
    version: int = attrs.field(default=CURRENT_VERSION, validator=uint8)

    def encode(self) -> bytes:
        return FRAME_HEADER.pack(self.frame_length, self.version, self.flags, self.frame_type)

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> FrameHeader:
        view = frame_view("frame header", buf, offset, length, FRAME_HEADER_LENGTH)
        frame_length, version, flags, frame_type = FRAME_HEADER.unpack_from(view, 0)
        if version != CURRENT_VERSION:
            raise MalformedFrameError(f"frame header: version {version} is not {CURRENT_VERSION}")
        return cls(frame_length, flags, frame_type, version)
