"""Buffered sessions without I/O: sequence numbers, acknowledgements, what is kept, and for how long.

A buffered session outlives its connections: it is the client's key, not a connection. Each end numbers
the application messages it sends in the session (1, 2, ... per *incarnation*: a random number each end draws
when it starts numbering, so a restarted process is told from one that merely reconnected) and keeps every
message until the peer acknowledges it. The peer delivers a number at most once (anything at or below what it
already delivered is a duplicate, dropped and counted) and acknowledges cumulatively: on its keepalive tick,
and at once every :data:`ACK_EVERY` messages.

When a connection ends without a goodbye (lost: peer timed out, network gone, process killed) the session
is *detached*: sends are still kept, within the same bounds. A new connection with the same key resumes it: the
handshake carries each end's :class:`SessionSync` (sealed, in DONE and DONE_ACK), which says what each end
delivered of the other's and where its own numbering restarts; each end then drops what the other already has
and offers the rest again, in order, before anything new. A session detached for longer than the timeout is
dropped with everything it kept (:class:`SessionTable` on the server, bounded).

Frames (a hand-built msgpack ext value, like stream chunks, so they need no registered type and do not change
the registration hash): ``0xC9``, the 4-byte big-endian ext length, :data:`SESSION_EXT`, one kind byte
(:data:`DATA` or :data:`ACK`), the 8-byte big-endian sequence number, then (DATA only) the encoded message.

Nothing here reads a clock, touches a socket or needs an event loop: time comes in as ``now_ns``.
"""

from __future__ import annotations

import collections
import secrets
import struct
from collections.abc import Iterator
from typing import Generic, TypeVar

import attrs

from endpoint.errors import SessionBufferFullError
from endpoint.messages import SESSION_EXT

__all__ = [
    "ACK",
    "ACK_EVERY",
    "DATA",
    "FRAME_HEADER_LENGTH",
    "SESSION_EXT",
    "SessionLog",
    "SessionSync",
    "SessionTable",
    "TableStats",
    "ack_frame",
    "data_frame",
    "parse_frame",
]

DATA, ACK = 1, 2
FRAME_HEADER_LENGTH = 15
"""0xC9, ext length (4, big-endian), ext code, kind, sequence number (8, big-endian)."""
ACK_EVERY = 32
"""A receiver acknowledges at once after this many messages not yet acknowledged (else on its tick)."""

_HEADER = struct.Struct(">BIBBQ")
_U64 = (1 << 64) - 1


def data_frame(seq: int, body: bytes) -> bytes:
    """A DATA frame carrying the encoded message ``body`` as number ``seq``."""
    return _HEADER.pack(0xC9, len(body) + 9, SESSION_EXT, DATA, seq) + body


def ack_frame(delivered: int) -> bytes:
    """An ACK frame: every number up to ``delivered`` was delivered here."""
    return _HEADER.pack(0xC9, 9, SESSION_EXT, ACK, delivered)


def parse_frame(payload: memoryview) -> tuple[int, int, memoryview] | None:
    """(kind, seq, body) of a session frame, or None when it is not a well-formed one (the caller counts it)."""
    if len(payload) < FRAME_HEADER_LENGTH:
        return None
    marker, length, ext, kind, seq = _HEADER.unpack_from(payload)
    if marker != 0xC9 or ext != SESSION_EXT or length != len(payload) - 6:
        return None
    if kind == DATA:
        return kind, seq, payload[FRAME_HEADER_LENGTH:]
    if kind == ACK and length == 9:
        return kind, seq, payload[FRAME_HEADER_LENGTH:]
    return None


@attrs.frozen
class SessionSync:
    """What one end tells the other when a connection (re)joins the session (sealed in the handshake).

    ``incarnation``: the sender's numbering (random, drawn when it started numbering); ``first_seq``: the number
    of the first message it will send now (its oldest unacknowledged, or the next new one); ``seen`` and
    ``delivered``: the incarnation of the receiver's numbering the sender delivered, and up to which number
    (``seen`` 0: none). Each is an unsigned 64-bit int.
    """

    incarnation: int
    first_seq: int
    seen: int
    delivered: int

    def as_list(self) -> list[int]:
        return [self.incarnation, self.first_seq, self.seen, self.delivered]

    @staticmethod
    def from_list(value: object) -> SessionSync | None:
        """The sync a peer sent, or None when it is malformed."""
        if type(value) is not list or len(value) != 4:
            return None
        if not all(type(v) is int and 0 <= v <= _U64 for v in value):
            return None
        sync = SessionSync(*value)
        return sync if sync.first_seq >= 1 and sync.incarnation != 0 else None


class SessionLog:
    """One end's bookkeeping of one session: its numbered messages kept until acknowledged (bounded in count and
    bytes), the peer's numbers delivered here, and since when it has no connection."""

    def __init__(self, *, max_messages: int, max_bytes: int, incarnation: int | None = None, now_ns: int = 0) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError(f"max_messages and max_bytes must be >= 1, got {max_messages}, {max_bytes}")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.incarnation = incarnation if incarnation is not None else secrets.randbits(64) or 1
        # sending
        self.last_seq = 0
        """The number of the newest message kept (0: none yet)."""
        self.acked = 0
        """Every number up to this one the peer acknowledged (its kept copies are gone)."""
        self.offered = 0
        """Every number up to this one was offered on the current connection."""
        self._kept: collections.deque[tuple[int, bytes]] = collections.deque()
        self.kept_bytes = 0
        # receiving
        self.peer_incarnation = 0
        self.delivered = 0
        """The peer's numbers up to this one were delivered here."""
        self.ack_sent = 0
        """What the last acknowledgement sent said."""
        # counted
        self.refused = 0
        """Sends refused because the kept messages were at a bound."""
        self.duplicates = 0
        """Messages of the peer's dropped because their number was delivered already."""
        self.gaps = 0
        """Messages of the peer's whose number skipped ahead (never on an intact connection; delivered anyway)."""
        self.bad_acks = 0
        """Acknowledgements of numbers never sent (dropped)."""
        self.resent = 0
        """Messages offered on a new connection that the previous one (or none) had not got acknowledged."""
        self.detached_ns: int | None = now_ns
        """Since when the session has no connection; None while it has one."""

    # ------------------------------------------------------------------ sending

    @property
    def kept(self) -> int:
        """Messages kept until the peer acknowledges them (offered or not)."""
        return len(self._kept)

    @property
    def unoffered(self) -> int:
        return self.last_seq - self.offered

    def full_for(self, size: int) -> str | None:
        """The bound keeping one more message of ``size`` encoded bytes would pass, or None when it fits."""
        if len(self._kept) >= self.max_messages:
            return "max_buffered_messages"
        if self.kept_bytes + size + FRAME_HEADER_LENGTH > self.max_bytes:
            return "max_buffered_bytes"
        return None

    def keep(self, body: bytes) -> bytes:
        """Number the encoded message ``body``, keep it until acknowledged, and return its frame.

        SessionBufferFullError (nothing kept) when it would pass a bound.
        """
        bound = self.full_for(len(body))
        if bound is not None:
            self.refused += 1
            raise SessionBufferFullError(
                f"the session keeps {len(self._kept)} messages ({self.kept_bytes} bytes) the peer has not "
                f"acknowledged; one more of {len(body)} bytes passes {bound}",
                bound,
            )
        self.last_seq += 1
        frame = data_frame(self.last_seq, body)
        self._kept.append((self.last_seq, frame))
        self.kept_bytes += len(frame)
        return frame

    def next_to_offer(self) -> tuple[int, bytes] | None:
        """The oldest kept message not yet offered on the current connection, or None."""
        if self.offered >= self.last_seq:
            return None
        index = self.offered + 1 - self._kept[0][0] if self._kept else 0
        return self._kept[index]

    def mark_offered(self, seq: int) -> None:
        self.offered = seq

    def on_ack(self, delivered: int) -> int:
        """The peer delivered everything up to ``delivered``: drop those kept copies; returns how many went.
        An acknowledgement of a number never offered is dropped and counted."""
        if delivered > self.offered:
            self.bad_acks += 1
            return 0
        freed = 0
        kept = self._kept
        while kept and kept[0][0] <= delivered:
            _, frame = kept.popleft()
            self.kept_bytes -= len(frame)
            freed += 1
        if delivered > self.acked:
            self.acked = delivered
        return freed

    # ------------------------------------------------------------------ receiving

    def on_data(self, seq: int) -> bool:
        """Whether the peer's message number ``seq`` is to be delivered (False: a duplicate, counted)."""
        delivered = self.delivered
        if seq <= delivered:
            self.duplicates += 1
            return False
        if seq != delivered + 1:
            self.gaps += 1
        self.delivered = seq
        return True

    def ack_due(self, on_tick: bool) -> bool:
        """Whether to acknowledge now: :data:`ACK_EVERY` deliveries went unacknowledged, or any on a tick."""
        owed = self.delivered - self.ack_sent
        return owed >= ACK_EVERY or (on_tick and owed > 0)

    def acknowledged(self) -> int:
        """An ACK goes out now; returns the number it carries."""
        self.ack_sent = self.delivered
        return self.delivered

    # ------------------------------------------------------------------ joining a connection

    def sync(self) -> SessionSync:
        """What to tell the peer when a connection joins the session."""
        first = self._kept[0][0] if self._kept else self.last_seq + 1
        return SessionSync(self.incarnation, first, self.peer_incarnation, self.delivered)

    def resume(self, peer: SessionSync, now_ns: int) -> None:
        """A connection joined the session and the peer said ``peer``: drop what it has of ours, take up its
        numbering, and offer everything still kept again from the start."""
        if peer.seen == self.incarnation:
            self.offered = max(self.offered, min(peer.delivered, self.last_seq))
            self.on_ack(min(peer.delivered, self.last_seq))
        if peer.incarnation != self.peer_incarnation:
            # A peer we never heard, or one that restarted: its numbering starts over.
            self.peer_incarnation = peer.incarnation
            self.delivered = peer.first_seq - 1
        else:
            self.delivered = max(self.delivered, peer.first_seq - 1)
        self.ack_sent = self.delivered
        self.resent += self.last_seq - self.acked
        self.offered = self.acked
        self.detached_ns = None

    def detach(self, now_ns: int) -> None:
        """The session's connection is gone; what is kept stays (until :meth:`expired`)."""
        if self.detached_ns is None:
            self.detached_ns = now_ns

    def expired(self, now_ns: int, timeout_ns: int) -> bool:
        """Detached for longer than ``timeout_ns``."""
        detached = self.detached_ns
        return detached is not None and now_ns - detached > timeout_ns

    def drop_kept(self) -> int:
        """Forget every kept message (the session ends); returns how many."""
        count = len(self._kept)
        self._kept.clear()
        self.kept_bytes = 0
        self.offered = self.acked = self.last_seq
        return count


# ---------------------------------------------------------------------------------------------------------------------
# The server's table of sessions


T = TypeVar("T")


@attrs.define
class TableStats:
    """What a :class:`SessionTable` did: sessions opened fresh, resumed, expired (detached past the timeout),
    evicted (the oldest detached gave way to a new one at the bound), refused (the table held only connected
    ones), closed (ended by a graceful close)."""

    opened: int = 0
    resumed: int = 0
    expired: int = 0
    evicted: int = 0
    refused: int = 0
    closed: int = 0


@attrs.define
class _Entry(Generic[T]):
    value: T
    log: SessionLog


class SessionTable(Generic[T]):
    """Sessions by client key, at most ``max_sessions``; ``T`` is whatever the glue keeps with each.

    When full, a new key makes the oldest detached session give way (evicted); when none is detached, the new
    key gets no session (refused).
    """

    def __init__(self, *, max_sessions: int, timeout_ns: int) -> None:
        if max_sessions < 1 or timeout_ns <= 0:
            raise ValueError(f"max_sessions must be >= 1 and timeout_ns > 0, got {max_sessions}, {timeout_ns}")
        self.max_sessions = max_sessions
        self.timeout_ns = timeout_ns
        self.stats = TableStats()
        self._entries: dict[bytes, _Entry[T]] = {}
        self.evicted: list[T] = []
        """Values of the sessions the last :meth:`open` evicted (the glue tells their listeners, then clears it)."""

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[T]:
        return iter([entry.value for entry in self._entries.values()])

    @property
    def detached(self) -> int:
        return sum(1 for entry in self._entries.values() if entry.log.detached_ns is not None)

    def get(self, key: bytes) -> T | None:
        entry = self._entries.get(key)
        return entry.value if entry is not None else None

    def open(self, key: bytes, now_ns: int, make: T, log: SessionLog) -> tuple[T, bool] | None:
        """The session of ``key`` and whether it existed (resumed); ``make`` and ``log`` become a new one. None
        when the table is full of connected sessions (counted as refused)."""
        entry = self._entries.get(key)
        if entry is not None:
            self.stats.resumed += 1
            return entry.value, True
        if len(self._entries) >= self.max_sessions:
            oldest_key = None
            oldest_ns = 0
            for candidate, known in self._entries.items():
                detached = known.log.detached_ns
                if detached is not None and (oldest_key is None or detached < oldest_ns):
                    oldest_key, oldest_ns = candidate, detached
            if oldest_key is None:
                self.stats.refused += 1
                return None
            self.evicted.append(self._entries.pop(oldest_key).value)
            self.stats.evicted += 1
        self._entries[key] = _Entry(make, log)
        self.stats.opened += 1
        return make, False

    def close(self, key: bytes) -> T | None:
        """End the session of ``key`` for good (a graceful close); its value, or None when unknown."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self.stats.closed += 1
        return entry.value

    def expire(self, now_ns: int) -> list[T]:
        """Drop the sessions detached for longer than the timeout; returns their values."""
        gone = [key for key, entry in self._entries.items() if entry.log.expired(now_ns, self.timeout_ns)]
        self.stats.expired += len(gone)
        return [self._entries.pop(key).value for key in gone]

    def clear(self) -> list[T]:
        values = [entry.value for entry in self._entries.values()]
        self._entries.clear()
        return values
