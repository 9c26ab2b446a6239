"""A connection between two end points: one publication each way, ping, liveness and ordered dispatch.

Theory of operation: the end point's poller calls :meth:`Connection._poll`,
which reads whole messages from the peer's image, decodes them and hands them
to listeners. Sync listeners run right there; a message whose listeners are
async goes to the connection's inbox, drained in order by one worker task that
exists only while the inbox is non-empty — so later messages (and
``on_disconnect``) never overtake an earlier one, and a slow listener holds
back only its own connection (the poller stops reading it while the inbox is
full, which pushes back on the sender through the log). ``on_connect`` and
``on_disconnect`` go through the same inbox.

Remote calls (:mod:`endpoint.rpc`) and streams (:mod:`endpoint.streaming`) ride the
same publication; their control messages are handled by the poller directly, never
queued behind listeners.

A sealed connection (:mod:`endpoint.sealing`) seals every message it offers, whatever
it is, in the one place every offer goes through (``_offer``), and opens every whole
message of the peer's before anything reads it (``_on_whole``). An unsealed connection
binds those two names to the plain publication offer and decoder: its path and cost
are what they were.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from driver.client.aio import Backoff
from driver.client.publication import ADMIN_ACTION, BACK_PRESSURED, CLOSED, NOT_CONNECTED, Publication
from driver.client.subscription import Image, Subscription
from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG
from endpoint.errors import (
    SEAL_FAILED,
    ConnectionClosedError,
    EndpointError,
    MalformedMessageError,
    MessageTooLargeError,
    SealError,
    SerializationError,
    TransmitError,
)
from endpoint.liveness import PEER_TIMED_OUT, Liveness, Verdict
from endpoint.messages import (
    INTERNAL_TYPE_IDS,
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
    internal_problem,
)
from endpoint.rpc import ConnectionRpc
from endpoint.sealing import OVERHEAD, Opener, Sealer
from endpoint.streaming import CHUNK_EXT, MESSAGE, Progress, StreamManager, StreamSource

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from endpoint.endpoint import EndPoint
    from endpoint.handshake import SealingKeys

__all__ = ["Connection", "UnhandledMessageError"]

_INBOX_LIMIT = 4096
"""Messages waiting for async listeners before the poller stops reading this connection."""
_POLL_LIMIT = 64
_MESSAGE, _CONNECT, _DISCONNECT = 0, 1, 2
_UNFRAGMENTED = BEGIN_FRAG_FLAG | END_FRAG_FLAG
_INTERNAL_TYPES = frozenset(INTERNAL_TYPE_IDS)
_QUEUED_CONTROL_ROOM = 1024
"""Internal messages beyond answers to calls one connection may have waiting on back pressure."""
CLIENT_TO_SERVER, SERVER_TO_CLIENT = 1, 2
"""Directions of a sealed connection (in each message's nonce and associated data)."""


class UnhandledMessageError(EndpointError):
    """A message arrived for which no listener (not even a catch-all ``on_message()``) is registered."""


class Connection:
    """One peer. ``id`` is the same number on both ends (the server's inbound session id)."""

    def __init__(
        self,
        endpoint: EndPoint[Any],
        *,
        connection_id: int,
        publication: Publication,
        subscription: Subscription,
        is_ipc: bool,
        remote_address: str,
        on_released: Callable[[Connection], None] | None = None,
        keepalive: bool = True,
    ) -> None:
        """``keepalive`` is kept for callers of old; both ends now send keepalives (see :mod:`endpoint.liveness`)."""
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
        self._send_timeout = config.send_timeout
        self._fragments: bytearray | None = None
        poller = endpoint._loop_poller
        self._poke: Callable[[], None] = poller.poke if poller is not None else endpoint._poke_poller
        self._inbox: collections.deque[tuple[tuple[Callable[..., Any], ...], Any, int, int]] = collections.deque()
        self._inbox_bytes = 0
        """Encoded bytes of the messages in the inbox (they count against ``max_incoming_bytes``)."""
        self._max_held = config.max_incoming_bytes
        self._worker: asyncio.Task[None] | None = None
        self._pings: dict[int, asyncio.Future[float]] = {}
        self._ping_seq = itertools.count(1)
        self._sent = 0
        self._heard = 0
        self._control = 0
        self._seen_sent = 0
        self._liveness = Liveness(time.monotonic_ns(), int(config.ping_interval * 1e9), int(config.peer_timeout * 1e9))
        self._closing = False
        self._closed = False
        self._closed_event = asyncio.Event()
        self.close_reason = ""
        """Why the connection closed: the peer's reason for a graceful remote close, or what happened."""
        self.closed_by_peer = False
        self.lost = False
        """True when the connection ended without a graceful close (peer timed out or vanished, driver failed)."""
        self._queued_later = 0
        self._queued_later_limit = config.max_pending_calls + _QUEUED_CONTROL_ROOM
        self.dropped_answers = 0
        """Internal messages (RPC answers, stream cancels) dropped because too many already waited on back pressure."""
        self.malformed_messages = 0
        """Messages of the peer's dropped as malformed: undecodable, empty, or internal ones with bad fields."""
        self.rtt: float | None = None
        """Round-trip time in seconds of the last answered ping."""
        self.sealed = False
        """Every message each way is sealed (see :meth:`_seal_with`)."""
        self.seal_failures = 0
        """Messages of the peer's that did not open (the first one closes the connection)."""
        self._offer: Callable[[Buffer], int] = publication.offer
        """Every offer of this connection goes through here: the publication's, or sealing then the publication's."""
        self._on_whole: Callable[[memoryview], None] = self._on_message_bytes
        """Every whole message of the peer's goes through here: read as is, or opened first."""
        self._sealer: Sealer | None = None
        self._opener: Opener | None = None
        self._refused: Buffer | None = None
        self._refused_sealed: bytes | None = None
        self._paused = 0
        self._held_calls = 0
        self._backlog: collections.deque[tuple[Buffer, asyncio.Future[None], float]] = collections.deque()
        self._writer: asyncio.Task[None] | None = None
        self.rpc = ConnectionRpc(self, endpoint.rpc)
        """Objects exposed to this peer only, and proxies of the peer's objects."""
        self.streams = StreamManager(self)
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

    # ------------------------------------------------------------------ state

    @property
    def endpoint(self) -> EndPoint[Any]:
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
        return self._sent

    @property
    def messages_received(self) -> int:
        """Messages (fragments) read from the peer, keepalives included."""
        return self._heard

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
        self._opener = Opener(receive_key, connection_id=self.id, session_id=inbound_session_id, direction=back)
        self._offer = self._offer_sealed
        self._on_whole = self._open_sealed
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

    def _open_sealed(self, payload: memoryview) -> None:
        if self.seal_failures:
            return  # the log is broken from the first failure on: nothing after it is believed
        opener = self._opener
        assert opener is not None
        try:
            plain = opener.open(payload)
        except SealError as exc:
            self._seal_failed(exc)
            return
        self._on_message_bytes(memoryview(plain))

    def _seal_failed(self, exc: SealError) -> None:
        """A forged, replayed or tampered message holds its place in the log, so the connection cannot go on:
        count it, report it with this connection, tell the peer (sealed, so it believes us) and close."""
        self.seal_failures += 1
        self._endpoint.seal_failures += 1
        reason = f"{SEAL_FAILED}: {exc}"
        self._endpoint._notify_error(self, SealError(f"{self!r}: {exc}; the connection closes"))
        if not self._closing:
            self._send_control(Disconnect(reason))
            self._lose(reason)

    # ------------------------------------------------------------------ sending

    def _encoded(self, message: object) -> bytes:
        data = self._encode(message)
        if len(data) > self._max_length:
            raise MessageTooLargeError(
                f"{type(message).__name__} encodes to {len(data)} bytes; this connection carries at most "
                f"{self._max_length} (raise term_length, or stream it)"
            )
        return data

    def send_nowait(self, message: object) -> bool:
        """Hand ``message`` to the driver now; False when back pressure (or a reconnecting peer) refused it.

        Raises ConnectionClosedError when closed, MessageTooLargeError or
        SerializationError for a message that can never be sent.
        """
        if self._closing:
            raise self._closed_error()
        return self._offer_now(self._encoded(message))

    def _offer_now(self, data: Buffer, poke: bool = True, *, jump_queue: bool = False) -> bool:
        """Offer once, and once more straight away after ADMIN_ACTION (the log rotated: the retry succeeds).

        False while sends are queued behind back pressure (they go first) unless ``jump_queue``.
        A message the user sent pokes the poller (an answer may follow); a keepalive does not.
        """
        if self._backlog and not jump_queue:
            return False
        offer = self._offer
        result = offer(data)
        if result == ADMIN_ACTION:
            result = offer(data)
        if result >= 0:
            self._sent += 1
            if poke:
                self._poke()
            return True
        if result == CLOSED:
            raise self._closed_error()
        return False

    async def send(self, message: object, *, timeout: float | None = None) -> None:
        """Send ``message``, waiting out back pressure for up to ``timeout`` (default: ``send_timeout``) seconds.

        A message longer than the connection's max message length (up to ``max_message_size``) goes as a
        stream of chunks and reaches the peer's listeners whole; ``timeout`` then bounds each chunk's wait.
        """
        if self._closing:
            raise self._closed_error()
        data = self._encode(message)
        if len(data) > self._max_length:
            limit = self._endpoint.config.max_message_size
            if len(data) > limit:
                raise MessageTooLargeError(
                    f"{type(message).__name__} encodes to {len(data)} bytes; max_message_size is {limit}"
                )
            await self.streams.send(data, name=type(message).__name__, timeout=timeout, kind=MESSAGE)
            return
        await self._send_bytes(data, timeout)

    async def _send_bytes(self, data: Buffer, timeout: float | None) -> None:
        """Offer one encoded message, waiting out back pressure (the shared path of every awaited send).

        Under back pressure, senders queue in order behind one writer task that offers as the log frees up:
        thousands of waiting calls cost one poll each time, not one each, and none starves.
        """
        if self._offer_now(data):
            return
        if self._closing:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        wait = self._send_timeout if timeout is None else timeout
        self._backlog.append((data, future, loop.time() + wait))
        if self._writer is None:
            self._writer = loop.create_task(self._write_backlog(), name=f"{self!r} writer")
        await future

    async def _write_backlog(self) -> None:
        backlog = self._backlog
        offer = self._offer
        backoff = Backoff(0.001)
        time_now = asyncio.get_running_loop().time
        try:
            while backlog:
                data, future, deadline = backlog[0]
                if future.done():  # its sender was cancelled
                    backlog.popleft()
                    continue
                result = offer(data)
                if result == ADMIN_ACTION:
                    result = offer(data)
                if result >= 0:
                    backlog.popleft()
                    self._sent += 1
                    future.set_result(None)
                    backoff.reset()
                    self._poke()
                elif result in (BACK_PRESSURED, NOT_CONNECTED):
                    if time_now() > deadline:  # the head waits longest; equal timeouts expire in order
                        backlog.popleft()
                        future.set_exception(TransmitError(f"{self!r}: back pressure outlasted the send timeout"))
                        continue
                    await backoff.idle()
                else:
                    backlog.popleft()
                    future.set_exception(
                        self._closed_error()
                        if result == CLOSED
                        else TransmitError(f"{self!r}: offer failed with {result}")
                    )
        finally:
            self._writer = None

    def _fail_backlog(self) -> None:
        error = self._closed_error()
        while self._backlog:
            _, future, _ = self._backlog.popleft()
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.cancel()

    async def _send_message(self, message: object, timeout: float | None) -> None:
        """An internal message that must arrive (unlike a keepalive): waits out back pressure."""
        if self._closing:
            raise self._closed_error()
        await self._send_bytes(self._encode(message), timeout)

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

    def _send_control(self, message: object, *, must_arrive: bool = False) -> bool:
        """Offer an internal message at once, ahead of queued sends; one that ``must_arrive`` queues if refused."""
        try:
            data = self._encode(message)
            if self._offer_now(data, poke=False, jump_queue=True):
                return True
        except Exception:  # a control message must never take the poller down
            return False
        if must_arrive and not self._closing:
            self._send_later(data)
        return False

    def _send_later(self, data: bytes) -> None:
        """Queue an internal message back pressure refused (an answer, a cancel) behind the writer, without a task.

        A peer that sends requests but never reads the answers cannot make them pile up past a bound (its calls
        in flight, ``max_pending_calls``, and room for as many control messages); beyond it they are dropped
        and counted.
        """
        if self._queued_later >= self._queued_later_limit:
            self.dropped_answers += 1
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        future.add_done_callback(self._sent_later)
        self._queued_later += 1
        self._backlog.append((data, future, loop.time() + self._send_timeout))
        if self._writer is None:
            self._writer = loop.create_task(self._write_backlog(), name=f"{self!r} writer")

    def _sent_later(self, future: asyncio.Future[None]) -> None:
        self._queued_later -= 1
        error = None if future.cancelled() else future.exception()
        if error is not None and not isinstance(error, ConnectionClosedError):
            self._endpoint._notify_error(self, error)

    async def ping(self, timeout: float | None = None) -> float:
        """Round-trip time to the peer in seconds (also kept in :attr:`rtt`)."""
        if self._closing:
            raise self._closed_error()
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
            self._endpoint._rebuild_poll_set()
        if self._closed or self._not_reading():
            return 0
        count = image.poll_payloads(self._on_fragment, _POLL_LIMIT)
        if count:
            self._heard += count
            self._liveness.heard(time.monotonic_ns())  # only what the peer sends proves it alive
            if self._control:
                count -= self._control  # keepalives are not work: they must not keep an idle poller spinning
                self._control = 0
        return count

    def _not_reading(self) -> bool:
        """We hold off reading the peer: a stream's consumer is behind, or listeners are (in count or bytes)."""
        return bool(self._paused) or len(self._inbox) >= _INBOX_LIMIT or self._inbox_bytes > self._max_held

    @property
    def held_bytes(self) -> int:
        """Bytes of the peer's this connection holds here: large messages and streams arriving, queued messages."""
        fragments = self._fragments
        return self.streams.held_bytes + (len(fragments) if fragments is not None else 0)

    def _on_fragment(self, payload: memoryview, flags: int) -> None:
        """Whatever the peer sent, an error handling it is this connection's (never the driver's, which would
        tell every end point on it without the connection)."""
        try:
            if flags & _UNFRAGMENTED == _UNFRAGMENTED:
                self._on_whole(payload)
            elif flags & BEGIN_FRAG_FLAG:
                self._fragments = bytearray(payload)
            elif self._fragments is not None:
                if len(self._fragments) + len(payload) > self._max_inbound_length():
                    self._fragments = None  # longer than any publication of the peer's can send
                    self._malformed("a fragmented message longer than the peer's max message length")
                    return
                self._fragments += payload
                if flags & END_FRAG_FLAG:
                    whole, self._fragments = self._fragments, None
                    self._on_whole(memoryview(whole))
        except Exception as exc:
            self._endpoint._notify_error(self, exc)

    def _max_inbound_length(self) -> int:
        image = self._image
        return max(self._max_length, image.term_buffer_length // 8 if image is not None else 0)

    def _malformed(self, problem: str) -> None:
        """Drop, count and report a message of the peer's that breaks the protocol."""
        self.malformed_messages += 1
        self._endpoint.malformed_messages += 1
        self._endpoint._notify_error(self, MalformedMessageError(f"{self!r}: {problem}; dropped"))

    def _on_message_bytes(self, payload: memoryview) -> None:
        if self._closing and self.closed_by_peer:
            return  # nothing after the peer's Disconnect
        if not len(payload):
            self._malformed("an empty message")
            return
        if payload[0] == 0xC9 and len(payload) > 9 and payload[5] == CHUNK_EXT:
            self.streams.on_chunk(payload)
            return
        try:
            message = self._decode(payload)
        except SerializationError as exc:
            self.rpc.on_undecodable(payload, exc)
            self.malformed_messages += 1
            self._endpoint.malformed_messages += 1
            self._endpoint._notify_error(self, exc)
            return
        cls = type(message)
        if cls in _INTERNAL_TYPES:
            problem = internal_problem(message)
            if problem is not None:
                if cls is RpcCall and type(message.call_id) is int and message.call_id > 0:
                    self.rpc.on_malformed_call(message.call_id, problem)  # the caller hears of it at once
                self._malformed(problem)
                return
        if cls is Ping:
            if message.seq == 0:  # a keepalive: heard, which is all it is for; not work for the poller
                self._control += 1
                return
            if message.seq == SAMPLE_SEQ:  # a round-trip sample: answered, but no more work than a keepalive
                self._control += 1
            self._send_control(Pong(message.seq, message.sent_ns))
            return
        if cls is Pong:
            if message.seq == 0 or message.seq == SAMPLE_SEQ:
                self._control += 1
            self._on_pong(message)
            return
        if cls is Disconnect:
            self.close_reason = message.reason
            self.closed_by_peer = True
            self._closing = True
            self._endpoint._loop_call_soon(self._finish, message.reason, True)
            return
        internal = self._internal.get(cls)
        if internal is not None:
            internal(message)
            return
        listeners, any_async = self._listeners.message_listeners(cls)
        if not listeners:
            self._endpoint._notify_error(self, UnhandledMessageError(f"no listener for {cls.__name__} on {self!r}"))
            return
        if any_async or self._inbox:
            self._enqueue(listeners, message, _MESSAGE, len(payload))
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
        """Keepalive and dead-peer check; only messages read from the peer count as signs of its life."""
        if self._closing:
            return
        liveness = self._liveness
        if self._sent != self._seen_sent:
            self._seen_sent = self._sent
            liveness.sent(now_ns)
        reading = not self._not_reading()
        if not reading:  # we are the ones not reading: not the peer's fault
            liveness.not_reading(now_ns)
        self.streams.tick(now_ns, reading)
        verdict = liveness.check(now_ns)
        if verdict is Verdict.DEAD:
            self._lose(
                f"{PEER_TIMED_OUT}: nothing heard for {liveness.silent_for_ns(now_ns) / 1e9:.2f} s "
                f"(peer_timeout {liveness.peer_timeout_ns / 1e9:g} s)"
            )
            return
        image = self._image
        if image is not None and (image.is_closed or image.is_end_of_stream):
            self._lose("the peer's stream ended without a disconnect")  # may come sooner, never later
            return
        if verdict is Verdict.KEEPALIVE and self._send_control(Ping(0, time.perf_counter_ns())):
            self._seen_sent = self._sent
            liveness.sent(now_ns)

    # ------------------------------------------------------------------ closing

    async def close(self, reason: str = "", *, timeout: float | None = None) -> None:
        """Close gracefully: the peer's ``close_reason`` becomes ``reason``; both sides fire on_disconnect."""
        if self._closing:
            await self.wait_closed()
            return
        self._closing = True
        self.close_reason = reason
        timeout = self._endpoint.config.close_timeout if timeout is None else timeout
        try:
            await self._offer_until(self._encode(Disconnect(reason)), timeout)
            await self._wait_peer_gone(timeout)
        except (TimeoutError, Exception):  # the peer may be gone already; closing goes on regardless
            pass
        self._finish(reason, False)
        await self.wait_closed()

    async def _offer_until(self, data: bytes, timeout: float) -> None:
        """Offer ahead of queued sends, waiting out back pressure for up to ``timeout`` (TimeoutError)."""
        deadline = time.monotonic() + timeout
        backoff = Backoff(0.001)
        while not self._offer_now(data, poke=False, jump_queue=True):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self!r}: the disconnect message was not accepted within {timeout:g} s")
            await backoff.idle()

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
        self._closing = True
        self._closed = True
        if by_peer:
            self.closed_by_peer = True
        if not self.close_reason:
            self.close_reason = reason
        for future in self._pings.values():
            if not future.done():
                future.set_exception(self._closed_error())
        self._pings.clear()
        self._fail_backlog()
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
        self._closing = True
        self.lost = True
        self.close_reason = reason
        self._endpoint._loop_call_soon(self._finish, reason, False)

    def _resources(self) -> tuple[Publication, Subscription]:
        return self._pub, self._sub
