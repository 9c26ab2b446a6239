"""A server process stalled (SIGSTOP, SIGCONT: a long GC pause, a blocked loop, a VM migration) and resumed.

A stall shorter than the liveness timeouts costs nothing: the server's embedded driver does not restart,
its clients are not timed out, and the client's connection (IPC on the server's driver, or UDP with a
driver of its own) is the same one afterwards, with no disconnect told. The server here stalls for longer
than its driver's own client liveness timeout (set to 3 s; Aeron's default is 5 s), which used to make the
driver time out the end point's own client in its process and restart; but for less than the end points'
``peer_timeout`` and ``driver_timeout``.

A stall longer than ``peer_timeout`` ends the connection on both sides, each told through on_disconnect
(``lost``), and a client with ``auto_reconnect`` connects again once the server runs.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from driver.cnc import CncFile
from endpoint import Client, Connection
from support.endpoints import TRANSPORTS, Ack, Num, client_config, wait_until
from support.logged_process import LoggedProcess

pytestmark = [pytest.mark.process, pytest.mark.slow]

PEER_TIMEOUT = 12.0
DRIVER_TIMEOUT = 15.0
SERVER_CLIENT_LIVENESS_NS = 3_000_000_000
"""The server's driver's client liveness timeout (the suite's drivers use 3 s too): a stall past it is shorter."""
STALL_S = 4.0
"""Longer than the server's driver's client liveness timeout, well shorter than peer_timeout and driver_timeout
(margins for a loaded machine, where the resumed process takes a while to catch up)."""


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stall_shorter_than_the_timeouts_costs_nothing(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    start_server: Callable[..., LoggedProcess],
) -> None:
    server = start_server(
        port,
        aeron_dir,
        "--peer-timeout",
        str(PEER_TIMEOUT),
        "--driver-timeout",
        str(DRIVER_TIMEOUT),
        "--ping-interval",
        "0.5",
        env={"AERON_CLIENT_LIVENESS_TIMEOUT": str(SERVER_CLIENT_LIVENESS_NS)},
    )
    acks: list[int] = []
    lost: list[Connection] = []
    errors: list[BaseException] = []
    client = Client(
        client_config(
            transport,
            aeron_dir,
            client_dir,
            launch_driver=transport != "ipc",
            ping_interval=0.5,
            peer_timeout=PEER_TIMEOUT,
            driver_timeout=DRIVER_TIMEOUT,
        )
    )
    client.on_message(Ack, lambda conn, ack: acks.append(ack.seq))
    client.on_disconnect(lost.append)
    client.on_error(lambda conn, exc: errors.append(exc))
    try:
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the server to serve")
        with CncFile.map_existing(aeron_dir) as cnc:  # the server's driver took the setting: the stall outlasts it
            assert cnc.client_liveness_timeout_ns == SERVER_CLIENT_LIVENESS_NS
        async with asyncio.timeout(120), client:
            conn = await client.connect("127.0.0.1", port)
            assert conn.is_ipc == (transport == "ipc")
            await conn.send(Num(1))
            await wait_until(lambda: 1 in acks, 10, what="the first echo")

            server.signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(STALL_S)
            finally:
                server.signal(signal.SIGCONT)

            await conn.send(Num(2))
            try:
                await wait_until(lambda: 2 in acks, 10, what="the echo after the stall")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; lost={lost} errors={errors}; server:\n{server.output()}") from None
            # Let every timer that looks back over the stall fire (driver timers, pings, liveness checks).
            settle_until = time.monotonic() + 3.0
            while time.monotonic() < settle_until:
                assert not lost, f"the connection dropped: {lost[0].close_reason}; server:\n{server.output()}"
                await asyncio.sleep(0.05)
            await conn.send(Num(3))
            await wait_until(lambda: 3 in acks, 10, what="the echo after the settling")
            assert not errors, f"{errors}; server:\n{server.output()}"
            assert client.connection is conn
            assert not conn.is_closed
            assert not lost
            assert not errors, errors
            assert client.restarts == 0
            server_out = server.output()
            assert "disconnected" not in server_out, server_out
            assert "error" not in server_out, server_out  # no CriticalDriverError: the driver did not restart
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- server:\n{server.output()}") from None
    finally:
        server.stop(15)  # SIGCONT, then SIGTERM: a graceful stop


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stall_longer_than_the_peer_timeout_ends_in_a_clean_reconnect(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    start_server: Callable[..., LoggedProcess],
) -> None:
    peer_timeout = 2.0
    server = start_server(port, aeron_dir, "--peer-timeout", str(peer_timeout), "--ping-interval", "0.5")
    acks: list[int] = []
    lost: list[Connection] = []
    connects: list[Connection] = []
    client = Client(
        client_config(
            transport,
            aeron_dir,
            client_dir,
            launch_driver=transport != "ipc",
            auto_reconnect=True,
            ping_interval=0.5,
            peer_timeout=peer_timeout,
            handshake_timeout=0.5,
        )
    )
    client.on_message(Ack, lambda conn, ack: acks.append(ack.seq))
    client.on_disconnect(lost.append)
    client.on_connect(connects.append)
    try:
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the server to serve")
        async with asyncio.timeout(120), client:
            first = await client.connect("127.0.0.1", port)
            await first.send(Num(1))
            await wait_until(lambda: 1 in acks, 10, what="the first echo")

            server.signal(signal.SIGSTOP)
            try:
                await wait_until(lambda: lost, 3 * peer_timeout + 5, 0.02, "the client to give the server up")
            finally:
                server.signal(signal.SIGCONT)
            assert lost == [first]
            assert first.lost  # told, as lost: no goodbye came

            await wait_until(lambda: len(connects) >= 2, 30, 0.02, "the client to reconnect")
            second = client.connection
            assert second is not None
            assert second is connects[-1]
            assert second is not first
            await second.send(Num(2))
            await wait_until(lambda: 2 in acks, 10, what="the echo on the new connection")
            # The server told its listeners too: the old connection lost, the new one connected.
            await wait_until(
                lambda: f"disconnected {first.id} lost" in server.output(), 10, 0.02, "the server's listener"
            )
            assert f"connected {second.id}" in server.output()
            assert "error" not in server.output(), server.output()  # a clean reconnect: no driver restart
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- server:\n{server.output()}") from None
    finally:
        server.stop(15)  # SIGCONT, then SIGTERM: a graceful stop
