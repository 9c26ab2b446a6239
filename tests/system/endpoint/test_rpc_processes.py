"""Remote calls and a large stream between processes: the server in the test process, the client in rpc_peer.py.

What crosses the process boundary is only what real deployments share: the driver directory (IPC) or UDP on
127.0.0.1. The peer prints one JSON object a line; the test follows them with bounded waits. A peer SIGKILLed
mid-call says no goodbye: the server notices within its ``peer_timeout`` and cancels the invocation still running
for it. The 1 GiB stream goes over UDP through a standalone driver (``python -m driver``) that drops 2% of the
datagrams it receives (``aeron.debug.receive.loss.rate``), repaired by NAKs, and is checked by SHA-256 (and by
CRC-32 within the stream itself).
"""

# Protocol classes are what proxy() is for, though its ``type[T]`` parameter makes mypy ask for concrete ones.

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rpc_peer import BACK, EXTRA, SERVICE, Back, Item, deterministic_pieces

from driver.cnc import CncFile
from driver.concurrent.counters import CountersReader
from driver.concurrent.system_counters import SystemCounterId
from endpoint import Connection, ConnectionClosedError, Server
from endpoint.rpc.calls import current_connection
from support.driver_process import DriverProcess
from support.endpoints import TRANSPORTS, make_serialization, running_server, server_config, wait_until

pytestmark = pytest.mark.process

PEER = Path(__file__).with_name("rpc_peer.py")
GIB = 1 << 30
TERM = 4 << 20
"""Term length of the 1 GiB transfer: 512 KiB messages, so 512 KiB chunks."""
LOSS = 0.02
"""Share of the datagrams the peer's driver drops on receipt in the 1 GiB transfer."""
BULK_MTU = 8192
BULK_DRIVER: dict[str, object] = {
    "mtu_length": BULK_MTU,
    "initial_window_length": 2 << 20,
    "socket_rcvbuf_length": 2 << 20,
    "socket_sndbuf_length": 2 << 20,
    "receive_loss_rate": LOSS,
    "receive_fault_seed": 7,
    # As an end point's embedded driver: session ids the end points choose are never auto-assigned.
    "publication_reserved_session_id_low": 0x1000_0000,
    "publication_reserved_session_id_high": 0x7FFF_FFFF,
}


class Peer:
    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:  # a line still being written
                    pass
        return found

    def event(self, name: str) -> dict[str, Any] | None:
        for event in self.events():
            if event["event"] == name:
                return event
        if self.process.poll() is not None:
            raise AssertionError(f"peer exited with {self.process.returncode} before {name!r}:\n{self.output()}")
        return None

    async def wait(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        event: dict[str, Any] = await wait_until(lambda: self.event(name), timeout, interval=0.02, what=name)
        return event


@contextmanager
def rpc_peer(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Peer]:
    log = tmp_path / f"peer-{time.monotonic_ns()}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(PEER), *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    try:
        yield Peer(process, log)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(15)


def peer_args(transport: str, port: int, aeron_dir: Path, client_dir: Path) -> list[str]:
    args = ["--port", str(port), "--aeron-dir", str(aeron_dir if transport == "ipc" else client_dir)]
    return [*args, "--udp"] if transport == "udp" else args


class Service:
    """Object 1 of the server."""

    def __init__(self) -> None:
        self.stalls = 0
        self.cancels = 0
        self.stalling = asyncio.Event()

    async def add(self, item: Item, count: int) -> Item:
        return Item(item.name, item.count + count)

    async def fail(self, kind: str) -> None:
        await asyncio.sleep(0)
        raise KeyError(kind)

    async def stall(self) -> None:
        self.stalls += 1
        self.stalling.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancels += 1
            raise

    async def ask_back(self, x: int) -> int:
        back = current_connection().rpc.proxy(Back, BACK, timeout=20)
        return await back.double(x) + 1


def rpc_server_config(aeron_dir: Path, port: int, **overrides: Any) -> Any:
    settings: dict[str, Any] = {"serialization": make_serialization(EXTRA), "ping_interval": 0.2, "peer_timeout": 2.0}
    return server_config(aeron_dir, port, **{**settings, **overrides})


def only_connection(server: Server) -> Connection | None:
    connections = server.connections
    return connections[0] if len(connections) == 1 else None


# ------------------------------------------------------------------------------------------------ remote calls


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_calls_between_processes(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    service = Service()
    disconnected: list[Connection] = []
    async with running_server(rpc_server_config(aeron_dir, port)) as server:
        server.rpc.expose(service, SERVICE)
        server.on_disconnect(disconnected.append)
        with rpc_peer(tmp_path, *peer_args(transport, port, aeron_dir, client_dir), "--mode", "rpc") as peer:
            connected = await peer.wait("connected", 60)
            assert connected["transport"] == transport
            assert await peer.wait("add") == {"event": "add", "name": "sword", "count": 5}
            error = await peer.wait("remote error")
            assert error["type"] == "RemoteKeyError"
            assert error["remote_type"] == "KeyError"
            assert "in fail" in error["traceback"]
            timeout = await peer.wait("timeout")
            assert timeout["type"] == "RpcTimeoutError"
            assert timeout["pending"] == 0
            assert (await peer.wait("callback"))["value"] == 41
            await peer.wait("closed")
            assert peer.process.wait(30) == 0
            await wait_until(lambda: disconnected, 15, what="the disconnect")
        (connection,) = disconnected
        assert connection.id == connected["id"]
        assert connection.closed_by_peer
        assert connection.rpc.calls_served == 4  # add, fail, stall, ask_back
        assert connection.rpc.calls_made == 1  # double, called back during ask_back
        assert service.stalls == 1
        await wait_until(lambda: service.cancels == 1, 15, what="the timed-out stall cancelled")
        assert connection.rpc.running == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_killed_caller_process_gets_its_running_call_cancelled(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    service = Service()
    lost: list[Connection] = []
    async with running_server(rpc_server_config(aeron_dir, port)) as server:
        server.rpc.expose(service, SERVICE)
        server.on_disconnect(lost.append)
        args = [*peer_args(transport, port, aeron_dir, client_dir), "--mode", "rpc", "--hang"]
        with rpc_peer(tmp_path, *args) as peer:
            await peer.wait("hanging", 60)
            await wait_until(lambda: service.stalls == 2, 15, what="the second stall running")
            connection = await wait_until(lambda: only_connection(server), 15, what="the connection")
            await wait_until(lambda: connection.rpc.running == 1, 15, what="the call running at the server")
            # And a call of ours into the peer, in flight when it dies.
            ours = asyncio.get_running_loop().create_task(connection.rpc.proxy(Back, BACK, timeout=60).hang())
            await peer.wait("serving hang")
            assert connection.rpc.pending == 1
            os.kill(peer.process.pid, signal.SIGKILL)
            peer.process.wait(15)
            await wait_until(lambda: service.cancels == 2, 20, what="the running call cancelled")
            await wait_until(lambda: lost, 15, what="the connection dropped")
            with pytest.raises(ConnectionClosedError):
                await asyncio.wait_for(ours, 15)
        assert lost == [connection]
        assert connection.lost
        assert not connection.closed_by_peer
        assert connection.rpc.running == 0
        assert connection.rpc.pending == 0


# ------------------------------------------------------------------------------------------------ 1 GiB stream


def system_counter(aeron_dir: Path, counter: SystemCounterId) -> int:
    cnc = CncFile.map_existing(aeron_dir, timeout_s=5.0)
    try:
        return int(CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer).get_counter_value(counter))
    finally:
        cnc.close()


@pytest.mark.slow
async def test_one_gib_stream_over_udp_with_loss_arrives_intact(aeron_dir: Path, port: int, tmp_path: Path) -> None:
    """Server (here) and client (the peer process) attach to one standalone driver, as docs/endpoint.md advises for
    heavy UDP traffic (an embedded driver's threads would share the GIL with a busy loop); the connection goes over
    UDP on 127.0.0.1 all the same (``prefer_ipc=False``). The driver drops 2% of what it receives (data both ways,
    status messages and NAKs alike), and is tuned for bulk as docs/performance.md describes: 8 KiB MTU, 2 MiB
    receiver window and socket buffers."""
    driver = DriverProcess.start(aeron_dir, tmp_path / "driver.log", BULK_DRIVER, threading_mode="SHARED")
    try:
        await stream_one_gib(aeron_dir, port, tmp_path)
    finally:
        driver.stop()


async def stream_one_gib(aeron_dir: Path, port: int, tmp_path: Path) -> None:
    config = rpc_server_config(
        aeron_dir,
        port,
        launch_driver=False,
        mtu=BULK_MTU,
        term_length=TERM,
        ipc_term_length=TERM,
        peer_timeout=10.0,
        send_timeout=30.0,
    )
    args = [
        *("--port", str(port), "--aeron-dir", str(aeron_dir), "--udp", "--attach", "--mtu", str(BULK_MTU)),
        *("--mode", "stream", "--peer-timeout", "10", "--deadline", "280", "--report-every", str(128 << 20)),
    ]
    errors: list[BaseException] = []
    async with running_server(config) as server:
        server.on_error(lambda conn, error: errors.append(error))
        with rpc_peer(tmp_path, *args) as peer:
            connected = await peer.wait("connected", 60)
            assert connected["transport"] == "udp"
            connection = await wait_until(lambda: only_connection(server), 15, what="the connection")
            assert not connection.is_ipc
            assert connection.streams.chunk_size == TERM // 8 - 10
            retransmits_before = system_counter(aeron_dir, SystemCounterId.RETRANSMITS_SENT)
            digest = hashlib.sha256()

            def source() -> Iterator[memoryview]:
                for piece in deterministic_pieces(GIB):
                    digest.update(piece)
                    yield piece

            started = time.monotonic()
            try:
                async with asyncio.timeout(270):
                    sent = await connection.send_stream(source(), name="gib", size=GIB, timeout=30.0)
            except BaseException:
                await asyncio.sleep(1)  # let the peer say what it saw
                print(f"server errors: {errors}\npeer:\n{peer.output()}")
                raise
            sent_after = time.monotonic() - started
            result = await peer.wait("stream", 60)
            arrived_after = time.monotonic() - started
            retransmits = system_counter(aeron_dir, SystemCounterId.RETRANSMITS_SENT) - retransmits_before
            await peer.wait("closed", 30)
            assert peer.process.wait(30) == 0
        assert sent == GIB
        assert result["length"] == GIB
        assert result["size"] == GIB
        assert result["sha256"] == digest.hexdigest()
        assert retransmits > 0  # datagrams really were lost, and repaired
        assert errors == []
        # No timing assertion; the figures are for whoever reads the output.
        print(
            f"1 GiB over UDP, {LOSS:.0%} receive loss: sent in {sent_after:.1f} s, arrived in {arrived_after:.1f} s "
            f"({GIB / arrived_after / 1e6:.1f} MB/s), {retransmits} retransmits; peer: {result}"
        )
