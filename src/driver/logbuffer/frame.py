"""Data frame header layout and the header writer used by the appenders.

Theory of operation
-------------------
Every frame in a term (and every DATA/PAD frame on the wire) starts with the
32-byte data header, little-endian::

    0  int32  frame_length   header + payload, unaligned; <= 0 means "not yet committed"
    4  uint8  version        0
    5  uint8  flags          BEGIN 0x80, END 0x40, EOS 0x20
    6  uint16 type           PAD 0, DATA 1, ...
    8  int32  term_offset
    12 int32  session_id
    16 int32  stream_id
    20 int32  term_id
    24 int64  reserved_value
    32 ...    payload

Frames start at 32-byte aligned offsets; the next frame begins at
``offset + align(frame_length, 32)``.

A frame is *published* by an ordered (release) store of its positive
``frame_length``. Before that, :meth:`HeaderWriter.write` stores the first
8 bytes with a *negative* length so that a blocked-publication unblocker can
tell a claimed-but-uncommitted frame (negative) from an unclaimed slot (zero).
"""

from __future__ import annotations

import struct

from driver.concurrent.atomic_buffer import AtomicBuffer, align, fence

__all__ = [
    "BEGIN_FRAG_FLAG",
    "CURRENT_VERSION",
    "DEFAULT_RESERVE_VALUE",
    "END_FRAG_FLAG",
    "EOS_FLAG",
    "FLAGS_OFFSET",
    "FRAME_ALIGNMENT",
    "FRAME_LENGTH_OFFSET",
    "HDR_TYPE_DATA",
    "HDR_TYPE_ERR",
    "HDR_TYPE_EXT",
    "HDR_TYPE_NAK",
    "HDR_TYPE_PAD",
    "HDR_TYPE_RTTM",
    "HDR_TYPE_SETUP",
    "HDR_TYPE_SM",
    "HEADER_LENGTH",
    "MAX_MESSAGE_LENGTH",
    "PADDING_FRAME_TYPE",
    "QUIET_RESERVED_VALUE",
    "RESERVED_VALUE_OFFSET",
    "SESSION_ID_OFFSET",
    "STREAM_ID_OFFSET",
    "TERM_ID_OFFSET",
    "TERM_OFFSET_OFFSET",
    "TYPE_OFFSET",
    "UNFRAGMENTED",
    "VERSION_OFFSET",
    "HeaderWriter",
    "compute_max_message_length",
    "create_default_header",
    "frame_flags",
    "frame_length",
    "frame_length_volatile",
    "frame_type",
    "is_padding_frame",
    "is_quiet_alone",
    "set_frame_flags",
    "set_frame_length_ordered",
    "set_frame_term_id",
    "set_frame_term_offset",
    "set_frame_type",
]

FRAME_LENGTH_OFFSET = 0
VERSION_OFFSET = 4
FLAGS_OFFSET = 5
TYPE_OFFSET = 6
TERM_OFFSET_OFFSET = 8
SESSION_ID_OFFSET = 12
STREAM_ID_OFFSET = 16
TERM_ID_OFFSET = 20
RESERVED_VALUE_OFFSET = 24
HEADER_LENGTH = 32
FRAME_ALIGNMENT = 32

CURRENT_VERSION = 0

HDR_TYPE_PAD = 0x00
HDR_TYPE_DATA = 0x01
HDR_TYPE_NAK = 0x02
HDR_TYPE_SM = 0x03
HDR_TYPE_ERR = 0x04
HDR_TYPE_SETUP = 0x05
HDR_TYPE_RTTM = 0x06
HDR_TYPE_EXT = 0xFFFF
PADDING_FRAME_TYPE = HDR_TYPE_PAD

BEGIN_FRAG_FLAG = 0x80
END_FRAG_FLAG = 0x40
UNFRAGMENTED = BEGIN_FRAG_FLAG | END_FRAG_FLAG
EOS_FLAG = 0x20

DEFAULT_RESERVE_VALUE = 0
QUIET_RESERVED_VALUE = 0x65626F72702D6F6E
"""A whole message alone in its datagram with this reserved value asks our driver for no tail probe after it (an end
point's keepalive, which the next keepalive follows anyway; see ``driver.uri.TAIL_PROBE_PARAM_NAME``). Only the
sending driver reads it: on the wire it is an ordinary reserved value."""

MAX_MESSAGE_LENGTH = 16 * 1024 * 1024
"""Upper bound on a message whatever the term length (FrameDescriptor.MAX_MESSAGE_LENGTH)."""

_DEFAULT_HEADER = struct.Struct("<iBBHiiiiq")
_U32 = struct.Struct("<I")


def compute_max_message_length(term_length: int) -> int:
    """A message may take at most an eighth of a term (and never more than 16 MiB)."""
    return min(term_length // 8, MAX_MESSAGE_LENGTH)


def create_default_header(session_id: int, stream_id: int, term_id: int) -> bytes:
    """The 32-byte DATA header template stored in the log metadata (length 0, flags B|E)."""
    return _DEFAULT_HEADER.pack(
        0,
        CURRENT_VERSION,
        UNFRAGMENTED,
        HDR_TYPE_DATA,
        0,
        session_id,
        stream_id,
        term_id,
        DEFAULT_RESERVE_VALUE,
    )


def _signed64(value: int) -> int:
    value &= 0xFFFF_FFFF_FFFF_FFFF
    return value - (1 << 64) if value & (1 << 63) else value


class HeaderWriter:
    """Writes a frame header from a default header with the fewest stores.

    The three 8-byte words are precomputed so that writing a header costs three
    stores: word 0 (negative length | version/flags/type) ordered, a store fence,
    then (term offset | session id) and (stream id | term id).
    """

    __slots__ = ("session_id", "session_word", "stream_id", "stream_word", "version_flags_type")

    def __init__(self, default_header: bytes | bytearray | memoryview) -> None:
        raw = bytes(default_header)
        if len(raw) < HEADER_LENGTH:
            raise ValueError(f"default header must be {HEADER_LENGTH} bytes, got {len(raw)}")
        vft = _U32.unpack_from(raw, VERSION_OFFSET)[0]
        self.session_id: int = struct.unpack_from("<i", raw, SESSION_ID_OFFSET)[0]
        self.stream_id: int = struct.unpack_from("<i", raw, STREAM_ID_OFFSET)[0]
        # Signed 64-bit forms so AtomicBuffer.put_long accepts them and `|` with a
        # small non-negative value keeps the two's-complement meaning.
        self.version_flags_type: int = _signed64(vft << 32)
        self.session_word: int = self.session_id << 32
        self.stream_word: int = self.stream_id & 0xFFFF_FFFF

    def write(self, term: AtomicBuffer, offset: int, length: int, term_id: int) -> None:
        """Write the header of a frame of ``length`` bytes, leaving its length negative (uncommitted)."""
        term.put_long_ordered(offset, self.version_flags_type | ((-length) & 0xFFFF_FFFF))
        fence()
        term.put_long(offset + TERM_OFFSET_OFFSET, self.session_word | offset)
        term.put_long(offset + STREAM_ID_OFFSET, self.stream_word | (term_id << 32))

    def header_bytes(self, offset: int, length: int, term_id: int) -> bytes:
        """The 32 bytes :meth:`write` would store, with a negative (uncommitted) length; reserved = 0."""
        return struct.pack(
            "<qqqq",
            self.version_flags_type | ((-length) & 0xFFFF_FFFF),
            self.session_word | offset,
            self.stream_word | (term_id << 32),
            0,
        )


# --- Frame field helpers (FrameDescriptor) -------------------------------------------------


def frame_length(term: AtomicBuffer, frame_offset: int) -> int:
    return term.get_int(frame_offset)


def frame_length_volatile(term: AtomicBuffer, frame_offset: int) -> int:
    return term.get_int_volatile(frame_offset)


def is_quiet_alone(term: AtomicBuffer, frame_offset: int, length: int) -> bool:
    """The ``length`` bytes at ``frame_offset`` are one whole message with :data:`QUIET_RESERVED_VALUE` (see there)."""
    return (
        term.get_long(frame_offset + RESERVED_VALUE_OFFSET) == QUIET_RESERVED_VALUE
        and align(term.get_int(frame_offset), FRAME_ALIGNMENT) == length
        and frame_flags(term, frame_offset) == UNFRAGMENTED
    )


def set_frame_length_ordered(term: AtomicBuffer, frame_offset: int, length: int) -> None:
    """Publish (commit) a frame: readers see it once this store is visible."""
    term.put_int_ordered(frame_offset, length)


def frame_type(term: AtomicBuffer, frame_offset: int) -> int:
    return term.get_ushort(frame_offset + TYPE_OFFSET)


def set_frame_type(term: AtomicBuffer, frame_offset: int, frame_type: int) -> None:
    term.put_short(frame_offset + TYPE_OFFSET, frame_type)


def is_padding_frame(term: AtomicBuffer, frame_offset: int) -> bool:
    return term.get_ushort(frame_offset + TYPE_OFFSET) == HDR_TYPE_PAD


def frame_flags(term: AtomicBuffer, frame_offset: int) -> int:
    return term.get_ubyte(frame_offset + FLAGS_OFFSET)


def set_frame_flags(term: AtomicBuffer, frame_offset: int, flags: int) -> None:
    term.put_byte(frame_offset + FLAGS_OFFSET, flags)


def set_frame_term_offset(term: AtomicBuffer, frame_offset: int) -> None:
    term.put_int(frame_offset + TERM_OFFSET_OFFSET, frame_offset)


def set_frame_term_id(term: AtomicBuffer, frame_offset: int, term_id: int) -> None:
    term.put_int(frame_offset + TERM_ID_OFFSET, term_id)
