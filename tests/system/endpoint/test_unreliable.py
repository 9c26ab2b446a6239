"""Newest-wins messages between a real server and client: ``send_unreliable``, classes registered ``unreliable=True``,
the ``reliable=false`` stream each way over UDP (the reliable stream over IPC and when sealed), and loss.

Loss is the client driver's own: its ``receive_loss_rate`` debug setting drops that share of every datagram it
receives (data, heartbeats and setups alike), seeded, so a run is repeatable in what it drops if not in timing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import pytest

from driver.cnc import CncFile
from driver.concurrent.counters import CountersReader
from driver.concurrent.system_counters import SystemCounterId
from endpoint import Connection
from support.endpoints import (
    TRANSPORTS,
    Move,
    Num,
    client_config,
    connected_client,
    make_serialization,
    running_server,
    server_config,
    server_end,
    wait_until,
)


@attrs.define
class Snapshot:
    tick: int
    players: list[int]


def system_counter(aeron_dir: Path, counter: SystemCounterId) -> int:
    cnc = CncFile.map_existing(aeron_dir, timeout_s=5.0)
    try:
        return int(CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer).get_counter_value(counter))
    finally:
        cnc.close()


async def send_until(
    send: Connection, received: list[int], *, at_least: int, more: int, interval: float = 0.002, after: int = 0
) -> int:
    """Send Move(i, 0) newest-wins for i = after + 1, after + 2, ... until ``at_least`` were sent and ``received``
    got one of the last ``more`` (bounded: 20 s); returns the last i sent."""
    sent = after
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while sent < after + at_least or not received or received[-1] <= sent - more:
        assert loop.time() < deadline, f"sent {sent}, received {len(received)} (last {received[-1:]})"
        sent += 1
        send.send_unreliable(Move(sent, 0))
        await asyncio.sleep(interval)
    return sent


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_newest_wins_both_ways_and_udp_moves_onto_the_unreliable_stream(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    at_server: list[int] = []
    at_client: list[int] = []
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_message(Move, lambda c, m: at_server.append(m.x))
        async with connected_client(client_config(transport, aeron_dir, client_dir), port) as (client, conn):
            client.on_message(Move, lambda c, m: at_client.append(m.x))
            sent_up = await send_until(conn, at_server, at_least=300, more=50)
            peer = await server_end(server, conn)
            sent_down = await send_until(peer, at_client, at_least=300, more=50)
            if transport == "udp":
                # Each sender's unreliable publication connected: the last frames took the reliable=false stream.
                await wait_until(lambda: conn.unreliable_stream and peer.unreliable_stream, 10, what="both streams")
                before = (len(at_server), len(at_client))
                sent_up = await send_until(conn, at_server, at_least=50, more=10, after=sent_up)
                sent_down = await send_until(peer, at_client, at_least=50, more=10, after=sent_down)
                assert (len(at_server), len(at_client)) > before
                assert peer._u_image is not None
                assert conn._u_image is not None
            else:
                assert conn.unreliable_channels is None
                assert not conn.unreliable_stream
                assert not peer.unreliable_stream
    for received, sender, receiver, sent in ((at_server, conn, peer, sent_up), (at_client, peer, conn, sent_down)):
        assert received == sorted(set(received)), "an older snapshot was delivered after a newer one"
        assert sender.unreliable_sent + sender.unreliable_dropped == sent
        assert receiver.unreliable_received == len(received)
        # Every frame that arrived was delivered or dropped as stale; none was lost on loopback without loss.
        assert receiver.unreliable_received + receiver.unreliable_stale <= sender.unreliable_sent
        assert received[-1] > sent - 50


async def test_a_class_registered_unreliable_goes_newest_wins_with_send(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    got: list[int] = []
    client_ser = make_serialization((Snapshot,))
    client_ser.register(Snapshot, unreliable=True)  # this end's choice; the registration hash is unchanged
    config = client_config("udp", aeron_dir, client_dir, serialization=client_ser)
    async with running_server(server_config(aeron_dir, port, serialization=make_serialization((Snapshot,)))) as server:
        server.on_message(Snapshot, lambda c, m: got.append(m.tick))
        async with connected_client(config, port) as (_, conn):
            await conn.send(Snapshot(1, [1, 2]))
            assert conn.send_nowait(Snapshot(2, [3]))
            await conn.send(Num(7))  # other classes stay reliable
            await wait_until(lambda: got == [1, 2], 10)
            assert conn.unreliable_sent == 2
            assert (await server_end(server, conn)).unreliable_received == 2


async def test_a_sealed_connection_keeps_newest_wins_messages_on_its_sealed_stream(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    got: list[int] = []
    async with running_server(server_config(aeron_dir, port, sealed=True)) as server:
        server.on_message(Move, lambda c, m: got.append(m.x))
        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, conn):
            assert conn.sealed
            assert conn.unreliable_channels is None
            await send_until(conn, got, at_least=100, more=20)
            assert got == sorted(set(got))
            assert not conn.unreliable_stream
            assert (await server_end(server, conn)).seal_failures == 0


async def test_under_loss_the_unreliable_stream_skips_what_was_lost_and_never_goes_back(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server sends snapshots to a client whose driver drops 5% of what it receives. The snapshots move onto the
    reliable=false stream; the client's driver pads over the lost ones (its gap-fill counter rises) and the client
    delivers the rest in order, never one older than one it already has; reliable messages sent alongside all
    arrive, in order."""
    snapshots: list[int] = []
    events: list[int] = []
    async with running_server(server_config(aeron_dir, port)) as server:
        # Read when the client's embedded driver launches (the server's is up already, without loss).
        monkeypatch.setenv("AERON_DEBUG_RECEIVE_LOSS_RATE", "0.05")
        monkeypatch.setenv("AERON_DEBUG_RECEIVE_FAULT_SEED", "19")
        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, conn):
            monkeypatch.delenv("AERON_DEBUG_RECEIVE_LOSS_RATE")
            client.on_message(Move, lambda c, m: snapshots.append(m.x))
            client.on_message(Num, lambda c, m: events.append(m.i))
            peer = await server_end(server, conn)
            fills_before = system_counter(client_dir, SystemCounterId.LOSS_GAP_FILLS)
            last = await send_until(peer, snapshots, at_least=50, more=10)
            await wait_until(lambda: peer.unreliable_stream, 10, what="the server's unreliable stream")
            first_unreliable = last + 1
            sent = 0
            for i in range(600):
                sent += peer.send_unreliable(Move(first_unreliable + i, 0))
                if i % 20 == 0:
                    await peer.send(Num(i // 20))
                await asyncio.sleep(0.002)
            await wait_until(lambda: len(events) == 30, 15, what="every reliable event")
            fills = system_counter(client_dir, SystemCounterId.LOSS_GAP_FILLS) - fills_before
            late = [x for x in snapshots if x >= first_unreliable]
    assert events == list(range(30))
    assert snapshots == sorted(set(snapshots)), "an older snapshot was delivered after a newer one"
    assert fills > 0, "no loss was padded over on the client's unreliable image"
    # Lost snapshots are skipped, not repaired: fewer arrived than were sent, and most did.
    assert sent // 2 < len(late) < sent
    assert conn.unreliable_received == len(snapshots)


async def test_server_broadcast_of_a_class_registered_unreliable_goes_newest_wins(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    got: list[int] = []
    server_ser = make_serialization((Snapshot,))
    server_ser.register(Snapshot, unreliable=True)
    async with running_server(server_config(aeron_dir, port, serialization=server_ser)) as server:
        client_ser = make_serialization((Snapshot,))
        config = client_config("udp", aeron_dir, client_dir, serialization=client_ser)
        async with connected_client(config, port) as (client, conn):
            client.on_message(Snapshot, lambda c, m: got.append(m.tick))
            await wait_until(lambda: server.connections, 10)
            for tick in range(1, 201):
                assert server.broadcast(Snapshot(tick, [tick])) == 1
                await asyncio.sleep(0.002)
            await wait_until(lambda: got and got[-1] == 200, 10, what="the last snapshot")
            assert got == sorted(set(got))
            assert (await server_end(server, conn)).unreliable_sent == 200
            assert conn.unreliable_received == len(got)
