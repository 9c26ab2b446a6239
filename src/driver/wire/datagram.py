"""Per-datagram validation run by the receiver and the sender before anything is dispatched.

Theory of operation
-------------------
Nothing read from the network is trusted. :func:`classify` checks the common
header of a datagram as today's C driver does (``aeron_is_frame_valid``): at
least 8 bytes, version 0, a non-negative frame_length; DATA/PAD datagrams at
least 32 bytes and a multiple of 32 (their frame_length is checked per frame by
:func:`validate_data_datagram`, since a trailing PAD states more than it
carries); every control frame at least its fixed length, with a frame_length
that is at least that and fits in the datagram. Types it does not know (RES,
ATS, RSP_SETUP, EXT, anything newer) pass with their type so that the caller
ignores them, as a 1.15.1 driver does.

:func:`validate_data_datagram` then applies the C driver's packet checks
(``aeron_publication_image_validate_packet``) before the block is inserted into
a term: the first term offset is 32-aligned inside the term; a lone 32-byte DATA
header with frame_length 0 is a heartbeat; otherwise every frame is DATA or
PAD, version 0, at least a header long, at the running term offset, and never
crosses the term end, and the aligned frame lengths add up to the datagram
length exactly -- except that the last frame may be a PAD sent header-only.

Both raise :class:`~driver.errors.MalformedFrameError` with the reason and never
anything else; both are a handful of struct unpacks per frame.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from driver.errors import MalformedFrameError
from driver.logbuffer.frame import (
    CURRENT_VERSION,
    HDR_TYPE_DATA,
    HDR_TYPE_ERR,
    HDR_TYPE_NAK,
    HDR_TYPE_PAD,
    HDR_TYPE_RTTM,
    HDR_TYPE_SETUP,
    HDR_TYPE_SM,
)
from driver.wire._datagrams import validate_data_datagram as _native_validate
from driver.wire.error import ERR_HEADER_LENGTH
from driver.wire.nak import NAK_LENGTH
from driver.wire.rttm import RTTM_LENGTH
from driver.wire.setup import SETUP_LENGTH
from driver.wire.status import SM_LENGTH

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["CONTROL_FRAME_LENGTHS", "classify", "validate_data_datagram"]

CONTROL_FRAME_LENGTHS: dict[int, int] = {
    HDR_TYPE_NAK: NAK_LENGTH,
    HDR_TYPE_SM: SM_LENGTH,
    HDR_TYPE_ERR: ERR_HEADER_LENGTH,
    HDR_TYPE_SETUP: SETUP_LENGTH,
    HDR_TYPE_RTTM: RTTM_LENGTH,
}
"""The fixed (minimum) length of each control frame type this driver reads."""

_unpack_header = struct.Struct("<iBBH").unpack_from
_unpack_frame = struct.Struct("<iBBHi").unpack_from  # frame_length, version, flags, type, term_offset
_minimum_length = CONTROL_FRAME_LENGTHS.get


def classify(buf: Buffer, length: int) -> int:
    """Validate the common header of a datagram of ``length`` bytes; returns its frame type."""
    if length < 8:
        raise MalformedFrameError(f"datagram of {length} bytes is shorter than a frame header")
    try:
        frame_length, version, _, frame_type = _unpack_header(buf, 0)
    except struct.error:
        raise MalformedFrameError(f"datagram of {length} bytes is larger than its buffer") from None
    if version != CURRENT_VERSION:
        raise MalformedFrameError(f"frame version {version} is not {CURRENT_VERSION}")
    if frame_length < 0:
        raise MalformedFrameError(f"frame_length {frame_length} is negative")
    if frame_type <= HDR_TYPE_DATA:  # DATA or PAD
        if length < 32 or length & 31:
            raise MalformedFrameError(f"DATA/PAD datagram of {length} bytes is not a positive multiple of 32")
        result: int = frame_type
        return result
    minimum = _minimum_length(frame_type)
    if minimum is not None:
        if length < minimum or frame_length < minimum:
            raise MalformedFrameError(
                f"frame type {frame_type}: {length} bytes / frame_length {frame_length}, needs at least {minimum}"
            )
        if frame_length > length:
            raise MalformedFrameError(f"frame_length {frame_length} exceeds the {length}-byte datagram")
    result = frame_type
    return result


def _frame_error(
    offset: int, frame_length: int, version: int, frame_type: int, term_offset: int, expected_offset: int
) -> MalformedFrameError:
    if frame_length < 32:
        reason = f"frame_length {frame_length} is shorter than a header"
    elif frame_type > HDR_TYPE_DATA:
        reason = f"type {frame_type} is not DATA or PAD"
    elif version != CURRENT_VERSION:
        reason = f"version {version} is not {CURRENT_VERSION}"
    else:
        reason = f"term_offset {term_offset} is not {expected_offset}"
    return MalformedFrameError(f"frame at {offset}: {reason}")


def validate_data_datagram(buf: Buffer, length: int, term_length: int) -> int:
    """Check a DATA/PAD datagram against a term of ``term_length``; returns the term bytes it covers.

    The result is 0 for a heartbeat, else the sum of the aligned frame lengths
    (more than ``length`` when a trailing PAD was sent header-only). The check runs
    natively per datagram; only a datagram that fails it is walked again here, to
    say exactly what is wrong.
    """
    covered = _native_validate(buf, length, term_length)
    if covered >= 0:
        return covered
    explain_invalid_data_datagram(buf, length, term_length)
    raise MalformedFrameError(f"invalid DATA/PAD datagram of {length} bytes (reason {-covered})")


def explain_invalid_data_datagram(buf: Buffer, length: int, term_length: int) -> int:
    """Check a DATA/PAD datagram against a term of ``term_length``; returns the term bytes it covers.

    The result is 0 for a heartbeat, else the sum of the aligned frame lengths
    (more than ``length`` when a trailing PAD was sent header-only).
    """
    if length < 32 or length & 31:
        raise MalformedFrameError(f"DATA/PAD datagram of {length} bytes is not a positive multiple of 32")
    try:
        frame_length, version, _, frame_type, term_offset = _unpack_frame(buf, 0)
    except struct.error:
        raise MalformedFrameError(f"datagram of {length} bytes is larger than its buffer") from None
    if term_offset < 0 or term_offset >= term_length or term_offset & 31:
        raise MalformedFrameError(f"term_offset {term_offset} is not 32-aligned inside a term of {term_length}")
    if frame_length == 0 and length == 32:
        if frame_type != HDR_TYPE_DATA or version != CURRENT_VERSION:
            raise MalformedFrameError(f"heartbeat of type {frame_type} version {version} is not a DATA header")
        return 0

    offset: int = 0
    next_term_offset = term_offset
    last = length - 32
    unpack = _unpack_frame
    while True:
        if frame_length < 32 or frame_type > HDR_TYPE_DATA or version or term_offset != next_term_offset:
            raise _frame_error(offset, frame_length, version, frame_type, term_offset, next_term_offset)
        aligned = (frame_length + 31) & -32
        next_term_offset += aligned
        if next_term_offset > term_length:
            raise MalformedFrameError(f"frame at {offset}: crosses the end of a term of {term_length}")
        offset += aligned
        if offset > last:
            break
        try:
            frame_length, version, _, frame_type, term_offset = unpack(buf, offset)
        except struct.error:
            raise MalformedFrameError(f"datagram of {length} bytes is larger than its buffer") from None

    if offset != length and (offset < length or frame_type != HDR_TYPE_PAD):
        raise MalformedFrameError(
            f"frames cover {offset} bytes of a {length}-byte datagram (only a trailing PAD may be cut short)"
        )
    return offset
