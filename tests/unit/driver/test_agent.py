from __future__ import annotations

import threading

import pytest

from driver.agent import AgentInvoker, AgentRunner, CompositeAgent
from driver.errors import AgentTerminationError, ConfigurationError
from driver.idle import BackoffIdleStrategy, BusySpinIdleStrategy, idle_strategy_from_name


class CountingAgent:
    def __init__(self, role_name: str = "counter", fail_at: int = -1, stop_at: int = -1) -> None:
        self.role_name = role_name
        self.calls = 0
        self.started = False
        self.closed = False
        self._fail_at = fail_at
        self._stop_at = stop_at
        self.reached = threading.Event()

    def on_start(self) -> None:
        self.started = True

    def do_work(self) -> int:
        self.calls += 1
        if self.calls == self._fail_at:
            raise RuntimeError("boom")
        if self.calls == self._stop_at:
            self.reached.set()
            raise AgentTerminationError("done")
        return 1

    def on_close(self) -> None:
        self.closed = True


def test_invoker_routes_errors_and_stops_on_termination() -> None:
    errors: list[BaseException] = []
    agent = CountingAgent(fail_at=2, stop_at=4)
    invoker = AgentInvoker(agent, errors.append)
    assert invoker.invoke() == 0  # not started yet
    invoker.start()
    results = [invoker.invoke() for _ in range(5)]
    assert results == [1, 0, 1, 0, 0]
    assert [str(e) for e in errors] == ["boom"]
    assert agent.closed
    assert not invoker.is_running


def test_runner_thread_survives_errors_and_closes() -> None:
    errors: list[BaseException] = []
    agent = CountingAgent(fail_at=3, stop_at=50)
    runner = AgentRunner(agent, BackoffIdleStrategy(), errors.append)
    runner.start()
    assert agent.reached.wait(10)
    assert runner.close(5)
    assert agent.started
    assert agent.closed
    assert len(errors) == 1


def test_composite_runs_every_agent() -> None:
    a, b = CountingAgent("a"), CountingAgent("b")
    composite = CompositeAgent([a, b])
    assert composite.role_name == "[a,b]"
    assert composite.do_work() == 2
    assert (a.calls, b.calls) == (1, 1)


def test_idle_strategy_names() -> None:
    assert isinstance(idle_strategy_from_name("backoff"), BackoffIdleStrategy)
    assert isinstance(idle_strategy_from_name("org.agrona.concurrent.BusySpinIdleStrategy"), BusySpinIdleStrategy)
    with pytest.raises(ConfigurationError, match="idle strategy"):
        idle_strategy_from_name("fastest")


def test_backoff_parks_after_spins_and_yields_then_idles_deeper() -> None:
    idle = BackoffIdleStrategy(
        max_spins=1,
        max_yields=1,
        min_park_period_ns=1000,
        max_park_period_ns=4000,
        deep_park_period_ns=8000,
        deep_idle_after=2,
        deeper_park_period_ns=16000,
    )
    for _ in range(6):
        idle.idle(0)
    assert idle._park_s == pytest.approx(4e-6)
    idle.idle(0)
    assert idle._park_s == pytest.approx(8e-6)
    for _ in range(2):
        idle.idle(0)
    assert idle._park_s == pytest.approx(16e-6)
    idle.idle(1)
    assert idle._park_s == pytest.approx(1e-6)
