"""Clients' handshake routes, shared by every client on one event loop that talks to the same server.

A route is the publication to the server's handshake stream and the
subscription its answers come back on (over UDP on a local port, which the
connections made through the route then also receive on). The clients of one
process (bots, tests, load generators) then cost the server one handshake
image and one answer route rather than one each, and themselves one socket.
The loop's poller reads each route's answers once and hands every answer to
the handshake it names: every round while a handshake waits on the route, and
every route each tick (100 ms) otherwise, so a route is drained even while its
clients are busy elsewhere: over IPC the server's answer stream is shared by
every client process and advances only as fast as its slowest reader.

A route outlives its last handshake by ``LINGER_NS`` (the next connect, a
reconnect, reuses it, if the server answers it at once: see
:attr:`HandshakeRoute.unproven`) and is closed when the last client using its
driver on this loop closes. A route that served a client alone (a client on a
port of its own, ``local_port``, or the only client of its driver on the loop:
a player's process) gives back its publication as its handshake ends and
closes the rest after the linger; it is not reused. That publication is an
image on the server's handshake stream, where one address holds only so many at
once (the server's ``max_routes_per_source``): a host of many client processes
connecting together (a NAT, a load test) waited a linger per turn (400 clients
of one address: 53 connects a second, ~270 now), while the answer
subscription's close can wait for a storm to pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from driver.client.publication import Publication
from driver.client.subscription import Subscription
from endpoint.handshake.protocol import answer_key

__all__ = [
    "HANDSHAKES_IN_FLIGHT_MAX",
    "LINGER_NS",
    "HandshakeRoute",
    "HandshakeRoutes",
    "HandshakeSlots",
    "answer_session",
]

_log = logging.getLogger("endpoint")

LINGER_NS = 1_000_000_000
_SPIN_NS = 20_000_000
"""After a packet goes out, its answer usually comes within milliseconds: keep the poller spinning this long."""
_FRAGMENTS_PER_POLL = 64
HANDSHAKES_IN_FLIGHT_MAX = 128
"""Handshake attempts the clients of one event loop make at once; the others wait for a slot (within their
``connect_timeout``). A process of hundreds of clients connecting together otherwise held every handshake open
at once and could not send its DONEs in time: the server gave up on answered handshakes and built them again."""


def answer_session(route_session: int) -> int:
    """The session of a server's answers to the client route whose handshake publication has ``route_session``:
    the next one (int32), so that the two never clash on one driver (clients pick even route sessions)."""
    return ((route_session + 1 + (1 << 31)) & 0xFFFF_FFFF) - (1 << 31)


class HandshakeRoute:
    """One route's publication and answer subscription; answers go to ``expect``-ed connect keys."""

    def __init__(
        self,
        owner: object,
        is_ipc: bool,
        publication: Publication,
        reply: Subscription,
        local: tuple[str, int] | None,
        server: tuple[str, int],
        *,
        control: str | None = None,
    ) -> None:
        self.owner = owner
        """The shared driver whose client made the resources."""
        self.is_ipc = is_ipc
        self.publication = publication
        self.reply = reply
        self.local = local
        self.server = server
        self.control = control
        """UDP: the server's control address, where the status messages of our subscriptions on ``local`` go."""
        self.users = 0
        self.idle_since_ns = 0
        self.broken = False
        self.closing = False
        self.unclaimed = 0
        """Answers nobody here waited for (another process's, over IPC; a late duplicate)."""
        self.unproven = False
        """Idle since its last answer: the server behind it may have gone and come back since (a restart on the
        same port). Over UDP our driver still holds the old server's answer image of this route's session, which
        swallows a new server's answers (their terms are not that image's) until it times out, so a HELLO on such
        a route must be answered soon or the route given up (see the client's HELLO). Cleared by any answer."""
        self.answer_s = 0.0
        """How long the last HELLO through this route waited for its answer: the pace of this server and machine,
        which scales how soon a reused route is given up."""
        self.waiting: dict[int, Callable[[memoryview], None]] = {}
        """connect key -> what takes its answers; the poller reads a route every round only while this is not
        empty (and every route now and then)."""
        self.spin_until_ns = 0
        """Until when the poller keeps spinning for an answer (see :meth:`expect`)."""

    @property
    def usable(self) -> bool:
        return not (self.broken or self.publication.is_closed or self.reply.is_closed or self._answers_ended())

    def _answers_ended(self) -> bool:
        """The server's answer stream ended (it closed, or its driver stopped and said so): a new server on the
        same port would answer into that old image, so the route is not reused. A fresh one costs a few ms."""
        images = self.reply.images
        return bool(images) and all(image.is_end_of_stream for image in images)

    def expect(self, connect_key: int, on_answer: Callable[[memoryview], None]) -> None:
        """Hand answers naming ``connect_key`` to ``on_answer`` until :meth:`forget`; the poller spins a while."""
        self.waiting[connect_key] = on_answer
        self.spin_until_ns = time.monotonic_ns() + _SPIN_NS

    def forget(self, connect_key: int) -> None:
        self.waiting.pop(connect_key, None)

    def poll(self) -> int:
        """Answers read (up to a batch), each handed to the handshake it names."""
        return self.reply.poll(self._on_fragment, _FRAGMENTS_PER_POLL)

    def _on_fragment(self, payload: memoryview, header: Any) -> None:
        key = answer_key(payload)
        on_answer = self.waiting.get(key) if key is not None else None
        if on_answer is None:
            self.unclaimed += 1
        else:
            self.unproven = False
            on_answer(payload)

    async def close(self, *, publication_only: bool = False) -> None:
        for resource in (self.publication,) if publication_only else (self.publication, self.reply):
            try:
                await resource.close_async()
            except Exception as exc:  # the driver may be gone; nothing else to free
                _log.debug("closing %r failed: %s", resource, exc)


class HandshakeSlots:
    """At most ``limit`` handshake attempts at once on one event loop (its clients together), waiters served in
    turn; ``waited`` counts attempts that had to wait, ``most`` the most in flight seen."""

    def __init__(self, limit: int = HANDSHAKES_IN_FLIGHT_MAX) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.limit = limit
        self.in_flight = 0
        self.most = 0
        self.waited = 0
        self._semaphore = asyncio.Semaphore(limit)

    async def __aenter__(self) -> None:
        if self._semaphore.locked():
            self.waited += 1
        await self._semaphore.acquire()
        self.in_flight += 1
        if self.in_flight > self.most:
            self.most = self.in_flight

    async def __aexit__(self, *exc_info: object) -> None:
        self.in_flight -= 1
        self._semaphore.release()


class HandshakeRoutes:
    """The routes of one event loop by key; held, polled and aged by that loop's poller."""

    def __init__(self) -> None:
        self.slots = HandshakeSlots()
        """The loop's bound on handshake attempts in flight (:data:`HANDSHAKES_IN_FLIGHT_MAX`)."""
        self._opening: dict[Hashable, asyncio.Future[HandshakeRoute | None]] = {}
        self._routes: dict[Hashable, HandshakeRoute] = {}
        self.polled: tuple[HandshakeRoute, ...] = ()
        self.udp_only = True
        """No route of ``polled`` is over IPC (whose answers the server writes into a log, no datagram of ours)."""
        self._closing: set[asyncio.Task[None]] = set()

    async def acquire(
        self, key: Hashable, owner: object, open_route: Callable[[], Awaitable[HandshakeRoute | None]]
    ) -> HandshakeRoute | None:
        """The route for ``key``, opened by ``open_route`` unless one is open or opening (None: it could not be).

        Concurrent callers share one opening; each successful call is one use, ended by :meth:`release`.
        """
        route = self._routes.get(key)
        if route is not None and (not route.usable or route.owner is not owner):
            self._drop(route)
            route = None
        if route is None:
            opening = self._opening.get(key)
            if opening is None:
                opening = self._opening[key] = asyncio.ensure_future(open_route())
                opening.add_done_callback(lambda done: self._opened(key, done))
            route = await asyncio.shield(opening)
            if route is None or not route.usable:
                return None
        route.users += 1
        return route

    def _opened(self, key: Hashable, opening: asyncio.Future[HandshakeRoute | None]) -> None:
        if self._opening.get(key) is opening:
            del self._opening[key]
        if opening.cancelled() or opening.exception() is not None or opening.result() is None:
            return
        route = opening.result()
        assert route is not None
        route.idle_since_ns = time.monotonic_ns()
        self._routes[key] = route
        self._polled_changed()

    def release(self, route: HandshakeRoute, *, broken: bool = False, alone: bool = False) -> None:
        """One use of ``route`` ended; ``broken`` routes are not handed out again and are closed once unused.
        ``alone``: no other client on this loop may connect through it soon (see the module's docstring)."""
        route.users -= 1
        if broken:
            self._drop(route)
        elif route.users <= 0:
            route.idle_since_ns = time.monotonic_ns()
            route.unproven = True
            if route.broken:
                self._close(route)
            elif alone and not route.is_ipc:  # (an IPC route makes no image a source address is counted for)
                self._retire(route)

    def tick(self, now_ns: int) -> None:
        """Close routes unused for ``LINGER_NS``."""
        for route in self.polled:
            if route.users <= 0 and now_ns - route.idle_since_ns >= LINGER_NS:
                self._drop(route)

    def _retire(self, route: HandshakeRoute) -> None:
        """Close an unused route's publication (its image on the server) now, the rest after ``LINGER_NS``; it is
        not handed out again."""
        route.broken = True
        self._track(asyncio.get_running_loop().create_task(route.close(publication_only=True)))

    async def close_unused(self, owner: object) -> None:
        """Close ``owner``'s routes nobody uses (its last client on this loop is closing)."""
        for route in self.polled:
            if route.owner is owner and route.users <= 0:
                self._drop(route)
        if self._closing:
            await asyncio.wait(set(self._closing), timeout=5.0)

    def forget(self, owner: object) -> None:
        """``owner`` (a driver) failed: its routes went with it, nothing to close."""
        for key, route in list(self._routes.items()):
            if route.owner is owner:
                route.broken = True
                del self._routes[key]
        self._polled_changed()

    def _polled_changed(self) -> None:
        self.polled = tuple(self._routes.values())
        self.udp_only = not any(route.is_ipc for route in self.polled)

    def _drop(self, route: HandshakeRoute) -> None:
        route.broken = True
        for key, known in list(self._routes.items()):
            if known is route:
                del self._routes[key]
                self._polled_changed()
        if route.users <= 0:
            self._close(route)

    def _close(self, route: HandshakeRoute) -> None:
        if route.closing:
            return
        route.closing = True
        self._track(asyncio.get_running_loop().create_task(route.close()))

    def _track(self, task: asyncio.Task[None]) -> None:
        """Held until done (``close_unused`` waits for them)."""
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
