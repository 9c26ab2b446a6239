"""CorrelationPool: bounded slots, ids never 0, stale generations told apart after reuse, FIFO reuse, drain.

Pure data structure: no I/O, no clock, so every test here is deterministic.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint.rpc.correlation import SLOT_BITS, CorrelationPool

SLOT_MASK = (1 << SLOT_BITS) - 1


def slot_of(correlation_id: int) -> int:
    return correlation_id & SLOT_MASK


def generation_of(correlation_id: int) -> int:
    return correlation_id >> SLOT_BITS


def internal_lengths(pool: CorrelationPool[Any]) -> tuple[int, int, int]:
    """Lengths of the pool's internal lists (values, generations, free slots): what bounds its memory."""
    return len(pool._values), len(pool._generations), len(pool._free)


# ------------------------------------------------------------------------------------------------ construction


@pytest.mark.parametrize("capacity", [0, -1, (1 << SLOT_BITS) + 1])
def test_capacity_outside_the_slot_range_is_refused(capacity: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        CorrelationPool[int](capacity)


@pytest.mark.parametrize("capacity", [1, 2, 1 << SLOT_BITS])
def test_capacity_at_the_limits_is_accepted(capacity: int) -> None:
    pool = CorrelationPool[int](capacity)
    assert pool.capacity == capacity
    assert len(pool) == 0
    assert not pool.full
    assert pool.stale == 0


# ------------------------------------------------------------------------------------------------ ids


def test_ids_are_never_zero_and_unique_while_in_flight() -> None:
    pool = CorrelationPool[int](64)
    ids = [pool.acquire(i) for i in range(64)]
    assert 0 not in ids
    assert len(set(ids)) == 64
    assert sorted(slot_of(i) for i in ids) == list(range(64))
    assert {generation_of(i) for i in ids} == {1}
    for value, correlation_id in enumerate(ids):
        assert pool.get(correlation_id) == value


def test_ids_stay_nonzero_when_the_generation_wraps() -> None:
    """Generations are 32 bits; after the last one comes 1 again, never 0 (slot 0 would then be id 0)."""
    pool = CorrelationPool[str](1)
    first = pool.acquire("a")
    assert slot_of(first) == 0
    assert pool.release(first) == "a"
    pool._generations[0] = (1 << 32) - 1  # as if 2**32 - 2 more calls had used the slot
    wrapped = pool.acquire("b")
    assert wrapped != 0
    assert generation_of(wrapped) == 1
    assert pool.get(wrapped) == "b"
    assert wrapped < 1 << 52


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=300), st.integers(1, 8))
def test_ids_never_zero_under_any_acquire_release_sequence(steps: list[bool], capacity: int) -> None:
    pool = CorrelationPool[int](capacity)
    live: collections.deque[int] = collections.deque()
    for n, acquire in enumerate(steps):
        if acquire and not pool.full:
            correlation_id = pool.acquire(n)
            assert correlation_id != 0
            assert correlation_id not in live
            live.append(correlation_id)
        elif live:
            assert pool.release(live.popleft()) is not None
        assert len(pool) == len(live) <= capacity
    assert pool.stale == 0


# ------------------------------------------------------------------------------------------------ capacity


def test_a_full_pool_refuses_with_lookup_error_until_a_slot_is_freed() -> None:
    pool = CorrelationPool[int](3)
    ids = [pool.acquire(i) for i in range(3)]
    assert pool.full
    assert len(pool) == 3
    with pytest.raises(LookupError, match="3 correlation ids"):
        pool.acquire(99)
    assert len(pool) == 3  # the failed acquire changed nothing
    assert internal_lengths(pool) == (3, 3, 0)
    assert pool.release(ids[1]) == 1
    assert not pool.full
    again = pool.acquire(42)
    assert slot_of(again) == slot_of(ids[1])
    assert pool.full
    with pytest.raises(LookupError):
        pool.acquire(100)


# ------------------------------------------------------------------------------------------------ stale ids


def test_release_of_an_old_id_after_reuse_is_stale_and_leaves_the_new_call_alone() -> None:
    pool = CorrelationPool[str](1)
    old = pool.acquire("old call")
    assert pool.release(old) == "old call"
    new = pool.acquire("new call")
    assert slot_of(new) == slot_of(old)
    assert generation_of(new) == generation_of(old) + 1
    assert new != old

    assert pool.get(old) is None
    assert pool.release(old) is None  # a late answer to the old call
    assert pool.stale == 1
    assert pool.get(new) == "new call"  # ... did not complete a stranger's call
    assert len(pool) == 1
    assert pool.release(new) == "new call"
    assert pool.stale == 1


def test_release_twice_counts_the_second_as_stale() -> None:
    pool = CorrelationPool[int](4)
    correlation_id = pool.acquire(7)
    assert pool.release(correlation_id) == 7
    assert pool.release(correlation_id) is None
    assert pool.stale == 1
    assert len(pool) == 0
    assert internal_lengths(pool) == (1, 1, 1)  # freed once, not twice


@pytest.mark.parametrize("unknown", [0, 1, 12345, (5 << SLOT_BITS) | 0, (1 << SLOT_BITS) | 3])
def test_release_of_ids_never_handed_out_is_stale(unknown: int) -> None:
    pool = CorrelationPool[int](4)
    live = pool.acquire(1)
    assert pool.release(unknown) is None
    assert pool.stale == 1
    assert pool.get(live) == 1
    assert len(pool) == 1


def test_discard_of_an_ended_call_is_not_counted_as_stale() -> None:
    pool = CorrelationPool[str](1)
    old = pool.acquire("a")
    assert pool.discard(old) == "a"
    assert pool.discard(old) is None
    new = pool.acquire("b")
    assert pool.discard(old) is None  # the owner ending a call that already ended: not a late answer
    assert pool.stale == 0
    assert pool.get(new) == "b"
    assert pool.discard(new) == "b"
    assert pool.stale == 0
    assert len(pool) == 0


# ------------------------------------------------------------------------------------------------ reuse order


def test_freed_slots_are_reused_first_in_first_out() -> None:
    pool = CorrelationPool[str](4)
    a, b, c, d = (pool.acquire(v) for v in "abcd")
    for correlation_id in (c, a, d, b):
        pool.release(correlation_id)
    reused = [pool.acquire(v) for v in "wxyz"]
    assert [slot_of(i) for i in reused] == [slot_of(c), slot_of(a), slot_of(d), slot_of(b)]
    assert all(generation_of(i) == 2 for i in reused)


def test_a_freed_slot_waits_behind_every_other_free_slot() -> None:
    """Once all slots exist, a slot freed now is handed out again only after the ones freed before it."""
    pool = CorrelationPool[int](3)
    first = [pool.acquire(i) for i in range(3)]
    for correlation_id in first:
        pool.release(correlation_id)
    x = pool.acquire(10)  # slot of first[0]
    pool.release(x)  # ... now at the back, behind first[1] and first[2]
    y = pool.acquire(11)
    z = pool.acquire(12)
    w = pool.acquire(13)
    assert [slot_of(i) for i in (y, z, w)] == [slot_of(first[1]), slot_of(first[2]), slot_of(x)]
    assert generation_of(w) == 3  # the slot's third use


def test_new_slots_are_created_only_while_none_is_free() -> None:
    pool = CorrelationPool[int](8)
    a = pool.acquire(0)
    pool.release(a)
    b = pool.acquire(1)
    assert slot_of(b) == slot_of(a)
    assert internal_lengths(pool) == (1, 1, 0)
    c = pool.acquire(2)
    assert slot_of(c) == 1
    assert internal_lengths(pool) == (2, 2, 0)


# ------------------------------------------------------------------------------------------------ drain


def test_drain_returns_every_value_in_flight_and_empties_the_pool() -> None:
    pool = CorrelationPool[str](5)
    ids = {v: pool.acquire(v) for v in "abcde"}
    pool.release(ids["b"])
    pool.release(ids["d"])
    assert sorted(pool.drain()) == ["a", "c", "e"]
    assert len(pool) == 0
    assert not pool.full
    assert pool.drain() == []
    for correlation_id in ids.values():
        assert pool.get(correlation_id) is None
    # The drained calls' ids are stale from now on; their slots come back under new generations.
    assert pool.release(ids["a"]) is None
    assert pool.stale == 1
    fresh = [pool.acquire(v) for v in "vwxyz"]
    assert len(set(fresh)) == 5
    assert not set(fresh) & set(ids.values())
    assert internal_lengths(pool) == (5, 5, 0)
    assert pool.full


# ------------------------------------------------------------------------------------------------ bounded memory


def test_a_million_acquire_release_cycles_keep_memory_bounded() -> None:
    capacity = 128
    pool = CorrelationPool[int](capacity)
    in_flight: collections.deque[int] = collections.deque()
    for n in range(1_000_000):
        if len(in_flight) == 100:  # keep a window of calls in flight, ending the oldest first
            oldest = in_flight.popleft()
            assert pool.release(oldest) is not None
        in_flight.append(pool.acquire(n))
        if n % 100_000 == 0:
            assert all(length <= capacity for length in internal_lengths(pool))
    values, generations, free = internal_lengths(pool)
    assert values <= capacity
    assert generations <= capacity
    assert free <= capacity
    assert len(pool) == 100
    assert pool.stale == 0
    while in_flight:
        assert pool.release(in_flight.popleft()) is not None
    assert len(pool) == 0
    assert max(internal_lengths(pool)) <= capacity


def test_a_million_single_slot_cycles_never_repeat_an_id() -> None:
    pool = CorrelationPool[int](1)
    previous = 0
    for n in range(1_000_000):
        correlation_id = pool.acquire(n)
        assert correlation_id > previous  # same slot, generation going up: never an id seen before
        previous = correlation_id
        pool.release(correlation_id)
    assert internal_lengths(pool) == (1, 1, 1)
    assert generation_of(previous) == 1_000_000


def test_none_cannot_be_stored_because_it_marks_a_free_slot() -> None:
    pool: CorrelationPool[object] = CorrelationPool(4)
    with pytest.raises(TypeError):
        pool.acquire(None)
    assert len(pool) == 0
