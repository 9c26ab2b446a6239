from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import DriverConfigurationError
from driver.logbuffer import descriptor as d
from driver.logbuffer.frame import create_default_header

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
BITS = st.integers(min_value=16, max_value=30)


def test_offsets_match_1_15_1() -> None:
    assert d.TERM_TAIL_COUNTERS_OFFSET == 0
    assert d.LOG_ACTIVE_TERM_COUNT_OFFSET == 24
    assert d.LOG_END_OF_STREAM_POSITION_OFFSET == 128
    assert d.LOG_IS_CONNECTED_OFFSET == 136
    assert d.LOG_CORRELATION_ID_OFFSET == 256
    assert d.LOG_INITIAL_TERM_ID_OFFSET == 264
    assert d.LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET == 268
    assert d.LOG_MTU_LENGTH_OFFSET == 272
    assert d.LOG_TERM_LENGTH_OFFSET == 276
    assert d.LOG_PAGE_SIZE_OFFSET == 280
    assert d.LOG_DEFAULT_FRAME_HEADER_OFFSET == 320
    assert d.LOG_DEFAULT_FRAME_HEADER_MAX_LENGTH == 128
    assert d.LOG_META_DATA_LENGTH == 4096
    assert d.PARTITION_COUNT == 3


def test_head_only_offsets() -> None:
    assert d.HEAD_LOG_ACTIVE_TRANSPORT_COUNT_OFFSET == 140
    assert d.HEAD_LOG_PUBLICATION_WINDOW_LENGTH_OFFSET == 284
    assert d.HEAD_LOG_MAX_RESEND_OFFSET == 316
    assert d.HEAD_LOG_ENTITY_TAG_OFFSET == 448
    assert d.HEAD_LOG_RESPONSE_CORRELATION_ID_OFFSET == 456
    assert d.HEAD_LOG_LINGER_TIMEOUT_NS_OFFSET == 464
    assert d.HEAD_LOG_GROUP_OFFSET == 488
    assert d.HEAD_LOG_TYPE_OFFSET == 497
    assert d.HEAD_LOG_UNTETHERED_LINGER_TIMEOUT_NS_OFFSET == 500


@pytest.mark.parametrize("length", [1 << n for n in range(16, 31)])
def test_valid_term_lengths(length: int) -> None:
    d.check_term_length(length)
    assert d.position_bits_to_shift(length) == length.bit_length() - 1


@pytest.mark.parametrize("length", [0, -1, 32 * 1024, 64 * 1024 + 1, 3 * 64 * 1024, 2 * 1024**3])
def test_invalid_term_lengths(length: int) -> None:
    with pytest.raises(DriverConfigurationError) as info:
        d.check_term_length(length, field="aeron.term.buffer.length")
    assert info.value.field == "aeron.term.buffer.length"
    assert info.value.value == length
    with pytest.raises(ValueError, match="invalid term buffer length"):
        d.position_bits_to_shift(length)


@pytest.mark.parametrize("size", [0, 2048, 4097, 3 * 4096, 2 * 1024**3])
def test_invalid_page_sizes(size: int) -> None:
    with pytest.raises(DriverConfigurationError) as info:
        d.check_page_size(size)
    assert info.value.field == "page_size"


@pytest.mark.parametrize("size", [4096, 8192, 2 * 1024 * 1024, 1024**3])
def test_valid_page_sizes(size: int) -> None:
    d.check_page_size(size)


def test_compute_log_length() -> None:
    assert d.compute_log_length(64 * 1024, 4096) == 3 * 64 * 1024 + 4096
    assert d.compute_log_length(64 * 1024, 2 * 1024 * 1024) == 2 * 1024 * 1024
    assert d.compute_log_length(16 * 1024 * 1024, 4096) == 48 * 1024 * 1024 + 4096
    assert d.compute_log_length(1024**3, 4096) == 3 * 1024**3 + 4096
    assert d.compute_log_length(1024**3, 1024 * 1024) == 3 * 1024**3 + 1024 * 1024


def test_max_message_length() -> None:
    assert d.compute_max_message_length(64 * 1024) == 8 * 1024
    assert d.compute_max_message_length(16 * 1024 * 1024) == 2 * 1024 * 1024
    assert d.compute_max_message_length(1024**3) == 16 * 1024 * 1024


@settings(deadline=None)
@given(st.integers())
def test_int32_wraps_like_java(value: int) -> None:
    wrapped = d.int32(value)
    assert -(2**31) <= wrapped < 2**31
    assert (wrapped - value) % 2**32 == 0


@settings(deadline=None)
@given(INT32, INT32, BITS, st.data())
def test_position_round_trip(initial_term_id: int, term_count: int, bits: int, data: st.DataObject) -> None:
    term_count = abs(term_count) % (2**31)
    term_length = 1 << bits
    offset = data.draw(st.integers(min_value=0, max_value=term_length - 1))
    term_id = d.int32(initial_term_id + term_count)  # wraps past int32 max
    position = d.compute_position(term_id, offset, bits, initial_term_id)
    assert position == (term_count << bits) + offset
    assert position >= 0
    assert d.compute_term_id_from_position(position, bits, initial_term_id) == term_id
    assert d.compute_term_offset_from_position(position, bits) == offset
    assert d.compute_term_begin_position(term_id, bits, initial_term_id) == position - offset
    assert d.index_by_position(position, bits) == term_count % 3
    assert d.index_by_term(initial_term_id, term_id) == term_count % 3
    assert d.index_by_term_count(term_count) == term_count % 3


def test_position_across_int32_term_id_wrap() -> None:
    initial = 2**31 - 2
    bits = 16
    ids = [d.int32(initial + i) for i in range(5)]
    assert ids == [2**31 - 2, 2**31 - 1, -(2**31), -(2**31) + 1, -(2**31) + 2]
    positions = [d.compute_position(t, 0, bits, initial) for t in ids]
    assert positions == [i << bits for i in range(5)]
    assert [d.compute_term_id_from_position(p, bits, initial) for p in positions] == ids


def test_max_possible_position() -> None:
    assert d.max_possible_position(64 * 1024) == (64 * 1024) << 31


@settings(deadline=None)
@given(INT32, st.integers(min_value=0, max_value=2**32 - 1))
def test_pack_tail_round_trip(term_id: int, offset: int) -> None:
    raw = d.pack_tail(term_id, offset)
    assert -(2**63) <= raw < 2**63
    assert d.term_id(raw) == term_id
    assert raw & 0xFFFF_FFFF == offset
    assert d.term_offset(raw, 64 * 1024) == min(offset, 64 * 1024)


def _meta() -> AtomicBuffer:
    return AtomicBuffer(bytearray(d.LOG_META_DATA_LENGTH))


@settings(deadline=None)
@given(INT32)
def test_initialize_publication_metadata(initial_term_id: int) -> None:
    meta = _meta()
    d.initialize_publication_metadata(
        meta, session_id=-5, stream_id=10, initial_term_id=initial_term_id, mtu_length=1408,
        term_length=64 * 1024, page_size=4096, correlation_id=99,
    )
    assert d.initial_term_id(meta) == initial_term_id
    assert d.mtu_length(meta) == 1408
    assert d.term_length(meta) == 64 * 1024
    assert d.page_size(meta) == 4096
    assert d.correlation_id(meta) == 99
    assert d.end_of_stream_position(meta) == 2**63 - 1
    assert meta.get_int(d.LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET) == 32
    assert d.default_frame_header(meta) == create_default_header(-5, 10, initial_term_id)
    assert d.active_term_count(meta) == 0
    assert d.raw_tail(meta, 0) == d.pack_tail(initial_term_id, 0)
    assert d.term_id(d.raw_tail(meta, 1)) == d.int32(initial_term_id - 2)
    assert d.term_id(d.raw_tail(meta, 2)) == d.int32(initial_term_id - 1)
    assert d.raw_tail_volatile(meta) == d.pack_tail(initial_term_id, 0)
    assert not d.is_connected(meta)


@settings(deadline=None)
@given(INT32, st.integers(min_value=0, max_value=1000), st.integers(min_value=0, max_value=2047))
def test_initialize_publication_metadata_at_position(initial: int, count: int, offset32: int) -> None:
    meta = _meta()
    term_id = d.int32(initial + count)
    d.initialize_publication_metadata(
        meta, session_id=1, stream_id=2, initial_term_id=initial, mtu_length=1408,
        term_length=64 * 1024, page_size=4096, correlation_id=1, term_id=term_id, term_offset=offset32 * 32,
    )
    index = count % 3
    assert d.active_term_count(meta) == count
    assert d.raw_tail(meta, index) == d.pack_tail(term_id, offset32 * 32)
    assert d.term_id(d.raw_tail(meta, (index + 1) % 3)) == d.int32(term_id - 2)
    assert d.term_id(d.raw_tail(meta, (index + 2) % 3)) == d.int32(term_id - 1)


def test_metadata_accessors_are_at_their_offsets() -> None:
    raw = bytearray(d.LOG_META_DATA_LENGTH)
    meta = AtomicBuffer(raw)
    d.set_is_connected(meta, True)
    d.set_end_of_stream_position(meta, 12345)
    d.set_active_term_count_ordered(meta, 7)
    d.set_correlation_id(meta, -3)
    d.set_mtu_length(meta, 4096)
    d.set_page_size(meta, 8192)
    d.set_term_length(meta, 1 << 20)
    d.set_initial_term_id(meta, -9)
    assert struct.unpack_from("<i", raw, 136)[0] == 1
    assert struct.unpack_from("<q", raw, 128)[0] == 12345
    assert struct.unpack_from("<i", raw, 24)[0] == 7
    assert struct.unpack_from("<q", raw, 256)[0] == -3
    assert struct.unpack_from("<iiii", raw, 264) == (-9, 0, 4096, 1 << 20)
    assert struct.unpack_from("<i", raw, 280)[0] == 8192
    assert d.is_connected(meta)
    d.set_is_connected(meta, False)
    assert not d.is_connected(meta)
    assert d.cas_active_term_count(meta, 7, 8)
    assert not d.cas_active_term_count(meta, 7, 9)
    d.set_active_term_count(meta, 1)
    assert d.active_term_count(meta) == 1


@settings(deadline=None)
@given(INT32, st.integers(min_value=0, max_value=2**31 - 13), st.integers(min_value=1, max_value=12))
def test_rotate_log_many_terms(initial: int, start_count: int, rotations: int) -> None:
    meta = _meta()
    start_id = d.int32(initial + start_count)
    d.initialize_publication_metadata(
        meta, session_id=1, stream_id=2, initial_term_id=initial, mtu_length=1408,
        term_length=64 * 1024, page_size=4096, correlation_id=1, term_id=start_id, term_offset=64,
    )
    count, term_id = start_count, start_id
    for _ in range(rotations):
        assert d.rotate_log(meta, count, term_id)
        count += 1
        term_id = d.int32(term_id + 1)
        assert d.active_term_count(meta) == d.int32(count)
        assert d.raw_tail_volatile(meta) == d.pack_tail(term_id, 0)
        # A second (racing) rotation for the same term does nothing.
        assert not d.rotate_log(meta, count - 1, d.int32(term_id - 1))
        assert d.raw_tail_volatile(meta) == d.pack_tail(term_id, 0)


def test_rotate_log_does_not_restamp_an_already_rotated_partition() -> None:
    meta = _meta()
    d.initialize_publication_metadata(
        meta, session_id=1, stream_id=2, initial_term_id=10, mtu_length=1408,
        term_length=64 * 1024, page_size=4096, correlation_id=1,
    )
    d.set_raw_tail(meta, 1, d.pack_tail(11, 96))  # already rotated and written to
    assert d.rotate_log(meta, 0, 10)
    assert d.raw_tail(meta, 1) == d.pack_tail(11, 96)
    assert d.active_term_count(meta) == 1


def test_raw_tail_setters_and_cas() -> None:
    meta = _meta()
    d.set_raw_tail_volatile(meta, 2, d.pack_tail(-1, 32))
    assert d.raw_tail_volatile(meta, 2) == d.pack_tail(-1, 32)
    assert d.cas_raw_tail(meta, 2, d.pack_tail(-1, 32), d.pack_tail(5, 0))
    assert not d.cas_raw_tail(meta, 2, d.pack_tail(-1, 32), d.pack_tail(6, 0))
    assert d.term_id(d.raw_tail(meta, 2)) == 5
    assert d.tail_counter_offset(2) == 16
    d.initialise_tail_with_term_id(meta, 0, 77)
    assert d.raw_tail(meta, 0) == 77 << 32


def test_store_default_frame_header_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="32"):
        d.store_default_frame_header(_meta(), b"\x00" * 31)


def test_apply_default_header() -> None:
    meta = _meta()
    d.store_default_frame_header(meta, create_default_header(3, 4, 5))
    term = AtomicBuffer(bytearray(1024))
    d.apply_default_header(meta, term, 64)
    assert term.get_bytes(64, 32) == create_default_header(3, 4, 5)


def test_initialize_image_metadata() -> None:
    meta = _meta()
    d.initialize_image_metadata(
        meta, session_id=1, stream_id=2, initial_term_id=3, mtu_length=8192,
        term_length=1 << 20, page_size=4096, correlation_id=5,
    )
    assert d.mtu_length(meta) == 8192
    assert d.end_of_stream_position(meta) == 2**63 - 1
    assert d.raw_tail(meta, 0) == 0
