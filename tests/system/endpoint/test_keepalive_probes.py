"""An idle UDP connection's keepalives ask the driver for no tail probe; its messages still get one.

A tail probe (``tail_probe``: one heartbeat that long after data) lets a receiver that lost a stream's last datagrams
learn of it soon. After a keepalive it only doubles an idle connection's datagrams: the next keepalive follows within
a ping interval and a half, and reveals a lost one as well. Real server and client on their embedded drivers (run by
this loop), both ends' connection publications watched in their drivers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import endpoint.connection.counters as connection_counters
from driver.core.network_publication import NetworkPublication
from endpoint import Client, Connection, Server
from support.endpoints import Move, client_config, connected_client, running_server, server_config, server_end

TIMING = {"ping_interval": 0.2, "peer_timeout": 2.0, "tail_probe": 0.05, "heartbeat_interval": 5.0}


def _publication(end: Client | Server, connection: Connection) -> NetworkPublication:
    shared = end._shared
    assert shared is not None
    assert shared.media_driver is not None
    session_id = connection._pub.session_id
    return next(p for p in shared.media_driver.conductor.sender.publications if p.session_id == session_id)


async def _probes_owed(publications: list[NetworkPublication], seconds: float) -> list[bool]:
    """For each publication, whether a tail probe was owed at any look over ``seconds`` (a look every 5 ms)."""
    owed = [False] * len(publications)
    for _ in range(round(seconds / 0.005)):
        for index, publication in enumerate(publications):
            owed[index] = owed[index] or publication.native.probe_pending
        await asyncio.sleep(0.005)
    return owed


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
async def test_keepalives_ask_for_no_tail_probe_and_messages_still_get_one(
    aeron_dir: Path, client_dir: Path, port: int, sealed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No connection counters, so no round-trip samples: a sample's answer (a pong) is a message like any other.
    monkeypatch.setattr(connection_counters, "OPEN_AFTER_NS", 3600 * 10**9)
    async with (
        running_server(server_config(aeron_dir, port, sealed=sealed, **TIMING)) as server,
        connected_client(client_config("udp", aeron_dir, client_dir, **TIMING), port) as (client, conn),
    ):
        theirs = await server_end(server, conn)
        assert conn.sealed is sealed
        ours = [_publication(client, conn), _publication(server, theirs)]
        await asyncio.sleep(0.3)  # the handshake's last messages and their probes behind us
        sent = conn.messages_sent, theirs.messages_sent
        assert await _probes_owed(ours, 1.5) == [False, False]
        # Both ends kept the connection alive meanwhile, with keepalives only.
        assert conn.messages_sent - sent[0] >= 4
        assert theirs.messages_sent - sent[1] >= 4
        assert ours[0].native.probe_ns == ours[1].native.probe_ns == 50_000_000
        # A message of the application's is data like any other: a probe is owed after it (until it goes).
        await conn.send(Move(1, 2))
        await theirs.send(Move(3, 4))
        assert await _probes_owed(ours, 0.2) == [True, True]
