"""``ServerConfiguration(port=0)``: the driver binds a free port when the server binds and ``server.port`` says
which; clients reach the server on it over UDP and IPC, connection streams included."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from endpoint import Client, Connection, Server, ServerError
from support.driver_process import DriverProcess
from support.endpoints import TRANSPORTS, Ack, Move, client_config, connected_client, server_config, wait_until


def _taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


async def _echo_round_trip(server: Server, transport: str, aeron_dir: Path, client_dir: Path) -> None:
    """Connect to ``server.port`` over ``transport`` and have a Move answered with an Ack."""
    answers: list[Ack] = []
    async with connected_client(client_config(transport, aeron_dir, client_dir), server.port) as (client, conn):
        client.on_message(Ack, lambda c, m: answers.append(m))
        assert conn.is_ipc is (transport == "ipc")
        if transport == "udp":
            assert conn.remote_address == f"127.0.0.1:{server.port}"
        await conn.send(Move(2, 3))
        await wait_until(lambda: answers, 10, what="the echo")
    assert answers == [Ack(5)]


def _echo(server: Server) -> None:
    @server.on_message(Move)
    async def echo(conn: Connection, msg: Move) -> None:
        await conn.send(Ack(msg.x + msg.y))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_port_zero_binds_a_free_port_that_clients_reach(
    transport: str, aeron_dir: Path, client_dir: Path
) -> None:
    server = Server(server_config(aeron_dir, 0))
    with pytest.raises(ServerError, match="not bound yet"):
        _ = server.port
    _echo(server)
    async with server:
        port = server.port
        assert 0 < port <= 65535
        assert server.config.port == 0  # the configuration says what was asked for
        assert _taken(port)  # the driver's socket holds it (connection streams share it)
        await _echo_round_trip(server, transport, aeron_dir, client_dir)
        await _echo_round_trip(server, transport, aeron_dir, client_dir)  # and again, on the same port
        assert server.port == port


async def test_two_servers_with_port_zero_get_different_ports(aeron_dir: Path, client_dir: Path) -> None:
    first = Server(server_config(aeron_dir, 0))
    second = Server(server_config(aeron_dir, 0))  # same driver
    for server in (first, second):
        _echo(server)
    async with first, second:
        assert first.port != second.port
        for server in (first, second):
            await _echo_round_trip(server, "udp", aeron_dir, client_dir)
            await _echo_round_trip(server, "ipc", aeron_dir, client_dir)


async def test_an_ipc_only_server_with_port_zero_takes_a_number_no_other_server_has(
    aeron_dir: Path, client_dir: Path
) -> None:
    servers = [Server(server_config(aeron_dir, 0, enable_udp=False)) for _ in range(2)]
    for server in servers:
        _echo(server)
    async with servers[0], servers[1]:
        ports = [server.port for server in servers]
        assert len(set(ports)) == 2
        assert all(_taken(port) for port in ports)  # held for as long as the servers are bound
        for server in servers:
            await _echo_round_trip(server, "ipc", aeron_dir, client_dir)


@pytest.mark.process
@pytest.mark.slow
async def test_the_bound_port_is_kept_when_the_server_rebinds_after_a_driver_restart(
    aeron_dir: Path, tmp_path: Path
) -> None:
    driver = DriverProcess.start(aeron_dir, tmp_path / "driver.log")
    server = Server(server_config(aeron_dir, 0, driver_timeout=2.0))
    _echo(server)
    client = Client(
        client_config("udp", aeron_dir, aeron_dir, driver_timeout=2.0, auto_reconnect=True)  # UDP on that driver
    )
    answers: list[Ack] = []
    client.on_message(Ack, lambda c, m: answers.append(m))
    try:
        async with server, client:
            port = server.port
            first = await client.connect("127.0.0.1", port)
            assert not first.is_ipc
            driver.kill()  # both lose their driver; the server re-binds on a fresh one, the client reconnects
            await wait_until(lambda: server.restarts == 1, 20, what="the server's restart")
            await wait_until(
                lambda: (
                    client.connection is not None and client.connection is not first and not client.connection.is_closed
                ),
                30,
                what="the client to reconnect to the same port",
            )
            assert server.port == port
            assert _taken(port)
            second = client.connection
            assert second is not None
            assert second.remote_address == f"127.0.0.1:{port}"
            await second.send(Move(1, 1))
            await wait_until(lambda: answers, 10, what="the echo after the restart")
    finally:
        driver.stop()
