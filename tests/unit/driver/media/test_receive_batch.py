"""``DatagramSocket.receive_batch`` with an ``ImageRoutes``: real datagrams on 127.0.0.1 read a batch at a time,
data for a routed image from its source inserted into the term natively (window, high-water mark, in-order rebuild,
end of stream, counted drops), everything else handed to Python with its bytes and address, as before. And
``send_status_messages``: the due status messages of quiet images, sent natively, as Python would write them."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter, CountersManager
from driver.core.loss_detector import LossDetector, StaticDelayGenerator
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.frame import HDR_TYPE_DATA, HDR_TYPE_PAD, HDR_TYPE_SM
from driver.media._net import (
    DatagramSocket,
    ImageJournal,
    ImageRoutes,
    ImageSlot,
    send_all_status_messages,
    slots_to_track,
)
from driver.media.faults import FaultSpec
from driver.media.transport import UdpTransport
from driver.wire.data import HEARTBEAT_EOS_FLAGS, write_data_header, write_heartbeat
from driver.wire.setup import write_setup
from driver.wire.status import SM

SESSION, STREAM, INITIAL = 7, 10, 100
BITS = 16
TERM_LENGTH = 1 << BITS
WINDOW = 16 * 1024
BATCH = 16
SM_TIMEOUT_NS = 200_000_000
MS = 1_000_000
RECEIVER_ID = 0x1122334455
"""Datagrams one recvmmsg call reads at most (``_net.c``)."""


class Rig:
    """A receiving socket with one routed image, and a sender socket it knows as the image's source."""

    def __init__(self, position: int = 0) -> None:
        manager = CountersManager(AtomicBuffer(bytearray(64 * 1024)), AtomicBuffer(bytearray(16 * 1024)))
        self.counters: dict[str, AtomicCounter] = {
            name: manager.new_counter(name)
            for name in ("hwm", "rebuild", "heartbeats", "under", "over", "invalid", "sms", "short", "subscriber")
        }
        self.terms = [AtomicBuffer(bytearray(TERM_LENGTH)) for _ in range(3)]
        self.metadata = AtomicBuffer(bytearray(lbd.LOG_META_DATA_LENGTH))
        c = self.counters
        self.slot = ImageSlot(
            terms=self.terms,
            metadata=self.metadata,
            eos_offset=lbd.LOG_END_OF_STREAM_POSITION_OFFSET,
            session_id=SESSION,
            stream_id=STREAM,
            initial_term_id=INITIAL,
            position_bits=BITS,
            hwm_position=c["hwm"].location(),
            rebuild_position=c["rebuild"].location(),
            heartbeats=c["heartbeats"].location(),
            under_runs=c["under"].location(),
            over_runs=c["over"].location(),
            position=position,
            window_limit=position + WINDOW,
            now_ns=0,
            status_messages_sent=c["sms"].location(),
            status_message_timeout_ns=SM_TIMEOUT_NS,
            receiver_id=RECEIVER_ID,
        )
        self.woken = 0
        self.slot.wake = self._wake
        self.routes = ImageRoutes(
            invalid_packets=c["invalid"].location(), short_sends=c["short"].location(), status_messages=True
        )
        self.routes.add(self.slot)
        self.receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.receiver.bind(("127.0.0.1", 0))
        self.receiver.setblocking(False)
        self.sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sender.bind(("127.0.0.1", 0))
        self.slot.set_source(self.sender.getsockname())
        self.io = DatagramSocket(self.receiver.fileno(), socket.AF_INET)
        self.buffer = bytearray(65536)
        self.handed: list[tuple[bytes, tuple[str, int]]] = []

    def _wake(self) -> None:
        self.woken += 1

    def _handler(self, length: int, address: tuple[str, int]) -> None:
        self.handed.append((bytes(self.buffer[:length]), address))

    def send(self, datagram: bytes, sender: socket.socket | None = None) -> None:
        (sender or self.sender).sendto(datagram, self.receiver.getsockname())

    def receive(self, expected: int, limit: int = 64) -> int:
        """Batches until ``expected`` datagrams were read (loopback delivers at once; bounded)."""
        total = 0
        deadline = time.monotonic() + 5.0
        for _ in range(100_000):
            count, _ = self.io.receive_batch(self.routes, self.buffer, 5, limit, self._handler)
            total += count
            if total >= expected:
                return total
            assert time.monotonic() < deadline, f"{total} of {expected} arrived"
        raise AssertionError(f"{total} of {expected} arrived")

    def close(self) -> None:
        self.io.detach()
        self.receiver.close()
        self.sender.close()


@contextlib.contextmanager
def rig(position: int = 0) -> Iterator[Rig]:
    r = Rig(position)
    try:
        yield r
    finally:
        r.close()


def data(offset: int, length: int = 64, session: int = SESSION, fill: int = 0xAB) -> bytes:
    frame = bytearray([fill]) * length
    write_data_header(frame, 0, length, 0xC0, HDR_TYPE_DATA, offset, session, STREAM, INITIAL)
    return bytes(frame)


def test_data_in_order_goes_into_the_term_and_moves_hwm_and_rebuild_without_python() -> None:
    with rig() as r:
        for offset in range(0, 640, 64):
            r.send(data(offset))
        assert r.receive(10) == 10
        assert r.handed == []
        assert r.slot.hwm == r.slot.rebuild == 640
        assert r.counters["hwm"].get() == r.counters["rebuild"].get() == 640
        assert r.slot.time_of_last_packet_ns == 5
        assert r.woken == 0  # no gap: nothing for the receiver to scan
        assert r.terms[0].get_int(64 * 3) == 64  # the frame is committed (its length published)
        assert r.terms[0].get_ubyte(64 * 3 + 40) == 0xAB


def test_data_beyond_a_gap_wakes_the_image_and_leaves_the_rebuild_for_the_scan() -> None:
    with rig() as r:
        r.send(data(128))
        r.receive(1)
        assert (r.slot.hwm, r.slot.rebuild, r.woken) == (192, 0, 1)
        r.send(data(128))  # a duplicate: not inserted again, nothing raised
        r.receive(1)
        assert (r.slot.hwm, r.slot.rebuild, r.woken) == (192, 0, 1)
        r.send(data(64))  # inside the gap, not where the rebuild stopped: nothing for a scan to move yet
        r.receive(1)
        assert (r.slot.hwm, r.slot.rebuild, r.woken) == (192, 0, 1)
        r.send(data(0))  # where the rebuild stopped: hwm unchanged, woken for the scan to move the rebuild on
        r.receive(1)
        assert (r.slot.hwm, r.slot.rebuild, r.woken) == (192, 0, 2)
        assert r.terms[0].get_int(0) == 64
        r.send(data(0))  # a duplicate of the repair: not inserted again, no wake
        r.receive(1)
        assert r.woken == 2


def _ending_in_padding(offset: int, pad: int) -> bytes:
    """A data frame at ``offset``, then the header of a PAD frame of ``pad`` bytes to the term's end: what a sender
    sends of the end of a term (a pad's header travels, its body does not)."""
    datagram = bytearray(data(offset)) + bytearray(32)
    write_data_header(datagram, 64, pad, 0xC0, HDR_TYPE_PAD, offset + 64, SESSION, STREAM, INITIAL)
    return bytes(datagram)


def _next_term_data(offset: int) -> bytes:
    frame = bytearray(64)
    write_data_header(frame, 0, 64, 0xC0, HDR_TYPE_DATA, offset, SESSION, STREAM, INITIAL + 1)
    return bytes(frame)


@pytest.mark.parametrize("batched", [True, False], ids=["receive_batch", "insert"])
def test_data_ending_in_a_term_pad_moves_the_rebuild_to_the_end_of_the_term_as_the_loss_scan_would(
    batched: bool,
) -> None:
    """The in-order rebuild steps over the whole pad, as the Python path's loss scan steps; the high-water mark
    stays at the bytes received (Aeron's). Stopping at the pad's header left a gap of its body at every term end:
    a NAK per term for nothing, and the sender on its Python path for the resend. ``insert`` is the slot's own
    call (the receive path for a socket with faults injected)."""
    start = TERM_LENGTH - 160  # data 64, then a PAD of 96 (32 of header travel)
    with rig(start) as r:

        def deliver(datagram: bytes, term_id: int) -> None:
            if batched:
                r.send(datagram)
                r.receive(1)
            else:
                r.slot.insert(term_id, int.from_bytes(datagram[8:12], "little"), datagram, len(datagram), 5)

        deliver(_ending_in_padding(start, 96), INITIAL)
        assert (r.slot.hwm, r.slot.rebuild, r.woken) == (start + 96, TERM_LENGTH, 0)
        assert r.counters["rebuild"].get() == TERM_LENGTH
        naks: list[tuple[int, ...]] = []
        detector = LossDetector(StaticDelayGenerator(0, True), lambda *gap: naks.append(gap))
        _, scanned = detector.scan(r.terms[0], start, start + 96, 0, TERM_LENGTH - 1, BITS, INITIAL)
        assert (scanned, naks) == (TERM_LENGTH, [])  # the Python path's step over the same term: no gap either
        deliver(_next_term_data(0), INITIAL + 1)  # the next term goes on in order: no scan needed
        assert (r.slot.hwm, r.slot.rebuild, r.woken) == (TERM_LENGTH + 64, TERM_LENGTH + 64, 0)


def test_datagrams_the_batch_does_not_take_reach_python_with_their_bytes_and_address() -> None:
    with rig() as r, contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as stranger:
        stranger.bind(("127.0.0.1", 0))
        setup = bytearray(40)
        write_setup(setup, 0, 0, SESSION, STREAM, INITIAL, INITIAL, TERM_LENGTH, 1408, 0)
        unknown = data(0, session=SESSION + 1)
        moved = data(0)  # the image's data from another address (a NAT rebinding): Python decides
        r.send(bytes(setup))
        r.send(unknown)
        r.send(moved, stranger)
        r.send(b"\x01\x02")  # too short for anything: Python counts it
        assert r.receive(4) == 4
        assert r.handed == [
            (bytes(setup), r.sender.getsockname()),
            (unknown, r.sender.getsockname()),
            (moved, stranger.getsockname()),
            (b"\x01\x02", r.sender.getsockname()),
        ]
        assert r.slot.hwm == 0
        r.slot.set_source(stranger.getsockname())  # followed: its data now goes in natively
        r.send(moved, stranger)
        r.receive(1)
        assert len(r.handed) == 4
        assert r.slot.hwm == 64


def test_malformed_data_for_an_image_is_counted_and_dropped() -> None:
    with rig() as r:
        bad = bytearray(96)  # a 64-byte frame, then 32 bytes that are no frame (length 0)
        write_data_header(bad, 0, 64, 0xC0, HDR_TYPE_DATA, 0, SESSION, STREAM, INITIAL)
        misaligned = bytearray(data(0))
        misaligned[8:12] = (16).to_bytes(4, "little")  # term offset not 32-aligned
        r.send(bytes(bad))
        r.send(bytes(misaligned))
        r.receive(2)
        assert r.counters["invalid"].get() == 2
        assert r.handed == []
        assert r.slot.hwm == 0
        assert r.terms[0].get_int(0) == 0


def test_data_outside_the_window_is_counted_as_over_and_under_runs() -> None:
    with rig() as r:
        r.send(data(WINDOW))  # ends beyond the window a status message allowed
        r.receive(1)
        assert r.counters["over"].get() == 1
        assert r.slot.hwm == 0
        r.slot.last_sm_position = 1024
        r.slot.window_limit = 1024 + WINDOW
        r.send(data(512))  # before the last status message's position
        r.receive(1)
        assert r.counters["under"].get() == 1
        assert r.terms[0].get_int(512) == 0


def test_an_end_of_stream_heartbeat_is_counted_and_records_where_the_stream_ends() -> None:
    with rig() as r:
        for offset in (0, 64):
            r.send(data(offset))
        heartbeat = bytearray(32)
        write_heartbeat(heartbeat, 0, SESSION, STREAM, INITIAL, 128, HEARTBEAT_EOS_FLAGS)
        r.send(bytes(heartbeat))
        r.receive(3)
        assert r.counters["heartbeats"].get() == 1
        assert r.slot.end_of_stream
        assert r.metadata.get_long(lbd.LOG_END_OF_STREAM_POSITION_OFFSET) == 128
        assert r.slot.hwm == 128


def test_a_batch_reads_at_most_its_limit_and_leaves_the_rest_for_the_next() -> None:
    with rig() as r:
        sent = BATCH * 2 + 5
        for index in range(sent):
            r.send(data(index * 64))
        time.sleep(0.05)  # (only so the first call can see them all; the counts below hold either way)
        first, _ = r.io.receive_batch(r.routes, r.buffer, 5, BATCH + 3, r._handler)
        assert first <= BATCH + 3
        total = first + r.receive(sent - first)
        assert total == sent
        assert r.slot.hwm == r.slot.rebuild == sent * 64


def test_a_removed_route_sends_its_data_to_python() -> None:
    with rig() as r:
        assert len(r.routes) == 1
        r.routes.remove(r.slot)
        assert len(r.routes) == 0
        r.send(data(0))
        r.receive(1)
        assert len(r.handed) == 1
        assert r.slot.hwm == 0


def test_a_transport_with_receive_faults_reads_one_datagram_at_a_time_through_the_injector() -> None:
    faulty = UdpTransport(bind_address=("127.0.0.1", 0), receive_faults=FaultSpec(loss_rate=0.5, seed=1))
    plain = UdpTransport(bind_address=("127.0.0.1", 0))
    try:
        assert faulty.receive_batch is None
        assert plain.receive_batch is not None
    finally:
        faulty.close()
        plain.close()


def _status_messages(sock: socket.socket, expected: int) -> list[tuple[int, ...]]:
    """The SMs that arrive at ``sock`` (bounded wait for ``expected``, then whatever else is there)."""
    sock.settimeout(2.0)
    frames = [SM.unpack(sock.recv(64)) for _ in range(expected)]
    sock.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        while True:
            frames.append(SM.unpack(sock.recv(64)))
    return frames


def _timed_rig(r: Rig) -> None:
    r.slot.native_sm = True
    r.slot.set_control(r.sender.getsockname())
    r.slot.set_subscribers([r.counters["subscriber"].location()])


def test_a_quiet_images_due_status_message_is_sent_natively_with_the_slowest_subscribers_position() -> None:
    with rig() as r:
        _timed_rig(r)
        r.routes.remove(r.slot)  # (added again after its timer is set, as the receiver does)
        r.routes.add(r.slot)
        assert r.slot.timed_natively
        for offset in range(0, 640, 64):
            r.send(data(offset))
        r.receive(10)
        r.counters["subscriber"].set(512)
        sent = r.io.send_status_messages(r.routes, 1_000)
        assert sent == 1
        (frame,) = _status_messages(r.sender, 1)
        # frame_length, version, flags, type, session, stream, term id, term offset, window, receiver id
        assert frame == (SM.size, 0, 0, HDR_TYPE_SM, SESSION, STREAM, INITIAL, 512, WINDOW, RECEIVER_ID)
        assert r.counters["sms"].get() == 1
        assert (r.slot.last_sm_position, r.slot.window_limit) == (512, 512 + WINDOW)
        assert (r.slot.time_of_last_sm_ns, r.slot.sm_due_ns) == (1_000, 1_000 + SM_TIMEOUT_NS)
        assert r.slot.sm_trigger_position == 512 + WINDOW // 4
        assert r.io.send_status_messages(r.routes, 1_000 + SM_TIMEOUT_NS) == 0  # not due yet
        assert r.io.send_status_messages(r.routes, 1_001 + SM_TIMEOUT_NS) == 1
        assert len(_status_messages(r.sender, 1)) == 1


def test_all_endpoints_due_status_messages_go_in_one_call() -> None:
    """The receiver's one native call per duty cycle over its endpoints' (socket, routes): a routes object with
    nothing due sends nothing, the due one sends as ``send_status_messages`` would."""
    with rig() as r, rig() as idle:
        _timed_rig(r)
        r.routes.remove(r.slot)
        r.routes.add(r.slot)
        for offset in range(0, 640, 64):
            r.send(data(offset))
        r.receive(10)
        r.counters["subscriber"].set(512)
        pairs = ((idle.io, idle.routes), (r.io, r.routes))
        assert send_all_status_messages(pairs, 1_000) == 1
        (frame,) = _status_messages(r.sender, 1)
        assert frame[7] == 512  # the slowest subscriber's term offset
        assert send_all_status_messages(pairs, 1_000 + SM_TIMEOUT_NS) == 0  # not due yet
        assert send_all_status_messages(pairs, 1_001 + SM_TIMEOUT_NS) == 1
        assert send_all_status_messages((), 1_000) == 0
        with pytest.raises(TypeError, match="pair 0"):
            send_all_status_messages(((r.routes, r.io),), 1_000)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            send_all_status_messages([(r.io, r.routes)], 1_000)  # type: ignore[arg-type]


def test_a_quiet_image_timed_natively_is_not_woken_for_its_due_status_message() -> None:
    """The receiver wakes an image whose subscriber moved only if its tracking has work (``slots_to_track``): a due
    status message of a quiet image timed natively is not such work (the native timer sends it); one past its
    trigger, or with a gap, is."""
    with rig() as r:
        _timed_rig(r)
        r.routes.remove(r.slot)
        r.routes.add(r.slot)
        assert r.slot.timed_natively
        for offset in range(0, 640, 64):
            r.send(data(offset))
        r.receive(10)
        r.counters["subscriber"].set(512)
        assert r.io.send_status_messages(r.routes, 1_000) == 1
        slots = [r.slot]
        r.counters["subscriber"].set(576)  # within its window
        assert slots_to_track(slots, [0], 1_000 + 10 * SM_TIMEOUT_NS) == []  # long due: the native timer's
        assert r.io.send_status_messages(r.routes, 1_000 + 10 * SM_TIMEOUT_NS) == 1
        r.counters["subscriber"].set(640)  # the whole rebuild: still quiet
        assert slots_to_track(slots, [0], 1_000 + 10 * SM_TIMEOUT_NS + 1) == []
        r.slot.sm_trigger_position = 600  # (a small window) passed: Python's tracking sends it now
        assert slots_to_track(slots, [0], 1_000 + 10 * SM_TIMEOUT_NS + 1) == [0]
        r.slot.sm_trigger_position = 640 + WINDOW // 4
        r.send(data(704))  # a gap at 640: the loss scan is Python's
        r.receive(1)
        assert slots_to_track(slots, [0], 1_000 + 10 * SM_TIMEOUT_NS + 2) == [0]
        r.slot.native_sm = False  # kept in Python (e.g. rejected): a due one is Python's too
        r.slot.rebuild = r.slot.hwm
        assert not r.slot.timed_natively
        assert slots_to_track(slots, [0], 1_000 + 20 * SM_TIMEOUT_NS) == [0]


def test_the_native_timer_leaves_images_with_a_gap_or_kept_in_python_alone() -> None:
    with rig() as r:
        _timed_rig(r)
        r.send(data(128))  # a gap at 0: the loss scan and its NAKs are Python's
        r.receive(1)
        assert r.io.send_status_messages(r.routes, 20 * MS) == 0
        r.send(data(0))
        r.send(data(64))
        r.receive(2)
        r.slot.rebuild = 192  # (the scan found it complete)
        r.slot.native_sm = False  # e.g. rejected: ERR frames instead, from Python
        assert not r.slot.timed_natively
        assert r.io.send_status_messages(r.routes, 40 * MS) == 0
        r.slot.native_sm = True
        r.counters["subscriber"].set(256)  # a subscriber ahead of the rebuild: Python's tracking moves it
        assert r.io.send_status_messages(r.routes, 60 * MS) == 0
        r.counters["subscriber"].set(192)  # (a pass runs at most every 10 ms: the next is 20 ms later)
        assert r.io.send_status_messages(r.routes, 80 * MS) == 1
        assert _status_messages(r.sender, 1)[0][7] == 192
        r.routes.remove(r.slot)
        assert not r.slot.timed_natively


def test_routes_that_do_not_send_status_messages_time_nothing_natively() -> None:
    with rig() as r:
        c = r.counters
        quiet = ImageRoutes(
            invalid_packets=c["invalid"].location(), short_sends=c["short"].location(), status_messages=False
        )
        r.routes.remove(r.slot)
        _timed_rig(r)
        quiet.add(r.slot)
        assert not r.slot.timed_natively
        assert r.io.send_status_messages(quiet, 1_000) == 0
        assert c["sms"].get() == 0


def test_an_image_journal_tells_each_reader_what_came_since_and_when_it_fell_behind() -> None:
    journal = ImageJournal(4)
    assert journal.since(0) == (0, [])
    for image_id in (5, 5, 6, 5):
        journal.append(image_id)
    assert journal.since(0) == (4, [5, 6, 5])  # a run of one image told once
    assert journal.since(2) == (4, [6, 5])  # each reader from where it stopped
    journal.append(7)
    assert journal.since(1) == (5, [5, 6, 5, 7])
    assert journal.since(0) == (5, None)  # five came, four kept: look at every image
    assert journal.since(9) == (5, None)  # not a count this journal gave
    with pytest.raises(ValueError):
        ImageJournal(3)


def test_data_inserted_natively_or_in_python_and_nothing_else_is_told_to_the_journal() -> None:
    journal = ImageJournal(64)
    with rig() as r:
        r.slot.set_journal(journal, 42)
        for offset in (0, 64, 192):  # in order, then beyond a gap
            r.send(data(offset))
        assert r.receive(3) == 3
        assert journal.since(0) == (3, [42])
        r.send(data(64))  # a duplicate: nothing new to read
        heartbeat = bytearray(32)
        write_heartbeat(heartbeat, 0, SESSION, STREAM, INITIAL, 256)
        r.send(bytes(heartbeat))  # no frame either
        assert r.receive(2) == 2
        assert journal.written == 3
        assert r.slot.insert(INITIAL, 128, data(128), 64, 6) == 64  # the repair, through Python's path
        assert journal.since(3) == (4, [42])
        r.slot.note_written()  # e.g. a gap padded over
        assert journal.since(4) == (5, [42])
        r.slot.set_journal(None, 0)
        r.send(data(256))
        assert r.receive(1) == 1
        assert journal.written == 5
