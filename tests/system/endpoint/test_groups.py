"""Groups with real clients: membership, one encoding per broadcast (reliable, newest-wins and waiting), members
leaving on disconnect before ``on_disconnect`` runs, and the bound on groups."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from endpoint import (
    BudgetExceededError,
    Client,
    Connection,
    ConnectionClosedError,
    MessageTooLargeError,
    Server,
    ServerError,
)
from support.endpoints import (
    Chat,
    Move,
    client_config,
    make_serialization,
    running_server,
    server_config,
    wait_until,
)

UDP_CLIENTS = 4


@contextlib.asynccontextmanager
async def clients(aeron_dir: Path, client_dir: Path, port: int) -> AsyncIterator[list[tuple[Client, Connection]]]:
    """Four UDP clients (one client driver between them) and one IPC client, connected; closed on the way out."""
    made: list[Client] = []
    try:
        pairs = []
        for transport in ("udp",) * UDP_CLIENTS + ("ipc",):
            client = Client(client_config(transport, aeron_dir, client_dir))
            made.append(client)
            pairs.append((client, await asyncio.wait_for(client.connect("127.0.0.1", port), 15)))
        yield pairs
    finally:
        async with asyncio.timeout(30):
            for client in made:
                await client.close()


def server_side(server: Server, connection: Connection) -> Connection:
    return next(c for c in server.connections if c.id == connection.id)


def count_encodes(server: Server, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the server serialization's encodes from now on (groups encode through it)."""
    serialization = server.config.serialization
    calls = [0]
    encode: Callable[[object], bytes] = serialization.encode

    def counting(message: object) -> bytes:
        calls[0] += 1
        return encode(message)

    monkeypatch.setattr(serialization, "encode", counting)
    return calls


async def test_a_group_broadcasts_to_its_members_only_with_one_encoding(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: dict[int, list[Any]] = {}
    async with running_server(server_config(aeron_dir, port)) as server, clients(aeron_dir, client_dir, port) as pairs:
        for client, _ in pairs:
            client.on_message(Chat, lambda c, m: heard.setdefault(c.id, []).append(m.text))
            client.on_message(Move, lambda c, m: heard.setdefault(c.id, []).append(m.x))
        await wait_until(lambda: len(server.connections) == len(pairs), 10)
        room = server.group("room")
        assert server.group("room") is room
        members = [server_side(server, conn) for _, conn in pairs[1:]]  # three UDP clients and the IPC one
        for member in members:
            room.add(member)
        room.add(members[0])  # again: no change
        assert len(room) == 4
        assert list(room) == members
        assert members[0] in room
        assert server_side(server, pairs[0][1]) not in room
        assert members[0].groups == {room}

        encodes = count_encodes(server, monkeypatch)
        assert room.broadcast(Chat("hello")) == 4
        assert await room.send(Chat("waited")) == 4
        assert room.broadcast_unreliable(Move(7, 0)) == 4
        assert encodes[0] == 3  # once per message, whatever the members
        assert room.broadcasts == 3
        assert room.refused == 0

        member_ids = {conn.id for _, conn in pairs[1:]}
        await wait_until(lambda: all(len(heard.get(i, [])) == 3 for i in member_ids), 10, what="every member")
        assert all(heard[i] == ["hello", "waited", 7] for i in member_ids)
        assert pairs[0][1].id not in heard
        assert all(server_side(server, conn).unreliable_sent == 1 for _, conn in pairs[1:])

        room.discard(members[1])
        assert members[1] not in room
        assert members[1].groups == set()
        assert room.broadcast(Chat("fewer")) == 3


async def test_a_member_leaves_its_groups_when_it_disconnects_before_on_disconnect_runs(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    seen_at_disconnect: list[tuple[bool, bool, int]] = []
    async with running_server(server_config(aeron_dir, port)) as server, clients(aeron_dir, client_dir, port) as pairs:
        await wait_until(lambda: len(server.connections) == len(pairs), 10)
        red, blue = server.group("red"), server.group("blue")
        leaving = server_side(server, pairs[2][1])
        for connection in server.connections:
            red.add(connection)
        blue.add(leaving)

        @server.on_disconnect
        def check(connection: Connection) -> None:
            seen_at_disconnect.append((connection in red, connection in blue, len(red)))

        await pairs[2][1].close("bye")
        await wait_until(lambda: seen_at_disconnect, 10, what="on_disconnect")
        assert seen_at_disconnect == [(False, False, len(pairs) - 1)]
        assert leaving.groups == set()
        assert len(blue) == 0
        assert red.broadcast(Chat("still here")) == len(pairs) - 1
        with pytest.raises(ConnectionClosedError):
            red.add(leaving)


async def test_groups_are_bounded_a_closed_group_is_gone_and_only_the_server_s_connections_join(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with (
        running_server(server_config(aeron_dir, port, max_groups=2)) as server,
        running_server(server_config(aeron_dir, 0)) as other,
    ):
        first = server.group("a")
        server.group("b")
        with pytest.raises(BudgetExceededError) as exceeded:
            server.group("c")
        assert exceeded.value.budget == "max_groups"
        first.close()
        assert set(server.groups) == {"b"}
        replacement = server.group("a")
        assert replacement is not first
        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            await asyncio.wait_for(client.connect("127.0.0.1", other.port), 15)
            foreign = await wait_until(lambda: other.connections, 10)
            with pytest.raises(ValueError, match="not a connection of this group's server"):
                replacement.add(foreign[0])
            with pytest.raises(ServerError):
                first.add(foreign[0])
            assert len(replacement) == 0
        finally:
            await client.close()


async def test_a_server_broadcasts_to_the_connections_it_names_with_one_encoding(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``server.broadcast(message, to=...)``: a game's interest management (the players who see the same part of the
    world get one snapshot, encoded once); nobody else gets it, and a refusal sends nothing to anyone."""
    heard: dict[int, list[Any]] = {}
    serialization = make_serialization()
    serialization.register(Move, unreliable=True)  # this end's choice: Move goes newest-wins
    async with (
        running_server(server_config(aeron_dir, port, serialization=serialization)) as server,
        running_server(server_config(aeron_dir, 0)) as other,
        clients(aeron_dir, client_dir, port) as pairs,
    ):
        for client, _ in pairs:
            client.on_message(Chat, lambda c, m: heard.setdefault(c.id, []).append(m.text))
            client.on_message(Move, lambda c, m: heard.setdefault(c.id, []).append(m.x))
        await wait_until(lambda: len(server.connections) == len(pairs), 10)
        near = [server_side(server, conn) for _, conn in (pairs[0], pairs[2], pairs[4])]  # two UDP and the IPC one
        encodes = count_encodes(server, monkeypatch)
        assert server.broadcast(Chat("near"), to=near) == 3
        assert server.broadcast(Move(5, 0), to=iter(near[:2])) == 2  # any iterable; Move goes newest-wins
        assert server.broadcast(Chat("nobody"), to=[]) == 0
        assert encodes[0] == 3
        assert [server_side(server, conn).unreliable_sent for _, conn in pairs[:3]] == [1, 0, 1]

        with pytest.raises(MessageTooLargeError):
            server.broadcast(Chat("x" * (near[0].max_message_length + 1)), to=near)
        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            await asyncio.wait_for(client.connect("127.0.0.1", other.port), 15)
            foreign = await wait_until(lambda: other.connections, 10)
            with pytest.raises(ValueError, match="not a connection of"):
                server.broadcast(Chat("mixed"), to=[near[0], foreign[0]])
        finally:
            await client.close()

        ids = [conn.id for _, conn in pairs]
        await wait_until(lambda: len(heard.get(ids[0], [])) == 2 and len(heard.get(ids[4], [])) == 1, 10, what="all")
        assert heard[ids[0]] == ["near", 5]
        assert heard[ids[2]] == ["near", 5]
        assert heard[ids[4]] == ["near"]  # (newest-wins to it only when named: it was not)
        assert ids[1] not in heard
        assert ids[3] not in heard

        await pairs[2][1].close("bye")  # a closed connection named by a stale list is skipped, not an error
        await wait_until(lambda: near[1].is_closed, 10, what="the server side closed")
        assert server.broadcast(Chat("after"), to=near) == 2
        await wait_until(lambda: heard[ids[4]] == ["near", "after"], 10, what="after")
