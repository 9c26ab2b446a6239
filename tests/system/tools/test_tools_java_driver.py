"""``stat``, ``errors``, ``loss`` (and ``streams``, ``driver``) on a REAL Aeron Java 1.15.1 driver's directory,
compared with what Java's own AeronStat, ErrorStat, LossStat and StreamStat print for the same directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.client import Aeron
from driver.errors import RegistrationError
from driver.tools import exporter, families
from driver.tools.stat import CounterSource
from support.aeron_java import AeronJava, JavaMediaDriver, aeron_stat_snapshot, start_java_media_driver
from support.clients import offer_all, wait_for_image
from support.ports import free_udp_port
from support.promtool import promtool_check_metrics
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process]


def tools(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "driver.tools", *args], capture_output=True, text=True, timeout=60, check=False
    )


def java_tool(peer: AeronJava, cls: str, aeron_dir: Path) -> str:
    done = peer.run(cls, props={"aeron.dir": str(aeron_dir)}, timeout_s=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def aeron(java_media_driver: JavaMediaDriver) -> Iterator[Aeron]:
    client = Aeron.connect(aeron_dir=java_media_driver.aeron_dir)
    try:
        yield client
    finally:
        client.close()


def _settled_stat(aeron_dir: Path) -> list[tuple[int, int, str]]:
    """(id, value, label) of our ``stat --format aeronstat`` once two readings in a row agree (heartbeats aside)."""

    def read() -> list[tuple[int, int, str]]:
        done = tools("stat", "-d", str(aeron_dir), "--once", "--format", "aeronstat")
        assert done.returncode == 0, done.stderr
        rows = []
        for line in done.stdout.splitlines()[2:-1]:
            head, _, label = line.partition(" - ")
            counter_id, _, value = head.partition(":")
            rows.append((int(counter_id), int(value.replace(",", "")), label))
        return rows

    previous: list[list[tuple[int, int, str]]] = [read()]

    def stable() -> list[tuple[int, int, str]] | None:
        current = read()
        same = _without_heartbeats(current) == _without_heartbeats(previous[0])
        previous[0] = current
        return current if same else None

    # Java samples pub-pos on its conductor timer, so "settled" means unchanged across a whole second.
    return execute_until(stable, timeout_s=30, interval_s=1.0, description="settled counters")


def _without_heartbeats(rows: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    return [(i, 0 if label.startswith("client-heartbeat") else v, label) for i, v, label in rows]


def test_stat_matches_aeron_stat(
    aeron_java: AeronJava, java_media_driver: JavaMediaDriver, aeron: Aeron, tmp_path: Path
) -> None:
    subscription = aeron.add_subscription("aeron:ipc", 7)
    publication = aeron.add_publication("aeron:ipc", 7)
    wait_for_image(subscription)
    offer_all(publication, [b"counted by both tools"] * 100, lambda: subscription.poll(lambda p, h: None, 10))
    # Compare only a reading of Java's that sits between two equal readings of ours, so a value
    # that moved while the JVM started (the conductor samples pub-pos on a timer) cannot fail it.
    for attempt in range(5):
        ours = _settled_stat(java_media_driver.aeron_dir)
        header, java = aeron_stat_snapshot(
            aeron_java, java_media_driver.aeron_dir, tmp_path / f"aeron-stat-{attempt}.log"
        )
        if _without_heartbeats(_settled_stat(java_media_driver.aeron_dir)) == _without_heartbeats(ours):
            break
    assert "Aeron Stat (CnC v15)" in header
    assert [(c.counter_id, c.label) for c in java] == [(i, label) for i, _, label in ours]
    assert _without_heartbeats([(c.counter_id, c.value, c.label) for c in java]) == _without_heartbeats(ours)
    labels = [label for _, _, label in ours]
    assert any(label.startswith("sub-pos: ") and label.endswith(" 7 aeron:ipc @0") for label in labels)
    # The table and JSON carry the same counters, with their types.
    doc = json.loads(tools("stat", "-d", str(java_media_driver.aeron_dir), "--json").stdout)
    assert [c["id"] for c in doc["counters"]] == [i for i, _, _ in ours]
    assert {c["type"] for c in doc["counters"]} >= {"system", "client-heartbeat", "pub-lmt", "sub-pos"}


def test_errors_match_error_stat(aeron_java: AeronJava, java_media_driver: JavaMediaDriver, aeron: Aeron) -> None:
    for channel in ("aeron:udp?endpoint=localhost:notaport", "aeron:udp?endpoint=localhost:notaport", "aeron:bogus"):
        with pytest.raises(RegistrationError):
            aeron.add_publication(channel, 1)

    def ours() -> str:
        done = tools("errors", "-d", str(java_media_driver.aeron_dir))
        assert done.returncode == 0, done.stderr
        return done.stdout if "2 distinct errors observed." in done.stdout else ""

    text = execute_until(ours, timeout_s=30, interval_s=0.2, description="2 distinct errors in Java's log")
    java = java_tool(aeron_java, "io.aeron.samples.ErrorStat", java_media_driver.aeron_dir)
    first, _, body = java.partition("\n")
    assert first.startswith("Command `n Control file ")
    assert text == body
    assert text.startswith("***\n2 observations from ")
    assert "\tat io.aeron.driver." in text  # Java's stack trace, byte for byte


def test_streams_match_stream_stat(aeron_java: AeronJava, java_media_driver: JavaMediaDriver, aeron: Aeron) -> None:
    subscription = aeron.add_subscription("aeron:ipc", 8)
    publication = aeron.add_publication("aeron:ipc", 8)
    wait_for_image(subscription)
    offer_all(publication, [b"x" * 64] * 50, lambda: subscription.poll(lambda p, h: None, 10))
    position = publication.position

    def ours() -> list[str]:
        lines = tools("streams", "-d", str(java_media_driver.aeron_dir), "--format", "streamstat").stdout.splitlines()
        return (
            lines
            if any(f"pub-pos (sample):{publication.registration_id}:{position} " in line for line in lines)
            else []
        )

    lines = execute_until(ours, timeout_s=30, interval_s=0.2, description="Java's pub-pos sample to catch up")
    java = java_tool(aeron_java, "io.aeron.samples.StreamStat", java_media_driver.aeron_dir)
    assert sorted(lines) == sorted(java.splitlines()[1:])  # Java orders streams by hash


def test_driver_health_of_a_java_driver(java_media_driver: JavaMediaDriver, aeron: Aeron) -> None:
    aeron.add_subscription("aeron:ipc", 9)  # 1.15.1 counts a client (allocates its heartbeat) at its first command
    done = tools("driver", "-d", str(java_media_driver.aeron_dir), "--json")
    assert done.returncode == 0, done.stdout
    status = json.loads(done.stdout)
    assert status["pid"] == java_media_driver.pid
    assert status["cnc_version"] == 15
    assert status["client_count"] == 1


# ------------------------------------------------------------------------------------------------ loss


LOSSY_DRIVER_PROPS = {
    # 1.15.1's debug receive endpoint drops received DATA frames at this rate, so the receiver NAKs and
    # records the gaps in loss-report.dat — real loss, recorded by Java's own LossReport.
    "aeron.ReceiveChannelEndpoint.supplier": "io.aeron.driver.ext.DebugReceiveChannelEndpointSupplier",
    "aeron.debug.receive.data.loss.rate": "0.1",
    "aeron.debug.receive.data.loss.seed": "7",
}


@pytest.fixture
def lossy_java_driver(aeron_java: AeronJava, aeron_dir: Path, tmp_path: Path) -> Iterator[JavaMediaDriver]:
    driver = start_java_media_driver(aeron_java, aeron_dir, tmp_path / "lossy-driver.log", props=LOSSY_DRIVER_PROPS)
    try:
        yield driver
    finally:
        AeronJava.stop(driver.process)


@pytest.mark.slow
def test_loss_matches_loss_stat(aeron_java: AeronJava, lossy_java_driver: JavaMediaDriver, tmp_path: Path) -> None:
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    sample = {
        "aeron.dir": str(lossy_java_driver.aeron_dir),
        "aeron.sample.channel": channel,
        "aeron.sample.streamId": 10,
    }
    subscriber = aeron_java.start("io.aeron.samples.RateSubscriber", props=sample, output=tmp_path / "subscriber.log")
    try:
        execute_until(
            lambda: "Subscribing to" in (tmp_path / "subscriber.log").read_text(errors="replace"),
            timeout_s=30,
            interval_s=0.1,
            description="RateSubscriber to start",
        )
        time.sleep(0.5)  # let the subscription reach the driver before the publisher's SETUP does
        published = aeron_java.run(
            "io.aeron.samples.StreamingPublisher",
            props={
                **sample,
                "aeron.sample.messages": 3000,
                "aeron.sample.messageLength": 256,
                "aeron.sample.lingerTimeout": 1000,
            },
            timeout_s=120,
            input_text="n\n",  # "Execute again?"
        )
        assert published.returncode == 0, published.stderr
        execute_until(
            lambda: "totals 3000 messages" in (tmp_path / "subscriber.log").read_text(errors="replace"),
            timeout_s=60,
            interval_s=0.2,
            description="every message received despite the loss",
        )
    finally:
        AeronJava.stop(subscriber)
    ours = tools("loss", "-d", str(lossy_java_driver.aeron_dir))
    assert ours.returncode == 0, ours.stderr
    java = java_tool(aeron_java, "io.aeron.samples.LossStat", lossy_java_driver.aeron_dir)
    assert ours.stdout == java
    lines = ours.stdout.splitlines()
    assert lines[-1] == "1 entries read"
    count, lost, *_rest = lines[1].split(",")
    assert int(count) > 0
    assert int(lost) > 0
    assert lines[1].endswith(f",10,{channel},/127.0.0.1:" + lines[1].rsplit(":", 1)[1])
    entries = json.loads(tools("loss", "-d", str(lossy_java_driver.aeron_dir), "--json").stdout)["entries"]
    assert entries[0]["observation_count"] == int(count)


def test_exporter_classifies_a_java_driver(java_media_driver: JavaMediaDriver, aeron: Aeron) -> None:
    """Every counter of Aeron Java's driver lands in a named family, and promtool accepts the exposition."""
    channel = f"aeron:udp?endpoint=localhost:{free_udp_port()}"
    subscription = aeron.add_subscription(channel, 8)
    publication = aeron.add_publication(channel, 8)
    wait_for_image(subscription)
    offer_all(publication, [b"exported"] * 50, lambda: subscription.poll(lambda p, h: None, 10))
    source = CounterSource(java_media_driver.aeron_dir)
    try:
        snapshot = source.snapshot()
    finally:
        source.close()
    unclassified = [
        c for c in snapshot.counters if families.classify(c)[0] in (families.UNCLASSIFIED, families.UNCLASSIFIED_SYSTEM)
    ]
    assert not unclassified
    text = exporter.render_metrics(java_media_driver.aeron_dir, snapshot, None, 0, 10_000, openmetrics=False)
    for name in (
        "aeron_driver_sent_bytes_total",
        "aeron_sender_position_bytes",
        "aeron_receiver_high_water_mark_bytes",
    ):
        assert any(line.startswith(name) for line in text.splitlines()), name
    promtool_check_metrics(text)
