from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logbuffer_helpers import MemoryLog, MiniPublication, MiniSubscriber, check_message, make_message

from driver.errors import DriverError
from driver.logbuffer import descriptor as d
from driver.logbuffer.appender import (
    EXCLUSIVE_FAILED,
    FAILED,
    ExclusiveTermAppender,
    TermAppender,
    fragmented_required_length,
)
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.frame import HeaderWriter
from driver.logbuffer.header import BufferClaim, Header
from driver.logbuffer.offer_result import ADMIN_ACTION
from driver.logbuffer.reader import read

TL = 64 * 1024
FRAME = struct.Struct("<iBBHiiiiq")


def _frame(log: MemoryLog, index: int, offset: int) -> tuple[int, ...]:
    return FRAME.unpack_from(log.raw, index * log.term_length + offset)


def _payload(log: MemoryLog, index: int, offset: int, length: int) -> bytes:
    start = index * log.term_length + offset + 32
    return bytes(log.raw[start : start + length])


def _setup(initial_term_id: int = 5, **kwargs: int) -> tuple[MemoryLog, HeaderWriter, TermAppender]:
    log = MemoryLog(TL, initial_term_id=initial_term_id, session_id=77, stream_id=88, **kwargs)
    header = HeaderWriter(d.default_frame_header(log.metadata))
    return log, header, TermAppender(log.terms[0], log.metadata, 0, log.term_views[0])


def _read_all(log: MemoryLog, index: int, offset: int = 0) -> list[tuple[int, int, bytes]]:
    out: list[tuple[int, int, bytes]] = []
    header = Header(d.initial_term_id(log.metadata), 16)
    read(
        log.terms[index], offset,
        lambda p, h: out.append((h.offset, h.flags, bytes(p))),
        1 << 30, header, None, log.term_views[index],
    )
    return out


def test_append_unfragmented_layout() -> None:
    log, header, appender = _setup()
    assert appender.append_unfragmented(header, b"hello world", 0, 5, None, 5) == 64
    assert appender.append_unfragmented(header, b"hello world", 6, 5, None, 5) == 128
    assert _frame(log, 0, 0) == (37, 0, 0xC0, 1, 0, 77, 88, 5, 0)
    assert _frame(log, 0, 64) == (37, 0, 0xC0, 1, 64, 77, 88, 5, 0)
    assert _payload(log, 0, 0, 5) == b"hello"
    assert _payload(log, 0, 64, 5) == b"world"
    assert d.raw_tail(log.metadata, 0) == d.pack_tail(5, 128)
    assert appender.raw_tail_volatile() == d.pack_tail(5, 128)


def test_reserved_value_supplier_sees_the_frame() -> None:
    log, header, appender = _setup()
    seen: list[tuple[int, int, bytes]] = []

    def supplier(view: memoryview, offset: int, length: int) -> int:
        seen.append((offset, length, bytes(view[offset + 32 : offset + length])))
        return -123456789

    appender.append_unfragmented(header, b"abc", 0, 3, None, 5)
    assert appender.append_unfragmented(header, b"xyz", 0, 3, supplier, 5) == 128
    assert seen == [(64, 35, b"xyz")]
    assert _frame(log, 0, 64)[-1] == -123456789


@settings(deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=1376), min_size=1, max_size=40))
def test_appends_are_read_back_in_order(lengths: list[int]) -> None:
    log, header, appender = _setup()
    expected = []
    offset = 0
    for i, length in enumerate(lengths):
        message = bytes([i & 0xFF]) * length
        result = appender.append_unfragmented(header, message, 0, length, None, 5)
        offset += (length + 32 + 31) & ~31
        assert result == offset
        expected.append(message)
    assert [p for _, _, p in _read_all(log, 0)] == expected


def test_padding_at_end_of_term() -> None:
    log, header, appender = _setup(term_id=5, term_offset=TL - 96)
    assert appender.append_unfragmented(header, bytes(40), 0, 40, None, 5) == TL - 96 + 96
    # Exactly filled: the next append starts at the end and just fails.
    assert appender.append_unfragmented(header, bytes(1), 0, 1, None, 5) == FAILED
    assert d.raw_tail(log.metadata, 0) == d.pack_tail(5, TL + 64)

    log, header, appender = _setup(term_id=5, term_offset=TL - 96)
    assert appender.append_unfragmented(header, bytes(100), 0, 100, None, 5) == FAILED
    assert _frame(log, 0, TL - 96) == (96, 0, 0xC0, 0, TL - 96, 77, 88, 5, 0)
    assert d.raw_tail(log.metadata, 0) == d.pack_tail(5, TL - 96 + 160)
    # A writer whose claim starts past the end writes nothing.
    before = bytes(log.raw[: 3 * TL])
    assert appender.append_unfragmented(header, bytes(10), 0, 10, None, 5) == FAILED
    assert bytes(log.raw[: 3 * TL]) == before
    # The reader consumes the pad without delivering it and ends at the term end.
    fragments, end = read(log.terms[0], TL - 96, lambda p, h: None, 10, Header(5, 16))
    assert (fragments, end) == (0, TL)


def test_term_id_mismatch_raises() -> None:
    _log, header, appender = _setup()
    with pytest.raises(DriverError, match="action possibly delayed"):
        appender.append_unfragmented(header, b"x", 0, 1, None, 6)


@settings(deadline=None)
@given(
    st.integers(min_value=1, max_value=8192),
    st.integers(min_value=2, max_value=44).map(lambda n: n * 32 - 32),
    st.integers(min_value=0, max_value=20),
)
def test_fragmented_layout(length: int, max_payload: int, slot: int) -> None:
    log, header, appender = _setup(term_id=5, term_offset=slot * 32)
    message = bytes((i * 7) & 0xFF for i in range(length))
    result = appender.append_fragmented(header, message, 0, length, max_payload, None, 5)
    required = fragmented_required_length(length, max_payload)
    assert result == slot * 32 + required
    frames = _read_all(log, 0, slot * 32)
    count = -(-length // max_payload)
    assert len(frames) == count
    offset = slot * 32
    for i, (frame_offset, flags, payload) in enumerate(frames):
        assert frame_offset == offset
        expected_flags = (0x80 if i == 0 else 0) | (0x40 if i == count - 1 else 0)
        assert flags == expected_flags
        if i < count - 1:
            assert len(payload) == max_payload
        fields = _frame(log, 0, frame_offset)
        assert fields[4:8] == (frame_offset, 77, 88, 5)
        offset += (len(payload) + 63) & ~31
    assert b"".join(p for _, _, p in frames) == message
    assert offset == result


def test_fragmented_with_source_offset_and_reserved_value() -> None:
    log, header, appender = _setup()
    src = b"__" + bytes(range(200)) + b"__"
    calls: list[int] = []

    def supplier(_view: memoryview, offset: int, _length: int) -> int:
        calls.append(offset)
        return offset + 1

    assert appender.append_fragmented(header, src, 2, 200, 64, supplier, 5) == 3 * 96 + 64
    assert calls == [0, 96, 192, 288]
    assert [_frame(log, 0, o)[-1] for o in calls] == [1, 97, 193, 289]
    assert b"".join(p for _, _, p in _read_all(log, 0)) == bytes(range(200))


def test_fragmented_pads_when_it_does_not_fit() -> None:
    log, header, appender = _setup(term_id=5, term_offset=TL - 256)
    assert appender.append_fragmented(header, bytes(500), 0, 500, 224, None, 5) == FAILED
    assert _frame(log, 0, TL - 256)[:4] == (256, 0, 0xC0, 0)


def test_claim_commit() -> None:
    log, header, appender = _setup()
    claim = BufferClaim()
    assert appender.claim(header, 10, claim, 5) == 64
    assert claim.length == 10
    assert claim.offset == 32
    assert claim.frame_offset == 0
    assert len(claim.buffer) == 10
    assert _frame(log, 0, 0)[0] == -42  # claimed, not visible to readers
    assert _read_all(log, 0) == []
    claim.buffer[:] = b"0123456789"
    claim.reserved_value = 99
    assert claim.reserved_value == 99
    assert claim.header_type == 1
    assert claim.flags == 0xC0
    claim.commit()
    assert _read_all(log, 0) == [(0, 0xC0, b"0123456789")]
    assert _frame(log, 0, 0)[-1] == 99
    with pytest.raises(ValueError, match="not wrapped"):
        claim.commit()


def test_claim_abort_becomes_padding() -> None:
    log, header, appender = _setup()
    claim = BufferClaim()
    appender.claim(header, 10, claim, 5)
    claim.put_bytes(b"abcdefghij")
    appender.append_unfragmented(header, b"next", 0, 4, None, 5)
    assert _read_all(log, 0) == []  # blocked behind the claim
    claim.abort()
    assert _frame(log, 0, 0)[:4] == (42, 0, 0xC0, 0)
    assert _read_all(log, 0) == [(64, 0xC0, b"next")]


def test_claim_flags_and_type_setters() -> None:
    log, header, appender = _setup()
    claim = BufferClaim()
    appender.claim(header, 0, claim, 5)
    claim.flags = 0xE0
    claim.header_type = 1
    claim.commit()
    assert _frame(log, 0, 0)[:4] == (32, 0, 0xE0, 1)


def test_claim_at_end_of_term_pads() -> None:
    log, header, appender = _setup(term_id=5, term_offset=TL - 32)
    claim = BufferClaim()
    assert appender.claim(header, 1, claim, 5) == FAILED
    assert _frame(log, 0, TL - 32)[:4] == (32, 0, 0xC0, 0)


@settings(deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=30), st.integers(0, 10))
def test_batch_matches_single_appends(lengths: list[int], slot: int) -> None:
    messages = [bytes([(i + 1) & 0xFF]) * n for i, n in enumerate(lengths)]
    log_a, header_a, appender_a = _setup(term_id=5, term_offset=slot * 32)
    log_b, header_b, appender_b = _setup(term_id=5, term_offset=slot * 32)
    result = appender_a.append_unfragmented_batch(header_a, messages, 5)
    single = 0
    for m in messages:
        single = appender_b.append_unfragmented(header_b, m, 0, len(m), None, 5)
    assert result == single
    assert log_a.raw == log_b.raw
    assert [p for _, _, p in _read_all(log_a, 0, slot * 32)] == messages


def test_batch_is_all_or_nothing_at_term_end() -> None:
    log, header, appender = _setup(term_id=5, term_offset=TL - 128)
    assert appender.append_unfragmented_batch(header, [b"a", b"b", b"c"], 5) == FAILED
    assert _frame(log, 0, TL - 128)[:4] == (128, 0, 0xC0, 0)
    assert _read_all(log, 0, TL - 128) == []
    with pytest.raises(DriverError):
        appender.append_unfragmented_batch(header, [b"a"], 4)


# --- exclusive ------------------------------------------------------------------------------


def test_exclusive_matches_concurrent_layout() -> None:
    log_a, header_a, appender_a = _setup()
    log_b, header_b, _ = _setup()
    exclusive = ExclusiveTermAppender(log_b.terms[0], log_b.metadata, 0, log_b.term_views[0])
    claim_a, claim_b = BufferClaim(), BufferClaim()
    steps_a = [
        appender_a.append_unfragmented(header_a, b"one", 0, 3, None, 5),
        appender_a.append_fragmented(header_a, bytes(range(100)), 0, 100, 32, None, 5),
        appender_a.claim(header_a, 5, claim_a, 5),
        appender_a.append_unfragmented_batch(header_a, [b"x", b"yy"], 5),
    ]
    claim_a.put_bytes(b"claim")
    claim_a.commit()
    offset = 0
    steps_b = []
    offset = exclusive.append_unfragmented(5, offset, header_b, b"one", 0, 3, None)
    steps_b.append(offset)
    offset = exclusive.append_fragmented(5, offset, header_b, bytes(range(100)), 0, 100, 32, None)
    steps_b.append(offset)
    offset = exclusive.claim(5, offset, header_b, 5, claim_b)
    steps_b.append(offset)
    offset = exclusive.append_unfragmented_batch(5, offset, header_b, [b"x", b"yy"])
    steps_b.append(offset)
    claim_b.put_bytes(b"claim")
    claim_b.commit()
    assert steps_a == steps_b
    assert log_a.raw == log_b.raw
    assert d.raw_tail(log_b.metadata, 0) == d.pack_tail(5, offset)


def test_exclusive_padding_and_end_of_term() -> None:
    log, header, _ = _setup()
    exclusive = ExclusiveTermAppender(log.terms[0], log.metadata, 0)
    assert exclusive.append_padding(5, 0, header, 100) == 160
    assert _frame(log, 0, 0)[:4] == (132, 0, 0xC0, 0)
    assert _read_all(log, 0) == []
    assert exclusive.append_unfragmented(5, TL - 64, header, bytes(40), 0, 40, None) == EXCLUSIVE_FAILED
    assert _frame(log, 0, TL - 64)[:4] == (64, 0, 0xC0, 0)
    assert d.raw_tail(log.metadata, 0) == d.pack_tail(5, TL - 64 + 96)
    claim = BufferClaim()
    assert exclusive.claim(5, TL, header, 1, claim) == EXCLUSIVE_FAILED
    assert exclusive.append_padding(5, TL, header, 1) == EXCLUSIVE_FAILED
    assert exclusive.append_fragmented(5, TL, header, bytes(100), 0, 100, 32, None) == EXCLUSIVE_FAILED
    assert exclusive.append_unfragmented_batch(5, TL, header, [b"a"]) == EXCLUSIVE_FAILED


def test_appender_bounds_checks_partition() -> None:
    log = MemoryLog(TL)
    with pytest.raises(IndexError):
        TermAppender(log.terms[0], log.metadata, 600)


# --- rotation across many terms -------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([0, 2**31 - 3, -(2**31), -7, 123456]),
    st.lists(st.integers(min_value=1, max_value=3000), min_size=50, max_size=400),
    st.booleans(),
)
def test_rotation_over_many_terms(initial_term_id: int, lengths: list[int], use_batches: bool) -> None:
    log = MemoryLog(TL, initial_term_id=initial_term_id, mtu=1024)
    publication = MiniPublication(log.terms, log.term_views, log.metadata)
    subscriber = MiniSubscriber(log.terms, log.term_views, log.metadata)
    received: list[tuple[int, int]] = []
    assembler = FragmentAssembler(lambda p, h: received.append(check_message(p)))
    pending = [make_message(0, i, n) for i, n in enumerate(lengths)]
    # Enough bytes for several terms: repeat the list until > 4 terms were written.
    total_bytes = sum(fragmented_required_length(len(m), 992) for m in pending)
    repeats = max(1, (4 * TL) // max(total_bytes, 1) + 1)
    messages = [make_message(0, i, len(pending[i % len(pending)])) for i in range(len(pending) * repeats)]
    sent = 0
    index = 0
    for _ in range(len(messages) * 4 + 100):
        if index >= len(messages):
            break
        if use_batches and len(messages[index]) <= 992:
            batch = []
            for m in messages[index : index + 5]:
                if len(m) > 992:
                    break
                batch.append(m)
            result = publication.offer_batch(batch)
            count = len(batch)
        else:
            result = publication.offer(messages[index])
            count = 1
        if result > 0:
            index += count
            sent = result
        else:
            assert result == ADMIN_ACTION
        subscriber.poll(assembler, 1000)
    assert index == len(messages)
    for _ in range(100):
        if subscriber.poll(assembler, 1000) == 0:
            break
    assert received == [(0, i) for i in range(len(messages))]
    assert subscriber.position == sent == publication.position
    # a stream ending exactly on a term boundary has not rotated yet: rotation happens on the next append
    assert d.active_term_count(log.metadata) == (sent - 1) >> 16
    active_id = d.term_id(d.raw_tail_volatile(log.metadata))
    assert active_id == d.int32(initial_term_id + ((sent - 1) >> 16))
