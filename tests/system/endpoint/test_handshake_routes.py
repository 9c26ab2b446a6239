"""Handshake routes shared by the clients of one event loop: one route per server, drained, reused, closed.

Real drivers: a server with its embedded driver, clients over UDP with a driver of their own (one directory
shared by the clients of the test, as the clients of one process share one driver) or over IPC on the server's.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

import endpoint.client as client_module
import endpoint.handshake.routes as routes_module
from driver.cnc import CncFile
from driver.concurrent.counters import CountersReader
from driver.concurrent.system_counters import DriverSystemCounterId
from endpoint import Client, Connection, Server
from endpoint.handshake.protocol import CookieReceived
from endpoint.handshake.routes import LINGER_NS, HandshakeRoutes, HandshakeSlots
from endpoint.poller import LoopPoller
from support.endpoints import (
    RawHandshakePeer,
    client_config,
    connected_client,
    distinct_free_udp_ports,
    free_udp_port,
    raw_driver,
    running_server,
    server_config,
    server_end,
    wait_until,
)
from support.logged_process import LoggedProcess


def _routes() -> HandshakeRoutes:
    return LoopPoller.for_running_loop().routes


def _keep_routes_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routes that served a client alone linger whole, as a route other clients of the loop may use does (they
    give back their publications at once)."""
    monkeypatch.setattr(HandshakeRoutes, "_retire", lambda self, route: None)


async def test_a_loops_clients_connecting_at_once_take_turns_in_its_handshake_slots(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """More clients than the loop's slots all connect; never more handshakes in flight than the slots, the rest
    counted as having waited for one; the slots are all free again afterwards."""
    count, limit = 14, 4
    slots = _routes().slots = HandshakeSlots(limit)
    async with running_server(server_config(aeron_dir, port)) as server:
        clients = [Client(client_config("udp", aeron_dir, client_dir)) for _ in range(count)]
        try:
            async with asyncio.timeout(60):
                await asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients))
                await wait_until(lambda: len(server.connections) == count, 10, what="every connection on the server")
            assert slots.most == limit
            assert slots.waited >= count - limit
            assert slots.in_flight == 0
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def test_handshake_slots_refuse_a_limit_below_one() -> None:
    with pytest.raises(ValueError):
        HandshakeSlots(0)


async def test_udp_clients_on_one_loop_share_one_route_and_the_server_one_answer_route(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    count = 20
    async with running_server(server_config(aeron_dir, port)) as server:
        clients = [Client(client_config("udp", aeron_dir, client_dir)) for _ in range(count)]
        try:
            async with asyncio.timeout(60):
                conns: list[Connection] = await asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients))
                assert not any(c.is_ipc for c in conns)
                await wait_until(lambda: len(server.connections) == count, 10, what="every connection on the server")
                routes = _routes().polled
                assert len(routes) == 1
                route = routes[0]
                assert route.users == 0
                assert route.local is not None
                # Every connection receives on the route's port; the server answered all of them on one route.
                assert {c.remote_address for c in server.connections} == {f"127.0.0.1:{route.local[1]}"}
                assert len(server._answer_routes) == 1
                assert server._udp_handshake is not None
                assert len(server._udp_handshake.images) == 1
                # Still a connection each: messages reach the right one.
                got: dict[int, list[int]] = {}
                server.on_message(int, lambda conn, value: got.setdefault(conn.id, []).append(value))
                for i, conn in enumerate(conns):
                    await conn.send(i)
                await wait_until(lambda: sum(map(len, got.values())) == count, 10, what="a message per client")
                assert {conn.id: [i] for i, conn in enumerate(conns)} == got
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        # The last client on the loop closed its driver's routes with it.
        assert _routes().polled == ()
        assert route.publication.is_closed
        assert route.reply.is_closed


async def test_a_route_is_reused_by_the_next_connect_and_closed_after_its_linger(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _keep_routes_whole(monkeypatch)  # as when the loop has other clients (see the test after this one)
    async with (
        running_server(server_config(aeron_dir, port)),
        connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, first),
    ):
        (route,) = _routes().polled
        await first.close("again")
        second = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
        assert _routes().polled == (route,)
        assert second.id != first.id
        _routes().tick(route.idle_since_ns + LINGER_NS - 1)
        assert _routes().polled == (route,)
        _routes().tick(route.idle_since_ns + LINGER_NS)
        assert _routes().polled == ()
        await wait_until(lambda: route.publication.is_closed and route.reply.is_closed, 5, what="route closed")
        # The connection made through it lives on (its subscription keeps the port).
        assert not second.is_closed
        assert await second.ping() > 0


async def test_the_route_of_a_loops_only_client_gives_back_its_publication_as_its_handshake_ends(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """A player's process: nobody else on the loop will connect through the route soon, so its place on the
    server's handshake stream is given back at once (the answer subscription closes after the linger) and its
    reconnect takes a fresh route. A second client of the same driver on the loop keeps the route whole."""
    async with running_server(server_config(aeron_dir, port)) as server:
        handshake = server._udp_handshake
        assert handshake is not None
        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, first):
            (route,) = _routes().polled
            assert route.broken
            assert not route.usable
            await wait_until(lambda: route.publication.is_closed, 10, what="the route's publication closed")
            await wait_until(lambda: not handshake.images, 10, what="its handshake image ended")
            await first.close("again")
            second = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            assert route not in _routes().polled
            assert await second.ping() > 0
            async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, third):
                (shared,) = [r for r in _routes().polled if r.usable]
                assert not shared.broken
                assert not shared.publication.is_closed
                await wait_until(lambda: len(handshake.images) == 1, 10, what="only the kept route's image")
                assert await third.ping() > 0


async def test_an_idle_route_to_a_server_that_closed_is_not_reused(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server closes gracefully while the client's route to it idles: its driver ends the answer stream on the
    way out (an end-of-stream heartbeat), so the client knows the route is spent before it sends anything, and
    the next connect (another server on the port) takes a fresh route at once, with no probe."""
    monkeypatch.setattr(routes_module, "LINGER_NS", 600 * 1_000_000_000)  # the old route idles, whatever the pace
    monkeypatch.setattr(client_module, "_REUSED_ROUTE_PROBE_S", 60.0)  # a probe would outlast the connect below
    _keep_routes_whole(monkeypatch)  # as when the loop has other clients
    client = Client(client_config("udp", aeron_dir, client_dir, handshake_timeout=5.0, connect_timeout=30.0))
    try:
        async with running_server(server_config(aeron_dir, port)):
            first = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            (old,) = _routes().polled
            await first.close("again")
        await wait_until(lambda: not old.usable, 5, what="the old route known spent")
        async with running_server(server_config(aeron_dir, port)) as server:
            second = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            (new,) = _routes().polled
            assert new is not old
            assert old.broken
            assert new.local != old.local
            assert {c.remote_address for c in server.connections} == {f"127.0.0.1:{new.local[1]}"}
            assert await second.ping() > 0
    finally:
        await client.close()


async def test_an_idle_route_to_a_killed_server_gives_way_to_a_fresh_one_after_one_probe(
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    monkeypatch: pytest.MonkeyPatch,
    start_server: Callable[..., LoggedProcess],
) -> None:
    """A server is SIGKILLed (no end of stream) and another binds its port while the client's route to it idles.
    The client's driver still holds the old server's answer image of that route's session, which takes the new
    server's answers (their terms are not its own: dropped) until it times out; three HELLOs on that route (here
    15 s) would go unanswered. The reused route is given up after its first HELLO's short probe, and a fresh
    route (another session) connects."""
    monkeypatch.setattr(routes_module, "LINGER_NS", 600 * 1_000_000_000)  # the old route idles, whatever the pace
    _keep_routes_whole(monkeypatch)  # as when the loop has other clients
    killed_dir = aeron_dir.parent / f"{aeron_dir.name}-killed"
    client = Client(client_config("udp", aeron_dir, client_dir, handshake_timeout=5.0, connect_timeout=30.0))
    try:
        killed = start_server(port, killed_dir)
        await wait_until(partial(killed.has, "serving "), 30, what="the first server to serve")
        first = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
        (old,) = _routes().polled
        await first.close("again")
        killed.kill()
        async with running_server(server_config(aeron_dir, port)) as server:
            assert _routes().polled == (old,)
            assert old.usable  # nothing told the client: the image lingers, not ended
            assert old.unproven
            assert old.reply.image_count == 1
            started = time.monotonic()
            second = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            took = time.monotonic() - started
            (new,) = _routes().polled
            assert new is not old
            assert old.broken
            assert new.publication.session_id != old.publication.session_id
            assert new.local != old.local
            # One probe, not three handshake timeouts (a generous bound: 15 s if the old route were kept).
            assert took < 5.0, f"the second connect took {took:.1f} s"
            await wait_until(lambda: old.publication.is_closed and old.reply.is_closed, 5, what="old route closed")
            assert {c.remote_address for c in server.connections} == {f"127.0.0.1:{new.local[1]}"}
            assert await second.ping() > 0
    finally:
        await client.close()
        shutil.rmtree(killed_dir, ignore_errors=True)


async def test_a_client_with_a_fixed_port_reconnects_after_its_route_closed(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its new route subscribes on the same port while the server still keeps the answer route of the old one;
    that old publication, which the client's driver now ignores for a while, must not be reused."""
    _keep_routes_whole(monkeypatch)  # each route stays whole until the test ticks it
    local_port = free_udp_port()
    async with running_server(server_config(aeron_dir, port)) as server:
        client = Client(client_config("udp", aeron_dir, client_dir, local_port=local_port, connect_timeout=6.0))
        try:
            answer_routes: list[tuple[str, int]] = []
            for _ in range(3):
                conn = await client.connect("127.0.0.1", port)
                answer_routes += [key for key in server._answer_routes if key not in answer_routes]
                await conn.close("again")
                (route,) = _routes().polled
                _routes().tick(route.idle_since_ns + LINGER_NS)
                await wait_until(lambda: route.reply.is_closed, 5, what="the route closed")  # noqa: B023
            # One answer route per client route (its session), though all three answered the same address and port.
            assert len(answer_routes) == 3
            assert {key[0] for key in answer_routes} == {"127.0.0.1"}
        finally:
            await client.close()


async def test_a_route_on_a_clients_own_port_gives_back_its_publication_as_its_handshake_ends(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It serves that client alone: its image on the server's handshake stream, one of the few its address may
    hold (``max_routes_per_source``), is let go at once, not a linger later. Six clients of one address connect
    together through a server that lets the address hold two routes at once; the connections live on."""
    monkeypatch.setattr(routes_module, "LINGER_NS", 600 * 10**9)  # the rest of each route waits for the test
    config = server_config(aeron_dir, port, max_routes_per_source=2)
    async with running_server(config) as server:
        handshake = server._udp_handshake
        assert handshake is not None
        clients = [
            Client(client_config("udp", aeron_dir, client_dir, local_port=local_port, connect_timeout=30.0))
            for local_port in distinct_free_udp_ports(6)
        ]
        try:
            connections = await asyncio.wait_for(asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients)), 60)
            # Every route gave back its publication as its handshake ended, and is not handed out again; the
            # answer subscriptions wait for the linger.
            routes = _routes().polled
            assert len(routes) == 6
            assert all(route.broken and not route.usable for route in routes)
            await wait_until(lambda: all(r.publication.is_closed for r in routes), 10, what="publications closed")
            await wait_until(lambda: not handshake.images, 10, what="the handshake images ended")
            assert not any(route.reply.is_closed for route in routes)
            _routes().tick(max(route.idle_since_ns for route in routes) + routes_module.LINGER_NS)
            assert _routes().polled == ()
            await wait_until(lambda: all(r.reply.is_closed for r in routes), 10, what="the routes closed")
            for conn in connections:
                assert await conn.ping() > 0
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def test_the_server_lets_go_of_an_answer_route_once_its_client_route_is_gone(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Kept for late retries (here for a minute), but nobody can ask again once the client's route has closed."""
    async with (
        running_server(server_config(aeron_dir, port, handshake_timeout=30.0)) as server,
        connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, conn),
    ):
        assert len(server._finished_reply) == 1
        ((reply, lease, _),) = server._finished_reply.values()
        assert lease is not None
        (route,) = _routes().polled
        _routes().tick(route.idle_since_ns + LINGER_NS)
        await wait_until(lambda: not server._finished_reply, 10, what="the kept answer route let go")
        await wait_until(lambda: reply.is_closed, 5, what="the answer publication closed")
        assert server._answer_routes == {}
        assert await conn.ping() > 0


async def test_an_answer_port_taken_before_the_driver_binds_it_is_skipped(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        taken = squatter.getsockname()[1]
        picks: list[int] = []

        def pick(host: str) -> int:
            chosen = taken if not picks else original(host)
            picks.append(chosen)
            return chosen

        original = client_module.free_udp_port
        monkeypatch.setattr(client_module, "free_udp_port", pick)
        async with (
            running_server(server_config(aeron_dir, port)),
            connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, conn),
        ):
            assert picks == [taken, picks[1]]
            (route,) = _routes().polled
            assert route.local == ("127.0.0.1", picks[1])
            assert await conn.ping() > 0


async def test_an_ipc_route_is_drained_while_nobody_waits_on_it(aeron_dir: Path, port: int) -> None:
    """The server's IPC answer stream is shared by every client process; an undrained reader would stop it."""
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config("ipc", aeron_dir, aeron_dir), port),
    ):
        (route,) = _routes().polled
        assert route.is_ipc
        answers = server._ipc_reply
        assert answers is not None
        before = route.unclaimed
        packet = bytes(1000)
        # Four times the stream's window (half its 64 KiB term) of answers no handshake waits for.
        sent = 0
        deadline = time.monotonic() + 20
        while sent < 128 and time.monotonic() < deadline:
            if answers.offer(packet) > 0:
                sent += 1
            else:
                await asyncio.sleep(0.001)
        assert sent == 128, f"the answer stream stalled after {sent} packets"
        await wait_until(lambda: route.unclaimed - before == 128, 5, what="every answer read")


async def test_a_client_with_a_local_address_sends_from_it_too(aeron_dir: Path, client_dir: Path, port: int) -> None:
    """The server answers only the address a client's HELLO came from: a client bound to a local address of its
    choosing (a loopback alias here) sends from it as well, and is known to the server by it."""
    async with running_server(server_config(aeron_dir, port)) as server:
        client = Client(client_config("udp", aeron_dir, client_dir, local_address="127.0.0.5"))
        try:
            conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            assert await conn.ping() > 0
            at_server = await server_end(server, conn)
            assert at_server.remote_address.startswith("127.0.0.5:")
        finally:
            await client.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_a_server_on_every_ipv6_address_answers_ipv4_and_ipv6_clients(
    aeron_dir: Path, client_dir: Path, port: int, host: str
) -> None:
    """Listening on ``::`` (both families on Linux): an IPv4 client is seen as ``::ffff:a.b.c.d``, and the server's
    streams admit it at that address as the kernel writes it."""
    async with running_server(server_config(aeron_dir, port, listen_address="::")) as server:
        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            conn = await asyncio.wait_for(client.connect(host, port), 15)
            assert await conn.ping() > 0
            at_server = await server_end(server, conn)
            assert at_server.remote_address.rpartition(":")[0] in ("::ffff:127.0.0.1", "::1")
        finally:
            await client.close()


async def test_answer_routes_per_address_stay_counted_and_capped_as_routes_come_and_go(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """The server counts its answer routes per address as it opens and closes them (the per-source cap is checked
    on that count, not by walking every route): clients on routes of their own beyond the cap still connect
    (an idle route gives way), the count always matches the routes held, and all of it is let go at the end."""
    cap = 2
    config = server_config(aeron_dir, port, max_answer_routes_per_source=cap, handshake_timeout=1.0)

    def counted(server: Server) -> dict[str, int]:
        held: dict[str, int] = {}
        for route in server._answer_routes.values():
            held[route.address] = held.get(route.address, 0) + 1
        return held

    async with running_server(config) as server:
        # The handshake images of one address are held to the same cap (and to its pending handshakes' cap).
        assert server._udp_handshake is not None
        assert f"max-images-per-source={cap}|" in server._udp_handshake.channel
        clients = [
            Client(client_config("udp", aeron_dir, client_dir, local_port=local_port, connect_timeout=10.0))
            for local_port in distinct_free_udp_ports(cap + 2)
        ]
        try:
            for client in clients:
                conn = await client.connect("127.0.0.1", port)
                assert server._routes_from == counted(server)
                assert len(server._answer_routes) <= cap
                assert await conn.ping() > 0
        finally:
            for client in clients:
                await client.close()
        for route in list(_routes().polled):
            _routes().tick(route.idle_since_ns + LINGER_NS)
        await wait_until(lambda: server._answer_routes == {}, 15, what="every answer route let go")
        assert server._routes_from == {}


async def test_the_servers_look_at_handshake_images_follows_routes_as_they_come_and_go(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past a few handshake images the server finds those with a packet waiting in one native look, which grows
    by each route that comes and is made again when routes go: clients on routes of their own, one after another
    (each a new image), then all their routes closed, then as many new ones, are each answered at once."""
    _keep_routes_whole(monkeypatch)
    monkeypatch.setattr(routes_module, "LINGER_NS", 600 * 10**9)
    count = 6
    async with running_server(server_config(aeron_dir, port)) as server:
        handshake = server._udp_handshake
        assert handshake is not None
        clients: list[Client] = []
        try:
            for round_ in range(2):
                for local_port in distinct_free_udp_ports(count):
                    client = Client(client_config("udp", aeron_dir, client_dir, local_port=local_port))
                    clients.append(client)
                    conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 30)
                    assert await conn.ping() > 0
                images = handshake.images
                assert len(images) == count
                watched, watch = server._image_watches[False]
                assert watched is images, f"round {round_}"
                assert len(watch) == count, f"round {round_}"
                routes = _routes().polled
                _routes().tick(max(route.idle_since_ns for route in routes) + routes_module.LINGER_NS)
                await wait_until(lambda: not handshake.images, 10, what="the handshake images ended")
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def _images_refused_per_source(aeron_dir: Path) -> int:
    cnc = CncFile.map_existing(aeron_dir, timeout_s=5.0)
    try:
        reader = CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
        ids: dict[str, int] = {}
        reader.for_each(lambda counter_id, type_id, key, label: ids.setdefault(label, counter_id))
        return reader.get_counter_value(ids[DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT.label])
    finally:
        cnc.close()


async def test_one_host_holds_more_routes_at_once_than_the_drivers_default_per_source(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients on routes of their own from one address (a host of many client processes, a NAT) all hold their
    routes at once past the driver's default of 64 images per source when the server allows that address more
    (``max_routes_per_source``): its handshake subscription asks for as many, so none waits in silence for
    another's route to close. By default it asks for 64: more lets a few flooding addresses fill the stream."""
    count = 72
    _keep_routes_whole(monkeypatch)
    monkeypatch.setattr(routes_module, "LINGER_NS", 600 * 10**9)  # every route stays open to the end
    async with running_server(server_config(aeron_dir, port)) as server:
        assert server._udp_handshake is not None
        assert "max-images-per-source=64|" in server._udp_handshake.channel
    config = server_config(aeron_dir, port, connect_timeout=30.0, max_routes_per_source=count + 8)
    async with running_server(config) as server:
        clients = [
            Client(client_config("udp", aeron_dir, client_dir, local_port=local_port, connect_timeout=30.0))
            for local_port in distinct_free_udp_ports(count)
        ]
        try:
            async with asyncio.timeout(90):
                await asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients))
            assert server._udp_handshake is not None
            assert len(server._udp_handshake.images) >= count  # (a retried connect's ended route may linger)
            assert _images_refused_per_source(aeron_dir) == 0
            assert f"max-images-per-source={count + 8}|" in server._udp_handshake.channel
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def test_a_storm_on_one_route_gets_every_cookie_through_its_back_pressure(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """More clients on one route than its window holds HELLOs (about 55 of 64 KiB terms): their cookies and the
    HELLOs answering them wait for room instead of being dropped for a resend seconds later; all connect, no
    answer went unsent, and the waits' bookkeeping is back to nothing."""
    count = 120
    async with running_server(server_config(aeron_dir, port)) as server:
        clients = [Client(client_config("udp", aeron_dir, client_dir, connect_timeout=60.0)) for _ in range(count)]
        try:
            async with asyncio.timeout(120):
                await asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients))
                await wait_until(lambda: len(server.connections) == count, 30, what="every connection on the server")
            assert server.handshake_stats.unanswered == 0, server.handshake_stats
            assert server._cookies_waiting == 0
            assert all(route.cookies_waiting == 0 for route in server._answer_routes.values())
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def test_cookies_waiting_for_room_are_bounded_per_route(aeron_dir: Path, client_dir: Path, port: int) -> None:
    """A route already holding its share of waiting cookies gets no more: the next one is dropped and counted
    (a client that never reads holds up only its own cookies)."""
    import endpoint.server as server_module

    async with running_server(server_config(aeron_dir, port)) as server:
        client = Client(client_config("udp", aeron_dir, client_dir))
        try:
            async with asyncio.timeout(60):
                await client.connect("127.0.0.1", port)
            ((address, route_id), route) = next(iter(server._answer_routes.items()))
            publication = route.opening.result()
            route.cookies_waiting = server_module._COOKIES_WAITING_PER_ROUTE
            before = server.handshake_stats.unanswered
            server._cookie_when_room(publication, b"cookie", address, route_id)
            assert server.handshake_stats.unanswered == before + 1
            assert server._cookies_waiting == 0  # nothing was made to wait
            route.cookies_waiting = 0
        finally:
            await client.close()


async def test_hellos_that_come_while_their_answer_route_connects_wait_for_it_together(
    aeron_dir: Path, port: int
) -> None:
    """A client route whose answers cannot arrive (its answer subscription is gone): the server opens one answer
    route for it and its cookies wait for it together, however many HELLOs come meanwhile (resends, or other
    clients of that route); a route on its way is not closed to make room for others; when it does not get there
    in time, every cookie it held is counted unanswered, and the route is kept (not opened again) until its client
    route is gone."""
    async with (
        running_server(server_config(aeron_dir, port, handshake_timeout=1.0)) as server,
        raw_driver(None) as aeron,
    ):
        peer = await RawHandshakePeer.open(aeron, "udp", port)
        try:
            await peer.reply.close_async()  # no status messages: the server's answer route never connects
            for _ in range(3):
                await peer.send(peer.handshake().hello(time.time_ns()))
            await wait_until(lambda: server.handshake_stats.challenged == 3, 10, what="three HELLOs challenged")
            (route,) = server._answer_routes.values()
            assert route.bounces is not None
            assert len(route.bounces) == server._bouncing == 3
            assert not server._evict_route([route])
            await wait_until(lambda: server._bouncing == 0, 10, what="the cookies given up")
            assert server.handshake_stats.unanswered == 3
            # The route stays while its client route lives: a HELLO resent now waits for the same one (a route
            # opened again would clash with its session).
            assert route.pinned
            assert list(server._answer_routes.values()) == [route]
            await peer.send(peer.handshake().hello(time.time_ns()))
            await wait_until(lambda: route.bounces is not None, 10, what="the next cookie waiting for the route")
            assert list(server._answer_routes.values()) == [route]
            await wait_until(lambda: server._bouncing == 0, 10, what="the next cookie given up")
            assert server.handshake_stats.unanswered == 4
            await peer.publication.close_async()
            await wait_until(lambda: server._answer_routes == {}, 15, what="the route let go with its client route")
        finally:
            if not peer.publication.is_closed:
                await peer.publication.close_async()


async def test_room_is_made_by_closing_a_route_whose_client_got_no_cookie_lately(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the answer-route cap the oldest idle route gives way, unless a cookie went out on it within a handshake
    timeout (its client is on its way back on it) and a quieter one is there: that one goes instead."""
    _keep_routes_whole(monkeypatch)  # the clients' routes stay, and so do the server's answer routes
    async with running_server(server_config(aeron_dir, port)) as server:
        clients = [
            Client(client_config("udp", aeron_dir, client_dir, local_port=local_port, connect_timeout=10.0))
            for local_port in distinct_free_udp_ports(2)
        ]
        try:
            for client in clients:
                await client.connect("127.0.0.1", port)
            older, newer = server._answer_routes.values()  # oldest first; both idle, pinned for their clients
            older.bounced_ns = time.monotonic_ns()  # as if its client had just been sent a cookie
            newer.bounced_ns = 0
            assert server._evict_route([older, newer])
            assert list(server._answer_routes.values()) == [older]
            assert server._evict_route([older])  # the only idle one gives way all the same
            assert server._answer_routes == {}
        finally:
            await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)


async def test_an_answer_route_let_go_while_its_client_route_lives_is_taken_up_again(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer route that gave way at the cap while its client's route lives (a storm's busy-refused client comes
    back on it) stays open for a handshake timeout, and that route asking again gets the same publication back: a
    new one would name the session the driver still holds for the closing one (refused while it drains), and every
    handshake through the route would fail until the driver let it go."""
    _keep_routes_whole(monkeypatch)  # the client's route stays (its session too), as a busy-refused client's does
    async with running_server(server_config(aeron_dir, port)) as server:
        errors: list[BaseException] = []
        server.on_error(lambda conn, exc: errors.append(exc))
        (local_port,) = distinct_free_udp_ports(1)
        client = Client(client_config("udp", aeron_dir, client_dir, local_port=local_port, connect_timeout=10.0))
        try:
            first = await client.connect("127.0.0.1", port)
            (route,) = server._answer_routes.values()
            publication = route.opening.result()
            await first.close()
            assert server._evict_route([route])  # gives way at the cap, though its client route lives
            assert server._answer_routes == {}
            assert not publication.is_closed, "kept open for a while"
            async with asyncio.timeout(30):
                again = await client.connect("127.0.0.1", port)
            (taken_up,) = server._answer_routes.values()
            assert taken_up is route
            assert taken_up.opening.result() is publication
            assert not again.is_closed
            assert errors == []
        finally:
            await client.close()


async def test_a_client_route_whose_answer_route_we_closed_is_not_answered_until_the_driver_let_go_of_it(
    aeron_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that holds a cookie comes back on its route after the server closed that route's answer route (a
    storm's busy-refused client, past the route's parking): a new answer route would name the session the driver
    still holds for the closed one, be refused, and the connection's streams made beside it be thrown away, at
    every resend. It is not answered while the driver may hold the session (counted unanswered, nothing made, no
    error), and a new answer route is opened once it let go (here the driver lingers 0.2 s and the server allows for
    1 s)."""
    import endpoint.server as server_module

    monkeypatch.setenv("AERON_PUBLICATION_LINGER_TIMEOUT", str(200_000_000))
    monkeypatch.setattr(server_module, "_SESSION_HELD_NS", 1_000_000_000)
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        raw_driver(None) as aeron,
    ):
        errors: list[BaseException] = []
        server.on_error(lambda conn, exc: errors.append(exc))
        peer = await RawHandshakePeer.open(aeron, "udp", port)
        try:
            handshake = peer.handshake()
            await peer.send(handshake.hello(time.time_ns()))
            assert isinstance(await peer._receive_one(handshake, 10.0), CookieReceived)
            (route,) = server._answer_routes.values()
            assert server._evict_route([route])  # gives way at the cap (parked) ...
            server._close_routes_let_go(None)  # ... and its time is up: closed
            await wait_until(lambda: route.opening.result().is_closed, 5, what="the answer route closed")
            stats = server.handshake_stats
            unanswered, discarded = stats.unanswered, stats.discarded
            await peer.send(handshake.hello(time.time_ns()))  # the cookie's HELLO, on the same route
            await wait_until(lambda: stats.unanswered > unanswered, 5, what="the HELLO counted unanswered")
            assert stats.discarded == discarded  # nothing was made for it
            assert server._answer_routes == {}
            assert errors == []
            await asyncio.sleep(1.2)  # the driver let go of the session (0.2 s), and the server's allowance is over
            await peer.send(handshake.hello(time.time_ns()))
            # A new answer route, under the same session, opened without a clash (our raw subscription takes a
            # stream of that session again only a while after the old one went: a client takes a fresh route).
            await wait_until(
                lambda: (key := (route.address, route.route_id)) in server._answer_routes
                and server._answer_routes[key].opening.done(),
                5,
                what="a new answer route opened",
            )
            reopened = server._answer_routes[(route.address, route.route_id)]
            assert reopened is not route
            assert reopened.opening.exception() is None
            assert reopened.opening.result().session_id == route.opening.result().session_id
            assert errors == []
        finally:
            await peer.close()
