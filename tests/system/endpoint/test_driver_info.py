"""``endpoint.is_running``, ``ensure_stopped``, ``in_use_by_others`` and ``driver_info`` against real end points:
servers in this process and in another, clients over UDP, a plain driver client attached beside them."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

import endpoint
from driver.client import Aeron
from driver.errors import DriverError, RegistrationError
from support.endpoints import Chat, client_config, connected_client, running_server, server_config, wait_until
from support.logged_process import LoggedProcess
from support.waiting import execute_until


async def test_is_running_and_ensure_stopped_follow_a_server(aeron_dir: Path, port: int) -> None:
    config = server_config(aeron_dir, port)
    assert not endpoint.is_running(config)
    await asyncio.to_thread(endpoint.ensure_stopped, config, 0.1)  # nothing to wait for
    async with running_server(config) as server:
        assert endpoint.is_running(config)
        assert endpoint.is_running(server)
        assert endpoint.is_running(aeron_dir)
        with pytest.raises(endpoint.DriverStillRunningError, match="this process") as caught:
            await asyncio.to_thread(endpoint.ensure_stopped, config, 0.2)
        assert isinstance(caught.value, TimeoutError)
        assert isinstance(caught.value, endpoint.EndpointError)
    await asyncio.to_thread(endpoint.ensure_stopped, config, 10.0)
    assert not endpoint.is_running(config)


async def test_ensure_stopped_waits_for_another_process(
    aeron_dir: Path, port: int, start_server: Callable[..., LoggedProcess]
) -> None:
    """A server in another process: its driver is in use by others until that process stops, and ensure_stopped
    returns once it has."""
    process = start_server(port, aeron_dir)
    await asyncio.to_thread(
        execute_until, lambda: process.has("serving "), timeout_s=30, description="the server process serving"
    )
    config = server_config(aeron_dir, port)
    assert endpoint.is_running(config)
    assert endpoint.in_use_by_others(config)
    with endpoint.driver_info(config) as info:
        assert info.pid() == process.pid
    process.signal(signal.SIGTERM)
    await asyncio.to_thread(endpoint.ensure_stopped, config, 20.0)
    assert not endpoint.is_running(config)
    assert not endpoint.in_use_by_others(config)


async def test_driver_info_reads_a_live_server(aeron_dir: Path, client_dir: Path, port: int) -> None:
    async with running_server(server_config(aeron_dir, port)) as server:
        received: list[object] = []
        server.on_message(Chat)(lambda connection, message: received.append(message))
        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, connection):
            for i in range(30):
                await connection.send(Chat(f"hello {i}"))
            await wait_until(lambda: len(received) == 30, timeout=20, what="30 messages at the server")
            assert server.aeron_dir == aeron_dir
            assert client.aeron_dir == client_dir
            assert not endpoint.in_use_by_others(server)  # only this process's own client
            with endpoint.driver_info(server) as info:
                assert info.directory == aeron_dir
                assert info.is_running()
                status = info.status()
                assert status.alive
                assert status.pid == os.getpid()
                assert 0 <= info.heartbeat_age() <= server.config.driver_timeout
                version = info.version()
                assert version.cnc_version == status.cnc_version
                assert version.generation
                labels = {c.label: c.value for c in info.counters()}
                assert labels["Bytes received"] > 0
                assert len(info.client_ids()) == 1
                backlog = info.backlog()
                udp = [s for s in backlog if s.channel.startswith("aeron:udp") and s.subscribers]
                assert udp
                assert all(s.receiver is not None and s.receiver >= s.slowest_subscriber for s in udp)  # type: ignore[operator]
                assert isinstance(info.loss_report(), list)
                rows = await wait_until(
                    lambda: [r for r in info.connections() if r.messages_received >= 30],
                    timeout=20,
                    what="the connection's counters, refreshed",
                )
                assert [(r.key.connection_id, r.key.role, r.key.transport) for r in rows] == [
                    (connection.id, "server", "udp")
                ]
                assert info.errors() == []
            with endpoint.driver_info(client) as info:
                streams = info.backlog()
                assert any(s.sender is not None and s.sender > 0 for s in streams)

            # A second driver client in this process, not an end point's: the driver is now in use by others,
            # and the error its bad request leaves is in the distinct error log.
            other = await asyncio.to_thread(Aeron.connect, aeron_dir=aeron_dir)
            try:
                with pytest.raises(RegistrationError):
                    await asyncio.to_thread(other.add_publication, "aeron:udp?endpoint=localhost:notaport", 1)
                # The driver counts a client from its first resource on.
                await asyncio.to_thread(other.add_subscription, "aeron:ipc", 77)
                await wait_until(lambda: endpoint.in_use_by_others(server), timeout=20, what="the other client seen")
                with endpoint.driver_info(server) as info:
                    errors = info.errors()
                    assert len(errors) == 1
                    assert "notaport" in errors[0].text
                    assert errors[0].observation_count == 1
                    assert len(info.client_ids()) == 2
            finally:
                await asyncio.to_thread(other.close)


def test_driver_info_of_a_missing_directory(tmp_path: Path) -> None:
    """Nothing there: not running, a status that says why, a typed error from the readers."""
    with endpoint.driver_info(tmp_path / "none") as info:
        assert not info.is_running()
        status = info.status()
        assert not status.alive
        assert status.problem is not None
        assert "no such directory" in status.problem
        with pytest.raises(DriverError, match="no such directory"):
            info.counters()
    assert not endpoint.in_use_by_others(tmp_path / "none")
