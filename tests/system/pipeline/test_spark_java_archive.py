"""Spark over an archive directory written by Aeron Java 1.15.1's ArchivingMediaDriver, as existing Aeron users have.

Two recordings are made by RecordedBasicPublisher (recorded LOCAL through a spy, as Aeron's sample does); one is
read while Java's archive still records it (its progress comes from the ``rec-pos`` counter), then both, stopped,
are aggregated in batch, with the position pushed down, and read once more as a stream to the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
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


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run_example(tmp_path: Path, *args: str, timeout_s: float = 240.0) -> str:
    """``examples/spark_java_archive.py`` to the end, in its own session (killed by its group id if it overstays)."""
    output = tmp_path / f"example-{len(list(tmp_path.glob('example-*')))}.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "spark_java_archive.py"), *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            code = process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
            pytest.fail(f"the example still runs after {timeout_s} s:\n{output.read_text(errors='replace')[-3000:]}")
    text = output.read_text(errors="replace")
    assert code == 0, text[-3000:]
    return text


@pytest.mark.timeout(900)
def test_example_aggregates_and_streams_exactly_once_across_restarts_over_javas_archive(
    spark: SparkSession, aeron_java: AeronJava, java_archive: JavaArchive, tmp_path: Path
) -> None:
    """The example on a directory Java's archive writes: the batch summary, then a checkpointed stream that a second
    run (a new Spark application, same checkpoint) continues with exactly the messages recorded in between."""
    archive_dir = str(java_archive.archive_dir)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream_args = ["--stream", str(out), "--checkpoint", str(checkpoint)]
    first_id, _ = record_with_java_publisher(aeron_java, java_archive, stream_id=1001, messages=3)

    text = run_example(tmp_path, archive_dir, *stream_args)
    assert re.search(
        rf"recording {first_id} stream 1001 aeron:udp\S+: 3 messages, 42 payload bytes, last position 128", text
    ), text
    assert "batch: 3 messages" in text, text
    assert f"stream: 3 new messages this run, 3 in {out}" in text, text

    second_id, _ = record_with_java_publisher(aeron_java, java_archive, stream_id=1002, messages=2)
    text = run_example(tmp_path, archive_dir, "--stream-id", "1002", *stream_args)
    assert re.search(
        rf"recording {second_id} stream 1002 aeron:udp\S+: 2 messages, 28 payload bytes, last position 64", text
    ), text
    assert "batch: 2 messages" in text, text  # the stream id pushed down: only the second recording
    assert f"stream: 2 new messages this run, 5 in {out}" in text, text

    streamed = [(r.recording_id, r.position, bytes(r.payload)) for r in spark.read.parquet(str(out)).collect()]
    assert sorted(streamed) == sorted(
        [(first_id, 64 * i, f"Hello World! {i}".encode()) for i in range(3)]
        + [(second_id, 64 * i, f"Hello World! {i}".encode()) for i in range(2)]
    )

    # Nothing new recorded: a third run adds nothing.
    text = run_example(tmp_path, archive_dir, *stream_args)
    assert f"stream: 0 new messages this run, 5 in {out}" in text, text
