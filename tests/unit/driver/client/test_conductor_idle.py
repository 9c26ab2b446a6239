"""The client conductor thread's idle strategy: Aeron's one sleep, or (``busy_sleep_duration_ns``, ours) the busy
sleep while work is recent and the idle sleep once a second of sleeps found none."""

from __future__ import annotations

import pytest

from driver.client.aeron import _idle_strategy
from driver.config import ClientContext
from driver.idle import BackoffIdleStrategy, SleepingIdleStrategy


def test_without_a_busy_sleep_the_conductor_sleeps_aerons_one_period() -> None:
    strategy = _idle_strategy(ClientContext(idle_sleep_duration_ns=16_000_000).conclude())
    assert isinstance(strategy, SleepingIdleStrategy)
    slept: list[float] = []
    strategy.park = slept.append
    strategy.idle(1)
    strategy.idle(0)
    assert slept == [pytest.approx(0.016)]


def test_a_busy_sleep_holds_for_a_second_of_idle_sleeps_then_the_idle_sleep() -> None:
    context = ClientContext(idle_sleep_duration_ns=10_000_000, busy_sleep_duration_ns=2_000_000).conclude()
    strategy = _idle_strategy(context)
    assert isinstance(strategy, BackoffIdleStrategy)
    slept: list[float] = []
    strategy.park = slept.append
    for _ in range(500):  # a second of 2 ms sleeps, no spins or yields
        strategy.idle(0)
    assert slept == [pytest.approx(0.002)] * 500
    strategy.idle(0)
    strategy.idle(0)
    assert slept[-1] == pytest.approx(0.01)
    assert strategy.park_s() == pytest.approx(0.01)
    strategy.idle(1)  # work: busy again
    strategy.idle(0)
    assert slept[-1] == pytest.approx(0.002)
