"""A connect storm bigger than the server takes at once degrades, never collapses.

A server that may have only a few handshakes in flight (a small ``max_pending_handshakes``: half of it) and clients in
separate processes (a driver and a route each) connecting all at once: the server refuses what it cannot finish
within a handshake timeout with SERVER_BUSY and a retry-after, before it makes anything for them; the clients
come back apart (backoff with jitter) and every one connects. Nothing made for a handshake is thrown away.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from endpoint.errors import RejectReason
from support.endpoints import running_server, server_config, wait_until
from support.logged_process import LoggedProcess

pytestmark = pytest.mark.process

STORM = Path(__file__).with_name("storm_clients.py")


def storm(tmp_path: Path, port: int, aeron_dir: Path, clients: int) -> LoggedProcess:
    """``storm_clients.py``; use it in a ``with`` block, which SIGKILLs it by pid on the way out."""
    args = ["--port", str(port), "--aeron-dir", str(aeron_dir), "--clients", str(clients)]
    return LoggedProcess.spawn([sys.executable, str(STORM), *args], tmp_path / f"storm-{time.monotonic_ns()}.log")


async def test_a_storm_bigger_than_the_server_takes_at_once_connects_every_client(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    processes, per_process, cap = 3, 12, 8
    config = server_config(
        aeron_dir, port, max_pending_handshakes=cap, max_pending_per_source=cap, handshake_timeout=1.0
    )
    async with running_server(config) as server:
        dirs = [client_dir.with_name(f"{client_dir.name}-{i}") for i in range(processes)]
        peers = [storm(tmp_path, port, d, per_process) for d in dirs]
        try:
            with peers[0], peers[1], peers[2]:
                total = processes * per_process
                await wait_until(lambda: all(p.has("failed ") for p in peers), 120, what="every storm process done")
                for peer in peers:
                    assert f"connected {per_process}/{per_process}" in peer.output(), peer.output()[-2000:]
                    assert "discarded 0" in peer.output(), peer.output()[-2000:]
                await wait_until(lambda: len(server.connections) == total, 10, what="the server holding them all")
                stats = server.handshake_stats
                # More came at once than it takes: some were refused busy, before anything was made for them.
                assert stats.busy > 0
                assert server.rejections[RejectReason.SERVER_BUSY] >= stats.busy
                assert stats.discarded == 0, stats
                assert server._pending == {}
                print(f"storm of {total} with {cap // 2} in flight: {stats}")
        finally:
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
