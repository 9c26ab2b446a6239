"""The poller's naps: how long, when feedback may wait, whether reads come as a flow (pure), and the socket watch
that lets it wait (real sockets on a real loop)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from endpoint.poller import FEEDBACK_WAIT_NS, ReadFlow, _SocketWatch, feedback_wake_ns, nap_plan

MS = 1_000_000
S = 1_000 * MS


def test_within_a_second_of_work_naps_are_short_and_feedback_ends_them_at_once() -> None:
    assert nap_plan(10 * S, 10 * S - 999 * MS, 10 * S + 80 * MS, sound=True) == (1 * MS, False)
    assert nap_plan(10 * S, 10 * S - 1, 10 * S + 80 * MS, sound=False) == (1 * MS, False)


def test_deeply_idle_a_sound_nap_lasts_until_the_next_timer_and_lets_feedback_wait() -> None:
    assert nap_plan(10 * S, 9 * S, 10 * S + 80 * MS, sound=True) == (80 * MS, True)
    assert nap_plan(10 * S, 0, 10 * S + 100, sound=True) == (1 * MS, True)  # a timer due at once: a short nap


def test_deeply_idle_but_waiting_for_what_rings_nothing_naps_10_ms_and_feedback_does_not_wait() -> None:
    assert nap_plan(10 * S, 9 * S, 10 * S + 80 * MS, sound=False) == (10 * MS, False)


def test_messages_spread_out_are_no_flow_and_a_full_rate_stream_is_one() -> None:
    # A 1,000-player game server: an input every 50 µs, read one or two a round.
    game = ReadFlow(0)
    assert not any(game.add(t * 50_000, 1) for t in range(1, 200))
    # A stream at full rate: batches of 32 every 20 µs; a flow before its first window ends.
    stream = ReadFlow(0)
    flags = [stream.add(t * 20_000, 32) for t in range(1, 100)]
    assert flags[0] is False
    assert all(flags[1:])


def test_a_flow_ends_with_the_first_window_that_reads_too_few() -> None:
    flow = ReadFlow(0)
    assert flow.add(100_000, 64)
    assert flow.add(MS, 1)  # the window that ends: 65 in 1 ms
    assert flow.add(MS + 10_000, 1)  # judged again only when the next window ends
    assert not flow.add(2 * MS, 1)
    # A window a nap stretched is judged by its rate: 100 messages over 2 ms is under 64 per ms, 130 over it.
    assert not flow.add(4 * MS, 100)
    assert flow.add(6 * MS, 130)


def test_feedback_ends_a_deep_nap_a_little_later_unless_the_nap_ends_first() -> None:
    assert feedback_wake_ns(5 * S, 5 * S + 2 * FEEDBACK_WAIT_NS) == 5 * S + FEEDBACK_WAIT_NS
    assert feedback_wake_ns(5 * S, 5 * S + FEEDBACK_WAIT_NS) is None
    assert feedback_wake_ns(5 * S, 5 * S + FEEDBACK_WAIT_NS - 1) is None
    # at most a timer step: a sound nap lasts until the next timer, so feedback waits for that round, no later
    assert 0 < FEEDBACK_WAIT_NS <= 100 * MS
    assert nap_plan(10 * S, 0, 10 * S + 100 * MS, sound=True)[0] <= FEEDBACK_WAIT_NS


@pytest.fixture
def udp() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def _bound(made: list[socket.socket]) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    made.append(sock)
    return sock


async def _until(condition: object, what: str) -> None:
    for _ in range(500):  # at most 5 s
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not seen within 5 s: {what}")


async def test_the_socket_watch_tells_data_and_feedback_apart_and_can_leave_feedback_waiting(
    udp: list[socket.socket],
) -> None:
    data, feedback, peer = _bound(udp), _bound(udp), _bound(udp)
    calls: list[str] = []
    watch = _SocketWatch(lambda: calls.append("data"), lambda: calls.append("feedback"))
    try:
        watch.watch([data], [feedback])
        peer.sendto(b"sm", feedback.getsockname())
        await _until(lambda: "feedback" in calls, "feedback readiness")
        assert "data" not in calls
        watch.watch_feedback(False)  # what a deep nap does on the first feedback
        calls.clear()
        peer.sendto(b"more", feedback.getsockname())
        peer.sendto(b"data", data.getsockname())
        await _until(lambda: "data" in calls, "data readiness while feedback is unwatched")
        data.recv(64)
        await asyncio.sleep(0.02)  # a readiness the loop had already taken in
        calls.clear()
        for _ in range(5):  # feedback unread, yet nothing calls while unwatched
            await asyncio.sleep(0.01)
        assert calls == []
        watch.watch_feedback(True)  # the nap ended: what still waits is seen at once
        await _until(lambda: "feedback" in calls, "feedback still waiting")
        while True:
            try:
                feedback.recv(64)
            except BlockingIOError:
                break
        await asyncio.sleep(0.02)
        calls.clear()
        for _ in range(5):  # read: quiet again
            await asyncio.sleep(0.01)
        assert calls == []
    finally:
        watch.close()


async def test_a_closed_watch_can_watch_again(udp: list[socket.socket]) -> None:
    data, feedback, peer = _bound(udp), _bound(udp), _bound(udp)
    calls: list[str] = []
    watch = _SocketWatch(lambda: calls.append("data"), lambda: calls.append("feedback"))
    watch.watch([data], [feedback])
    watch.close()
    try:
        watch.watch([data], [feedback])
        peer.sendto(b"sm", feedback.getsockname())
        await _until(lambda: "feedback" in calls, "feedback readiness after the watch was closed and made again")
    finally:
        watch.close()
