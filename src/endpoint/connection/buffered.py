"""A buffered session's asyncio side: the :class:`Session` users hold, over :mod:`endpoint.connection.session`.

The bookkeeping (numbers, acknowledgements, what is kept, resuming) is the pure
:class:`~endpoint.connection.session.SessionLog`; this adds what needs the loop. A send keeps the message first
(waiting, while connected, up to ``send_timeout`` for acknowledgements to make room) and then offers every kept
message not yet offered on the current connection, in order; one the log refuses (back pressure) is offered
again by a short-lived task, never skipped, so the peer sees no gap. A frame of the peer's comes from the
connection's core: data is delivered once (through the connection's own dispatch, so listeners run as for any
message), acknowledgements free kept messages. Acknowledgements go out every
:data:`~endpoint.connection.session.ACK_EVERY` messages and on the connection's tick.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from driver.client.aio import PollBackoff
from endpoint.connection.outbox import Outbox
from endpoint.connection.session import ACK, FRAME_HEADER_LENGTH, SessionLog, SessionSync, ack_frame, parse_frame
from endpoint.errors import ConnectionClosedError, MessageTooLargeError, SerializationError, SessionExpiredError

__all__ = ["Carrier", "Session"]


class Carrier(Protocol):
    """A connection as its session sees it: :class:`endpoint.connection.shell.Connection`, seen from here (the
    connection imports this module, not the other way round)."""

    id: int
    outbox: Outbox
    remote_address: str

    @property
    def is_closed(self) -> bool: ...

    @property
    def _closing(self) -> bool: ...

    @property
    def max_message_length(self) -> int: ...

    async def send(self, message: object, *, timeout: float | None = None) -> None: ...

    def _decode(self, data: memoryview) -> Any: ...

    def _dispatch(self, message: Any, size: int) -> None: ...

    def _malformed(self, problem: str) -> None: ...

    def _on_undecodable(self, payload: memoryview, exc: SerializationError) -> None: ...

    def _join_session(self, session: Session, resumed: bool) -> None: ...

    def _lose(self, reason: str) -> None: ...


class Session:
    """A buffered session: stable across the connections that carry it (``connection.session`` is the same object
    on every one of them). ``id`` is the server's number for it (the client learns it at each connect; a server
    that lost its sessions gives a new one); ``public_key`` is the client's key (the session's identity)."""

    def __init__(
        self,
        *,
        session_id: int,
        public_key: bytes,
        log: SessionLog,
        encode: Callable[[object], bytes],
        send_timeout: float,
        timeout: float,
    ) -> None:
        self.id = session_id
        self.public_key = public_key
        self.log = log
        """The bookkeeping (see :class:`~endpoint.connection.session.SessionLog`): kept, delivered, counted."""
        self.timeout = timeout
        """Seconds the session outlives a lost connection."""
        self.connection: Carrier | None = None
        """The connection carrying the session now; None while it has none."""
        self.resumes = 0
        """Connections that resumed this session (not counting the first)."""
        self.ended = False
        self.end_reason = ""
        self.dropped = 0
        """Kept messages dropped undelivered when the session ended."""
        self._encode = encode
        self._send_timeout = send_timeout
        self._max_body = 0
        self._room = asyncio.Event()
        self._retry: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "ended" if self.ended else "connected" if self.connection is not None else "detached"
        return f"<Session {self.id} {self.public_key[:4].hex()} {state} kept={self.log.kept}>"

    @property
    def is_connected(self) -> bool:
        return self.connection is not None

    @property
    def kept(self) -> int:
        """Messages sent in this session the peer has not acknowledged yet (in flight, or waiting for a connection)."""
        return self.log.kept

    # ------------------------------------------------------------------ sending

    async def send(self, message: object, timeout: float | None = None) -> None:
        """Keep ``message`` until the peer acknowledges it and offer it now if connected.

        Returns once kept: it reaches the peer's listeners once, in order, on this connection or the next one
        (within the session's timeout). SessionBufferFullError when a bound is reached (at once while detached;
        while connected after waiting up to ``timeout``, default ``send_timeout``, for acknowledgements);
        SessionExpiredError once the session ended.
        """
        body = self._body(message)
        log = self.log
        if log.full_for(len(body)) is not None and self.connection is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + (self._send_timeout if timeout is None else timeout)
            while log.full_for(len(body)) is not None and self.connection is not None and not self.ended:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._room.clear()
                try:
                    await asyncio.wait_for(self._room.wait(), remaining)
                except TimeoutError:
                    break
        self.keep_and_offer(body)

    def send_nowait(self, message: object) -> bool:
        """Keep ``message`` and offer it if connected; True once kept (it will be delivered: never send it again).
        SessionBufferFullError at a bound, SessionExpiredError once ended."""
        self.keep_and_offer(self._body(message))
        return True

    def _body(self, message: object) -> bytes:
        if self.ended:
            raise SessionExpiredError(f"{self!r}: the session ended ({self.end_reason})", self.end_reason)
        body = self._encode(message)
        if self._max_body and len(body) > self._max_body:
            raise MessageTooLargeError(
                f"{type(message).__name__} encodes to {len(body)} bytes; a buffered session carries messages of "
                f"at most {self._max_body} (the connection's max message length less the session header)"
            )
        return body

    def keep_and_offer(self, body: bytes) -> None:
        if self.ended:
            raise SessionExpiredError(f"{self!r}: the session ended ({self.end_reason})", self.end_reason)
        log = self.log
        frame = log.keep(body)
        connection = self.connection
        # The common case first: connected, nothing older waiting to be offered.
        if connection is not None and self._retry is None and log.offered == log.last_seq - 1:
            try:
                if not connection._closing and connection.outbox.offer_now(frame):
                    log.offered = log.last_seq
                    return
            except ConnectionClosedError:
                return  # kept: the next connection offers it
        self._pump()

    def _pump(self) -> None:
        """Offer every kept message the current connection has not had, in order; a refusal leaves the rest to a
        retry task (so none is skipped)."""
        connection = self.connection
        if connection is not None and not self._offer_all(connection) and self._retry is None:
            self._retry = asyncio.get_running_loop().create_task(self._offer_later(connection))

    def _offer_all(self, connection: Carrier) -> bool:
        """True when nothing is left to offer on ``connection`` (or it is closing: the next one offers them)."""
        log = self.log
        outbox = connection.outbox
        try:
            while not connection._closing and (item := log.next_to_offer()) is not None:
                if not outbox.offer_now(item[1]):
                    return False
                log.mark_offered(item[0])
        except ConnectionClosedError:
            pass
        return True

    async def _offer_later(self, connection: Carrier) -> None:
        backoff = PollBackoff(0.001)
        try:
            while self.connection is connection:
                await backoff.idle()
                if self.connection is not connection or self._offer_all(connection):
                    return
        finally:
            self._retry = None

    # ------------------------------------------------------------------ receiving (the connection's core)

    def on_frame(self, connection: Carrier, payload: memoryview) -> None:
        parsed = parse_frame(payload)
        if parsed is None:
            connection._malformed("a malformed session frame")
            return
        if connection is not self.connection:
            return  # a connection the session left (it resumed on another): what it still reads is not ours
        kind, seq, body = parsed
        log = self.log
        if kind == ACK:
            if log.on_ack(seq):
                self._room.set()
            return
        if log.on_data(seq):
            try:
                message = connection._decode(body)
            except SerializationError as exc:
                connection._on_undecodable(body, exc)
            else:
                connection._dispatch(message, len(body))
        if log.ack_due(False):
            self._acknowledge(connection)

    def _acknowledge(self, connection: Carrier) -> None:
        log = self.log
        try:
            if connection.outbox.offer_now(ack_frame(log.delivered), poke=False, jump_queue=True):
                log.acknowledged()
        except ConnectionClosedError:
            pass

    def tick(self, connection: Carrier) -> None:
        """The connection's tick: acknowledge what was delivered since the last acknowledgement."""
        if connection is self.connection and self.log.ack_due(True):
            self._acknowledge(connection)

    # ------------------------------------------------------------------ connections coming and going

    def resume(self, peer: SessionSync, now_ns: int) -> SessionSync:
        """A connection joins: apply the peer's sync (see :meth:`SessionLog.resume`); returns ours to tell it."""
        self.log.resume(peer, now_ns)
        return self.log.sync()

    def attach(self, connection: Carrier, *, resumed: bool) -> None:
        """``connection`` carries the session from now on: it reads session frames, and everything kept that the
        peer has not acknowledged is offered on it, in order, before anything sent later."""
        if resumed:
            self.resumes += 1
        self.connection = connection
        self._max_body = connection.max_message_length - FRAME_HEADER_LENGTH
        connection._join_session(self, resumed)
        self._pump()

    def detach(self, connection: Carrier, now_ns: int | None = None) -> None:
        """``connection`` is gone without a goodbye: sends are kept until a connection resumes the session (or
        its timeout ends it)."""
        if self.connection is not connection:
            return
        self.connection = None
        self.log.detach(time.monotonic_ns() if now_ns is None else now_ns)
        self._room.set()  # a sender waiting for room is told at once now: keep, or refuse

    def end(self, reason: str) -> int:
        """The session is over: drop what it kept (returned, also added to :attr:`dropped`); sends raise
        SessionExpiredError from now on."""
        if self.ended:
            return 0
        self.ended = True
        self.end_reason = reason
        self.connection = None
        dropped = self.log.drop_kept()
        self.dropped += dropped
        self._room.set()
        return dropped
