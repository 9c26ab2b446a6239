from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.core.loss_detector import StaticDelayGenerator
from driver.core.retransmit import (
    MAX_RETRANSMITS_DEFAULT,
    RETRANSMIT_UNICAST_DELAY_NS,
    RETRANSMIT_UNICAST_LINGER_NS,
    RetransmitHandler,
)
from driver.errors import DriverConfigurationError

TERM_LENGTH = 64 * 1024
MS = 1_000_000


class Fixed:
    """A delay generator returning one value."""

    def __init__(self, delay_ns: int) -> None:
        self.delay_ns = delay_ns
        self.calls = 0

    def generate_delay(self) -> int:
        self.calls += 1
        return self.delay_ns


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, term_id: int, term_offset: int, length: int) -> None:
        self.calls.append((term_id, term_offset, length))


def unicast_handler(
    max_actions: int = MAX_RETRANSMITS_DEFAULT, on_invalid: Callable[[], object] | None = None
) -> RetransmitHandler:
    return RetransmitHandler(
        StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS),
        StaticDelayGenerator(RETRANSMIT_UNICAST_LINGER_NS),
        max_actions,
        on_invalid,
    )


def test_defaults_match_1_15_1() -> None:
    assert RETRANSMIT_UNICAST_DELAY_NS == 0
    assert RETRANSMIT_UNICAST_LINGER_NS == 60 * MS
    assert MAX_RETRANSMITS_DEFAULT == 16


def test_zero_delay_resends_immediately_then_lingers() -> None:
    handler = unicast_handler()
    resend = Recorder()
    handler.on_nak(3, 1024, 512, TERM_LENGTH, 0, resend)
    assert resend.calls == [(3, 1024, 512)]
    assert handler.is_active(3, 1024)
    assert handler.active_count == 1


def test_duplicate_nak_ignored_while_lingering_then_accepted_after() -> None:
    handler = unicast_handler()
    resend = Recorder()
    handler.on_nak(3, 1024, 512, TERM_LENGTH, 0, resend)
    handler.on_nak(3, 1024, 512, TERM_LENGTH, 30 * MS, resend)
    handler.process_timeouts(60 * MS, resend)  # expiry is strict: still lingering at exactly 60 ms
    handler.on_nak(3, 1024, 512, TERM_LENGTH, 60 * MS, resend)
    assert resend.calls == [(3, 1024, 512)]
    handler.process_timeouts(60 * MS + 1, resend)
    assert not handler.is_active(3, 1024)
    assert handler.active_count == 0
    handler.on_nak(3, 1024, 512, TERM_LENGTH, 60 * MS + 2, resend)
    assert resend.calls == [(3, 1024, 512), (3, 1024, 512)]


def test_different_offsets_or_terms_are_separate_actions() -> None:
    handler = unicast_handler()
    resend = Recorder()
    handler.on_nak(3, 1024, 32, TERM_LENGTH, 0, resend)
    handler.on_nak(3, 2048, 32, TERM_LENGTH, 0, resend)
    handler.on_nak(4, 1024, 32, TERM_LENGTH, 0, resend)
    handler.on_nak(-1, 1024, 32, TERM_LENGTH, 0, resend)
    assert resend.calls == [(3, 1024, 32), (3, 2048, 32), (4, 1024, 32), (-1, 1024, 32)]
    assert handler.active_count == 4


def test_same_offset_with_different_length_is_still_a_duplicate() -> None:
    handler = unicast_handler()
    resend = Recorder()
    handler.on_nak(3, 1024, 32, TERM_LENGTH, 0, resend)
    handler.on_nak(3, 1024, 4096, TERM_LENGTH, 1, resend)
    assert resend.calls == [(3, 1024, 32)]


def test_length_clipped_to_term_end() -> None:
    handler = unicast_handler()
    resend = Recorder()
    handler.on_nak(0, TERM_LENGTH - 64, 4096, TERM_LENGTH, 0, resend)
    assert resend.calls == [(0, TERM_LENGTH - 64, 64)]


@pytest.mark.parametrize("offset", [-1, -32, TERM_LENGTH - 31, TERM_LENGTH, 1 << 31])
def test_invalid_offset_counted_and_ignored(offset: int) -> None:
    invalid: list[int] = []
    handler = unicast_handler(on_invalid=lambda: invalid.append(1))
    resend = Recorder()
    handler.on_nak(0, offset, 32, TERM_LENGTH, 0, resend)
    assert resend.calls == []
    assert handler.active_count == 0
    assert handler.invalid_naks == 1
    assert invalid == [1]


def test_boundary_offsets_are_valid() -> None:
    handler = unicast_handler()
    resend = Recorder()
    handler.on_nak(0, 0, 32, TERM_LENGTH, 0, resend)
    handler.on_nak(0, TERM_LENGTH - 32, 32, TERM_LENGTH, 0, resend)
    assert resend.calls == [(0, 0, 32), (0, TERM_LENGTH - 32, 32)]
    assert handler.invalid_naks == 0


def test_at_most_max_actions_in_flight() -> None:
    handler = unicast_handler(max_actions=4)
    resend = Recorder()
    for i in range(6):
        handler.on_nak(0, i * 32, 32, TERM_LENGTH, 0, resend)
    assert [c[1] for c in resend.calls] == [0, 32, 64, 96]
    assert handler.active_count == 4
    handler.process_timeouts(60 * MS + 1, resend)  # all lingering slots free up
    handler.on_nak(0, 4 * 32, 32, TERM_LENGTH, 60 * MS + 1, resend)
    assert resend.calls[-1] == (0, 128, 32)


def test_default_pool_is_sixteen() -> None:
    handler = unicast_handler()
    resend = Recorder()
    for i in range(20):
        handler.on_nak(0, i * 32, 32, TERM_LENGTH, 0, resend)
    assert len(resend.calls) == 16


def test_actions_are_made_as_naks_need_them_and_reused() -> None:
    """A publication that never sees a NAK holds no actions (a connect storm made 16 per publication); the pool
    grows to what was in flight at once, never past ``max_actions``, and freed actions are reused."""
    handler = unicast_handler(max_actions=4)
    assert handler._pool == []
    resend = Recorder()
    handler.on_nak(0, 0, 32, TERM_LENGTH, 0, resend)
    handler.on_nak(0, 32, 32, TERM_LENGTH, 0, resend)
    assert len(handler._pool) == 2
    handler.process_timeouts(60 * MS + 1, resend)  # both linger out
    assert handler.active_count == 0
    for i in range(6):
        handler.on_nak(1, i * 32, 32, TERM_LENGTH, 60 * MS + 1, resend)
    assert handler.active_count == 4
    assert len(handler._pool) == 4
    assert len(resend.calls) == 2 + 4


def test_delayed_action_resends_after_delay_then_lingers() -> None:
    delay = Fixed(5 * MS)
    linger = Fixed(60 * MS)
    handler = RetransmitHandler(delay, linger)
    resend = Recorder()
    handler.on_nak(2, 96, 64, TERM_LENGTH, 0, resend)
    assert resend.calls == []
    handler.on_nak(2, 96, 64, TERM_LENGTH, 1 * MS, resend)  # duplicate while delayed
    assert delay.calls == 1
    handler.process_timeouts(5 * MS, resend)
    assert resend.calls == []
    handler.process_timeouts(5 * MS + 1, resend)
    assert resend.calls == [(2, 96, 64)]
    assert linger.calls == 1
    handler.process_timeouts(65 * MS + 1, resend)  # linger measured from the resend time
    assert handler.is_active(2, 96)
    handler.process_timeouts(65 * MS + 2, resend)
    assert not handler.is_active(2, 96)
    assert resend.calls == [(2, 96, 64)]


def test_retransmit_received_cancels_delayed_action_only() -> None:
    handler = RetransmitHandler(Fixed(5 * MS), Fixed(60 * MS))
    resend = Recorder()
    handler.on_nak(2, 96, 64, TERM_LENGTH, 0, resend)
    handler.on_retransmit_received(2, 96)
    assert handler.active_count == 0
    handler.process_timeouts(10 * MS, resend)
    assert resend.calls == []

    lingering = unicast_handler()
    lingering.on_nak(2, 96, 64, TERM_LENGTH, 0, resend)
    lingering.on_retransmit_received(2, 96)
    assert lingering.is_active(2, 96)


def test_process_timeouts_with_nothing_active_is_a_no_op() -> None:
    handler = unicast_handler()
    resend = Recorder()
    handler.process_timeouts(10**15, resend)
    assert resend.calls == []


def test_resend_failure_leaves_no_half_registered_action() -> None:
    handler = unicast_handler()

    def failing(term_id: int, term_offset: int, length: int) -> None:
        raise OSError("send failed")

    with pytest.raises(OSError, match="send failed"):
        handler.on_nak(0, 0, 32, TERM_LENGTH, 0, failing)
    assert handler.active_count == 0
    resend = Recorder()
    handler.on_nak(0, 0, 32, TERM_LENGTH, 1, resend)
    assert resend.calls == [(0, 0, 32)]


def test_max_actions_must_be_positive() -> None:
    with pytest.raises(DriverConfigurationError):
        unicast_handler(max_actions=0)


@given(
    st.lists(
        st.tuples(
            st.booleans(),  # NAK (True) or process_timeouts
            st.integers(min_value=0, max_value=3),  # term id
            st.integers(min_value=0, max_value=7),  # offset in frames
            st.integers(min_value=0, max_value=40 * MS),  # time step
        ),
        max_size=80,
    )
)
def test_never_resends_a_key_again_within_linger(ops: list[tuple[bool, int, int, int]]) -> None:
    handler = RetransmitHandler(Fixed(0), Fixed(60 * MS), max_actions=4)
    sent_at: dict[tuple[int, int], int] = {}
    now = 0

    def resend(term_id: int, term_offset: int, length: int) -> None:
        key = (term_id, term_offset)
        if key in sent_at:
            assert now - sent_at[key] > 60 * MS
        sent_at[key] = now

    for is_nak, term_id, frame, step in ops:
        now += step
        if is_nak:
            handler.on_nak(term_id, frame * 32, 32, TERM_LENGTH, now, resend)
        else:
            handler.process_timeouts(now, resend)
        assert handler.active_count <= 4
