"""The shared driver registry: one driver per driver configuration, reference-counted, never clobbering."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from driver.client import Aeron
from endpoint import Client, ClientConfiguration, Server
from endpoint.registry import registry
from support.driver_process import DriverProcess
from support.endpoints import client_config, free_server_port, free_udp_port, running_server, server_config, wait_until


async def test_end_points_with_equal_settings_share_one_driver_until_the_last_closes(aeron_dir: Path) -> None:
    first = Server(server_config(aeron_dir, free_server_port()))
    second = Server(server_config(aeron_dir, free_server_port()))
    await first.bind()
    try:
        await second.bind()
        try:
            assert first._shared is second._shared
            assert len(registry.active()) == 1
            assert first._shared is not None
            assert first._shared.launched_here
        finally:
            await second.close()
        assert (aeron_dir / "cnc.dat").exists()  # still leased by the first
        assert len(registry.active()) == 1
    finally:
        await first.close()
    assert registry.active() == []
    assert not aeron_dir.exists()  # launched here, so the last close removed it


async def test_concurrent_starts_and_closes_make_and_free_exactly_one_driver(aeron_dir: Path) -> None:
    clients = [Client(ClientConfiguration(aeron_dir=aeron_dir)) for _ in range(12)]
    server = Server(server_config(aeron_dir, free_server_port()))
    await asyncio.gather(server.bind(), *(c._lease_driver() for c in clients))
    try:
        drivers = {id(c._shared) for c in clients} | {id(server._shared)}
        assert len(drivers) == 1
        assert len(registry.active()) == 1
        assert server._shared is not None
        assert len(server._shared.users) == 13
    finally:
        await asyncio.gather(server.close(), *(c.close() for c in clients))
    assert registry.active() == []
    assert not aeron_dir.exists()


async def test_a_storm_of_first_leases_in_one_loop_takes_one_worker_thread(aeron_dir: Path) -> None:
    """Clients of one process all connecting at once: one starts the driver off the loop, the rest wait for it
    and attach on the loop's thread, all to the same driver."""
    clients = [Client(ClientConfiguration(aeron_dir=aeron_dir)) for _ in range(40)]
    before = registry.blocking_leases
    await asyncio.gather(*(c._lease_driver() for c in clients))
    try:
        assert registry.blocking_leases - before == 1
        assert len({id(c._shared) for c in clients}) == 1
        assert clients[0]._shared is not None
        assert len(clients[0]._shared.users) == 40
        assert registry._leasing == {}
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    assert registry.active() == []


async def test_a_lease_waiting_on_a_hung_leasing_task_gives_up_after_the_driver_timeout(aeron_dir: Path) -> None:
    """The loop's other clients wait for the one starting the driver, but never past ``driver_timeout``: then they
    lease on their own (here the leasing task is a gate nobody will open)."""
    client = Client(ClientConfiguration(aeron_dir=aeron_dir, driver_timeout=1.0))
    config = client.config
    gate = (config.driver_key(), threading.get_ident())
    registry._leasing[gate] = anyio.Event()
    try:
        await asyncio.wait_for(client._lease_driver(), 10.0)
        assert client._shared is not None
        assert client._shared.aeron is not None
    finally:
        del registry._leasing[gate]
        await client.close()
    assert registry.active() == []


async def test_a_live_driver_in_the_directory_is_attached_to_and_left_running(aeron_dir: Path, tmp_path: Path) -> None:
    standalone = DriverProcess.start(aeron_dir, tmp_path / "driver.log")
    try:
        server = Server(server_config(aeron_dir, free_server_port()))
        await server.bind()
        try:
            assert server._shared is not None
            assert not server._shared.launched_here
        finally:
            await server.close()
        assert standalone.process.poll() is None  # not ours to stop
        assert (aeron_dir / "cnc.dat").exists()  # nor to remove
    finally:
        standalone.stop()


async def test_unique_directories_give_each_end_point_its_own_driver(aeron_dir: Path) -> None:
    a = Server(server_config(aeron_dir, free_server_port(), unique_aeron_dir=True))
    b = Server(server_config(aeron_dir, free_server_port(), unique_aeron_dir=True))
    await a.bind()
    await b.bind()
    try:
        assert a._shared is not None
        assert b._shared is not None
        assert a._shared is not b._shared
        assert a._shared.aeron_dir != b._shared.aeron_dir
        dirs = [a._shared.aeron_dir, b._shared.aeron_dir]
        assert all(d.exists() for d in dirs)
    finally:
        await a.close()
        await b.close()
    assert not any(d.exists() for d in dirs)


async def test_the_loop_runs_an_invoker_driver_and_a_keeper_runs_it_while_the_loop_is_blocked(aeron_dir: Path) -> None:
    """By default the embedded driver has no thread: the loop's poller runs it, and while the loop is blocked
    (here: a blocking call to that very driver through another client) a keeper thread does."""
    server = Server(server_config(aeron_dir, free_server_port(), driver_timeout=3.0))
    await server.bind()
    try:
        shared = server._shared
        assert shared is not None
        assert shared.invoker is not None
        assert len(shared.invokers) == 2  # the driver and its client's conductor
        assert shared.driven_ns > 0
        other = Aeron.connect(aeron_dir=aeron_dir, driver_timeout_ms=3000)  # knows nothing of the invoker
        try:
            stalled_at = time.monotonic_ns()
            subscription = other.add_subscription("aeron:ipc", 4242)  # blocks the loop until the driver answers
            assert shared.driven_ns < stalled_at  # the poller did not run meanwhile: the keeper did
            subscription.close()
        finally:
            other.close()
        await asyncio.sleep(0.1)
        assert shared.driven_ns > stalled_at  # and the poller is back
    finally:
        await server.close()


def _forked_client(aeron_dir: str, port: int, results: Any) -> None:
    """In a child forked from a process that runs a server: the copied registry must not hand us the
    parent's driver (running its conductor here would make two conductors of one driver)."""

    async def run() -> None:
        results.put(("inherited", len(registry.active())))
        async with Client(client_config("ipc", Path(aeron_dir), Path(aeron_dir))) as client:
            connection = await client.connect("127.0.0.1", port)
            assert client._shared is not None
            results.put(("launched_here", client._shared.launched_here))
            await connection.send("hello from the fork")
            await connection.close("done")

    asyncio.run(run())


async def test_a_forked_child_attaches_to_the_parents_driver_instead_of_inheriting_it(aeron_dir: Path) -> None:
    port = free_udp_port()
    received: list[object] = []
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_message(object, lambda conn, message: received.append(message))
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        child = ctx.Process(target=_forked_client, args=(str(aeron_dir), port, results))
        child.start()
        try:
            await wait_until(lambda: received, 30, what="the forked client's message")
            child.join(30)
            assert child.exitcode == 0
        finally:
            if child.is_alive():
                child.kill()
                child.join(5)
        assert received == ["hello from the fork"]
        assert dict(results.get(timeout=5) for _ in range(2)) == {"inherited": 0, "launched_here": False}
