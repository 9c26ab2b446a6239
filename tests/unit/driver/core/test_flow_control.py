from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.core.flow_control import (
    RECEIVER_TIMEOUT_NS,
    FlowControl,
    MaxMulticastFlowControl,
    MinMulticastFlowControl,
    UnicastFlowControl,
    new_flow_control,
)
from driver.errors import InvalidChannelError
from driver.logbuffer.descriptor import compute_position

TERM_LENGTH = 64 * 1024
BITS = 16
INITIAL_TERM_ID = 7
WINDOW = 32 * 1024
MS = 1_000_000


class Clock:
    """Manual nanosecond clock."""

    def __init__(self, now_ns: int = 1_000 * MS) -> None:
        self.now_ns = now_ns

    def advance_ms(self, ms: int) -> int:
        self.now_ns += ms * MS
        return self.now_ns


def sm(
    fc: FlowControl,
    position: int,
    sender_limit: int,
    now_ns: int,
    receiver_id: int = 1,
    window: int = WINDOW,
    initial_term_id: int = INITIAL_TERM_ID,
) -> int:
    term_id = initial_term_id + (position >> BITS)
    return fc.on_status_message(
        term_id, position & (TERM_LENGTH - 1), window, receiver_id, now_ns, sender_limit, initial_term_id, BITS
    )


# ---------------------------------------------------------------------------------------- unicast / max


@pytest.mark.parametrize("cls", [UnicastFlowControl, MaxMulticastFlowControl])
def test_max_rule_limit_is_position_plus_window(cls: type[UnicastFlowControl]) -> None:
    fc = cls()
    fc.initialize(INITIAL_TERM_ID, TERM_LENGTH)
    assert sm(fc, 0, 0, 1) == WINDOW
    assert sm(fc, 3 * TERM_LENGTH + 96, WINDOW, 2) == 3 * TERM_LENGTH + 96 + WINDOW


@pytest.mark.parametrize("cls", [UnicastFlowControl, MaxMulticastFlowControl])
def test_max_rule_never_lowers_the_limit(cls: type[UnicastFlowControl]) -> None:
    fc = cls()
    limit = sm(fc, 10 * TERM_LENGTH, 0, 1)
    assert sm(fc, TERM_LENGTH, limit, 2) == limit
    assert sm(fc, 10 * TERM_LENGTH, limit, 3, window=1024) == limit


def test_max_multicast_fastest_receiver_wins() -> None:
    fc = MaxMulticastFlowControl()
    limit = sm(fc, 0, 0, 1, receiver_id=1)
    limit = sm(fc, 5 * TERM_LENGTH, limit, 2, receiver_id=2)
    limit = sm(fc, TERM_LENGTH, limit, 3, receiver_id=1)
    assert limit == 5 * TERM_LENGTH + WINDOW


def test_position_uses_initial_term_id_and_int32_term_count_wrap() -> None:
    fc = UnicastFlowControl()
    initial = 0x7FFF_FFFE  # term ids wrap past int32 max
    term_id = -0x8000_0000 + 1  # 3 terms after initial
    limit = fc.on_status_message(term_id, 128, WINDOW, 1, 1, 0, initial, BITS)
    assert limit == compute_position(term_id, 128, BITS, initial) + WINDOW == 3 * TERM_LENGTH + 128 + WINDOW


@pytest.mark.parametrize("cls", [UnicastFlowControl, MaxMulticastFlowControl])
def test_max_rule_on_idle_returns_sender_limit(cls: type[UnicastFlowControl]) -> None:
    fc = cls()
    sm(fc, 0, 0, 1)
    assert fc.on_idle(10**12, 12345, 0, False) == 12345
    assert fc.on_idle(10**12, 999, 0, True) == 999


@pytest.mark.parametrize("cls", [UnicastFlowControl, MaxMulticastFlowControl])
def test_max_rule_linger_until_receiver_caught_up(cls: type[UnicastFlowControl]) -> None:
    clock = Clock()
    fc = cls()
    sm(fc, 1000, 0, clock.now_ns)
    fc.on_idle(clock.advance_ms(1), 5000, 2000, False)
    assert fc.should_linger(clock.now_ns)  # not EOS: always lingers
    fc.on_idle(clock.advance_ms(1), 5000, 2000, True)
    assert fc.should_linger(clock.now_ns)  # EOS but receiver behind and not timed out
    sm(fc, 2000, 5000, clock.advance_ms(1))
    fc.on_idle(clock.advance_ms(1), 5000, 2000, True)
    assert not fc.should_linger(clock.now_ns)


@pytest.mark.parametrize("cls", [UnicastFlowControl, MaxMulticastFlowControl])
def test_max_rule_linger_ends_after_receiver_timeout(cls: type[UnicastFlowControl]) -> None:
    clock = Clock()
    fc = cls()
    sm(fc, 0, 0, clock.now_ns)
    fc.on_idle(clock.now_ns + RECEIVER_TIMEOUT_NS, WINDOW, 4096, True)
    assert fc.should_linger(clock.now_ns)  # exactly the timeout: not yet
    fc.on_idle(clock.now_ns + RECEIVER_TIMEOUT_NS + 1, WINDOW, 4096, True)
    assert not fc.should_linger(clock.now_ns)


def test_max_rule_last_position_is_highest_reported() -> None:
    fc = UnicastFlowControl()
    sm(fc, 5000, 0, 1)
    sm(fc, 100, 0, 2)
    assert fc.last_position == 5000


@given(
    st.integers(min_value=0, max_value=1 << 40),
    st.lists(
        st.tuples(
            st.booleans(),  # SM (True) or idle
            st.integers(min_value=0, max_value=1 << 40),  # position
            st.integers(min_value=0, max_value=1 << 20),  # window
            st.integers(min_value=0, max_value=3),  # receiver id
            st.integers(min_value=0, max_value=3 * RECEIVER_TIMEOUT_NS),  # time step
        ),
        max_size=60,
    ),
    st.sampled_from([UnicastFlowControl, MaxMulticastFlowControl]),
)
def test_max_rule_limit_never_decreases_and_tracks_the_fastest(
    start: int, ops: list[tuple[bool, int, int, int, int]], cls: type[UnicastFlowControl]
) -> None:
    fc = cls()
    now = 0
    limit = start
    expected = start
    for is_sm, position, window, receiver_id, step in ops:
        now += step
        if is_sm:
            new_limit = sm(fc, position, limit, now, receiver_id=receiver_id, window=window)
            expected = max(expected, position + window)
        else:
            new_limit = fc.on_idle(now, limit, position, False)
        assert new_limit >= limit
        assert new_limit == expected
        limit = new_limit


# ---------------------------------------------------------------------------------------- min multicast


def test_min_first_receiver_sets_limit() -> None:
    fc = MinMulticastFlowControl()
    fc.initialize(INITIAL_TERM_ID, TERM_LENGTH)
    assert sm(fc, 4096, 0, 1) == 4096 + WINDOW
    assert fc.receiver_count == 1


def test_min_slowest_receiver_bounds_limit_on_status_message() -> None:
    clock = Clock()
    fc = MinMulticastFlowControl()
    limit = sm(fc, 0, 0, clock.now_ns, receiver_id=1)
    limit = sm(fc, 10 * TERM_LENGTH, limit, clock.advance_ms(1), receiver_id=2)
    assert limit == WINDOW  # receiver 1 is still at 0
    limit = sm(fc, TERM_LENGTH, limit, clock.advance_ms(1), receiver_id=1)
    assert limit == TERM_LENGTH + WINDOW
    assert fc.receiver_count == 2


def test_min_status_message_never_lowers_limit_but_records_latest_window() -> None:
    clock = Clock()
    fc = MinMulticastFlowControl()
    limit = sm(fc, TERM_LENGTH, 0, clock.now_ns)
    # a later SM with a smaller window: the SM path keeps the limit ...
    assert sm(fc, TERM_LENGTH, limit, clock.advance_ms(1), window=1024) == limit
    # ... but the receiver's own limit is now position + 1024, which the idle step applies
    assert fc.on_idle(clock.advance_ms(1), limit, TERM_LENGTH, False) == TERM_LENGTH + 1024


def test_min_on_idle_without_receivers_keeps_sender_limit() -> None:
    fc = MinMulticastFlowControl()
    assert fc.on_idle(1, 777, 0, False) == 777


def test_min_on_idle_returns_min_of_live_receivers_even_if_lower() -> None:
    clock = Clock()
    fc = MinMulticastFlowControl()
    sm(fc, 8 * TERM_LENGTH, 0, clock.now_ns, receiver_id=1)
    sm(fc, 2 * TERM_LENGTH, 0, clock.now_ns, receiver_id=2)
    assert fc.on_idle(clock.advance_ms(1), 10 * TERM_LENGTH, 0, False) == 2 * TERM_LENGTH + WINDOW


def test_min_drops_receiver_strictly_after_timeout() -> None:
    clock = Clock()
    fc = MinMulticastFlowControl()
    t0 = clock.now_ns
    sm(fc, 0, 0, t0, receiver_id=1)  # slow, goes silent
    sm(fc, 4 * TERM_LENGTH, 0, t0, receiver_id=2)
    sm(fc, 4 * TERM_LENGTH, 0, t0 + RECEIVER_TIMEOUT_NS, receiver_id=2)
    assert fc.on_idle(t0 + RECEIVER_TIMEOUT_NS, 0, 0, False) == WINDOW
    assert fc.receiver_count == 2
    assert fc.on_idle(t0 + RECEIVER_TIMEOUT_NS + 1, WINDOW, 0, False) == 4 * TERM_LENGTH + WINDOW
    assert fc.receiver_count == 1
    assert not fc.has_receiver(1)
    assert fc.has_receiver(2)
    # the dropped receiver comes back as a new one and bounds the limit again on idle
    sm(fc, TERM_LENGTH, 4 * TERM_LENGTH + WINDOW, t0 + RECEIVER_TIMEOUT_NS + 2, receiver_id=1)
    assert fc.on_idle(t0 + RECEIVER_TIMEOUT_NS + 3, 4 * TERM_LENGTH + WINDOW, 0, False) == TERM_LENGTH + WINDOW


def test_min_all_receivers_timed_out_keeps_sender_limit() -> None:
    fc = MinMulticastFlowControl()
    sm(fc, 0, 0, 0)
    assert fc.on_idle(RECEIVER_TIMEOUT_NS + 1, 5555, 0, False) == 5555
    assert fc.receiver_count == 0


def test_min_custom_receiver_timeout() -> None:
    fc = MinMulticastFlowControl(receiver_timeout_ns=10 * MS)
    sm(fc, 0, 0, 0)
    fc.on_idle(10 * MS, 0, 0, False)
    assert fc.receiver_count == 1
    fc.on_idle(10 * MS + 1, 0, 0, False)
    assert fc.receiver_count == 0


def test_min_linger_stops_when_all_receivers_caught_up() -> None:
    clock = Clock()
    fc = MinMulticastFlowControl()
    sm(fc, 4096, 0, clock.now_ns, receiver_id=1)
    sm(fc, 1024, 0, clock.now_ns, receiver_id=2)
    fc.on_idle(clock.advance_ms(1), WINDOW, 4096, True)
    assert fc.should_linger(clock.now_ns)
    sm(fc, 4096, 0, clock.advance_ms(1), receiver_id=2)
    fc.on_idle(clock.advance_ms(1), WINDOW, 4096, False)
    assert fc.should_linger(clock.now_ns)  # caught up, but not EOS
    fc.on_idle(clock.advance_ms(1), WINDOW, 4096, True)
    assert not fc.should_linger(clock.now_ns)


def test_min_linger_stops_when_no_receivers() -> None:
    fc = MinMulticastFlowControl()
    fc.on_idle(1, 0, 4096, True)
    assert not fc.should_linger(1)


def test_min_group_min_size_holds_limit_until_enough_receivers() -> None:
    fc = MinMulticastFlowControl(group_min_size=2)
    assert sm(fc, 0, 0, 1, receiver_id=1) == 0
    assert fc.on_idle(2, 0, 0, False) == 0
    assert sm(fc, 4096, 0, 3, receiver_id=2) == WINDOW
    assert fc.on_idle(4, 0, 0, False) == WINDOW


_MIN_OPS = st.lists(
    st.tuples(
        st.booleans(),  # SM (True) or idle
        st.integers(min_value=0, max_value=1 << 36),  # position
        st.integers(min_value=0, max_value=1 << 20),  # window
        st.integers(min_value=0, max_value=4),  # receiver id
        st.integers(min_value=0, max_value=RECEIVER_TIMEOUT_NS),  # time step
    ),
    max_size=80,
)


@given(st.integers(min_value=0, max_value=1 << 36), _MIN_OPS)
def test_min_follows_slowest_live_receiver_and_drops_timed_out(
    start: int, ops: list[tuple[bool, int, int, int, int]]
) -> None:
    timeout = RECEIVER_TIMEOUT_NS // 2
    fc = MinMulticastFlowControl(receiver_timeout_ns=timeout)
    model: dict[int, tuple[int, int]] = {}  # receiver id -> (latest position + window, last SM time)
    now = 0
    limit = start
    for is_sm, position, window, receiver_id, step in ops:
        now += step
        if is_sm:
            model[receiver_id] = (position + window, now)
            new_limit = sm(fc, position, limit, now, receiver_id=receiver_id, window=window)
            assert new_limit == max(limit, min(v for v, _ in model.values()))
        else:
            model = {r: (v, t) for r, (v, t) in model.items() if now - t <= timeout}
            new_limit = fc.on_idle(now, limit, position, False)
            if model:
                assert new_limit == min(v for v, _ in model.values())
            else:
                assert new_limit == limit
            assert fc.receiver_count == len(model)
            for r in range(5):
                assert fc.has_receiver(r) == (r in model)
        limit = new_limit


# ---------------------------------------------------------------------------------------- factory


def test_factory_defaults_follow_1_15_1() -> None:
    assert type(new_flow_control(None, is_multicast=False)) is UnicastFlowControl
    assert type(new_flow_control(None, is_multicast=True)) is MaxMulticastFlowControl


def test_factory_fc_values() -> None:
    assert type(new_flow_control("max", is_multicast=True)) is MaxMulticastFlowControl
    fc = new_flow_control("min", is_multicast=True)
    assert isinstance(fc, MinMulticastFlowControl)


def test_factory_min_timeout_and_group_size() -> None:
    fc = new_flow_control("min,t:10ms,g:/2", is_multicast=True)
    assert isinstance(fc, MinMulticastFlowControl)
    assert sm(fc, 0, 0, 0, receiver_id=1) == 0  # waits for 2 receivers
    assert sm(fc, 0, 0, 0, receiver_id=2) == WINDOW
    fc.on_idle(10 * MS + 1, 0, 0, False)
    assert fc.receiver_count == 0


def test_factory_receiver_timeout_default_is_passed_on() -> None:
    fc = new_flow_control("min", is_multicast=True, receiver_timeout_ns=5)
    sm(fc, 0, 0, 0)
    fc.on_idle(6, 0, 0, False)
    assert isinstance(fc, MinMulticastFlowControl)
    assert fc.receiver_count == 0


@pytest.mark.parametrize(
    ("fc", "is_multicast"),
    [
        ("min", False),
        ("max", False),
        ("tagged,g:1", True),
        ("preferred", True),
        ("bogus", True),
        ("min,g:123", True),
        ("min,g:/x", True),
        ("min,t:abc", True),
        ("min,t:0", True),
        ("min,x:1", True),
        ("", True),
    ],
)
def test_factory_rejects_with_typed_error(fc: str, is_multicast: bool) -> None:
    with pytest.raises(InvalidChannelError) as info:
        new_flow_control(fc, is_multicast=is_multicast)
    assert info.value.field == "fc"
