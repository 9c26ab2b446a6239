"""Java 1.15.1 sample clients and our client together on the real Aeron Java 1.15.1 media driver.

The rest of the client suite runs on every driver: see ``test_client_any_driver.py``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.client import Aeron
from support.aeron_java import AeronJava, JavaMediaDriver, PropValue
from support.clients import Errors, offer_all
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process]


@pytest.fixture
def aeron(java_media_driver: JavaMediaDriver) -> Iterator[Aeron]:
    client = Aeron.connect(aeron_dir=java_media_driver.aeron_dir, error_handler=Errors())
    try:
        yield client
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- Java peers


def test_our_publication_to_java_basic_subscriber(
    aeron: Aeron, aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path
) -> None:
    log = tmp_path / "basic-subscriber.log"
    props: dict[str, PropValue] = {
        "aeron.dir": str(java_media_driver.aeron_dir),
        "aeron.sample.channel": "aeron:ipc",
        "aeron.sample.streamId": 1001,
    }
    subscriber = aeron_java.start("io.aeron.samples.BasicSubscriber", props=props, output=log)
    try:
        publication = aeron.add_publication("aeron:ipc", 1001)
        execute_until(lambda: publication.is_connected, timeout_s=30, interval_s=0.01, description="Java subscriber")
        sent = [f"Hello from Python! {i}" for i in range(50)]
        offer_all(publication, [text.encode() for text in sent], lambda: time.sleep(0.001))

        def received() -> list[str]:
            return re.findall(r"<<(Hello from Python! \d+)>>", log.read_text())

        execute_until(lambda: received() == sent, timeout_s=30, interval_s=0.05, description="BasicSubscriber output")
        assert f"Message to stream 1001 from session {publication.session_id}" in log.read_text()
    finally:
        AeronJava.stop(subscriber)


def test_java_basic_publisher_to_our_subscription(
    aeron: Aeron, aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path
) -> None:
    subscription = aeron.add_subscription("aeron:ipc", 1002)
    props: dict[str, PropValue] = {
        "aeron.dir": str(java_media_driver.aeron_dir),
        "aeron.sample.channel": "aeron:ipc",
        "aeron.sample.streamId": 1002,
        "aeron.sample.messages": 3,
        # The publication stays until the test stops the publisher: with none, it closed right after its last
        # message, and on a loaded machine its image could go before our client had read it.
        "aeron.sample.lingerTimeout": 120_000,
    }
    received: list[str] = []
    proc = aeron_java.start("io.aeron.samples.BasicPublisher", props=props, output=tmp_path / "basic-publisher.log")
    try:
        execute_until(
            lambda: len(received) >= 3,
            lambda: subscription.poll(lambda p, h: received.append(bytes(p).decode()), 10),
            timeout_s=60,
            interval_s=0.01,
            description="3 messages from BasicPublisher",
        )
    finally:
        AeronJava.stop(proc)
    assert received == ["Hello World! 0", "Hello World! 1", "Hello World! 2"]
