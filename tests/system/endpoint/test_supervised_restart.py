"""A server under a supervisor: killed (SIGKILL, SIGTERM) and started again at once, again and again.

The server runs in its own process (``server_process.py``) on a fixed port, driver directory and key file;
the test is the supervisor. Each round it stops the server (SIGKILL; SIGTERM to a server under
``endpoint.run``, which stops gracefully; SIGTERM to one with no handler, which dies on the spot), starts
it again at once with the same port, directory and key, and waits for it to serve. The restarted server
takes over the dead driver's directory at once (the old driver's lock is free) instead of waiting out the
old heartbeat, so "serving" comes well within the old 10 s driver timeout. A client with
``auto_reconnect`` comes back each time and gets its echo: over UDP with a driver of its own, and over IPC
on the server's driver.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from driver.ownership import OwnerState, owner_state
from endpoint import Client, Connection
from support.endpoints import TRANSPORTS, Ack, Num, client_config, wait_until
from support.logged_process import LoggedProcess

pytestmark = [pytest.mark.process, pytest.mark.slow]

SERVE_WITHIN_S = 8.0
"""Bound on a restarted server's start (process start and imports included): below the old 10 s wait alone."""


async def _echo(conn: Connection, acks: list[int], seq: int) -> None:
    await conn.send(Num(seq))
    await wait_until(lambda: seq in acks, 10, what=f"the echo of {seq}")


# Per round: the signal, and whether the server it stops runs under endpoint.run (else: no handler at all).
ROUNDS = [
    (signal.SIGKILL, True),
    (signal.SIGTERM, True),
    (signal.SIGKILL, True),
    (signal.SIGTERM, False),
    (signal.SIGKILL, True),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_killed_server_restarted_at_once_serves_again(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    tmp_path: Path,
    start_server: Callable[..., LoggedProcess],
) -> None:
    """UDP: the client has a driver of its own. IPC: it uses the server's driver (never launching one), so each
    kill takes its driver away too: it notices the dead process at once and attaches to the successor."""
    key_path = tmp_path / "server.key"
    acks: list[int] = []
    connects: list[Connection] = []
    client = Client(
        client_config(
            transport,
            aeron_dir,
            client_dir,
            launch_driver=transport != "ipc",
            auto_reconnect=True,
            ping_interval=0.2,
            peer_timeout=2.0,
            handshake_timeout=0.5,
        )
    )
    client.on_message(Ack, lambda conn, ack: acks.append(ack.seq))
    client.on_connect(connects.append)

    def start(plain: bool) -> LoggedProcess:
        return start_server(port, aeron_dir, "--key-path", str(key_path), *(["--plain"] if plain else []))

    async with asyncio.timeout(240), client:
        server = start(plain=not ROUNDS[0][1])
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the first server to serve")
        conn = await client.connect("127.0.0.1", port)
        await _echo(conn, acks, 0)
        for round_no, (signum, supervised) in enumerate(ROUNDS, start=1):
            server.signal(signum)
            status = server.wait()
            if signum == signal.SIGTERM and supervised:
                assert status == 0, server.output()  # endpoint.run: a graceful stop
                assert "stopped" in server.output()
                assert not aeron_dir.exists(), "a graceful stop removes the driver directory"
            else:
                assert status == -signum, server.output()
                assert owner_state(aeron_dir) is OwnerState.DEAD  # left behind, its lock free
            server = start(plain=round_no < len(ROUNDS) and not ROUNDS[round_no][1])
            await wait_until(
                partial(server.has, "serving "), SERVE_WITHIN_S, 0.02, f"round {round_no}: the restarted server"
            )
            await wait_until(
                lambda n=round_no: len(connects) > n and client.connection is not None,
                30,
                0.02,
                f"round {round_no}: the client to reconnect",
            )
            conn = client.connection
            assert conn is not None
            assert conn is connects[-1]
            assert conn.is_ipc == (transport == "ipc")
            await _echo(conn, acks, round_no)
            assert "Error" not in server.output(), server.output()
    assert len(connects) == len(ROUNDS) + 1
