"""A publication sent over UDP: the sender's half and the conductor's half.

Theory of operation. The sender agent calls ``send`` each duty cycle: until a
receiver answers, SETUP goes out every 100 ms; then committed frames are sent
straight from the term, at most one MTU per datagram and never beyond the sender
limit that flow control derives from the receivers' status messages; with
nothing to send, a heartbeat goes out every 100 ms (with the EOS flag once the
publication has been drained). NAKs are answered by resending from the term
through the retransmit handler's delay and linger rules. The common case (data
and plain heartbeats of a connected publication) is sent natively for all due
publications at once (``driver.media._net.send_publications``, see the sender):
``send`` here is the same algorithm, the path for everything else, and the two
share ``native`` (a ``SendSlot``: the time of the last datagram, the stall
tracking, and the flag that says this path must visit).

The conductor calls ``update_publisher_limit`` each cycle (the publisher may run
a term window ahead of the sender once a receiver is connected, and old terms are
zeroed before they are reused) and ``on_time_event`` on its timer (receivers gone
quiet for the connection timeout, unblocking a dead writer's claim, and the
drain → linger → done lifecycle after the last client lets go).

Spies (``aeron-spy:`` subscriptions on this driver) read the log in place, each
through its own subscriber position. As in Aeron 1.15.1 they hold the publisher
back (the limit is a term window past the slowest of the sender and the spies)
whenever the publication is connected, and a draining publication lingers only
once its spies have read to the end. With ``spies_simulate_connection`` spies
alone make it connected: with no receiver, the sender's position follows the
furthest spy (what nobody receives counts as sent, never resent). The sender
never reads a spy's counter: the conductor gives it the furthest spy position.

Fields written by the sender thread are only read by the conductor, and the
other way round; the GIL makes each attribute access atomic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from driver.concurrent.counters import AtomicCounter
from driver.core.agenda import no_wake
from driver.core.driver_publication import DriverPublication, PublicationState
from driver.core.flow_control import FlowControl, idles_only_at_end_of_stream
from driver.core.retransmit import RetransmitHandler
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.frame import is_quiet_alone
from driver.logbuffer.log_buffers import LogBuffers
from driver.logbuffer.scanner import scan_for_availability
from driver.media._net import FEEDBACK_NONE, FeedbackSlot, SendSlot
from driver.media.endpoints import DynamicDestinations
from driver.wire.data import HEARTBEAT_EOS_FLAGS, HEARTBEAT_FLAGS, write_heartbeat
from driver.wire.setup import write_setup

__all__ = ["NetworkPublication", "NetworkPublicationState"]

SETUP_INTERVAL_NS = 100_000_000
HEARTBEAT_INTERVAL_NS = 100_000_000
MAX_DATAGRAMS_PER_CYCLE = 64
"""Datagrams one publication may send per sender duty cycle (the native step's cap too): a busy stream's window
goes in a few cycles, and a run of them in one segmented send (the kernel cuts at most 64 from one message)."""


NetworkPublicationState = PublicationState  # one life cycle for every publication


class NetworkPublication(DriverPublication):
    receivers_changed: deque[NetworkPublication] | None = None
    """Where this publication puts itself when it gains or loses its receivers (the sender's thread or the
    conductor's: a deque takes either): its owner's conductor then recomputes its publisher limit."""

    def __init__(
        self,
        *,
        registration_id: int,
        channel: str,
        endpoint: SendEndpoint,
        log: LogBuffers,
        session_id: int,
        stream_id: int,
        publisher_position: AtomicCounter,
        publisher_limit: AtomicCounter,
        sender_position: AtomicCounter,
        sender_limit: AtomicCounter,
        flow_control: FlowControl,
        retransmit_handler: RetransmitHandler,
        counters: SenderCounters,
        term_window_length: int,
        connection_timeout_ns: int,
        unblock_timeout_ns: int,
        linger_timeout_ns: int,
        multicast_ttl: int,
        is_exclusive: bool,
        now_ns: int,
        signal_eos: bool = True,
        destinations: DynamicDestinations | None = None,
        heartbeat_interval_ns: int = HEARTBEAT_INTERVAL_NS,
        tail_probe_ns: int = 0,
        spies_simulate_connection: bool = False,
    ) -> None:
        super().__init__(log, publisher_limit, now_ns)
        self.heartbeat_interval_ns = heartbeat_interval_ns
        """An idle publication heartbeats this often (Aeron's 100 ms by default; the receiver only needs one well
        within its image liveness timeout, and each costs both drivers a datagram)."""
        self.registration_id = registration_id
        self.channel = channel
        self.endpoint = endpoint
        self.destinations = destinations
        """A private publication's own destinations on a dynamic control channel (what it sends through then)."""
        self._out: SendEndpoint = destinations if destinations is not None else endpoint
        self.session_id = session_id
        self.stream_id = stream_id
        self.publisher_position = publisher_position
        self.sender_position = sender_position
        self.sender_limit = sender_limit
        self.flow_control = flow_control
        self.retransmit_handler = retransmit_handler
        self.counters = counters
        self.is_exclusive = is_exclusive
        self.term_mask = self.term_length - 1
        self.mtu = lbd.mtu_length(log.metadata)
        self.term_window_length = term_window_length
        self.connection_timeout_ns = connection_timeout_ns
        self.unblock_timeout_ns = unblock_timeout_ns
        self.linger_timeout_ns = linger_timeout_ns
        self.multicast_ttl = multicast_ttl
        self.signal_eos = signal_eos  # the channel's ``eos`` parameter: flag the final heartbeats
        self._terms = log.terms
        self._term_views = log.term_views
        self._control = bytearray(64)
        self._control_view = memoryview(self._control)
        # Unicast and max-multicast flow control have nothing to do on an idle cycle before end of stream.
        self._idle_flow_control = not idles_only_at_end_of_stream(flow_control)
        self._resend = self.resend  # bound once: timeouts are processed every duty cycle
        flow_control.initialize(self.initial_term_id, self.term_length)
        feedback = getattr(flow_control, "feedback", None)
        self.feedback: FeedbackSlot = feedback if isinstance(feedback, FeedbackSlot) else FeedbackSlot(FEEDBACK_NONE)
        """What a status message changes (the time of the last one, flow control's state), shared with the send
        endpoint's native path, which applies the plain ones while ``feedback.native`` says it may."""
        self.feedback.bind(
            session_id,
            stream_id,
            self.initial_term_id,
            self.position_bits,
            sender_limit.location(),
            (log.metadata, lbd.LOG_IS_CONNECTED_OFFSET),
        )
        start = self.producer_position()
        for counter in (publisher_position, publisher_limit, sender_position, sender_limit):
            counter.set_ordered(start)
        # sender-thread state
        self.agenda_index = -1
        self.wake: Callable[[], None] = no_wake
        """Set by the sender: makes its next duty cycle visit this publication (feedback arrived)."""
        self.native = SendSlot(
            terms=log.terms,
            session_id=session_id,
            stream_id=stream_id,
            initial_term_id=self.initial_term_id,
            position_bits=self.position_bits,
            mtu=self.mtu,
            sender_position=sender_position.location(),
            sender_limit=sender_limit.location(),
            bytes_sent=counters.bytes_sent.location(),
            heartbeats_sent=counters.heartbeats_sent.location(),
            short_sends=counters.short_sends.location(),
            sender_flow_control_limits=counters.sender_flow_control_limits.location(),
            heartbeat_interval_ns=heartbeat_interval_ns,
            last_send_ns=now_ns - heartbeat_interval_ns - 1,
        )
        """The send state both paths share (time of the last datagram, a stall tracked, whether Python must visit):
        the sender binds it to the endpoint's socket and destinations, and then sends the common case natively
        (``driver.media._net.send_publications``)."""
        self.native.probe_ns = tail_probe_ns
        """A tail probe (``tail-probe``, ours): one heartbeat this long after data, so that a receiver that lost the
        stream's last datagrams learns of them and asks again without waiting out a long heartbeat interval or
        the next message (0: none; it matters only when shorter than ``heartbeat_interval_ns``)."""
        self._native_capable = not self._idle_flow_control and not spies_simulate_connection
        """Nothing the native step leaves out is ever needed while the publication has no SETUP, resend or end of
        stream to send (flow control with no idle step; spies never stand in for receivers)."""
        self._time_of_last_setup_ns = now_ns - SETUP_INTERVAL_NS - 1
        self._should_send_setup = True
        self.end_of_stream_sent = False
        # shared: set by the sender on SM, read by the conductor
        self.feedback.last_sm_ns = now_ns
        self.has_receivers = False
        self._rejecting_receivers: set[int] = set()
        # spies: positions and connection kept by the conductor; has_spies and max_spy_position read by the sender
        self.spies_simulate_connection = spies_simulate_connection
        self.spy_positions: list[AtomicCounter] = []
        self.has_spies = False
        self.max_spy_position = start
        # conductor-thread state
        self._clean_position = start
        self._clean_reserve = self.term_length * 2
        """How far the publisher limit may run ahead of the cleaned part of the log before cleaning more."""
        self._sender_position_at = sender_position.location()
        self._publisher_limit_at = publisher_limit.location()
        self._last_sender_position = start
        self._time_of_last_sender_change_ns = now_ns
        self.timer_quiet = False
        """At the last :meth:`on_time_event`: active, receivers answering, the connected flag set and (unless
        exclusive) everything written sent. While its log is not written to, :meth:`quiet_time_event` stands in
        for the next one (the conductor watches the log's tails)."""

    @property
    def time_of_last_status_message_ns(self) -> int:
        """When the last status message came (set by the sender, or natively by its endpoint)."""
        return self.feedback.last_sm_ns

    @time_of_last_status_message_ns.setter
    def time_of_last_status_message_ns(self, value: int) -> None:
        self.feedback.last_sm_ns = value

    def _receivers_moved(self) -> None:
        changed = self.receivers_changed
        if changed is not None:
            changed.append(self)

    @property
    def has_receivers(self) -> bool:
        """A receiver answers (set by the sender on an SM, cleared by the conductor after the connection timeout).
        Kept in ``feedback``, whose native SMs need it true."""
        return self.feedback.has_receivers

    @has_receivers.setter
    def has_receivers(self, value: bool) -> None:
        self.feedback.has_receivers = value

    # -- sender thread --------------------------------------------------------------------------

    @property
    def should_send_setup(self) -> bool:
        return self._should_send_setup

    @should_send_setup.setter
    def should_send_setup(self, value: bool) -> None:
        self._should_send_setup = value
        if value:
            self.native.python = True  # SETUP is sent by the Python path

    @property
    def is_end_of_stream(self) -> bool:
        """The publication is ending (set by the conductor): its SMs then wake the sender, so they go through
        Python (``feedback``), and so do its sends (``native``)."""
        return self.feedback.end_of_stream

    @is_end_of_stream.setter
    def is_end_of_stream(self, value: bool) -> None:
        self.feedback.end_of_stream = value
        if value:
            self.native.python = True  # end-of-stream heartbeats and the linger are the Python path's

    def sends_natively(self) -> bool:
        """Whether the native step may send for this publication now: nothing but data and plain heartbeats to
        send (no SETUP, no resend pending, not at end of stream), through a bound socket."""
        return (
            self._native_capable
            and self.native.bound
            and not self._should_send_setup
            and not self.feedback.end_of_stream
            and not self.retransmit_handler.active_count
        )

    def send(self, now_ns: int) -> int:
        sender_position = self.sender_position.get()
        if self.should_send_setup:
            term_offset = sender_position & self.term_mask
            active_term_id = lbd.int32((sender_position >> self.position_bits) + self.initial_term_id)
            self._setup_check(now_ns, active_term_id, term_offset)
        bytes_sent = self._send_data(now_ns, sender_position)
        if bytes_sent == 0:
            # An idle cycle: a heartbeat when one is due, and flow control's idle step where it has one.
            if now_ns - self.native.last_send_ns > self._heartbeat_wait_ns() or self.is_end_of_stream:
                term_offset = sender_position & self.term_mask
                active_term_id = lbd.int32((sender_position >> self.position_bits) + self.initial_term_id)
                bytes_sent = self._heartbeat_check(now_ns, active_term_id, term_offset)
            if self.has_spies and self.spies_simulate_connection and not self.has_receivers:
                # Spies alone count as connected: with nobody to send to, what the furthest spy has read counts
                # as sent (Aeron's simulated connection). A move is work, so the sender keeps pace with the spies.
                spied = self.max_spy_position
                if spied > sender_position:
                    self.sender_position.set_ordered(spied)
                    sender_position = spied
                    bytes_sent = 1
                self.sender_limit.set_ordered(
                    self.flow_control.on_idle(now_ns, sender_position, sender_position, self.is_end_of_stream)
                )
            elif self._idle_flow_control or self.is_end_of_stream:
                limit = self.sender_limit.get()
                new_limit = self.flow_control.on_idle(now_ns, limit, sender_position, self.is_end_of_stream)
                if new_limit != limit:
                    self.sender_limit.set_ordered(new_limit)
        self.retransmit_handler.process_timeouts(now_ns, self._resend)
        return bytes_sent

    @property
    def waiting_entry(self) -> tuple[object, ...]:
        """What a :class:`~driver.concurrent._watches.FrameWatch` needs to see a frame at the sender position."""
        buffer, offset = self.sender_position.location()
        return (buffer, offset, tuple(self._terms), self.position_bits, self.term_mask)

    def next_send_ns(self) -> int:
        """When ``send`` has something to do again with no new frame and no feedback: the next heartbeat or
        SETUP; 0 (every cycle) while resends are pending, flow control works when idle, or end of stream is yet
        to be signalled. A lingering publication's status messages wake it, and its heartbeats run flow
        control's idle step (which ends the linger) often enough."""
        if (
            self.retransmit_handler.active_count
            or self._idle_flow_control
            or (self.is_end_of_stream and self.signal_eos and not self.end_of_stream_sent)
        ):
            return 0
        due = self.native.last_send_ns + self._heartbeat_wait_ns() + 1
        if self.should_send_setup:
            setup_due = self._time_of_last_setup_ns + SETUP_INTERVAL_NS + 1
            if setup_due < due:
                return setup_due
        return due

    def _send_data(self, now_ns: int, sender_position: int) -> int:
        """Send up to ``MAX_DATAGRAMS_PER_CYCLE`` datagrams within the window; returns the bytes sent.

        Aeron sends one datagram per publication per duty cycle; a Python duty cycle
        costs far more than a send, so several datagrams share one.
        """
        window = self.sender_limit.get() - sender_position
        if window <= 0:
            if self.native.track_limits:
                self.native.track_limits = False
                self.counters.sender_flow_control_limits.increment()
            return 0
        mtu = self.mtu
        bits = self.position_bits
        mask = self.term_mask
        index = (sender_position >> bits) % 3
        term_offset = sender_position & mask
        available, padding = scan_for_availability(self._terms[index], term_offset, window if window < mtu else mtu)
        if available <= 0:
            return 0  # nothing new (the common idle cycle)
        send = self._out.send
        bytes_sent = 0
        loud = False
        for datagrams in range(MAX_DATAGRAMS_PER_CYCLE):
            if datagrams:
                index = (sender_position >> bits) % 3
                term_offset = sender_position & mask
                available, padding = scan_for_availability(
                    self._terms[index], term_offset, window if window < mtu else mtu
                )
                if available <= 0:
                    break
            if send(self._term_views[index][term_offset : term_offset + available]) != available:
                self.counters.short_sends.increment()
                break
            loud = loud or not is_quiet_alone(self._terms[index], term_offset, available)
            bytes_sent += available
            sender_position += available + padding
            window -= available + padding
            if window <= 0:
                break
        if bytes_sent:
            native = self.native
            native.last_send_ns = now_ns
            if loud:  # (only quiet messages went: a probe owed before stays owed)
                native.probe_pending = native.probe_ns > 0
            native.track_limits = True
            self.sender_position.set_ordered(sender_position)
            self.counters.bytes_sent.get_and_add(bytes_sent)
        return bytes_sent

    def _setup_check(self, now_ns: int, active_term_id: int, term_offset: int) -> None:
        if now_ns - self._time_of_last_setup_ns > SETUP_INTERVAL_NS:
            self._time_of_last_setup_ns = now_ns
            self.native.last_send_ns = now_ns
            length = write_setup(
                self._control,
                0,
                term_offset,
                self.session_id,
                self.stream_id,
                self.initial_term_id,
                active_term_id,
                self.term_length,
                self.mtu,
                self.multicast_ttl,
            )
            self._out.send(self._control_view[:length])

    def signal_end_on_close(self, now_ns: int) -> int:
        """The driver closes: one end-of-stream heartbeat at what was sent, unless told already or ``eos=false``."""
        if not self.signal_eos or self.end_of_stream_sent or not self.has_receivers:
            return 0
        self.is_end_of_stream = True
        sender_position = self.sender_position.get()
        term_offset = sender_position & self.term_mask
        active_term_id = lbd.int32((sender_position >> self.position_bits) + self.initial_term_id)
        return self._heartbeat_check(now_ns, active_term_id, term_offset)

    def _heartbeat_wait_ns(self) -> int:
        """How long after the last send an idle stream heartbeats (as the native step's ``heartbeat_wait``): the
        tail probe's wait once after data, else the interval."""
        native = self.native
        if native.probe_pending and native.probe_ns < self.heartbeat_interval_ns:
            return native.probe_ns
        return self.heartbeat_interval_ns

    def _heartbeat_check(self, now_ns: int, active_term_id: int, term_offset: int) -> int:
        signal_eos = self.is_end_of_stream and self.signal_eos
        due = now_ns - self.native.last_send_ns > self._heartbeat_wait_ns()
        if not due and not (signal_eos and not self.end_of_stream_sent):  # the first EOS goes out at once
            return 0
        flags = HEARTBEAT_EOS_FLAGS if signal_eos else HEARTBEAT_FLAGS
        length = write_heartbeat(self._control, 0, self.session_id, self.stream_id, active_term_id, term_offset, flags)
        sent = self._out.send(self._control_view[:length])
        if sent == length:
            self.counters.heartbeats_sent.increment()
            self.native.probe_pending = False
            if signal_eos:
                self.end_of_stream_sent = True
        else:
            self.counters.short_sends.increment()
        self.native.last_send_ns = now_ns
        return sent

    def on_status_message(
        self, flags: int, term_id: int, term_offset: int, window: int, receiver_id: int, now_ns: int
    ) -> None:
        """A status message the native path did not take (see ``feedback``): this one, the first of a receiver,
        one asking for a SETUP, or any while the publication is not yet (or no longer) in its steady state."""
        feedback = self.feedback
        feedback.last_sm_ns = now_ns
        # Only a SETUP asked for, or a linger the receivers may now end, needs the sender's next cycle: a frame
        # waiting behind the limit is visited every cycle anyway (the frame watch), and a plain SM from an idle
        # stream (once a second per stream on a server's idle connections) leaves nothing to send.
        if flags & 0x80:  # SEND_SETUP: the receiver lost (or never had) our SETUP
            feedback.native = False
            if not self.is_end_of_stream:
                self.should_send_setup = True
                self._time_of_last_setup_ns = now_ns - SETUP_INTERVAL_NS - 1
                self.wake()
            return
        if self.is_end_of_stream:
            self.wake()
        self.should_send_setup = False
        if not self.has_receivers:
            self.has_receivers = True
            self._receivers_moved()
        limit = self.sender_limit.get()
        new_limit = self.flow_control.on_status_message(
            term_id, term_offset, window, receiver_id, now_ns, limit, self.initial_term_id, self.position_bits
        )
        if new_limit != limit:
            self.sender_limit.set_ordered(new_limit)
        lbd.set_is_connected(self.log.metadata, True)
        # The next plain SM needs none of the above but times, positions and the limit: the endpoint may apply it
        # natively (it hands back the first of a new receiver, any asking for a SETUP, and all of them while
        # has_receivers is False or is_end_of_stream True, which live in ``feedback``).
        feedback.native = True

    def on_error(self, receiver_id: int) -> bool:
        """A receiver rejected this stream (ERR frame): drop it; True the first time it says so."""
        rejected = self._rejecting_receivers
        if receiver_id in rejected:
            return False
        rejected.add(receiver_id)
        self.flow_control.on_error(receiver_id)
        self.wake()
        return True

    def on_nak(self, term_id: int, term_offset: int, length: int, now_ns: int) -> None:
        self.retransmit_handler.on_nak(term_id, term_offset, length, self.term_length, now_ns, self.resend)
        self.wake()

    def resend(self, term_id: int, term_offset: int, length: int) -> None:
        """Send ``length`` bytes from ``(term_id, term_offset)`` again, in MTU-sized datagrams."""
        sender_position = self.sender_position.get()
        resend_position = lbd.compute_position(term_id, term_offset, self.position_bits, self.initial_term_id)
        if not sender_position - self.term_length <= resend_position < sender_position:
            return
        index = (resend_position >> self.position_bits) % 3
        term = self._terms[index]
        view = self._term_views[index]
        remaining = length
        offset = term_offset
        while remaining > 0:
            available, padding = scan_for_availability(term, offset, min(remaining, self.mtu))
            if available <= 0:
                break
            if self._out.send(view[offset : offset + available]) != available:
                self.counters.short_sends.increment()
                break
            self.counters.retransmits_sent.increment()
            step = available + padding
            offset += step
            remaining -= step

    # -- conductor thread -----------------------------------------------------------------------

    def update_publisher_limit(self) -> int:
        if self.state is not NetworkPublicationState.ACTIVE:
            return 0
        spies = self.spy_positions
        if not spies and self.feedback.has_receivers:
            # The common case (once per message sent) written out: no call below but the counters' own reads and
            # the release store (the same single-writer propose-max as AtomicCounter.propose_max_ordered).
            buffer, offset = self._sender_position_at
            proposed = buffer.get_long_volatile(offset) + self.term_window_length
            buffer, offset = self._publisher_limit_at
            if buffer.get_long(offset) >= proposed:
                return 0
            buffer.put_long_ordered(offset, proposed)
            if proposed - self._clean_position > self._clean_reserve:
                self._clean_buffer(proposed)
            return 1
        sender_position = self.sender_position.get_volatile()
        if self.has_receivers or (spies and self.spies_simulate_connection):
            slowest = sender_position
            if spies:
                furthest = sender_position
                for spy in spies:
                    position = spy.get_volatile()
                    if position < slowest:
                        slowest = position
                    elif position > furthest:
                        furthest = position
                if furthest > self.max_spy_position:
                    self.max_spy_position = furthest
            proposed = slowest + self.term_window_length
            if self.publisher_limit.propose_max_ordered(proposed):
                self._clean_buffer(proposed)
                return 1
        elif self.publisher_limit.get() > sender_position:
            self.publisher_limit.set_ordered(sender_position)
        return 0

    def join_position(self) -> int:
        """Where a new spy starts reading: what has been sent (Aeron's consumer position); with only spies to
        connect it, what they have read counts as sent even before the sender has caught up with them."""
        sent = self.sender_position.get_volatile()
        if self.spies_simulate_connection and not self.has_receivers:
            return max(sent, self.max_spy_position)
        return sent

    def add_spy(self, position: AtomicCounter) -> None:
        self.spy_positions.append(position)
        self.has_spies = True
        self._update_connected()

    def remove_spy(self, position: AtomicCounter) -> None:
        """Forget a spy and free its counter."""
        if position in self.spy_positions:
            self.spy_positions.remove(position)
            read = position.get_volatile()
            if read > self.max_spy_position:
                self.max_spy_position = read
        self.has_spies = bool(self.spy_positions)
        position.close()
        self._update_connected()

    def spies_finished(self, end_position: int) -> bool:
        return all(spy.get_volatile() >= end_position for spy in self.spy_positions)

    def _update_connected(self) -> None:
        """Connected: a receiver answers, or spies count as one (``spies_simulate_connection``). The sender also
        sets it on each status message, which mends a stale ``False`` written here while one arrived."""
        connected = self.has_receivers or (self.has_spies and self.spies_simulate_connection)
        if connected != lbd.is_connected(self.log.metadata):
            lbd.set_is_connected(self.log.metadata, connected)

    def _clean_buffer(self, publisher_limit: int) -> None:
        clean_position = self._clean_position
        reserved = self._clean_reserve
        dirty = publisher_limit - clean_position
        if dirty > reserved:
            term_offset = clean_position & self.term_mask
            length = min(dirty - reserved, self.term_length - term_offset)
            self._terms[(clean_position >> self.position_bits) % 3].set_memory(term_offset, length, 0)
            self._clean_position = clean_position + length

    def on_time_event(self, now_ns: int) -> None:
        producer_position = self.producer_position()
        self.publisher_position.set_ordered(producer_position)
        if self.has_receivers and now_ns - self.feedback.last_sm_ns > self.connection_timeout_ns:
            self.has_receivers = False
            self._receivers_moved()
        self._update_connected()
        state = self.state
        if state is NetworkPublicationState.ACTIVE:
            if not self.is_exclusive:
                self._check_for_blocked_publisher(producer_position, now_ns)
        elif state is NetworkPublicationState.DRAINING:
            sender_position = self.sender_position.get_volatile()
            if sender_position >= producer_position or not self.has_receivers:
                self.is_end_of_stream = True
                if self.spies_finished(producer_position):
                    # the conductor then tells the spies their image has gone and frees their positions
                    self.state = NetworkPublicationState.LINGER
                    self._time_of_last_state_change_ns = now_ns
                elif self._unblock(max(spy.get_volatile() for spy in self.spy_positions)):
                    self.counters.unblocked_publications.increment()  # spies wait at a dead writer's claim
            elif self._unblock(sender_position):
                self.counters.unblocked_publications.increment()
        elif state is NetworkPublicationState.LINGER:
            lingered = now_ns - self._time_of_last_state_change_ns > self.linger_timeout_ns
            told = self.end_of_stream_sent or not self.signal_eos
            if lingered or (told and not self.flow_control.should_linger(now_ns)):
                self.state = NetworkPublicationState.DONE
        self.timer_quiet = (
            self.state is NetworkPublicationState.ACTIVE
            and self.has_receivers
            and (self.is_exclusive or self._last_sender_position == producer_position)
        )

    def quiet_time_event(self, now_ns: int) -> bool:
        """The timer step of a publication whose log was not written to since its last :meth:`on_time_event`,
        which left it :attr:`timer_quiet`: True if that step would change nothing here (the producer position is
        where it was, all of it sent; the receivers answer), done for less than a Python call per counter: it only
        moves the blocked-publisher watch's clock, as a visit that finds the sender not behind does. False: call
        :meth:`on_time_event`."""
        if (
            not self.timer_quiet
            or self.state is not NetworkPublicationState.ACTIVE
            or now_ns - self.feedback.last_sm_ns > self.connection_timeout_ns
            or not self.feedback.has_receivers
        ):
            return False
        self._time_of_last_sender_change_ns = now_ns
        return True

    def _check_for_blocked_publisher(self, producer_position: int, now_ns: int) -> None:
        sender_position = self.sender_position.get_volatile()
        if sender_position == self._last_sender_position and producer_position > sender_position:
            if now_ns - self._time_of_last_sender_change_ns > self.unblock_timeout_ns and self._unblock(
                sender_position
            ):
                self.counters.unblocked_publications.increment()
        else:
            self._last_sender_position = sender_position
            self._time_of_last_sender_change_ns = now_ns

    def close(self) -> None:
        for counter in (self.publisher_position, self.publisher_limit, self.sender_position, self.sender_limit):
            counter.close()
        for spy in self.spy_positions:
            spy.close()
        self.spy_positions.clear()
        self.has_spies = False
        self.log.close()


class SendEndpoint(Protocol):
    """What a publication needs of its channel endpoint (see ``driver.media.endpoints``)."""

    def send(self, data: memoryview) -> int: ...


class SenderCounters:
    """The system counters the send path updates."""

    def __init__(
        self,
        *,
        bytes_sent: AtomicCounter,
        heartbeats_sent: AtomicCounter,
        retransmits_sent: AtomicCounter,
        short_sends: AtomicCounter,
        sender_flow_control_limits: AtomicCounter,
        unblocked_publications: AtomicCounter,
    ) -> None:
        self.bytes_sent = bytes_sent
        self.heartbeats_sent = heartbeats_sent
        self.retransmits_sent = retransmits_sent
        self.short_sends = short_sends
        self.sender_flow_control_limits = sender_flow_control_limits
        self.unblocked_publications = unblocked_publications
