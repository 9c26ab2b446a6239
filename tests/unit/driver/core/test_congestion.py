from __future__ import annotations

import pytest

from driver.core.congestion import (
    INITIAL_WINDOW_LENGTH_DEFAULT,
    StaticWindowCongestionControl,
    new_congestion_control,
)
from driver.errors import DriverConfigurationError, InvalidChannelError


@pytest.mark.parametrize(
    ("initial_window", "term_length", "expected"),
    [
        (128 * 1024, 64 * 1024, 32 * 1024),  # half a term wins
        (128 * 1024, 256 * 1024, 128 * 1024),  # the whole half term is allowed
        (128 * 1024, 16 * 1024 * 1024, 128 * 1024),  # initial window wins
        (4096, 64 * 1024, 4096),
    ],
)
def test_window_is_min_of_half_term_and_initial_window(initial_window: int, term_length: int, expected: int) -> None:
    cc = StaticWindowCongestionControl(initial_window, term_length)
    assert cc.initial_window_length == expected
    assert cc.on_track_rebuild(0, 0, 0, 0, 0, 0, False) == (expected, False)


def test_default_initial_window_is_128_kib() -> None:
    assert INITIAL_WINDOW_LENGTH_DEFAULT == 128 * 1024


def test_outcome_is_fixed_whatever_happens() -> None:
    cc = StaticWindowCongestionControl(INITIAL_WINDOW_LENGTH_DEFAULT, 1 << 24)
    now = 0
    outcomes = set()
    for i in range(50):
        now += 7_000_000
        cc.on_rttm(now, 1_000_000 * i, ("127.0.0.1", 40123))
        outcomes.add(cc.on_track_rebuild(now, i * 4096, i * 1024, i * 8192, i * 100, i * 200, i % 2 == 0))
    assert outcomes == {(128 * 1024, False)}


def test_never_measures_rtt() -> None:
    cc = StaticWindowCongestionControl(INITIAL_WINDOW_LENGTH_DEFAULT, 1 << 16)
    for now in (0, 1, 10**9, 10**15):
        assert cc.should_measure_rtt(now) is False
        cc.on_rttm_sent(now)
    cc.close()


@pytest.mark.parametrize(("initial_window", "term_length"), [(0, 65536), (-1, 65536), (4096, 0)])
def test_rejects_non_positive_sizes(initial_window: int, term_length: int) -> None:
    with pytest.raises(DriverConfigurationError):
        StaticWindowCongestionControl(initial_window, term_length)


def test_factory() -> None:
    cc = new_congestion_control(None, term_length=1 << 16)
    assert isinstance(cc, StaticWindowCongestionControl)
    assert cc.initial_window_length == 1 << 15
    assert new_congestion_control("static", term_length=1 << 20, initial_window=8192).initial_window_length == 8192
    with pytest.raises(InvalidChannelError):
        new_congestion_control("cubic", term_length=1 << 16)
