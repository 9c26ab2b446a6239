from __future__ import annotations

import socket
import threading
import time

import pytest

from driver.agent import AgentInvoker, AgentRunner, CompositeAgent, SocketParker
from driver.errors import AgentTerminationError, DriverConfigurationError
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
    with pytest.raises(DriverConfigurationError, match="idle strategy"):
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


# ------------------------------------------------------------------------------------------------ SocketParker


def _bound_udp_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def test_a_socket_park_ends_when_a_datagram_arrives() -> None:
    receiver, sender = _bound_udp_socket(), _bound_udp_socket()
    parker = SocketParker(lambda: [receiver])
    try:
        parked = threading.Thread(target=parker, args=(30.0,), daemon=True)
        parked.start()
        time.sleep(0.05)
        sender.sendto(b"wake", receiver.getsockname())
        parked.join(10.0)  # far below the 30 s park: only the datagram can have ended it
        assert not parked.is_alive()
    finally:
        parker.close()
        receiver.close()
        sender.close()


def test_a_socket_park_follows_the_agents_sockets_and_survives_a_closed_one() -> None:
    first, second, sender = _bound_udp_socket(), _bound_udp_socket(), _bound_udp_socket()
    watched = [first]
    parker = SocketParker(lambda: watched)
    try:
        parker(0.002)
        first.close()  # closed under the parker: the next park falls back to a sleep, no error
        parker(0.002)
        watched[:] = [second]
        parked = threading.Thread(target=parker, args=(30.0,), daemon=True)
        parked.start()
        time.sleep(0.05)
        sender.sendto(b"wake", second.getsockname())
        parked.join(10.0)
        assert not parked.is_alive()
    finally:
        parker.close()
        second.close()
        sender.close()


def test_an_agent_without_sockets_and_short_parks_just_sleep() -> None:
    parker = SocketParker(list)
    parker(0.0001)
    parker(0.002)
    parker.close()


def test_a_runner_gives_a_socket_agents_idle_strategy_a_socket_park() -> None:
    class SocketAgent:
        role_name = "socket-agent"

        def __init__(self) -> None:
            self.sock = _bound_udp_socket()
            self.received = 0

        def on_start(self) -> None:
            self.sock.setblocking(False)

        def do_work(self) -> int:
            try:
                self.sock.recv(64)
            except BlockingIOError:
                return 0
            self.received += 1
            return 1

        def on_close(self) -> None:
            self.sock.close()

        def readable_sockets(self) -> list[socket.socket]:
            return [self.sock]

    agent = SocketAgent()
    strategy = BackoffIdleStrategy()
    runner = AgentRunner(agent, strategy, lambda exc: None)
    runner.park_on_sockets = True
    sender = _bound_udp_socket()
    try:
        address = agent.sock.getsockname()
        runner.start()
        deadline = time.monotonic() + 10
        while not isinstance(strategy.park, SocketParker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(strategy.park, SocketParker)
        for _ in range(3):
            sender.sendto(b"x", address)
        while agent.received < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert agent.received == 3
    finally:
        runner.close()
        sender.close()
