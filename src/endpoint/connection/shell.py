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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from driver.client.publication import Publication
from driver.client.subscription import Image, Subscription
from endpoint.config import Configuration
from endpoint.connection.core import ConnectionCore
from endpoint.connection.liveness import Verdict
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


class _Poker(Protocol):
    def poke(self) -> None: ...


class ConnectionOwner(Protocol):
    """What a connection needs of its end point: :class:`endpoint.base.EndPoint`, seen from below (the end
    point imports this module, not the other way round)."""

    listeners: ListenerManager[Connection]
    rpc: RpcRegistry
    malformed_messages: int
    seal_failures: int

    @property
    def config(self) -> Configuration: ...

    @property
    def _loop_poller(self) -> _Poker | None: ...

    def _poke_poller(self) -> None: ...

    def _notify_error(self, connection: Connection | None, error: BaseException) -> None: ...

    def _on_unhandled(self, connection: Connection, message_type: type) -> None: ...

    def _spawn(self, coro: Any, connection: Connection | None = None) -> asyncio.Task[Any]: ...

    def _loop_call_soon(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def _rebuild_poll_set(self) -> None: ...


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
        self._sub = subscription
        self._image: Image | None = None
        self._on_released = on_released
        config = endpoint.config
        self._encode: Callable[[object], bytes] = config.serialization.encode
        self._decode = config.serialization.decode
        self._listeners = endpoint.listeners
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
        self.sealed = False
        """Every message each way is sealed (see :meth:`_seal_with`)."""
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
        self._sealer: Sealer | None = None
        self._refused: Buffer | None = None
        self._refused_sealed: bytes | None = None
        self._paused = 0
        self._held_calls = 0
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
        self._max_length = self._pub.max_message_length - OVERHEAD
        self.sealed = True

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
        SerializationError for a message that can never be sent.
        """
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
        return outbox.offer_now(data)

    async def send(self, message: object, *, timeout: float | None = None) -> None:
        """Send ``message``, waiting out back pressure for up to ``timeout`` (default: ``send_timeout``) seconds.

        A message longer than the connection's max message length (up to ``max_message_size``) goes as a
        stream of chunks and reaches the peer's listeners whole; ``timeout`` then bounds each chunk's wait.
        """
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
            self._endpoint._rebuild_poll_set()
        if self._closed or self._not_reading():
            return 0
        count = image.poll_payloads(self._core.on_frame, _POLL_LIMIT)
        return self._core.polled(count, time.monotonic_ns()) if count else 0

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

    # ------------------------------------------------------------------ liveness (poller, every tick)

    def _tick(self, now_ns: int) -> None:
        """Keepalive and dead-peer check (see :meth:`ConnectionCore.tick`), and streams that stalled."""
        if self._closing:
            return
        reading = not self._not_reading()
        self.streams.tick(now_ns, reading)
        core = self._core
        verdict = core.tick(now_ns, self.outbox.sent, reading)
        if verdict is Verdict.DEAD:
            self._lose(core.dead_reason(now_ns))
            return
        image = self._image
        if image is not None and (image.is_closed or image.is_end_of_stream):
            self._lose("the peer's stream ended without a disconnect")  # may come sooner, never later
            return
        if verdict is Verdict.KEEPALIVE and self.outbox.send_control(Ping(0, time.perf_counter_ns())):
            core.kept_alive(now_ns, self.outbox.sent)

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
