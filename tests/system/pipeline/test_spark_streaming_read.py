"""Streaming reads: following recordings while they are written, and exactly-once restarts from a checkpoint.

Each test records with its own real archive; waits are bounded (count and
time) and nothing asserts on timing.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipeline_rig import CHANNEL, ArchiveRig, RecordedStream
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from support.waiting import execute_until

pytestmark = pytest.mark.slow

WAIT_S = 90.0


@pytest.fixture
def rig() -> Iterator[ArchiveRig]:
    archive = ArchiveRig()
    try:
        yield archive
    finally:
        archive.close()


@pytest.fixture
def work_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="endpoint-pipeline-stream-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _payloads(prefix: str, count: int, fragmented_at: int | None = None) -> list[bytes]:
    payloads = [f"{prefix}-{i:05d}".encode() * (1 + i % 5) for i in range(count)]
    if fragmented_at is not None:
        payloads[fragmented_at] = random.Random(fragmented_at).randbytes(4000)
    return payloads


def _expected(*streams: RecordedStream) -> list[tuple[int, int, bytes]]:
    return sorted(
        (s.recording_id, position, payload)
        for s in streams
        for position, payload in zip(s.positions, s.payloads, strict=True)
    )


def _memory_rows(spark: SparkSession, table: str) -> list[tuple[int, int, bytes]]:
    rows = spark.sql(f"select recording_id, position, payload from {table}").collect()
    return sorted((r.recording_id, r.position, bytes(r.payload)) for r in rows)


def _wait_rows(spark: SparkSession, table: str, count: int, query: StreamingQuery) -> None:
    def enough() -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        return bool(spark.sql(f"select count(*) from {table}").collect()[0][0] >= count)

    execute_until(
        enough, timeout_s=WAIT_S, max_iterations=2_000, interval_s=0.1, description=f"{count} rows in {table}"
    )


def test_a_recording_being_written_is_followed(spark: SparkSession, rig: ArchiveRig) -> None:
    stream = rig.stream(CHANNEL, 21)
    stream.publish(_payloads("first", 500))
    query = (
        spark.readStream.format("endpoint-archive")
        .option("stream_id", "21")
        .load(str(rig.archive_dir))
        .writeStream.format("memory")
        .queryName("followed")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait_rows(spark, "followed", 500, query)
        stream.publish(_payloads("second", 1500, fragmented_at=700))  # several more segments, one fragmented
        _wait_rows(spark, "followed", 2000, query)
        newcomer = rig.stream(CHANNEL, 21)  # a new recording appears while the query runs
        newcomer.publish(_payloads("new", 300))
        _wait_rows(spark, "followed", 2300, query)
        query.processAllAvailable()
        assert _memory_rows(spark, "followed") == _expected(stream, newcomer)
        offsets = json.loads(query.lastProgress["sources"][0]["endOffset"])  # the offset JSON, as checkpointed
        assert offsets == {
            str(stream.recording_id): stream.descriptor().end_position,
            str(newcomer.recording_id): newcomer.descriptor().end_position,
        }
    finally:
        query.stop()


def _parquet_query(
    spark: SparkSession, archive_dir: Path, out: Path, checkpoint: Path, *, available_now: bool
) -> StreamingQuery:
    writer = (
        spark.readStream.format("endpoint-archive")
        .load(str(archive_dir))
        .select("recording_id", "position", "payload")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="200 milliseconds").start()


def _parquet_rows(spark: SparkSession, out: Path) -> list[tuple[int, int, bytes]]:
    rows = spark.read.parquet(str(out)).collect()
    return sorted((r.recording_id, r.position, bytes(r.payload)) for r in rows)


def _wait_parquet(spark: SparkSession, out: Path, count: int, query: StreamingQuery) -> None:
    def enough() -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        if not (out / "_spark_metadata").is_dir():
            return False
        return spark.read.parquet(str(out)).count() >= count

    execute_until(enough, timeout_s=WAIT_S, max_iterations=1_000, interval_s=0.2, description=f"{count} rows in {out}")


def test_restart_from_the_checkpoint_has_no_duplicates_and_no_gaps(
    spark: SparkSession, rig: ArchiveRig, work_dir: Path
) -> None:
    out, checkpoint = work_dir / "out", work_dir / "checkpoint"
    first = rig.stream(CHANNEL, 31)
    first.publish(_payloads("one", 1200, fragmented_at=100))
    query = _parquet_query(spark, rig.archive_dir, out, checkpoint, available_now=False)
    try:
        _wait_parquet(spark, out, 1200, query)
    finally:
        query.stop()
    seen = _parquet_rows(spark, out)
    assert seen == _expected(first)

    first.publish(_payloads("two", 900, fragmented_at=450))  # while nothing reads
    second = rig.stream(CHANNEL, 32)
    second.publish(_payloads("other", 250))
    query = _parquet_query(spark, rig.archive_dir, out, checkpoint, available_now=False)
    try:
        _wait_parquet(spark, out, 1200 + 900 + 250, query)
        query.processAllAvailable()
    finally:
        query.stop()
    rows = _parquet_rows(spark, out)
    assert len(rows) == len(set(rows))
    assert rows == _expected(first, second)


def test_available_now_runs_pick_up_where_the_last_one_stopped(
    spark: SparkSession, rig: ArchiveRig, work_dir: Path
) -> None:
    out, checkpoint = work_dir / "out", work_dir / "checkpoint"
    stream = rig.stream(CHANNEL, 41)
    total = 0
    for run, count in enumerate((300, 0, 1000, 1)):
        if count:
            stream.publish(_payloads(f"run{run}", count, fragmented_at=count // 2 if count > 10 else None))
        total += count
        query = _parquet_query(spark, rig.archive_dir, out, checkpoint, available_now=True)
        try:
            assert query.awaitTermination(WAIT_S), "an availableNow run did not finish"
            assert query.exception() is None
        finally:
            query.stop()
        rows = _parquet_rows(spark, out)
        assert len(rows) == total
        assert rows == _expected(stream)
