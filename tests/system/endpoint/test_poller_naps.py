"""The loop's poller naps at once when whatever arrives wakes it (UDP on INVOKER-mode drivers), and keeps yielding
after work only while something could arrive unseen (a connection over IPC).

Server and client share one loop, each on a real driver; the checks read the poller's own decisions and count
its rounds, never time them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from endpoint import Connection
from endpoint.poller import LoopPoller
from support.endpoints import Ack, Move, client_config, connected_client, running_server, server_config, wait_until

MS = 1_000_000


async def test_a_udp_poller_naps_at_once_and_stays_quiet_between_datagrams(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    acks: list[Ack] = []
    async with running_server(server_config(aeron_dir, port)) as server:

        @server.on_message(Move)
        def echo(conn: Connection, msg: Move) -> None:
            conn.send_nowait(Ack(msg.x + msg.y))

        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, conn):
            client.on_message(Ack, lambda c, m: acks.append(m))
            poller = LoopPoller.for_running_loop()
            # The handshake routes and the server's handshake state go quiet a little after the connect.
            await wait_until(poller._sound, 10, what="nothing left that could arrive unseen")
            now = time.monotonic_ns()
            assert not poller._spins(now, now)  # work just now: nap rather than yield
            assert poller._nap_ns(now, now, now + 50 * MS) == 10 * MS  # traffic flows: the driver's timers
            assert poller._nap_ns(now, now - 2_000 * MS, now + 50 * MS) == 50 * MS  # quiet: until the timer

            # Messages and round trips still go both ways at once with the poller napping between them.
            for i in range(20):
                conn.send_nowait(Move(i, 1))
                await wait_until(lambda n=i + 1: len(acks) == n, 5, what=f"echo {i}")
                assert await conn.ping(5) > 0
            assert acks == [Ack(i + 1) for i in range(20)]

            # Quiet for 0.3 s: rounds come only from naps (10 ms at least) and the few datagrams of an idle
            # connection (heartbeats, status messages, keepalives), not one per millisecond.
            before = poller.rounds
            await asyncio.sleep(0.3)
            assert poller.rounds - before < 150


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
            now = time.monotonic_ns()
            assert poller._spins(now, now)
            assert poller._nap_ns(now, now, now + 50 * MS) == MS
