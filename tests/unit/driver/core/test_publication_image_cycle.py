"""A publication image's receiver duty cycle: nothing sent on an idle cycle, but SMs and NAKs as before."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter, CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.core.congestion import CongestionOutcome, StaticWindowCongestionControl
from driver.core.loss_detector import LossDetector, StaticDelayGenerator
from driver.core.publication_image import ImageCounters, ImageState, PublicationImage
from driver.core.silence import DROPPED_SILENCE_TIMEOUTS
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.frame import HDR_TYPE_DATA, HDR_TYPE_NAK, HDR_TYPE_SM
from driver.logbuffer.log_buffers import LogBuffers
from driver.media._net import slots_to_track
from driver.media.endpoints import ReceiveChannelEndpoint
from driver.wire.data import write_data_header
from driver.wire.nak import NAK
from driver.wire.status import SM

SESSION, STREAM, INITIAL = 7, 10, 100
TERM_LENGTH = 64 * 1024
WINDOW = 16 * 1024
SM_TIMEOUT_NS = 200_000_000
MS = 1_000_000


class ForcingCongestion(StaticWindowCongestionControl):
    """A window that asks for an SM on every cycle: nothing may be skipped for it."""

    def __init__(self) -> None:
        super().__init__(WINDOW, TERM_LENGTH)
        self.calls = 0

    def on_track_rebuild(
        self,
        now_ns: int,
        new_consumption_position: int,
        last_sm_position: int,
        hwm_position: int,
        starting_rebuild_position: int,
        ending_rebuild_position: int,
        loss_occurred: bool,
    ) -> CongestionOutcome:
        self.calls += 1
        return WINDOW, True


class Harness:
    def __init__(
        self, tmp: Path, congestion: StaticWindowCongestionControl | None = None, *, reliable: bool = True
    ) -> None:
        manager = CountersManager(AtomicBuffer(bytearray(64 * 1024)), AtomicBuffer(bytearray(16 * 1024)))
        self.system = {sid: manager.new_counter(sid.label, 0) for sid in SystemCounterId}
        sc = self.system
        self.log = LogBuffers.create(tmp / "image.logbuffer", TERM_LENGTH, 4096)
        lbd.initialize_image_metadata(
            self.log.metadata,
            session_id=SESSION,
            stream_id=STREAM,
            initial_term_id=INITIAL,
            mtu_length=1408,
            term_length=TERM_LENGTH,
            page_size=4096,
            correlation_id=1,
        )
        self.sent: list[bytes] = []
        self.put_off = manager.new_counter("timeouts put off")
        self.image = PublicationImage(
            correlation_id=1,
            session_id=SESSION,
            stream_id=STREAM,
            channel="aeron:udp?endpoint=127.0.0.1:40123",
            endpoint=_no_endpoint(),
            log=self.log,
            active_term_id=INITIAL,
            term_offset=0,
            source_address=("127.0.0.1", 40124),
            control_address=("127.0.0.1", 40124),
            send_control=self._send,
            receiver_id=99,
            hwm_position=manager.new_counter("hwm"),
            rebuild_position=manager.new_counter("rebuild"),
            loss_detector_factory=lambda on_gap: LossDetector(StaticDelayGenerator(60 * MS, True), on_gap),
            congestion_control=congestion or StaticWindowCongestionControl(WINDOW, TERM_LENGTH),
            counters=ImageCounters(
                heartbeats_received=sc[SystemCounterId.HEARTBEATS_RECEIVED],
                status_messages_sent=sc[SystemCounterId.STATUS_MESSAGES_SENT],
                naks_sent=sc[SystemCounterId.NAK_MESSAGES_SENT],
                flow_control_under_runs=sc[SystemCounterId.FLOW_CONTROL_UNDER_RUNS],
                flow_control_over_runs=sc[SystemCounterId.FLOW_CONTROL_OVER_RUNS],
                loss_gap_fills=sc[SystemCounterId.LOSS_GAP_FILLS],
                timeouts_put_off=self.put_off,
            ),
            status_message_timeout_ns=SM_TIMEOUT_NS,
            image_liveness_timeout_ns=10_000 * MS,
            is_reliable=reliable,
            on_loss=None,
            now_ns=0,
        )
        self.subscriber: AtomicCounter = manager.new_counter("sub-pos")
        self.image.set_subscriber_positions((self.subscriber,))
        self.image.send_status_message(0, self.image.window, 0)
        self.sent.clear()

    def _send(self, data: memoryview, address: object) -> int:
        self.sent.append(bytes(data))
        return len(data)

    def data(self, offset: int, length: int = 64, now_ns: int = 0) -> None:
        frame = bytearray(length)
        write_data_header(frame, 0, length, 0xC0, HDR_TYPE_DATA, offset, SESSION, STREAM, INITIAL)
        self.image.insert_packet(INITIAL, offset, memoryview(frame), length, now_ns)

    def kinds(self) -> list[int]:
        return [datagram[6] for datagram in self.sent]


def _no_endpoint() -> ReceiveChannelEndpoint:
    return None  # type: ignore[return-value]  # the image only keeps a reference


@contextlib.contextmanager
def harness(
    tmp: Path, congestion: StaticWindowCongestionControl | None = None, *, reliable: bool = True
) -> Iterator[Harness]:
    h = Harness(tmp, congestion, reliable=reliable)
    try:
        yield h
    finally:
        h.image.close()


def test_idle_cycles_send_nothing_and_report_no_work(tmp_path: Path) -> None:
    with harness(tmp_path) as h:
        for now in range(0, SM_TIMEOUT_NS, MS):
            assert h.image.track_rebuild(now) == 0
        assert h.sent == []


def test_status_message_after_the_timeout_even_when_idle(tmp_path: Path) -> None:
    with harness(tmp_path) as h:
        assert h.image.track_rebuild(SM_TIMEOUT_NS) == 0
        assert h.image.track_rebuild(SM_TIMEOUT_NS + 1) == 1
        assert h.kinds() == [HDR_TYPE_SM]
        assert h.image.track_rebuild(SM_TIMEOUT_NS + 2) == 0
        assert h.image.track_rebuild(2 * SM_TIMEOUT_NS + 2) == 1


def test_status_message_once_the_subscriber_passed_a_quarter_window(tmp_path: Path) -> None:
    with harness(tmp_path) as h:
        for offset in range(0, WINDOW // 2, 64):
            h.data(offset)
        assert h.image.track_rebuild(1) == 0  # rebuilt, but the subscriber has not moved
        assert h.image.rebuild_position.get() == WINDOW // 2
        assert h.image.hwm_position.get() == WINDOW // 2
        h.subscriber.set(WINDOW // 4)
        assert h.image.track_rebuild(2) == 0  # a quarter window exactly is not past it
        h.subscriber.set(WINDOW // 4 + 64)
        assert h.image.track_rebuild(3) == 1
        (sm,) = h.sent
        assert sm[6] == HDR_TYPE_SM
        fields = SM.unpack_from(sm, 0)
        assert (fields[7], fields[8]) == (WINDOW // 4 + 64, WINDOW)  # term offset, window
        assert h.image.track_rebuild(4) == 0


def test_every_gap_in_the_window_is_naked_in_one_cycle(tmp_path: Path) -> None:
    with harness(tmp_path) as h:
        for offset in (0, 128, 256, 384):  # gaps at 64, 192 and 320
            h.data(offset)
        assert h.image.track_rebuild(1) == 3
        assert h.kinds() == [HDR_TYPE_NAK] * 3
        assert [NAK.unpack_from(nak, 0)[7:] for nak in h.sent] == [(64, 64), (192, 64), (320, 64)]
        assert h.system[SystemCounterId.NAK_MESSAGES_SENT].get() == 3
        assert h.image.rebuild_position.get() == 64
        h.sent.clear()
        assert h.image.track_rebuild(2) == 0  # nothing due until the NAK delay has passed
        for offset in (64, 192, 320):
            h.data(offset)
        assert h.image.track_rebuild(3) == 0
        assert h.image.rebuild_position.get() == 448
        assert h.sent == []


def test_a_window_that_forces_status_messages_is_asked_every_cycle(tmp_path: Path) -> None:
    congestion = ForcingCongestion()
    with harness(tmp_path, congestion) as h:
        for now in range(1, 6):
            assert h.image.track_rebuild(now) == 1
        assert congestion.calls == 5
        assert h.kinds() == [HDR_TYPE_SM] * 5


def test_a_subscriber_ahead_of_the_rebuild_moves_it(tmp_path: Path) -> None:
    with harness(tmp_path) as h:
        h.data(0)
        h.subscriber.set(64)  # e.g. a late joiner placed at the end of what is there
        h.image.track_rebuild(1)
        assert h.image.rebuild_position.get() == 64


def test_an_unreliable_image_pads_one_gap_per_cycle_as_1_15_1(tmp_path: Path) -> None:
    with harness(tmp_path, reliable=False) as h:
        assert h.image.loss_detector.max_gaps_ahead == 0
        for offset in (0, 128, 256):  # gaps at 64 and 192
            h.data(offset)
        h.image.track_rebuild(1)
        assert h.image.rebuild_position.get() == 64  # the first gap is padded now, rebuilt over next cycle
        assert h.system[SystemCounterId.LOSS_GAP_FILLS].get() == 1
        h.image.track_rebuild(2)
        assert h.system[SystemCounterId.LOSS_GAP_FILLS].get() == 2
        h.image.track_rebuild(3)
        assert h.image.rebuild_position.get() == 320
        assert HDR_TYPE_NAK not in h.kinds()


def test_an_image_asks_to_be_tracked_when_its_next_status_message_is_due(tmp_path: Path) -> None:
    with harness(tmp_path) as h:
        woken: list[int] = []
        h.image.wake = lambda: woken.append(1)
        due = h.image.next_track_ns()
        assert due == SM_TIMEOUT_NS + 1  # the SM sent at 0 is repeated once the timeout has passed
        assert h.image.track_rebuild(due - 1) == 0
        assert h.image.track_rebuild(due) == 1
        assert h.image.next_track_ns() == due + SM_TIMEOUT_NS + 1
        h.data(0, now_ns=due)
        assert woken == []  # in order at a complete rebuild: the rebuild moves with it, nothing to track
        assert h.image.rebuild_position.get() == 64
        assert h.image.next_track_ns() == due + SM_TIMEOUT_NS + 1
        h.data(128, now_ns=due)
        assert woken == [1]  # beyond a gap: the receiver tracks it (a loss scan) on its next cycle
        h.data(128, now_ns=due)
        assert woken == [1]  # a duplicate raises nothing
        h.data(64, now_ns=due)
        assert woken == [1, 1]  # the gap filled where the rebuild stopped: woken for the scan to move it on
        h.image.track_rebuild(due)
        assert h.image.rebuild_position.get() == 192


def test_an_image_with_a_gap_is_tracked_at_its_nak_deadlines_and_a_moving_window_every_cycle(tmp_path: Path) -> None:
    """A gap's image is not scanned every cycle: only when its NAK is next due (or the status message, if sooner);
    a repair where the rebuild stopped wakes it (above)."""
    with harness(tmp_path) as h:
        woken: list[int] = []
        h.image.wake = lambda: woken.append(1)
        h.data(128)  # a gap at 0..127
        assert woken == [1]
        assert h.image.track_rebuild(1) >= 1  # the NAK, at once (unicast)
        assert h.kinds().count(HDR_TYPE_NAK) == 1
        retry = h.image.next_track_ns()
        assert 1 < retry <= 1 + SM_TIMEOUT_NS + 1  # the NAK's repeat or the status message, whichever is first
        h.image.track_rebuild(retry - 1)
        assert h.kinds().count(HDR_TYPE_NAK) == 1  # a scan before the deadline (a subscriber woke it) NAKs nothing
        h.image.track_rebuild(retry)
        assert h.kinds().count(HDR_TYPE_NAK) == 2  # the gap still open at its deadline: NAKed again
        assert h.image.next_track_ns() > retry
        h.data(0)
        h.data(64)
        assert woken == [1, 1]
        h.image.track_rebuild(retry + 1)
        assert h.image.rebuild_position.get() == 192
        assert h.image.next_track_ns() > retry + 1
    (tmp_path / "forcing").mkdir()
    with harness(tmp_path / "forcing", ForcingCongestion()) as h:
        assert h.image.next_track_ns() == 0


def test_liveness_counts_silence_only_while_the_receiver_reads_its_sockets(tmp_path: Path) -> None:
    liveness = 10_000 * MS  # the harness's image liveness timeout
    with harness(tmp_path) as h:
        h.data(0, now_ns=1 * MS)
        image = h.image
        # A stalled process resumes: the conductor's clock is far past the last packet, but the receiver has not
        # read its socket since before the stall (what waits there is no silence).
        assert not image.on_time_event(1 * MS + 2 * liveness, polled_ns=2 * MS, awake_since_ns=0)
        assert image.state is ImageState.ACTIVE
        # The receiver reads again right after the stall and finds nothing yet: the stall's silence does not count.
        resumed = 1 * MS + 2 * liveness
        assert not image.on_time_event(resumed + MS, polled_ns=resumed, awake_since_ns=resumed)
        assert image.state is ImageState.ACTIVE
        # Silence heard for the whole timeout by a receiver awake all along: the image is idle.
        later = resumed + liveness + MS
        image.on_time_event(later, polled_ns=later, awake_since_ns=resumed)
        assert image.state is not ImageState.ACTIVE


def test_a_silence_while_the_socket_drops_datagrams_ends_the_image_only_after_three_timeouts(tmp_path: Path) -> None:
    """An overloaded reader: the kernel dropped datagrams for the image's socket during its silence, so the
    publisher may well have sent; the image ends only after ``DROPPED_SILENCE_TIMEOUTS`` liveness timeouts."""
    liveness = 10_000 * MS
    assert DROPPED_SILENCE_TIMEOUTS == 3
    with harness(tmp_path) as h:
        h.data(0, now_ns=1 * MS)
        image = h.image
        for now in (1 * MS + liveness + MS, 1 * MS + 2 * liveness, 1 * MS + 3 * liveness):
            assert not image.on_time_event(now, polled_ns=now, awake_since_ns=0, dropped_ns=2 * MS)
            assert image.state is ImageState.ACTIVE
        assert h.put_off.get() == 1  # one silence, counted once
        # A packet ends that silence; the next one that sees drops is counted again.
        h.data(64, now_ns=40_000 * MS)
        later = 40_000 * MS + liveness + MS
        assert not image.on_time_event(later, polled_ns=later, awake_since_ns=0, dropped_ns=later)
        assert h.put_off.get() == 2
        # Past three timeouts the publisher is presumed gone, drops or not.
        last = 40_000 * MS + 3 * liveness + MS
        image.on_time_event(last, polled_ns=last, awake_since_ns=0, dropped_ns=last)
        assert image.state is not ImageState.ACTIVE


def test_drops_before_a_silence_began_do_not_put_its_timeout_off(tmp_path: Path) -> None:
    liveness = 10_000 * MS
    with harness(tmp_path) as h:
        h.data(0, now_ns=10 * MS)
        now = 10 * MS + liveness + MS
        h.image.on_time_event(now, polled_ns=now, awake_since_ns=0, dropped_ns=5 * MS)
        assert h.image.state is not ImageState.ACTIVE
        assert h.put_off.get() == 0


def test_the_native_quiet_test_wakes_only_images_whose_tracking_has_work(tmp_path: Path) -> None:
    """The receiver wakes an image whose subscriber moved only when ``slots_to_track`` says so: it must agree with
    ``track_rebuild`` (no visit where a visit would do nothing; a visit wherever one sends or scans)."""
    with harness(tmp_path) as h:
        slots = [h.image.slot]

        def native_says_track(now_ns: int) -> bool:
            return slots_to_track(slots, [0], now_ns) == [0]

        for offset in range(0, WINDOW // 2, 64):
            h.data(offset)
        h.subscriber.set(WINDOW // 8)  # read within its window: nothing to do
        assert not native_says_track(1)
        assert h.image.track_rebuild(1) == 0
        assert h.sent == []
        h.subscriber.set(WINDOW // 4 + 64)  # past a quarter window: a status message
        assert native_says_track(2)
        assert h.image.track_rebuild(2) == 1
        assert h.kinds() == [HDR_TYPE_SM]
        assert not native_says_track(3)
        due = h.image.slot.sm_due_ns
        assert not native_says_track(due)
        assert native_says_track(due + 1)  # the timer is due
        assert h.image.track_rebuild(due + 1) == 1
        h.subscriber.set(WINDOW // 2 + 64)  # ahead of the rebuild (a late joiner)
        assert native_says_track(due + 2)
        h.image.track_rebuild(due + 2)
        assert not native_says_track(due + 3)
        h.data(WINDOW // 2 + 128)  # a gap: a loss scan
        assert native_says_track(due + 3)
        assert slots_to_track(slots, [], 0) == []
        with pytest.raises(IndexError):
            slots_to_track(slots, [1], 0)
        with pytest.raises(TypeError):
            slots_to_track([object()], [0], 0)  # type: ignore[list-item]
