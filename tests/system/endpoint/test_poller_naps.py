"""A loop of UDP clients (players, bots) naps at once after work when whatever arrives wakes it, and keeps its rounds
few between datagrams; a loop that reads an IPC log, or polls a server, keeps yielding after work as before.

Every end point is on a real driver; the server of the first test is a process of its own. The checks read the
poller's own decisions and count its rounds, never time them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from endpoint import Client, Connection
from endpoint.config import HANDSHAKE_STREAM_ID
from endpoint.poller import _SPIN_HANDSHAKES_MAX, LoopPoller
from support.endpoints import (
    Ack,
    Move,
    Num,
    client_config,
    connected_client,
    raw_driver,
    running_server,
    server_config,
    wait_until,
)
from support.logged_process import LoggedProcess
from support.waiting import execute_until

MS = 1_000_000


async def test_a_loop_of_udp_clients_naps_at_once_and_stays_quiet_between_datagrams(
    aeron_dir: Path, client_dir: Path, port: int, start_server: Callable[..., LoggedProcess]
) -> None:
    process = start_server(port, aeron_dir)
    await asyncio.to_thread(
        execute_until, lambda: process.has("serving "), timeout_s=30, description="the server process serving"
    )
    acks: list[Ack] = []
    clients = [Client(client_config("udp", aeron_dir, client_dir)) for _ in range(3)]
    try:
        for client in clients:
            client.on_message(Ack, lambda c, m: acks.append(m))
            await client.connect("127.0.0.1", port)
        poller = LoopPoller.for_running_loop()
        # While a handshake waited for the server's answers, rounds in which no datagram came did not look at the
        # route (a process of many clients does not read every route every round of a storm).
        assert poller.route_scans_skipped > 0
        # The handshake route goes quiet a little after the last connect.
        await wait_until(poller._naps_early, 10, what="nothing left that could arrive unseen")
        now = time.monotonic_ns()
        assert not poller._spins(now, now, now)  # work just now: nap rather than yield
        assert poller._nap_plan(now, now, now + 50 * MS)[0] == 10 * MS  # traffic flows: the driver's timers
        assert poller._nap_plan(now, now - 2_000 * MS, now + 50 * MS)[0] == 50 * MS  # quiet: until the timer

        # Messages and round trips still go both ways at once with the poller napping between them, and with one
        # duty cycle a round: what a round wrote leaves at the start of the next, which follows at once.
        flushed = poller.flushes_after_work
        for i in range(30):
            client = clients[i % len(clients)]
            assert client.send_nowait(Num(i))
            await wait_until(lambda n=i + 1: len(acks) == n, 5, what=f"answer {i}")
            assert client.connection is not None
            assert await client.connection.ping(5) > 0
        assert sorted(a.seq for a in acks) == list(range(30))
        assert poller.flushes_after_work == flushed

        # Quiet for 0.3 s: rounds come only from naps (10 ms at least) and the few datagrams of idle connections
        # (heartbeats, status messages, keepalives), not one per millisecond.
        before = poller.rounds
        await asyncio.sleep(0.3)
        assert poller.rounds - before < 150

        # Rounds look only at the images our driver's receiver wrote to (its journal), not at every image; a
        # message that comes is still read at once (each a datagram the driver reads).
        spared = poller.looks_spared
        await wait_until(lambda: poller.looks_spared > spared, 10, what="a round that did not look at every image")
        for i in range(30, 40):
            version = poller._data_version()
            assert version is not None
            assert clients[0].send_nowait(Num(i))
            await wait_until(lambda n=i + 1: len(acks) == n, 5, what=f"answer {i}")
            assert poller._data_version() != version  # the answer came as a datagram our driver read
        assert sorted(a.seq for a in acks) == list(range(40))
    finally:
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)


async def test_a_loop_of_clients_in_a_connect_storm_naps_while_their_handshakes_wait(
    client_dir: Path, port: int
) -> None:
    """More handshakes waiting on a loop's UDP routes than spin for their answers: the loop naps (each answer is a
    datagram our driver reads, and ends the nap) instead of yielding round after round. The "server" is a plain
    subscription on the handshake stream that never answers, so the handshakes keep waiting."""
    async with raw_driver(None) as aeron:
        await aeron.add_subscription_async(f"aeron:udp?endpoint=127.0.0.1:{port}", HANDSHAKE_STREAM_ID)
        count = _SPIN_HANDSHAKES_MAX + 4
        clients = [Client(client_config("udp", client_dir, client_dir, connect_timeout=30.0)) for _ in range(count)]
        connects = [asyncio.ensure_future(client.connect("127.0.0.1", port)) for client in clients]
        try:
            poller = LoopPoller.for_running_loop()
            await wait_until(
                lambda: sum(len(route.waiting) for route in poller.routes.polled) == count,
                15,
                what=f"{count} handshakes waiting for answers",
            )
            assert poller._naps_early()  # the routes' answers are datagrams: nothing arrives unseen
            await asyncio.sleep(0.15)  # (a look at every route since all were waiting: at least once a tick)
            assert poller._routes_spin_until_ns == 0
            # Quiet for 0.3 s but for resent HELLOs: naps of up to 10 ms, not a round every millisecond or less.
            before = poller.rounds
            await asyncio.sleep(0.3)
            assert poller.rounds - before < 150
            assert not any(connect.done() for connect in connects)
        finally:
            for connect in connects:
                connect.cancel()
            await asyncio.gather(*connects, return_exceptions=True)
            await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)


async def test_a_loop_that_polls_a_server_keeps_yielding_after_work(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    acks: list[Ack] = []
    async with running_server(server_config(aeron_dir, port)) as server:

        @server.on_message(Move)
        def echo(conn: Connection, msg: Move) -> None:
            conn.send_nowait(Ack(msg.x))

        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, conn):
            client.on_message(Ack, lambda c, m: acks.append(m))
            poller = LoopPoller.for_running_loop()
            flushed = poller.flushes_after_work
            conn.send_nowait(Move(3, 0))
            await wait_until(lambda: acks == [Ack(3)], 5, what="the echo")
            # A server's loop sends what a round wrote (the echo) before it yields to anything else; its rounds look
            # only at the images its driver wrote to.
            assert poller.flushes_after_work > flushed
            assert poller.looks_spared > 0
            await wait_until(poller._sound, 10, what="the handshake over")
            assert not poller._naps_early()
            now = time.monotonic_ns()
            assert poller._spins(now, now, now)
            assert poller._nap_plan(now, now, now + 50 * MS)[0] == MS
            assert poller._nap_plan(now, now - 2_000 * MS, now + 50 * MS)[0] == 50 * MS  # idle: until the timer


async def test_an_ipc_connection_keeps_the_poller_yielding_after_work(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_message(Move, lambda conn, msg: conn.send_nowait(Ack(msg.x)))
        async with connected_client(client_config("ipc", aeron_dir, client_dir), port) as (client, conn):
            acks: list[Ack] = []
            client.on_message(Ack, lambda c, m: acks.append(m))
            conn.send_nowait(Move(3, 0))
            await wait_until(lambda: acks == [Ack(3)], 5, what="the echo over IPC")
            poller = LoopPoller.for_running_loop()
            assert not poller._sound()  # frames in an IPC log ring nothing
            assert not poller._udp_only  # and its publisher writes them, not our driver: every round looks
            now = time.monotonic_ns()
            assert poller._spins(now, now, now)
            assert poller._nap_plan(now, now, now + 50 * MS)[0] == MS


async def test_a_timer_step_that_looks_at_nothing_asks_for_no_second_duty_cycle(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """The poller runs the driver once more after the timers only if they may have written something (a keepalive
    due, a round-trip sample, a handshake or session to expire): the steps between an idle server's connections'
    due times look at nothing, and a look at a connection that finds nothing owed (its peer heard since it was
    filed) writes nothing either. A step at which a connection writes its keepalive still asks, the connection is
    filed again, and its keepalives still reach the peer."""
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, _conn),
    ):
        assert client.connection is not None
        # Until the handshake's replies are let go, the server's timers have them to look at.
        await wait_until(lambda: not server._tick_extra(time.monotonic_ns()), 30, what="the handshake over")
        due = server._agenda.next_due_ns
        assert due is not None
        before = due - 20 * MS
        server.connection_counters._next_refresh_ns = before + 1  # its once-a-second refresh not due either
        assert server._tick(before) is False
        (server_conn,) = server.connections
        received = client.connection.messages_received
        sent = server_conn.messages_sent
        wrote = server._tick(due)
        if server_conn.messages_sent > sent:
            assert wrote is True  # its keepalive was written: it leaves in this wake-up
        refiled = server._agenda.due_of(server_conn)
        assert refiled is not None
        assert refiled > due  # looked at, and filed for later
        await wait_until(
            lambda: client.connection is not None and client.connection.messages_received > received,
            10,
            what="the server's keepalives still reaching the client",
        )
