"""Our driver and the real Aeron Java 1.15.1 driver exchanging streams over UDP on loopback.

Each test runs two media drivers on two directories: ours (``python -m driver``) and
Java's ``io.aeron.driver.MediaDriver``. One side publishes on
``aeron:udp?endpoint=127.0.0.1:<port>``, the other subscribes, so every byte between
them is Aeron's wire protocol: SETUP, DATA, heartbeats, status messages, NAKs and
retransmissions.

Loss is injected on one side at a time, 5% on data and on control traffic in both
directions: on Java's side with 1.15.1's debug channel endpoints (which drop whole
datagrams, seeded), on ours with our driver's fault injection. Payloads carry
sequence numbers so the receiving side can prove exactly-once, in-order delivery:

* Java's ``StreamingPublisher`` writes ``i`` as a little-endian int64 at offset 0 of
  an otherwise zeroed message; our subscriber (with a fragment assembler) checks it;
* our publisher sends ASCII messages numbered in their text; Java's
  ``BasicSubscriber`` prints every fragment, so its output, re-joined, must be the
  exact concatenation of what we sent, and ``RateSubscriber`` (which reassembles)
  must count exactly as many messages.

When Debian's ``tshark`` is installed, one more test captures our driver's traffic on
loopback and has Wireshark's Aeron dissector decode every datagram.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from driver.client import Aeron, FragmentAssembler, Header, Publication
from driver.cnc import CncFile
from driver.concurrent.counters import CountersReader
from driver.concurrent.error_log import read_error_log
from driver.concurrent.system_counters import DriverSystemCounterId, SystemCounterId
from support.aeron_java import AeronJava, JavaMediaDriver, PropValue, start_java_media_driver
from support.driver_process import DriverProcess
from support.ports import free_udp_port
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process]

STREAM_ID = 1001
SMALL = 32
LARGE = 64 * 1024
SMALL_COUNT = 20_000
LARGE_COUNT = 100
LOSS_RATE = 0.05

# 1.15.1's debug endpoints (io.aeron.driver.ext): "data" loss drops what the data path
# sends or receives (DATA, SETUP, heartbeats, RTTM), "control" loss drops status messages
# and NAKs. A seed of -1 would mean "unseeded"; fixed seeds make a run repeatable.
JAVA_LOSS_PROPS: dict[str, PropValue] = {
    "aeron.SendChannelEndpoint.supplier": "io.aeron.driver.ext.DebugSendChannelEndpointSupplier",
    "aeron.ReceiveChannelEndpoint.supplier": "io.aeron.driver.ext.DebugReceiveChannelEndpointSupplier",
    "aeron.debug.send.data.loss.rate": LOSS_RATE,
    "aeron.debug.send.data.loss.seed": 11,
    "aeron.debug.send.control.loss.rate": LOSS_RATE,
    "aeron.debug.send.control.loss.seed": 12,
    "aeron.debug.receive.data.loss.rate": LOSS_RATE,
    "aeron.debug.receive.data.loss.seed": 13,
    "aeron.debug.receive.control.loss.rate": LOSS_RATE,
    "aeron.debug.receive.control.loss.seed": 14,
}

# Our fault injection acts on every datagram a driver socket sends or receives.
OUR_LOSS_SETTINGS: dict[str, object] = {
    "send_loss_rate": LOSS_RATE,
    "send_fault_seed": 21,
    "receive_loss_rate": LOSS_RATE,
    "receive_fault_seed": 22,
}

OUR_DRIVER_SETTINGS: dict[str, object] = {
    "timer_interval_ns": 50_000_000,
    "client_liveness_timeout_ns": 5_000_000_000,
    "publication_linger_timeout_ns": 1_000_000_000,
    "term_buffer_length": 1 << 20,
    "ipc_term_buffer_length": 1 << 20,
}

LOSS_SIDES = [pytest.param("java", id="loss-on-java"), pytest.param("ours", id="loss-on-ours")]
SIZES = [pytest.param(SMALL, SMALL_COUNT, id="32B"), pytest.param(LARGE, LARGE_COUNT, id="64KiB")]


def udp_channel(port: int) -> str:
    return f"aeron:udp?endpoint=127.0.0.1:{port}"


@dataclass
class Drivers:
    ours: DriverProcess
    java: JavaMediaDriver


StartDrivers = Callable[[str | None], Drivers]


@pytest.fixture
def java_dir(aeron_dir: Path) -> Iterator[Path]:
    """A second unique directory, beside ``aeron_dir``, for the Java driver."""
    path = aeron_dir.with_name(aeron_dir.name + "-java")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_drivers(aeron_java: AeronJava, aeron_dir: Path, java_dir: Path, tmp_path: Path) -> Iterator[StartDrivers]:
    """``start(loss_side)``: our driver process and a Java driver, loss injected on ``loss_side``."""
    started: list[Drivers] = []

    def start(loss_side: str | None) -> Drivers:
        ours_settings = {**OUR_DRIVER_SETTINGS, **(OUR_LOSS_SETTINGS if loss_side == "ours" else {})}
        java_props = JAVA_LOSS_PROPS if loss_side == "java" else {}
        ours = DriverProcess.start(aeron_dir, tmp_path / "our-driver.log", ours_settings)
        try:
            java = start_java_media_driver(aeron_java, java_dir, tmp_path / "java-driver.log", props=java_props)
        except BaseException:
            ours.stop()
            raise
        drivers = Drivers(ours, java)
        started.append(drivers)
        return drivers

    yield start
    for drivers in started:
        AeronJava.stop(drivers.java.process)
        drivers.ours.stop()


def system_counter(aeron_dir: Path, counter: SystemCounterId) -> int:
    with CncFile.map_existing(aeron_dir, timeout_s=5.0) as cnc:
        reader = CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
        return reader.get_counter_value(int(counter))


def sample_props(aeron_dir: Path, channel: str, **extra: PropValue) -> dict[str, PropValue]:
    return {"aeron.dir": str(aeron_dir), "aeron.sample.channel": channel, "aeron.sample.streamId": STREAM_ID, **extra}


def assert_loss_was_repaired(receiver_dir: Path, sender_dir: Path) -> None:
    """Loss really happened and was repaired by NAK and retransmission, not just lucky."""
    assert system_counter(receiver_dir, SystemCounterId.NAK_MESSAGES_SENT) > 0
    assert system_counter(sender_dir, SystemCounterId.RETRANSMITS_SENT) > 0


# ---------------------------------------------------------------- Java publishes, we subscribe


class SequenceChecker:
    """Checks StreamingPublisher's messages: int64 LE ``i`` then zeros, ``i`` = 0, 1, 2, ... exactly once."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.zeros = bytes(length - 8)
        self.next = 0
        self.sessions: set[int] = set()
        self.errors: list[str] = []

    def __call__(self, payload: memoryview, header: Header) -> None:
        self.sessions.add(header.session_id)
        if len(payload) != self.length:
            self.errors.append(f"message {self.next}: length {len(payload)}")
        (seq,) = struct.unpack_from("<q", payload, 0)
        if seq != self.next:
            self.errors.append(f"expected message {self.next}, got {seq}")
        elif payload[8:] != self.zeros:
            self.errors.append(f"message {seq}: body is not zeros")
        self.next = seq + 1


@pytest.mark.slow
@pytest.mark.parametrize("loss_side", LOSS_SIDES)
@pytest.mark.parametrize(("length", "count"), SIZES)
def test_java_streaming_publisher_to_our_subscriber(
    aeron_java: AeronJava, start_drivers: StartDrivers, tmp_path: Path, loss_side: str, length: int, count: int
) -> None:
    drivers: Drivers = start_drivers(loss_side)
    channel = udp_channel(free_udp_port())
    checker = SequenceChecker(length)
    assembler = FragmentAssembler(checker)
    with Aeron.connect(aeron_dir=drivers.ours.aeron_dir) as aeron:
        subscription = aeron.add_subscription(channel, STREAM_ID)
        props = sample_props(
            drivers.java.aeron_dir, channel, **{"aeron.sample.messages": count, "aeron.sample.messageLength": length}
        )
        log = tmp_path / "streaming-publisher.log"
        # "n" answers its "Execute again?" prompt; it closes its publication once every offer succeeded,
        # and Java's driver keeps sending (and answering NAKs) while it drains and lingers.
        with open(tmp_path / "answer.txt", "w+b") as answer:
            answer.write(b"n\n")
            answer.seek(0)
            publisher = aeron_java.start("io.aeron.samples.StreamingPublisher", props=props, output=log, stdin=answer)
        try:
            execute_until(
                lambda: checker.next >= count or checker.errors,
                lambda: subscription.poll(assembler, 256),
                timeout_s=90,
                max_iterations=100_000_000,
                interval_s=0,
                description=f"{count} messages of {length} bytes from StreamingPublisher",
            )
            assert publisher.wait(30) == 0, log.read_text()
        finally:
            AeronJava.stop(publisher)
        # Nothing more may arrive: poll a little longer for duplicates.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            subscription.poll(assembler, 256)
    assert checker.errors == []
    assert checker.next == count
    assert len(checker.sessions) == 1
    assert "Done streaming." in log.read_text()
    assert_loss_was_repaired(drivers.ours.aeron_dir, drivers.java.aeron_dir)


@pytest.mark.slow
def test_java_basic_publisher_to_our_subscriber(
    aeron_java: AeronJava, start_drivers: StartDrivers, tmp_path: Path
) -> None:
    """BasicPublisher offers once a second and prints "yay!" for each offer that succeeded."""
    drivers: Drivers = start_drivers(None)
    channel = udp_channel(free_udp_port())
    received: list[str] = []
    with Aeron.connect(aeron_dir=drivers.ours.aeron_dir) as aeron:
        subscription = aeron.add_subscription(channel, STREAM_ID)
        log = tmp_path / "basic-publisher.log"
        props = sample_props(drivers.java.aeron_dir, channel, **{"aeron.sample.messages": 4})
        published = aeron_java.run("io.aeron.samples.BasicPublisher", props=props, timeout_s=60)
        log.write_text(published.stdout + published.stderr)
        assert published.returncode == 0, log.read_text()
        offered = [int(i) for i in re.findall(r"Offering (\d+)/4 - yay!", published.stdout)]
        assert offered, published.stdout  # the first offer may precede the connection, the later ones cannot
        # Nothing was polled while it ran. Its publication has ended (end of stream), yet our image
        # must stay available until its subscriber has read everything, as 1.15.1's does.
        time.sleep(1.0)
        images = subscription.images
        assert len(images) == 1
        assert images[0].source_identity.startswith("127.0.0.1:")
        execute_until(
            lambda: len(received) >= len(offered),
            lambda: subscription.poll(lambda payload, header: received.append(bytes(payload).decode()), 10),
            timeout_s=30,
            interval_s=0.001,
            description=f"{offered} from BasicPublisher",
        )
        execute_until(
            lambda: not subscription.images,
            lambda: subscription.poll(lambda payload, header: received.append(bytes(payload).decode()), 10),
            timeout_s=30,
            interval_s=0.01,
            description="the drained image to go",
        )
    assert received == [f"Hello World! {i}" for i in offered]


def driver_counter_by_label(aeron_dir: Path, label: str) -> int:
    with CncFile.map_existing(aeron_dir, timeout_s=5.0) as cnc:
        reader = CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
        ids: dict[str, int] = {}
        reader.for_each(lambda cid, type_id, key, text: ids.setdefault(text, cid))
        return reader.get_counter_value(ids[label])


@pytest.mark.slow
def test_java_publisher_beyond_our_term_limit_is_refused_and_one_within_connects(
    aeron_java: AeronJava, start_drivers: StartDrivers
) -> None:
    """A real 1.15.1 publisher asking for a longer term than our subscription allows gets no image (refused,
    counted, the reason in our error log); one within the limit connects as before."""
    drivers: Drivers = start_drivers(None)
    port = free_udp_port()
    refused_label = DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH.label
    with Aeron.connect(aeron_dir=drivers.ours.aeron_dir) as aeron:
        subscription = aeron.add_subscription(f"{udp_channel(port)}|max-term-length=64k", STREAM_ID)
        too_long = sample_props(
            drivers.java.aeron_dir, f"{udp_channel(port)}|term-length=128k", **{"aeron.sample.messages": 2}
        )
        published = aeron_java.run("io.aeron.samples.BasicPublisher", props=too_long, timeout_s=60)
        assert published.returncode == 0, published.stdout + published.stderr
        assert "yay!" not in published.stdout  # never connected
        assert driver_counter_by_label(drivers.ours.aeron_dir, refused_label) >= 1
        assert subscription.images == ()
        with CncFile.map_existing(drivers.ours.aeron_dir, timeout_s=5.0) as cnc:
            errors = [e.text for e in read_error_log(cnc.error_log_buffer)]
        assert any("term longer than the subscription allows (limit 65536)" in e for e in errors), errors
        assert not list((drivers.ours.aeron_dir / "images").iterdir())

        within = sample_props(
            drivers.java.aeron_dir, f"{udp_channel(port)}|term-length=64k", **{"aeron.sample.messages": 3}
        )
        published = aeron_java.run("io.aeron.samples.BasicPublisher", props=within, timeout_s=60)
        assert published.returncode == 0, published.stdout + published.stderr
        assert re.findall(r"Offering \d+/3 - yay!", published.stdout), published.stdout


# ---------------------------------------------------------------- we publish, Java subscribes


def numbered_messages(length: int, count: int) -> list[bytes]:
    """ASCII messages whose text says which one they are, so reassembled output can be checked exactly."""
    if length <= 64:
        return [f"m{i:09d}".encode().ljust(length, b".") for i in range(count)]
    return [(f"<{i:09d}:" * (length // 11 + 1)).encode()[:length] for i in range(count)]


def offered(publication: Publication, message: bytes) -> bool:
    return publication.offer(message) >= 0


def offer_all(publication: Publication, messages: list[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for message in messages:
        while publication.offer(message) < 0:
            assert time.monotonic() < deadline, f"offer stuck, connected={publication.is_connected}"
            time.sleep(0.0002)


_FRAGMENT = re.compile(rf"^Message to stream {STREAM_ID} from session (-?\d+) \((\d+)@\d+\) <<(.*)>>$", re.MULTILINE)


def printed_fragments(text: str) -> list[tuple[int, int, str]]:
    """(session, length, text) of each fragment BasicSubscriber printed."""
    return [(int(m[1]), int(m[2]), m[3]) for m in _FRAGMENT.finditer(text)]


def printed_total(text: str) -> int:
    totals = re.findall(r"totals (\d+) messages", text)
    return int(totals[-1]) if totals else 0


def start_java_subscriber(
    aeron_java: AeronJava, cls: str, props: Mapping[str, PropValue], log: Path
) -> subprocess.Popen[bytes]:
    proc = aeron_java.start(cls, props=props, output=log)
    try:
        execute_until(
            lambda: proc.poll() is not None or "Subscribing to" in log.read_text(),
            timeout_s=30,
            interval_s=0.05,
            description=f"{cls} to start",
        )
        assert proc.poll() is None, log.read_text()
    except BaseException:
        AeronJava.stop(proc)
        raise
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("loss_side", LOSS_SIDES)
@pytest.mark.parametrize(("length", "count"), SIZES)
def test_our_publisher_to_java_basic_and_rate_subscribers(
    aeron_java: AeronJava, start_drivers: StartDrivers, tmp_path: Path, loss_side: str, length: int, count: int
) -> None:
    if length == SMALL:
        count //= 4  # BasicSubscriber prints a line per message; keep its output quick to write
    drivers: Drivers = start_drivers(loss_side)
    channel = udp_channel(free_udp_port())
    messages = numbered_messages(length, count)
    expected_text = b"".join(messages).decode()
    props = sample_props(drivers.java.aeron_dir, channel)
    basic_log, rate_log = tmp_path / "basic-subscriber.log", tmp_path / "rate-subscriber.log"
    basic = start_java_subscriber(aeron_java, "io.aeron.samples.BasicSubscriber", props, basic_log)
    rate = None
    try:
        rate = start_java_subscriber(aeron_java, "io.aeron.samples.RateSubscriber", props, rate_log)
        with Aeron.connect(aeron_dir=drivers.ours.aeron_dir) as aeron:
            publication = aeron.add_publication(channel, STREAM_ID)
            execute_until(
                lambda: (
                    basic_log.read_text().count("Available image") >= 1
                    and rate_log.read_text().count("Available image") >= 1
                ),
                timeout_s=30,
                interval_s=0.02,
                description="both Java subscribers to see our image",
            )
            offer_all(publication, messages, timeout_s=90)

            def delivered() -> bool:
                return printed_total(rate_log.read_text()) >= count and sum(
                    n for _, n, _ in printed_fragments(basic_log.read_text())
                ) >= len(expected_text)

            execute_until(delivered, timeout_s=90, interval_s=0.1, description=f"{count} messages at both subscribers")
            session_id = publication.session_id
            time.sleep(1.2)  # a rate report or two more: nothing extra may turn up
            publication.close()
            execute_until(
                lambda: "Unavailable image" in basic_log.read_text(),
                timeout_s=30,
                interval_s=0.05,
                description="BasicSubscriber to see our image go",
            )
    finally:
        AeronJava.stop(basic)
        if rate is not None:
            AeronJava.stop(rate)
    basic_text = basic_log.read_text()
    fragments = printed_fragments(basic_text)
    assert {session for session, _, _ in fragments} == {session_id}
    assert all(n == len(text) for _, n, text in fragments)
    joined = "".join(text for _, _, text in fragments)
    assert len(joined) == len(expected_text)
    assert joined == expected_text  # every message exactly once, in order, intact
    if length == SMALL:
        assert [text for _, _, text in fragments] == [m.decode() for m in messages]
    assert f"Available image on {channel} streamId={STREAM_ID} sessionId={session_id} from 127.0.0.1:" in basic_text
    assert printed_total(rate_log.read_text()) == count
    assert_loss_was_repaired(drivers.java.aeron_dir, drivers.ours.aeron_dir)


# ---------------------------------------------------------------- Wireshark decodes our traffic


TSHARK = shutil.which("tshark")


@pytest.mark.slow
@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (apt-get install -y tshark)")
def test_wireshark_decodes_our_traffic(aeron_dir: Path, tmp_path: Path) -> None:
    """Our publisher and subscriber (one driver, 5% send loss so NAKs and retransmits occur) on a known port."""
    assert TSHARK is not None
    port = free_udp_port()
    pcap = tmp_path / "aeron.pcapng"
    capture_log = tmp_path / "tshark-capture.log"
    with capture_log.open("wb") as sink:
        capture = subprocess.Popen(
            [TSHARK, "-i", "lo", "-f", f"udp port {port}", "-w", str(pcap)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        execute_until(
            lambda: capture.poll() is not None or "Capturing on" in capture_log.read_text(),
            timeout_s=30,
            interval_s=0.05,
            description="tshark to start capturing",
        )
        if capture.poll() is not None:
            pytest.skip(f"tshark cannot capture on lo: {capture_log.read_text()[-500:]}")
        settings = {**OUR_DRIVER_SETTINGS, "send_loss_rate": LOSS_RATE, "send_fault_seed": 5}
        driver = DriverProcess.start(aeron_dir, tmp_path / "our-driver.log", settings)
        try:
            channel = udp_channel(port)
            messages = numbered_messages(SMALL, 500) + numbered_messages(LARGE, 4)
            received: list[bytes] = []
            with Aeron.connect(aeron_dir=aeron_dir) as aeron:
                subscription = aeron.add_subscription(channel, STREAM_ID)
                publication = aeron.add_publication(channel, STREAM_ID)
                assembler = FragmentAssembler(lambda payload, header: received.append(bytes(payload)))
                for message in messages:
                    execute_until(
                        partial(offered, publication, message),
                        lambda: subscription.poll(assembler, 100),
                        timeout_s=30,
                        interval_s=0.0005,
                        description="an offer",
                    )
                execute_until(
                    lambda: len(received) >= len(messages),
                    lambda: subscription.poll(assembler, 100),
                    timeout_s=30,
                    interval_s=0.001,
                    description="all messages back",
                )
                assert received == messages
                publication.close()
                time.sleep(0.5)  # the end-of-stream heartbeat and the last status messages
        finally:
            driver.stop()
        time.sleep(0.3)
    finally:
        capture.send_signal(2)  # SIGINT: tshark finishes the file
        try:
            capture.wait(10)
        except subprocess.TimeoutExpired:
            AeronJava.stop(capture)

    def fields(*names: str, display_filter: str = "") -> list[list[str]]:
        cmd = [TSHARK, "-r", str(pcap), "-d", f"udp.port=={port},aeron", "-T", "fields", "-E", "separator=|"]
        if display_filter:
            cmd += ["-Y", display_filter]
        for name in names:
            cmd += ["-e", name]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
        return [line.split("|") for line in out.splitlines()]

    frames = fields("frame.number", "_ws.col.Protocol", "_ws.col.Info")
    assert len(frames) > 100, capture_log.read_text()
    assert fields("frame.number", display_filter="_ws.malformed") == []
    assert fields("frame.number", display_filter="_ws.expert.severity == error") == []
    assert [f for f in frames if f[1] != "Aeron"] == []  # every datagram on the port decodes as Aeron
    assert fields("frame.number", display_filter="aeron.setup")
    assert fields("frame.number", display_filter="aeron.sm")
    assert fields("frame.number", display_filter="aeron.nak")
    # A datagram may hold many DATA frames: tshark joins their values with commas.
    data = fields("aeron.data.session_id", "aeron.data.stream_id", display_filter="aeron.data")
    assert data
    assert {value for row in data for value in row[0].split(",")} == {str(publication.session_id & 0xFFFF_FFFF)}
    assert {value for row in data for value in row[1].split(",")} == {str(STREAM_ID)}


def test_java_dynamic_control_publisher_to_our_subscriber_naming_its_session(
    aeron_java: AeronJava, start_drivers: StartDrivers, tmp_path: Path
) -> None:
    """Aeron 1.15.1's dynamic multi-destination control mode with our subscriber on ``control=`` that names the
    publication's session (as our end point's clients do behind a NAT): its setup-eliciting status messages for that
    session and stream, sent to the control address, make the Java publication send there."""
    drivers: Drivers = start_drivers(None)
    session = 0x1357_9BDF
    control = f"127.0.0.1:{free_udp_port()}"
    publication_channel = f"aeron:udp?control={control}|control-mode=dynamic|session-id={session}"
    received: list[str] = []
    with Aeron.connect(aeron_dir=drivers.ours.aeron_dir) as aeron:
        subscription = aeron.add_subscription(
            f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|control={control}|session-id={session}", STREAM_ID
        )
        props = sample_props(drivers.java.aeron_dir, publication_channel, **{"aeron.sample.messages": 5})
        published = aeron_java.run("io.aeron.samples.BasicPublisher", props=props, timeout_s=60)
        (tmp_path / "basic-publisher.log").write_text(published.stdout + published.stderr)
        assert published.returncode == 0, published.stdout + published.stderr
        offered = [int(i) for i in re.findall(r"Offering (\d+)/5 - yay!", published.stdout)]
        assert offered, published.stdout  # the first offers may precede the connection, the later ones cannot
        execute_until(
            lambda: len(received) >= len(offered),
            lambda: subscription.poll(lambda payload, header: received.append(bytes(payload).decode()), 10),
            timeout_s=30,
            interval_s=0.001,
            description=f"{offered} from the dynamic control BasicPublisher",
        )
        assert subscription.images == () or all(i.session_id == session for i in subscription.images)
    assert received == [f"Hello World! {i}" for i in offered]
