"""Status messages applied natively by a send endpoint's batch leave the same state as the Python path.

Two send endpoints on real sockets, each with real network publications (log buffers in files): one applies plain
status messages natively (the default), the other hands every datagram to Python (``native_feedback=False``).
Real receiver sockets send each datagram to both, both are polled with the same time, and after every step the
sender limits, flow control state, connection flags, dynamic destinations and counters must be equal. Each
scenario also checks that the native side did take the common case (its Python dispatch count stays below the
other's), so the comparison is of two different paths.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.core.flow_control import new_flow_control
from driver.core.loss_detector import StaticDelayGenerator
from driver.core.network_publication import NetworkPublication, SenderCounters
from driver.core.retransmit import RETRANSMIT_UNICAST_DELAY_NS, RETRANSMIT_UNICAST_LINGER_NS, RetransmitHandler
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.log_buffers import LogBuffers
from driver.media._net import FEEDBACK_MAX_POSITION, FEEDBACK_MIN, FeedbackRoutes, FeedbackSlot
from driver.media.endpoints import EndpointCounters, SendChannelEndpoint
from driver.media.faults import FaultSpec
from driver.media.udp_channel import UdpChannel
from driver.wire.error import ErrorFrame
from driver.wire.nak import write_nak
from driver.wire.rttm import REPLY_FLAG, write_rttm
from driver.wire.status import SEND_SETUP_FLAG, write_sm

TERM_LENGTH = 64 * 1024
INITIAL_TERM_ID = 100
STREAM = 10
MS = 1_000_000
START_NS = 1_000_000 * MS
CONNECTION_TIMEOUT_NS = 5_000 * MS


def _publication(
    tmp_path: Path, name: str, manager: CountersManager, system: dict[SystemCounterId, object], **kwargs: object
) -> NetworkPublication:
    session_id = int(kwargs.pop("session_id", 7))  # type: ignore[call-overload]
    log = LogBuffers.create(tmp_path / f"{name}-{session_id}.logbuffer", TERM_LENGTH, 4096)
    lbd.initialize_publication_metadata(
        log.metadata,
        session_id=session_id,
        stream_id=STREAM,
        initial_term_id=INITIAL_TERM_ID,
        mtu_length=1408,
        term_length=TERM_LENGTH,
        page_size=4096,
        correlation_id=2,
    )
    publication = NetworkPublication(
        registration_id=2,
        channel="aeron:udp?endpoint=127.0.0.1:9",
        log=log,
        session_id=session_id,
        stream_id=STREAM,
        publisher_position=manager.new_counter("pub-pos"),
        publisher_limit=manager.new_counter("pub-lmt"),
        sender_position=manager.new_counter("snd-pos"),
        sender_limit=manager.new_counter("snd-lmt"),
        retransmit_handler=RetransmitHandler(
            StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS), StaticDelayGenerator(RETRANSMIT_UNICAST_LINGER_NS)
        ),
        counters=SenderCounters(
            bytes_sent=system[SystemCounterId.BYTES_SENT],  # type: ignore[arg-type]
            heartbeats_sent=system[SystemCounterId.HEARTBEATS_SENT],  # type: ignore[arg-type]
            retransmits_sent=system[SystemCounterId.RETRANSMITS_SENT],  # type: ignore[arg-type]
            short_sends=system[SystemCounterId.SHORT_SENDS],  # type: ignore[arg-type]
            sender_flow_control_limits=system[SystemCounterId.SENDER_FLOW_CONTROL_LIMITS],  # type: ignore[arg-type]
            unblocked_publications=system[SystemCounterId.UNBLOCKED_PUBLICATIONS],  # type: ignore[arg-type]
        ),
        term_window_length=TERM_LENGTH // 2,
        connection_timeout_ns=CONNECTION_TIMEOUT_NS,
        unblock_timeout_ns=10_000 * MS,
        linger_timeout_ns=0,
        multicast_ttl=0,
        is_exclusive=True,
        now_ns=START_NS,
        **kwargs,  # type: ignore[arg-type]
    )
    return publication


class _Side:
    """A send endpoint with its publications; ``native`` chooses how its status messages are applied."""

    def __init__(
        self,
        tmp_path: Path,
        native: bool,
        channel: str,
        fc: str | None,
        sessions: dict[int, bool],
        faults: tuple[FaultSpec, FaultSpec] | None = None,
    ) -> None:
        self.manager = CountersManager(AtomicBuffer(bytearray(256 * 1024)), AtomicBuffer(bytearray(64 * 1024)))
        system = {sid: self.manager.new_counter(sid.label, 0) for sid in SystemCounterId}
        self.system = system
        self.refused = self.manager.new_counter("destinations refused", 0)
        self.counters = EndpointCounters.of(system.__getitem__, destinations_refused=self.refused)
        self.endpoint = SendChannelEndpoint(
            UdpChannel.parse(channel),
            self.counters,
            self.manager.new_counter("status"),
            native_feedback=native,
            faults=faults,
        )
        self.errors: list[tuple[int, int]] = []
        self.endpoint.on_publication_error = lambda _p, frame, _a: self.errors.append(
            (frame.session_id, frame.receiver_id)
        )
        self.publications: dict[int, NetworkPublication] = {}
        name = "native" if native else "python"
        for session_id, private in sessions.items():
            publication = _publication(
                tmp_path,
                name,
                self.manager,
                system,
                session_id=session_id,
                endpoint=self.endpoint,
                flow_control=new_flow_control(fc, is_multicast=fc is not None),
                destinations=self.endpoint.destinations_for(private),
            )
            self.publications[session_id] = publication
            self.endpoint.attach((session_id, STREAM), publication, publication.destinations)
        self.dispatched = 0
        dispatch = self.endpoint._dispatch

        def counting(length: int, address: tuple[str, int]) -> None:
            self.dispatched += 1
            dispatch(length, address)

        self.endpoint._dispatch = counting  # type: ignore[method-assign]
        self.read = 0

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.endpoint.transport.socket.getsockname()[:2]
        return ("127.0.0.1" if host == "0.0.0.0" else host, port)

    def poll_until(self, now_ns: int, total: int) -> None:
        deadline = time.monotonic() + 5.0
        while self.read < total and time.monotonic() < deadline:
            self.read += self.endpoint.poll(now_ns)
        assert self.read == total, f"read {self.read} of {total} datagrams"

    def state(self) -> dict[str, object]:
        result: dict[str, object] = {}
        for session_id, publication in self.publications.items():
            fc = publication.flow_control
            feedback = publication.feedback
            receivers = feedback.receivers
            result[f"{session_id}"] = (
                publication.sender_limit.get(),
                publication.time_of_last_status_message_ns,
                publication.has_receivers,
                publication.should_send_setup,
                publication.is_end_of_stream,
                lbd.is_connected(publication.log.metadata),
                feedback.last_position,
                feedback.flow_sm_ns,
                fc.should_linger(0),
                None
                if receivers is None
                else sorted((k, r.last_position, r.limit, r.time_of_last_sm_ns) for k, r in receivers.items()),
                None
                if publication.destinations is None
                else (list(publication.destinations.addresses), dict(publication.destinations.last_seen_ns)),
                publication.retransmit_handler.active_count,
            )
        endpoint = self.endpoint
        result["endpoint"] = (list(endpoint.destinations), dict(endpoint._last_seen_ns), self.errors)
        result["counters"] = tuple(
            c.get()
            for c in (
                self.counters.bytes_received,
                self.counters.invalid_packets,
                self.counters.status_messages_received,
                self.counters.naks_received,
                self.refused,
            )
        )
        return result

    def close(self) -> None:
        for publication in self.publications.values():
            self.endpoint.detach((publication.session_id, STREAM), publication)
            publication.close()
        self.endpoint.close()


class _Lab:
    """Both sides, and receivers that send each datagram to both."""

    def __init__(self, tmp_path: Path, channel: str, fc: str | None, sessions: dict[int, bool]) -> None:
        self.native = _Side(tmp_path, True, channel, fc, sessions)
        self.python = _Side(tmp_path, False, channel, fc, sessions)
        self.sockets: dict[int, socket.socket] = {}
        self.sent = 0
        self.now_ns = START_NS

    def receiver(self, index: int) -> socket.socket:
        """Receiver ``index``'s socket (each on its own port, a few on other loopback addresses)."""
        if index not in self.sockets:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((f"127.0.0.{1 + index % 3}", 0))
            self.sockets[index] = sock
        return self.sockets[index]

    def send(self, receiver: int, datagram: bytes, advance_ns: int = 10 * MS) -> None:
        """One datagram from ``receiver`` to both sides, both polled at the same time; then compare."""
        self.now_ns += advance_ns
        sock = self.receiver(receiver)
        sock.sendto(datagram, self.native.address)
        sock.sendto(datagram, self.python.address)
        self.sent += 1
        self.native.poll_until(self.now_ns, self.sent)
        self.python.poll_until(self.now_ns, self.sent)
        self.compare()

    def sm(self, receiver: int, session_id: int, position: int, window: int = 32 * 1024, flags: int = 0) -> None:
        buffer = bytearray(36)
        term_id = INITIAL_TERM_ID + position // TERM_LENGTH
        write_sm(
            buffer, 0, session_id, STREAM, lbd.int32(term_id), position % TERM_LENGTH, window, 1000 + receiver, flags
        )
        self.send(receiver, bytes(buffer))

    def idle(self, advance_ns: int) -> None:
        """Time passes: each publication's sender cycle and conductor timer run on both sides."""
        self.now_ns += advance_ns
        for side in (self.native, self.python):
            side.endpoint.expire_destinations(self.now_ns)
            for publication in side.publications.values():
                publication.send(self.now_ns)
                publication.on_time_event(self.now_ns)
        self.compare()

    def compare(self) -> None:
        assert self.native.state() == self.python.state()

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close()
        self.native.close()
        self.python.close()


@pytest.fixture
def lab_factory(tmp_path: Path) -> Iterator[list[_Lab]]:
    labs: list[_Lab] = []
    yield labs
    for lab in labs:
        lab.close()


def _lab(labs: list[_Lab], tmp_path: Path, channel: str, fc: str | None, sessions: dict[int, bool]) -> _Lab:
    lab = _Lab(tmp_path, channel, fc, sessions)
    labs.append(lab)
    return lab


def test_unicast_flow_control_native_and_python_agree(tmp_path: Path, lab_factory: list[_Lab]) -> None:
    lab = _lab(lab_factory, tmp_path, "aeron:udp?endpoint=127.0.0.1:9", None, {7: False, 8: False})
    assert lab.native.publications[7].feedback.kind == FEEDBACK_MAX_POSITION
    lab.sm(0, 7, 0)  # the first: Python's on both sides (has_receivers, the SETUP stops)
    assert lab.native.publications[7].has_receivers
    for position in (0, 4096, 8192, 8192, 4096, 70_000, 200_000):  # steady, repeated, behind, across terms
        lab.sm(0, 7, position)
    lab.sm(0, 7, 200_000, window=1024)  # a smaller window: the limit never goes down
    lab.sm(1, 7, 300_000)  # another receiver: unicast flow control follows the furthest
    lab.sm(0, 7, 300_000, flags=SEND_SETUP_FLAG)  # asks for a SETUP: Python's, and the next plain one too
    assert lab.native.publications[7].should_send_setup
    lab.sm(0, 7, 310_000)
    lab.sm(0, 7, 320_000)
    lab.sm(0, 8, 0)  # the other publication, first SM
    lab.sm(0, 8, 1024)
    lab.idle(CONNECTION_TIMEOUT_NS + MS)  # quiet: has_receivers goes; the next SM must bring it back
    assert not lab.native.publications[7].has_receivers
    lab.sm(0, 7, 330_000)
    assert lab.native.publications[7].has_receivers
    lab.sm(0, 7, 340_000)
    # Python took the first SM of each publication, the SETUP and the one after it, the one after the timeout.
    assert lab.python.dispatched == lab.sent
    assert lab.native.dispatched == 5
    assert lab.native.publications[7].sender_limit.get() == 340_000 + 32 * 1024


def test_min_flow_control_with_several_receivers_native_and_python_agree(
    tmp_path: Path, lab_factory: list[_Lab]
) -> None:
    lab = _lab(lab_factory, tmp_path, "aeron:udp?endpoint=127.0.0.1:9", "min,t:1s", {7: False})
    assert lab.native.publications[7].feedback.kind == FEEDBACK_MIN
    for receiver in range(3):  # each receiver's first SM: Python's
        lab.sm(receiver, 7, 1000 * receiver)
    for step in range(1, 6):  # steady: the slowest bounds the limit, each SM moves only its own receiver
        for receiver in range(3):
            lab.sm(receiver, 7, 1000 * receiver + 4096 * step, window=16 * 1024 + receiver)
    lab.sm(2, 7, 0, window=1024)  # the latest SM's limit counts, even behind (as 1.15.1)
    native_steady = lab.native.dispatched
    assert native_steady == 3
    for _ in range(12):  # receiver 0 goes quiet: after its timeout the idle step drops it, the limit may fall
        lab.sm(1, 7, 40_000)
        lab.sm(2, 7, 40_000)
        lab.idle(100 * MS)
    state = lab.native.publications[7].feedback.receivers
    assert state is not None
    assert sorted(state) == [1001, 1002]
    lab.sm(0, 7, 50_000)  # it comes back: new again, Python's
    lab.sm(0, 7, 51_000)
    assert lab.native.dispatched == native_steady + 1


def test_min_flow_control_group_size_holds_the_limit_on_both_paths(tmp_path: Path, lab_factory: list[_Lab]) -> None:
    lab = _lab(lab_factory, tmp_path, "aeron:udp?endpoint=127.0.0.1:9", "min,g:/3", {7: False})
    lab.sm(0, 7, 0)
    lab.sm(1, 7, 0)
    for position in (4096, 8192):  # two known receivers of three: the limit holds still, natively too
        lab.sm(0, 7, position)
        lab.sm(1, 7, position)
    assert lab.native.publications[7].sender_limit.get() == 0
    lab.sm(2, 7, 8192)
    lab.sm(0, 7, 12_288)
    assert lab.native.publications[7].sender_limit.get() == 8192 + 32 * 1024
    assert lab.native.dispatched == 3


def test_dynamic_destinations_native_and_python_agree(tmp_path: Path, lab_factory: list[_Lab]) -> None:
    channel = "aeron:udp?control=127.0.0.1:0|control-mode=dynamic"
    lab = _lab(lab_factory, tmp_path, channel, None, {7: False, 9: True})  # 9 is private (its own destinations)
    for receiver in range(3):  # new destinations: Python's (shared ones for 7, private ones for 9)
        lab.sm(receiver, 7, 0)
        lab.sm(receiver, 9, 0)
    for step in range(1, 4):  # known destinations refresh natively
        for receiver in range(3):
            lab.sm(receiver, 7, 4096 * step)
            lab.sm(receiver, 9, 4096 * step)
    assert lab.native.dispatched == 6
    lab.sm(3, 9, 20_000)  # a fourth receiver (a NAT's new port, say) for the private one: Python's
    lab.sm(3, 7, 20_000)
    lab.sm(4, 9, 20_000)  # a fifth: the private publication is full (4), refused and counted
    assert lab.native.dispatched == 9
    for _ in range(6):  # receivers 0-2 go quiet; 3 keeps speaking: the others expire on both sides
        lab.sm(3, 7, 30_000)
        lab.sm(3, 9, 30_000)
        lab.idle(1_000 * MS)
    assert len(lab.native.endpoint.destinations) == 1
    lab.sm(0, 7, 40_000)  # forgotten, so new again: Python's
    lab.sm(0, 9, 40_000)
    lab.sm(0, 9, 41_000)


def test_malformed_and_other_feedback_goes_to_python_and_is_counted_alike(
    tmp_path: Path, lab_factory: list[_Lab]
) -> None:
    lab = _lab(lab_factory, tmp_path, "aeron:udp?endpoint=127.0.0.1:9", None, {7: False})
    lab.sm(0, 7, 0)
    good = bytearray(36)
    write_sm(good, 0, 7, STREAM, INITIAL_TERM_ID, 4096, 32 * 1024, 1000)
    bad_version = bytearray(good)
    bad_version[4] = 1
    long_frame = bytearray(good)
    long_frame[0:4] = (37).to_bytes(4, "little")  # says 37 bytes, has 36
    short_frame = bytearray(good)
    short_frame[0:4] = (20).to_bytes(4, "little")
    negative = bytearray(good)
    negative[0:4] = (-1).to_bytes(4, "little", signed=True)
    unknown = bytearray(36)
    write_sm(unknown, 0, 99, STREAM, INITIAL_TERM_ID, 0, 1024, 1000)
    extended = bytes(good) + bytes(8)  # a longer SM (today's group tag): the first 36 bytes count, as in Python
    extended = (44).to_bytes(4, "little") + extended[4:]
    nak = bytearray(28)
    write_nak(nak, 0, 7, STREAM, INITIAL_TERM_ID, 0, 1024)
    rttm = bytearray(40)
    write_rttm(rttm, 0, 7, STREAM, 123, 0, 1000, REPLY_FLAG)
    err = ErrorFrame(session_id=7, stream_id=STREAM, receiver_id=1000, error_code=1, error_message="no").encode()
    for datagram in (
        bytes(good[:20]),
        bytes(bad_version),
        bytes(long_frame),
        bytes(short_frame),
        bytes(negative),
        bytes(unknown),
        extended,
        bytes(nak),
        bytes(rttm),
        err,
        bytes(good),
    ):
        lab.send(0, datagram)
    assert lab.native.counters.invalid_packets.get() == 5  # truncated, version, both lengths, negative
    assert lab.native.errors == [(7, 1000)]
    # Only the well-formed plain SMs (the extended one and the last) were native.
    assert lab.native.dispatched == lab.sent - 2


def test_the_end_of_stream_sends_every_status_message_through_python(tmp_path: Path, lab_factory: list[_Lab]) -> None:
    lab = _lab(lab_factory, tmp_path, "aeron:udp?endpoint=127.0.0.1:9", None, {7: False})
    lab.sm(0, 7, 0)
    lab.sm(0, 7, 0)
    assert lab.native.dispatched == 1
    for side in (lab.native, lab.python):
        side.publications[7].is_end_of_stream = True
    lab.sm(0, 7, 0)
    lab.sm(0, 7, 0)
    assert lab.native.dispatched == 3


def test_with_faults_injected_on_receive_every_status_message_meets_the_injector(tmp_path: Path) -> None:
    side = _Side(tmp_path, True, "aeron:udp?endpoint=127.0.0.1:9", None, {7: False}, (FaultSpec(), FaultSpec(1.0)))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
            receiver.bind(("127.0.0.1", 0))
            sm = bytearray(36)
            write_sm(sm, 0, 7, STREAM, INITIAL_TERM_ID, 4096, 32 * 1024, 1000)
            for _ in range(5):
                receiver.sendto(sm, side.address)
            deadline = time.monotonic() + 5.0
            while side.endpoint.transport.fault_counts["receive_dropped"] < 5 and time.monotonic() < deadline:
                side.endpoint.poll(START_NS)
        assert side.endpoint.transport.fault_counts["receive_dropped"] == 5  # the injector saw (and dropped) all
        assert side.counters.status_messages_received.get() == 0
        assert not side.publications[7].has_receivers
    finally:
        side.close()


def test_a_slot_must_be_bound_before_it_is_routed() -> None:
    manager = CountersManager(AtomicBuffer(bytearray(64 * 1024)), AtomicBuffer(bytearray(16 * 1024)))
    counter = manager.new_counter("sms")
    routes = FeedbackRoutes(counter.location())
    with pytest.raises(ValueError, match="not bound"):
        routes.add(FeedbackSlot(FEEDBACK_MAX_POSITION))
    with pytest.raises(ValueError, match="kind"):
        FeedbackSlot(7)
    assert len(routes) == 0
