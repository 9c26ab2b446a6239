"""Handshake admission and client resend spacing: pure, time and randomness passed in."""

from __future__ import annotations

import random

import pytest

from endpoint.errors import ConfigurationError
from endpoint.handshake.admission import Admission, busy_delay, resend_delay

SECOND = 1_000_000_000


def test_takes_on_up_to_the_floor_before_anything_finished() -> None:
    admission = Admission(2 * SECOND, floor=4, ceiling=100)
    assert [admission.retry_after_ms(n, 0) for n in range(4)] == [None] * 4
    assert admission.retry_after_ms(4, 0) is not None
    assert admission.refused == 1


def test_capacity_follows_what_finished_within_the_window() -> None:
    admission = Admission(2 * SECOND, floor=4, ceiling=100)
    for i in range(30):
        admission.finished(i * SECOND // 30)  # 30 finished within the first second
    assert admission.capacity(SECOND) == 30
    assert admission.retry_after_ms(29, SECOND) is None
    assert admission.retry_after_ms(30, SECOND) is not None
    # Two seconds later they are out of the window: back to the floor.
    assert admission.capacity(3 * SECOND + 1) == 4


def test_capacity_never_passes_the_ceiling_and_the_record_is_bounded() -> None:
    admission = Admission(2 * SECOND, floor=4, ceiling=10)
    for i in range(1000):
        admission.finished(i)
    assert admission.capacity(1000) == 10
    assert len(admission._done) == 10
    assert admission.retry_after_ms(10, 1000) is not None


def test_retry_after_grows_with_the_excess_and_stays_within_the_window() -> None:
    admission = Admission(2 * SECOND, floor=10, ceiling=100)
    small = admission.retry_after_ms(10, 0)
    large = admission.retry_after_ms(60, 0)
    huge = admission.retry_after_ms(10_000, 0)
    assert small is not None
    assert large is not None
    assert huge is not None
    assert 20 <= small < large <= huge == 2000
    assert small == 200  # one more than ten in flight: a tenth of the window at ten per window


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        Admission(0, 1, 1)
    with pytest.raises(ConfigurationError):
        Admission(SECOND, 0, 1)


def test_resends_grow_up_to_a_cap_and_are_spread() -> None:
    rng = random.Random(7)
    step = 2.0
    for sent in range(1, 20):
        delays = [resend_delay(step, sent, rng) for _ in range(200)]
        base = min(step * 1.25 ** (sent - 1), 2 * step)
        assert all(0.75 * base <= d <= 1.25 * base for d in delays)
        # Clients that sent together do not resend together: the delays spread over most of the jitter's range.
        assert max(delays) - min(delays) > 0.4 * base
    with pytest.raises(ValueError):
        resend_delay(step, 0, rng)


def test_busy_delay_honours_the_retry_after_and_backs_off() -> None:
    rng = random.Random(3)
    step = 2.0
    first = [busy_delay(300, 1, step, rng) for _ in range(200)]
    assert all(0.3 <= d <= 0.45 for d in first)
    third = [busy_delay(300, 3, step, rng) for _ in range(200)]
    assert all(1.2 <= d <= 1.8 for d in third)
    capped = [busy_delay(300, 30, step, rng) for _ in range(50)]
    assert all(step <= d <= 1.5 * step for d in capped)
    unnamed = busy_delay(None, 1, step, rng)
    assert 0.2 <= unnamed <= 0.3
    with pytest.raises(ValueError):
        busy_delay(300, 0, step, rng)
