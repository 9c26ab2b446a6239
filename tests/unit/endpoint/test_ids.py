"""IdAllocator: random ids from a range minus reserved ones, unique while live, reused only after the cool-down.

Time is passed in and randomness is injected, so every test here is deterministic and does no I/O.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint.errors import AllocationError
from endpoint.ids import IdAllocator

DENSE_LIMIT = 1 << 17
"""Ranges wider than this (after reserved ids) draw and retry instead of keeping a pool."""
SPARSE_LOW = 1_000
SPARSE_HIGH = SPARSE_LOW + DENSE_LIMIT + 63
"""A range just over the dense limit: the smallest sparse one, so exhausting it stays affordable."""
T0 = 1_700_000_000 * 1_000_000_000
SEC = 1_000_000_000


class SequentialRandom(random.Random):
    """Hands out ``low, low+1, ...`` (wrapping) from ``randint``: fills a sparse range in exactly one pass."""

    def __init__(self) -> None:
        super().__init__(0)
        self.calls = 0

    def randint(self, a: int, b: int) -> int:
        value = a + self.calls % (b - a + 1)
        self.calls += 1
        return value


class ScriptedRandom(random.Random):
    """Answers ``randint`` from a script first, then from a seeded generator; counts the calls."""

    def __init__(self, script: Sequence[int], seed: int = 1) -> None:
        super().__init__(seed)
        self.script = list(script)
        self.calls = 0

    def randint(self, a: int, b: int) -> int:
        self.calls += 1
        if self.script:
            return self.script.pop(0)
        return super().randint(a, b)


class HotRandom(random.Random):
    """Mostly draws a few ``hot`` ids, so a sparse allocator keeps colliding with live, reserved and cooling ids."""

    def __init__(self, seed: int, hot: Sequence[int]) -> None:
        super().__init__(seed)
        self.hot = list(hot)

    def randint(self, a: int, b: int) -> int:
        if self.random() < 0.9:
            return self.choice(self.hot)
        return super().randint(a, b)


def drain(alloc: IdAllocator, now_ns: int, limit: int) -> list[int]:
    """Allocate until AllocationError (at most ``limit`` ids); the error must come."""
    got: list[int] = []
    for _ in range(limit):
        try:
            got.append(alloc.allocate(now_ns))
        except AllocationError:
            return got
    pytest.fail(f"still allocating after {limit} ids")


# ---------------------------------------------------------------------------------------------- construction


def test_empty_range_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"stream id range is empty: low 5 > high 4"):
        IdAllocator(5, 4, name="stream id")


def test_negative_reuse_delay_is_refused() -> None:
    with pytest.raises(ValueError, match=r"reuse delay must be >= 0, got -1"):
        IdAllocator(1, 10, reuse_delay_ns=-1)


def test_capacity_counts_only_reserved_ids_inside_the_range() -> None:
    alloc = IdAllocator(10, 19, reserved=(9, 10, 15, 15, 20, -3), rng=random.Random(1))
    assert alloc.capacity == 8
    assert alloc.live_count == 0
    assert alloc.cooling_count() == 0


def test_single_id_range() -> None:
    alloc = IdAllocator(7, 7, rng=random.Random(1))
    assert alloc.capacity == 1
    assert alloc.allocate(T0) == 7
    with pytest.raises(AllocationError):
        alloc.allocate(T0)


def test_range_entirely_reserved_is_exhausted_from_the_start() -> None:
    alloc = IdAllocator(1, 3, reserved=(1, 2, 3), name="stream id", rng=random.Random(1))
    assert alloc.capacity == 0
    with pytest.raises(AllocationError, match=r"no free stream id in \[1, 3\]"):
        alloc.allocate(T0)


def test_default_rng_is_usable() -> None:
    alloc = IdAllocator(1, 100)
    got = {alloc.allocate(T0) for _ in range(100)}
    assert got == set(range(1, 101))


# ---------------------------------------------------------------------------------------------- dense ranges


def test_dense_range_hands_out_every_free_id_once_then_is_exhausted() -> None:
    reserved = {100, 150, 199}
    alloc = IdAllocator(100, 199, reserved=reserved, name="stream id", rng=random.Random(7))
    got = drain(alloc, T0, 200)
    assert len(got) == len(set(got)) == 97
    assert set(got) == set(range(100, 200)) - reserved
    assert all(alloc.is_live(v) for v in got)
    assert alloc.live_count == 97


def test_dense_order_is_random_and_follows_the_injected_rng() -> None:
    first = drain(IdAllocator(1, 1000, rng=random.Random(1)), T0, 1001)
    again = drain(IdAllocator(1, 1000, rng=random.Random(1)), T0, 1001)
    other = drain(IdAllocator(1, 1000, rng=random.Random(2)), T0, 1001)
    assert first == again
    assert first != other
    assert first != sorted(first)
    assert sorted(first) == sorted(other) == list(range(1, 1001))


def test_exhaustion_message_names_the_allocator_range_and_counts() -> None:
    alloc = IdAllocator(10, 12, reuse_delay_ns=3 * SEC, name="session id", rng=random.Random(1))
    a = alloc.allocate(T0)
    alloc.allocate(T0)
    alloc.allocate(T0)
    alloc.release(a, T0)
    with pytest.raises(AllocationError, match=r"no free session id in \[10, 12\]: 2 live, 1 cooling down for 3 s"):
        alloc.allocate(T0)


def test_reserved_ids_are_never_handed_out_even_on_reuse() -> None:
    alloc = IdAllocator(0, 9, reserved=(0, 5), rng=random.Random(3))
    for now in range(T0, T0 + 20):
        got = drain(alloc, now, 20)
        assert 0 not in got
        assert 5 not in got
        for v in got:
            alloc.release(v, now)
    assert alloc.live_count == 0


# ---------------------------------------------------------------------------------------------- release and reuse


def test_released_id_is_reusable_exactly_reuse_delay_after_release() -> None:
    alloc = IdAllocator(42, 42, reuse_delay_ns=5 * SEC, rng=random.Random(1))
    assert alloc.allocate(T0) == 42
    alloc.release(42, T0 + SEC)
    assert not alloc.is_live(42)
    assert alloc.live_count == 0
    assert alloc.cooling_count() == 1
    with pytest.raises(AllocationError):
        alloc.allocate(T0 + SEC)
    with pytest.raises(AllocationError):
        alloc.allocate(T0 + 6 * SEC - 1)
    assert alloc.allocate(T0 + 6 * SEC) == 42
    assert alloc.is_live(42)
    assert alloc.cooling_count() == 0


def test_zero_reuse_delay_makes_an_id_reusable_at_once() -> None:
    alloc = IdAllocator(1, 1, rng=random.Random(1))
    assert alloc.allocate(T0) == 1
    alloc.release(1, T0)
    assert alloc.allocate(T0) == 1


def test_cooling_ids_are_skipped_while_others_are_free() -> None:
    alloc = IdAllocator(1, 50, reuse_delay_ns=SEC, rng=random.Random(5))
    first = drain(alloc, T0, 51)
    for v in first[:10]:
        alloc.release(v, T0)
    with pytest.raises(AllocationError):
        alloc.allocate(T0 + SEC - 1)
    again = drain(alloc, T0 + SEC, 51)
    assert sorted(again) == sorted(first[:10])


def test_thawed_ids_come_back_in_an_unpredictable_order() -> None:
    alloc = IdAllocator(1, 200, reuse_delay_ns=SEC, rng=random.Random(11))
    order = drain(alloc, T0, 201)
    for v in order:
        alloc.release(v, T0)
    again = drain(alloc, T0 + SEC, 201)
    assert sorted(again) == sorted(order)
    assert again != order
    assert again != order[::-1]


def test_release_of_an_id_that_is_not_live_is_refused() -> None:
    alloc = IdAllocator(1, 10, reserved=(3,), name="stream id", rng=random.Random(1))
    with pytest.raises(ValueError, match=r"stream id 4 is not allocated"):
        alloc.release(4, T0)
    with pytest.raises(ValueError, match=r"stream id 3 is not allocated"):
        alloc.release(3, T0)
    with pytest.raises(ValueError, match=r"stream id 99 is not allocated"):
        alloc.release(99, T0)
    v = alloc.allocate(T0)
    alloc.release(v, T0)
    with pytest.raises(ValueError, match=rf"stream id {v} is not allocated"):
        alloc.release(v, T0)
    assert alloc.cooling_count() == 1


def test_repr_names_the_allocator() -> None:
    alloc = IdAllocator(1, 10, name="stream id", rng=random.Random(1))
    alloc.allocate(T0)
    assert repr(alloc) == "IdAllocator(stream id, [1, 10], live=1)"


# ---------------------------------------------------------------------------------------------- sparse ranges


def test_sparse_range_draws_within_bounds_and_skips_reserved_live_and_cooling_ids() -> None:
    low, high = SPARSE_LOW, SPARSE_HIGH
    reserved = (low, low + 1)
    # The draws: reserved then fresh; reserved, live, fresh; cooling, live, reserved, fresh.
    rng = ScriptedRandom([low, low + 2, low + 1, low + 2, low + 3, low + 3, low + 2, low, low + 4])
    alloc = IdAllocator(low, high, reserved=reserved, reuse_delay_ns=SEC, rng=rng)
    assert alloc.capacity == high - low + 1 - 2
    assert alloc.allocate(T0) == low + 2
    assert alloc.allocate(T0) == low + 3
    alloc.release(low + 3, T0)
    assert alloc.allocate(T0) == low + 4
    assert rng.calls == 9
    assert alloc.cooling_count() == 1


def test_sparse_allocations_are_unique_and_in_range() -> None:
    alloc = IdAllocator(1, 0x7FFF_FFFF, reserved=(1, 2, 3), rng=random.Random(9))
    got = [alloc.allocate(T0) for _ in range(2000)]
    assert len(set(got)) == 2000
    assert all(4 <= v <= 0x7FFF_FFFF for v in got)
    assert alloc.live_count == 2000


def test_sparse_range_is_exhausted_with_a_message_naming_the_range() -> None:
    low, high = SPARSE_LOW, SPARSE_HIGH
    alloc = IdAllocator(low, high, reserved=(low + 5,), name="session id", reuse_delay_ns=SEC, rng=SequentialRandom())
    size = alloc.capacity
    assert size > DENSE_LIMIT
    got = [alloc.allocate(T0) for _ in range(size)]
    assert len(set(got)) == size
    assert low + 5 not in got
    with pytest.raises(AllocationError, match=rf"no free session id in \[{low}, {high}\]: {size} live, 0 cooling"):
        alloc.allocate(T0)
    # A released id counts as taken until its cool-down ends, then it is the only one left.
    alloc.release(low, T0)
    with pytest.raises(AllocationError, match=rf"\[{low}, {high}\]: {size - 1} live, 1 cooling"):
        alloc.allocate(T0 + SEC - 1)
    assert alloc.allocate(T0 + SEC) == low
    assert alloc.cooling_count() == 0


# ---------------------------------------------------------------------------------------------- properties

Op = tuple[str, int]
ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.just(0)),
        st.tuples(st.just("release"), st.integers(0, 1_000)),
        st.tuples(st.just("advance"), st.integers(0, 3)),
    ),
    max_size=120,
)


def run_model(alloc: IdAllocator, low: int, high: int, reserved: set[int], delay: int, ops: list[Op]) -> None:
    """Drive ``alloc`` with ``ops`` against a model; in dense ranges exhaustion is predicted exactly."""
    exact = alloc.capacity <= DENSE_LIMIT
    now = T0
    live: list[int] = []
    cooling: dict[int, int] = {}  # id -> time it may be reused
    for op, arg in ops:
        if op == "advance":
            now += arg * max(delay // 2, 1)
        elif op == "release":
            if live:
                value = live.pop(arg % len(live))
                alloc.release(value, now)
                cooling[value] = now + delay
        else:
            cooling = {v: t for v, t in cooling.items() if t > now}
            free = 1  # a sparse range here is never close to full
            if exact:
                free = (high - low + 1) - len({*reserved, *live, *cooling} & set(range(low, high + 1)))
            message = ""
            try:
                value = alloc.allocate(now)
            except AllocationError as exc:
                message = str(exc)
            if message:
                assert exact, "a sparse range far from full must not run out"
                assert free == 0
                assert f"[{low}, {high}]" in message
            else:
                assert not exact or free > 0
                assert low <= value <= high
                assert value not in reserved
                assert value not in live
                assert value not in cooling
                live.append(value)
            assert alloc.cooling_count() == len(cooling)
        assert alloc.live_count == len(live)
        assert all(alloc.is_live(v) for v in live)
        assert not any(alloc.is_live(v) for v in cooling)


@settings(max_examples=150, deadline=None)
@given(
    low=st.integers(-50, 50),
    width=st.integers(0, 24),
    reserved=st.sets(st.integers(-60, 80), max_size=10),
    delay=st.integers(0, 10),
    seed=st.integers(0, 2**32),
    ops=ops_strategy,
)
def test_dense_never_hands_out_a_live_reserved_or_cooling_id(
    low: int, width: int, reserved: set[int], delay: int, seed: int, ops: list[Op]
) -> None:
    high = low + width
    alloc = IdAllocator(low, high, reserved=reserved, reuse_delay_ns=delay, rng=random.Random(seed))
    assert alloc.capacity == width + 1 - len({r for r in reserved if low <= r <= high})
    run_model(alloc, low, high, reserved, delay, ops)


@settings(max_examples=60, deadline=None)
@given(
    extra=st.integers(16, 1 << 20),
    reserved=st.sets(st.integers(0, 15), max_size=8),
    delay=st.integers(0, 10),
    seed=st.integers(0, 2**32),
    ops=ops_strategy,
)
def test_sparse_never_hands_out_a_live_reserved_or_cooling_id(
    extra: int, reserved: set[int], delay: int, seed: int, ops: list[Op]
) -> None:
    low = 0x1000_0000
    high = low + DENSE_LIMIT + extra
    reserved_ids = {low + r for r in reserved}
    hot = [low + i for i in range(16)]
    alloc = IdAllocator(low, high, reserved=reserved_ids, reuse_delay_ns=delay, rng=HotRandom(seed, hot))
    assert alloc.capacity > DENSE_LIMIT
    run_model(alloc, low, high, reserved_ids, delay, ops)


def test_sparse_range_skips_a_cooling_id_until_it_thawed() -> None:
    """The wide range's draw checks the cooling ids (kept as a set beside their queue) and forgets them on thaw."""
    rng = ScriptedRandom([SPARSE_LOW + 5])
    alloc = IdAllocator(SPARSE_LOW, SPARSE_HIGH, reuse_delay_ns=SEC, rng=rng)
    value = alloc.allocate(T0)
    assert value == SPARSE_LOW + 5
    alloc.release(value, T0)
    rng.script = [value, value, SPARSE_LOW + 6]
    assert alloc.allocate(T0 + SEC - 1) == SPARSE_LOW + 6, "the cooling id is drawn twice and skipped"
    rng.script = [value]
    assert alloc.allocate(T0 + SEC) == value, "thawed, it can be handed out again"
    assert alloc.cooling_count() == 0


class CountingRandom(random.Random):
    """Counts the draws (``randrange``, ``shuffle``, ``random``) made of it."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return super().random()

    def getrandbits(self, k: int, /) -> int:
        self.draws += 1
        return super().getrandbits(k)


def test_a_dense_pool_costs_no_draws_until_ids_are_taken_and_one_each_then() -> None:
    """A server's pools (60,000 stream ids) are made at every start: drawing happens per allocation instead."""
    rng = CountingRandom(3)
    alloc = IdAllocator(0x1000, 0xFFFF, reserved=(0x1001,), rng=rng)
    assert rng.draws == 0
    got = [alloc.allocate(T0) for _ in range(100)]
    assert 100 <= rng.draws < 200  # one draw each (retried now and then: a uniform draw below n rejects some bits)
    assert len(set(got)) == 100
    assert 0x1001 not in got
    assert got != sorted(got)
    assert got != sorted(got, reverse=True)


def test_every_free_id_is_equally_likely_to_come_first_and_after_a_thaw() -> None:
    """Each allocation is a uniform draw over the free ids, those thawed included (seeded: deterministic)."""
    firsts = Counter(IdAllocator(1, 10, rng=random.Random(seed)).allocate(T0) for seed in range(3000))
    assert set(firsts) == set(range(1, 11))
    assert all(200 <= n <= 400 for n in firsts.values()), firsts
    thawed: Counter[int] = Counter()
    for seed in range(3000):
        alloc = IdAllocator(1, 10, reuse_delay_ns=SEC, rng=random.Random(seed))
        taken = [alloc.allocate(T0) for _ in range(5)]
        for value in taken:
            alloc.release(value, T0)
        alloc.allocate(T0 + SEC)  # five never taken and five thawed: each 1 in 10
        thawed[int(any(alloc.is_live(v) for v in taken))] += 1
    assert 1200 <= thawed[1] <= 1800, thawed
