from __future__ import annotations

import struct

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import descriptor as d
from driver.logbuffer.frame import HDR_TYPE_DATA, HDR_TYPE_PAD, UNFRAGMENTED
from driver.logbuffer.gap_filler import try_fill_gap
from driver.logbuffer.header import Header
from driver.logbuffer.reader import read
from driver.logbuffer.rebuilder import insert

TL = 64 * 1024
SESSION, STREAM, INITIAL_TERM_ID = 42, 10, 100
HDR = struct.Struct("<iBBHiiiiq")


def image() -> tuple[bytearray, AtomicBuffer, AtomicBuffer]:
    raw = bytearray(TL)
    meta = bytearray(d.LOG_META_DATA_LENGTH)
    metadata = AtomicBuffer(meta)
    d.initialize_image_metadata(
        metadata,
        session_id=SESSION,
        stream_id=STREAM,
        initial_term_id=INITIAL_TERM_ID,
        mtu_length=1408,
        term_length=TL,
        page_size=4096,
        correlation_id=1,
    )
    return raw, AtomicBuffer(raw), metadata


def data_frame(term_offset: int, term_id: int, payload: bytes) -> bytes:
    raw = HDR.pack(32 + len(payload), 0, UNFRAGMENTED, HDR_TYPE_DATA, term_offset, SESSION, STREAM, term_id, 0)
    raw += payload
    return raw + bytes(-len(raw) % 32)


def test_fills_empty_gap_with_pad_from_default_header() -> None:
    raw, term, metadata = image()
    assert try_fill_gap(metadata, term, 103, 256, 320)
    length, version, flags, frame_type, term_offset, session, stream, term_id, reserved = HDR.unpack_from(raw, 256)
    assert (length, version, frame_type, term_offset, term_id) == (320, 0, HDR_TYPE_PAD, 256, 103)
    assert (session, stream, reserved) == (SESSION, STREAM, 0)
    assert flags == UNFRAGMENTED
    assert not any(raw[:256])
    assert not any(raw[288:])


def test_refuses_when_any_slot_of_the_gap_holds_data() -> None:
    for filled in (0, 32, 96, 128 - 32):
        raw, term, metadata = image()
        term.put_int(512 + filled, 32)
        before = bytes(raw)
        assert not try_fill_gap(metadata, term, 100, 512, 128)
        assert bytes(raw) == before


def test_data_just_outside_the_gap_does_not_block_fill() -> None:
    _raw, term, metadata = image()
    term.put_int(0, 32)
    term.put_int(96, 32)
    assert try_fill_gap(metadata, term, 100, 32, 64)
    assert term.get_int(32) == 64


def test_fill_at_end_of_term() -> None:
    _, term, metadata = image()
    assert try_fill_gap(metadata, term, 100, TL - 64, 64)
    assert term.get_int(TL - 64) == 64


def test_reader_skips_filled_gap_and_delivers_following_data() -> None:
    _, term, metadata = image()
    first = data_frame(0, INITIAL_TERM_ID, b"one")
    third = data_frame(128, INITIAL_TERM_ID, b"three")
    insert(term, 0, memoryview(first), len(first))
    insert(term, 128, memoryview(third), len(third))
    assert try_fill_gap(metadata, term, INITIAL_TERM_ID, 64, 64)

    got: list[bytes] = []
    header = Header(INITIAL_TERM_ID, d.position_bits_to_shift(TL))
    fragments, offset = read(term, 0, lambda buf, _h: got.append(bytes(buf)), 10, header)
    assert got == [b"one", b"three"]
    assert (fragments, offset) == (2, 192)


def test_late_retransmit_into_filled_gap_is_dropped() -> None:
    raw, term, metadata = image()
    assert try_fill_gap(metadata, term, INITIAL_TERM_ID, 0, 64)
    late = data_frame(0, INITIAL_TERM_ID, b"late")
    insert(term, 0, memoryview(late), len(late))
    assert term.get_int(0) == 64
    assert HDR.unpack_from(raw, 0)[3] == HDR_TYPE_PAD
