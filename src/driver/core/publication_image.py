"""The receiving end of one remote publication (one session of a subscribed stream).

Theory of operation. The receiver thread inserts each validated data datagram
into the image's log at its term offset (out of order is fine: the rebuilder
never overwrites and publishes a frame's first word last), raising the
high-water mark; data that continues a complete rebuild moves the rebuild with
it. Each duty cycle it tracks the rebuild: the loss detector scans
for gaps between the rebuild position and the high-water mark and asks for
NAKs (first one at once for unicast, then every 60 ms while the gap lasts; the
gaps beyond the first one too, see ``driver.core.loss_detector``), and a
status message goes to the sender when the slowest subscriber has moved a
quarter window, or every SM timeout, carrying that position and the window.
A cycle with nothing to do (no data since the last one, subscribers where they
were, no NAK or SM due, a static window) returns after a few comparisons. Data
outside [last SM position, last SM position + window] is dropped and counted
(flow-control under/over-runs), as a sender honouring our SMs never sends it.

The common cases run natively, through the image's :class:`ImageSlot` (the
window, high-water mark, rebuild and status-message timer live there, shared
with this class): the receive endpoint's batched receive inserts data from the
image's source without calling Python (``insert_packet`` runs the same code),
and while the image is quiet (rebuild complete, a static window, not rejected)
its timed status messages leave from the endpoint's native timer, so an idle
image is not on the receiver's Python agenda at all.

The conductor owns the lifecycle: subscribers are linked and unlinked by it, and
an image with no packets for the image liveness timeout, or one that has
received end-of-stream and rebuilt everything, goes inactive, lingers and is
released. Silence is the publisher's only while we were reading: not during a
stall of our own (the receiver not polling), and not while the kernel dropped
datagrams for the image's socket because we read it too late (an overloaded
process; its own periodic bursts can then lose every datagram of a quiet
stream for seconds): such an image ends only after a few liveness timeouts
(``driver.core.silence``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.concurrent.counters import AtomicCounter
from driver.core.agenda import no_wake
from driver.core.congestion import CongestionControl, StaticWindowCongestionControl
from driver.core.loss_detector import LossDetector
from driver.core.silence import silence_ends
from driver.errors import CurrentErrorCode
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.gap_filler import try_fill_gap
from driver.logbuffer.log_buffers import LogBuffers
from driver.media._net import ImageSlot
from driver.media.endpoints import NEVER_NS
from driver.media.transport import Address
from driver.wire.error import ERR_MAX_FRAME_LENGTH, write_error
from driver.wire.nak import write_nak
from driver.wire.rttm import REPLY_FLAG, write_rttm
from driver.wire.status import write_sm

if TYPE_CHECKING:
    from driver.media.endpoints import ReceiveChannelEndpoint

__all__ = ["ImageCounters", "ImageState", "PublicationImage"]

IMAGE_REJECTED_CODE = int(CurrentErrorCode.IMAGE_REJECTED)


class ImageState(enum.Enum):
    ACTIVE = 1
    INACTIVE = 2
    LINGER = 3
    DONE = 4


class ImageCounters:
    """System counters the receive path updates."""

    def __init__(
        self,
        *,
        heartbeats_received: AtomicCounter,
        status_messages_sent: AtomicCounter,
        naks_sent: AtomicCounter,
        flow_control_under_runs: AtomicCounter,
        flow_control_over_runs: AtomicCounter,
        loss_gap_fills: AtomicCounter,
        timeouts_put_off: AtomicCounter | None = None,
    ) -> None:
        self.heartbeats_received = heartbeats_received
        self.status_messages_sent = status_messages_sent
        self.naks_sent = naks_sent
        self.flow_control_under_runs = flow_control_under_runs
        self.flow_control_over_runs = flow_control_over_runs
        self.loss_gap_fills = loss_gap_fills
        self.timeouts_put_off = timeouts_put_off


class PublicationImage:
    def __init__(
        self,
        *,
        correlation_id: int,
        session_id: int,
        stream_id: int,
        channel: str,
        endpoint: ReceiveChannelEndpoint,
        log: LogBuffers,
        active_term_id: int,
        term_offset: int,
        source_address: Address,
        control_address: Address,
        send_control: Callable[[memoryview, Address], int],
        receiver_id: int,
        hwm_position: AtomicCounter,
        rebuild_position: AtomicCounter,
        loss_detector_factory: Callable[[Callable[[int, int, int], None]], LossDetector],
        congestion_control: CongestionControl,
        counters: ImageCounters,
        status_message_timeout_ns: int,
        image_liveness_timeout_ns: int,
        is_reliable: bool,
        on_loss: Callable[[PublicationImage, int, int], None] | None,
        now_ns: int,
    ) -> None:
        self.correlation_id = correlation_id
        self.session_id = session_id
        self.stream_id = stream_id
        self.channel = channel
        self.endpoint = endpoint
        self.log = log
        self.source_address = source_address
        self.control_address = control_address
        self._send_control = send_control
        self.receiver_id = receiver_id
        self.hwm_position = hwm_position
        self.rebuild_position = rebuild_position
        self._congestion_control = congestion_control
        self.counters = counters
        self.status_message_timeout_ns = status_message_timeout_ns
        self.image_liveness_timeout_ns = image_liveness_timeout_ns
        self._put_off_since = -1
        """The start of the last silence whose timeout was put off (each such silence is counted once)."""
        self.is_reliable = is_reliable
        self._on_loss = on_loss
        self.term_length = log.term_length
        self.term_mask = self.term_length - 1
        self.position_bits = lbd.position_bits_to_shift(self.term_length)
        self.initial_term_id = lbd.initial_term_id(log.metadata)
        self._terms = log.terms
        self._metadata = log.metadata
        self.loss_detector = loss_detector_factory(self._on_gap_detected)
        if not is_reliable:
            # A gap is padded over, not NAKed: one at a time, as 1.15.1, so later gaps keep their chance to be
            # filled by datagrams that were only reordered.
            self.loss_detector.max_gaps_ahead = 0
        join = lbd.compute_position(active_term_id, term_offset, self.position_bits, self.initial_term_id)
        self.join_position = join
        hwm_position.set_ordered(join)
        rebuild_position.set_ordered(join)
        self.window = congestion_control.initial_window_length
        # receiver-thread state; the receiver thread is the only writer of hwm and rebuild: their values
        # are kept in the slot too, so a duty cycle need not read them back from the counters
        self.slot = ImageSlot(
            terms=log.terms,
            metadata=log.metadata,
            eos_offset=lbd.LOG_END_OF_STREAM_POSITION_OFFSET,
            session_id=session_id,
            stream_id=stream_id,
            initial_term_id=self.initial_term_id,
            position_bits=self.position_bits,
            hwm_position=hwm_position.location(),
            rebuild_position=rebuild_position.location(),
            heartbeats=counters.heartbeats_received.location(),
            under_runs=counters.flow_control_under_runs.location(),
            over_runs=counters.flow_control_over_runs.location(),
            position=join,
            window_limit=join + self.window,
            now_ns=now_ns,
            status_messages_sent=counters.status_messages_sent.location(),
            status_message_timeout_ns=status_message_timeout_ns,
            receiver_id=receiver_id,
        )
        """What inserting a datagram needs (high-water mark, rebuild, window, source), shared with native code."""
        self.slot.set_source(source_address)
        self.slot.set_control(control_address)
        # Set (by the conductor) when a client rejects the image: ERR frames then replace SMs.
        self.rejection: str | None = None
        self.congestion_control = congestion_control  # (a static window: status messages timed natively)
        self.subscriber_positions: tuple[AtomicCounter, ...] = ()
        """Read-only here: set with :meth:`set_subscriber_positions`."""
        self.agenda_index = -1
        # (the slot also keeps the status-message timer: due once the slowest subscriber passes its trigger
        # position, or after its due time)
        self._pending_naks: list[tuple[int, int, int]] = []
        self._control = bytearray(ERR_MAX_FRAME_LENGTH)
        self._control_view = memoryview(self._control)
        self.rtt_ns = -1  # last measured round trip, when congestion control asks for measurements
        # conductor-thread state
        self.state = ImageState.ACTIVE
        self.time_of_last_state_change_ns = now_ns

    @property
    def congestion_control(self) -> CongestionControl:
        return self._congestion_control

    @congestion_control.setter
    def congestion_control(self, congestion_control: CongestionControl) -> None:
        """A static window (not a subclass) lets a quiet image's status messages leave from the receive endpoint's
        native timer (see ``next_track_ns``); any other needs this class's tracking every cycle. (Set on the
        receiver thread, or before the image reaches it: a change takes effect at the image's next tracking.)"""
        self._congestion_control = congestion_control
        self._static_window = type(congestion_control) is StaticWindowCongestionControl
        self.slot.native_sm = self._static_window and self.rejection is None

    def set_subscriber_positions(self, positions: tuple[AtomicCounter, ...]) -> None:
        """The subscribers' positions (the slowest is what a status message reports): here and in the slot, whose
        native timer reads them too. Always set them through this."""
        self.subscriber_positions = positions
        self.slot.set_subscribers([position.location() for position in positions])

    @property
    def wake(self) -> Callable[[], object]:
        """Set by the receiver: makes its next duty cycle track this image (data left the rebuild behind)."""
        wake: Callable[[], object] | None = self.slot.wake
        return no_wake if wake is None else wake

    @wake.setter
    def wake(self, wake: Callable[[], object]) -> None:
        self.slot.wake = None if wake is no_wake else wake

    @property
    def time_of_last_packet_ns(self) -> int:
        time_ns: int = self.slot.time_of_last_packet_ns
        return time_ns

    @property
    def is_end_of_stream(self) -> bool:
        """An end-of-stream heartbeat came."""
        ended: bool = self.slot.end_of_stream
        return ended

    @property
    def log_file_name(self) -> str:
        return self.log.name

    @property
    def source_identity(self) -> str:
        return f"{self.source_address[0]}:{self.source_address[1]}"

    # -- receiver thread ------------------------------------------------------------------------

    def follow_source(self, address: Address) -> None:
        """The publisher's frames now come from ``address``: a NAT in between changed its public port (a
        rebinding). Status messages and NAKs follow it, or the publisher would hear nothing and stall. Only frames
        the image took move it (they name this session and stream and fit its window), so a stray or forged frame
        from elsewhere does not; 1.15.1 keeps the first address for the image's life."""
        if self.control_address == self.source_address:
            self.control_address = address
            self.slot.set_control(address)
        self.source_address = address
        self.slot.set_source(address)

    def insert_packet(self, term_id: int, term_offset: int, packet: memoryview, length: int, now_ns: int) -> int:
        """Insert a validated data datagram (or heartbeat); returns the bytes taken.

        Data outside [last SM position, + window] is counted and dropped; a heartbeat counts, and one flagged
        end of stream records where the stream ends; data inserted at a complete rebuild moves the rebuild with
        it, anything else that raises the high-water mark wakes the image for a loss scan. (One algorithm, in
        the slot: the batched receive runs the same.)"""
        taken: int = self.slot.insert(term_id, term_offset, packet, length, now_ns)
        return taken

    def _on_gap_detected(self, term_id: int, term_offset: int, length: int) -> None:
        if self.is_reliable:
            self._pending_naks.append((term_id, term_offset, length))
        else:
            index = lbd.int32(term_id - self.initial_term_id) % 3
            if try_fill_gap(self._metadata, self._terms[index], term_id, term_offset, length):
                self.counters.loss_gap_fills.increment()
                self.slot.note_written()
        if self._on_loss is not None:
            self._on_loss(self, term_id, length)

    def track_rebuild(self, now_ns: int) -> int:
        """Scan for loss, then send NAKs and a status message when due; returns work done."""
        positions = self.subscriber_positions
        if len(positions) == 1:
            min_position = max_position = positions[0].get_volatile()
        elif positions:
            min_position = max_position = positions[0].get_volatile()
            for counter in positions[1:]:
                value = counter.get_volatile()
                if value < min_position:
                    min_position = value
                elif value > max_position:
                    max_position = value
        else:
            min_position = max_position = self.slot.rebuild
        slot = self.slot
        hwm = slot.hwm
        rebuild = slot.rebuild
        if (
            rebuild >= hwm
            and max_position <= rebuild
            and min_position <= slot.sm_trigger_position
            and now_ns <= slot.sm_due_ns
            and self._static_window
            and not self._pending_naks
        ):
            return 0  # nothing new: no scan, no NAK, no SM due, a window that does not change
        if max_position > rebuild:
            rebuild = max_position
        work = 0
        if rebuild < hwm:
            _loss, rebuild_offset = self.loss_detector.scan(
                self._terms[(rebuild >> self.position_bits) % 3],
                rebuild,
                hwm,
                now_ns,
                self.term_mask,
                self.position_bits,
                self.initial_term_id,
            )
            rebuild = rebuild - (rebuild & self.term_mask) + rebuild_offset
        if rebuild > slot.rebuild:
            slot.rebuild = rebuild
            self.rebuild_position.set_ordered(rebuild)
        naks = self._pending_naks
        if naks:
            control = self._control
            view = self._control_view
            for term_id, term_offset, length in naks:
                n = write_nak(control, 0, self.session_id, self.stream_id, term_id, term_offset, length)
                self._send_control(view[:n], self.control_address)
                self.counters.naks_sent.increment()
                work += 1
            naks.clear()
        window, force = self.congestion_control.on_track_rebuild(
            now_ns, min_position, slot.last_sm_position, hwm, rebuild, rebuild, work > 0
        )
        self.window = window
        slot.window = window
        if (
            force
            or min_position > slot.last_sm_position + (window >> 2)
            or now_ns - slot.time_of_last_sm_ns > self.status_message_timeout_ns
        ):
            self._clean_buffer_to(min_position - self.term_length)
            self.send_status_message(min_position, window, now_ns)
            work += 1
        return work + self._measure_rtt(now_ns)

    def next_track_ns(self) -> int:
        """When ``track_rebuild`` has something to do again with no new data and subscribers where they are: the
        next status message (never, when the receive endpoint's native timer sends it); with a reliable stream's
        gap open, that or the gaps' next NAK, whichever comes first (a repair where the rebuild stopped, data
        past the high-water mark or a subscriber moving wakes it sooner: an overloaded receiver with many gapped
        images does not scan each of them every cycle); 0 (every cycle) while NAKs wait, an unreliable stream's
        gap is open (its fill is scanned past on the next cycle) or the window is not static."""
        slot = self.slot
        due: int = slot.sm_due_ns
        if self._pending_naks or not self._static_window:
            return 0
        if slot.rebuild < slot.hwm:
            if not self.is_reliable:
                return 0
            return max(0, min(self.loss_detector.next_deadline_ns(), due + 1))
        if slot.timed_natively:
            return NEVER_NS  # its status messages go from the native timer (data or subscribers wake it)
        return due + 1

    def _measure_rtt(self, now_ns: int) -> int:
        """Ask the sender to echo a timestamp, when congestion control wants RTT (static never does)."""
        if not self.congestion_control.should_measure_rtt(now_ns):
            return 0
        n = write_rttm(self._control, 0, self.session_id, self.stream_id, now_ns, 0, self.receiver_id, REPLY_FLAG)
        self._send_control(self._control_view[:n], self.control_address)
        self.congestion_control.on_rttm_sent(now_ns)
        return 1

    def on_rttm(self, echo_timestamp_ns: int, reception_delta_ns: int, now_ns: int) -> None:
        """The sender echoed our measurement: RTT = now - echo - time the sender held it."""
        rtt_ns = now_ns - echo_timestamp_ns - reception_delta_ns
        if rtt_ns >= 0:
            self.rtt_ns = rtt_ns
            self.congestion_control.on_rttm(now_ns, rtt_ns, self.source_address)

    def reject(self, reason: str) -> None:
        """A client refused this image (REJECT_IMAGE): from now on tell the sender with ERR instead of SMs."""
        self.rejection = reason
        self.slot.native_sm = False  # ERR frames leave from this class's tracking (wake it on the receiver thread)

    def send_status_message(self, position: int, window: int, now_ns: int, flags: int = 0) -> None:
        if self.rejection is not None:
            n = write_error(
                self._control,
                0,
                self.session_id,
                self.stream_id,
                self.receiver_id,
                None,
                IMAGE_REJECTED_CODE,
                self.rejection.encode("ascii", "replace"),
            )
            self._send_control(self._control_view[:n], self.control_address)
            self._sm_sent(position, now_ns)
            return
        term_id = lbd.int32((position >> self.position_bits) + self.initial_term_id)
        n = write_sm(
            self._control,
            0,
            self.session_id,
            self.stream_id,
            term_id,
            position & self.term_mask,
            window,
            self.receiver_id,
            flags,
        )
        self._send_control(self._control_view[:n], self.control_address)
        self.counters.status_messages_sent.increment()
        self.slot.window_limit = position + window
        self._sm_sent(position, now_ns)

    def _sm_sent(self, position: int, now_ns: int) -> None:
        slot = self.slot
        slot.time_of_last_sm_ns = now_ns
        slot.last_sm_position = position
        slot.sm_trigger_position = position + (self.window >> 2)
        slot.sm_due_ns = now_ns + self.status_message_timeout_ns

    def _clean_buffer_to(self, position: int) -> None:
        """Zero the term behind ``position`` (up to the end of the term being cleaned): clean before reuse."""
        self.slot.clean_to(position)

    # -- conductor thread -----------------------------------------------------------------------

    def on_time_event(
        self,
        now_ns: int,
        polled_ns: int | None = None,
        awake_since_ns: int | None = None,
        dropped_ns: int | None = None,
    ) -> bool:
        """Timer step; True when the image just went to linger (tell the subscribers it is unavailable).

        ``polled_ns``: when the receiver last read its sockets; ``awake_since_ns``: since when it has done so
        without a stall. Silence counts only between the two: a packet that waits unread in a socket (the receiver
        not yet run after a stall) is not silence, nor is a stall of the process, which stalls a publisher in it too.
        ``dropped_ns``: when the kernel was last seen dropping datagrams for the image's socket; a silence that
        saw drops ends the image only after a few liveness timeouts (:func:`~driver.core.silence.silence_ends`).

        As in 1.15.1, an image that ended (end of stream, or silence) stays INACTIVE, and
        still available to its subscribers, until every subscriber has read up to the rebuild
        position: telling them earlier would lose the messages they have not polled yet.
        """
        if self.state is ImageState.ACTIVE:
            heard_until = now_ns if polled_ns is None or polled_ns > now_ns else polled_ns
            quiet_since = self.time_of_last_packet_ns
            if awake_since_ns is not None and awake_since_ns > quiet_since:
                quiet_since = awake_since_ns
            silent_ns = heard_until - quiet_since
            timeout_ns = self.image_liveness_timeout_ns
            idle = silence_ends(silent_ns, timeout_ns, dropped_ns is not None and dropped_ns >= quiet_since)
            if not idle and silent_ns > timeout_ns and self._put_off_since != quiet_since:  # put off: counted once
                self._put_off_since = quiet_since
                if self.counters.timeouts_put_off is not None:
                    self.counters.timeouts_put_off.increment()
            ended = self.is_end_of_stream and self.rebuild_position.get_volatile() >= self.hwm_position.get_volatile()
            if idle or ended:
                self.state = ImageState.INACTIVE
                self.time_of_last_state_change_ns = now_ns
        if self.state is ImageState.INACTIVE:
            if self._is_drained():
                self.state = ImageState.LINGER
                self.time_of_last_state_change_ns = now_ns
                return True
        elif (
            self.state is ImageState.LINGER
            and now_ns - self.time_of_last_state_change_ns > self.image_liveness_timeout_ns
        ):
            self.state = ImageState.DONE
        return False

    def _is_drained(self) -> bool:
        rebuild = self.rebuild_position.get_volatile()
        return all(position.get_volatile() >= rebuild for position in self.subscriber_positions)

    def close(self) -> None:
        self.hwm_position.close()
        self.rebuild_position.close()
        self.log.close()
