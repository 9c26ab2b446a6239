"""A connection's protocol without I/O: fragments and time in, what to deliver and what to answer out.

Theory of operation. The shell (:class:`endpoint.connection.shell.Connection`) polls the peer's image and hands
each fragment to :attr:`ConnectionCore.on_frame` (:meth:`~ConnectionCore.on_fragment`, or straight to
:meth:`~ConnectionCore.on_message` while nothing is sealed), then tells :meth:`ConnectionCore.polled` how many it
read and when. The core reassembles fragmented messages (bounded by what the peer's publication can send),
opens sealed ones, decodes, drops and counts what breaks the protocol, and routes the rest through the
callables it was built with: user messages to ``deliver`` (in the order they arrived), remote-call and
stream messages to ``route``, stream chunks to ``chunk``, newest-wins frames (:mod:`endpoint.connection.newest`)
to ``deliver`` unless a newer one of their class was delivered already, pings answered through
``send_control``, pongs to ``pong``, the peer's Disconnect to ``peer_closed`` (nothing after it is read).
:meth:`ConnectionCore.tick` says, from what was heard and sent when, whether the peer is alive, owed a keepalive,
or dead (:mod:`endpoint.connection.liveness`). Nothing here reads a clock, touches a socket or needs an event loop,
so every rule is unit-tested with bytes and numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG
from endpoint.connection.liveness import PEER_TIMED_OUT, Liveness, Verdict
from endpoint.connection.newest import NEWEST_HEADER_LENGTH, NewestFilter, is_newest, sequence_of
from endpoint.connection.sealing import Opener
from endpoint.errors import SealError, SerializationError
from endpoint.messages import (
    CHUNK_EXT,
    INTERNAL_TYPE_IDS,
    NEWEST_EXT,
    SAMPLE_SEQ,
    SESSION_EXT,
    Disconnect,
    Ping,
    Pong,
    RpcCall,
    internal_problem,
)

__all__ = ["ConnectionCore"]

_UNFRAGMENTED = BEGIN_FRAG_FLAG | END_FRAG_FLAG
_INTERNAL_TYPES = frozenset(INTERNAL_TYPE_IDS)


class ConnectionCore:
    """One connection's reading side and liveness (see the module's docstring)."""

    def __init__(
        self,
        *,
        decode: Callable[[memoryview], Any],
        now_ns: int,
        ping_interval_ns: int,
        peer_timeout_ns: int,
        max_inbound_length: int,
        deliver: Callable[[Any, int], None],
        route: Callable[[Any], None],
        chunk: Callable[[memoryview], None],
        send_control: Callable[[object], object],
        pong: Callable[[Pong], None],
        peer_closed: Callable[[str], None],
        malformed: Callable[[str], None],
        undecodable: Callable[[memoryview, SerializationError], None],
        malformed_call: Callable[[int, str], None],
        seal_failed: Callable[[SealError], None],
        report: Callable[[BaseException], None],
    ) -> None:
        self._decode = decode
        self.liveness = Liveness(now_ns, ping_interval_ns, peer_timeout_ns)
        self.max_inbound_length = max_inbound_length
        """The longest message the peer's publication can send (a longer reassembly is malformed)."""
        self._deliver = deliver
        self._route = route
        self._chunk = chunk
        self._send_control = send_control
        self._pong = pong
        self._peer_closed = peer_closed
        self._malformed = malformed
        self._undecodable = undecodable
        self._malformed_call = malformed_call
        self._seal_failed = seal_failed
        self._report = report
        self.heard = 0
        """Messages (fragments) read from the peer, keepalives included."""
        self.closed_by_peer = False
        """The peer's Disconnect was read: nothing after it is."""
        self.seal_failures = 0
        """Messages of the peer's that did not open (the first one ends the connection)."""
        self._control = 0
        self._seen_sent = 0
        self._seen_at_ns = now_ns
        """When ``_seen_sent`` was last looked at: sends counted after it left no earlier than this."""
        self._seen_hwm: int | None = None
        self._fragments: bytearray | None = None
        self._opener: Opener | None = None
        self.newest = NewestFilter()
        """The newest-wins sequence delivered per message class; its ``stale`` counts what it dropped."""
        self.newest_delivered = 0
        """Newest-wins messages delivered (not superseded when they arrived)."""
        self.on_whole: Callable[[memoryview], None] = self.on_message
        """Every whole message of the peer's goes through here: read as is, or opened first."""
        self.on_session: Callable[[memoryview], None] | None = None
        """Frames of a buffered session (:mod:`endpoint.connection.session`) go here once the connection carries
        one; without one such a frame is undecodable like any other junk."""
        self.on_frame: Callable[[memoryview, int], None] = self.on_message
        """What the shell polls the peer's image with: :meth:`on_message` itself while nothing is sealed (a
        whole message, the common case, costs no call more), :meth:`on_fragment` once everything is."""

    # ------------------------------------------------------------------ reading

    @property
    def sealed(self) -> bool:
        """Every message of the peer's is sealed (read through :meth:`on_fragment` and opened)."""
        return self._opener is not None

    def open_with(self, opener: Opener) -> None:
        """Every message of the peer's is sealed from now on (before anything is read)."""
        self._opener = opener
        self.on_whole = self._open_sealed
        self.on_frame = self.on_fragment

    def on_fragment(self, payload: memoryview, flags: int) -> None:
        """One fragment of the peer's. Whatever it is, an error handling it goes to ``report`` (the shell tells
        this connection's listeners, never the driver's, which would tell every end point on it)."""
        try:
            if flags & _UNFRAGMENTED == _UNFRAGMENTED:
                self.on_whole(payload)
            elif flags & BEGIN_FRAG_FLAG:
                self._fragments = bytearray(payload)
            elif self._fragments is not None:
                if len(self._fragments) + len(payload) > self.max_inbound_length:
                    self._fragments = None
                    self._malformed("a fragmented message longer than the peer's max message length")
                    return
                self._fragments += payload
                if flags & END_FRAG_FLAG:
                    whole, self._fragments = self._fragments, None
                    self.on_whole(memoryview(whole))
        except Exception as exc:
            self._report(exc)

    def on_unreliable_fragment(self, payload: memoryview, flags: int) -> None:
        """One fragment of the peer's unreliable stream. Only whole newest-wins frames travel there: a fragment of a
        longer message could not be told from one whose neighbours were lost and padded over, so anything else is
        malformed."""
        try:
            if flags & _UNFRAGMENTED != _UNFRAGMENTED or not is_newest(payload):
                self._malformed("a fragment on the unreliable stream that is not a whole newest-wins frame")
                return
            if not self.closed_by_peer:
                self._on_newest(payload)
        except Exception as exc:
            self._report(exc)

    def polled(self, count: int, now_ns: int) -> int:
        """``count`` fragments were read at ``now_ns``: the peer is alive. Returns the work among them (keepalives
        are not work: they must not keep an idle poller spinning)."""
        self.heard += count
        liveness = self.liveness  # Liveness.heard written out: once per poll that read something
        if now_ns > liveness.last_heard_ns:
            liveness.last_heard_ns = now_ns
        if self._control:
            count -= self._control
            self._control = 0
        return count

    @property
    def held_bytes(self) -> int:
        """Bytes of a fragmented message being reassembled."""
        fragments = self._fragments
        return len(fragments) if fragments is not None else 0

    def _open_sealed(self, payload: memoryview) -> None:
        if self.seal_failures:
            return  # the log is broken from the first failure on: nothing after it is believed
        opener = self._opener
        assert opener is not None
        try:
            plain = opener.open(payload)
        except SealError as exc:
            self.seal_failures += 1
            self._seal_failed(exc)
            return
        self.on_message(memoryview(plain))

    def on_message(self, payload: memoryview, flags: int = _UNFRAGMENTED) -> None:
        """One whole (opened) message of the peer's: classify, check and route it. Also the image's handler of an
        unsealed connection: a fragment of a longer message (``flags``) goes on to :meth:`on_fragment`. Whatever
        it is, an error handling it goes to ``report``."""
        if flags & _UNFRAGMENTED != _UNFRAGMENTED:
            self.on_fragment(payload, flags)
            return
        try:
            if self.closed_by_peer:
                return
            length = len(payload)
            if not length:
                self._malformed("an empty message")
                return
            if payload[0] == 0xC9 and length > 9:  # ext32: a chunk, newest-wins or session frame (or a huge message)
                ext = payload[5]
                if ext == CHUNK_EXT:
                    self._chunk(payload)
                    return
                if ext == NEWEST_EXT:
                    self._on_newest(payload)
                    return
                if ext == SESSION_EXT and self.on_session is not None:
                    self.on_session(payload)
                    return
            try:
                message = self._decode(payload)
            except SerializationError as exc:
                self._undecodable(payload, exc)
                return
            self._on_decoded(message, length)
        except Exception as exc:
            self._report(exc)

    def on_decoded(self, message: Any, length: int) -> None:
        """A whole message of the peer's, decoded already (from ``length`` bytes, not a chunk, newest-wins or session
        frame): check and route it as :meth:`on_message` does. The native dispatch hands over here what it does not
        deliver itself; an error goes to ``report``."""
        if self.closed_by_peer:
            return
        try:
            self._on_decoded(message, length)
        except Exception as exc:
            self._report(exc)

    def _on_decoded(self, message: Any, length: int) -> None:
        """The checks and routing of a decoded message (see :meth:`on_decoded`)."""
        cls = type(message)
        if cls in _INTERNAL_TYPES:
            problem = internal_problem(message)
            if problem is not None:
                if cls is RpcCall and type(message.call_id) is int and message.call_id > 0:
                    self._malformed_call(message.call_id, problem)  # the caller hears of it at once
                self._malformed(problem)
                return
            if cls is Ping:
                if message.seq == 0:  # a keepalive: heard, which is all it is for
                    self._control += 1
                    return
                if message.seq == SAMPLE_SEQ:  # a round-trip sample: answered, but no more work than a keepalive
                    self._control += 1
                self._send_control(Pong(message.seq, message.sent_ns))
                return
            if cls is Pong:
                if message.seq == 0 or message.seq == SAMPLE_SEQ:
                    self._control += 1
                self._pong(message)
                return
            if cls is Disconnect:
                self.closed_by_peer = True
                self._peer_closed(message.reason)
                return
            self._route(message)
            return
        self._deliver(message, length)

    def _on_newest(self, payload: memoryview) -> None:
        """A newest-wins frame: a user message, delivered only if no newer one of its class was."""
        sequence = sequence_of(payload) if len(payload) > NEWEST_HEADER_LENGTH else None
        if sequence is None:
            self._malformed("a newest-wins frame whose length disagrees with its header")
            return
        body = payload[NEWEST_HEADER_LENGTH:]
        try:
            message = self._decode(body)
        except SerializationError as exc:
            self._undecodable(body, exc)
            return
        cls = type(message)
        if cls in _INTERNAL_TYPES:
            self._malformed(f"an end point message ({cls.__name__}) in a newest-wins frame")
            return
        if self.newest.accept(cls, sequence):
            self.newest_delivered += 1
            self._deliver(message, len(body))

    # ------------------------------------------------------------------ liveness

    def tick(
        self,
        now_ns: int,
        sent: int,
        reading: bool,
        peer_hwm: int | None = None,
        stall_ns: int = 0,
        dropped_ns: int | None = None,
    ) -> Verdict:
        """Whether the peer is alive, owed a keepalive or dead, given ``sent`` (messages of ours the driver took,
        ever) and whether we read the peer now (if not, its silence is ours).

        ``peer_hwm``: how far the peer's stream has reached our driver (its receiver high-water mark, gaps
        included), passed while the peer has been quiet a while. When it moved since the last tick, the peer's
        process wrote new messages and they arrived: the silence is our reading falling behind (an overloaded
        loop, a gap waiting for a retransmit), not the peer's, so it counts as heard. None: not looked at.
        ``stall_ns``: how much later than due this tick came (this end was held up): not the peer's silence.
        ``dropped_ns``: when our driver was last seen dropping datagrams in the kernel (None: it was not, or it
        does not say), see :meth:`Liveness.datagrams_dropped`."""
        liveness = self.liveness
        if sent != self._seen_sent:
            # They left between the last look and now; when is not known, so the earliest: stamping them now
            # would let an idle connection's next keepalive leave up to two windows after its last send.
            self._seen_sent = sent
            liveness.sent(self._seen_at_ns)
        self._seen_at_ns = now_ns
        if not reading:
            liveness.not_reading(now_ns)
        liveness.stalled(now_ns, stall_ns)
        if dropped_ns is not None:
            liveness.datagrams_dropped(dropped_ns)
        if peer_hwm is None:
            self._seen_hwm = None
        else:
            if self._seen_hwm is not None and peer_hwm > self._seen_hwm:
                liveness.heard(now_ns)
            self._seen_hwm = peer_hwm
        return liveness.check(now_ns)

    def tick_quiet(self, now_ns: int, sent: int) -> bool:
        """:meth:`tick` for a connection we read, not held up (no stall), with nothing sent since the last look and
        the peer not overdue (so its mark is not looked at): when that tick would say :attr:`Verdict.ALIVE`, do
        what it does and return True (an idle connection looked at before its keepalive is owed, because its peer
        could have been overdue by then and was heard meanwhile); else False, and nothing changed: call tick."""
        liveness = self.liveness
        if (
            sent != self._seen_sent
            or now_ns - liveness.last_heard_ns > liveness.overdue_ns
            or liveness.check(now_ns) is not Verdict.ALIVE
        ):
            return False
        self._seen_at_ns = now_ns
        self._seen_hwm = None
        return True

    def kept_alive(self, now_ns: int, sent: int, probe: bool = False) -> None:
        """The keepalive (``probe``: the probe) :meth:`tick` asked for went out."""
        self._seen_sent = sent
        self._seen_at_ns = now_ns
        if probe:
            self.liveness.probed(now_ns)
        else:
            self.liveness.sent(now_ns)

    def dead_reason(self, now_ns: int) -> str:
        liveness = self.liveness
        return (
            f"{PEER_TIMED_OUT}: nothing heard for {liveness.silent_for_ns(now_ns) / 1e9:.2f} s "
            f"(peer_timeout {liveness.peer_timeout_ns / 1e9:g} s)"
        )
