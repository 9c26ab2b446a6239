"""Liveness of a connection's peer with injected time: the detection promise, proven without a loop.

The promise (issue 17): a peer that dies is declared dead within ``peer_timeout`` plus one ``ping_interval``,
every time, and a live peer never is, whatever the traffic (idle, one way streaming with our own sends held
back by back pressure, a peer that only ever sends).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable

import pytest

from driver.core.silence import DROPPED_SILENCE_TIMEOUTS
from endpoint.connection.liveness import Liveness, Verdict, tick_interval_ns

MS = 1_000_000
PING = 200 * MS
TIMEOUT = 1_000 * MS
TICK = tick_interval_ns(PING, 100 * MS, 10 * MS)


def test_dead_only_once_the_peer_timeout_has_passed_since_the_last_message() -> None:
    live = Liveness(0, PING, TIMEOUT)
    live.heard(300 * MS)
    assert live.deadline_ns == 1_300 * MS
    assert live.check(1_300 * MS) is not Verdict.DEAD
    assert live.check(1_300 * MS + 1) is Verdict.DEAD
    live.heard(1_300 * MS + 1)  # too late is too late only once checked: a message read first still counts
    assert live.check(1_300 * MS + 1) is not Verdict.DEAD


def test_a_silence_while_our_driver_dropped_datagrams_is_dead_only_after_three_peer_timeouts() -> None:
    """Our kernel dropped datagrams for the driver's sockets during the silence: the peer may have spoken and been
    lost on our side (an overloaded reader), so it gets DROPPED_SILENCE_TIMEOUTS timeouts, no more."""
    assert DROPPED_SILENCE_TIMEOUTS == 3
    live = Liveness(0, PING, TIMEOUT)
    live.heard(300 * MS)
    live.datagrams_dropped(200 * MS)  # before the peer was last heard: this silence saw none
    assert live.check(1_300 * MS + 1) is Verdict.DEAD
    live.datagrams_dropped(900 * MS)
    assert live.check(1_300 * MS + 1) is not Verdict.DEAD
    assert live.check(3_300 * MS) is not Verdict.DEAD
    assert live.check(3_300 * MS + 1) is Verdict.DEAD
    live.heard(3_300 * MS)  # heard again: a new silence, which needs drops of its own
    assert live.check(4_300 * MS + 1) is Verdict.DEAD


def test_a_keepalive_is_due_after_a_ping_interval_without_sending_whatever_is_heard() -> None:
    live = Liveness(0, PING, TIMEOUT)
    live.heard(150 * MS)
    assert live.check(199 * MS) is Verdict.ALIVE
    assert live.check(200 * MS) is Verdict.KEEPALIVE  # hearing the peer does not excuse our own silence
    live.sent(200 * MS)
    assert live.check(399 * MS) is Verdict.ALIVE
    assert live.check(400 * MS) is Verdict.KEEPALIVE


def test_time_never_runs_backwards_and_not_reading_restarts_the_clock() -> None:
    live = Liveness(1_000 * MS, PING, TIMEOUT)
    live.heard(500 * MS)
    live.sent(500 * MS)
    assert live.last_heard_ns == live.last_sent_ns == 1_000 * MS
    live.not_reading(2_500 * MS)  # a stalled consumer of ours: the peer could not be read
    assert live.check(3_500 * MS) is not Verdict.DEAD
    assert live.check(3_500 * MS + 1) is Verdict.DEAD


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ValueError):
        Liveness(0, TIMEOUT, TIMEOUT)
    with pytest.raises(ValueError):
        Liveness(0, 0, TIMEOUT)


def test_the_tick_is_half_a_ping_interval_within_bounds() -> None:
    assert tick_interval_ns(1_000 * MS, 100 * MS, 10 * MS) == 100 * MS
    assert tick_interval_ns(PING, 100 * MS, 10 * MS) == 100 * MS
    assert tick_interval_ns(60 * MS, 100 * MS, 10 * MS) == 30 * MS
    assert tick_interval_ns(4 * MS, 100 * MS, 10 * MS) == 10 * MS


# ------------------------------------------------------------------------------------------------ two ends


class _End:
    """One end of a simulated connection: ticks every ``TICK`` from its own phase, sends per its pattern."""

    def __init__(self, name: str, phase: int, sends_data: Callable[[int], bool], blocked: Callable[[int], bool]):
        self.name = name
        self.phase = phase
        self.live = Liveness(0, PING, TIMEOUT)
        self.sends_data = sends_data
        self.blocked = blocked
        """Our publication is back pressured at this time: nothing we offer goes out."""
        self.dead_at: int | None = None
        self.declared_dead_at: int | None = None


def _simulate(seed: int, pattern: str, die: str | None, horizon: int) -> tuple[_End, _End]:
    """Run ends ``a`` and ``b`` until ``horizon``; ``die`` names the end SIGKILLed at a random time."""
    rng = random.Random(seed)
    never: Callable[[int], bool] = lambda t: False  # noqa: E731
    always: Callable[[int], bool] = lambda t: True  # noqa: E731
    # One way streaming: a sends data all the time and is back pressured most of it (its keepalives with it).
    a_blocked: Callable[[int], bool] = (lambda t: (t // (7 * MS)) % 5 != 0) if pattern == "a_streams" else never
    a = _End("a", rng.randrange(TICK), always if pattern in ("a_streams", "both_busy") else never, a_blocked)
    b = _End("b", rng.randrange(TICK), always if pattern == "both_busy" else never, never)
    peer = {id(a): b, id(b): a}
    death = rng.randrange(TIMEOUT, horizon - 3 * TIMEOUT)
    if die == "a":
        a.dead_at = death
    elif die == "b":
        b.dead_at = death
    events: list[tuple[int, int, str, int]] = []  # (time, order, kind, end)
    order = 0
    ends = {id(a): a, id(b): b}
    for end in (a, b):
        heapq.heappush(events, (end.phase, order, "tick", id(end)))
        order += 1
        if end.sends_data(0):
            heapq.heappush(events, (rng.randrange(MS), order, "data", id(end)))
            order += 1
    while events:
        now, _, kind, key = heapq.heappop(events)
        if now > horizon:
            break
        end = ends[key]
        other = peer[key]
        if end.dead_at is not None and now >= end.dead_at:
            continue  # a dead end does nothing at all
        if kind == "arrive":
            end.live.heard(now + rng.randrange(MS))  # read on the next poll, within a millisecond
        elif kind == "data":
            if not end.blocked(now):
                end.live.sent(now)
                heapq.heappush(events, (now + rng.randrange(1, MS), order, "arrive", id(other)))
                order += 1
            heapq.heappush(events, (now + rng.randrange(1, 3 * MS), order, "data", key))
            order += 1
        else:  # tick
            verdict = end.live.check(now)
            if verdict is Verdict.DEAD:
                if end.declared_dead_at is None:
                    end.declared_dead_at = now
            elif verdict is Verdict.KEEPALIVE and not end.blocked(now):
                end.live.sent(now)
                heapq.heappush(events, (now + rng.randrange(1, MS), order, "arrive", id(other)))
                order += 1
            heapq.heappush(events, (now + TICK, order, "tick", key))
        order += 1
    return a, b


PATTERNS = ("idle", "a_streams", "both_busy")


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("seed", range(40))
def test_a_live_peer_is_never_declared_dead(pattern: str, seed: int) -> None:
    a, b = _simulate(seed, pattern, None, 30 * TIMEOUT)
    assert a.declared_dead_at is None
    assert b.declared_dead_at is None


@pytest.mark.parametrize("victim", ["a", "b"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("seed", range(40))
def test_a_dead_peer_is_declared_dead_within_the_peer_timeout_plus_one_ping_interval(
    victim: str, pattern: str, seed: int
) -> None:
    a, b = _simulate(seed, pattern, victim, 12 * TIMEOUT)
    dead, survivor = (a, b) if victim == "a" else (b, a)
    assert dead.dead_at is not None
    assert survivor.declared_dead_at is not None
    # In flight at the death, a message may still arrive and be read up to 2 ms later: that is the peer's.
    assert dead.dead_at < survivor.declared_dead_at <= dead.dead_at + 2 * MS + TIMEOUT + TICK
    assert survivor.declared_dead_at <= dead.dead_at + TIMEOUT + PING


def test_an_overdue_peer_is_probed_every_half_ping_interval_and_still_dies_on_time() -> None:
    """Silent for two ping intervals, the peer is asked to answer (a probe, which counts as our keepalive), at most
    every half ping interval; the probes never put off its death."""
    live = Liveness(0, PING, TIMEOUT)
    probes = []
    now = 0
    while now <= TIMEOUT + TICK:
        verdict = live.check(now)
        if verdict is Verdict.DEAD:
            break
        if verdict is Verdict.PROBE:
            probes.append(now)
            live.probed(now)
        elif verdict is Verdict.KEEPALIVE:
            live.sent(now)
        now += TICK
    assert now == TIMEOUT + TICK  # dead at the first check past the timeout, probes or not
    assert probes
    assert probes[0] > 2 * PING
    assert all(later - earlier >= PING // 2 for earlier, later in itertools.pairwise(probes))
    assert live.check(probes[-1] + 1) is not Verdict.KEEPALIVE  # a probe is our send too


def test_a_probe_answered_after_keepalives_lost_in_a_row_keeps_a_live_peer() -> None:
    """The tail of a quiet stream lost: the peer's keepalives every 1.5 ping intervals vanish three times in a row
    (each revealed only by what comes after it). The probe's answer comes after them, so it is heard (its driver
    then asks for the rest): the peer lives where, unprobed, three losses in a row would have killed it."""
    every = 3 * PING // 2
    lost = {every * k for k in (1, 2, 3)}
    for probing in (True, False):
        live = Liveness(0, PING, TIMEOUT)
        died = False
        for now in range(0, 5 * TIMEOUT, TICK):
            if now % every == 0 and now and now not in lost:
                live.heard(now)  # a keepalive that arrived
            verdict = live.check(now)
            if verdict is Verdict.DEAD:
                died = True
                break
            if verdict is Verdict.PROBE and probing:
                live.probed(now)
                live.heard(now + MS)  # answered within a millisecond
            elif verdict is not Verdict.ALIVE:
                live.sent(now)
        assert died is not probing
