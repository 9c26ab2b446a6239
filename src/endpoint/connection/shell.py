"""A connection between two end points: the asyncio shell over the connection's protocol core.

Theory of operation. The protocol itself is pure (:class:`~endpoint.connection.core.ConnectionCore`:
reassembly, opening sealed messages, decoding, dropping what breaks the protocol, routing, liveness from a
time passed in); every send goes through the connection's :class:`~endpoint.connection.outbox.Outbox` (one guard, one
offer, one queue behind back pressure). What is left here is what needs the loop: the end point's poller
calls :meth:`Connection._poll`, which feeds the peer's fragments to the core, and the core hands user
messages back to :meth:`Connection._dispatch`. Sync listeners run right there; a message whose listeners are
async goes to the connection's inbox, drained in order by one worker task that exists only while the inbox
is non-empty — so later messages (and ``on_disconnect``) never overtake an earlier one, and a slow listener
holds back only its own connection (the poller stops reading it while the inbox is full, which pushes back
on the sender through the log). ``on_connect`` and ``on_disconnect`` go through the same inbox.

Remote calls (:mod:`endpoint.rpc.calls`) and streams (:mod:`endpoint.streaming`) ride the same publication; their
control messages are routed by the core at once, never queued behind listeners.

Newest-wins messages (:meth:`Connection.send_unreliable`, :mod:`endpoint.connection.newest`) go, on a UDP connection
that is not sealed and whose server allows it, on a second Aeron stream each way whose subscription says
``reliable=false``: its receiver pads over loss instead of asking for it again, so a lost snapshot holds back none
after it. Each end opens its half when it needs it: the sender its publication on its first newest-wins send (until
that publication is connected, frames go on the reliable stream), the receiver its subscription when the first frame
reaches it that way. A connection that never sends one costs the driver nothing more.

A sealed connection (:mod:`endpoint.connection.sealing`) seals every message in the outbox's one ``offer`` and opens
every whole message of the peer's in the core before anything reads it; an unsealed one binds those to the
plain publication offer and decoder, so its path and cost are what they were.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import itertools
import os
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from driver.client.publication import ADMIN_ACTION, CLOSED, NOT_CONNECTED, Publication
from driver.client.subscription import Image, Subscription
from driver.concurrent.counters import CountersReader
from driver.concurrent.system_counters import RECEIVER_HWM_TYPE_ID
from driver.logbuffer.frame import QUIET_RESERVED_VALUE
from endpoint.config import Configuration
from endpoint.connection.core import ConnectionCore
from endpoint.connection.liveness import Verdict
from endpoint.connection.newest import Sequencer, frame
from endpoint.connection.outbox import Outbox
from endpoint.connection.sealing import OVERHEAD, Opener, Sealer
from endpoint.errors import (
    SEAL_FAILED,
    ConnectionClosedError,
    MalformedMessageError,
    MessageTooLargeError,
    SealError,
    SerializationError,
    UnhandledMessageError,
)
from endpoint.listeners import ListenerManager
from endpoint.messages import (
    SAMPLE_SEQ,
    Disconnect,
    Ping,
    Pong,
    RpcCall,
    RpcCancel,
    RpcFailure,
    RpcReply,
    StreamAbort,
    StreamCancel,
    StreamEnd,
    StreamOpen,
)
from endpoint.rpc.calls import ConnectionRpc, RpcRegistry
from endpoint.streaming import MESSAGE, Progress, StreamManager, StreamSource

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from endpoint.connection.buffered import Session
    from endpoint.handshake.protocol import SealingKeys

__all__ = ["Connection", "ConnectionOwner", "UnhandledMessageError"]

_INBOX_LIMIT = 4096
"""Messages waiting for async listeners before the poller stops reading this connection."""
_POLL_LIMIT = 64
_MESSAGE, _CONNECT, _DISCONNECT = 0, 1, 2
_QUEUED_CONTROL_ROOM = 1024
"""Internal messages beyond answers to calls one connection may have waiting on back pressure."""
CLIENT_TO_SERVER, SERVER_TO_CLIENT = 1, 2
"""Directions of a sealed connection (in each message's nonce and associated data)."""


_HWM_RESCAN_NS = 1_000_000_000
_hwm_index: weakref.WeakKeyDictionary[CountersReader, tuple[int, dict[int, int]]] = weakref.WeakKeyDictionary()
"""Per counters file: when it was last scanned, and its receiver high-water mark counters by image registration id."""


def _hwm_counter_of(reader: CountersReader, registration_id: int) -> int:
    """The receiver high-water mark counter of an image, -1 if none. One scan of the counters serves every
    connection (a thousand going quiet at once, as when the server falls behind, cost one scan, not a thousand);
    an image the index lacks makes a new scan at most once a second."""
    now_ns = time.monotonic_ns()
    entry = _hwm_index.get(reader)
    if entry is None or (registration_id not in entry[1] and now_ns - entry[0] > _HWM_RESCAN_NS):
        entry = _hwm_index[reader] = (now_ns, reader.ids_by_registration_id(RECEIVER_HWM_TYPE_ID))
    return entry[1].get(registration_id, -1)


def _quiet_value(_term: object, _offset: int, _length: int) -> int:
    return QUIET_RESERVED_VALUE


class _Poker(Protocol):
    def poke(self) -> None: ...


class ConnectionOwner(Protocol):
    """What a connection needs of its end point: :class:`endpoint.base.EndPoint`, seen from below (the end
    point imports this module, not the other way round)."""

    listeners: ListenerManager[Connection]
    rpc: RpcRegistry
    malformed_messages: int
    seal_failures: int
    sequencer: Sequencer

    @property
    def config(self) -> Configuration: ...

    @property
    def _loop_poller(self) -> _Poker | None: ...

    def _poke_poller(self) -> None: ...

    def _notify_error(self, connection: Connection | None, error: BaseException) -> None: ...

    def _on_unhandled(self, connection: Connection, message_type: type) -> None: ...

    def _spawn(self, coro: Any, connection: Connection | None = None) -> asyncio.Task[Any]: ...

    def _loop_call_soon(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def _poll_set_changed(self, connection: Connection) -> None: ...

    def _attend(self, connection: Connection) -> None: ...

    async def _add_stream(self, channel: str, stream_id: int, publication: bool) -> Publication | Subscription: ...


class Connection:
    """One peer. ``id`` is the same number on both ends (the server's inbound session id)."""

    def __init__(
        self,
        endpoint: ConnectionOwner,
        *,
        connection_id: int,
        publication: Publication,
        subscription: Subscription,
        is_ipc: bool,
        remote_address: str,
        on_released: Callable[[Connection], None] | None = None,
        keepalive: bool = True,
    ) -> None:
        """``keepalive`` is kept for callers of old; both ends now send keepalives (see :mod:`~.liveness`)."""
        self._endpoint = endpoint
        self.id = connection_id
        self.is_ipc = is_ipc
        self.remote_address = remote_address
        """``host:port`` of the peer, or ``"ipc"``."""
        self._pub = publication
        self._native_offer: Callable[[Buffer], int] | None = (
            publication.native_offer if endpoint.config.native_dispatch else None
        )
        """``send_nowait``'s one native call to the log while unsealed (None once sealed: ``outbox.offer`` seals)."""
        self._sub = subscription
        self._image: Image | None = None
        self.may_hold_more = False
        """The last poll read as many fragments as a poll takes: more may wait (the poller polls again)."""
        self._on_released = on_released
        config = endpoint.config
        self._encode: Callable[[object], bytes] = config.serialization.encode
        self._decode = config.serialization.decode
        self._native_dispatch: Callable[..., None] | None = (
            getattr(config.serialization, "native_dispatch", None) if config.native_dispatch else None
        )
        """The codec's native poll-and-dispatch (``Configuration.native_dispatch``), or None: the Python path."""
        self._listeners = endpoint.listeners
        self._dispatch_args: tuple[Any, ...] | None = None
        """:meth:`_make_dispatch_args`, made at the first poll and again when the listeners change."""
        self._max_length = publication.max_message_length
        poller = endpoint._loop_poller
        self._poke: Callable[[], None] = poller.poke if poller is not None else endpoint._poke_poller
        self._inbox: collections.deque[tuple[tuple[Callable[..., Any], ...], Any, int, int]] = collections.deque()
        self._inbox_bytes = 0
        """Encoded bytes of the messages in the inbox (they count against ``max_incoming_bytes``)."""
        self._max_held = config.max_incoming_bytes
        self._worker: asyncio.Task[None] | None = None
        self._pings: dict[int, asyncio.Future[float]] = {}
        self._ping_seq = itertools.count(1)
        self._closed = False
        self._closed_event = asyncio.Event()
        self.close_reason = ""
        """Why the connection closed: the peer's reason for a graceful remote close, or what happened."""
        self.closed_by_peer = False
        self.lost = False
        """True when the connection ended without a graceful close (peer timed out or vanished, driver failed)."""
        self.malformed_messages = 0
        """Messages of the peer's dropped as malformed: undecodable, empty, or internal ones with bad fields."""
        self.unhandled_messages = 0
        """Messages of the peer's dropped because no listener takes their type (see ``on_unhandled``)."""
        self.rtt: float | None = None
        """Round-trip time in seconds of the last answered ping."""
        self._sample_wanted = False
        """The next keepalive is to be a ping the peer answers: a round-trip sample is due (see
        :mod:`endpoint.connection.counters`)."""
        self.probes = 0
        """Times the peer, silent for two ping intervals, was asked to answer at once (see
        :attr:`~endpoint.connection.liveness.Verdict.PROBE`): a lossy path, or a peer dying."""
        self.sealed = False
        """Every message each way is sealed (see :meth:`_seal_with`)."""
        self.session: Session | None = None
        """The buffered session this connection carries (the same object on every connection of the session), or
        None: sends then go through it (kept until acknowledged, delivered once and in order across reconnects)."""
        self.resumed = False
        """This connection resumed a buffered session that an earlier connection carried."""
        report = functools.partial(endpoint._notify_error, self)
        """Errors while handling this connection's messages reach ``on_error`` with it (and no other end point)."""
        self.outbox = Outbox(
            offer=publication.offer,
            encode=self._encode,
            poke=self._poke,
            send_timeout=config.send_timeout,
            later_limit=config.max_pending_calls + _QUEUED_CONTROL_ROOM,
            closed_error=self._closed_error,
            report=report,
            name=self.__repr__,
        )
        """Every send of this connection, its calls and its streams goes through here (see :mod:`~.outbox`)."""
        if not is_ipc:
            self.outbox.quiet_offer = self._offer_quiet
        self._hwm_counter_id: int | None = None
        """The receiver high-water mark counter of the peer's image (UDP), looked up once it is needed."""
        self._sealer: Sealer | None = None
        self._refused: Buffer | None = None
        self._refused_sealed: bytes | None = None
        self._paused = 0
        self._held_calls = 0
        self._newest_classes = config.serialization.unreliable
        self.unreliable_channels: tuple[tuple[str, int], tuple[str, int]] | None = None
        """Where this connection's unreliable streams go, (subscription, publication) as (channel, stream id), when
        it may have them (set by the end point that made it); None: newest-wins messages ride the reliable stream."""
        self._u_pub: Publication | None = None
        self._u_sub: Subscription | None = None
        self._u_image: Image | None = None
        self._u_room = 0
        self._u_opening = 0
        self._u_flowing = False
        self.groups: set[Any] = set()
        """The server's groups (:mod:`endpoint.groups`) this connection is in; it leaves them all when it closes."""
        self.unreliable_sent = 0
        """Newest-wins messages handed to the driver (on either stream)."""
        self.unreliable_dropped = 0
        """Newest-wins messages dropped here: back pressure refused them (the next one supersedes them anyway)."""
        self.rpc = ConnectionRpc(self, endpoint.rpc, config=config, report=report)
        """Objects exposed to this peer only, and proxies of the peer's objects."""
        self.streams = StreamManager(
            self,
            config=config,
            stream_listeners=lambda: endpoint.listeners.stream,
            pause_reading=self._pause_reading,
            resume_reading=self._resume_reading,
            listener_bytes=lambda: self._inbox_bytes,
            report=report,
            spawn=functools.partial(endpoint._spawn, connection=self),
        )
        rpc, streams = self.rpc, self.streams
        self._internal: dict[type, Callable[[Any], None]] = {
            RpcCall: self._on_rpc_call,
            RpcReply: rpc._on_reply,
            RpcFailure: rpc._on_failure,
            RpcCancel: rpc._on_cancel,
            StreamOpen: streams.on_open,
            StreamEnd: streams.on_end,
            StreamAbort: streams.on_abort,
            StreamCancel: streams.on_cancel,
        }
        self._core = ConnectionCore(
            decode=self._decode,
            now_ns=time.monotonic_ns(),
            ping_interval_ns=int(config.ping_interval * 1e9),
            peer_timeout_ns=int(config.peer_timeout * 1e9),
            max_inbound_length=self._max_length,
            deliver=self._dispatch,
            route=self._route,
            chunk=streams.on_chunk,
            send_control=self.outbox.send_control,
            pong=self._on_pong,
            peer_closed=self._on_peer_closed,
            malformed=self._malformed,
            undecodable=self._on_undecodable,
            malformed_call=rpc.on_malformed_call,
            seal_failed=self._seal_failed,
            report=report,
        )
        """The protocol without I/O (:mod:`endpoint.connection.core`): reassembly, opening, decoding, liveness."""
        streams.deliver_whole = self._core.on_message
        streams.attend = self._attend

    # ------------------------------------------------------------------ state

    @property
    def endpoint(self) -> ConnectionOwner:
        return self._endpoint

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def max_message_length(self) -> int:
        return self._max_length

    @property
    def outbound(self) -> tuple[str, int]:
        """Channel and stream id this end publishes to the peer on (what an archive records)."""
        return self._pub.channel, self._pub.stream_id

    @property
    def inbound(self) -> tuple[str, int]:
        """Channel and stream id this end reads the peer from."""
        return self._sub.channel, self._sub.stream_id

    @property
    def messages_sent(self) -> int:
        return self.outbox.sent

    @property
    def dropped_answers(self) -> int:
        """Internal messages (RPC answers, stream cancels) dropped because too many already waited on back pressure."""
        return self.outbox.dropped_answers

    @property
    def _closing(self) -> bool:
        return self.outbox.closing

    @property
    def messages_received(self) -> int:
        """Messages (fragments) read from the peer, keepalives included."""
        return self._core.heard

    @property
    def unreliable_received(self) -> int:
        """Newest-wins messages of the peer's delivered (newer than any before them of their class)."""
        return self._core.newest_delivered

    @property
    def unreliable_stale(self) -> int:
        """Newest-wins messages of the peer's dropped as stale: a newer one of their class was delivered already."""
        return self._core.newest.stale

    @property
    def unreliable_stream(self) -> bool:
        """Newest-wins messages to the peer go on the ``reliable=false`` stream now (it is open and connected)."""
        pub = self._u_pub
        return pub is not None and pub.is_connected

    @property
    def seal_failures(self) -> int:
        """Messages of the peer's that did not open (the first one closes the connection)."""
        return self._core.seal_failures

    def __repr__(self) -> str:
        transport = "ipc" if self.is_ipc else "udp"
        state = "closed" if self._closed else "open"
        return f"<Connection {self.id} {transport} {self.remote_address} {state}>"

    # ------------------------------------------------------------------ sealing

    def _seal_with(self, keys: SealingKeys | None, *, client: bool, inbound_session_id: int) -> None:
        """Seal this connection from now on (before anything is sent or read on it): both ends call it, the
        server at DONE, the client at DONE_ACK, when the grant says the connection is sealed.

        ``inbound_session_id``: the session of the peer's publication (the image we read), bound into the
        associated data with our connection id and the direction."""
        if keys is None:
            raise SealError("a sealed connection needs the handshake's sealing keys")
        send_key, receive_key = (
            (keys.client_to_server, keys.server_to_client) if client else (keys.server_to_client, keys.client_to_server)
        )
        out, back = (CLIENT_TO_SERVER, SERVER_TO_CLIENT) if client else (SERVER_TO_CLIENT, CLIENT_TO_SERVER)
        self._sealer = Sealer(send_key, connection_id=self.id, session_id=self._pub.session_id, direction=out)
        self._core.open_with(Opener(receive_key, connection_id=self.id, session_id=inbound_session_id, direction=back))
        self.outbox.offer = self._offer_sealed
        self._native_offer = None
        self._max_length = self._pub.max_message_length - OVERHEAD
        self.sealed = True
        self.unreliable_channels = None  # only the reliable stream is sealed: newest-wins messages ride it

    def _offer_sealed(self, data: Buffer) -> int:
        """Seal under the next counter and offer. A refused message offered again (the same object: a retry under
        back pressure) goes with the bytes sealed the first time, so waiting costs no sealing and no counters;
        whatever else goes out meanwhile only reorders counters within the peer's replay window."""
        sealed = self._refused_sealed if data is self._refused else None
        if sealed is None:
            sealer = self._sealer
            assert sealer is not None
            sealed = sealer.seal(data)  # type: ignore[arg-type]  # any buffer: AES-GCM reads it in place
        result = self._pub.offer(sealed)
        if result < 0:
            self._refused, self._refused_sealed = data, sealed
        elif self._refused is not None:
            self._refused = self._refused_sealed = None
        return result

    def _offer_quiet(self, data: Buffer) -> int:
        """Offer a keepalive marked for the driver to send no tail probe after it (the next keepalive follows, and a
        lost one is asked for again then; see ``driver.logbuffer.frame.QUIET_RESERVED_VALUE``), sealed if the
        connection is."""
        sealer = self._sealer
        return self._pub.offer(data if sealer is None else sealer.seal(data), reserved_value_supplier=_quiet_value)  # type: ignore[arg-type]

    def _join_session(self, session: Session, resumed: bool) -> None:
        """Carry ``session`` (before anything is read): its frames go to it, sends through it."""
        self.session = session
        self._attend()
        self.resumed = resumed
        self._core.on_session = functools.partial(session.on_frame, self)

    def _seal_failed(self, exc: SealError) -> None:
        """A forged, replayed or tampered message holds its place in the log, so the connection cannot go on:
        count it, report it with this connection, tell the peer (sealed, so it believes us) and close."""
        self._endpoint.seal_failures += 1
        reason = f"{SEAL_FAILED}: {exc}"
        self._endpoint._notify_error(self, SealError(f"{self!r}: {exc}; the connection closes"))
        if not self._closing:
            self.outbox.send_control(Disconnect(reason))
            self._lose(reason)

    # ------------------------------------------------------------------ sending

    def send_nowait(self, message: object) -> bool:
        """Hand ``message`` to the driver now; False when back pressure (or a reconnecting peer) refused it.

        Raises ConnectionClosedError when closed, MessageTooLargeError or
        SerializationError for a message that can never be sent. A class registered ``unreliable=True`` goes
        :meth:`send_unreliable`. On a buffered session: True once kept (SessionBufferFullError at its bounds), even
        after the connection was lost.
        """
        if type(message) in self._newest_classes:
            return self.send_unreliable(message)
        if self.session is not None:
            return self.session.send_nowait(message)
        # The common path with no call of its own: the outbox's guard and the length check written out.
        outbox = self.outbox
        if outbox.closing:
            raise self._closed_error()
        data = self._encode(message)
        if len(data) > self._max_length:
            raise MessageTooLargeError(
                f"{type(message).__name__} encodes to {len(data)} bytes; this connection carries at most "
                f"{self._max_length} (raise term_length, or stream it)"
            )
        # offer_now written out for the common case (nothing queued, the log open, written at once); the rest its way.
        native_offer = self._native_offer
        if native_offer is not None and not outbox._backlog and not self._pub._is_closed and native_offer(data) > 0:
            outbox.sent += 1
            self._poke()
            return True
        return outbox.offer_now(data)

    def _offer_encoded(self, data: bytes, poke: bool = True) -> bool:
        """``send_nowait`` of a message encoded already (a broadcast's one encoding, checked against every member's
        length bound by the caller): its common path written out the same way, the rest through the outbox.
        ``poke``: poke the poller (a broadcast pokes once per end point instead, see ``groups.offer_each``)."""
        outbox = self.outbox
        if outbox.closing:
            raise self._closed_error()
        native_offer = self._native_offer
        if native_offer is not None and not outbox._backlog and not self._pub._is_closed and native_offer(data) > 0:
            outbox.sent += 1
            if poke:
                self._poke()
            return True
        return outbox.offer_now(data, poke)

    def send_unreliable(self, message: object) -> bool:
        """Send ``message`` newest-wins: now or never, and never delivered after a newer message of its class.

        For state that the next message supersedes (snapshots, positions): nothing waits, nothing is sent again,
        and the peer drops one that arrives after a newer one of its class. Returns False when back pressure
        refused it here (counted in :attr:`unreliable_dropped`); the peer may also never see it (loss).

        On a UDP connection that is not sealed it goes on an Aeron stream of its own with ``reliable=false`` (a
        lost one holds back none after it), once that stream is connected; before that, over IPC and when sealed
        it goes on the reliable stream (in order, still newest-wins). A message must then fit in one datagram
        (the MTU) to take the unreliable stream; a longer one takes the reliable stream, and one longer than
        :attr:`max_message_length` raises MessageTooLargeError. ConnectionClosedError when closed.
        """
        self.outbox.ensure_open()
        return self._send_newest(frame(self._endpoint.sequencer.next(type(message)), self._encode(message)), message)

    def _send_newest(self, data: bytes, message: object) -> bool:
        """One newest-wins frame (one encoding for every member of a group)."""
        pub = self._u_pub
        if pub is not None:
            if len(data) <= self._u_room:
                result = pub.offer(data)
                if result == ADMIN_ACTION:
                    result = pub.offer(data)
                if result >= 0:
                    self._u_flowing = True
                    self.unreliable_sent += 1
                    self.outbox.sent += 1
                    self._poke()
                    return True
                # Back pressure once the stream flows: dropped (a newer one will follow). Before its first message
                # went (connected, but its window not yet known), the reliable stream still carries them.
                if self._u_flowing and result != NOT_CONNECTED and result != CLOSED:
                    self.unreliable_dropped += 1
                    return False
        elif self.unreliable_channels is not None and not self._u_opening & 1:
            self._open_unreliable(publication=True)
        if len(data) > self._max_length:
            raise MessageTooLargeError(
                f"{type(message).__name__} encodes to {len(data)} bytes with its newest-wins header; this "
                f"connection carries at most {self._max_length} (newest-wins messages are never streamed)"
            )
        if self.outbox.offer_now(data):
            self.unreliable_sent += 1
            return True
        self.unreliable_dropped += 1
        return False

    def _open_unreliable(self, *, publication: bool) -> None:
        """Open our half of the unreliable pair (once): the publication to send, the subscription to read."""
        self._u_opening |= 1 if publication else 2
        self._attend()
        self._endpoint._spawn(self._open_unreliable_half(publication), self)

    async def _open_unreliable_half(self, publication: bool) -> None:
        channels = self.unreliable_channels
        if channels is None:
            return
        channel, stream_id = channels[1] if publication else channels[0]
        try:
            resource = await self._endpoint._add_stream(channel, stream_id, publication)
        except Exception as exc:  # the driver refused (or is gone): newest-wins messages stay on the reliable stream
            if not self._closing:  # closing meanwhile is no news
                self._endpoint._notify_error(self, exc)
            return
        if self._closed:
            await resource.close_async()
        elif isinstance(resource, Publication):
            self._u_pub = resource
            self._u_room = resource.max_payload_length
        else:
            self._u_sub = resource

    def _unreliable_resources(self) -> tuple[Publication | Subscription, ...]:
        return tuple(r for r in (self._u_pub, self._u_sub) if r is not None)

    async def send(self, message: object, *, timeout: float | None = None) -> None:
        """Send ``message``, waiting out back pressure for up to ``timeout`` (default: ``send_timeout``) seconds.

        A message longer than the connection's max message length (up to ``max_message_size``) goes as a
        stream of chunks and reaches the peer's listeners whole; ``timeout`` then bounds each chunk's wait.
        A class registered ``unreliable=True`` goes :meth:`send_unreliable` (nothing to wait for).

        On a buffered session (:attr:`session`) the message is kept until the peer acknowledges it, and sent on
        whichever connection carries the session: see :meth:`Session.send <endpoint.Session.send>`.
        """
        if type(message) in self._newest_classes:
            self.send_unreliable(message)
            return
        if self.session is not None:
            await self.session.send(message, timeout)
            return
        self.outbox.ensure_open()
        data = self._encode(message)
        if len(data) > self._max_length:
            limit = self._endpoint.config.max_message_size
            if len(data) > limit:
                raise MessageTooLargeError(
                    f"{type(message).__name__} encodes to {len(data)} bytes; max_message_size is {limit}"
                )
            await self.streams.send(data, name=type(message).__name__, timeout=timeout, kind=MESSAGE)
            return
        await self.outbox.send_bytes(data, timeout)

    async def send_stream(
        self,
        source: StreamSource,
        *,
        name: str = "",
        size: int | None = None,
        metadata: Any = None,
        progress: Progress | None = None,
        timeout: float | None = None,
    ) -> int:
        """Stream ``source`` to the peer's ``on_stream`` listener; returns the bytes sent once all are out.

        ``source``: bytes-like, a path, a binary file, or an (async) iterable of bytes — read a chunk at a
        time, so memory stays bounded. ``metadata`` is any serializable value the receiver sees;
        ``progress(sent, size)`` is called after each chunk. Cancelling the calling task aborts the stream
        on both sides; the receiver cancelling it raises StreamCancelledError here.
        """
        return await self.streams.send(
            source, name=name, size=size, metadata=metadata, progress=progress, timeout=timeout
        )

    async def send_file(
        self, path: str | os.PathLike[str], *, metadata: Any = None, progress: Progress | None = None
    ) -> int:
        """Stream the file at ``path``, named by its file name."""
        return await self.send_stream(path, name=os.path.basename(path), metadata=metadata, progress=progress)

    async def ping(self, timeout: float | None = None) -> float:
        """Round-trip time to the peer in seconds (also kept in :attr:`rtt`)."""
        self.outbox.ensure_open()
        seq = next(self._ping_seq)
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._pings[seq] = future
        try:
            await self.send(Ping(seq, time.perf_counter_ns()))
            return await asyncio.wait_for(future, timeout or self._endpoint.config.peer_timeout)
        finally:
            self._pings.pop(seq, None)

    def _closed_error(self) -> ConnectionClosedError:
        reason = f": {self.close_reason}" if self.close_reason else ""
        return ConnectionClosedError(f"{self!r} is closed{reason}", self.close_reason)

    # ------------------------------------------------------------------ receiving (poller)

    def _poll(self) -> int:
        image = self._image
        if image is None:
            images = self._sub.images
            if not images:
                return 0
            image = self._image = images[0]
            # The longest message the peer's publication can send (a longer reassembly is malformed).
            self._core.max_inbound_length = max(self._max_length, image.term_buffer_length // 8)
            self._endpoint._poll_set_changed(self)
        # (_not_reading written out: this runs for every connection with a frame waiting)
        if self._closed or self._paused or len(self._inbox) >= _INBOX_LIMIT or self._inbox_bytes > self._max_held:
            return 0
        core = self._core
        dispatch = self._native_dispatch
        if dispatch is not None and core._opener is None:  # (core.sealed written out)
            # The native dispatch called by the image itself, with what it takes besides the frames (kept in a
            # tuple made again whenever the listeners change): no Python call of ours per poll around it.
            args = self._dispatch_args
            if args is None or args[0] is not self._listeners._resolved:
                args = self._dispatch_args = self._make_dispatch_args()
            count = image.poll_frames(dispatch, _POLL_LIMIT, args)
        else:
            count = image.poll_payloads(core.on_frame, _POLL_LIMIT)
        unreliable = self._u_image
        if unreliable is not None:
            count += unreliable.poll_payloads(core.on_unreliable_fragment, _POLL_LIMIT)
        self.may_hold_more = count >= _POLL_LIMIT
        return core.polled(count, time.monotonic_ns()) if count else 0

    def _make_dispatch_args(self) -> tuple[Any, ...]:
        """What the native dispatch (see ``Codec.dispatch``) takes after a poll's view and frames: it walks the
        fragments natively and hands back to the core what it does not deliver itself, fragment or decoded
        message."""
        core = self._core
        return (
            self._listeners._resolved,  # the listener manager's cache, replaced whenever the listeners change
            self._inbox,
            self,
            core.on_frame,
            core.on_decoded,
            self._on_listener_result,
            self._on_listener_error,
            core,
        )

    def _on_listener_result(self, message: Any, result: Any) -> None:
        """A sync listener called natively returned something: a coroutine runs behind the inbox, as in
        :meth:`_dispatch`."""
        if asyncio.iscoroutine(result):
            self._enqueue((lambda c, m, r=result: r,), message, _MESSAGE)

    def _on_listener_error(self, exc: BaseException) -> None:
        self._endpoint._notify_error(self, exc)

    def _not_reading(self) -> bool:
        """We hold off reading the peer: a stream's consumer is behind, or listeners are (in count or bytes)."""
        return bool(self._paused) or len(self._inbox) >= _INBOX_LIMIT or self._inbox_bytes > self._max_held

    @property
    def held_bytes(self) -> int:
        """Bytes of the peer's this connection holds here: large messages and streams arriving, queued messages."""
        return self.streams.held_bytes + self._core.held_bytes

    def _malformed(self, problem: str) -> None:
        """Drop, count and report a message of the peer's that breaks the protocol."""
        self.malformed_messages += 1
        self._endpoint.malformed_messages += 1
        self._endpoint._notify_error(self, MalformedMessageError(f"{self!r}: {problem}; dropped"))

    def _on_undecodable(self, payload: memoryview, exc: SerializationError) -> None:
        self.rpc.on_undecodable(payload, exc)
        self.malformed_messages += 1
        self._endpoint.malformed_messages += 1
        self._endpoint._notify_error(self, exc)

    def _on_peer_closed(self, reason: str) -> None:
        self.close_reason = reason
        self.closed_by_peer = True
        self.outbox.closing = True
        self._endpoint._loop_call_soon(self._finish, reason, True)

    def _route(self, message: Any) -> None:
        """A remote-call or stream message: to the part that handles it."""
        self._internal[type(message)](message)

    def _dispatch(self, message: Any, size: int) -> None:
        """A user message, in the order it came: to its sync listeners now, or behind the inbox."""
        cls = type(message)
        resolved = self._listeners._resolved.get(cls)  # the listener manager's cache, read without a call
        listeners, any_async = resolved if resolved is not None else self._listeners.message_listeners(cls)
        if not listeners:
            self.unhandled_messages += 1
            self._endpoint._on_unhandled(self, cls)
            return
        if any_async or self._inbox:
            self._enqueue(listeners, message, _MESSAGE, size)
            return
        for listener in listeners:
            try:
                result = listener(self, message)
            except Exception as exc:
                self._endpoint._notify_error(self, exc)
                continue
            if result is not None and asyncio.iscoroutine(result):  # a sync function that returned a coroutine
                self._enqueue((lambda c, m, r=result: r,), message, _MESSAGE)

    def _on_rpc_call(self, call: RpcCall) -> None:
        if self._held_calls:  # on_connect still running: the call (and any after it) starts after it
            self._held_calls += 1
            self._enqueue((self._run_held_call,), call, _MESSAGE)
        else:
            self.rpc._on_call(call)

    def _run_held_call(self, connection: Connection, call: RpcCall) -> None:
        self._held_calls -= 1
        self.rpc._on_call(call)

    def _pause_reading(self) -> None:
        """A stream's consumer is behind: stop reading (the sender feels it as back pressure)."""
        self._paused += 1
        self._attend()

    def _resume_reading(self) -> None:
        self._paused -= 1
        if not self._paused:
            self._poke()

    def _on_pong(self, pong: Pong) -> None:
        rtt = (time.perf_counter_ns() - pong.sent_ns) / 1e9
        self.rtt = rtt
        future = self._pings.pop(pong.seq, None)
        if future is not None and not future.done():
            future.set_result(rtt)

    def _enqueue(self, listeners: tuple[Callable[..., Any], ...], message: Any, kind: int, size: int = 0) -> None:
        self._inbox.append((listeners, message, kind, size))
        self._inbox_bytes += size
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._drain(), name=f"{self!r} listeners")
            self._attend()

    async def _drain(self) -> None:
        inbox = self._inbox
        notify = self._endpoint._notify_error
        try:
            while inbox:
                listeners, message, kind, size = inbox.popleft()
                if size:
                    self._inbox_bytes -= size
                    if self._inbox_bytes <= self._max_held:
                        self._poke()  # reading may have been held off for the bytes
                for listener in listeners:
                    try:
                        result = listener(self) if kind != _MESSAGE else listener(self, message)
                        if result is not None and inspect.isawaitable(result):
                            await result
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        notify(self, exc)
        finally:
            self._worker = None
            if inbox:
                self._worker = asyncio.get_running_loop().create_task(self._drain())

    def _fire_connect(self) -> None:
        listeners = self._listeners.connect
        if listeners:
            self._held_calls += 1  # calls wait until on_connect has run (it may expose objects)
            self._enqueue((*listeners, self._release_calls), None, _CONNECT)

    def _release_calls(self, connection: Connection) -> None:
        self._held_calls -= 1

    # ------------------------------------------------------------------ liveness (the end point's agenda)

    def _in_service(self, now_ns: int) -> None:
        """The end point took this connection into service: its handshake, which just completed, proved the peer
        alive, so the peer's silence counts from now. (The streams were opened before the handshake's last steps,
        which on an overloaded server can outlast the peer timeout: counted from then, a live peer would be dead
        before it had a chance to speak.)"""
        self._core.liveness.heard(now_ns)

    def _tick(self, now_ns: int, stall_ns: int = 0, dropped_ns: int | None = None) -> None:
        """Keepalive and dead-peer check (see :meth:`ConnectionCore.tick`), and streams that stalled; ``stall_ns``:
        how much later than due the end point got round to it (its own delay, not the peer's silence);
        ``dropped_ns``: when our driver's kernel was last seen dropping datagrams (we may have missed the peer)."""
        if self._closing:
            return
        if self.unreliable_channels is not None:
            self._tick_unreliable()
        reading = not self._not_reading()
        self.streams.tick(now_ns, reading)
        core = self._core
        liveness = core.liveness
        hwm = None
        if liveness.silent_for_ns(now_ns) > liveness.overdue_ns:  # quiet a while: has it sent anything?
            hwm = self._peer_hwm()
        verdict = core.tick(now_ns, self.outbox.sent, reading, hwm, stall_ns, dropped_ns)
        if verdict is Verdict.DEAD:
            self._lose(core.dead_reason(now_ns))
            return
        image = self._image
        if image is not None and (image.is_closed or image.is_end_of_stream):
            self._lose("the peer's stream ended without a disconnect")  # may come sooner, never later
            return
        if verdict is Verdict.KEEPALIVE or verdict is Verdict.PROBE:
            probe = verdict is Verdict.PROBE  # overdue: its answer reveals anything of its stream lost meanwhile
            answered = probe or self._sample_wanted  # an answer also samples the round trip
            # A keepalive asks for no tail probe after it; a probe does (its answer is what we are after).
            if self.outbox.send_control(Ping(SAMPLE_SEQ if answered else 0, time.perf_counter_ns()), quiet=not probe):
                self._sample_wanted = False
                self.probes += probe
                core.kept_alive(now_ns, self.outbox.sent, probe)
        if self.session is not None:
            self.session.tick(self)

    def _tick_quiet(self, now_ns: int, grid_ns: int) -> int:
        """:meth:`_tick` (without a stall) in the common case of an idle connection looked at before anything is
        owed (see :meth:`ConnectionCore.tick_quiet`): nothing else that tick looks at under way, its stream whole;
        returns when it is next to be looked at (what :meth:`_next_check_ns` would say), or 0 if it was not
        quiet and nothing was done (call :meth:`_tick`). A third to a half of an idle server's looks are these:
        a connection is filed at the earlier of its keepalive and the moment its peer would be overdue, and the
        peer is usually heard before then. The caller has checked it is not closing."""
        if self.session is not None or self._paused or self._inbox or self.streams.incoming:
            return 0
        core = self._core
        if self.unreliable_channels is not None and (
            self._u_sub is not None or self._u_opening or core.newest_delivered or core.newest.stale
        ):
            return 0  # an unreliable stream to open or watch (see _tick_unreliable)
        image = self._image
        if image is None or image.is_closed or image.is_end_of_stream:
            return 0
        if not core.tick_quiet(now_ns, self.outbox.sent):
            return 0
        return self._next_check_ns(now_ns, grid_ns)

    def _attend(self) -> None:
        """Something started that :meth:`_tick` watches every step (see :meth:`_next_check_ns`): be looked at at
        the next step, not when the idle connection's next check would have come."""
        self._endpoint._attend(self)

    def _next_check_ns(self, now_ns: int, grid_ns: int) -> int:
        """When :meth:`_tick` next has something to do (see :mod:`endpoint.connection.agenda`): its liveness's next
        check (:meth:`~endpoint.connection.liveness.Liveness.next_check_ns`), or the next point of the grid while
        it needs looking at every step: not reading (the peer's silence is ours, its clock restarts each step),
        streams arriving (their stall timers), a buffered session (its acknowledgements), an unreliable stream
        opened (its image may come or go), the peer overdue (how far its stream got is watched each step).
        Never before the next point of the grid: a keepalive that back pressure refused is tried again then."""
        step = (now_ns // grid_ns + 1) * grid_ns
        if (
            self._paused
            or self._inbox
            or self.streams.incoming
            or self.session is not None
            or self._u_sub is not None
            or self._u_opening
        ):
            return step
        liveness = self._core.liveness
        if liveness.silent_for_ns(now_ns) > liveness.overdue_ns:
            return step
        return max(step, liveness.next_check_ns(grid_ns))

    def _tick_unreliable(self) -> None:
        """Subscribe to the peer's unreliable stream once its first newest-wins frame came the reliable way, and
        poll its image once the driver has one (a new one if the old one went)."""
        sub = self._u_sub
        if sub is None:
            core = self._core
            if not self._u_opening & 2 and (core.newest_delivered or core.newest.stale):
                self._open_unreliable(publication=False)
            return
        image = self._u_image
        if image is not None and image.is_closed:
            image = self._u_image = None
            self._endpoint._poll_set_changed(self)
        if image is None:
            images = sub.images
            if images:
                self._u_image = images[0]
                self._endpoint._poll_set_changed(self)

    def _peer_hwm(self) -> int | None:
        """How far the peer's stream has reached our driver (gaps included), None when unknown (IPC, not mapped).

        The counter is found by the image's registration id, once per connection, and only for a connection
        whose peer has been quiet for two ping intervals (see :func:`_hwm_counter_of`)."""
        image = self._image
        if image is None or self.is_ipc:
            return None
        reader = self._sub._conductor.counters_reader
        counter_id = self._hwm_counter_id
        if counter_id is None:
            counter_id = _hwm_counter_of(reader, image.correlation_id)
            if counter_id < 0:
                return None  # not in the index yet: asked again next time
            self._hwm_counter_id = counter_id
        return reader.get_counter_value(counter_id)

    # ------------------------------------------------------------------ closing

    async def close(self, reason: str = "", *, timeout: float | None = None) -> None:
        """Close gracefully: the peer's ``close_reason`` becomes ``reason``; both sides fire on_disconnect."""
        if self._closing:
            await self.wait_closed()
            return
        self.outbox.closing = True
        self.close_reason = reason
        timeout = self._endpoint.config.close_timeout if timeout is None else timeout
        try:
            await self.outbox.offer_until(self._encode(Disconnect(reason)), timeout)
            await self._wait_peer_gone(timeout)
        except (TimeoutError, Exception):  # the peer may be gone already; closing goes on regardless
            pass
        self._finish(reason, False)
        await self.wait_closed()

    async def _wait_peer_gone(self, timeout: float) -> None:
        """Until the peer closes its side after our Disconnect (its stream ends), bounded by ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            image = self._image
            if image is None or image.is_closed or image.is_end_of_stream or not self._sub.images:
                return
            await asyncio.sleep(0.001)

    async def wait_closed(self) -> None:
        await self._closed_event.wait()

    def _finish(self, reason: str, by_peer: bool) -> None:
        """Loop thread: stop reading, fail pending pings, fire on_disconnect after queued messages, free resources."""
        if self._closed:
            return
        self.outbox.closing = True
        self._closed = True
        if by_peer:
            self.closed_by_peer = True
        if not self.close_reason:
            self.close_reason = reason
        for future in self._pings.values():
            if not future.done():
                future.set_exception(self._closed_error())
        self._pings.clear()
        self.outbox.fail_backlog()
        self.rpc._close()
        self.streams.close()
        if self._listeners.disconnect:
            self._enqueue(self._listeners.disconnect, None, _DISCONNECT)
        if self._on_released is not None:
            self._on_released(self)
        self._closed_event.set()

    def _lose(self, reason: str) -> None:
        """Drop the connection without a disconnect message (dead peer, failed driver)."""
        if self._closing:
            return
        self.outbox.closing = True
        self.lost = True
        self.close_reason = reason
        self._endpoint._loop_call_soon(self._finish, reason, False)

    def _resources(self) -> tuple[Publication, Subscription]:
        return self._pub, self._sub
