"""The Java 1.15.1 peer harness works: driver, AeronStat and a sample publisher/subscriber pair."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.aeron_java import (
    AeronJava,
    JavaMediaDriver,
    PeerSetupError,
    aeron_stat_snapshot,
    read_cnc_header,
    start_java_media_driver,
)
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process]


def test_java_media_driver_publishes_a_v15_cnc(java_media_driver: JavaMediaDriver) -> None:
    assert java_media_driver.process.poll() is None
    assert read_cnc_header(java_media_driver.cnc_path) == (15, java_media_driver.pid)


def test_aeron_stat_reads_the_java_driver(
    aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path
) -> None:
    header, counters = aeron_stat_snapshot(aeron_java, java_media_driver.aeron_dir, tmp_path / "aeron-stat.log")

    assert "Aeron Stat (CnC v15)" in header
    labels = [c.label for c in counters]
    assert labels[:2] == ["Bytes sent", "Bytes received"]
    assert [c.counter_id for c in counters[:25]] == list(range(25))


def test_basic_publisher_to_basic_subscriber_over_ipc(
    aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path
) -> None:
    props: dict[str, str | int] = {
        "aeron.dir": str(java_media_driver.aeron_dir),
        "aeron.sample.channel": "aeron:ipc",
        "aeron.sample.streamId": 1001,
    }
    sub_log = tmp_path / "basic-subscriber.log"
    subscriber = aeron_java.start("io.aeron.samples.BasicSubscriber", props=props, output=sub_log)
    try:
        execute_until(
            lambda: "Subscribing to aeron:ipc" in sub_log.read_text(),
            timeout_s=30.0,
            interval_s=0.05,
            description="BasicSubscriber to start",
        )
        # One message a second: 5 give the subscriber time to connect; offers made before it
        # did report "not connected" and are rightly lost, the rest must all arrive.
        published = aeron_java.run(
            "io.aeron.samples.BasicPublisher",
            props={**props, "aeron.sample.messages": 5, "aeron.sample.lingerTimeout": 0},
            timeout_s=60.0,
        )
        assert published.returncode == 0, published.stdout + published.stderr
        assert "Done sending." in published.stdout
        sent = [int(i) for i in re.findall(r"Offering (\d+)/5 - yay!", published.stdout)]
        assert sent, published.stdout

        def received() -> list[int]:
            return [int(i) for i in re.findall(r"<<Hello World! (\d+)>>", sub_log.read_text())]

        execute_until(
            lambda: received() == sent,
            timeout_s=30.0,
            interval_s=0.05,
            description=f"BasicSubscriber to print messages {sent}",
        )
        assert "Message to stream 1001 from session" in sub_log.read_text()
    finally:
        AeronJava.stop(subscriber)


def test_second_java_driver_on_an_active_directory_exits_early(
    aeron_java: AeronJava, java_media_driver: JavaMediaDriver, tmp_path: Path
) -> None:
    def start_second() -> None:
        second = start_java_media_driver(
            aeron_java, java_media_driver.aeron_dir, tmp_path / "second-driver.log", timeout_s=30
        )
        AeronJava.stop(second.process)  # reached only if it wrongly started

    with pytest.raises(PeerSetupError, match="ActiveDriverException"):
        start_second()
    assert java_media_driver.process.poll() is None
