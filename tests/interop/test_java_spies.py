"""Spy subscriptions across implementations: Java 1.15.1's client spying on our driver, ours on Java's driver.

Java's driver is also the reference for what a spy alone does to a publication: without
``aeron.spies.simulate.connection`` it stays unconnected, with it it connects; ours must agree.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.client import NOT_CONNECTED, Aeron, FragmentAssembler, Subscription
from driver.cnc import CncGeneration
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from support.aeron_java import AeronJava, JavaMediaDriver, PropValue, aeron_stat_snapshot, start_java_media_driver
from support.clients import Errors, offer_all, wait_for_image
from support.ports import free_udp_port
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process]

STREAM_ID = 1201


def _channel() -> str:
    return f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"


def _setups_sent_to(port: int, count: int) -> None:
    """Listen where the publication sends, never answering, until ``count`` SETUPs came (100 ms apart)."""
    seen = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.settimeout(5.0)
        for _ in range(10_000):
            data = sock.recv(2048)
            if len(data) >= 8 and int.from_bytes(data[6:8], "little") == 0x05:
                seen += 1
                if seen == count:
                    return
    raise AssertionError(f"{seen} SETUPs in 10,000 datagrams")


@pytest.fixture
def our_driver(aeron_dir: Path) -> Iterator[MediaDriver]:
    """Our driver speaking CnC v15 (what Java 1.15.1 clients accept), spies simulating a connection."""
    ctx = DriverContext.from_env(
        {},
        aeron_dir=aeron_dir,
        threading_mode="SHARED",
        cnc_generation=CncGeneration.V15,
        timer_interval_ns=50_000_000,
        publication_linger_timeout_ns=500_000_000,
        spies_simulate_connection=True,
    )
    driver = MediaDriver.launch(ctx)
    try:
        yield driver
    finally:
        driver.close()


def test_java_basic_subscriber_spies_on_our_drivers_udp_publication(
    aeron_java: AeronJava, our_driver: MediaDriver, tmp_path: Path
) -> None:
    channel = _channel()
    spy_channel = f"aeron-spy:{channel}"
    log = tmp_path / "spy-subscriber.log"
    props: dict[str, PropValue] = {
        "aeron.dir": str(our_driver.aeron_dir),
        "aeron.sample.channel": spy_channel,
        "aeron.sample.streamId": STREAM_ID,
    }
    with Aeron.connect(aeron_dir=our_driver.aeron_dir, error_handler=Errors()) as aeron:
        publication = aeron.add_exclusive_publication(channel, STREAM_ID)
        subscriber = aeron_java.start("io.aeron.samples.BasicSubscriber", props=props, output=log)
        try:
            execute_until(
                lambda: "Available image on" in log.read_text(),
                timeout_s=60,
                interval_s=0.05,
                description="the Java spy's image",
            )
            text = log.read_text()
            assert f"Subscribing to {spy_channel} on stream Id {STREAM_ID}" in text
            assert f"streamId={STREAM_ID} sessionId={publication.session_id} from aeron:ipc" in text
            execute_until(lambda: publication.is_connected, timeout_s=10, description="connected by the Java spy")
            # BasicSubscriber prints each fragment as it comes (no reassembly): messages within one MTU
            sent = [f"spied {i} " + "x" * (i % 4) * 300 for i in range(200)]
            offer_all(publication, [s.encode() for s in sent], lambda: time.sleep(0.001))

            def received() -> list[str]:
                return re.findall(r"<<(spied \d+ x*)>>", log.read_text())

            execute_until(lambda: received() == sent, timeout_s=60, interval_s=0.1, description="all spied, in order")
            # Java's AeronStat shows the spy's position under the label Aeron gives it.
            _, counters = aeron_stat_snapshot(aeron_java, our_driver.aeron_dir, tmp_path / "stat.log")
            spies = [c for c in counters if c.label.startswith("sub-pos: ") and spy_channel in c.label]
            assert len(spies) == 1
            assert re.fullmatch(
                rf"sub-pos: \d+ {publication.session_id} {STREAM_ID} {re.escape(spy_channel)} @0", spies[0].label
            )
        finally:
            AeronJava.stop(subscriber)
        # The Java client is gone: its spy is freed and the publication, spied by nobody, is unconnected.
        execute_until(lambda: not publication.is_connected, timeout_s=30, description="no spy left")
        assert publication.offer(b"after") == NOT_CONNECTED


@pytest.mark.parametrize("simulate", [True, False])
def test_our_spy_on_the_java_driver(aeron_java: AeronJava, aeron_dir: Path, tmp_path: Path, simulate: bool) -> None:
    java: JavaMediaDriver = start_java_media_driver(
        aeron_java,
        aeron_dir,
        tmp_path / "java-driver.log",
        props={"aeron.spies.simulate.connection": simulate, "aeron.term.buffer.length": 64 * 1024},
    )
    try:
        with Aeron.connect(aeron_dir=aeron_dir, error_handler=Errors()) as aeron:
            port = free_udp_port()
            channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
            publication = aeron.add_exclusive_publication(channel, STREAM_ID)
            gone: list[object] = []
            spy = aeron.add_subscription(f"aeron-spy:{channel}", STREAM_ID, unavailable_image_handler=gone.append)
            receiver: Subscription | None = None
            (image,) = wait_for_image(spy, timeout_s=30)
            assert image.source_identity == "aeron:ipc"
            assert image.session_id == publication.session_id
            if not simulate:
                # Java's driver too: a spy alone does not connect a publication.
                _setups_sent_to(port, 4)
                assert not publication.is_connected
                assert publication.offer(b"nobody") == NOT_CONNECTED
                receiver = aeron.add_subscription(channel, STREAM_ID)
                wait_for_image(receiver, timeout_s=30)
            execute_until(lambda: publication.is_connected, timeout_s=30, description="connected")
            received: list[bytes] = []
            assembler = FragmentAssembler(lambda buffer, header: received.append(bytes(buffer)))
            messages = [i.to_bytes(4, "little") * (1 + (i % 5) * 200) for i in range(2000)]  # rotates 64 KiB terms

            def drain() -> None:
                spy.poll(assembler, 100)
                if receiver is not None:
                    receiver.poll(lambda buffer, header: None, 100)

            offer_all(publication, messages, drain)
            execute_until(
                lambda: len(received) >= len(messages),
                drain,
                timeout_s=60,
                max_iterations=10_000_000,
                interval_s=0.0001,
            )
            assert received == messages
            publication.close()
            execute_until(lambda: gone, drain, timeout_s=30, description="the spy's image gone with the publication")
            assert spy.images == ()
    finally:
        AeronJava.stop(java.process)
