"""Aeron Java 1.15.1 sample publishers as clients of OUR standalone driver, read by OUR Python subscriber."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.client import Aeron, FragmentAssembler, Header
from support.aeron_java import AeronJava, PropValue
from support.driver_process import DriverProcess
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.cnc_v15]


@pytest.fixture
def aeron(driver_process: DriverProcess) -> Iterator[Aeron]:
    client = Aeron.connect(aeron_dir=driver_process.aeron_dir)
    try:
        yield client
    finally:
        client.close()


def sample_props(driver: DriverProcess, channel: str, stream_id: int, messages: int) -> dict[str, PropValue]:
    return {
        "aeron.dir": str(driver.aeron_dir),
        "aeron.sample.channel": channel,
        "aeron.sample.streamId": stream_id,
        "aeron.sample.messages": messages,
        "aeron.sample.lingerTimeout": 0,
    }


def test_java_basic_publisher_to_our_subscriber(
    aeron_java: AeronJava, driver_process: DriverProcess, aeron: Aeron, tmp_path: Path
) -> None:
    subscription = aeron.add_subscription("aeron:ipc", 80)
    received: list[tuple[str, int]] = []
    log = tmp_path / "basic-publisher.log"
    proc = aeron_java.start(
        "io.aeron.samples.BasicPublisher", props=sample_props(driver_process, "aeron:ipc", 80, 3), output=log
    )
    try:
        execute_until(
            lambda: len(received) >= 3,
            lambda: subscription.poll(lambda p, h: received.append((bytes(p).decode(), h.session_id)), 10),
            timeout_s=60,
            interval_s=0.01,
            description="3 messages from BasicPublisher",
        )
        assert proc.wait(30) == 0
    finally:
        AeronJava.stop(proc)
    assert [text for text, _ in received] == ["Hello World! 0", "Hello World! 1", "Hello World! 2"]
    assert len({session for _, session in received}) == 1
    assert log.read_text().count("yay!") == 3


@pytest.mark.parametrize(
    ("length", "random_length"),
    [pytest.param(64, False, id="fixed-64"), pytest.param(4000, True, id="random-up-to-4000")],
)
def test_java_streaming_publisher_to_our_subscriber(
    aeron_java: AeronJava, driver_process: DriverProcess, aeron: Aeron, tmp_path: Path, length: int, random_length: bool
) -> None:
    """StreamingPublisher sends ``i`` as a little-endian int64 at the start of otherwise zeroed messages.

    Random lengths up to 4000 bytes exceed the 1408-byte MTU, so Java fragments
    into our driver's log and our assembler puts the messages back together.
    """
    count = 10_000
    channel = "aeron:ipc?term-length=64k"
    subscription = aeron.add_subscription(channel, 81)
    props = {
        **sample_props(driver_process, channel, 81, count),
        "aeron.sample.messageLength": length,
        "aeron.sample.randomMessageLength": random_length,
    }
    received: list[bytes] = []

    def on_message(payload: memoryview, header: Header) -> None:
        received.append(bytes(payload))

    assembler = FragmentAssembler(on_message)
    answer = tmp_path / "answer.txt"
    answer.write_text("n\n")  # "Execute again?" — no
    log = tmp_path / "streaming-publisher.log"
    with answer.open("rb") as stdin:
        proc = aeron_java.start("io.aeron.samples.StreamingPublisher", props=props, output=log, stdin=stdin)
    try:
        execute_until(
            lambda: len(received) >= count,
            lambda: subscription.poll(assembler, 256),
            timeout_s=60,
            max_iterations=10_000_000,
            interval_s=0.0001,
            description=f"{count} messages from StreamingPublisher",
        )
        assert proc.wait(30) == 0
    finally:
        AeronJava.stop(proc)
    assert len(received) == count
    for i, message in enumerate(received):
        assert struct.unpack_from("<q", message)[0] == i
        assert message[8:] == bytes(len(message) - 8)
        if random_length:
            assert 8 <= len(message) < length
        else:
            assert len(message) == length
    if random_length:
        assert max(len(m) for m in received) > 1408  # some were fragmented
    assert "Done streaming" in log.read_text()
