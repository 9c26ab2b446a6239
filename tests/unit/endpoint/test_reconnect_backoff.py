"""The reconnect backoff policy, without I/O: seeded random sources and times passed in.

Full jitter stays within the doubling ceiling and the maximum; decorrelated jitter stays between the initial
delay and three times the previous one (capped); the schedule numbers attempts, grows the delays and gives up
when the next attempt could not start before the deadline. The configuration fields map onto the policy.
"""

from __future__ import annotations

import random

import pytest

from endpoint import ClientError, EndpointError, ReconnectFailedError, Reconnecting
from endpoint.client import Client
from endpoint.config import ClientConfiguration
from endpoint.connection.shell import Connection
from endpoint.errors import ConfigurationError
from endpoint.listeners import ListenerManager
from endpoint.reconnect import Backoff, ReconnectSchedule


class Fixed:
    """A random source that always draws the same fraction of the interval (0: its low end, 1: its high end)."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.fraction


def test_full_jitter_ceiling_doubles_up_to_the_maximum() -> None:
    backoff = Backoff(initial_delay=0.1, max_delay=1.0)
    assert [backoff.ceiling(n) for n in range(1, 7)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert backoff.ceiling(100_000) == 1.0  # no overflow far out


def test_full_jitter_draws_from_zero_to_the_ceiling() -> None:
    backoff = Backoff(initial_delay=0.1, max_delay=1.0)
    assert backoff.delay(3, Fixed(1.0)) == pytest.approx(0.4)
    assert backoff.delay(3, Fixed(0.0)) == 0.0
    rng = random.Random(18)
    for attempt in range(1, 40):
        for _ in range(50):
            assert 0.0 <= backoff.delay(attempt, rng) <= backoff.ceiling(attempt)


def test_a_seeded_source_gives_the_same_delays() -> None:
    backoff = Backoff(initial_delay=0.05, max_delay=2.0)
    first = [backoff.delay(n, random.Random(7)) for n in range(1, 10)]
    again = [backoff.delay(n, random.Random(7)) for n in range(1, 10)]
    assert first == again
    assert len(set(first)) > 1


def test_full_jitter_spreads_clients_out() -> None:
    """Many clients losing the server at once do not all come back at the same instant."""
    backoff = Backoff(initial_delay=1.0, max_delay=1.0)
    rng = random.Random(1)
    delays = [backoff.delay(1, rng) for _ in range(1000)]
    assert min(delays) < 0.1
    assert max(delays) > 0.9
    assert 0.4 < sum(delays) / len(delays) < 0.6


def test_decorrelated_jitter_stays_between_initial_and_three_times_the_previous() -> None:
    backoff = Backoff(initial_delay=0.1, max_delay=5.0, jitter="decorrelated")
    assert backoff.delay(1, Fixed(0.0)) == pytest.approx(0.1)
    assert backoff.delay(1, Fixed(1.0)) == pytest.approx(0.3)
    assert backoff.delay(2, Fixed(1.0), previous=0.3) == pytest.approx(0.9)
    assert backoff.delay(9, Fixed(1.0), previous=4.0) == 5.0  # capped
    rng = random.Random(3)
    previous = None
    for attempt in range(1, 200):
        delay = backoff.delay(attempt, rng, previous)
        high = 0.3 if previous is None else max(previous, 0.1) * 3
        assert 0.1 <= delay <= min(5.0, high) + 1e-12
        previous = delay


def test_decorrelated_jitter_grows_to_the_maximum() -> None:
    backoff = Backoff(initial_delay=0.1, max_delay=2.0, jitter="decorrelated")
    rng = random.Random(5)
    previous: float | None = None
    delays = []
    for attempt in range(1, 60):
        previous = backoff.delay(attempt, rng, previous)
        delays.append(previous)
    assert max(delays) > 1.0
    assert all(d <= 2.0 for d in delays)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"initial_delay": 0.0}, "initial_delay"),
        ({"initial_delay": 2.0, "max_delay": 1.0}, "initial_delay"),
        ({"max_delay": float("inf")}, "max_delay"),
        ({"jitter": "none"}, "jitter"),
    ],
)
def test_a_bad_policy_is_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="attempt"):
        Backoff().delay(0, random.Random(0))
    with pytest.raises(ValueError, match="attempt"):
        Backoff(jitter="decorrelated").delay(0, random.Random(0))


# ---------------------------------------------------------------------------------------------- schedule


def test_schedule_numbers_attempts_and_grows_the_delays() -> None:
    schedule = ReconnectSchedule(Backoff(initial_delay=0.1, max_delay=1.0), 100.0, start=50.0, rng=Fixed(1.0))
    now = 50.0
    delays = []
    for _ in range(6):
        delay = schedule.next_delay(now)
        assert delay is not None
        delays.append(delay)
        now += delay + 0.5  # the wait, then an attempt that failed after half a second
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert schedule.attempts == 6
    assert schedule.elapsed(now) == pytest.approx(sum(delays) + 3.0)


def test_schedule_gives_up_when_the_next_attempt_could_not_start_before_the_deadline() -> None:
    schedule = ReconnectSchedule(Backoff(initial_delay=1.0, max_delay=1.0), 5.0, start=0.0, rng=Fixed(1.0))
    assert schedule.next_delay(0.0) == 1.0
    assert schedule.remaining(1.0) == 4.0
    assert schedule.next_delay(3.9) == 1.0  # starts at 4.9: before the deadline
    assert schedule.next_delay(4.0) is None  # would start at 5.0: too late
    assert schedule.attempts == 2  # the refused one is not counted
    assert schedule.remaining(7.0) == 0.0


def test_schedule_decorrelated_follows_its_own_previous_delays() -> None:
    schedule = ReconnectSchedule(
        Backoff(initial_delay=0.1, max_delay=10.0, jitter="decorrelated"), 1000.0, start=0.0, rng=Fixed(1.0)
    )
    assert [schedule.next_delay(0.0) for _ in range(4)] == pytest.approx([0.3, 0.9, 2.7, 8.1])


def test_schedule_needs_a_positive_deadline() -> None:
    with pytest.raises(ValueError, match="deadline"):
        ReconnectSchedule(Backoff(), 0.0, start=0.0)


# ---------------------------------------------------------------------------------------------- configuration


def test_configuration_defaults_describe_a_sensible_policy() -> None:
    cfg = ClientConfiguration()
    backoff = cfg.reconnect_backoff()
    assert backoff == Backoff(initial_delay=0.1, max_delay=10.0, jitter="full")
    assert cfg.reconnect_timeout == 60.0
    assert cfg.buffer_while_reconnecting is False  # opt-in
    assert cfg.max_buffered_messages == 1024
    assert cfg.max_buffered_bytes == 4 << 20


def test_configuration_fields_reach_the_policy() -> None:
    cfg = ClientConfiguration(
        reconnect_initial_delay=0.5, reconnect_max_delay=3.0, reconnect_jitter="decorrelated", reconnect_timeout=9.0
    )
    assert cfg.reconnect_backoff() == Backoff(initial_delay=0.5, max_delay=3.0, jitter="decorrelated")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reconnect_initial_delay": 0}, "reconnect_initial_delay=0"),
        ({"reconnect_max_delay": -1.0}, "reconnect_max_delay=-1.0"),
        ({"reconnect_jitter": "equal"}, "reconnect_jitter='equal'"),
        ({"reconnect_timeout": 0}, "reconnect_timeout=0"),
        ({"reconnect_initial_delay": 5.0, "reconnect_max_delay": 1.0}, "reconnect_initial_delay=5.0 must not exceed"),
        ({"buffer_while_reconnecting": 1}, "buffer_while_reconnecting=1"),
        ({"max_buffered_messages": 0}, "max_buffered_messages=0"),
        ({"max_buffered_bytes": 100}, "max_buffered_bytes=100"),
    ],
)
def test_configuration_refuses_bad_reconnect_settings(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ClientConfiguration(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- listeners


def test_reconnect_listeners_are_registered_removed_and_cleared() -> None:
    listeners: ListenerManager[object] = ListenerManager()

    def reconnecting(event: Reconnecting) -> None:
        pass

    def reconnected(connection: object) -> None:
        pass

    assert listeners.reconnecting == listeners.reconnected == ()
    assert listeners.add_reconnecting(reconnecting) is reconnecting
    assert listeners.add_reconnected(reconnected) is reconnected
    assert listeners.reconnecting == (reconnecting,)
    assert listeners.reconnected == (reconnected,)
    assert listeners.remove(reconnecting) is True
    assert listeners.reconnecting == ()
    assert listeners.reconnected == (reconnected,)
    listeners.clear()
    assert listeners.reconnected == ()


def test_client_decorators_register_reconnect_listeners() -> None:
    client = Client(ClientConfiguration(auto_reconnect=True))

    @client.on_reconnecting
    def reconnecting(event: Reconnecting) -> None:
        pass

    @client.on_reconnected
    def reconnected(connection: Connection) -> None:
        pass

    assert client.listeners.reconnecting == (reconnecting,)
    assert client.listeners.reconnected == (reconnected,)
    assert client.remove_listener(reconnected)
    assert client.listeners.reconnected == ()


def test_reconnect_failed_error_carries_its_cause() -> None:
    cause = TimeoutError("no answer")
    error = ReconnectFailedError("gave up", cause=cause, attempts=3, elapsed=2.5, permanent=False)
    assert isinstance(error, ClientError)
    assert isinstance(error, EndpointError)
    assert error.cause is cause
    assert error.__cause__ is cause
    assert (error.attempts, error.elapsed, error.permanent) == (3, 2.5, False)
