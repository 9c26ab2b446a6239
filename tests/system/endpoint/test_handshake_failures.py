"""Handshakes that must not succeed, and handshakes under attack: rejections, timeouts, key pinning, floods.

A rejected or timed-out client gets a typed error (never a hang), and whatever a rejected, abandoned or forged
handshake made the server hold (pending entries, session and stream ids, per-address counts) is given back.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from endpoint import (
    Client,
    ClientRejectedError,
    ClientTimeoutError,
    Connection,
    RejectReason,
    SchemaMismatchError,
    Server,
)
from endpoint.handshake.keystore import default_config_dir
from endpoint.handshake.protocol import MAGIC, PROTOCOL_VERSION, Accepted, ClientHandshake, Kind, Rejected
from support.endpoints import (
    TRANSPORTS,
    Ack,
    Move,
    RawHandshakePeer,
    client_config,
    make_serialization,
    raw_driver,
    registration_hash,
    running_server,
    server_config,
    wait_until,
)


def assert_nothing_held(server: Server, connections: int = 0) -> None:
    """Only ``connections`` live connections hold ids; no half-done handshake is left. A connection holds two
    stream ids and two session ids, and over UDP (unsealed) two more sessions for its unreliable streams."""
    assert server._pending == {}
    assert len(server._ids_of) == connections
    assert server._session_ids.live_count == sum(len(ids) - 2 for ids in server._ids_of.values())
    assert all(len(ids) in (4, 6) for ids in server._ids_of.values())
    assert server._stream_ids.live_count == 2 * connections


async def rejected(client: Client, port: int, timeout: float = 15.0) -> ClientRejectedError:
    with pytest.raises(ClientRejectedError) as info:
        await asyncio.wait_for(client.connect("127.0.0.1", port), timeout)
    return info.value


# ------------------------------------------------------------------------------------------------ rejections


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_max_clients_turns_the_next_client_away_until_one_leaves(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with running_server(server_config(aeron_dir, port, max_clients=1)) as server:
        first = Client(client_config(transport, aeron_dir, client_dir))
        second = Client(client_config(transport, aeron_dir, client_dir))
        try:
            conn = await asyncio.wait_for(first.connect("127.0.0.1", port), 15)
            error = await rejected(second, port)
            assert error.reason is RejectReason.SERVER_FULL
            assert second.connection is None
            assert len(server.connections) == 1
            assert server.rejections[RejectReason.SERVER_FULL] >= 1  # counted (and in the counters file)
            assert server.handshakes_accepted == 1
            await wait_until(lambda: server._pending == {}, 5)
            assert_nothing_held(server, connections=1)

            await asyncio.wait_for(conn.close(), 10)
            await wait_until(lambda: server.connections == [], 5)
            again = await asyncio.wait_for(second.connect("127.0.0.1", port), 15)
            assert not again.is_closed
        finally:
            await asyncio.gather(first.close(), second.close())


async def test_max_connections_per_ip_counts_udp_only(aeron_dir: Path, client_dir: Path, port: int) -> None:
    async with running_server(server_config(aeron_dir, port, max_connections_per_ip=1)) as server:
        first = Client(client_config("udp", aeron_dir, client_dir))
        second = Client(client_config("udp", aeron_dir, client_dir))
        local = Client(client_config("ipc", aeron_dir, client_dir))
        try:
            conn = await asyncio.wait_for(first.connect("127.0.0.1", port), 15)
            error = await rejected(second, port)
            assert error.reason is RejectReason.TOO_MANY_FROM_ADDRESS
            assert "127.0.0.1" in error.detail
            # IPC connections are not counted against an address.
            assert (await asyncio.wait_for(local.connect("127.0.0.1", port), 15)).is_ipc
            assert server._per_address == {"127.0.0.1": 1}

            await asyncio.wait_for(conn.close(), 10)
            await wait_until(lambda: server._per_address == {}, 5, what="the address count given back")
            assert not (await asyncio.wait_for(second.connect("127.0.0.1", port), 15)).is_ipc
            assert server._per_address == {"127.0.0.1": 1}
        finally:
            await asyncio.gather(first.close(), second.close(), local.close())


async def test_deny_filters_udp_clients_but_not_ipc_ones(aeron_dir: Path, client_dir: Path, port: int) -> None:
    async with running_server(server_config(aeron_dir, port, deny=("127.0.0.1",))) as server:
        remote = Client(client_config("udp", aeron_dir, client_dir))
        local = Client(client_config("ipc", aeron_dir, client_dir))
        try:
            error = await rejected(remote, port)
            assert error.reason is RejectReason.FILTERED
            assert (await asyncio.wait_for(local.connect("127.0.0.1", port), 15)).is_ipc
            await wait_until(lambda: server._pending == {}, 5)
            assert_nothing_held(server, connections=1)
        finally:
            await asyncio.gather(remote.close(), local.close())


async def test_allow_list_without_the_client_filters_it(aeron_dir: Path, client_dir: Path, port: int) -> None:
    async with running_server(server_config(aeron_dir, port, allow=("10.0.0.0/8",))):
        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            assert (await rejected(client, port)).reason is RejectReason.FILTERED
        finally:
            await client.close()


async def test_filter_rule_sees_the_client_tag(aeron_dir: Path, client_dir: Path, port: int) -> None:
    seen: list[tuple[str, str]] = []
    async with running_server(server_config(aeron_dir, port)) as server:

        @server.filter
        def no_bad_tags(ip: str, tag: str) -> bool:
            seen.append((ip, tag))
            return tag != "bad"

        bad = Client(client_config("udp", aeron_dir, client_dir, tag="bad"))
        good = Client(client_config("udp", aeron_dir, client_dir, tag="good"))
        try:
            assert (await rejected(bad, port)).reason is RejectReason.FILTERED
            await asyncio.wait_for(good.connect("127.0.0.1", port), 15)
        finally:
            await asyncio.gather(bad.close(), good.close())
    assert seen == [("127.0.0.1", "bad"), ("127.0.0.1", "good")]


async def test_a_failing_filter_rule_rejects_and_reports(aeron_dir: Path, client_dir: Path, port: int) -> None:
    errors: list[BaseException] = []
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_error(lambda conn, exc: errors.append(exc))

        @server.filter
        def broken(ip: str, tag: str) -> bool:
            raise RuntimeError("rule exploded")

        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            assert (await rejected(client, port)).reason is RejectReason.FILTERED
        finally:
            await client.close()
    assert [str(e) for e in errors] == ["rule exploded"]


@attrs.define
class ValueOnTheClient:
    value: int


@attrs.define
class ValueOnTheServer:
    value: str


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_incompatible_message_classes_are_a_serialization_mismatch(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """The same type id, a field of another type (docs/endpoint.md lists what may differ and what may not)."""
    server_ser = make_serialization(extra=[ValueOnTheServer])
    async with running_server(server_config(aeron_dir, port, serialization=server_ser)) as server:
        config = client_config(
            transport, aeron_dir, client_dir, serialization=make_serialization(extra=[ValueOnTheClient])
        )
        client = Client(config)
        try:
            error = await rejected(client, port)
            assert error.reason is RejectReason.SERIALIZATION_MISMATCH
            assert isinstance(error, SchemaMismatchError)
            assert (error.class_name, error.field) == (f"{__name__}.ValueOnTheServer", "value")
            assert "is str on the server but int on the client" in str(error)
        finally:
            await client.close()
        assert server.connections == []
        await wait_until(lambda: server._pending == {}, 5)
        assert_nothing_held(server)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_no_server_on_the_port_times_out(transport: str, aeron_dir: Path, client_dir: Path, port: int) -> None:
    client = Client(client_config(transport, aeron_dir, client_dir, connect_timeout=1.5))
    try:
        # ClientTimeoutError, not the outer wait's TimeoutError: the client's own connect_timeout ended it.
        with pytest.raises(ClientTimeoutError):
            await asyncio.wait_for(client.connect("127.0.0.1", port), 10)
        assert client.connection is None
    finally:
        await client.close()


# ------------------------------------------------------------------------------------------------ key pinning


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_pinned_server_key_that_changes_is_refused_unless_allowed(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    known = tmp_path / "known_servers.json"
    address = f"127.0.0.1:{port}"
    # The clients stay open to the end: each connect runs on the same client driver (see
    # test_sequential_udp_clients_with_fresh_drivers_all_connect for why that matters over UDP).
    clients: list[Client] = []

    def new_client(**overrides: object) -> Client:
        client = Client(client_config(transport, aeron_dir, client_dir, known_servers_path=known, **overrides))
        clients.append(client)
        return client

    try:
        async with running_server(server_config(aeron_dir, port, key_path=tmp_path / "first.key")) as first:
            first_key = first.public_key
            conn = await asyncio.wait_for(new_client().connect("127.0.0.1", port), 15)
            await asyncio.wait_for(conn.close(), 10)
        assert json.loads(known.read_text()) == {address: first_key.hex()}
        assert (tmp_path / "first.key").stat().st_mode & 0o777 == 0o600

        # The same key file gives the same identity: a pinned client connects again.
        async with running_server(server_config(aeron_dir, port, key_path=tmp_path / "first.key")) as again:
            assert again.public_key == first_key
            conn = await asyncio.wait_for(new_client().connect("127.0.0.1", port), 15)
            await asyncio.wait_for(conn.close(), 10)

        async with running_server(server_config(aeron_dir, port, key_path=tmp_path / "second.key")) as second:
            second_key = second.public_key
            assert second_key != first_key
            error = await rejected(new_client(), port)
            assert error.reason is RejectReason.SERVER_KEY_CHANGED
            assert json.loads(known.read_text()) == {address: first_key.hex()}

            conn = await asyncio.wait_for(new_client(allow_server_key_change=True).connect("127.0.0.1", port), 15)
            assert not conn.is_closed
            assert json.loads(known.read_text()) == {address: second_key.hex()}
            await asyncio.wait_for(conn.close(), 10)

            # From now on the new key is the pinned one.
            conn = await asyncio.wait_for(new_client().connect("127.0.0.1", port), 15)
            await asyncio.wait_for(conn.close(), 10)
    finally:
        await asyncio.gather(*(c.close() for c in clients))


async def test_keys_and_pins_persist_by_default_and_a_pin_needs_a_finished_handshake(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """No key or pin path configured: both live in the configuration directory (the test's own, set by conftest).
    A client turned away pins nothing; one that connected pins the key, which a restarted server still has."""
    config_dir = default_config_dir()
    pins = config_dir / "known_servers.json"
    server_ser = make_serialization(extra=[ValueOnTheServer])
    async with running_server(server_config(aeron_dir, port, serialization=server_ser)) as server:
        first_key = server.public_key
        assert (config_dir / f"server-{port}.key").stat().st_mode & 0o777 == 0o600
        refused = Client(
            client_config("udp", aeron_dir, client_dir, serialization=make_serialization(extra=[ValueOnTheClient]))
        )
        try:
            error = await rejected(refused, port)
            assert error.reason is RejectReason.SERIALIZATION_MISMATCH
            assert error.authenticated
        finally:
            await refused.close()
        assert not pins.exists(), "a handshake that went nowhere pinned the server"
        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            await asyncio.wait_for(conn.close(), 10)
        finally:
            await client.close()
        assert json.loads(pins.read_text()) == {f"127.0.0.1:{port}": first_key.hex()}
    async with running_server(server_config(aeron_dir, port)) as again:
        assert again.public_key == first_key
        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)  # NK with the pin
            await asyncio.wait_for(conn.close(), 10)
        finally:
            await client.close()


# ------------------------------------------------------------------------------------------------ hostile handshakes


def garbage_packets(hello: bytes, count: int, rng: random.Random) -> list[bytes]:
    """Random bytes, every truncation of a real HELLO, bit flips of it, and wrong kinds."""
    packets = [hello[:cut] for cut in range(1, len(hello))]
    for _ in range(200):
        flipped = bytearray(hello)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        packets.append(bytes(flipped))
    import msgpack  # type: ignore[import-untyped]

    packets += [
        msgpack.packb([MAGIC, Kind.ANSWER, 1, b"k" * 64]),  # server-only kind from a client
        msgpack.packb([MAGIC, Kind.DONE, 12345, b"s" * 40]),  # DONE for no handshake
        msgpack.packb([MAGIC, 99]),
        msgpack.packb({"not": "a list"}),
        b"\xc1",
        b"\x00" * 4000,
    ]
    while len(packets) < count:
        packets.append(rng.randbytes(rng.randrange(1, 300)))
    rng.shuffle(packets)
    return packets


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_legitimate_client_connects_during_a_handshake_flood(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    rng = random.Random(20240611)
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        raw_driver(aeron_dir if transport == "ipc" else None) as aeron,
    ):
        attacker = await RawHandshakePeer.open(aeron, transport, port)
        try:
            captured = attacker.handshake()
            hello = captured.hello(time.time_ns())
            stale = attacker.handshake().hello(time.time_ns() - 3_600_000_000_000)  # an hour old
            hijack = attacker.handshake(connect_key=captured.connect_key)  # same connect key, another key pair
            packets = garbage_packets(hello, 3000, rng)
            # The captured HELLO (sent twice: the second is a retry), a stale one, and its connect key stolen.
            packets[100:100] = [hello, hello, stale, hijack.hello(time.time_ns())]

            connected = asyncio.Event()
            rounds = 0

            async def flood() -> None:
                """The whole list at least once, and on (in a new order each round) until the client is in."""
                nonlocal rounds
                while rounds == 0 or not connected.is_set():
                    for index, packet in enumerate(packets):
                        await attacker.send(packet)
                        if index % 25 == 0:
                            await asyncio.sleep(0)
                    rounds += 1
                    rng.shuffle(packets)

            got: list[object] = []
            client = Client(client_config(transport, aeron_dir, client_dir))
            client.on_message(Ack, lambda c, m: got.append(m))

            @server.on_message(Move)
            async def echo(conn: Connection, msg: Move) -> None:
                await conn.send(Ack(msg.x))

            try:
                async with asyncio.timeout(30):
                    flooding = asyncio.create_task(flood())
                    await asyncio.sleep(0.05)
                    conn = await client.connect("127.0.0.1", port)
                    assert not flooding.done(), "the flood stopped before the client connected"
                    connected.set()
                    await flooding
                    await conn.send(Move(7, 0))
                    await wait_until(lambda: got, 5)
            finally:
                await client.close()
            assert got == [Ack(7)]
            stats = server.handshake_stats
            sent = rounds * len(packets)
            await wait_until(lambda: stats.received >= sent, 10, what="the server read the whole flood")
            assert stats.malformed > 2000
            assert stats.unknown >= 1  # the DONE for no handshake
            if transport == "ipc":
                assert stats.replayed >= 1  # the stolen connect key
            else:
                # None of the flood's HELLOs came back with a cookie: nothing was allocated for them.
                assert stats.challenged >= 1
            # Bit flips make some valid-looking HELLOs that are accepted and never finished: bounded per source.
            assert len(server._pending) <= server.config.max_pending_per_source
        finally:
            await attacker.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_half_finished_handshake_is_expired_and_its_ids_released(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    config = server_config(aeron_dir, port, handshake_timeout=0.3)
    async with running_server(config) as server, raw_driver(aeron_dir if transport == "ipc" else None) as aeron:
        peer = await RawHandshakePeer.open(aeron, transport, port)
        try:
            handshake = peer.handshake()
            await peer.send(handshake.hello(time.time_ns()))
            answer = await peer.receive(handshake)
            assert isinstance(answer, Accepted)
            assert answer.server_public == server.public_key
            assert handshake.connect_key in server._pending
            assert server._session_ids.live_count == (4 if transport == "udp" else 2)  # UDP: the unreliable pair's
            assert server._stream_ids.live_count == 2
            if transport == "udp":
                assert server._per_address == {"127.0.0.1": 1}
            assert server.connections == []

            # No DONE: the server gives everything back after its handshake timeout (a few times 0.3 s).
            await wait_until(lambda: server._pending == {}, 10, what="the pending handshake expired")
            await wait_until(lambda: server._session_ids.live_count == 0 and server._stream_ids.live_count == 0, 5)
            assert server.handshake_stats.expired >= 1
            assert server._per_address == {}

            # A DONE after that is unknown and opens nothing.
            unknown = server.handshake_stats.unknown
            await peer.send(handshake.done())
            await wait_until(lambda: server.handshake_stats.unknown > unknown, 5, what="the late DONE dropped")
            assert server.connections == []
            assert_nothing_held(server)
        finally:
            await peer.close()

        # The server still works.
        client = Client(client_config(transport, aeron_dir, client_dir))
        try:
            conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            assert not conn.is_closed
        finally:
            await client.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_client_whose_server_gave_up_at_done_starts_over_with_a_fresh_hello(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server abandons the first handshake at DONE (as when its stream finds no subscriber in time) and from
    then on drops that connect key's DONEs; the client must not resend DONE until its connect timeout."""
    abandoned: list[int] = []
    on_done = Server._on_done

    async def give_up_once(self: Server, done: Any) -> None:
        if abandoned:
            await on_done(self, done)
            return
        abandoned.append(done.connect_key)
        assert self._handshake is not None
        self._handshake.abandon(done.connect_key)
        await self._free_pending(self._pending.pop(done.connect_key))

    monkeypatch.setattr(Server, "_on_done", give_up_once)
    async with running_server(server_config(aeron_dir, port)) as server:
        client = Client(client_config(transport, aeron_dir, client_dir, handshake_timeout=0.2, connect_timeout=10.0))
        try:
            conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            assert not conn.is_closed
            assert len(abandoned) == 1
            assert server.handshake_stats.unknown >= 2  # the DONEs resent for the abandoned connect key
            await wait_until(lambda: len(server.connections) == 1, 5)
            assert await conn.ping() > 0
        finally:
            await client.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_raw_handshake_completes_and_a_rejection_is_sealed(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """The handshake driven by hand reaches a live connection; a mismatching one gets an authenticated REJECT."""
    connected: list[Connection] = []
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        raw_driver(aeron_dir if transport == "ipc" else None) as aeron,
    ):
        server.on_connect(connected.append)
        peer = await RawHandshakePeer.open(aeron, transport, port)
        try:
            wrong = peer.handshake(registration_hash=os.urandom(32))
            await peer.send(wrong.hello(time.time_ns()))
            answer = await peer.receive(wrong)
            assert isinstance(answer, Rejected)
            assert answer.reason is RejectReason.SERIALIZATION_MISMATCH
            assert answer.authenticated

            handshake = peer.handshake()
            await peer.send(handshake.hello(time.time_ns()))
            accepted = await peer.receive(handshake)
            assert isinstance(accepted, Accepted)
            grant = accepted.grant
            assert grant["ipc"] is (transport == "ipc")
            # Open the client's side of the connection as the grant says, then finish with DONE.
            session_in, session_out = int(grant["session_in"]), int(grant["session_out"])
            stream_in, stream_out = int(grant["stream_in"]), int(grant["stream_out"])
            if transport == "ipc":
                pub_channel = f"aeron:ipc?session-id={session_in}|term-length={int(grant['term_length'])}"
                sub_channel = f"aeron:ipc?session-id={session_out}"
            else:
                # The granted term length: the server's subscription takes no longer term than it granted.
                term = int(grant["term_length"])
                pub_channel = f"aeron:udp?endpoint=127.0.0.1:{port}|session-id={session_in}|term-length={term}"
                sub_channel = (
                    f"aeron:udp?endpoint=127.0.0.1:{peer.reply_port}|control=127.0.0.1:{port + 1}"
                    f"|session-id={session_out}"
                )
            sub = await aeron.add_subscription_async(sub_channel, stream_out)
            pub = await aeron.add_exclusive_publication_async(pub_channel, stream_in)
            try:
                await wait_until(lambda: pub.is_connected, 5, what="our data stream connected")
                # The server published its stream with the grant; over UDP our driver kept its SETUP until we
                # subscribed, so the stream is there before DONE.
                await wait_until(lambda: sub.images, 5, what="the server's data stream")
                await peer.send(handshake.done())
                assert (await peer.receive(handshake)).connection_id == grant["connection_id"]  # type: ignore[attr-defined]
                await wait_until(lambda: connected, 5, what="server on_connect")
                assert connected[0].id == grant["connection_id"]
                assert server.handshake_stats.spoofed == 0
            finally:
                await pub.close_async()
                await sub.close_async()
            # The peer vanished without a Disconnect: the server notices its stream ended.
            await wait_until(lambda: connected[0].is_closed, 15, what="the vanished peer dropped")
            assert connected[0].lost
        finally:
            await peer.close()


def test_client_handshake_helper_matches_the_end_points() -> None:
    """The raw peers above speak for a client with the test classes: their hash must equal a real client's."""
    from support.endpoints import registration_hash

    client = Client(client_config("ipc", Path("/nonexistent"), Path("/nonexistent")))
    assert client.config.serialization.registration_hash == registration_hash()
    assert ClientHandshake(registration_hash=registration_hash(), reply={}).state == "new"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_old_and_new_handshake_versions_refuse_each_other_with_a_typed_reason(
    transport: str, aeron_dir: Path, port: int
) -> None:
    """A newer client, and a version-1 client (its HELLO as version 1 laid it out), get VERSION_MISMATCH at once,
    unsealed (neither end can speak the other's cryptography) and in the layout version 1 reads."""
    import msgpack  # type: ignore[import-untyped]

    async with (
        running_server(server_config(aeron_dir, port)) as server,
        raw_driver(aeron_dir if transport == "ipc" else None) as aeron,
    ):
        peer = await RawHandshakePeer.open(aeron, transport, port)
        try:
            handshake = peer.handshake(protocol_version=PROTOCOL_VERSION + 1)
            await peer.send(handshake.hello(time.time_ns()))
            answer = await peer.receive(handshake)
            assert isinstance(answer, Rejected)
            assert answer.reason is RejectReason.VERSION_MISMATCH
            assert not answer.authenticated
            assert f"version {PROTOCOL_VERSION + 1}" in answer.text

            reply = {} if transport == "ipc" else {"port": peer.reply_port}
            old_hello = [
                MAGIC,
                Kind.HELLO,
                1,
                4242,
                os.urandom(32),
                registration_hash(),
                reply,
                "",
                time.time_ns() // 10**6,
            ]
            await peer.send(msgpack.packb(old_hello))
            seen: list[list[object]] = []

            def on_fragment(payload: memoryview, header: object) -> None:
                fields = msgpack.unpackb(bytes(payload))
                if fields[2] == 4242:
                    seen.append(fields)

            await wait_until(lambda: peer.reply.poll(on_fragment, 16) >= 0 and seen, 5, what="the old client's answer")
            assert seen[0][:6] == [MAGIC, Kind.REJECT, 4242, None, None, None]
            assert seen[0][6] == RejectReason.VERSION_MISMATCH
            assert server._pending == {}
            assert server._session_ids.live_count == 0
            assert server.connections == []
        finally:
            await peer.close()


async def test_many_clients_of_one_host_at_once_are_not_turned_away_as_a_flood(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """More clients of one address connecting at once than ``max_pending_per_source``: the newest wait (their
    HELLOs dropped as ``overloaded``, asked again) instead of evicting that address's handshakes under way, so
    every one connects and none is told SERVER_BUSY."""
    config = server_config(aeron_dir, port, max_pending_per_source=3, handshake_timeout=1.0)
    async with running_server(config) as server:
        clients = [
            Client(client_config("udp", aeron_dir, client_dir, handshake_timeout=1.0, connect_timeout=30.0))
            for _ in range(9)
        ]
        try:
            async with asyncio.timeout(60):
                outcomes = await asyncio.gather(
                    *(c.connect("127.0.0.1", port) for c in clients), return_exceptions=True
                )
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            assert failed == [], failed[:3]
            await wait_until(lambda: len(server.connections) == 9, 10, what="the server holding all nine")
            assert server.rejections[RejectReason.SERVER_BUSY] == 0
            assert server.handshake_stats.evicted == 0
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
