"""Aeron Java 1.15.1's own tools and sample clients, running against OUR driver."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from driver.command.types import CommandType
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.core.media_driver import MediaDriver
from support.aeron_java import AeronJava, aeron_stat_snapshot
from support.driver_process import DriverProcess
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.cnc_v15]


def test_aeron_stat_prints_our_counters(aeron_java: AeronJava, media_driver: MediaDriver, tmp_path: Path) -> None:
    header, counters = aeron_stat_snapshot(aeron_java, media_driver.aeron_dir, tmp_path / "stat.log")
    assert "Aeron Stat (CnC v15)" in header
    labels = {c.counter_id: c.label for c in counters}
    assert labels[0] == "Bytes sent"
    assert labels[15] == "Errors"
    assert labels[24] == "Client liveness timeouts"
    assert len(counters) >= 25


def test_error_stat_prints_our_error_log(aeron_java: AeronJava, media_driver: MediaDriver) -> None:
    ring = ManyToOneRingBuffer(media_driver.cnc.to_driver_buffer)
    assert ring.write(CommandType.ADD_PUBLICATION, b"\x00" * 20)  # truncated: the driver records an error
    assert ring.write(CommandType.ADD_PUBLICATION, b"\x00" * 20)
    result: list[str] = []

    def distinct_errors() -> bool:
        out = aeron_java.run("io.aeron.samples.ErrorStat", props={"aeron.dir": str(media_driver.aeron_dir)}).stdout
        result[:] = [out]
        return "1 distinct errors observed" in out

    execute_until(distinct_errors, timeout_s=30, interval_s=0.2, description="ErrorStat sees our error")
    out = result[0]
    assert "2 observations from" in out
    assert "MalformedCommandError" in out


@pytest.mark.slow
def test_java_publisher_to_java_subscriber_through_our_driver_process(
    aeron_java: AeronJava, driver_process: DriverProcess, tmp_path: Path
) -> None:
    props = {"aeron.dir": str(driver_process.aeron_dir), "aeron.sample.channel": "aeron:ipc"}
    sub_log = tmp_path / "sub.log"
    subscriber = aeron_java.start("io.aeron.samples.BasicSubscriber", props=props, output=sub_log)
    try:
        execute_until(lambda: "Subscribing to aeron:ipc" in sub_log.read_text(), timeout_s=30, interval_s=0.05)
        published = aeron_java.run(
            "io.aeron.samples.BasicPublisher", props={**props, "aeron.sample.messages": 3}, timeout_s=60
        ).stdout
        assert published.count("yay!") == 3
        execute_until(lambda: sub_log.read_text().count("<<Hello World!") == 3, timeout_s=30, interval_s=0.05)
        text = sub_log.read_text()
        assert "Available image on aeron:ipc streamId=10" in text
        assert re.findall(r"<<Hello World! (\d)>>", text) == ["0", "1", "2"]
        execute_until(lambda: "Unavailable image on aeron:ipc" in sub_log.read_text(), timeout_s=30, interval_s=0.05)
    finally:
        AeronJava.stop(subscriber)
    assert driver_process.process.poll() is None
