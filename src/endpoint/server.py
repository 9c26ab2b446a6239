"""The server end point: handshake streams on its port (UDP) and on IPC, and the connections it accepted.

Everything the server sends a UDP client (handshake answers, the connection's
stream) leaves from its control port (``port + 1``) in Aeron's dynamic
multi-destination control mode: it goes wherever that client's status
messages, naming the stream's session, come from, which through a NAT is the
client's public address and port; nothing is sent before the client speaks,
and only receivers at the address the HELLO came from count.

A client's first HELLO over UDP gets a cookie and costs nothing else but a
publication for its answers (on the shared control socket), from a bounded set
where the oldest idle one gives way. The HELLO repeated with the cookie proves
the client receives at its address; only then the server checks it (serialization, filters, limits),
allocates the connection's two session ids and two stream ids, creates its
publication and subscription and answers (Noise message 2, sealing the grant).
The connection exists for the server once the client's DONE proves it holds the
key and both streams are connected; then ``on_connect`` fires and DONE_ACK
tells the client. When too many handshakes are half open, the oldest gives way
and its client is told SERVER_BUSY (see :mod:`endpoint.handshake.protocol`). In a connect storm, a HELLO past what
the server finished within the last handshake timeout (see :mod:`endpoint.handshake.admission`) is told SERVER_BUSY
with a retry-after before anything is made for it (one on an answer route still holding an answer its client has
not read is dropped, counted ``overloaded``: a refusal would only queue there too);
an answer held up by back pressure keeps its handshake, so the client's resent HELLO gets it again (never rebuilt).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs

from driver.client.aeron import Aeron
from driver.client.aio import offer_async
from driver.client.publication import ExclusivePublication, Publication
from driver.client.subscription import Image, Subscription
from driver.concurrent._watches import FrameWatch
from endpoint.base import END_POINT_CLOSED, EndPoint
from endpoint.channels import (
    bracket,
    data_channel,
    host_of,
    reply_channel,
    udp_channel,
    wait_connected,
    wait_image,
)
from endpoint.config import (
    HANDSHAKE_STREAM_ID,
    IPC_HANDSHAKE_STREAM_BASE,
    IPC_REPLY_STREAM_BASE,
    REPLY_STREAM_ID,
    ServerConfiguration,
)
from endpoint.connection.buffered import Session
from endpoint.connection.newest import frame
from endpoint.connection.session import SessionLog, SessionTable, TableStats
from endpoint.connection.shell import Connection
from endpoint.errors import AllocationError, BudgetExceededError, ConnectionClosedError, RejectReason, ServerError
from endpoint.groups import Group, check_length, offer_each, offer_each_newest
from endpoint.handshake.admission import RETRY_AFTER_KEY, Admission
from endpoint.handshake.keystore import default_config_dir, load_or_create_private_key
from endpoint.handshake.protocol import (
    PROTOCOL_VERSION,
    Bounce,
    Done,
    Hello,
    ServerHandshake,
    SessionClaim,
    SessionGranted,
)
from endpoint.handshake.routes import answer_session
from endpoint.ids import IdAllocator
from endpoint.schema import CompatibilityCheck

__all__ = ["Server"]

_log = logging.getLogger("endpoint")

_ADMISSION_FLOOR = 256
"""Handshakes in flight a server takes on before it has shown how many it finishes within a handshake timeout."""
_DONE_PATIENCE = 2.5
"""Handshake timeouts the DONE step waits for the client's streams to connect (the handshake expires at 3)."""

_FEW_HANDSHAKE_IMAGES = 4
"""Up to this many handshake images (client processes handshaking lately) are polled one by one."""
_PORT_PAIR_ATTEMPTS = 16
"""With ``port=0``: free ports the driver binds for us, at most, until the next one up is free too."""

AddressFilter = Callable[[str, str], bool]
"""``filter(ip, tag) -> allowed``."""
SessionListener = TypeVar("SessionListener", bound=Callable[[Session], Any])
SESSION_TAKEN_OVER = "the session resumed on a new connection"
"""Close reason of a connection whose session a newer connection of the same client took."""


_DETAIL_NAME_LENGTH = 128
_Refusal = tuple[RejectReason, str] | tuple[RejectReason, str, dict[str, int | str]]
"""Why a HELLO is turned away: the reason, its text and (for SERIALIZATION_MISMATCH) which class and field."""


@attrs.define
class _Pending:
    """A handshake between its answer and DONE: what it holds, freed if it never completes."""

    hello: Hello
    is_ipc: bool
    address: str
    ids: tuple[int, ...]  # session_in, session_out, stream_in, stream_out, and the unreliable pair's sessions
    reply: Publication | None = None
    publication: ExclusivePublication | None = None
    subscription: Subscription | None = None
    lease: _AnswerRoute | None = None  # on ``reply``, unless it is the shared IPC answer stream
    route_id: int = 0  # the session id of the client's handshake publication
    counted: bool = False  # in ``_per_address``


class _AnswerRoute:
    """The publication answering one client route (address, handshake publication), shared by the handshakes of
    every client using that route (the clients on one event loop): the first opens it, the last to let go closes
    it. Once it reached its client it also holds itself (``pinned``) while that client's route lives: the route
    goes on naming the same session for its answers, and a subscription takes a new stream of a session only a
    while after the previous one went."""

    def __init__(self, opening: asyncio.Future[ExclusivePublication], route_id: int, address: str) -> None:
        self.opening = opening
        self.route_id = route_id
        self.address = address
        self.users = 0
        self.pinned = False
        self.backlog = 0
        """Answers waiting on this route's back pressure: while any does, a new HELLO on it is dropped (counted)."""
        self.cookies_waiting = 0
        """Cookies waiting on this route's back pressure (at most :data:`_COOKIES_WAITING_PER_ROUTE`)."""
        self.bounced_ns = 0
        """When a cookie or refusal for this route last came (monotonic): its client is likely to use it soon."""
        self.bounces: list[bytes] | None = None
        """While the route is on its way to its client: the cookies and refusals to send once it is there, all by
        one task, however many come meanwhile."""

    @property
    def usable(self) -> bool:
        if not self.opening.done():
            return True
        return not self.opening.cancelled() and self.opening.exception() is None and not self.opening.result().is_closed

    @property
    def reached(self) -> ExclusivePublication | None:
        """The route's publication if it is open and reached its client."""
        if not self.opening.done() or not self.usable:
            return None
        publication = self.opening.result()
        return publication if publication.is_connected else None


class _NoAnswerRoute(Exception):
    """Every answer route the caps allow is busy with handshakes in flight."""


_PARKED_TIMEOUTS = 3
"""Handshake timeouts an answer route let go stays open (see ``Server._closing_routes``): longer than its client
waits before asking again (a busy refusal's retry-after, at most a timeout and a half; a resend, at most two and a
half), so that a client that comes back finds it."""
_SESSION_HELD_NS = 6_000_000_000
"""How long after we close an answer route its driver still holds the route's session (Aeron's default publication
linger, 5 s, and its teardown): an answer route opened again for that client route meanwhile would be refused."""
_COOKIES_WAITING_PER_ROUTE = 64
"""Cookies one answer route may hold waiting for room (a client process's storm has up to 128 handshakes in
flight on one route); more are dropped as before, and those clients ask again."""

_NO_IDS: tuple[int, ...] = ()
"""A handshake's ids before any were allocated."""


class Server(EndPoint[ServerConfiguration]):
    """Accepts connections on its :attr:`port` (UDP) and, with ``enable_ipc``, over IPC on the same driver."""

    def __init__(self, config: ServerConfiguration | None = None) -> None:
        super().__init__(config if config is not None else ServerConfiguration())
        cfg = self.config
        self._port = cfg.port
        self._control_port = cfg.control_port
        self._control_anchor: ExclusivePublication | None = None
        """Holds the control port bound while no client is being answered (a publication that never sends)."""
        self._anchor_session = 0
        self._port_claim: socket.socket | None = None
        """With ``port=0`` and no UDP: a loopback UDP socket held while bound, so no other server gets the number."""
        self._session_ids = IdAllocator(*cfg.session_id_range, reuse_delay_ns=self._id_linger_ns, name="session id")
        self._stream_ids = self._stream_id_allocator()
        self._filters: list[AddressFilter] = []
        self._allow = tuple(ipaddress.ip_network(n, strict=False) for n in cfg.allow)
        self._deny = tuple(ipaddress.ip_network(n, strict=False) for n in cfg.deny)
        self._handshake: ServerHandshake | None = None
        self._admission: Admission | None = None
        self._udp_handshake: Subscription | None = None
        self._ipc_handshake: Subscription | None = None
        self._ipc_reply: Publication | None = None
        self._handlers: dict[int, Callable[[memoryview, Any], None]] = {}
        self._image_watches: dict[bool, tuple[tuple[Image, ...], FrameWatch]] = {}
        self._pending: dict[int, _Pending] = {}
        self._compatibility: CompatibilityCheck | None = None
        self._shutting_down = False
        """``close`` began: new handshakes are refused (SHUTTING_DOWN) while the connections close, so a client
        reconnecting at once does not get a connection that the closing server would then drop."""
        self._finished_reply: dict[int, tuple[Publication, _AnswerRoute | None, int]] = {}
        """connect key -> (answer route, our lease on it, when to let it go): for a client that missed the answer."""
        self._answer_routes: dict[tuple[str, int], _AnswerRoute] = {}
        self._closing_routes: dict[tuple[str, int], tuple[_AnswerRoute, int]] = {}
        """Answer routes let go, by client route, with when to close them: open for :data:`_PARKED_TIMEOUTS`
        handshake timeouts more, so that a client route that asks again soon (a storm's busy-refused client) gets the
        same publication back. A new one would name the session the driver still holds while the old one closes, and
        be refused."""
        self._sessions_held: dict[tuple[str, int], int] = {}
        """Client routes whose answer route we closed, with until when its driver may still hold its session
        (:data:`_SESSION_HELD_NS`): such a route asking again meanwhile is not answered (its client tries again, or
        soon takes a fresh route) rather than answered through a route the driver would refuse. Oldest first, at
        most ``4 * max_answer_routes``."""
        self._routes_from: dict[str, int] = {}
        """How many of ``_answer_routes`` go to each address (its cap is checked per new route, in a storm of
        clients on routes of their own once per handshake)."""
        self._per_address: dict[str, int] = {}
        self.handshakes_accepted = 0
        """Handshakes that became connections."""
        self.rejections: dict[RejectReason, int] = dict.fromkeys(RejectReason, 0)
        """Clients turned away, by reason (``SERVER_BUSY``: a half-open handshake that gave way to a newer one)."""
        self._ids_of: dict[int, tuple[int, ...]] = {}
        self._address_of: dict[int, str] = {}
        self._bouncing = 0
        """Cookies and refusals waiting for their answer routes to reach their clients (at most
        ``max_answer_routes``)."""
        self._cookies_waiting = 0
        """Cookies waiting for room on back-pressured answer routes (at most ``max_answer_routes``)."""
        self._groups: dict[str, Group] = {}
        self._bound = False
        self._stopped = asyncio.Event()
        self._sessions: SessionTable[Session] = SessionTable(
            max_sessions=cfg.max_sessions, timeout_ns=int(cfg.session_timeout * 1e9)
        )
        self._last_session_number = 0

    # ------------------------------------------------------------------ user API

    def on_session_expired(self, listener: SessionListener) -> SessionListener:
        """``listener(session)``, sync or async, when a buffered session is dropped with what it kept: its client
        did not come back within ``session_timeout`` (``end_reason`` "expired"), or it gave way to a new one at
        ``max_sessions`` ("evicted")."""
        return self.listeners.add_session_expired(listener)

    @property
    def sessions(self) -> list[Session]:
        """The buffered sessions held now, connected or waiting for their client."""
        return list(self._sessions)

    @property
    def session_stats(self) -> TableStats:
        """Sessions opened, resumed, expired, evicted, refused (table full of connected ones) and closed."""
        return self._sessions.stats

    def filter(self, rule: AddressFilter) -> AddressFilter:
        """Add ``rule(ip, tag) -> bool``; a UDP client must pass every rule (IPC clients are local, never filtered)."""
        self._filters.append(rule)
        return rule

    @property
    def port(self) -> int:
        """The port clients connect to: ``config.port``, or with ``port=0`` the one bound for it (known once
        bound, and kept across driver restarts). Over UDP it is the server's UDP port; over IPC it names the
        server's handshake streams on its driver (an IPC-only server with ``port=0`` takes a number no other
        server on this machine has: a loopback UDP port it holds while bound)."""
        if self._port == 0:
            raise ServerError("port=0: the server's port is chosen when it binds, and it is not bound yet")
        return self._port

    @property
    def control_port(self) -> int:
        """The UDP port the server's streams to clients leave from (``port + 1`` unless configured); a firewall in
        front of the server lets clients' datagrams in to it and to :attr:`port`."""
        if self._control_port == 0:
            return self.port + 1
        return self._control_port

    @property
    def _control(self) -> str:
        return f"{bracket(self.config.listen_address)}:{self.control_port}"

    @property
    def public_key(self) -> bytes:
        if self._handshake is None:
            raise ServerError("the server is not bound yet")
        return self._handshake.public_key

    @property
    def _id_linger_ns(self) -> int:
        return int((self.config.close_timeout + 5.0) * 1e9)

    def _stream_id_allocator(self) -> IdAllocator:
        """Stream ids for connections, never those of this server's handshake streams."""
        reserved = (
            HANDSHAKE_STREAM_ID,
            REPLY_STREAM_ID,
            IPC_HANDSHAKE_STREAM_BASE + self._port,
            IPC_REPLY_STREAM_BASE + self._port,
        )
        return IdAllocator(
            *self.config.stream_id_range, reserved=reserved, reuse_delay_ns=self._id_linger_ns, name="stream id"
        )

    @property
    def handshake_stats(self) -> Any:
        return self._handshake.stats if self._handshake is not None else None

    async def bind(self) -> None:
        """Start (or attach to) the driver and open the handshake streams."""
        self._ensure_open()
        if self._bound:
            return
        cfg = self.config
        if self._handshake is None:
            self._handshake = ServerHandshake(
                load_or_create_private_key(
                    None if cfg.ephemeral_key else cfg.key_path or default_config_dir() / f"server-{cfg.port}.key"
                ),
                handshake_timeout_ns=int(cfg.handshake_timeout * 3e9),
                cookie_period_ns=int(cfg.cookie_period * 1e9),
                max_pending=cfg.max_pending_handshakes,
                max_pending_per_source=cfg.max_pending_per_source,
            )
            # Half the half-open cap at most: the other half holds HELLOs long enough to be refused (a sealed
            # SERVER_BUSY naming when to come back) rather than dropped unanswered.
            self._admission = Admission(
                int(cfg.handshake_timeout * 1e9), _ADMISSION_FLOOR, max(1, cfg.max_pending_handshakes // 2)
            )
        await self._lease_driver()
        try:
            await self._open_handshake_streams()
        except BaseException:
            await self.close()
            raise
        self._bound = True
        self._start_poller()

    async def _open_handshake_streams(self) -> None:
        cfg = self.config
        aeron = self._aeron()
        if cfg.enable_udp:
            await self._open_udp_ports(aeron)
        elif self._port == 0:
            self._take_port(self._claim_ipc_port())
        if cfg.enable_ipc:
            self._ipc_handshake = await aeron.add_subscription_async(
                "aeron:ipc", IPC_HANDSHAKE_STREAM_BASE + self._port
            )
            self._ipc_reply = await aeron.add_exclusive_publication_async(
                "aeron:ipc?term-length=65536", IPC_REPLY_STREAM_BASE + self._port
            )

    async def _open_udp_ports(self, aeron: Aeron) -> None:
        """The handshake subscription on :attr:`port` and the control port; with ``port=0`` a free pair."""
        cfg = self.config
        pick = self._port == 0
        for attempt in range(_PORT_PAIR_ATTEMPTS if pick and cfg.control_port == 0 else 1):
            # Clients' handshake publications use 64 KiB terms: a SETUP asking for more makes no image here, and
            # the images it makes are sparse (a forged SETUP costs the log's metadata page, not its terms). At
            # the image limits the longest-silent image gives way: forged SETUPs that never send evict each
            # other, while live clients' publications (heartbeats every 100 ms) keep their places. One address
            # (a host of many client processes, a NAT) holds at most ``max_routes_per_source`` images: more lets
            # a few flooding addresses fill the stream's places (see its docstring), and never more than it may
            # have answer routes or handshakes pending: past that its half-open handshakes evict each other, each
            # having made its streams, and the storm collapses (measured: 800 clients of one host, 472 connected
            # in 30 s).
            port = 0 if pick else self._port
            channel = udp_channel(
                f"{bracket(cfg.listen_address)}:{port}",
                max_term_length=65536,
                handshake=True,
                max_images_per_source=min(
                    cfg.max_routes_per_source, cfg.max_answer_routes_per_source, cfg.max_pending_per_source
                ),
            )
            try:
                self._udp_handshake = await aeron.add_subscription_async(channel, HANDSHAKE_STREAM_ID)
            except Exception as exc:
                raise ServerError(f"cannot listen on UDP {cfg.listen_address}:{port}: {exc}") from exc
            if pick:
                self._take_port(self._bound_port(self._udp_handshake))
            try:
                await self._open_control(aeron)
                return
            except Exception as exc:
                await self._close_quietly(self._udp_handshake)
                self._udp_handshake = None
                if pick:
                    self._port = 0
                if not pick or attempt + 1 == _PORT_PAIR_ATTEMPTS or cfg.control_port != 0:
                    raise ServerError(
                        f"cannot bind the control port {cfg.listen_address}:{self.control_port if not pick else '?'}"
                        f" (the port clients' status messages come to): {exc}"
                    ) from exc

    async def _open_control(self, aeron: Aeron) -> None:
        """Bind the control port: a publication on it that nobody can join (it names a session of ours and
        admits receivers at no address) keeps it bound between answers."""
        if not self._anchor_session:
            # Outside our connections' range (and clients' route sessions, which are negative), so nothing else here
            # is likely to want it; random, so that servers sharing a driver do not clash.
            low = self.config.session_id_range[0]
            self._anchor_session = secrets.randbelow(low - 1) + 1 if low > 2 else secrets.randbelow(1 << 31) - (1 << 31)
        channel = reply_channel(self._control, self._anchor_session, "0.0.0.0", 65536)
        self._control_anchor = await aeron.add_exclusive_publication_async(channel, REPLY_STREAM_ID)

    def _bound_port(self, subscription: Subscription) -> int:
        """The port the driver bound for our port-0 handshake subscription (the driver binds it: no race)."""
        for address in subscription.local_socket_addresses():
            _, _, port = address.rpartition(":")
            if port.isdigit() and int(port) > 0:
                return int(port)
        raise ServerError(
            f"port=0: the driver on {self.config.resolved_aeron_dir()} did not say which port it bound (a driver "
            "without local socket address counters, such as Aeron 1.15.1's): give the server a port"
        )

    def _claim_ipc_port(self) -> int:
        """A number for an IPC-only server's handshake streams that no other server on this machine has now."""
        claim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            claim.bind(("127.0.0.1", 0))
        except OSError as exc:
            claim.close()
            raise ServerError(f"port=0: cannot claim a loopback UDP port for the IPC handshake streams: {exc}") from exc
        self._port_claim = claim
        return int(claim.getsockname()[1])

    def _take_port(self, port: int) -> None:
        self._port = port
        self._stream_ids = self._stream_id_allocator()  # nothing allocated yet: the first bind

    async def serve_forever(self) -> None:
        """Bind if needed and run until :meth:`close` (or cancellation)."""
        await self.bind()
        await self._stopped.wait()

    async def __aenter__(self) -> Server:
        await self.bind()
        return self

    def broadcast(self, message: object, to: Iterable[Connection] | None = None) -> int:
        """Send ``message`` to every open connection without waiting, encoded once; returns how many accepted it (a
        connection carrying a buffered session accepts it when its session keeps it). A class registered
        ``unreliable=True`` goes newest-wins (see ``Connection.send_unreliable``), never through a session.

        ``to``: only these connections of this server (a game's interest management: the players who see the same
        part of the world get the same snapshot, encoded once per tick for all of them, not once each). A closed or
        closing one, or one whose log is full, is skipped (not counted); MessageTooLargeError (nobody gets it) when
        the message is longer than one of them carries, ValueError (nobody gets it) for another end point's
        connection.
        """
        if to is not None:
            return self._broadcast_to(message, to if isinstance(to, (list, tuple)) else tuple(to))
        if type(message) in self.config.serialization.unreliable:
            newest = frame(self.sequencer.next(type(message)), self.config.serialization.encode(message))
            return offer_each_newest(self._polled, newest, message)
        data = self.config.serialization.encode(message)
        sent = 0
        for connection in self._polled:
            if connection._closing:
                continue
            session = connection.session
            if session is not None:  # kept and numbered like any send in the session (not counted when full)
                try:
                    sent += session.send_nowait(message)
                except BudgetExceededError:
                    pass
                continue
            if len(data) > connection.max_message_length:
                connection.send_nowait(message)  # raises MessageTooLargeError with the details
            try:
                sent += connection.outbox.offer_now(data)
            except ConnectionClosedError:
                continue
        return sent

    def _broadcast_to(self, message: object, members: Sequence[Connection]) -> int:
        serialization = self.config.serialization
        for connection in members:
            if connection._endpoint is not self:
                raise ValueError(f"{connection!r} is not a connection of {self!r}: nothing was sent")
        if type(message) in serialization.unreliable:
            newest = frame(self.sequencer.next(type(message)), serialization.encode(message))
            check_length(newest, message, members, self)
            return offer_each_newest(members, newest, message)
        data = serialization.encode(message)
        check_length(data, message, members, self)
        return offer_each(members, data, message)

    def group(self, name: str) -> Group:
        """The group called ``name`` (made on first use): connections to broadcast to with one encoding per message
        (:mod:`endpoint.groups`). At most ``max_groups`` at once (BudgetExceededError); ``group.close()`` frees one."""
        group = self._groups.get(name)
        if group is None:
            limit = self.config.max_groups
            if len(self._groups) >= limit:
                raise BudgetExceededError(f"{limit} groups exist already: close some (max_groups)", "max_groups")
            group = self._groups[name] = Group(
                name,
                serialization=self.config.serialization,
                sequencer=self.sequencer,
                owns=self._owns,
                forget=self._forget_group,
            )
        return group

    @property
    def groups(self) -> dict[str, Group]:
        """The server's groups by name (a copy)."""
        return dict(self._groups)

    def _owns(self, connection: Connection) -> bool:
        return self._connections.get(connection.id) is connection

    def _forget_group(self, group: Group) -> None:
        if self._groups.get(group.name) is group:
            del self._groups[group.name]

    def _aeron(self) -> Aeron:
        assert self._shared is not None
        return self._shared.client()

    # ------------------------------------------------------------------ handshake polling

    polls_handshakes = True

    @property
    def _sleeps_soundly(self) -> bool:
        """Also no handshake is under way, nor can one arrive over IPC unseen (a client's handshake image there)."""
        ipc = self._ipc_handshake
        return super()._sleeps_soundly and not self._pending and (ipc is None or not ipc.images)

    def _poll_extra(self) -> int:
        work = 0
        for sub, is_ipc in ((self._udp_handshake, False), (self._ipc_handshake, True)):
            if sub is None:
                continue
            images = sub.images
            if len(images) > _FEW_HANDSHAKE_IMAGES:
                # Every client process has a handshake image here for a while: one native call finds those with
                # a packet waiting (the watch grows by images that came after those it holds, and is made again when
                # one went).
                watched, watch = self._image_watches.get(is_ipc, ((), None))
                if watched is not images or watch is None:
                    held = len(watched)
                    if watch is not None and len(images) > held and images[:held] == watched:
                        watch.extend([image.ready_entry for image in images[held:]])
                    else:
                        watch = FrameWatch([image.ready_entry for image in images])
                    self._image_watches[is_ipc] = (images, watch)
                images = tuple(images[index] for index in watch.ready())
            for image in images:
                handler = self._handlers.get(image.correlation_id)
                if handler is None:
                    handler = self._handlers[image.correlation_id] = self._handshake_handler(image, is_ipc)
                work += image.poll(handler, 8)
        return work

    def _handshake_handler(self, image: Image, is_ipc: bool) -> Callable[[memoryview, Any], None]:
        address = "ipc" if is_ipc else host_of(image.source_identity)
        # Pending-handshake limits are per source: per remote host, or per local process stream for IPC.
        source = f"ipc:{image.session_id}" if is_ipc else address

        def handle(payload: memoryview, header: Any) -> None:
            self._on_handshake_packet(bytes(payload), source, address, is_ipc, image.session_id)

        return handle

    def _on_handshake_packet(self, data: bytes, source: str, address: str, is_ipc: bool, route_id: int) -> None:
        handshake = self._handshake
        if handshake is None or self._closing:
            return
        event = handshake.receive(data, source, time.time_ns(), routable=is_ipc)
        if isinstance(event, Hello):
            self._spawn(self._on_hello(event, is_ipc, address, route_id))
        elif isinstance(event, Done):
            self._spawn(self._on_done(event))
        elif isinstance(event, Bounce):
            self._bounce(event, is_ipc, address, route_id)
        elif handshake.retried is not None:
            self._resend(handshake.retried)
        if handshake.evicted:
            self._on_evicted(handshake)

    def _bounce(self, bounce: Bounce, is_ipc: bool, address: str, route_id: int) -> None:
        """Send a cookie or a plain refusal and keep nothing for it: the answer goes out on the client route's
        answer route, opened if need be (bounded by ``_bouncing`` and the route caps) and then held while that
        route lives, so that the HELLO carrying the cookie is answered on it at once."""
        handshake = self._handshake
        assert handshake is not None
        if is_ipc:
            if self._ipc_reply is not None and self._ipc_reply.offer(bounce.packet) < 0:
                handshake.stats.unanswered += 1
            return
        port = bounce.reply.get("port")
        if not isinstance(port, int) or not 0 < port < 65536:
            handshake.stats.malformed += 1
            return
        now_ns = time.monotonic_ns()
        opening = self._answer_routes.get((address, route_id))
        if opening is not None:
            opening.bounced_ns = now_ns
        ready = opening.reached if opening is not None else None
        if ready is not None:
            # Stateless: a cookie on a route that reached its client costs one offer, whatever the flood; the
            # kept answers (per connect key) are only for handshakes that got further.
            if ready.offer(bounce.packet) < 0:
                self._cookie_when_room(ready, bounce.packet, address, route_id)
            return
        if self._bouncing >= self.config.max_answer_routes:
            handshake.stats.unanswered += 1
            return
        if opening is not None and opening.bounces is not None:
            # Its route is on its way: the task already waiting for it sends this one too (the clients of a shared
            # route, or HELLOs resent while the route is slow to connect).
            opening.bounces.append(bounce.packet)
            self._bouncing += 1
            return
        lease = self._lease_answer_route(address, port, route_id)
        if lease is None:
            handshake.stats.unanswered += 1
            return
        self._bouncing += 1
        lease.bounced_ns = now_ns
        lease.bounces = [bounce.packet]
        self._spawn(self._send_bounce(lease, lease.bounces))

    def _cookie_when_room(self, publication: Publication, packet: bytes, address: str, route_id: int) -> None:
        """A cookie its route's back pressure refused: the HELLOs of many clients sharing one route (a storm from
        one host) fill its window, and dropped, the client would ask again only after its resend delay (seconds).
        It waits for room instead, within bounds of its own (per route and in all), so that a route whose client
        never reads only ever holds up its own cookies (past the bounds they are dropped, counted ``unanswered``)."""
        handshake = self._handshake
        assert handshake is not None
        route = self._answer_routes.get((address, route_id))
        if (
            route is None
            or route.cookies_waiting >= _COOKIES_WAITING_PER_ROUTE
            or self._cookies_waiting >= self.config.max_answer_routes
        ):
            handshake.stats.unanswered += 1
            return
        route.cookies_waiting += 1
        self._cookies_waiting += 1
        self._spawn(self._send_cookie(route, publication, packet))

    async def _send_cookie(self, route: _AnswerRoute, publication: Publication, packet: bytes) -> None:
        try:
            sent = await offer_async(publication, packet, timeout=self.config.handshake_timeout) >= 0
        except TimeoutError:
            sent = False
        finally:
            route.cookies_waiting -= 1
            self._cookies_waiting -= 1
        if not sent and self._handshake is not None:
            self._handshake.stats.unanswered += 1

    async def _send_bounce(self, lease: _AnswerRoute, packets: list[bytes]) -> None:
        """Send ``packets`` (the route's ``bounces``: those that come meanwhile join them) once the route reached its
        client; from then on its cookies go out directly."""
        timeout = self.config.handshake_timeout
        sent = 0
        opened = False
        try:
            publication = await asyncio.shield(lease.opening)
            opened = True
            await wait_connected(publication, timeout, self._aeron())
            for packet in packets:
                await self._send_reply(publication, packet, timeout)
                sent += 1
        except Exception as exc:
            _log.debug("a handshake answer to %s went unsent: %s", lease.address, exc)
            if self._handshake is not None:
                self._handshake.stats.unanswered += len(packets) - sent
        finally:
            if lease.bounces is packets:
                lease.bounces = None
            self._bouncing -= len(packets)
            if opened and not self._closing:
                # Held while the client's route lives, even if it has not got there yet: its next HELLO is answered
                # on it, and a route opened again for that client route would clash with this one's session (the
                # driver keeps a closed publication a while): a storm's slow clients were then turned away for
                # seconds.
                self._pin(lease)
            self._let_go_of_route(lease)  # also when cancelled (closing): the lease must not outlive us

    def _on_evicted(self, handshake: ServerHandshake) -> None:
        """Handshakes that gave way to newer ones: tell each client SERVER_BUSY and free what it held."""
        for connect_key, packet in handshake.evicted:
            pending = self._pending.pop(connect_key, None)
            self.rejections[RejectReason.SERVER_BUSY] += 1
            if pending is None:
                continue  # still being checked: its _on_hello finds it gone and cleans up
            if pending.reply is not None and not pending.reply.is_closed:
                pending.reply.offer(packet)
            self._keep_reply(connect_key, pending)
            self._spawn(self._free_pending(pending))
        handshake.evicted.clear()

    def _resend(self, connect_key: int) -> None:
        """A client repeated a step whose answer it missed: send the same answer again (once per retry)."""
        pending = self._pending.get(connect_key)
        packet = self._handshake.last_reply(connect_key) if self._handshake is not None else None
        kept = self._finished_reply.get(connect_key)
        reply = pending.reply if pending is not None else kept[0] if kept is not None else None
        if packet is not None and reply is not None and not reply.is_closed:
            reply.offer(packet)

    def _handshakes_under_way(self) -> bool:
        return bool(self._pending)

    def _tick_extra(self, now_ns: int) -> bool:
        looked = False
        if len(self._sessions):
            looked = True
            for session in self._sessions.expire(now_ns):
                self._end_session(session, "expired")
        if self._handshake is None:
            return looked
        if self._finished_reply or self._answer_routes or self._closing_routes:
            looked = True
            self._let_go_of_replies(now_ns)
            self._close_routes_let_go(now_ns)
        for connect_key in self._handshake.expire(time.time_ns()):
            pending = self._pending.pop(connect_key, None)
            looked = True
            if pending is not None:
                self._spawn(self._free_pending(pending))
        if len(self._handlers) > 64:
            live = {
                image.correlation_id
                for sub in (self._udp_handshake, self._ipc_handshake)
                if sub is not None
                for image in sub.images
            }
            self._handlers = {k: v for k, v in self._handlers.items() if k in live}
        return looked or bool(self._pending)

    # ------------------------------------------------------------------ HELLO

    def _schema_check(self) -> CompatibilityCheck:
        check = self._compatibility
        if check is None:
            ser = self.config.serialization  # frozen since the end point started: its schemas are final
            check = self._compatibility = CompatibilityCheck(ser.registration_hash, ser.schemas())
        return check

    def _check(self, hello: Hello, is_ipc: bool, address: str) -> _Refusal | None:
        cfg = self.config
        if self._closing or self._shutting_down:
            return RejectReason.SHUTTING_DOWN, "the server is shutting down"
        if hello.protocol_version != PROTOCOL_VERSION:
            return RejectReason.VERSION_MISMATCH, (
                f"client speaks handshake version {hello.protocol_version}, server {PROTOCOL_VERSION}"
            )
        mismatch = self._schema_check().verdict(hello.registration_hash, hello.schema)
        if mismatch is not None:
            detail: dict[str, int | str] = {  # names as long as a peer's schema may hold would not fit: cut
                "type_id": mismatch.type_id,
                "class": mismatch.class_name[:_DETAIL_NAME_LENGTH],
                "field": mismatch.field[:_DETAIL_NAME_LENGTH],
            }
            text = str(mismatch) if mismatch.class_name else mismatch.problem
            return RejectReason.SERIALIZATION_MISMATCH, text, detail
        live = len(self._connections) + len(self._pending)
        if cfg.max_clients and live >= cfg.max_clients:
            return RejectReason.SERVER_FULL, f"server is full ({cfg.max_clients} clients)"
        if is_ipc:
            return None
        if self._deny or self._allow:  # parsed only when asked about (a storm's HELLOs paid for it each)
            ip = ipaddress.ip_address(address)
            if any(ip in net for net in self._deny) or (self._allow and not any(ip in net for net in self._allow)):
                return RejectReason.FILTERED, f"{address} is not permitted"
        for rule in self._filters:
            try:
                allowed = rule(address, hello.tag)
            except Exception as exc:
                self._notify_error(None, exc)
                allowed = False
            if not allowed:
                return RejectReason.FILTERED, f"{address} is not permitted"
        if cfg.max_connections_per_ip and self._per_address.get(address, 0) >= cfg.max_connections_per_ip:
            return RejectReason.TOO_MANY_FROM_ADDRESS, (
                f"too many connections from {address} (at most {cfg.max_connections_per_ip})"
            )
        return None

    async def _on_hello(self, hello: Hello, is_ipc: bool, address: str, route_id: int = 0) -> None:
        """``route_id``: the session of the client's handshake publication (one per client route)."""
        handshake = self._handshake
        assert handshake is not None
        cfg = self.config
        timeout = cfg.handshake_timeout
        aeron = self._aeron()
        pending = _Pending(hello, is_ipc, address, _NO_IDS, route_id=route_id)
        if not handshake.is_pending(hello.connect_key):
            return  # evicted before we got to it
        try:
            port = hello.reply.get("port")
            if not is_ipc and (not isinstance(port, int) or not 0 < port < 65536):
                handshake.abandon(hello.connect_key)
                return
            if not is_ipc and self._backed_up(address, route_id):
                # Its answer would only queue behind the ones its client is not reading: dropped, counted, nothing
                # made (its resent HELLO, same cookie, is taken up afresh once the route drains).
                handshake.stats.overloaded += 1
                handshake.abandon(hello.connect_key)
                return
            assert self._admission is not None
            # An address with nothing under way is always taken on: a flood from other addresses holding the
            # handshakes in flight must not lock out a lone client (the half-open caps already made room for it).
            storming = is_ipc or self._per_address.get(address, 0) > 0
            retry_ms = self._admission.retry_after_ms(len(self._pending), time.monotonic_ns()) if storming else None
            if retry_ms is not None:
                await self._refuse_busy(pending, port, retry_ms)
                return
            refusal: _Refusal | None = self._check(hello, is_ipc, address)
            if refusal is None:
                try:
                    pending.ids = self._allocate_ids(6 if self._unreliable_streams(pending) else 4)
                except AllocationError as exc:
                    refusal = (RejectReason.IDS_EXHAUSTED, str(exc))
            if refusal is not None:
                self.rejections[refusal[0]] += 1
                route = await self._reply_route(pending, port)
                await wait_connected(route, timeout, aeron)
                await self._send_reply(route, handshake.reject(hello.connect_key, *refusal), timeout)
                self._keep_reply(hello.connect_key, pending)
                await self._free_pending(pending)
                return
            # Counted from now on, so that HELLOs arriving meanwhile see this one against the limits.
            self._pending[hello.connect_key] = pending
            if not is_ipc:
                self._per_address[address] = self._per_address.get(address, 0) + 1
                pending.counted = True
            session_in, session_out, stream_in, stream_out, *_ = pending.ids
            if is_ipc:
                sub_channel = data_channel(None, session_in, cfg.ipc_term_length, None)
                pub_channel = data_channel(None, session_out, cfg.ipc_term_length, None)
            else:
                sub_channel = data_channel(
                    f"{bracket(cfg.listen_address)}:{self._port}",
                    session_in,
                    None,
                    None,
                    max_term_length=cfg.term_length,
                )
                pub_channel = reply_channel(
                    self._control,
                    session_out,
                    address,
                    cfg.term_length,
                    cfg.mtu,
                    heartbeat_interval=cfg.heartbeat_interval,
                    tail_probe=cfg.tail_probe,
                )
            # The reply route and the connection's two streams at once (three driver round trips in parallel).
            # Our stream sends nothing until the client, on reading the grant, subscribes and names it; its
            # subscription asks for it at once, so the stream connects as soon as it does. The route is leased
            # first: with none to answer on, nothing is made.
            if not is_ipc:
                self._lease_reply(pending, port)
            made = await asyncio.gather(
                self._reply_route(pending, port),
                aeron.add_subscription_async(sub_channel, stream_in),
                aeron.add_exclusive_publication_async(pub_channel, stream_out),
                return_exceptions=True,
            )
            reply, subscription, publication = made
            if isinstance(subscription, Subscription):
                pending.subscription = subscription
            if isinstance(publication, ExclusivePublication):
                pending.publication = publication
            for outcome in made:
                if isinstance(outcome, BaseException):
                    raise outcome
            assert isinstance(reply, Publication)
            await wait_connected(reply, timeout, aeron)
            grant: dict[str, int | str | bytes | bool] = {
                "connection_id": session_in,
                "session_in": session_in,
                "session_out": session_out,
                "stream_in": stream_in,
                "stream_out": stream_out,
                "term_length": cfg.ipc_term_length if is_ipc else cfg.term_length,
                "mtu": cfg.mtu,
                "ipc": is_ipc,
                # Sealed when either end asks: the grant is sealed under the handshake, so both ends agree.
                "sealed": cfg.sealed or hello.sealed,
            }
            if len(pending.ids) == 6:
                # Newest-wins messages get a reliable=false stream each way (UDP, unsealed; opened on first use).
                grant["unreliable_session_in"], grant["unreliable_session_out"] = pending.ids[4:6]
            if cfg.buffered_sessions:
                grant["session_timeout_ms"] = int(cfg.session_timeout * 1000)  # an offer: a client may claim one
            await self._send_answer(pending, reply, handshake.accept(hello.connect_key, grant, time.time_ns()))
        except Exception as exc:
            # Evicted meanwhile, or no answer route free (the client asks again): nothing to report.
            quiet = not handshake.is_pending(hello.connect_key) or isinstance(exc, _NoAnswerRoute)
            if isinstance(exc, _NoAnswerRoute):
                handshake.stats.unanswered += 1
            handshake.abandon(hello.connect_key)
            self._pending.pop(hello.connect_key, None)
            await self._free_pending(pending)
            if not self._closing and not quiet:
                self._notify_error(None, ServerError(f"handshake with {address} failed: {type(exc).__name__}: {exc}"))

    def _backed_up(self, address: str, route_id: int) -> bool:
        """The answer route of this client route holds an answer its client has not read (back pressure)."""
        route = self._answer_routes.get((address, route_id))
        return route is not None and route.backlog > 0

    async def _refuse_busy(self, pending: _Pending, port: object, retry_ms: int) -> None:
        """SERVER_BUSY with a retry-after, sealed (the client believes it), before anything is made for the HELLO;
        offered once: a back-pressured route drops it (counted ``unanswered``) and the client's resend gets it."""
        handshake = self._handshake
        assert handshake is not None
        key = pending.hello.connect_key
        handshake.stats.busy += 1
        self.rejections[RejectReason.SERVER_BUSY] += 1
        text = f"the server is busy with other handshakes; try again in {retry_ms} ms"
        packet = handshake.reject(key, RejectReason.SERVER_BUSY, text, {RETRY_AFTER_KEY: retry_ms})
        route = await self._reply_route(pending, port)
        if not route.is_connected:
            await wait_connected(route, self.config.handshake_timeout, self._aeron())
        if route.offer(packet) < 0:
            handshake.stats.unanswered += 1
        self._keep_reply(key, pending)
        await self._free_pending(pending)

    async def _send_answer(self, pending: _Pending, reply: Publication, packet: bytes) -> None:
        """Send a grant; when its route is back-pressured past the handshake timeout, keep the handshake and what
        was made for it (the client's resent HELLO gets this answer again, see ``_resend``) instead of throwing it
        away for the client to make us build again. New HELLOs on that route are dropped meanwhile (``_backed_up``)."""
        if reply.offer(packet) >= 0:
            return
        handshake = self._handshake
        assert handshake is not None
        lease = pending.lease
        if lease is not None:
            lease.backlog += 1
        try:
            await self._send_reply(reply, packet, self.config.handshake_timeout)
        except TimeoutError:
            handshake.stats.unanswered += 1
            handshake.keep(pending.hello.connect_key, time.time_ns())
        finally:
            if lease is not None:
                lease.backlog -= 1

    async def _reply_route(self, pending: _Pending, port: object) -> Publication:
        """Where answers to this client go: the shared IPC reply stream, or a publication to its UDP reply port
        (the one :meth:`_lease_reply` leased, or one leased now)."""
        if pending.is_ipc:
            assert self._ipc_reply is not None
            pending.reply = self._ipc_reply
            return self._ipc_reply
        route = pending.lease if pending.lease is not None else self._lease_reply(pending, port)
        pending.reply = await asyncio.shield(route.opening)
        return pending.reply

    def _lease_reply(self, pending: _Pending, port: object) -> _AnswerRoute:
        """One use of this UDP client's answer route (see :meth:`_lease_answer_route`); _NoAnswerRoute if none."""
        assert isinstance(port, int)
        route = self._lease_answer_route(pending.address, port, pending.route_id)
        if route is None:
            raise _NoAnswerRoute(f"no answer route free for {pending.address}")
        pending.lease = route
        return route

    def _lease_answer_route(self, address: str, port: int, route_id: int) -> _AnswerRoute | None:
        """One use of the answer route of the client route ``route_id`` at ``address`` (opened if need be), or
        None when the caps are reached and no idle route of that address (or, for the total cap, of anyone) can
        give way."""
        # Per client route (its handshake publication's session, which the route's answers have too: the port the
        # HELLO names plays no part in where they go).
        key = (address, route_id)
        route = self._answer_routes.get(key)
        if route is None:
            route = self._take_back(key)
        if route is None or not route.usable:
            if self._session_held(key) or not self._room_for_route(address):
                return None
            # The route's session follows from the client's handshake publication's: its answer subscription names
            # it, so its status messages (and nobody else's, unless from its address) make this route send.
            channel = reply_channel(self._control, answer_session(route_id), address, 65536)
            opening = asyncio.ensure_future(self._aeron().add_exclusive_publication_async(channel, REPLY_STREAM_ID))
            route = _AnswerRoute(opening, route_id, address)
            self._file_route(route)
        route.users += 1
        return route

    def _evict_route(self, routes: list[_AnswerRoute]) -> bool:
        """Close the oldest of ``routes`` no handshake in flight uses (only kept answers and sent cookies hold it),
        one that sent no cookie within a handshake timeout if there is one. A client that got a cookie comes back
        on its route within a round trip: in a storm of clients with a route each, closing those routes (the
        oldest) left their clients' next HELLOs unanswered, and a route opened again for one of them clashed with
        the closing one's session, for seconds at a time."""
        busy = {id(p.lease) for p in self._pending.values() if p.lease is not None}
        # (Nor a route on its way with a cookie: see ``_AnswerRoute.bounces``.)
        idle = [route for route in routes if id(route) not in busy and route.bounces is None]  # oldest first
        if not idle:
            return False
        quiet_since = time.monotonic_ns() - int(self.config.handshake_timeout * 1e9)
        route = next((r for r in idle if r.bounced_ns < quiet_since), idle[0])
        for connect_key, (_, lease, _until) in list(self._finished_reply.items()):
            if lease is route:
                del self._finished_reply[connect_key]
                self._let_go_of_route(lease)
        if route.pinned:
            self._unpin(route)
        self._forget_route(route)
        return True

    def _take_back(self, key: tuple[str, int]) -> _AnswerRoute | None:
        """The answer route of client route ``key`` that was let go and is not closed yet, filed again (within the
        caps, as a new one would be), or None."""
        closing = self._closing_routes.pop(key, None)
        if closing is None:
            return None
        route = closing[0]
        if not route.usable or not self._room_for_route(route.address):
            self._close_route(route)
            return None
        self._file_route(route)
        return route

    def _room_for_route(self, address: str) -> bool:
        """Room for one more answer route to ``address`` within the caps, made by closing an idle one if need be."""
        cfg = self.config
        if self._routes_from.get(address, 0) >= cfg.max_answer_routes_per_source and not self._evict_route(
            [r for r in self._answer_routes.values() if r.address == address]
        ):
            return False
        return len(self._answer_routes) < cfg.max_answer_routes or self._evict_route(list(self._answer_routes.values()))

    def _close_routes_let_go(self, now_ns: int | None) -> None:
        """Close the answer routes let go whose time is up (all of them when ``now_ns`` is None)."""
        closing = self._closing_routes
        while closing:
            key, (route, close_at_ns) = next(iter(closing.items()))
            if now_ns is not None and now_ns < close_at_ns:
                return
            del closing[key]
            self._close_route(route)

    def _close_route(self, route: _AnswerRoute) -> None:
        def close(opening: asyncio.Future[ExclusivePublication]) -> None:
            if not opening.cancelled() and opening.exception() is None:
                self._spawn(self._close_quietly(opening.result()))

        # Held from now on (a HELLO on its client route may be handled before the close itself runs).
        held = self._sessions_held
        key = (route.address, route.route_id)
        held.pop(key, None)  # (to the end: oldest first)
        held[key] = time.monotonic_ns() + _SESSION_HELD_NS
        if len(held) > 4 * self.config.max_answer_routes:
            del held[next(iter(held))]
        route.opening.add_done_callback(close)

    def _session_held(self, key: tuple[str, int]) -> bool:
        """The driver may still hold the session of the answer route we closed for client route ``key``."""
        until = self._sessions_held.get(key)
        if until is None:
            return False
        if time.monotonic_ns() < until:
            return True
        del self._sessions_held[key]
        return False

    def _file_route(self, route: _AnswerRoute) -> None:
        """``route`` into ``_answer_routes`` under its client route (replacing an unusable one of that key)."""
        key = (route.address, route.route_id)
        if key not in self._answer_routes:
            self._routes_from[route.address] = self._routes_from.get(route.address, 0) + 1
        self._answer_routes[key] = route

    def _forget_route(self, route: _AnswerRoute) -> None:
        """``route`` out of ``_answer_routes`` (if it is still the one filed under its client route)."""
        key = (route.address, route.route_id)
        if self._answer_routes.get(key) is route:
            del self._answer_routes[key]
            left = self._routes_from[route.address] - 1
            if left:
                self._routes_from[route.address] = left
            else:
                del self._routes_from[route.address]

    def _let_go_of_route(self, route: _AnswerRoute, *, client_gone: bool = False) -> None:
        """One use of ``route`` ended; unused, it closes after a handshake timeout (see ``_closing_routes``), or at
        once when its client route is gone (a new client route has a session of its own)."""
        route.users -= 1
        if route.users > 0:
            return
        key = (route.address, route.route_id)
        filed = self._answer_routes.get(key) is route
        self._forget_route(route)
        if client_gone or not filed or self._shutting_down or not route.usable:
            self._close_route(route)
            return
        closing = self._closing_routes
        previous = closing.pop(key, None)
        if previous is not None:
            self._close_route(previous[0])
        while len(closing) >= self.config.max_answer_routes:  # (as many as may be open, at most)
            self._close_route(closing.pop(next(iter(closing)))[0])
        closing[key] = (route, time.monotonic_ns() + int(_PARKED_TIMEOUTS * self.config.handshake_timeout * 1e9))

    def _id_allocators(self) -> tuple[IdAllocator, ...]:
        """What each of a connection's ids comes from: sessions and streams of its reliable pair, then the sessions
        of its unreliable pair (same streams; a session id is unique on a driver)."""
        sessions, streams = self._session_ids, self._stream_ids
        return (sessions, sessions, streams, streams, sessions, sessions)

    def _allocate_ids(self, count: int) -> tuple[int, ...]:
        """The first ``count`` of a connection's ids: 4 (the reliable pair), or 6 (and the unreliable pair)."""
        now = time.monotonic_ns()
        taken: list[tuple[IdAllocator, int]] = []
        try:
            for allocator in self._id_allocators()[:count]:
                taken.append((allocator, allocator.allocate(now)))
        except AllocationError:
            for allocator, value in taken:
                allocator.release(value, now)
            raise
        return tuple(value for _, value in taken)

    def _release_ids(self, ids: tuple[int, ...]) -> None:
        if ids == _NO_IDS:
            return
        now = time.monotonic_ns()
        for allocator, value in zip(self._id_allocators()[: len(ids)], ids, strict=True):
            if allocator.is_live(value):
                allocator.release(value, now)

    async def _send_reply(self, publication: Publication, packet: bytes, timeout: float) -> None:
        await offer_async(publication, packet, timeout=timeout)

    async def _free_pending(self, pending: _Pending) -> None:
        if (pending.publication is not None or pending.subscription is not None) and self._handshake is not None:
            self._handshake.stats.discarded += 1
        self._release_ids(pending.ids)
        if pending.counted:
            pending.counted = False
            self._leave_address(pending.address)
        if pending.lease is not None:
            self._let_go_of_route(pending.lease)
            pending.lease = None
        for resource in (pending.publication, pending.subscription):
            if resource is not None:
                await self._close_quietly(resource)

    def _leave_address(self, address: str) -> None:
        count = self._per_address.get(address, 0) - 1
        if count > 0:
            self._per_address[address] = count
        else:
            self._per_address.pop(address, None)

    # ------------------------------------------------------------------ DONE

    async def _on_done(self, done: Done) -> None:
        handshake = self._handshake
        assert handshake is not None
        pending = self._pending.pop(done.connect_key, None)
        if pending is None:
            return
        if self._shutting_down:
            handshake.abandon(done.connect_key)
            await self._free_pending(pending)
            return
        timeout = self.config.handshake_timeout
        session: Session | None = None
        granted: SessionGranted | None = None
        try:
            assert pending.subscription is not None
            assert pending.publication is not None
            assert pending.reply is not None
            aeron = self._aeron()
            # The client subscribed before sending DONE: our publication is connected, or will be at once.
            # As long as the client keeps resending DONE (three sends, each wait longer), within the 3 handshake
            # timeouts the handshake may idle: a starved client's streams connect late, and giving up first
            # threw them away for the client to make us build them again.
            patience = _DONE_PATIENCE * timeout
            await wait_connected(pending.publication, patience, aeron)
            await wait_image(pending.subscription, patience, aeron)
            connection = Connection(
                self,
                connection_id=done.connection_id,
                publication=pending.publication,
                subscription=pending.subscription,
                is_ipc=pending.is_ipc,
                remote_address="ipc" if pending.is_ipc else f"{pending.address}:{pending.hello.reply['port']}",
                on_released=self._connection_released,
            )
            if len(pending.ids) == 6:
                cfg = self.config
                _, _, stream_in, stream_out, u_session_in, u_session_out = pending.ids
                connection.unreliable_channels = (
                    (
                        data_channel(
                            f"{bracket(cfg.listen_address)}:{self._port}",
                            u_session_in,
                            None,
                            None,
                            max_term_length=cfg.term_length,
                            reliable=False,
                        ),
                        stream_in,
                    ),
                    (
                        reply_channel(
                            self._control,
                            u_session_out,
                            pending.address,
                            cfg.term_length,
                            cfg.mtu,
                            heartbeat_interval=cfg.heartbeat_interval,
                        ),
                        stream_out,
                    ),
                )
            if self.config.sealed or pending.hello.sealed:
                connection._seal_with(done.keys, client=False, inbound_session_id=pending.ids[0])
            session, granted = self._take_session(done.session)
            await self._send_reply(pending.reply, handshake.complete(done.connect_key, granted), timeout)
        except Exception as exc:
            if session is not None and session.connection is None:
                session.log.detach(time.monotonic_ns())  # resumed on paper only: it still waits for its client
            handshake.abandon(done.connect_key)
            await self._free_pending(pending)
            if not self._closing:
                self._notify_error(
                    None, ServerError(f"handshake with {pending.address} failed at DONE: {type(exc).__name__}: {exc}")
                )
            return
        self._ids_of[connection.id] = pending.ids
        if not pending.is_ipc:
            self._address_of[connection.id] = pending.address
        self._keep_reply(done.connect_key, pending)
        self.handshakes_accepted += 1
        if self._admission is not None:
            self._admission.finished(time.monotonic_ns())
        if session is not None and granted is not None:
            session.attach(connection, resumed=granted.resumed)
        self._add_connection(connection)
        if self._shutting_down:  # close began while this handshake finished: it goes the way of the others
            await connection.close(END_POINT_CLOSED)

    def _unreliable_streams(self, pending: _Pending) -> bool:
        """This connection carries newest-wins messages on streams of their own (else on its reliable stream)."""
        cfg = self.config
        return cfg.unreliable_streams and not pending.is_ipc and not (cfg.sealed or pending.hello.sealed)

    def _take_session(self, claim: SessionClaim | None) -> tuple[Session | None, SessionGranted | None]:
        """The session a DONE claims, resumed or opened, and the answer for DONE_ACK; (None, None) when the client
        claimed none, this server offers none, or the table is full of connected sessions."""
        cfg = self.config
        if claim is None or not cfg.buffered_sessions:
            return None, None
        now = time.monotonic_ns()
        log = SessionLog(max_messages=cfg.max_buffered_messages, max_bytes=cfg.max_buffered_bytes, now_ns=now)
        fresh = Session(
            session_id=self._last_session_number + 1,
            public_key=claim.public_key,
            log=log,
            encode=cfg.serialization.encode,
            send_timeout=cfg.send_timeout,
            timeout=cfg.session_timeout,
        )
        opened = self._sessions.open(claim.public_key, now, fresh, log)
        self._tell_evicted()
        if opened is None:
            return None, None
        session, resumed = opened
        if not resumed:
            self._last_session_number += 1
        old = session.connection
        if old is not None:
            # The client came back before its old connection timed out here (killed and restarted, or its
            # network changed): the new connection takes the session, the old one goes without a goodbye.
            session.detach(old, now)
            old._lose(SESSION_TAKEN_OVER)
        sync = session.resume(claim.sync, now)
        return session, SessionGranted(session.id, resumed, sync)

    def _tell_evicted(self) -> None:
        table = self._sessions
        for session in table.evicted:
            self._end_session(session, "evicted")
        table.evicted.clear()

    def _end_session(self, session: Session, reason: str) -> None:
        """Drop a session the table let go of (expired or evicted): what it kept, and tell the listeners."""
        old = session.connection
        dropped = session.end(reason)
        if old is not None:
            old._lose(f"session {reason}")
        _log.info("buffered session %d %s; %d kept message(s) dropped", session.id, reason, dropped)
        self._tell(self.listeners.session_expired, session)

    def _keep_reply(self, connect_key: int, pending: _Pending) -> None:
        """Keep the answer route open a while, so a client that lost the last answer can get it again."""
        if pending.reply is not None:
            self._keep(connect_key, pending.reply, pending.lease)
            pending.lease = None

    def _keep(self, connect_key: int, reply: Publication, lease: _AnswerRoute | None) -> None:
        """Keep ``connect_key``'s last answer route a while (``lease``: a use of it, now ours). At most
        ``_max_kept`` are kept: past that the oldest is let go (its client asking again is ``unanswered``)."""
        until = time.monotonic_ns() + int(self.config.handshake_timeout * 2e9)
        if lease is not None:
            self._pin(lease)
        previous = self._finished_reply.pop(connect_key, None)
        if previous is not None and previous[1] is not None:
            self._let_go_of_route(previous[1])
        while len(self._finished_reply) >= self._max_kept:
            _, oldest, _until = self._finished_reply.pop(next(iter(self._finished_reply)))
            if oldest is not None:
                self._let_go_of_route(oldest)
            if self._handshake is not None:
                self._handshake.stats.unanswered += 1
        self._finished_reply[connect_key] = (reply, lease, until)

    @property
    def _max_kept(self) -> int:
        cfg = self.config
        return 4 * (cfg.max_pending_handshakes + cfg.max_answer_routes)

    def _pin(self, route: _AnswerRoute) -> None:
        """``route`` holds itself (one use) while its client's route lives: see :meth:`_let_go_of_replies`."""
        if not route.pinned:
            route.pinned = True
            route.users += 1

    def _let_go_of_replies(self, now_ns: int | None) -> None:
        """Let go of the kept answer routes whose time is up or whose client route is gone (its handshake
        publication ended: nobody is left to ask again); of all of them when ``now_ns`` is None."""
        sub = self._udp_handshake
        live = {image.session_id for image in sub.images if not image.is_end_of_stream} if sub is not None else set()
        for connect_key, (_, lease, until) in list(self._finished_reply.items()):
            gone = lease is not None and lease.route_id not in live
            if now_ns is None or now_ns >= until or gone:
                del self._finished_reply[connect_key]
                if lease is not None:
                    self._let_go_of_route(lease, client_gone=gone)
        for route in list(self._answer_routes.values()):
            if route.pinned and (now_ns is None or route.route_id not in live):
                self._unpin(route, client_gone=True)

    def _unpin(self, route: _AnswerRoute, *, client_gone: bool = False) -> None:
        route.pinned = False
        self._let_go_of_route(route, client_gone=client_gone)

    async def _close_quietly(self, resource: Publication | Subscription) -> None:
        try:
            await resource.close_async()
        except Exception as exc:  # the driver may be gone; nothing else to free
            _log.debug("closing %r failed: %s", resource, exc)

    def _connection_released(self, connection: Connection) -> None:
        super()._connection_released(connection)
        session = connection.session
        if session is None or session.connection is not connection:
            return
        if connection.lost:
            session.detach(connection)  # its client may come back within session_timeout
            return
        if self._sessions.get(session.public_key) is session:
            self._sessions.close(session.public_key)
        session.end(connection.close_reason or "closed")  # a goodbye ends the session for good

    def _after_connection_closed(self, connection: Connection) -> None:
        ids = self._ids_of.pop(connection.id, None)
        if ids is not None:
            self._release_ids(ids)
        address = self._address_of.pop(connection.id, None)
        if address is not None:
            self._leave_address(address)

    # ------------------------------------------------------------------ closing and restarting

    async def close(self) -> None:
        self._shutting_down = True
        await super().close()
        for session in self._sessions.clear():
            session.end("the server closed")

    async def _close_extra(self) -> None:
        for pending in list(self._pending.values()):
            await self._free_pending(pending)
        self._pending.clear()
        self._let_go_of_replies(None)
        self._close_routes_let_go(None)
        for resource in (self._udp_handshake, self._ipc_handshake, self._ipc_reply, self._control_anchor):
            if resource is not None:
                await self._close_quietly(resource)
        self._udp_handshake = self._ipc_handshake = None
        self._ipc_reply = None
        self._control_anchor = None
        if self._port_claim is not None:
            self._port_claim.close()
            self._port_claim = None
        self._handlers.clear()
        self._image_watches.clear()
        self._bound = False
        self._stopped.set()

    async def _drop_driver_resources(self) -> None:
        for pending in self._pending.values():
            self._release_ids(pending.ids)
        self._pending.clear()
        self._per_address.clear()
        self._finished_reply.clear()
        self._answer_routes.clear()
        self._closing_routes.clear()
        self._sessions_held.clear()
        self._routes_from.clear()
        self._udp_handshake = self._ipc_handshake = None
        self._ipc_reply = None
        self._control_anchor = None
        self._handlers.clear()
        self._image_watches.clear()
        self._bound = False

    async def _after_restart(self) -> None:
        """Re-bind on the same port, retrying while the network is still away (until closed)."""
        delay = 0.05
        while not self._closing:
            try:
                await self._open_handshake_streams()
            except ServerError as exc:
                _log.info("re-binding after a driver restart failed, retrying: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            self._bound = True
            return
