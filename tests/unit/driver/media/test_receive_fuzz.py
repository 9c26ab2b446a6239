"""Fuzz: whatever arrives on a channel endpoint's socket is used or counted, never raised.

Three levels. A real ``ReceiveChannelEndpoint`` with a real ``PublicationImage``
behind it, and a real ``SendChannelEndpoint`` with a real ``NetworkPublication``
behind it, are fed arbitrary bytes and mutated frames (DATA, PAD, heartbeat,
SETUP, SM, NAK, RTTM built with the ``driver.wire`` writers) through a UDP
socket on 127.0.0.1, and polled directly: nothing may raise, every datagram is
counted in BYTES_RECEIVED, and INVALID_PACKETS grows by exactly the number of
datagrams that are malformed for where they were routed. Then two embedded
drivers carrying a live stream get the same kind of garbage at their sockets:
their error logs stay empty, only INVALID_PACKETS moves, and the stream still
delivers every message exactly once and in order afterwards.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.client import Aeron, FragmentAssembler, Header
from driver.cnc import CncFile
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter, CountersManager, CountersReader
from driver.concurrent.error_log import read_error_log
from driver.concurrent.system_counters import SystemCounterId
from driver.config import DriverContext
from driver.core.congestion import new_congestion_control
from driver.core.flow_control import new_flow_control
from driver.core.loss_detector import NAK_UNICAST_DELAY_DEFAULT_NS, LossDetector, StaticDelayGenerator
from driver.core.media_driver import MediaDriver
from driver.core.network_publication import NetworkPublication, SenderCounters
from driver.core.publication_image import ImageCounters, PublicationImage
from driver.core.retransmit import RETRANSMIT_UNICAST_DELAY_NS, RETRANSMIT_UNICAST_LINGER_NS, RetransmitHandler
from driver.errors import MalformedFrameError
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.frame import (
    HDR_TYPE_DATA,
    HDR_TYPE_NAK,
    HDR_TYPE_PAD,
    HDR_TYPE_SETUP,
)
from driver.logbuffer.log_buffers import LogBuffers
from driver.media.endpoints import EndpointCounters, ReceiveChannelEndpoint, SendChannelEndpoint
from driver.media.transport import Address
from driver.media.udp_channel import UdpChannel
from driver.wire.data import write_data_header, write_heartbeat
from driver.wire.datagram import classify, validate_data_datagram
from driver.wire.nak import NAK, write_nak
from driver.wire.rttm import REPLY_FLAG, write_rttm
from driver.wire.setup import SETUP, write_setup
from driver.wire.status import SEND_SETUP_FLAG, write_sm
from support.clients import offer_all, wait_for_image
from support.waiting import execute_until

SESSION = 7
STREAM = 10
OTHER_STREAM = 11
INITIAL_TERM_ID = 100
TERM_LENGTH = 64 * 1024
MTU = 1408
FUZZ_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_INT32 = st.integers(-(2**31), 2**31 - 1)


# -- datagram strategies ---------------------------------------------------------------------------


def _aligned(n: int) -> int:
    return (n + 31) & -32


@st.composite
def data_datagrams(draw: st.DrawFn, sessions: st.SearchStrategy[int], streams: st.SearchStrategy[int]) -> bytes:
    """One to three consecutive DATA/PAD frames, or a heartbeat, as a sender would put them on the wire."""
    session_id, stream_id = draw(sessions), draw(streams)
    term_id = draw(st.integers(INITIAL_TERM_ID - 2, INITIAL_TERM_ID + 3))
    term_offset = draw(st.integers(0, TERM_LENGTH // 32 - 1)) * 32
    if draw(st.booleans()):
        buf = bytearray(32)
        flags = draw(st.sampled_from([0xC0, 0xE0]))  # heartbeat, heartbeat with EOS
        write_heartbeat(buf, 0, session_id, stream_id, term_id, term_offset, flags)
        return bytes(buf)
    out = bytearray()
    offset = term_offset
    for _ in range(draw(st.integers(1, 3))):
        payload = draw(st.integers(0, 300))
        frame_length = 32 + payload
        if offset + _aligned(frame_length) > TERM_LENGTH:
            break
        frame_type = draw(st.sampled_from([HDR_TYPE_DATA, HDR_TYPE_DATA, HDR_TYPE_PAD]))
        frame = bytearray(_aligned(frame_length))
        write_data_header(frame, 0, frame_length, 0xC0, frame_type, offset, session_id, stream_id, term_id)
        frame[32:frame_length] = draw(st.binary(min_size=payload, max_size=payload))
        out += frame
        offset += len(frame)
    if not out:  # no room before the term end: a heartbeat
        out = bytearray(32)
        write_heartbeat(out, 0, session_id, stream_id, term_id, term_offset)
    return bytes(out)


@st.composite
def control_datagrams(draw: st.DrawFn, sessions: st.SearchStrategy[int], streams: st.SearchStrategy[int]) -> bytes:
    """A SETUP, SM, NAK or RTTM with plausible (and some implausible) field values."""
    session_id, stream_id = draw(sessions), draw(streams)
    buf = bytearray(64)
    kind = draw(st.sampled_from(["setup", "sm", "nak", "rttm"]))
    if kind == "setup":
        n = write_setup(
            buf,
            0,
            draw(st.sampled_from([0, 32, 4096, 5, TERM_LENGTH, -32])),
            session_id,
            stream_id,
            draw(_INT32),
            draw(_INT32),
            draw(st.sampled_from([TERM_LENGTH, 128 * 1024, 1000, 0, -TERM_LENGTH])),
            draw(st.sampled_from([MTU, 4096, 33, 0, 1 << 20])),
            draw(st.integers(0, 255)),
        )
    elif kind == "sm":
        n = write_sm(
            buf,
            0,
            session_id,
            stream_id,
            draw(st.integers(INITIAL_TERM_ID - 3, INITIAL_TERM_ID + 3) | _INT32),
            draw(st.integers(-64, TERM_LENGTH + 64) | _INT32),
            draw(st.integers(-1, 1 << 20) | _INT32),
            draw(st.integers(-(2**63), 2**63 - 1)),
            draw(st.sampled_from([0, SEND_SETUP_FLAG, 0x40, 0xFF])),
        )
    elif kind == "nak":
        n = write_nak(
            buf,
            0,
            session_id,
            stream_id,
            draw(st.integers(INITIAL_TERM_ID - 3, INITIAL_TERM_ID + 3) | _INT32),
            draw(st.integers(-64, TERM_LENGTH + 64) | _INT32),
            draw(st.integers(-64, 2 * TERM_LENGTH) | _INT32),
        )
    else:
        n = write_rttm(
            buf,
            0,
            session_id,
            stream_id,
            draw(st.integers(0, 2**63 - 1)),
            draw(st.integers(-(2**63), 2**63 - 1)),
            draw(st.integers(-(2**63), 2**63 - 1)),
            draw(st.sampled_from([0, REPLY_FLAG])),
        )
    return bytes(buf[:n])


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """A valid datagram with bytes overwritten, bits flipped, cut short, extended or glued to another."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        choice = draw(st.integers(0, 4))
        if choice == 0 and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif choice == 1 and data:
            index = draw(st.integers(0, len(data) - 1))
            data[index] ^= 1 << draw(st.integers(0, 7))
        elif choice == 2:
            del data[draw(st.integers(0, len(data))) :]
        elif choice == 3:
            data += draw(st.binary(min_size=1, max_size=64))
        else:
            data += draw(base)
    return bytes(data[:4096])


def datagrams(sessions: st.SearchStrategy[int], streams: st.SearchStrategy[int]) -> st.SearchStrategy[bytes]:
    valid = data_datagrams(sessions, streams) | control_datagrams(sessions, streams)
    return st.one_of(valid, mutated(valid), st.binary(max_size=256))


OUR_SESSIONS = st.sampled_from([SESSION, SESSION, 8]) | _INT32
OUR_STREAMS = st.sampled_from([STREAM, STREAM, OTHER_STREAM]) | _INT32


# -- harness ---------------------------------------------------------------------------------------


class _Counters:
    """A counters manager over plain memory and the system counters the endpoints and images update."""

    def __init__(self) -> None:
        self.manager = CountersManager(AtomicBuffer(bytearray(256 * 1024)), AtomicBuffer(bytearray(64 * 1024)))
        self.system = {sid: self.manager.new_counter(sid.label, 0) for sid in SystemCounterId}
        sc = self.system
        self.endpoint = EndpointCounters.of(sc.__getitem__)
        self.image = ImageCounters(
            heartbeats_received=sc[SystemCounterId.HEARTBEATS_RECEIVED],
            status_messages_sent=sc[SystemCounterId.STATUS_MESSAGES_SENT],
            naks_sent=sc[SystemCounterId.NAK_MESSAGES_SENT],
            flow_control_under_runs=sc[SystemCounterId.FLOW_CONTROL_UNDER_RUNS],
            flow_control_over_runs=sc[SystemCounterId.FLOW_CONTROL_OVER_RUNS],
            loss_gap_fills=sc[SystemCounterId.LOSS_GAP_FILLS],
        )
        self.sender = SenderCounters(
            bytes_sent=sc[SystemCounterId.BYTES_SENT],
            heartbeats_sent=sc[SystemCounterId.HEARTBEATS_SENT],
            retransmits_sent=sc[SystemCounterId.RETRANSMITS_SENT],
            short_sends=sc[SystemCounterId.SHORT_SENDS],
            sender_flow_control_limits=sc[SystemCounterId.SENDER_FLOW_CONTROL_LIMITS],
            unblocked_publications=sc[SystemCounterId.UNBLOCKED_PUBLICATIONS],
        )

    def new(self, label: str) -> AtomicCounter:
        return self.manager.new_counter(label)

    def value(self, sid: SystemCounterId) -> int:
        return self.system[sid].get()


def _udp_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


def _drain(sock: socket.socket) -> list[bytes]:
    """Everything waiting on ``sock`` (the endpoints' replies), bounded."""
    out: list[bytes] = []
    for _ in range(10_000):
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            break
    return out


def _deliver(sock: socket.socket, datagram: bytes, address: Address, poll: object) -> None:
    """Send one datagram and poll the endpoint until it has read it (loopback delivers at once; bounded)."""
    assert callable(poll)
    sock.sendto(datagram, address)
    deadline = time.monotonic() + 2.0
    for _ in range(100_000):
        if poll(time.monotonic_ns()):
            return
        assert time.monotonic() < deadline, "the endpoint never read the datagram"


def _is_valid_reply(reply: bytes) -> bool:
    try:
        classify(reply, len(reply))
    except MalformedFrameError:
        return False
    return True


@contextlib.contextmanager
def _receive_side(tmp: Path) -> Iterator[tuple[_Counters, ReceiveChannelEndpoint, PublicationImage, list[object]]]:
    counters = _Counters()
    probe = _udp_socket()
    port = probe.getsockname()[1]
    probe.close()
    channel = UdpChannel.parse(f"aeron:udp?endpoint=127.0.0.1:{port}")
    setups: list[object] = []
    endpoint = ReceiveChannelEndpoint(
        channel,
        counters.endpoint,
        counters.new("rcv-channel"),
        lambda _endpoint, fields, source: setups.append((fields, source)),
        receiver_id=1234,
    )
    endpoint.stream_ref_counts[STREAM] = 1
    log = LogBuffers.create(tmp / "image.logbuffer", TERM_LENGTH, 4096)
    lbd.initialize_image_metadata(
        log.metadata,
        session_id=SESSION,
        stream_id=STREAM,
        initial_term_id=INITIAL_TERM_ID,
        mtu_length=MTU,
        term_length=TERM_LENGTH,
        page_size=4096,
        correlation_id=1,
    )
    source = _udp_socket()
    image = PublicationImage(
        correlation_id=1,
        session_id=SESSION,
        stream_id=STREAM,
        channel=channel.original_uri_string,
        endpoint=endpoint,
        log=log,
        active_term_id=INITIAL_TERM_ID,
        term_offset=0,
        source_address=source.getsockname(),
        control_address=source.getsockname(),
        send_control=endpoint.send_control,
        receiver_id=endpoint.receiver_id,
        hwm_position=counters.new("rcv-hwm"),
        rebuild_position=counters.new("rcv-pos"),
        loss_detector_factory=lambda on_gap: LossDetector(
            StaticDelayGenerator(NAK_UNICAST_DELAY_DEFAULT_NS, True), on_gap
        ),
        congestion_control=new_congestion_control(None, term_length=TERM_LENGTH),
        counters=counters.image,
        status_message_timeout_ns=200_000_000,
        image_liveness_timeout_ns=10_000_000_000,
        is_reliable=True,
        on_loss=None,
        now_ns=time.monotonic_ns(),
    )
    subscriber = counters.new("sub-pos")
    subscriber.set(image.join_position)
    image.set_subscriber_positions((subscriber,))
    endpoint.images[(SESSION, STREAM)] = image
    image.send_status_message(image.join_position, image.window, time.monotonic_ns())
    try:
        yield counters, endpoint, image, [source, setups]
    finally:
        source.close()
        endpoint.close()
        image.close()


def _expected_invalid_at_receiver(datagram: bytes) -> bool:
    try:
        frame_type = classify(datagram, len(datagram))
    except MalformedFrameError:
        return True
    if frame_type in (HDR_TYPE_DATA, HDR_TYPE_PAD):
        _, session_id, stream_id, _ = struct.unpack_from("<iiii", datagram, 8)
        if stream_id == STREAM and session_id == SESSION:
            try:
                validate_data_datagram(datagram, len(datagram), TERM_LENGTH)
            except MalformedFrameError:
                return True
    return False


def test_receive_endpoint_counts_or_uses_every_datagram_and_never_raises(tmp_path: Path) -> None:
    with _receive_side(tmp_path) as (counters, endpoint, image, (source, setups)):
        assert isinstance(source, socket.socket)
        assert isinstance(setups, list)
        address = ("127.0.0.1", endpoint.transport.local_address[1])

        @FUZZ_SETTINGS
        @given(batch=st.lists(datagrams(OUR_SESSIONS, OUR_STREAMS), min_size=1, max_size=8))
        def check(batch: list[bytes]) -> None:
            invalid = counters.value(SystemCounterId.INVALID_PACKETS)
            received = counters.value(SystemCounterId.BYTES_RECEIVED)
            for datagram in batch:
                _deliver(source, datagram, address, endpoint.poll)
                image.track_rebuild(time.monotonic_ns())
                endpoint.expire_pending(time.monotonic_ns(), 1_000_000_000)
            expected = sum(_expected_invalid_at_receiver(d) for d in batch)
            assert counters.value(SystemCounterId.INVALID_PACKETS) - invalid == expected
            assert counters.value(SystemCounterId.BYTES_RECEIVED) - received == sum(map(len, batch))
            # The image keeps its invariants whatever was inserted into it.
            assert image.rebuild_position.get() <= image.hwm_position.get()
            assert image.hwm_position.get() >= image.join_position
            # What the endpoint and image said back (SMs, NAKs, RTTM replies) is well formed.
            assert all(map(_is_valid_reply, _drain(source)))

        check()
        # SETUPs for the subscribed stream reached the conductor hook; nothing else did.
        for fields, _source in setups:  # type: ignore[misc]
            assert fields[6] == STREAM


@contextlib.contextmanager
def _send_side(tmp: Path) -> Iterator[tuple[_Counters, SendChannelEndpoint, NetworkPublication, socket.socket]]:
    counters = _Counters()
    sink = _udp_socket()  # the publication's destination: takes resent data
    channel = UdpChannel.parse(f"aeron:udp?endpoint=127.0.0.1:{sink.getsockname()[1]}")
    endpoint = SendChannelEndpoint(channel, counters.endpoint, counters.new("snd-channel"))
    log = LogBuffers.create(tmp / "publication.logbuffer", TERM_LENGTH, 4096)
    lbd.initialize_publication_metadata(
        log.metadata,
        session_id=SESSION,
        stream_id=STREAM,
        initial_term_id=INITIAL_TERM_ID,
        mtu_length=MTU,
        term_length=TERM_LENGTH,
        page_size=4096,
        correlation_id=2,
    )
    publication = NetworkPublication(
        registration_id=2,
        channel=channel.original_uri_string,
        endpoint=endpoint,
        log=log,
        session_id=SESSION,
        stream_id=STREAM,
        publisher_position=counters.new("pub-pos"),
        publisher_limit=counters.new("pub-lmt"),
        sender_position=counters.new("snd-pos"),
        sender_limit=counters.new("snd-lmt"),
        flow_control=new_flow_control(None, is_multicast=False),
        retransmit_handler=RetransmitHandler(
            StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS),
            StaticDelayGenerator(RETRANSMIT_UNICAST_LINGER_NS),
            on_invalid=counters.system[SystemCounterId.INVALID_PACKETS].increment,
        ),
        counters=counters.sender,
        term_window_length=TERM_LENGTH // 2,
        connection_timeout_ns=5_000_000_000,
        unblock_timeout_ns=10_000_000_000,
        linger_timeout_ns=0,
        multicast_ttl=0,
        is_exclusive=True,
        now_ns=time.monotonic_ns(),
    )
    # 40 committed 1 KiB frames in the first term, all of them "sent": NAKs can ask for them again.
    term = log.terms[0]
    frame = bytearray(1024)
    for i in range(40):
        write_data_header(frame, 0, 1024, 0xC0, HDR_TYPE_DATA, i * 1024, SESSION, STREAM, INITIAL_TERM_ID)
        term.put_bytes(i * 1024, bytes(frame))
    lbd.set_raw_tail_volatile(log.metadata, 0, lbd.pack_tail(INITIAL_TERM_ID, 40 * 1024))
    publication.sender_position.set(40 * 1024)
    endpoint.publications[(SESSION, STREAM)] = publication
    try:
        yield counters, endpoint, publication, sink
    finally:
        sink.close()
        endpoint.close()
        publication.close()


def _expected_invalid_at_sender(datagram: bytes) -> bool:
    try:
        frame_type = classify(datagram, len(datagram))
    except MalformedFrameError:
        return True
    if frame_type == HDR_TYPE_NAK:
        fields = NAK.unpack_from(datagram, 0)
        session_id, stream_id, term_offset = fields[4], fields[5], fields[7]
        if (session_id, stream_id) == (SESSION, STREAM):
            return not (0 <= term_offset <= TERM_LENGTH - 32) or bool(term_offset & 31)
    return False


def test_send_endpoint_counts_or_uses_every_datagram_and_never_raises(tmp_path: Path) -> None:
    with _send_side(tmp_path) as (counters, endpoint, publication, sink):
        feedback = _udp_socket()
        address = ("127.0.0.1", endpoint.transport.local_address[1])

        @FUZZ_SETTINGS
        @given(batch=st.lists(datagrams(OUR_SESSIONS, OUR_STREAMS), min_size=1, max_size=8))
        def check(batch: list[bytes]) -> None:
            invalid = counters.value(SystemCounterId.INVALID_PACKETS)
            received = counters.value(SystemCounterId.BYTES_RECEIVED)
            for datagram in batch:
                _deliver(feedback, datagram, address, endpoint.poll)
                now_ns = time.monotonic_ns()
                publication.send(now_ns)
                publication.on_time_event(now_ns)
                publication.update_publisher_limit()
            expected = sum(_expected_invalid_at_sender(d) for d in batch)
            assert counters.value(SystemCounterId.INVALID_PACKETS) - invalid == expected
            assert counters.value(SystemCounterId.BYTES_RECEIVED) - received == sum(map(len, batch))
            # Whatever went out (resent data, SETUP, heartbeats, RTTM replies) is well formed.
            assert all(map(_is_valid_reply, _drain(sink)))
            assert all(map(_is_valid_reply, _drain(feedback)))

        try:
            check()
        finally:
            feedback.close()


def test_unaligned_nak_is_counted_invalid_not_raised(tmp_path: Path) -> None:
    """A NAK inside the term but not on a frame boundary used to make the sender's scan raise."""
    with _send_side(tmp_path) as (counters, endpoint, _publication, _sink):
        feedback = _udp_socket()
        try:
            nak = bytearray(28)
            write_nak(nak, 0, SESSION, STREAM, INITIAL_TERM_ID, 4, 64)
            _deliver(feedback, bytes(nak), ("127.0.0.1", endpoint.transport.local_address[1]), endpoint.poll)
            assert counters.value(SystemCounterId.INVALID_PACKETS) == 1
            assert counters.value(SystemCounterId.RETRANSMITS_SENT) == 0
        finally:
            feedback.close()


# -- a real driver pair under fire ------------------------------------------------------------------

DRIVER_SETTINGS: dict[str, object] = {
    "timer_interval_ns": 50_000_000,
    "client_liveness_timeout_ns": 2_000_000_000,
    "publication_linger_timeout_ns": 200_000_000,
    "image_liveness_timeout_ns": 1_000_000_000,
    "publication_connection_timeout_ns": 2_000_000_000,
    "term_buffer_length": TERM_LENGTH,
}


def _cap_setup(datagram: bytes) -> bytes:
    """Keep the driver from creating huge images: a SETUP that would name a term over 128 KiB gets 64 KiB."""
    if len(datagram) >= 40 and datagram[4] == 0 and datagram[6] == HDR_TYPE_SETUP:
        fields = SETUP.unpack_from(datagram, 0)
        if fields[9] > 128 * 1024:
            patched = bytearray(datagram)
            struct.pack_into("<i", patched, 28, TERM_LENGTH)
            return bytes(patched)
    return datagram


def _counter(reader: CountersReader, sid: SystemCounterId) -> int:
    return reader.get_counter_value(sid)


def test_driver_pair_survives_garbage_and_the_stream_still_flows(tmp_path: Path) -> None:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    dirs = [base / f"endpoint-fuzz-{name}-{random.getrandbits(40):x}" for name in ("pub", "sub")]
    probe = _udp_socket()
    port = probe.getsockname()[1]
    probe.close()
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        for directory in dirs:
            ctx = DriverContext.from_env({}, aeron_dir=directory, threading_mode="SHARED", **DRIVER_SETTINGS)
            stack.enter_context(MediaDriver.launch_embedded(ctx))
        pub_client = stack.enter_context(Aeron.connect(aeron_dir=dirs[0]))
        sub_client = stack.enter_context(Aeron.connect(aeron_dir=dirs[1]))
        subscription = sub_client.add_subscription(channel, STREAM)
        publication = pub_client.add_exclusive_publication(channel, STREAM)
        (image,) = wait_for_image(subscription)
        sender_control = image.source_identity.rsplit(":", 1)
        targets = [("127.0.0.1", port), (sender_control[0], int(sender_control[1]))]
        real_session = publication.session_id
        foreign = _INT32.filter(lambda s: s != real_session)
        sock = stack.enter_context(contextlib.closing(_udp_socket()))
        sent = [0]

        @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(batch=st.lists(datagrams(foreign, st.sampled_from([STREAM, OTHER_STREAM]) | _INT32), max_size=8))
        def spray(batch: list[bytes]) -> None:
            for datagram in batch:
                for target in targets:
                    sock.sendto(_cap_setup(datagram), target)
                    sent[0] += 1
            _drain(sock)

        spray()
        assert sent[0] > 0
        readers = [CncFile.map_existing(d, timeout_s=5.0) for d in dirs]
        stack.callback(lambda: [r.close() for r in readers])
        counters = [CountersReader(r.counters_metadata_buffer, r.counters_values_buffer) for r in readers]
        execute_until(
            lambda: all(_counter(c, SystemCounterId.INVALID_PACKETS) > 0 for c in counters),
            timeout_s=10,
            description="both drivers counting invalid packets",
        )

        # The legitimate stream still delivers everything, exactly once and in order.
        count = 500
        got: list[int] = []

        def on_message(buffer: memoryview, header: Header) -> None:
            if header.session_id == real_session:
                got.append(int.from_bytes(buffer[:4], "little"))

        assembler = FragmentAssembler(on_message)
        messages = [seq.to_bytes(4, "little") * 8 for seq in range(count)]
        offer_all(publication, messages, lambda: subscription.poll(assembler, 100))
        execute_until(
            lambda: len(got) >= count,
            lambda: subscription.poll(assembler, 100),
            timeout_s=20,
            interval_s=0.0001,
            max_iterations=10_000_000,
            description=f"{count} messages after the fuzz",
        )
        assert got == list(range(count))
        for reader, counter in zip(readers, counters, strict=True):
            assert _counter(counter, SystemCounterId.ERRORS) == 0
            # Only refused SETUPs, each reason once whatever the flood (no session id or address in the text).
            texts = [e.text for e in read_error_log(reader.error_log_buffer)]
            assert all(t.startswith("image refused on ") for t in texts), texts
            assert len(texts) <= 4, texts


@pytest.mark.parametrize("frame", ["garbage", "short-sm"])
def test_transport_level_oddities_are_counted(tmp_path: Path, frame: str) -> None:
    """An empty datagram and a control frame shorter than its type needs are invalid packets."""
    with _send_side(tmp_path) as (counters, endpoint, _publication, _sink):
        feedback = _udp_socket()
        try:
            datagram = b"" if frame == "garbage" else bytes(write_sm_prefix())
            _deliver(feedback, datagram, ("127.0.0.1", endpoint.transport.local_address[1]), endpoint.poll)
            assert counters.value(SystemCounterId.INVALID_PACKETS) == 1
        finally:
            feedback.close()


def write_sm_prefix() -> bytes:
    buf = bytearray(36)
    write_sm(buf, 0, SESSION, STREAM, INITIAL_TERM_ID, 0, 1024, 1)
    return bytes(buf[:20])
