"""Publishing DataFrame rows to a channel: batch and streaming writers, received by our own subscriber.

Spark's tasks run in its Python workers (other processes), each with its own
client of the embedded driver; the test subscribes in this process and
collects whole messages (fragments reassembled) on a polling thread.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipeline_rig import CHANNEL, ArchiveRig
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from driver.client.aeron import Aeron
from driver.client.subscription import Subscription
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.header import Header
from support.waiting import execute_until

pytestmark = pytest.mark.slow

OUT_STREAM = 61
WAIT_S = 60.0


class Collector:
    """Polls a subscription on its own thread; keeps (session id, payload) of every whole message in order."""

    def __init__(self, aeron: Aeron, channel: str, stream_id: int) -> None:
        self.subscription: Subscription = aeron.add_subscription(channel, stream_id)
        self.received: list[tuple[int, bytes]] = []
        self._stop = threading.Event()
        self._assembler = FragmentAssembler(self._on_message)
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def _on_message(self, payload: memoryview, header: Header) -> None:
        self.received.append((header.session_id, bytes(payload)))

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.subscription.poll(self._assembler, 256):
                self._stop.wait(0.0005)

    def wait_for(self, count: int) -> list[tuple[int, bytes]]:
        execute_until(
            lambda: len(self.received) >= count,
            timeout_s=WAIT_S,
            max_iterations=100_000,
            interval_s=0.01,
            description=f"{count} messages (have {len(self.received)})",
        )
        return list(self.received)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.subscription.close()


@pytest.fixture
def rig() -> Iterator[ArchiveRig]:
    archive = ArchiveRig()
    try:
        yield archive
    finally:
        archive.close()


@pytest.fixture
def collector(rig: ArchiveRig) -> Iterator[Collector]:
    assert rig.aeron is not None
    found = Collector(rig.aeron, CHANNEL, OUT_STREAM)
    try:
        yield found
    finally:
        found.close()


def _writer_options(rig: ArchiveRig) -> dict[str, str]:
    return {"aeron_dir": str(rig.aeron_dir), "channel": CHANNEL, "stream_id": str(OUT_STREAM)}


def _per_session(received: list[tuple[int, bytes]]) -> dict[int, list[bytes]]:
    sessions: dict[int, list[bytes]] = {}
    for session_id, payload in received:
        sessions.setdefault(session_id, []).append(payload)
    return sessions


def test_a_dataframe_is_published_in_order(spark: SparkSession, rig: ArchiveRig, collector: Collector) -> None:
    payloads = [b"row-%06d" % i for i in range(5000)]
    payloads[2500] = bytes(range(256)) * 20  # 5120 bytes: fragmented on the wire
    payloads[10] = b""
    df = spark.createDataFrame([(p,) for p in payloads], "payload binary").coalesce(1)
    df.write.format("endpoint-archive").options(**_writer_options(rig)).mode("append").save()
    received = collector.wait_for(len(payloads))
    assert [p for _, p in received] == payloads
    assert len({s for s, _ in received}) == 1


def test_each_partition_is_its_own_ordered_session(spark: SparkSession, rig: ArchiveRig, collector: Collector) -> None:
    count = 9000
    df = spark.range(0, count, 1, numPartitions=3).select(
        F.lpad(F.col("id").cast("string"), 8, "0").cast("binary").alias("payload"), F.col("id")
    )
    df.write.format("endpoint-archive").options(**_writer_options(rig)).mode("append").save()
    received = collector.wait_for(count)
    assert sorted(int(p) for _, p in received) == list(range(count))
    sessions = _per_session(received)
    assert len(sessions) == 3
    for values in sessions.values():
        numbers = [int(p) for p in values]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def test_null_payloads_are_skipped(spark: SparkSession, rig: ArchiveRig, collector: Collector) -> None:
    df = spark.createDataFrame([(b"a",), (None,), (b"c",)], "payload binary").coalesce(1)
    df.write.format("endpoint-archive").options(**_writer_options(rig)).mode("append").save()
    assert [p for _, p in collector.wait_for(2)] == [b"a", b"c"]


def test_a_recording_republished_by_a_streaming_query(
    spark: SparkSession, rig: ArchiveRig, collector: Collector
) -> None:
    source = rig.stream(CHANNEL, 71)
    source.publish(b"replayed-%05d" % i * (1 + i % 9) for i in range(3000))
    checkpoint = Path(tempfile.mkdtemp(prefix="endpoint-pipeline-writer-"))
    try:
        query = (
            spark.readStream.format("endpoint-archive")
            .option("recording_id", str(source.recording_id))
            .load(str(rig.archive_dir))
            .writeStream.format("endpoint-archive")
            .options(**_writer_options(rig))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(WAIT_S), "the availableNow run did not finish"
            assert query.exception() is None
        finally:
            query.stop()
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    received = collector.wait_for(len(source.payloads))
    assert sorted(p for _, p in received) == sorted(source.payloads)
    # One session per task (segment span): each is an in-order run of the recording.
    index = {payload: i for i, payload in enumerate(source.payloads)}
    for values in _per_session(received).values():
        at = [index[p] for p in values]
        assert at == list(range(at[0], at[0] + len(at)))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"channel": CHANNEL, "stream_id": "1"}, r"missing option\(s\) aeron_dir"),
        ({"aeron_dir": "/nonexistent/aeron", "channel": CHANNEL, "stream_id": "1"}, "option aeron_dir='/nonexistent"),
        ({"channel": "ipc", "stream_id": "1"}, "option channel='ipc': must be an Aeron channel URI"),
        ({"channel": CHANNEL, "stream_id": "x"}, "option stream_id='x': must be a 32-bit stream id"),
        ({"channel": CHANNEL, "stream_id": "1", "offer_timeout": "-1"}, "option offer_timeout='-1'"),
    ],
)
def test_bad_writer_options_are_clear_errors(
    spark: SparkSession, rig: ArchiveRig, options: dict[str, str], message: str
) -> None:
    if "aeron_dir" not in options and "missing" not in message:
        options = {**options, "aeron_dir": str(rig.aeron_dir)}
    df = spark.createDataFrame([(b"x",)], "payload binary")
    with pytest.raises(Exception, match=message):
        df.write.format("endpoint-archive").options(**options).mode("append").save()


def test_no_subscriber_and_no_payload_column(spark: SparkSession, rig: ArchiveRig) -> None:
    options = {**_writer_options(rig), "stream_id": "999", "connect_timeout": "0.5"}
    df = spark.createDataFrame([(b"x",)], "payload binary").coalesce(1)
    with pytest.raises(Exception, match=r"no subscriber connected to .* stream 999 within 0.5 s \(connect_timeout\)"):
        df.write.format("endpoint-archive").options(**options).mode("append").save()
    wrong = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="publishes the binary column 'payload'; the DataFrame has body"):
        wrong.write.format("endpoint-archive").options(**_writer_options(rig)).mode("append").save()
    text = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="it is string here"):
        text.write.format("endpoint-archive").options(**_writer_options(rig)).mode("append").save()
    right = spark.createDataFrame([(b"x",)], "payload binary")
    with pytest.raises(Exception, match=r"it cannot overwrite: use \.mode\(\"append\"\)"):
        right.write.format("endpoint-archive").options(**_writer_options(rig)).mode("overwrite").save()
