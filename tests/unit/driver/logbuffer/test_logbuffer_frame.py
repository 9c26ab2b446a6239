from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import frame as f
from driver.logbuffer.descriptor import int32
from driver.logbuffer.header import Header

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def test_constants() -> None:
    assert (f.FRAME_LENGTH_OFFSET, f.VERSION_OFFSET, f.FLAGS_OFFSET, f.TYPE_OFFSET) == (0, 4, 5, 6)
    assert (f.TERM_OFFSET_OFFSET, f.SESSION_ID_OFFSET, f.STREAM_ID_OFFSET, f.TERM_ID_OFFSET) == (8, 12, 16, 20)
    assert (f.RESERVED_VALUE_OFFSET, f.HEADER_LENGTH, f.FRAME_ALIGNMENT) == (24, 32, 32)
    assert (f.HDR_TYPE_PAD, f.HDR_TYPE_DATA, f.HDR_TYPE_NAK, f.HDR_TYPE_SM) == (0, 1, 2, 3)
    assert (f.HDR_TYPE_ERR, f.HDR_TYPE_SETUP, f.HDR_TYPE_RTTM, f.HDR_TYPE_EXT) == (4, 5, 6, 0xFFFF)
    assert (f.BEGIN_FRAG_FLAG, f.END_FRAG_FLAG, f.UNFRAGMENTED, f.EOS_FLAG) == (0x80, 0x40, 0xC0, 0x20)
    assert f.CURRENT_VERSION == 0
    assert f.compute_max_message_length(64 * 1024) == 8192


@settings(deadline=None)
@given(INT32, INT32, INT32)
def test_default_header_bytes(session_id: int, stream_id: int, term_id: int) -> None:
    raw = f.create_default_header(session_id, stream_id, term_id)
    assert len(raw) == 32
    assert raw[0:4] == b"\x00\x00\x00\x00"
    assert raw[4] == 0
    assert raw[5] == 0xC0
    assert raw[6:8] == b"\x01\x00"
    assert struct.unpack_from("<iiiiq", raw, 8) == (0, session_id, stream_id, term_id, 0)


@settings(deadline=None)
@given(INT32, INT32, INT32, st.integers(min_value=0, max_value=2047), st.integers(min_value=32, max_value=4096))
def test_header_writer_layout(session_id: int, stream_id: int, term_id: int, slot: int, length: int) -> None:
    writer = f.HeaderWriter(f.create_default_header(session_id, stream_id, 0))
    raw = bytearray(64 * 1024)
    term = AtomicBuffer(raw)
    offset = slot * 32
    writer.write(term, offset, length, term_id)
    frame_length, version, flags, frame_type, term_offset, sess, stream, tid = struct.unpack_from(
        "<iBBHiiii", raw, offset
    )
    assert frame_length == -length  # claimed, not yet committed
    assert (version, flags, frame_type) == (0, 0xC0, 1)
    assert (term_offset, sess, stream, tid) == (offset, session_id, stream_id, term_id)
    assert bytes(raw[offset + 24 : offset + 32]) == bytes(8)
    assert writer.header_bytes(offset, length, term_id) == bytes(raw[offset : offset + 32])


def test_header_writer_rejects_short_default_header() -> None:
    with pytest.raises(ValueError, match="32"):
        f.HeaderWriter(b"\x00" * 16)


def test_frame_field_helpers() -> None:
    term = AtomicBuffer(bytearray(1024))
    f.set_frame_length_ordered(term, 64, 100)
    f.set_frame_type(term, 64, f.HDR_TYPE_PAD)
    f.set_frame_flags(term, 64, f.BEGIN_FRAG_FLAG)
    f.set_frame_term_offset(term, 64)
    f.set_frame_term_id(term, 64, -7)
    assert f.frame_length(term, 64) == 100
    assert f.frame_length_volatile(term, 64) == 100
    assert f.is_padding_frame(term, 64)
    assert f.frame_flags(term, 64) == 0x80
    assert term.get_int(64 + 8) == 64
    assert term.get_int(64 + 20) == -7
    f.set_frame_type(term, 64, f.HDR_TYPE_EXT)
    assert f.frame_type(term, 64) == 0xFFFF
    assert not f.is_padding_frame(term, 64)


@settings(deadline=None)
@given(INT32, INT32, st.integers(0, 100), st.integers(0, 2000), st.integers(16, 24))
def test_header_view(initial: int, count: int, slot: int, payload: int, bits: int) -> None:
    raw = bytearray(1 << 16)
    term = AtomicBuffer(raw)
    term_id = int32(initial + count)
    offset = slot * 32
    struct.pack_into("<iBBHiiiiq", raw, offset, 32 + payload, 0, 0x80, 1, offset, 5, 6, term_id, -1)
    header = Header(initial, bits)
    header.set_buffer(term)
    header.offset = offset
    assert header.frame_length == 32 + payload
    assert header.flags == 0x80
    assert header.type == 1
    assert header.session_id == 5
    assert header.stream_id == 6
    assert header.term_id == term_id
    assert header.term_offset == offset
    assert header.reserved_value == -1
    end = (offset + 32 + payload + 31) & ~31
    assert header.position == (count << bits) + end


def test_header_requires_buffer() -> None:
    header = Header(0, 16)
    with pytest.raises(ValueError, match="not pointed"):
        _ = header.session_id
