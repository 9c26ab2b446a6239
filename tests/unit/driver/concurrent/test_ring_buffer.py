from __future__ import annotations

import collections
import mmap
import multiprocessing
import struct
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.ring_buffer import (
    CONSUMER_HEARTBEAT_OFFSET,
    CORRELATION_COUNTER_OFFSET,
    HEAD_CACHE_POSITION_OFFSET,
    HEAD_POSITION_OFFSET,
    PADDING_MSG_TYPE_ID,
    TAIL_POSITION_OFFSET,
    TRAILER_LENGTH,
    ManyToOneRingBuffer,
)
from driver.errors import DriverConfigurationError

CAPACITY = 1024


def make_ring(capacity: int = CAPACITY) -> tuple[bytearray, ManyToOneRingBuffer]:
    raw = bytearray(capacity + TRAILER_LENGTH)
    return raw, ManyToOneRingBuffer(AtomicBuffer(raw))


def read_all(ring: ManyToOneRingBuffer, limit: int = 1 << 30) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []

    def handler(msg_type_id: int, buffer: AtomicBuffer, index: int, length: int) -> None:
        got.append((msg_type_id, buffer.get_bytes(index, length)))

    ring.read(handler, limit)
    return got


def test_trailer_constants_match_agrona() -> None:
    assert (TAIL_POSITION_OFFSET, HEAD_CACHE_POSITION_OFFSET, HEAD_POSITION_OFFSET) == (128, 256, 384)
    assert (CORRELATION_COUNTER_OFFSET, CONSUMER_HEARTBEAT_OFFSET, TRAILER_LENGTH) == (512, 640, 768)
    assert PADDING_MSG_TYPE_ID == -1


def test_capacity_must_be_power_of_two_plus_trailer() -> None:
    with pytest.raises(DriverConfigurationError):
        ManyToOneRingBuffer(AtomicBuffer(bytearray(1000 + TRAILER_LENGTH)))
    with pytest.raises(DriverConfigurationError):
        ManyToOneRingBuffer(AtomicBuffer(bytearray(TRAILER_LENGTH)))
    _, ring = make_ring()
    assert ring.capacity == CAPACITY
    assert ring.max_msg_length == CAPACITY // 8


def test_record_layout_at_exact_offsets() -> None:
    raw, ring = make_ring()
    assert ring.write(7, b"hello")
    assert struct.unpack_from("<ii", raw, 0) == (13, 7)
    assert bytes(raw[8:13]) == b"hello"
    assert struct.unpack_from("<q", raw, CAPACITY + TAIL_POSITION_OFFSET)[0] == 16
    assert ring.write(8, b"xyzw", 1, 2)
    assert struct.unpack_from("<ii", raw, 16) == (10, 8)
    assert bytes(raw[24:26]) == b"yz"
    assert ring.producer_position() == 32
    assert ring.size() == 32


def test_write_rejects_bad_type_and_length() -> None:
    _, ring = make_ring()
    with pytest.raises(ValueError, match="msg_type_id"):
        ring.write(0, b"x")
    with pytest.raises(ValueError, match="max_msg_length"):
        ring.write(1, bytes(ring.max_msg_length + 1))
    assert ring.write(1, bytes(ring.max_msg_length))
    assert ring.write(1, memoryview(b"abc"))
    assert ring.write(1, b"")
    assert ring.write(2, bytearray(b"abcdef"), 2)  # length -1: the rest after offset
    assert ring.write(3, memoryview(b"abcdef")[1:], 1)
    assert read_all(ring)[-2:] == [(2, b"cdef"), (3, b"cdef")]


def test_read_dispatches_zeroes_and_advances_head() -> None:
    raw, ring = make_ring()
    ring.write(1, b"one")
    ring.write(2, b"two!")
    seen: list[tuple[int, int, int]] = []

    def handler(msg_type_id: int, buffer: AtomicBuffer, index: int, length: int) -> None:
        assert buffer is ring.buffer
        seen.append((msg_type_id, index, length))

    assert ring.read(handler) == 2
    assert seen == [(1, 8, 3), (2, 24, 4)]
    assert bytes(raw[:CAPACITY]) == bytes(CAPACITY)
    assert ring.consumer_position() == 32
    assert struct.unpack_from("<q", raw, CAPACITY + HEAD_POSITION_OFFSET)[0] == 32
    assert ring.size() == 0
    assert ring.read(handler) == 0


def test_message_count_limit() -> None:
    _, ring = make_ring()
    for i in range(5):
        ring.write(1, bytes([i]))
    assert [body for _, body in read_all(ring, 2)] == [b"\x00", b"\x01"]
    assert [body for _, body in read_all(ring)] == [b"\x02", b"\x03", b"\x04"]


def test_handler_exception_keeps_head_update() -> None:
    _, ring = make_ring()
    for i in range(3):
        ring.write(1, bytes([i]))
    calls: list[int] = []

    def handler(msg_type_id: int, buffer: AtomicBuffer, index: int, length: int) -> None:
        calls.append(buffer.get_ubyte(index))
        if len(calls) == 2:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        ring.read(handler)
    assert ring.consumer_position() == 32  # both dispatched records are consumed
    assert [body for _, body in read_all(ring)] == [b"\x02"]


def test_wrap_inserts_padding_record() -> None:
    raw, ring = make_ring()
    body = bytes(range(100))
    # 9 records of 112 bytes = 1008; the tail sits 16 bytes before the end.
    for _ in range(9):
        assert ring.write(3, body)
    assert len(read_all(ring)) == 9
    message = b"wrapped-message-body"  # 28-byte record, 32 aligned: does not fit the 16 left
    assert ring.write(4, message)
    assert struct.unpack_from("<ii", raw, 1008) == (16, PADDING_MSG_TYPE_ID)
    assert struct.unpack_from("<ii", raw, 0) == (28, 4)
    assert bytes(raw[8:28]) == message
    assert ring.producer_position() == 1008 + 16 + 32
    # First read consumes the padding up to the end of the buffer, the next one the message.
    assert read_all(ring) == []
    assert ring.consumer_position() == 1024
    assert read_all(ring) == [(4, message)]
    assert ring.consumer_position() == 1056


def test_full_ring_returns_false_until_read() -> None:
    _, ring = make_ring()
    body = bytes(120)  # 128-byte records: exactly 8 fit
    for _ in range(8):
        assert ring.write(1, body)
    assert not ring.write(1, b"")
    assert len(read_all(ring, 1)) == 1
    assert ring.write(1, body)
    assert not ring.write(1, body)
    assert len(read_all(ring)) == 7
    assert len(read_all(ring)) == 1


def test_wrap_needs_room_before_head() -> None:
    _, ring = make_ring(2048)
    for _ in range(15):
        assert ring.write(1, bytes(120))
    assert ring.write(1, bytes(56))  # tail at 1984, 64 bytes to the end
    assert len(read_all(ring, 1)) == 1  # head at 128
    assert not ring.write(1, bytes(192))  # 200 > the 192 free bytes
    assert not ring.write(1, bytes(128))  # 136 fits in total but neither at the end (64) nor before head
    assert ring.write(1, bytes(112))  # 120: pad the 64 to the end, write at 0
    assert ring.producer_position() == 1984 + 64 + 120
    assert len(read_all(ring)) == 15
    assert read_all(ring) == [(1, bytes(112))]
    assert ring.size() == 0


def test_correlation_ids_and_heartbeat() -> None:
    raw, ring = make_ring()
    assert [ring.next_correlation_id() for _ in range(3)] == [0, 1, 2]
    assert struct.unpack_from("<q", raw, CAPACITY + CORRELATION_COUNTER_OFFSET)[0] == 3
    ring.set_consumer_heartbeat_time(123456789)
    assert ring.consumer_heartbeat_time() == 123456789
    assert struct.unpack_from("<q", raw, CAPACITY + CONSUMER_HEARTBEAT_OFFSET)[0] == 123456789


def test_unblock_nothing_to_do() -> None:
    _, ring = make_ring()
    assert not ring.unblock()
    ring.write(1, b"x")
    assert not ring.unblock()  # a complete record is not blocked


def test_unblock_record_abandoned_mid_write() -> None:
    raw, ring = make_ring()
    buf = ring.buffer
    # A producer claimed 24 bytes for a 20-byte record, stored -length, then died.
    assert buf.compare_and_set_long(CAPACITY + TAIL_POSITION_OFFSET, 0, 24)
    buf.put_int_ordered(0, -20)
    ring.write(5, b"after")
    assert read_all(ring) == []
    assert ring.unblock()
    assert struct.unpack_from("<ii", raw, 0) == (20, PADDING_MSG_TYPE_ID)
    assert read_all(ring) == [(5, b"after")]


def test_unblock_record_claimed_but_never_started() -> None:
    raw, ring = make_ring()
    buf = ring.buffer
    assert buf.compare_and_set_long(CAPACITY + TAIL_POSITION_OFFSET, 0, 24)
    ring.write(6, b"next")
    assert ring.unblock()
    assert struct.unpack_from("<ii", raw, 0) == (24, PADDING_MSG_TYPE_ID)
    assert read_all(ring) == [(6, b"next")]


def test_unblock_zero_length_with_nothing_after() -> None:
    _, ring = make_ring()
    assert ring.buffer.compare_and_set_long(CAPACITY + TAIL_POSITION_OFFSET, 0, 24)
    assert not ring.unblock()  # nothing beyond the stuck slot to bound it


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("w"), st.integers(min_value=0, max_value=128)),
            st.tuples(st.just("r"), st.integers(min_value=1, max_value=8)),
        ),
        max_size=200,
    )
)
def test_model_fifo(ops: list[tuple[str, int]]) -> None:
    _, ring = make_ring()
    model: collections.deque[bytes] = collections.deque()
    counter = 0
    for op, n in ops:
        if op == "w":
            counter += 1
            body = counter.to_bytes(4, "little") * (n // 4 + 1)
            body = body[:n]
            head, tail = ring.consumer_position(), ring.producer_position()
            required = (n + 15) & -8
            to_end = CAPACITY - tail % CAPACITY
            fits = required <= CAPACITY - (tail - head) and (required <= to_end or required <= head % CAPACITY)
            assert ring.write(1 + counter % 100, body) == fits
            if fits:
                model.append(body)
        else:
            got = read_all(ring, n)
            for _, body in got:
                assert body == model.popleft()
    for _ in range(4):
        for _, body in read_all(ring):
            assert body == model.popleft()
    assert not model
    assert ring.size() == 0


# --- cross-process ---------------------------------------------------------------------------

RING_CAPACITY = 64 * 1024
MESSAGES_PER_PRODUCER = 5000


def _producer(path: str, producer_id: int, count: int, deadline_s: float) -> None:
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        ring = ManyToOneRingBuffer(AtomicBuffer(m))
        end = time.monotonic() + deadline_s
        seq = 0
        payload = struct.Struct("<ii")
        while seq < count and time.monotonic() < end:
            body = payload.pack(producer_id, seq) + bytes(seq % 24)
            if ring.write(producer_id, body):
                seq += 1
        ring.buffer.release()


@pytest.mark.process
def test_two_processes_write_one_ring(tmp_path: Path) -> None:
    path = tmp_path / "ring.dat"
    path.write_bytes(bytes(RING_CAPACITY + TRAILER_LENGTH))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_producer, args=(str(path), pid, MESSAGES_PER_PRODUCER, 60.0)) for pid in (1, 2)]
    next_seq = {1: 0, 2: 0}
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        buf = AtomicBuffer(m)
        ring = ManyToOneRingBuffer(buf)

        def handler(msg_type_id: int, buffer: AtomicBuffer, index: int, length: int) -> None:
            producer_id = buffer.get_int(index)
            seq = buffer.get_int(index + 4)
            assert producer_id == msg_type_id
            assert seq == next_seq[producer_id], "lost, duplicated or reordered message"
            assert length == 8 + seq % 24
            next_seq[producer_id] = seq + 1

        for p in procs:
            p.start()
        try:
            end = time.monotonic() + 90
            total = 2 * MESSAGES_PER_PRODUCER
            while sum(next_seq.values()) < total and time.monotonic() < end:
                if ring.read(handler, 1000) == 0:
                    time.sleep(0.0005)
            ring.read(handler)
            assert next_seq == {1: MESSAGES_PER_PRODUCER, 2: MESSAGES_PER_PRODUCER}
            assert ring.size() == 0
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=5)
            buf.release()
        assert all(p.exitcode == 0 for p in procs)
