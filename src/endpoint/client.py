"""The client end point: connects to a server over IPC when it shares our driver, else over UDP.

Connecting: open a handshake publication to the server (IPC first when the
server is on this machine), send HELLO (Noise NX, or NK once the server's key
is pinned), repeat it with the cookie the server answers over UDP, and wait
for the sealed answer (resending HELLO after ``handshake_timeout``, each wait a quarter longer and jittered, so
clients that started together do not ask again together; a SERVER_BUSY answer says when to come back, and the
client does, with a fresh HELLO, within ``connect_timeout``). Create the
connection's publication and subscription from the granted ids, wait for both
to connect, send DONE and wait for DONE_ACK; then the connection is live,
``on_connect`` fires and (only now) the server's key is pinned. Answers that
are not sealed under this handshake are counted and ignored. Every wait is
bounded; the whole connect by ``connect_timeout``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import random
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from driver.client.aio import offer_async
from driver.client.publication import Publication
from driver.errors import RegistrationError
from endpoint.base import END_POINT_CLOSED, EndPoint
from endpoint.channels import (
    add_pair,
    bracket,
    data_channel,
    free_udp_port,
    is_local_host,
    local_address_towards,
    resolve,
    udp_channel,
    wait_connected,
    wait_image,
)
from endpoint.config import (
    HANDSHAKE_STREAM_ID,
    IPC_HANDSHAKE_STREAM_BASE,
    IPC_REPLY_STREAM_BASE,
    REPLY_STREAM_ID,
    ClientConfiguration,
)
from endpoint.connection.agenda import NEVER_NS
from endpoint.connection.buffered import Session
from endpoint.connection.session import SessionLog
from endpoint.connection.shell import Connection
from endpoint.errors import (
    BudgetExceededError,
    ClientError,
    ClientRejectedError,
    ClientTimeoutError,
    ConnectionClosedError,
    DriverUnavailableError,
    EndpointClosedError,
    ReconnectFailedError,
    RejectReason,
    SchemaMismatchError,
)
from endpoint.handshake.admission import RETRY_AFTER_KEY, busy_delay, resend_delay
from endpoint.handshake.keystore import KnownServers, default_config_dir, load_or_create_private_key
from endpoint.handshake.protocol import (
    Accepted,
    ClientHandshake,
    Completed,
    CookieReceived,
    HandshakeStats,
    Rejected,
    SessionOffer,
)
from endpoint.handshake.routes import HandshakeRoute, answer_session
from endpoint.reconnect import Reconnecting, ReconnectSchedule

__all__ = ["Client"]

_log = logging.getLogger("endpoint")

_IPC_PROBE_S = 0.25
"""How long an IPC handshake publication may take to find a local server before UDP is tried."""
_DONE_SENDS = 3
"""DONEs sent (every ``handshake_timeout``) before a connect starts over with a fresh HELLO."""
_HELLO_SENDS = 3
"""HELLOs one route sends unanswered before the next attempt opens a fresh route (another local port and session):
the server may have let go of this route's answers (restarted, or its caps made them give way), and our
subscription takes a stream of the same session again only a while after the previous one went."""
_REUSED_ROUTE_PROBE_S = 0.5
_REUSED_ROUTE_PROBE_FACTOR = 10
"""The first HELLO on a route reused after going idle waits this long (or this many times the route's last answer
took, if more; at most ``handshake_timeout``) for an answer before the route is given up for a fresh one: a live
server answers within milliseconds (half a second leaves room for a loaded machine), a restarted one cannot reach
the old route (see :attr:`HandshakeRoute.unproven`). A slow server costs one fresh route, no more: a fresh route is
never probed."""
_PORT_ATTEMPTS = 5
"""A free port picked for the answer route may be taken before the driver binds it: pick again this often."""

ReconnectingListener = TypeVar("ReconnectingListener", bound=Callable[[Reconnecting], Any])
ReconnectedListener = TypeVar("ReconnectedListener", bound=Callable[[Connection], Any])


class Client(EndPoint[ClientConfiguration]):
    """Connects to one server; ``connection`` is the live connection (one at a time)."""

    def __init__(self, config: ClientConfiguration | None = None) -> None:
        super().__init__(config if config is not None else ClientConfiguration())
        cfg = self.config
        self._known = KnownServers(
            (cfg.known_servers_path or default_config_dir() / "known_servers.json") if cfg.remember_servers else None
        )
        self.connection: Connection | None = None
        self.handshake_stats = HandshakeStats()
        self._hint: Rejected | None = None
        """Every handshake's counters added up: answers dropped as forged (``spoofed``), plain REJECTs ignored
        (``unsealed``), malformed ones, ..."""
        self._rng = random.Random()
        """Jitter for resends and returns after SERVER_BUSY (each client its own, so they spread)."""
        self._target: tuple[str, int] | None = None
        self._control_port = 0
        """The server's control port (UDP): our subscriptions' status messages go there."""
        self._connect_lock = asyncio.Lock()
        self._reconnect_task: asyncio.Task[None] | None = None
        self._lost_cause: BaseException | None = None
        """Why the current connection went away (the first ``on_reconnecting`` is told it)."""
        self._awaiting_reconnect = False
        """The connection went away and a reconnect is due or under way (``client.send`` then buffers)."""
        self._outbox: collections.deque[tuple[object, int]] = collections.deque()
        """Messages ``client.send`` kept while reconnecting, with their encoded sizes, oldest first."""
        self._outbox_bytes = 0
        self.buffered_refused = 0
        """``client.send`` calls refused while reconnecting because the buffer was full (BudgetExceededError)."""
        self.buffered_dropped = 0
        """Kept messages dropped undelivered: reconnecting gave up, or the client closed first."""
        self._session_key = load_or_create_private_key(cfg.session_key_path) if cfg.buffered_sessions else None
        self.session: Session | None = None
        """The buffered session (with ``buffered_sessions``, once a server granted one): the same object across
        reconnects; sends through it are kept until the server acknowledges them."""
        self._session_timeout = 0.0

    async def __aenter__(self) -> Client:
        return self

    async def start(self) -> Client:
        """Lease the driver (launching it when none runs) and start polling, ahead of the first :meth:`connect`,
        which otherwise does both first: a game on its loading screen, or a process about to connect many clients
        at once, pays the driver's start-up before the handshake instead of in it. Does nothing once started;
        DriverUnavailableError (after ``driver_timeout``) when no driver can be had."""
        self._ensure_open()
        async with self._connect_lock:
            await self._start()
        return self

    async def _start(self) -> None:
        if self._shared is None:
            await self._lease_driver()
        self._start_poller()

    # ------------------------------------------------------------------ reconnect listeners

    def on_reconnecting(self, listener: ReconnectingListener) -> ReconnectingListener:
        """``listener(reconnecting)``, sync or async, before each ``auto_reconnect`` attempt: a
        :class:`~endpoint.Reconnecting` with the attempt's number, the wait before it and the cause (why the
        previous attempt failed, or why the connection went away)."""
        return self.listeners.add_reconnecting(listener)

    def on_reconnected(self, listener: ReconnectedListener) -> ReconnectedListener:
        """``listener(connection)``, sync or async, with the new connection once ``auto_reconnect`` made one (after
        its ``on_connect`` listeners)."""
        return self.listeners.add_reconnected(listener)

    async def connect(
        self,
        host: str = "127.0.0.1",
        port: int = 2000,
        *,
        timeout: float | None = None,
        control_port: int | None = None,
    ) -> Connection:
        """Connect (IPC preferred for a server on this machine); ClientRejectedError or ClientTimeoutError if not.

        ``timeout`` (default ``connect_timeout``) bounds the handshake; leasing the
        driver first is bounded by ``driver_timeout`` (DriverUnavailableError).
        ``control_port``: the server's control port (UDP), where our status messages go so that the server
        learns where to send, through a NAT too; default ``port + 1`` (the server's default).
        """
        self._ensure_open()
        async with self._connect_lock:
            if self.connection is not None and not self.connection.is_closed:
                raise ClientError(f"already connected: {self.connection!r}; close it first")
            await self._start()
            self._target = (host, port)
            self._control_port = control_port if control_port is not None else port + 1
            budget = self.config.connect_timeout if timeout is None else timeout
            failures: list[BaseException] = []
            self._hint = None
            try:
                return await asyncio.wait_for(self._connect(host, port, failures), budget)
            except TimeoutError:
                last = f" (last attempt: {failures[-1]})" if failures else ""
                if self._hint is not None:
                    last += (
                        f" (ignored a plain rejection, which anyone on the path could have sent: "
                        f"{self._hint.reason.name}: {self._hint.text})"
                    )
                raise ClientTimeoutError(f"no server answered at {host}:{port} within {budget:g} s{last}") from None

    async def _connect(self, host: str, port: int, failures: list[BaseException]) -> Connection:
        """Attempts until one succeeds or is rejected; a step that times out starts a new attempt (the caller's
        budget ends them)."""
        ip = await resolve(host)
        while True:
            # One of the loop's bounded handshake slots per attempt (a storm of this process's clients goes
            # through in turns); the pause after a failed attempt is taken without it.
            async with self._routes.slots:
                route = await self._open_route(ip, port)
                try:
                    connection = await self._handshake(route, host, port)
                except (_Retry, TimeoutError, ConnectionError) as exc:
                    failures.append(exc)
                    # A fresh route (local port and session) for the next attempt: the server may have let go of
                    # this one's answers, and our subscription takes that session's stream again only a while later.
                    self._routes.release(route, broken=True)
                    connection = None
                except BaseException:
                    self._routes.release(route)
                    raise
                else:
                    self._routes.release(route, alone=self._route_alone())
            if connection is None:
                await asyncio.sleep(self._rng.uniform(0.05, 0.15))  # apart from the clients that failed with us
                continue
            self.connection = connection
            self._add_connection(connection)
            return connection

    def _route_alone(self) -> bool:
        """Nobody else on this loop may connect through our route soon: it is on our own port, or we are the loop's
        only client of our driver (see :mod:`endpoint.handshake.routes`)."""
        if self.config.local_port:
            return True
        shared = self._shared
        return not any(e is not self and isinstance(e, Client) and e._shared is shared for e in self._loop_endpoints())

    async def _open_route(self, ip: str, port: int) -> HandshakeRoute:
        """The loop's route to ``ip:port`` on our driver: IPC if a server there shares the driver, else UDP."""
        cfg = self.config
        shared = self._shared
        if shared is None:  # a driver restart began after this connect leased it
            raise DriverUnavailableError("the driver failed during the connect and is being restarted")
        aeron = shared.client()
        if cfg.enable_ipc and cfg.prefer_ipc and is_local_host(ip):

            async def open_ipc() -> HandshakeRoute | None:
                reply, publication = await add_pair(
                    aeron,
                    ("aeron:ipc", IPC_REPLY_STREAM_BASE + port),
                    ("aeron:ipc?term-length=65536", IPC_HANDSHAKE_STREAM_BASE + port),
                )
                route = HandshakeRoute(shared, True, publication, reply, None, (ip, port))
                try:
                    await wait_connected(publication, _IPC_PROBE_S, aeron)
                except TimeoutError:
                    await route.close()
                    return None
                return route

            route = await self._routes.acquire(("ipc", id(shared), port), shared, open_ipc)
            if route is not None:
                return route
        if not cfg.enable_udp:
            raise ClientError(f"no IPC server on port {port} shares this driver, and enable_udp is False")
        local_ip = cfg.local_address or local_address_towards(ip)
        control = f"{bracket(ip)}:{self._control_port or port + 1}"
        # With a local address of our own choosing, what we send leaves from it too: the server answers only the
        # address our HELLO came from, and our answers arrive at this one.
        interface = f"|interface={bracket(local_ip)}" if cfg.local_address else ""

        async def open_udp() -> HandshakeRoute:
            for attempt in range(_PORT_ATTEMPTS):
                local_port = cfg.local_port or free_udp_port(local_ip)
                # The route's session: our handshake publication has it (even), the server's answers to this route
                # the next one (odd: a server on our own driver answers without a clash). The answer subscription
                # names that, so its status messages (sent to the server's control port from the socket the
                # answers arrive on) tell the server where to answer, through a NAT too.
                session = -2 * (secrets.randbelow(1 << 30) + 1)
                try:
                    reply, publication = await add_pair(
                        aeron,
                        (
                            udp_channel(
                                f"{bracket(local_ip)}:{local_port}",
                                max_term_length=65536,
                                handshake=True,
                                control=control,
                                session_id=answer_session(session),
                            ),
                            REPLY_STREAM_ID,
                        ),
                        (
                            udp_channel(f"{bracket(ip)}:{port}", term_length=65536, session_id=session) + interface,
                            HANDSHAKE_STREAM_ID,
                        ),
                    )
                except RegistrationError as exc:
                    # Someone took the port between our pick and the driver's bind, or the session is taken here:
                    # pick again.
                    retry = "channel error" in exc.driver_message or "session-id" in exc.driver_message
                    if (
                        attempt + 1 == _PORT_ATTEMPTS
                        or not retry
                        or (cfg.local_port and "session-id" not in exc.driver_message)
                    ):
                        raise
                    continue
                return HandshakeRoute(
                    shared, False, publication, reply, (local_ip, local_port), (ip, port), control=control
                )
            raise AssertionError("unreachable")

        key = ("udp", id(shared), local_ip, cfg.local_port, ip, port, control)
        route = await self._routes.acquire(key, shared, open_udp)
        assert route is not None
        return route

    async def _handshake(self, route: HandshakeRoute, host: str, port: int) -> Connection:
        cfg = self.config
        address = f"{host}:{port}"
        stored = self._known.get(address)
        pinned = None if cfg.allow_server_key_change else stored
        step = cfg.handshake_timeout
        await wait_connected(route.publication, cfg.connect_timeout, self._shared.client() if self._shared else None)
        force_nx = False
        busy = 0
        packed = cfg.serialization.packed_schemas()
        # HELLO must travel as one frame: without the schemas, the server can only check the classes are equal.
        schema: bytes | None = packed if len(packed) < route.publication.max_payload_length else None
        while True:
            handshake = ClientHandshake(
                registration_hash=cfg.serialization.registration_hash,
                reply={} if route.is_ipc else {"port": route.local[1] if route.local else 0},
                tag=cfg.tag,
                expected_server_key=pinned,
                claimed_address="" if route.is_ipc else local_address_towards(route.server[0]),
                force_nx=force_nx,
                sealed=cfg.sealed,
                schema=schema,
            )
            if schema is not None and handshake.hello_length > route.publication.max_payload_length:
                schema = None  # they fit, but not with the rest of HELLO
                continue
            started = time.monotonic()
            try:
                answer = await self._exchange(
                    route,
                    handshake,
                    functools.partial(_hello_now, handshake),
                    step,
                    _HELLO_SENDS,
                    probe=_reuse_probe(route),
                )
            except BaseException:
                self._add_stats(handshake)
                raise
            route.answer_s = min(time.monotonic() - started, step)
            if (
                isinstance(answer, Rejected)
                and not answer.authenticated
                and answer.reason is RejectReason.SERVER_KEY_CHANGED
                and not force_nx
            ):
                # Said in plain text, so unproven: ask again with NX, which makes the server prove its key.
                force_nx = True
                continue
            if isinstance(answer, Rejected) and answer.authenticated and answer.reason is RejectReason.SERVER_BUSY:
                # The server made nothing for us yet: ask again (a fresh HELLO) when it says, spread apart from the
                # others it refused, until the connect's budget ends (ClientTimeoutError, as for no answer).
                self._add_stats(handshake)
                busy += 1
                after = (answer.detail or {}).get(RETRY_AFTER_KEY)
                await asyncio.sleep(busy_delay(after if type(after) is int else None, busy, step, self._rng))
                continue
            break
        if not isinstance(answer, Accepted):
            self._add_stats(handshake)
        if isinstance(answer, Rejected):
            if not answer.authenticated:
                _log.warning("unauthenticated rejection from %s: %s", address, answer.text)
            raise _rejected(answer)
        if not isinstance(answer, Accepted):
            raise _Retry()
        grant = answer.grant
        sealed = grant.get("sealed", False)
        if type(sealed) is not bool or (cfg.sealed and not sealed):
            self._add_stats(handshake)
            raise ClientError(f"the server at {address} did not grant the sealed connection asked for: {sealed!r}")
        connection = await self._open_connection(route, grant)
        offer = self._session_offer(grant)
        try:
            # A server that gave up on us after its answer (its stream found no subscriber in time, say) no longer
            # knows this connect key and drops our DONEs: after a few we start over with a fresh HELLO.
            done_packet = functools.partial(handshake.done, offer)
            done = await self._exchange(route, handshake, done_packet, step, _DONE_SENDS)
            if isinstance(done, Rejected):
                raise _rejected(done)
            if not isinstance(done, Completed):
                raise ClientError(f"handshake with {address} ended with {done!r}")
            if sealed:
                connection._seal_with(done.keys, client=True, inbound_session_id=int(grant["session_out"]))
            # Pinned only now: the server proved its key and finished the handshake (a pin is never written for
            # a handshake that went nowhere).
            if stored != answer.server_public:
                self._known.remember(address, answer.server_public)
            # Our stream connected while DONE travelled (the server waited for its image before answering), and
            # the server publishes to us once it has our DONE (we were subscribed by then).
            aeron = self._shared.client() if self._shared else None
            await wait_connected(connection._pub, cfg.handshake_timeout, aeron)
            await wait_image(connection._sub, cfg.handshake_timeout, aeron)
            if offer is not None:
                if done.session is not None:
                    self._join_session(connection, done.session.session_id, done.session.resumed, done.session.sync)
                else:  # the server holds sessions for others only (max_sessions): this connection goes without
                    self._end_session("the server has no room for our session (its max_sessions)")
        except BaseException:
            handshake.stats.discarded += 1
            await self._discard(connection)
            raise
        finally:
            self._add_stats(handshake)
        return connection

    def _session_offer(self, grant: dict[str, Any]) -> SessionOffer | None:
        """What DONE claims: our session, when we opted in and the server offers sessions (an old or opted-out
        server is told nothing, and the connection has no session)."""
        timeout_ms = grant.get("session_timeout_ms")
        if self._session_key is None:
            return None
        if type(timeout_ms) is not int or timeout_ms <= 0:
            # This server offers no sessions (any more): what our session kept cannot be delivered, and sends go
            # on the plain connection from now on.
            self._end_session("the server offers no buffered sessions")
            return None
        self._session_timeout = timeout_ms / 1000
        session = self.session
        if session is None or session.ended:
            cfg = self.config
            log = SessionLog(
                max_messages=cfg.max_buffered_messages, max_bytes=cfg.max_buffered_bytes, now_ns=time.monotonic_ns()
            )
            session = self.session = Session(
                session_id=0,
                public_key=self._session_key.public_key().public_bytes_raw(),
                log=log,
                encode=cfg.serialization.encode,
                send_timeout=cfg.send_timeout,
                timeout=self._session_timeout,
            )
            self._timers_due_ns = 0  # its expiry is looked at from the next tick step on
        session.timeout = self._session_timeout
        return SessionOffer(self._session_key, session.log.sync())

    def _join_session(self, connection: Connection, session_id: int, resumed: bool, sync: Any) -> None:
        """The server answered our claim: take up its sync and carry the session on ``connection``."""
        session = self.session
        assert session is not None
        session.id = session_id
        session.resume(sync, time.monotonic_ns())
        session.attach(connection, resumed=resumed)

    def _add_stats(self, handshake: ClientHandshake) -> None:
        if handshake.hint is not None:
            self._hint = handshake.hint
        total = self.handshake_stats
        for field in attrs.fields(HandshakeStats):
            setattr(total, field.name, getattr(total, field.name) + getattr(handshake.stats, field.name))

    async def _exchange(
        self,
        route: HandshakeRoute,
        handshake: ClientHandshake,
        packet: Any,
        step: float,
        sends: int = 0,
        *,
        probe: float | None = None,
    ) -> object:
        """Send ``packet()`` and wait for a decisive answer (the loop's poller reads the route), resending every
        ``step`` seconds; TimeoutError after ``sends`` unanswered sends (0: until the caller's budget ends).
        ``probe``: _StaleRoute if the route is still unproven that long after the first send (nothing came back)."""
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        sending: list[asyncio.Task[None]] = []

        def on_answer(data: memoryview) -> None:
            result = handshake.receive(data)
            if isinstance(result, CookieReceived):
                # The server wants its cookie back before it spends anything on us: at once, not on the timer.
                publication = route.publication
                if publication.is_closed:
                    return
                packed = packet()
                if publication.offer(packed) >= 0:
                    self._poke_poller()
                else:
                    # Back pressure (the HELLOs of a storm's clients share this route): sent as soon as there is
                    # room instead of at the next resend, seconds later. The state machine says CookieReceived at
                    # most three times per handshake, so forged cookies cannot pile these up.
                    sending.append(asyncio.ensure_future(self._send_when_room(publication, packed, step)))
                return
            if result is not None and not answer.done():
                answer.set_result(result)

        route.expect(handshake.connect_key, on_answer)
        try:
            sent = 0
            while not answer.done():  # an answer may land just as the wait for it times out
                if sent == sends > 0:
                    raise TimeoutError(f"no answer from the server after {sent} tries")
                sent += 1
                await offer_async(route.publication, packet(), timeout=step)
                self._poke_poller()
                wait = resend_delay(step, sent, self._rng)  # growing and jittered: no wave of resends
                if probe is not None and sent == 1 and probe < wait:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(answer), probe)
                    if not answer.done() and route.unproven:
                        raise _StaleRoute(f"no answer within {probe:g} s on a route reused after going idle")
                    wait -= probe  # something came back (a cookie asked for): the usual resend
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(answer), wait)
            return answer.result()
        finally:
            route.forget(handshake.connect_key)
            for task in sending:
                task.cancel()

    async def _send_when_room(self, publication: Publication, packet: bytes, timeout: float) -> None:
        """Offer ``packet`` once the route takes it (within ``timeout``; else the exchange's resend covers it)."""
        with contextlib.suppress(TimeoutError):
            if await offer_async(publication, packet, timeout=timeout) >= 0:
                self._poke_poller()

    async def _open_connection(self, route: HandshakeRoute, grant: dict[str, Any]) -> Connection:
        aeron = self._shared.client() if self._shared is not None else None
        if aeron is None:
            raise DriverUnavailableError("the driver failed during the connect and is being restarted")
        session_in, session_out = int(grant["session_in"]), int(grant["session_out"])
        stream_in, stream_out = int(grant["stream_in"]), int(grant["stream_out"])
        if route.is_ipc:
            pub_channel = data_channel(None, session_in, int(grant["term_length"]), None)
            sub_channel = data_channel(None, session_out, None, None)
            remote = "ipc"
        else:
            assert route.local is not None
            server = f"{bracket(route.server[0])}:{route.server[1]}"
            pub_channel = data_channel(
                server,
                session_in,
                int(grant["term_length"]),
                int(grant["mtu"]),
                heartbeat_interval=self.config.heartbeat_interval,
                tail_probe=self.config.tail_probe,
            )
            if self.config.local_address:
                pub_channel += f"|interface={bracket(route.local[0])}"
            sub_channel = data_channel(
                f"{bracket(route.local[0])}:{route.local[1]}",
                session_out,
                None,
                None,
                max_term_length=int(grant["term_length"]),
                control=route.control,
            )
            remote = f"{route.server[0]}:{route.server[1]}"
        subscription, publication = await add_pair(aeron, (sub_channel, stream_out), (pub_channel, stream_in))
        connection = Connection(
            self,
            connection_id=int(grant["connection_id"]),
            publication=publication,
            subscription=subscription,
            is_ipc=route.is_ipc,
            remote_address=remote,
            on_released=self._connection_released,
            keepalive=True,
        )
        u_session_in, u_session_out = grant.get("unreliable_session_in"), grant.get("unreliable_session_out")
        if route.local is not None and type(u_session_in) is int and type(u_session_out) is int:
            # The newest-wins pair, opened on first use: the reliable pair's streams under sessions of their own.
            connection.unreliable_channels = (
                (
                    data_channel(
                        f"{bracket(route.local[0])}:{route.local[1]}",
                        u_session_out,
                        None,
                        None,
                        max_term_length=int(grant["term_length"]),
                        reliable=False,
                        control=route.control,
                    ),
                    stream_out,
                ),
                (
                    data_channel(
                        server,
                        u_session_in,
                        int(grant["term_length"]),
                        int(grant["mtu"]),
                        heartbeat_interval=self.config.heartbeat_interval,
                    ),
                    stream_in,
                ),
            )
        return connection

    async def _discard(self, connection: Connection) -> None:
        for resource in connection._resources():
            try:
                await resource.close_async()
            except Exception as exc:
                _log.debug("closing %r failed: %s", resource, exc)

    # ------------------------------------------------------------------ convenience

    async def send(self, message: object) -> None:
        """Send on the current connection.

        With ``buffer_while_reconnecting``, a message sent while the client reconnects is kept (returns at once)
        and delivered in order on the new connection; BudgetExceededError when the buffer is full.
        """
        session = self.session
        if session is not None and not session.ended:
            await session.send(message)
            return
        if self._buffering():
            self._keep(message)
            return
        connection = self._current()
        try:
            await connection.send(message)
        except ConnectionClosedError:
            if not self.config.buffer_while_reconnecting:
                raise
            await asyncio.sleep(0)  # a connection just lost finishes closing (and a reconnect becomes due) first
            if not self._buffering():
                raise
            self._keep(message)

    def send_nowait(self, message: object) -> bool:
        """Hand ``message`` to the driver on the current connection now (see :meth:`Connection.send_nowait`);
        ClientError when not connected."""
        session = self.session
        if session is not None and not session.ended:
            return session.send_nowait(message)
        connection = self.connection  # _current written out: a player sends 20 inputs a second through here
        if connection is None:
            raise ClientError("not connected")
        return connection.send_nowait(message)

    def _current(self) -> Connection:
        connection = self.connection
        if connection is None:
            raise ClientError("not connected")
        return connection

    def forget_server_key(self, host: str, port: int) -> None:
        """Forget the stored key of ``host:port`` (the next connect trusts whatever key it presents)."""
        self._known.forget(f"{host}:{port}")

    # ------------------------------------------------------------------ restarts

    def _connection_released(self, connection: Connection) -> None:
        super()._connection_released(connection)
        session = connection.session
        if session is not None and session.connection is connection:
            if connection.lost or (connection.closed_by_peer and connection.close_reason == END_POINT_CLOSED):
                session.detach(connection)  # we (or whoever) may connect again within the session's timeout
            else:
                self._end_session(connection.close_reason or "closed")
        if connection is not self.connection or not self.config.auto_reconnect or self._closing:
            return
        if connection.lost or (connection.closed_by_peer and connection.close_reason == END_POINT_CLOSED):
            # Lost, or the server shut down (a supervisor may be restarting it): try to come back. A connection
            # the server closed on purpose (with a reason of its own) stays closed.
            self._lost_cause = connection._closed_error()
            self._awaiting_reconnect = True
            if not self._restarting:  # else the restart reconnects once the driver is back
                self._start_reconnect()

    async def _drop_driver_resources(self) -> None:
        if self._shared is not None:
            self._routes.forget(self._shared)

    async def _close_extra(self) -> None:
        shared = self._shared
        if shared is not None and not any(e._shared is shared for e in self._loop_endpoints()):
            await self._routes.close_unused(shared)

    async def close(self) -> None:
        task = self._reconnect_task
        if task is not None and not task.done():
            task.cancel()  # an attempt in flight ends now (its route and half-made connection are released)
        self._awaiting_reconnect = False
        await super().close()
        self._drop_outbox()
        self._end_session("the client closed")

    def _end_session(self, reason: str) -> None:
        session = self.session
        if session is not None and not session.ended:
            dropped = session.end(reason)
            self.buffered_dropped += dropped
            if dropped:
                _log.info("buffered session ended (%s); %d kept message(s) dropped", reason, dropped)

    def _handshakes_under_way(self) -> bool:
        return self._routes.slots.in_flight > 0  # this loop's clients: a storm of this process's

    def _tick_extra_due_ns(self, now_ns: int) -> int:
        session = self.session
        return now_ns if session is not None and not session.ended else NEVER_NS  # (a session to expire)

    def _tick_extra(self, now_ns: int) -> bool:
        session = self.session
        if session is not None and not session.ended and session.log.expired(now_ns, int(session.timeout * 1e9)):
            self._end_session("expired: no connection within the session timeout")
            return True
        return False

    async def _lease_again(self) -> bool:
        if self.config.auto_reconnect and self._target is not None:
            # Reconnect attempts lease the driver themselves, under the reconnect backoff and deadline.
            return True
        return await super()._lease_again()

    async def _after_restart(self) -> None:
        if self.config.auto_reconnect and self._target is not None:
            self._awaiting_reconnect = True
            self._start_reconnect()

    def _start_reconnect(self) -> None:
        """One reconnect episode at a time: a loss during one (a driver restart, say) is its to handle."""
        if self._closing or self._target is None:
            return
        task = self._reconnect_task
        if task is None or task.done():
            self._reconnect_task = self._spawn(self._reconnect())

    async def _reconnect(self) -> None:
        """Attempt after attempt, spaced by the configured backoff, until one connects, the server refuses us for
        good, or ``reconnect_timeout`` runs out (ReconnectFailedError to ``on_error``, logged once)."""
        try:
            await self._reconnect_until_done()
        finally:
            self._awaiting_reconnect = False
            current = self.connection
            if self._outbox and current is not None and not current.is_closed:
                self._spawn(self._flush_outbox(current), current)
            elif self._outbox:
                self._drop_outbox()  # given up (told in the error) or closing: nothing will take them

    async def _reconnect_until_done(self) -> None:
        target = self._target
        if target is None or self._closing:
            return
        address = f"{target[0]}:{target[1]}"
        cfg = self.config
        schedule = ReconnectSchedule(cfg.reconnect_backoff(), cfg.reconnect_timeout, time.monotonic())
        cause, self._lost_cause = self._lost_cause, None
        _log.info("connection to %s went away (%s); reconnecting", address, cause)
        while not self._closing:
            now = time.monotonic()
            delay = schedule.next_delay(now)
            if delay is None:
                self._give_up(address, schedule, cause, permanent=False)
                return
            self._tell(
                self.listeners.reconnecting,
                Reconnecting(attempt=schedule.attempts, delay=delay, cause=cause, elapsed=schedule.elapsed(now)),
            )
            await asyncio.sleep(delay)
            current = self.connection
            if self._closing or (current is not None and not current.is_closed):
                return  # closed, or connected by the application meanwhile
            budget = min(cfg.connect_timeout, schedule.remaining(time.monotonic()))
            if budget <= 0:
                self._give_up(address, schedule, cause, permanent=False)
                return
            try:
                connection = await self.connect(*target, timeout=budget)
            except EndpointClosedError:
                return
            except ClientRejectedError as exc:
                cause = exc
                if not exc.retryable:
                    self._give_up(address, schedule, exc, permanent=True)
                    return
            except Exception as exc:  # no answer, no driver, a driver restarting under the attempt: try again
                cause = exc
            else:
                _log.info("reconnected to %s after %d attempt(s): %r", address, schedule.attempts, connection)
                self._tell(self.listeners.reconnected, connection)
                return
            _log.debug("reconnect attempt %d to %s failed: %s", schedule.attempts, address, cause, exc_info=cause)

    def _give_up(
        self, address: str, schedule: ReconnectSchedule, cause: BaseException | None, *, permanent: bool
    ) -> None:
        elapsed = schedule.elapsed(time.monotonic())
        why = "refused for good" if permanent else f"no connection within reconnect_timeout={schedule.deadline:g} s"
        undelivered = len(self._outbox)
        error = ReconnectFailedError(
            f"gave up reconnecting to {address} after {schedule.attempts} attempt(s) in {elapsed:.1f} s ({why})"
            + (f", dropping {undelivered} buffered message(s)" if undelivered else "")
            + (f"; last: {cause}" if cause is not None else ""),
            cause=cause,
            attempts=schedule.attempts,
            elapsed=elapsed,
            permanent=permanent,
            undelivered=undelivered,
        )
        self._end_session("reconnecting gave up")
        _log.warning("%s", error)  # once: with no on_error listener it is not logged again as an error
        if self.listeners.has_error_listeners():
            self._notify_error(None, error)

    # ------------------------------------------------------------------ buffering while reconnecting

    def _buffering(self) -> bool:
        """Whether ``client.send`` keeps messages now: opted in, and a reconnect is due, or kept ones are still
        being delivered (a later message must not overtake them)."""
        cfg = self.config
        return (
            cfg.buffer_while_reconnecting
            and cfg.auto_reconnect
            and not self._closing
            and (self._awaiting_reconnect or bool(self._outbox))
        )

    def _keep(self, message: object) -> None:
        cfg = self.config
        size = len(cfg.serialization.encode(message))  # a message that can never be sent fails here, not later
        if len(self._outbox) >= cfg.max_buffered_messages:
            self.buffered_refused += 1
            raise BudgetExceededError(
                f"{len(self._outbox)} messages are already kept for the reconnect (max_buffered_messages)",
                "max_buffered_messages",
            )
        if self._outbox_bytes + size > cfg.max_buffered_bytes:
            self.buffered_refused += 1
            raise BudgetExceededError(
                f"{self._outbox_bytes} bytes are kept for the reconnect; {type(message).__name__} adds {size} "
                f"(max_buffered_bytes={cfg.max_buffered_bytes})",
                "max_buffered_bytes",
            )
        self._outbox.append((message, size))
        self._outbox_bytes += size

    async def _flush_outbox(self, connection: Connection) -> None:
        """Deliver the kept messages on ``connection``, oldest first, each removed only once sent. Sends made
        meanwhile join the end of the queue. A connection lost on the way leaves the rest for the next one."""
        outbox = self._outbox
        while outbox and connection is self.connection and not self._closing:
            message, size = outbox[0]
            try:
                await connection.send(message)
            except ConnectionClosedError:
                await asyncio.sleep(0)  # let the connection finish closing: a reconnect is due, or never comes
                if not self._awaiting_reconnect:
                    self._drop_outbox()
                return
            except Exception as exc:  # this message cannot go (back pressure outlasted send_timeout, ...): drop it
                if outbox and outbox[0][0] is message:
                    outbox.popleft()
                    self._outbox_bytes -= size
                    self.buffered_dropped += 1
                self._notify_error(connection, exc)
                continue
            if outbox and outbox[0][0] is message:  # (a close meanwhile dropped them all)
                outbox.popleft()
                self._outbox_bytes -= size

    def _drop_outbox(self) -> None:
        if self._outbox:
            self.buffered_dropped += len(self._outbox)
            _log.info("dropped %d message(s) kept for a reconnect that did not happen", len(self._outbox))
        self._outbox.clear()
        self._outbox_bytes = 0


def _hello_now(handshake: ClientHandshake) -> bytes:
    return handshake.hello(time.time_ns())


class _Retry(Exception):
    """The handshake route broke; open a new one."""


class _StaleRoute(_Retry):
    """A reused route's first HELLO went unanswered: the server behind it is likely not the one it talked to."""


def _reuse_probe(route: HandshakeRoute) -> float | None:
    """How soon an unanswered HELLO gives ``route`` up (None: it is fresh or in use, or IPC, where no image of an
    old server's lingers on our side: a restarted server's stream is a new one on the shared driver)."""
    if not route.unproven or route.is_ipc:
        return None
    return max(_REUSED_ROUTE_PROBE_S, _REUSED_ROUTE_PROBE_FACTOR * route.answer_s)


def _rejected(answer: Rejected) -> ClientRejectedError:
    """The error for a rejection: SchemaMismatchError (naming the class and field) when the classes differ."""
    if answer.reason is RejectReason.SERIALIZATION_MISMATCH:
        detail = answer.detail or {}
        type_id, class_name, field = detail.get("type_id", 0), detail.get("class", ""), detail.get("field", "")
        return SchemaMismatchError(
            answer.text,
            type_id=type_id if type(type_id) is int else 0,
            class_name=class_name if type(class_name) is str else "",
            field=field if type(field) is str else "",
            authenticated=answer.authenticated,
        )
    return ClientRejectedError(answer.reason, answer.text, authenticated=answer.authenticated)
