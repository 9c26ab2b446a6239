"""Spark over an archive directory written by Aeron Java 1.15.1's ArchivingMediaDriver, as existing Aeron users have.

Two recordings are made by RecordedBasicPublisher (recorded LOCAL through a spy, as Aeron's sample does); one is
read while Java's archive still records it (its progress comes from the ``rec-pos`` counter), then both, stopped,
are aggregated in batch, with the position pushed down, and read once more as a stream to the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from support.aeron_java import AeronJava
from support.java_archive import (
    RECORDED_BASIC_PUBLISHER_CLASS,
    JavaArchive,
    free_udp_port,
    java_archive,
    record_with_java_publisher,
)
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.slow]

__all__ = ["java_archive"]  # the fixture, imported for pytest


def test_spark_aggregates_recordings_javas_archive_made(
    spark: SparkSession, aeron_java: AeronJava, java_archive: JavaArchive, tmp_path: Path
) -> None:
    archive_dir = str(java_archive.archive_dir)
    first_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    first_id, _ = record_with_java_publisher(
        aeron_java, java_archive, channel=first_channel, stream_id=1001, messages=3
    )

    # The second is read while Java's archive records it: Spark sees what the rec-pos counter says is recorded.
    second_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    props = java_archive.client_props(
        **{"aeron.sample.channel": second_channel, "aeron.sample.streamId": 1002, "aeron.sample.messages": 4}
    )
    publisher = aeron_java.start(RECORDED_BASIC_PUBLISHER_CLASS, props=props, output=tmp_path / "second.log")
    try:
        live = execute_until(
            lambda: spark.read.format("endpoint-archive").option("stream_id", "1002").load(archive_dir).count(),
            timeout_s=60,
            interval_s=0.2,
            description="rows of the live Java recording",
        )
        assert 1 <= live <= 4
        assert publisher.wait(timeout=60) == 0
    finally:
        AeronJava.stop(publisher)
    assert java_archive.stop() == 0  # what existing users have: an archive directory, no archive running

    df = spark.read.format("endpoint-archive").load(archive_dir)
    per_recording = {
        r.recording_id: (r.stream_id, r.channel, r.messages, r.payload_bytes, r.last_position)
        for r in df.groupBy("recording_id", "stream_id", "channel")
        .agg(
            F.count("*").alias("messages"),
            F.sum(F.length("payload")).alias("payload_bytes"),
            F.max("position").alias("last_position"),
        )
        .collect()
    }
    second_id = 1 - first_id
    assert per_recording == {
        first_id: (1001, first_channel, 3, 3 * 14, 2 * 64),
        second_id: (1002, second_channel, 4, 4 * 14, 3 * 64),
    }
    payloads = [bytes(r.payload) for r in df.filter(F.col("stream_id") == 1002).orderBy("position").collect()]
    assert payloads == [f"Hello World! {i}".encode() for i in range(4)]
    # Position push-down works on Aeron's recordings as on ours.
    tail = df.filter((F.col("recording_id") == first_id) & (F.col("position") >= 64)).orderBy("position").collect()
    assert [(r.position, bytes(r.payload)) for r in tail] == [(64, b"Hello World! 1"), (128, b"Hello World! 2")]

    # A stream over the same directory reads everything once, to the end.
    out = tmp_path / "stream-out"
    query = (
        spark.readStream.format("endpoint-archive")
        .load(archive_dir)
        .select("recording_id", "position", "payload")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    streamed = spark.read.parquet(str(out))
    assert sorted((r.recording_id, r.position) for r in streamed.collect()) == sorted(
        [(first_id, 64 * i) for i in range(3)] + [(second_id, 64 * i) for i in range(4)]
    )
