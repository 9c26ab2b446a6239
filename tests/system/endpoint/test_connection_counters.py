"""Connection counters: what they take from the driver's counters file, and that a full one costs nothing else."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import endpoint
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import COUNTER_LENGTH, METADATA_LENGTH, CountersManager
from driver.tools.connections import CONNECTION_TYPE_IDS
from endpoint.connection import counters as connection_counters
from endpoint.connection.counters import (
    OPEN_AFTER_NS,
    OPEN_AFTER_STORMING_NS,
    ConnectionCounters,
    counter_slots,
    used_counter_slots,
)
from support.endpoints import Chat, client_config, connected_client, running_server, server_config, wait_until


@contextlib.contextmanager
def connection_counters_reader(directory: Path) -> Iterator[set[int]]:
    """The type ids of the counters allocated in the directory's driver now."""
    with endpoint.driver_info(directory) as info:
        yield {c.type_id for c in info.counters()}


def test_used_slots_count_every_slot_ever_allocated() -> None:
    slots = 64
    manager = CountersManager(
        AtomicBuffer(bytearray(slots * METADATA_LENGTH)), AtomicBuffer(bytearray(slots * COUNTER_LENGTH))
    )
    assert counter_slots(manager) == slots
    assert used_counter_slots(manager) == 0
    ids = [manager.allocate(f"c{i}") for i in range(37)]
    assert used_counter_slots(manager) == 37
    for counter_id in ids[:10]:
        manager.free(counter_id)
    assert used_counter_slots(manager) == 37  # freed slots are reused, not given back
    for i in range(slots - 37):
        manager.allocate(f"more {i}")
    assert used_counter_slots(manager) == slots


class _Stub:
    """What ``due`` looks at of a connection."""

    is_closed = False


def test_counters_wait_longer_while_handshakes_are_under_way_but_not_forever() -> None:
    counters = ConnectionCounters("server")
    first, second, closed = _Stub(), _Stub(), _Stub()
    closed.is_closed = True
    for stub in (first, second, closed):
        counters.admit(stub, 0)  # type: ignore[arg-type]
    assert counters.due(OPEN_AFTER_NS - 1) == []
    # A storm: past the usual wait nothing is given counters (a closed one leaves the queue without them) ...
    assert counters.due(OPEN_AFTER_NS, storming=True) == []
    assert counters.due(OPEN_AFTER_STORMING_NS - 1, storming=True) == []
    # ... until the storm's bound, or the storm ends, whichever comes first; each connection once.
    assert counters.due(OPEN_AFTER_STORMING_NS, storming=True) == [first, second]
    assert counters.due(OPEN_AFTER_STORMING_NS + 1) == []
    counters.admit(first, 0)  # type: ignore[arg-type]
    assert counters.due(OPEN_AFTER_NS + 1, storming=True) == []
    assert counters.due(OPEN_AFTER_NS + 2) == [first]


def test_counters_are_given_oldest_first_and_the_young_wait_their_turn() -> None:
    """Connections are admitted in the order they came: each look takes those old enough from the front and leaves
    the rest, the next due when the oldest of them is."""
    counters = ConnectionCounters("server")
    old, older_closed, young = _Stub(), _Stub(), _Stub()
    older_closed.is_closed = True
    counters.admit(old, 0)  # type: ignore[arg-type]
    counters.admit(older_closed, 1)  # type: ignore[arg-type]
    counters.admit(young, 10)  # type: ignore[arg-type]
    assert counters.due(OPEN_AFTER_NS + 1) == [old]  # the closed one leaves without counters
    assert counters.waiting
    assert counters._next_open_ns == 10 + OPEN_AFTER_NS
    assert counters.due(OPEN_AFTER_NS + 9) == []
    assert counters.due(OPEN_AFTER_NS + 10) == [young]
    assert not counters.waiting


async def test_a_full_counters_file_only_skips_the_counters(
    monkeypatch: pytest.MonkeyPatch, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Past the fill limit connections get no counters, are counted, and work as before."""
    monkeypatch.setattr(connection_counters, "COUNTERS_FILL_LIMIT", 0.0)
    async with running_server(server_config(aeron_dir, port)) as server:
        received: list[object] = []
        server.on_message(Chat)(lambda connection, message: received.append(message))
        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, connection):
            await connection.send(Chat("still works"))
            await wait_until(lambda: received, timeout=20, what="the message")
            # At least one: a connect that started over under load leaves the server an abandoned attempt's connection.
            await wait_until(lambda: server.connection_counters.failures >= 1, timeout=20, what="the server's skip")
            # (Each end asks once its connection has lived a second, at its own tick: the client's may come later.)
            await wait_until(lambda: client.connection_counters.failures, timeout=20, what="the client's skip")
            assert client.connection_counters.failures == 1
            assert len(server.connection_counters) == 0
            assert len(client.connection_counters) == 0
            with connection_counters_reader(aeron_dir) as types:
                assert not types & CONNECTION_TYPE_IDS


async def test_counters_follow_the_connection(aeron_dir: Path, client_dir: Path, port: int) -> None:
    async with running_server(server_config(aeron_dir, port)) as server:
        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, _):
            await wait_until(lambda: len(server.connection_counters) == 1, timeout=20, what="the server's counters")
            await wait_until(lambda: len(client.connection_counters) == 1, timeout=20, what="the client's counters")
            with connection_counters_reader(aeron_dir) as types:
                assert types >= CONNECTION_TYPE_IDS
        await wait_until(lambda: len(server.connection_counters) == 0, timeout=20, what="counters freed")

        def gone() -> bool:
            with connection_counters_reader(aeron_dir) as types:
                return not types & CONNECTION_TYPE_IDS

        await wait_until(gone, timeout=20, what="the counters freed in the driver")
        assert server.connection_counters.failures == 0


@pytest.mark.parametrize("length", [1 << 20, 8 << 20])
async def test_the_counters_buffer_length_sizes_the_launched_drivers_counters(
    aeron_dir: Path, client_dir: Path, port: int, length: int
) -> None:
    """``counters_buffer_length`` reaches the driver each end point launches: its counters file has that many slots
    (128 bytes each), and a connection's counters fit in it."""
    async with running_server(server_config(aeron_dir, port, counters_buffer_length=length)) as server:
        config = client_config("udp", aeron_dir, client_dir, counters_buffer_length=length)
        async with connected_client(config, port) as (client, _):
            for end in (server, client):
                shared = end._shared
                assert shared is not None
                assert shared.aeron is not None
                reader = shared.aeron.conductor.counters_reader
                assert counter_slots(reader) == length // COUNTER_LENGTH
                assert 0 < used_counter_slots(reader) < counter_slots(reader)
