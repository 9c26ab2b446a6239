from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import (
    COUNTER_LENGTH,
    FREE_FOR_REUSE_DEADLINE_OFFSET,
    KEY_OFFSET,
    LABEL_LENGTH_OFFSET,
    LABEL_OFFSET,
    MAX_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    METADATA_LENGTH,
    NOT_FREE_TO_REUSE,
    NULL_COUNTER_ID,
    RECORD_ALLOCATED,
    RECORD_RECLAIMED,
    RECORD_UNUSED,
    TYPE_ID_OFFSET,
    AtomicCounter,
    CountersFullError,
    CountersManager,
    CountersReader,
    Position,
)
from driver.errors import DriverError

N = 8


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def make(n: int = N, timeout_ms: int = 1000) -> tuple[bytearray, bytearray, CountersManager, FakeClock]:
    meta = bytearray(n * METADATA_LENGTH)
    values = bytearray(n * COUNTER_LENGTH)
    clock = FakeClock()
    manager = CountersManager(AtomicBuffer(meta), AtomicBuffer(values), clock, timeout_ms)
    return meta, values, manager, clock


def test_constants_match_agrona() -> None:
    assert (TYPE_ID_OFFSET, FREE_FOR_REUSE_DEADLINE_OFFSET, KEY_OFFSET) == (4, 8, 16)
    assert (LABEL_LENGTH_OFFSET, LABEL_OFFSET, MAX_LABEL_LENGTH, MAX_KEY_LENGTH) == (128, 132, 380, 112)
    assert (METADATA_LENGTH, COUNTER_LENGTH) == (512, 128)
    assert (RECORD_UNUSED, RECORD_ALLOCATED, RECORD_RECLAIMED) == (0, 1, -1)


def test_metadata_record_layout() -> None:
    meta, values, manager, _ = make()
    assert manager.allocate("first") == 0
    counter_id = manager.allocate("hello counter", 42, b"\x01\x02\x03")
    assert counter_id == 1
    base = counter_id * METADATA_LENGTH
    assert struct.unpack_from("<iiq", meta, base) == (RECORD_ALLOCATED, 42, NOT_FREE_TO_REUSE)
    assert bytes(meta[base + 16 : base + 20]) == b"\x01\x02\x03\x00"
    assert struct.unpack_from("<i", meta, base + 128)[0] == len("hello counter")
    assert bytes(meta[base + 132 : base + 132 + 13]) == b"hello counter"
    manager.set_counter_value(counter_id, -5)
    assert struct.unpack_from("<q", values, counter_id * COUNTER_LENGTH)[0] == -5
    reader = CountersReader(AtomicBuffer(meta), AtomicBuffer(values))
    assert reader.get_counter_value(counter_id) == -5
    assert reader.get_counter_state(counter_id) == RECORD_ALLOCATED
    assert reader.get_counter_type_id(counter_id) == 42
    assert reader.get_counter_label(counter_id) == "hello counter"
    assert reader.get_counter_key(counter_id) == b"\x01\x02\x03" + bytes(109)
    assert reader.free_for_reuse_deadline(counter_id) == NOT_FREE_TO_REUSE
    assert reader.max_counter_id == N


def test_label_truncated_and_ascii() -> None:
    _, _, manager, _ = make()
    counter_id = manager.allocate("x" * 500)
    assert manager.get_counter_label(counter_id) == "x" * MAX_LABEL_LENGTH
    counter_id = manager.allocate("caf\u00e9 \u2603")
    assert manager.get_counter_label(counter_id) == "caf? ?"


def test_key_too_long_rejected() -> None:
    _, _, manager, _ = make()
    with pytest.raises(ValueError, match="key length"):
        manager.allocate("k", 1, bytes(MAX_KEY_LENGTH + 1))
    assert manager.allocate("k", 1, bytes(range(MAX_KEY_LENGTH))) == 0
    assert manager.get_counter_key(0) == bytes(range(MAX_KEY_LENGTH))


def test_free_then_reuse_only_after_deadline() -> None:
    meta, _, manager, clock = make()
    a = manager.allocate("a", 1, b"\xff" * 8)
    b = manager.allocate("b")
    manager.set_counter_value(a, 77)
    manager.free(a)
    assert manager.get_counter_state(a) == RECORD_RECLAIMED
    assert manager.free_for_reuse_deadline(a) == clock.now + 1000
    clock.now += 999
    c = manager.allocate("c")
    assert c not in (a, b)
    clock.now += 1
    d = manager.allocate("d", 2)
    assert d == a
    assert manager.get_counter_value(d) == 0  # reset on reuse
    assert manager.get_counter_key(d) == bytes(MAX_KEY_LENGTH)  # stale key cleared
    assert manager.get_counter_label(d) == "d"
    assert manager.get_counter_state(d) == RECORD_ALLOCATED
    assert struct.unpack_from("<q", meta, d * METADATA_LENGTH + 8)[0] == NOT_FREE_TO_REUSE


def test_full_raises_driver_error() -> None:
    _, _, manager, clock = make(n=2)
    manager.allocate("a")
    manager.allocate("b")
    with pytest.raises(CountersFullError) as info:
        manager.allocate("c")
    assert isinstance(info.value, DriverError)
    manager.free(1)
    with pytest.raises(CountersFullError):
        manager.allocate("c")  # not yet past the deadline
    clock.now += 1000
    assert manager.allocate("c") == 1


def test_metadata_must_be_large_enough() -> None:
    with pytest.raises(ValueError, match="metadata length"):
        CountersManager(AtomicBuffer(bytearray(100)), AtomicBuffer(bytearray(128)))


def test_reader_rejects_bad_ids() -> None:
    _, _, manager, _ = make()
    for bad in (-1, N):
        with pytest.raises(ValueError, match="counter_id"):
            manager.get_counter_value(bad)
        with pytest.raises(ValueError, match="counter_id"):
            manager.get_counter_label(bad)


def test_for_each_skips_reclaimed_and_stops_at_unused() -> None:
    meta, _, manager, _ = make()
    for i in range(4):
        manager.allocate(f"c{i}", 10 + i, struct.pack("<q", 100 + i))
    manager.free(1)
    # A record beyond the first unused one must not be visited (Agrona stops there).
    struct.pack_into("<i", meta, 5 * METADATA_LENGTH, RECORD_ALLOCATED)
    seen: list[tuple[int, int, bytes, str]] = []
    manager.for_each(lambda cid, tid, key, label: seen.append((cid, tid, key[:8], label)))
    assert seen == [
        (0, 10, struct.pack("<q", 100), "c0"),
        (2, 12, struct.pack("<q", 102), "c2"),
        (3, 13, struct.pack("<q", 103), "c3"),
    ]
    assert manager.find_by_type_id_and_registration_id(12, 102) == 2
    assert manager.find_by_type_id_and_registration_id(11, 101) == NULL_COUNTER_ID


def test_ids_by_registration_id_is_one_scan_of_a_type() -> None:
    meta, _, manager, _ = make()
    for i in range(6):
        manager.allocate(f"c{i}", 3 if i % 2 else 4, struct.pack("<q", 200 + i))
    manager.free(3)
    # A record of the type beyond the first unused one is not visited.
    struct.pack_into("<iiqq", meta, 7 * METADATA_LENGTH, RECORD_ALLOCATED, 3, 0, 207)
    assert manager.ids_by_registration_id(3) == {201: 1, 205: 5}
    assert manager.ids_by_registration_id(4) == {200: 0, 202: 2, 204: 4}
    assert manager.ids_by_registration_id(99) == {}


def test_atomic_counter_operations() -> None:
    _, values, manager, _ = make()
    counter = manager.new_counter("ops")
    assert counter.increment() == 0
    assert counter.increment() == 1
    assert counter.get_and_add(10) == 2
    assert counter.get() == counter.get_volatile() == counter.get_weak() == 12
    counter.set(5)
    assert counter.get() == 5
    counter.set_ordered(6)
    assert counter.increment_ordered() == 6
    assert counter.get_and_add_ordered(3) == 7
    assert counter.get() == 10
    assert counter.propose_max_ordered(20)
    assert not counter.propose_max_ordered(20)
    assert not counter.propose_max(3)
    assert counter.propose_max(21)
    assert counter.compare_and_set(21, 22)
    assert not counter.compare_and_set(21, 23)
    assert struct.unpack_from("<q", values, counter.id * COUNTER_LENGTH)[0] == 22
    counter.set_weak(-1)
    counter.set_volatile(-2)
    assert manager.get_counter_value(counter.id) == -2
    assert "id=0" in repr(counter)


def test_close_frees_once_via_manager() -> None:
    _, _, manager, _ = make()
    counter = manager.new_counter("closing")
    other = AtomicCounter(manager.values_buffer, counter.id)  # no manager: close is a no-op
    counter.close()
    counter.close()
    assert counter.is_closed
    assert manager.get_counter_state(counter.id) == RECORD_RECLAIMED
    assert list(manager._free_list) == [counter.id]
    other.close()
    assert list(manager._free_list) == [counter.id]


def test_position_alias_and_bounds() -> None:
    _, _, manager, _ = make()
    pos = Position(manager.values_buffer, manager.allocate("pos"), manager)
    pos.set_ordered(4096)
    assert pos.get_volatile() == 4096
    assert pos.propose_max_ordered(8192)
    assert pos.id == 0
    with pytest.raises(ValueError, match="counter_id"):
        AtomicCounter(manager.values_buffer, N)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=3000)), max_size=60))
def test_ids_unique_and_reused_only_after_deadline(ops: list[tuple[bool, int]]) -> None:
    _, _, manager, clock = make(n=16, timeout_ms=500)
    live: set[int] = set()
    freed_at: dict[int, int] = {}
    for allocate, advance in ops:
        clock.now += advance % 700
        if allocate or not live:
            try:
                counter_id = manager.allocate("x")
            except CountersFullError:
                continue
            assert counter_id not in live
            if counter_id in freed_at:
                assert clock.now >= freed_at.pop(counter_id) + 500
            live.add(counter_id)
        else:
            counter_id = min(live)
            live.remove(counter_id)
            manager.free(counter_id)
            freed_at[counter_id] = clock.now
