from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.broadcast import (
    LATEST_COUNTER_OFFSET,
    PADDING_MSG_TYPE_ID,
    TAIL_COUNTER_OFFSET,
    TAIL_INTENT_COUNTER_OFFSET,
    TRAILER_LENGTH,
    BroadcastReceiveError,
    BroadcastReceiver,
    BroadcastTransmitter,
    CopyBroadcastReceiver,
)
from driver.errors import DriverConfigurationError, DriverError

CAPACITY = 1024


def make(capacity: int = CAPACITY) -> tuple[bytearray, AtomicBuffer, BroadcastTransmitter]:
    raw = bytearray(capacity + TRAILER_LENGTH)
    buf = AtomicBuffer(raw)
    return raw, buf, BroadcastTransmitter(buf)


def trailer(raw: bytearray, capacity: int = CAPACITY) -> tuple[int, int, int]:
    intent = struct.unpack_from("<q", raw, capacity + TAIL_INTENT_COUNTER_OFFSET)[0]
    tail = struct.unpack_from("<q", raw, capacity + TAIL_COUNTER_OFFSET)[0]
    latest = struct.unpack_from("<q", raw, capacity + LATEST_COUNTER_OFFSET)[0]
    return intent, tail, latest


def drain(copy: CopyBroadcastReceiver, limit: int = 10_000) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []

    def handler(msg_type_id: int, body: memoryview) -> None:
        got.append((msg_type_id, bytes(body)))

    for _ in range(limit):
        if copy.receive(handler) == 0:
            break
    return got


def test_constants() -> None:
    assert (TAIL_INTENT_COUNTER_OFFSET, TAIL_COUNTER_OFFSET, LATEST_COUNTER_OFFSET) == (0, 8, 16)
    assert TRAILER_LENGTH == 128


def test_capacity_checked() -> None:
    with pytest.raises(DriverConfigurationError):
        BroadcastTransmitter(AtomicBuffer(bytearray(1000 + TRAILER_LENGTH)))
    with pytest.raises(DriverConfigurationError):
        BroadcastReceiver(AtomicBuffer(bytearray(100)))


def test_transmit_layout() -> None:
    raw, _, tx = make()
    assert tx.max_msg_length == 128
    tx.transmit(9, b"hello")
    assert struct.unpack_from("<ii", raw, 0) == (13, 9)
    assert bytes(raw[8:13]) == b"hello"
    assert trailer(raw) == (16, 16, 0)
    tx.transmit(10, b"abcdef", 2, 3)
    assert struct.unpack_from("<ii", raw, 16) == (11, 10)
    assert bytes(raw[24:27]) == b"cde"
    assert trailer(raw) == (32, 32, 16)


def test_transmit_rejects_bad_input() -> None:
    _, _, tx = make()
    with pytest.raises(ValueError, match="msg_type_id"):
        tx.transmit(0, b"")
    with pytest.raises(ValueError, match="max_msg_length"):
        tx.transmit(1, bytes(129))


def test_receiver_reads_in_order() -> None:
    _, buf, tx = make()
    rx = BroadcastReceiver(buf)
    assert not rx.receive_next()
    tx.transmit(1, b"a")
    tx.transmit(2, b"bb")
    assert rx.receive_next()
    assert (rx.type_id, rx.length, rx.offset) == (1, 1, 8)
    assert rx.buffer.get_bytes(rx.offset, rx.length) == b"a"
    assert rx.validate()
    assert rx.receive_next()
    assert (rx.type_id, rx.buffer.get_bytes(rx.offset, rx.length)) == (2, b"bb")
    assert not rx.receive_next()
    assert rx.lapped_count == 0


def test_late_receiver_starts_at_latest() -> None:
    _, buf, tx = make()
    for i in range(3):
        tx.transmit(1, bytes([i]))
    rx = BroadcastReceiver(buf)
    assert rx.receive_next()  # latest is the third record; the receiver begins there
    assert rx.buffer.get_bytes(rx.offset, rx.length) == b"\x02"
    assert not rx.receive_next()


def test_padding_on_wrap() -> None:
    raw, buf, tx = make()
    copy = CopyBroadcastReceiver(BroadcastReceiver(buf))
    for _ in range(9):
        tx.transmit(1, bytes(100))  # 112 each: tail at 1008
    assert len(drain(copy)) == 9
    tx.transmit(2, b"wrapped-message-body")  # 32 aligned > the 16 left
    assert struct.unpack_from("<ii", raw, 1008) == (16, PADDING_MSG_TYPE_ID)
    assert struct.unpack_from("<ii", raw, 0) == (28, 2)
    assert trailer(raw) == (1056, 1056, 1024)
    assert drain(copy) == [(2, b"wrapped-message-body")]


def test_lapped_receiver_jumps_to_latest() -> None:
    _, buf, tx = make()
    rx = BroadcastReceiver(buf)
    for i in range(20):
        tx.transmit(1, bytes([i]) * 100)  # 2240 bytes: more than twice the capacity
    assert rx.receive_next()
    assert rx.lapped_count == 1
    assert rx.buffer.get_bytes(rx.offset, rx.length) == bytes([19]) * 100
    assert not rx.receive_next()


def test_copy_receiver_raises_when_lapped() -> None:
    _, buf, tx = make()
    copy = CopyBroadcastReceiver(BroadcastReceiver(buf))
    for i in range(20):
        tx.transmit(1, bytes([i]) * 100)
    with pytest.raises(BroadcastReceiveError, match="keep up") as info:
        drain(copy)
    assert isinstance(info.value, DriverError)
    # It resynchronised at latest: later messages flow again.
    tx.transmit(3, b"fresh")
    assert drain(copy) == [(3, b"fresh")]


def test_validate_fails_when_overwritten_after_receive() -> None:
    _, buf, tx = make()
    rx = BroadcastReceiver(buf)
    tx.transmit(1, b"x")
    assert rx.receive_next()
    assert rx.validate()
    for _ in range(10):
        tx.transmit(1, bytes(120))
    assert not rx.validate()


def test_copy_receiver_scratch_too_small() -> None:
    _, buf, tx = make()
    copy = CopyBroadcastReceiver(BroadcastReceiver(buf), scratch_length=8)
    tx.transmit(1, bytes(8))
    tx.transmit(1, bytes(9))
    assert drain(copy, 1) == [(1, bytes(8))]
    with pytest.raises(BroadcastReceiveError, match="scratch"):
        drain(copy)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=0, max_value=128), max_size=6), max_size=60))
def test_keeping_up_receiver_sees_everything(batches: list[list[int]]) -> None:
    """A receiver that drains after every few messages (less than capacity) misses nothing."""
    _, buf, tx = make()
    copy = CopyBroadcastReceiver(BroadcastReceiver(buf))
    expected: list[tuple[int, bytes]] = []
    got: list[tuple[int, bytes]] = []
    n = 0
    for batch in batches:
        for size in batch:
            n += 1
            body = (n.to_bytes(4, "little") * 33)[:size]
            tx.transmit(1 + n % 50, body)
            expected.append((1 + n % 50, body))
        got.extend(drain(copy))
    assert got == expected
    assert copy.receiver.lapped_count == 0
