"""Server in the test process, clients as separate processes (IPC on the server's driver, or UDP on their own).

What crosses the process boundary is only what real deployments share: the
driver directory (IPC) or UDP on 127.0.0.1. A client SIGKILLed mid-connection
says no goodbye: the server must notice by itself (the peer's stream ends when
the driver reaps the dead client, or nothing is heard within ``peer_timeout``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from endpoint import Connection
from support.endpoints import TRANSPORTS, Ack, Num, running_server, server_config, wait_until

pytestmark = pytest.mark.process

PEER = Path(__file__).with_name("peer_client.py")


class Peer:
    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def has(self, text: str) -> bool:
        if self.process.poll() is not None and text not in self.output():
            raise AssertionError(f"client process exited with {self.process.returncode}:\n{self.output()}")
        return text in self.output()


@contextmanager
def peer_client(tmp_path: Path, *args: str) -> Iterator[Peer]:
    log = tmp_path / f"client-{time.monotonic_ns()}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(PEER), *args], stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield Peer(process, log)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(15)


def _client_args(transport: str, port: int, aeron_dir: Path, client_dir: Path) -> list[str]:
    args = ["--port", str(port), "--aeron-dir", str(aeron_dir if transport == "ipc" else client_dir)]
    return [*args, "--udp"] if transport == "udp" else args


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_process_exchanges_messages_and_closes_with_a_reason(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    connected: list[Connection] = []
    disconnected: list[Connection] = []
    received: list[int] = []
    config = server_config(aeron_dir, port, ping_interval=0.2, peer_timeout=2.0)
    async with running_server(config) as server:
        server.on_connect(connected.append)
        server.on_disconnect(disconnected.append)

        async def on_num(conn: Connection, num: Num) -> None:
            received.append(num.i)
            await conn.send(Ack(num.i))

        server.on_message(Num, on_num)
        args = _client_args(transport, port, aeron_dir, client_dir)
        with peer_client(tmp_path, *args, "--count", "2000", "--close-reason", "done here") as peer:
            await wait_until(lambda: peer.has("acked 2000"), 60)
            await wait_until(lambda: len(disconnected) == 1, 30)
            assert peer.process.wait(30) == 0
        assert received == list(range(2000))
        (connection,) = connected
        assert disconnected == [connection]
        assert connection.is_ipc is (transport == "ipc")
        assert f"connected {connection.id} {transport}" in peer.output()
        assert connection.close_reason == "done here"
        assert connection.closed_by_peer
        assert not connection.lost


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_killed_client_process_is_detected_within_the_peer_timeout(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    disconnected: list[Connection] = []
    config = server_config(aeron_dir, port, ping_interval=0.2, peer_timeout=2.0)
    async with running_server(config) as server:
        server.on_disconnect(disconnected.append)
        server.on_message(Num, lambda conn, num: conn.send_nowait(Ack(num.i)))
        with peer_client(tmp_path, *_client_args(transport, port, aeron_dir, client_dir), "--count", "10") as peer:
            await wait_until(lambda: peer.has("acked 10"), 60)
            assert len(server.connections) == 1
            os.kill(peer.process.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            await wait_until(lambda: len(disconnected) == 1, 15)
            detected_after = time.monotonic() - killed_at
        (connection,) = disconnected
        assert connection.lost
        assert not connection.closed_by_peer
        assert server.connections == []
        # No timing assertion: the bound is the wait above; the figure helps when reading a failure.
        print(f"killed {transport} client detected after {detected_after:.2f} s: {connection.close_reason}")
