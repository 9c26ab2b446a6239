"""RTT MEASUREMENT (RTTM) frames: a receiver timing the round trip to its sender.

Theory of operation
-------------------
40 bytes, little-endian::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-------------------------------------------------------------+
    |R|                 Frame Length (= 40)                         |  0
    +-+-------------+-+-------------+-------------------------------+
    |   Version     |R|   flags     |          Type (= 0x06)        |  4
    +---------------+-+-------------+-------------------------------+
    |                         Session ID                            |  8
    +---------------------------------------------------------------+
    |                         Stream ID                             | 12
    +---------------------------------------------------------------+
    |                  Echo Timestamp (int64, ns)                   | 16
    |                                                               |
    +---------------------------------------------------------------+
    |                Reception Delta (int64, ns)                    | 24
    |                                                               |
    +---------------------------------------------------------------+
    |                     Receiver ID (int64)                       | 32
    |                                                               |
    +---------------------------------------------------------------+

The receiver sends one with REPLY (0x80); the sender answers with flags 0, the
same echo timestamp and receiver id, and a reception delta of 0. The receiver's
RTT is now - echo - delta.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, ClassVar

import attrs

from driver.logbuffer.frame import CURRENT_VERSION, HDR_TYPE_RTTM
from driver.wire._common import checked_header, frame_view, int32, int64, uint8

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["REPLY_FLAG", "RTTM", "RTTM_LENGTH", "RttMeasurement", "unpack_rttm", "write_rttm"]

RTTM_LENGTH = 40
REPLY_FLAG = 0x80

RTTM = struct.Struct("<iBBHiiqqq")
"""frame_length, version, flags, type, session_id, stream_id, echo_timestamp_ns, reception_delta_ns, receiver_id."""

unpack_rttm = RTTM.unpack_from
"""``unpack_rttm(buf, offset=0)`` -> the 9 fields of :data:`RTTM`; unchecked (hot path)."""

_pack = RTTM.pack_into


def write_rttm(
    buf: Buffer,
    offset: int,
    session_id: int,
    stream_id: int,
    echo_timestamp_ns: int,
    reception_delta_ns: int,
    receiver_id: int,
    flags: int = 0,
) -> int:
    """Write an RTTM frame (``flags=REPLY_FLAG`` to ask for an echo); returns 40."""
    _pack(
        buf,
        offset,
        RTTM_LENGTH,
        CURRENT_VERSION,
        flags,
        HDR_TYPE_RTTM,
        session_id,
        stream_id,
        echo_timestamp_ns,
        reception_delta_ns,
        receiver_id,
    )
    return RTTM_LENGTH


@attrs.frozen
class RttMeasurement:
    LENGTH: ClassVar[int] = RTTM_LENGTH

    session_id: int = attrs.field(validator=int32)
    stream_id: int = attrs.field(validator=int32)
    echo_timestamp_ns: int = attrs.field(validator=int64)
    reception_delta_ns: int = attrs.field(validator=int64)
    receiver_id: int = attrs.field(validator=int64)
    flags: int = attrs.field(default=0, validator=uint8)

    @property
    def is_reply_requested(self) -> bool:
        return bool(self.flags & REPLY_FLAG)

    def encode(self) -> bytes:
        return RTTM.pack(
            RTTM_LENGTH,
            CURRENT_VERSION,
            self.flags,
            HDR_TYPE_RTTM,
            self.session_id,
            self.stream_id,
            self.echo_timestamp_ns,
            self.reception_delta_ns,
            self.receiver_id,
        )

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, length: int | None = None) -> RttMeasurement:
        view = frame_view("RTTM", buf, offset, length, RTTM_LENGTH)
        _, flags = checked_header("RTTM", view, HDR_TYPE_RTTM, RTTM_LENGTH)
        _, _, _, _, session_id, stream_id, echo, delta, receiver_id = RTTM.unpack_from(view, 0)
        return cls(session_id, stream_id, echo, delta, receiver_id, flags)
