"""SETUP frames: a sender announcing a stream so receivers can create an image.

Theory of operation
-------------------
40 bytes, little-endian::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-------------------------------------------------------------+
    |R|                 Frame Length (= 40)                         |  0
    +-+-------------+---------------+-------------------------------+
    |   Version     |     Flags     |          Type (= 0x05)        |  4
    +---------------+---------------+-------------------------------+
    |                         Term Offset                           |  8
    +---------------------------------------------------------------+
    |                         Session ID                            | 12
    +---------------------------------------------------------------+
    |                         Stream ID                             | 16
    +---------------------------------------------------------------+
    |                      Initial Term ID                          | 20
    +---------------------------------------------------------------+
    |                       Active Term ID                          | 24
    +---------------------------------------------------------------+
    |                        Term Length                            | 28
    +---------------------------------------------------------------+
    |                            MTU                                | 32
    +---------------------------------------------------------------+
    |                            TTL                                | 36
    +---------------------------------------------------------------+

The receiver joins at computePosition(active_term_id, term_offset). Flags are 0
in 1.15.1; today's Aeron adds SEND_RESPONSE_SETUP 0x80 and GROUP 0x40, which a
receiver may ignore. :func:`check_setup` applies today's C driver sanity rules
(term length a power of two in 64 KiB..1 GiB, offset aligned inside the term,
mtu a multiple of 32 in 32..65504) before anything is sized from the frame.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.errors import MalformedFrameError
from driver.logbuffer.frame import CURRENT_VERSION, FRAME_ALIGNMENT, HDR_TYPE_SETUP
from driver.wire._common import checked_header, frame_view, int32, uint8

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "GROUP_FLAG",
    "MAX_UDP_PAYLOAD_LENGTH",
    "SEND_RESPONSE_SETUP_FLAG",
    "SETUP",
    "SETUP_LENGTH",
    "TERM_MAX_LENGTH",
    "TERM_MIN_LENGTH",
    "SetupFrame",
    "check_setup",
    "unpack_setup",
    "write_setup",
]

SETUP_LENGTH = 40
SEND_RESPONSE_SETUP_FLAG = 0x80  # today's Aeron only
GROUP_FLAG = 0x40  # today's Aeron only
TERM_MIN_LENGTH = 64 * 1024
TERM_MAX_LENGTH = 1024 * 1024 * 1024
MAX_UDP_PAYLOAD_LENGTH = 65504

SETUP = struct.Struct("<iBBHiiiiiiii")
"""frame_length, version, flags, type, term_offset, session_id, stream_id, initial_term_id, active_term_id,
term_length, mtu, ttl."""

unpack_setup = SETUP.unpack_from
"""``unpack_setup(buf, offset=0)`` -> the 12 fields of :data:`SETUP`; unchecked (hot path)."""

_pack = SETUP.pack_into


def write_setup(
    buf: Buffer,
    offset: int,
    term_offset: int,
    session_id: int,
    stream_id: int,
    initial_term_id: int,
    active_term_id: int,
    term_length: int,
    mtu: int,
    ttl: int,
    flags: int = 0,
) -> int:
    """Write a SETUP frame; returns 40."""
    _pack(
        buf,
        offset,
        SETUP_LENGTH,
        CURRENT_VERSION,
        flags,
        HDR_TYPE_SETUP,
        term_offset,
        session_id,
        stream_id,
        initial_term_id,
        active_term_id,
        term_length,
        mtu,
        ttl,
    )
    return SETUP_LENGTH


def check_setup(term_offset: int, term_length: int, mtu: int) -> None:
    """Refuse a SETUP whose numbers would make a broken image (today's C driver rules)."""
    if not (TERM_MIN_LENGTH <= term_length <= TERM_MAX_LENGTH and term_length & (term_length - 1) == 0):
        raise MalformedFrameError(f"SETUP: term_length {term_length} is not a power of two in 64 KiB..1 GiB")
    if not 0 <= term_offset < term_length or term_offset % FRAME_ALIGNMENT:
        raise MalformedFrameError(f"SETUP: term_offset {term_offset} is not 32-aligned inside the term")
    if not FRAME_ALIGNMENT <= mtu <= MAX_UDP_PAYLOAD_LENGTH or mtu % FRAME_ALIGNMENT:
        raise MalformedFrameError(f"SETUP: mtu {mtu} is not a multiple of 32 in 32..{MAX_UDP_PAYLOAD_LENGTH}")


@attrs.frozen
class SetupFrame:
    LENGTH: ClassVar[int] = SETUP_LENGTH

    term_offset: int = attrs.field(validator=int32)
    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    initial_term_id: int = attrs.field(validator=int32)
    active_term_id: int = attrs.field(validator=int32)
    term_length: int = attrs.field(validator=int32)
    mtu: int = attrs.field(validator=int32)
    ttl: int = attrs.field(default=0, validator=int32)
    flags: int = attrs.field(default=0, validator=uint8)

    def encode(self) -> bytes:
        return SETUP.pack(
            SETUP_LENGTH,
            CURRENT_VERSION,
            self.flags,
            HDR_TYPE_SETUP,
            self.term_offset,
            self.session_id,
            self.stream_id,
            self.initial_term_id,
            self.active_term_id,
            self.term_length,
            self.mtu,
            self.ttl,
        )

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> SetupFrame:
        """Read a SETUP; layout checks only (call :func:`check_setup` before trusting the numbers)."""
        view = frame_view("SETUP", buf, offset, length, SETUP_LENGTH)
        _, flags = checked_header("SETUP", view, HDR_TYPE_SETUP, SETUP_LENGTH)
        _, _, _, _, term_offset, session_id, stream_id, initial_term_id, active_term_id, term_length, mtu, ttl = (
            SETUP.unpack_from(view, 0)
        )
        return cls(term_offset, session_id, stream_id, initial_term_id, active_term_id, term_length, mtu, ttl, flags)
