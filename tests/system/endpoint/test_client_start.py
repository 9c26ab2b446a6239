"""``Client.start()``: the driver is leased (launched) and the poller started before the first connect, which then
leases nothing; starting again does nothing; a closed client cannot start."""

from __future__ import annotations

from pathlib import Path

import pytest

from endpoint import Client, Connection, EndpointClosedError, Server
from endpoint.registry import registry
from support.endpoints import TRANSPORTS, Ack, Move, client_config, server_config, wait_until


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_start_leases_the_driver_before_the_first_connect(
    transport: str, aeron_dir: Path, client_dir: Path
) -> None:
    server = Server(server_config(aeron_dir, 0))

    @server.on_message(Move)
    async def echo(conn: Connection, msg: Move) -> None:
        await conn.send(Ack(msg.x + msg.y))

    async with server:
        config = client_config(transport, aeron_dir, client_dir)
        client = Client(config)
        answers: list[Ack] = []
        client.on_message(Ack, lambda c, m: answers.append(m))
        try:
            assert client._shared is None
            assert await client.start() is client
            shared = client._shared
            assert shared is not None
            assert shared.aeron is not None
            assert (config.resolved_aeron_dir() / "cnc.dat").exists()
            assert client in shared.users
            await client.start()  # started already: the same lease
            assert client._shared is shared
            assert shared.users.count(client) == 1
            leases = registry.blocking_leases
            conn = await client.connect("127.0.0.1", server.port)
            assert registry.blocking_leases == leases  # the connect leased nothing
            await conn.send(Move(2, 3))
            await wait_until(lambda: answers, 10, what="the echo")
            assert answers == [Ack(5)]
        finally:
            await client.close()
        assert client not in shared.users
        with pytest.raises(EndpointClosedError):
            await client.start()
