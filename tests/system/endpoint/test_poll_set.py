"""The poller's set of connections to check natively follows each connect and close one connection at a time.

A storm of connects must not cost each connect a walk over every open connection (that made connecting N
clients quadratic). These tests connect and close real clients (UDP and IPC, real drivers) and check that the
native watch holds exactly the mapped connections, that messages still reach every one, and that nothing walked
the server's connections to get there.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from endpoint import Client, Connection, Server
from endpoint.base import EndPoint
from endpoint.poller import LoopPoller
from support.endpoints import Num, client_config, running_server, server_config, wait_until

CLIENTS = 6


def watched(poller: LoopPoller) -> set[int]:
    """The connections (by ``id``) the poller's native check covers."""
    return {id(c) for c in poller._mapped}


def mapped_everywhere(poller: LoopPoller) -> set[int]:
    """Every connection with a mapped image of every end point on the loop."""
    return {id(c) for e in poller.endpoints for c in e._connections.values() if c._image is not None}  # type: ignore[attr-defined]


@pytest.mark.parametrize("transport", ["udp", "ipc"])
async def test_connects_and_closes_keep_the_watch_exact_without_walking_the_others(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks: list[int] = []
    full_walk = EndPoint._mapped

    def counted(self: EndPoint[Any]) -> tuple[Connection, ...]:
        if isinstance(self, Server):
            walks.append(len(self._connections))
        return full_walk.fget(self)  # type: ignore[attr-defined,no-any-return]

    received: dict[int, list[int]] = {}
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_message(Num, lambda conn, msg: received.setdefault(conn.id, []).append(msg.i))
        poller = LoopPoller.for_running_loop()
        monkeypatch.setattr(EndPoint, "_mapped", property(counted))
        async with contextlib.AsyncExitStack() as stack:
            clients: list[tuple[Client, Connection]] = []
            for n in range(CLIENTS):
                client = Client(client_config(transport, aeron_dir, client_dir))
                stack.push_async_callback(client.close)
                connection = await client.connect("127.0.0.1", port)
                clients.append((client, connection))
                await wait_until(
                    lambda n=n: len(server.connections) == n + 1 and watched(poller) == mapped_everywhere(poller),
                    10,
                    what=f"connection {n + 1} mapped and watched",
                )
                # Every connection so far is still watched: each one's message reaches the server.
                for i, (_, conn) in enumerate(clients):
                    await conn.send(Num(n * 100 + i))
                await wait_until(
                    lambda n=n: all(n * 100 + i in received.get(c.id, []) for i, (_, c) in enumerate(clients)),
                    10,
                    what="a message from every client",
                )
            assert len(watched(poller)) == 2 * CLIENTS  # the server's end and each client's
            # Closing some leaves the others watched, and the closed ones out.
            for client, _ in clients[:2]:
                await client.close()
            await wait_until(
                lambda: len(server.connections) == CLIENTS - 2 and watched(poller) == mapped_everywhere(poller),
                10,
                what="the closed connections dropped from the watch",
            )
            assert len(watched(poller)) == 2 * (CLIENTS - 2)
            for i, (_, conn) in enumerate(clients[2:]):
                await conn.send(Num(1000 + i))
            await wait_until(
                lambda: all(1000 + i in received.get(c.id, []) for i, (_, c) in enumerate(clients[2:])),
                10,
                what="a message from every client left",
            )
        # No connect or close walked the server's connections (a client's own end point, new to the loop, is
        # asked for its own only).
        assert walks == []
