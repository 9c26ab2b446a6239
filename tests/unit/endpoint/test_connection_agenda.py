"""The end point's timer agenda and each connection's next check, with numbers only: no clock, no socket, no loop.

What is proven: the agenda hands back exactly what is due (and only once), a re-filed item keeps only its latest
time, the heap stays bounded under endless re-filing; a connection's next check is never later than its keepalive's
window allows nor later than one grid step after its peer would be overdue or dead; idle connections that keep on
the grid have their checks (and keepalives) fall on the same instants; and, with each end looked at only when its
agenda says so, the liveness promise of ``test_liveness`` still holds (a dead peer declared dead within
``peer_timeout`` plus one ``ping_interval``, a live one never).
"""

from __future__ import annotations

import heapq
import random

import pytest

from endpoint.connection.agenda import Agenda, grid_after
from endpoint.connection.liveness import Liveness, Verdict, tick_interval_ns

MS = 1_000_000
PING = 1_000 * MS
TIMEOUT = 5_000 * MS
GRID = tick_interval_ns(PING, 500 * MS, 10 * MS)


# ------------------------------------------------------------------------------------------------ the agenda


def test_only_what_is_due_comes_back_earliest_first_and_once() -> None:
    agenda: Agenda[str] = Agenda()
    agenda.file("c", 30)
    agenda.file("a", 10)
    agenda.file("b", 20)
    assert len(agenda) == 3
    assert agenda.next_due_ns == 10
    assert agenda.pop_due(9) == []
    assert agenda.pop_due(20) == ["a", "b"]
    assert agenda.pop_due(20) == []
    assert "c" in agenda
    assert "a" not in agenda
    assert agenda.next_due_ns == 30


def test_the_slack_takes_what_is_due_just_after_now() -> None:
    agenda: Agenda[str] = Agenda()
    agenda.file("now", 100)
    agenda.file("soon", 104)
    agenda.file("later", 106)
    assert agenda.pop_due(100, slack_ns=5) == ["now", "soon"]
    assert agenda.pop_due(100, slack_ns=5) == []
    assert agenda.due_of("later") == 106


def test_filing_again_replaces_the_time_either_way_and_discard_removes() -> None:
    agenda: Agenda[str] = Agenda()
    agenda.file("x", 50)
    agenda.file("x", 80)  # later
    assert agenda.pop_due(60) == []
    assert agenda.next_due_ns == 80
    agenda.file("x", 20)  # sooner
    assert agenda.pop_due(25) == ["x"]
    assert agenda.pop_due(1_000) == []  # its stale entries at 50 and 80 are skipped
    agenda.file("y", 5)
    agenda.discard("y")
    agenda.discard("never filed")
    assert agenda.next_due_ns is None
    assert agenda.pop_due(1_000) == []
    assert len(agenda) == 0


def test_ties_come_back_in_the_order_filed() -> None:
    agenda: Agenda[int] = Agenda()
    for item in (3, 1, 2):
        agenda.file(item, 7)
    assert agenda.pop_due(7) == [3, 1, 2]


def test_the_heap_stays_bounded_by_the_live_entries_under_endless_refiling() -> None:
    agenda: Agenda[int] = Agenda()
    rng = random.Random(7)
    for round_ in range(20_000):
        agenda.file(rng.randrange(100), rng.randrange(1_000_000))
        if round_ % 7 == 0:
            agenda.discard(rng.randrange(100))
        assert len(agenda._heap) <= 2 * len(agenda) + 65
    due = {item: agenda.due_of(item) for item in range(100) if item in agenda}
    popped = agenda.pop_due(1_000_000)
    assert sorted(popped) == sorted(due)
    assert [due[item] for item in popped] == sorted(due.values())


def test_the_grid() -> None:
    assert grid_after(0, 500) == 500
    assert grid_after(499, 500) == 500
    assert grid_after(500, 500) == 1_000


# ------------------------------------------------------------------------------------------------ next check


def test_the_keepalive_slack_is_half_a_ping_interval_unless_the_timeout_leaves_less() -> None:
    assert Liveness(0, PING, TIMEOUT).keepalive_slack_ns == PING // 2
    assert Liveness(0, 200 * MS, 1_000 * MS).keepalive_slack_ns == 100 * MS
    assert Liveness(0, 200 * MS, 400 * MS).keepalive_slack_ns == 50 * MS  # a quarter of the 200 ms left


def test_an_idle_connection_is_next_looked_at_when_its_keepalive_window_closes_on_the_grid() -> None:
    live = Liveness(0, PING, TIMEOUT)
    live.sent(1_000 * MS)
    live.heard(1_200 * MS)
    # owed at 2.0 s, may wait until 2.5 s: the last grid point inside the window
    assert live.next_check_ns(GRID) == 2_500 * MS
    live.sent(1_100 * MS)  # owed 2.1 s, window to 2.6 s: 2.5 s is the last grid point in it
    assert live.next_check_ns(GRID) == 2_500 * MS
    assert live.check(2_500 * MS) is Verdict.KEEPALIVE


def test_a_window_without_a_grid_point_is_checked_when_the_keepalive_is_owed() -> None:
    live = Liveness(0, 200 * MS, 400 * MS)  # slack 50 ms, grid 100 ms
    live.sent(110 * MS)  # owed 310, window to 360: no multiple of 100 inside
    assert live.next_check_ns(100 * MS) == 310 * MS


def test_a_quiet_peer_is_looked_at_one_step_after_it_is_overdue() -> None:
    live = Liveness(0, PING, TIMEOUT)
    live.heard(100 * MS)
    live.sent(10_000 * MS)  # we keep sending: only the peer's silence matters
    assert live.next_check_ns(GRID) == 2_500 * MS  # overdue at 2.1 s: the next grid point after it
    short = Liveness(0, 200 * MS, 300 * MS)  # a timeout shorter than two ping intervals: checked just past it
    short.sent(10_000 * MS)
    assert short.next_check_ns(100 * MS) == 400 * MS
    assert short.check(400 * MS) is Verdict.DEAD


@pytest.mark.parametrize("seed", range(20))
def test_idle_connections_that_keep_on_the_grid_are_all_looked_at_on_the_same_instants(seed: int) -> None:
    """A thousand idle connections started at random times: after their first keepalive on the grid, every look
    (and every keepalive) falls on a grid point, and each connection is looked at once per 1.5 ping intervals."""
    rng = random.Random(seed)
    agenda: Agenda[int] = Agenda()
    ends = []
    for index in range(1_000):
        start = rng.randrange(2 * PING)
        live = Liveness(start, PING, TIMEOUT)
        ends.append(live)
        agenda.file(index, grid_after(start, GRID))
    instants: set[int] = set()
    looks = keepalives = 0
    now = 0
    horizon = 30 * PING
    while now < horizon:
        now = agenda.next_due_ns or horizon
        for index in agenda.pop_due(now, 5 * MS):
            live = ends[index]
            live.heard(now)  # the peer's keepalives keep arriving
            looks += 1
            if now > 5 * PING:
                instants.add(now)
            verdict = live.check(now)
            assert verdict is not Verdict.DEAD
            if verdict is Verdict.KEEPALIVE:
                keepalives += 1
                live.sent(now)
            agenda.file(index, max(grid_after(now, GRID), live.next_check_ns(GRID)))
    assert all(instant % GRID == 0 for instant in instants)
    # one keepalive per connection every 1.5 s (a third fewer than one a second), and hardly a look more
    assert 1_000 * 30 / 1.5 * 0.9 < keepalives < 1_000 * 30 / 1.5 * 1.1
    assert looks < keepalives * 1.2


# ------------------------------------------------------------------------------------------------ two ends


def _simulate(seed: int, die: str | None, busy: bool, horizon: int) -> dict[str, tuple[int | None, int | None]]:
    """Two ends, each looked at only when its agenda says so (plus the slack), keepalives arriving within 5 ms
    (they ride the reliable stream: late, never lost); ``die`` names the end SIGKILLed at a random time; ``busy``:
    both send data every few milliseconds. Returns each end's (death, declared dead of its peer)."""
    rng = random.Random(seed)
    names = ("a", "b")
    live = {name: Liveness(0, PING, TIMEOUT) for name in names}
    agenda: dict[str, Agenda[str]] = {name: Agenda() for name in names}
    dead_at = {name: None if name != die else rng.randrange(TIMEOUT, horizon - 3 * TIMEOUT) for name in names}
    declared: dict[str, int | None] = {name: None for name in names}
    events: list[tuple[int, int, str, str]] = []
    order = 0

    def push(at: int, kind: str, name: str) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at, order, kind, name))

    for name in names:
        agenda[name].file(name, grid_after(rng.randrange(GRID), GRID))
        push(agenda[name].next_due_ns or 0, "look", name)
        if busy:
            push(rng.randrange(MS), "data", name)
    while events:
        now, _, kind, name = heapq.heappop(events)
        if now > horizon:
            break
        other = "b" if name == "a" else "a"
        death = dead_at[name]
        if death is not None and now >= death:
            continue
        if kind == "arrive":
            live[name].heard(now)
        elif kind == "data":
            live[name].sent(now)
            push(now + rng.randrange(1, 5 * MS), "arrive", other)
            push(now + rng.randrange(1, 10 * MS), "data", name)
        else:
            late = rng.randrange(3 * MS)  # the poller's tick comes a little after the grid point
            for _ in agenda[name].pop_due(now + late, 5 * MS):
                verdict = live[name].check(now + late)
                if verdict is Verdict.DEAD:
                    if declared[name] is None:
                        declared[name] = now + late
                    continue
                if verdict is Verdict.KEEPALIVE:
                    live[name].sent(now + late)
                    push(now + late + rng.randrange(1, 5 * MS), "arrive", other)
                agenda[name].file(name, max(grid_after(now + late, GRID), live[name].next_check_ns(GRID)))
            due = agenda[name].next_due_ns
            if due is not None:
                push(due, "look", name)
    return {name: (dead_at[name], declared[name]) for name in names}


@pytest.mark.parametrize("busy", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_looked_at_only_when_due_a_live_peer_is_never_declared_dead(busy: bool, seed: int) -> None:
    ends = _simulate(seed, None, busy, 20 * TIMEOUT)
    assert ends["a"][1] is None
    assert ends["b"][1] is None


@pytest.mark.parametrize("victim", ["a", "b"])
@pytest.mark.parametrize("busy", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_looked_at_only_when_due_a_dead_peer_is_declared_dead_within_the_timeout_plus_one_ping(
    victim: str, busy: bool, seed: int
) -> None:
    ends = _simulate(seed, victim, busy, 10 * TIMEOUT)
    died = ends[victim][0]
    declared = ends["b" if victim == "a" else "a"][1]
    assert died is not None
    assert declared is not None
    assert died < declared <= died + TIMEOUT + PING
