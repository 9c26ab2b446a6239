"""Batch reads of real recordings through Spark: exact rows, partitions per segment span, pushdown, decoding.

The recordings are made once for the module by a real archive over IPC
(64 KiB terms and segments, so a few thousand messages span many segments):
one stopped recording with a zero-length and a fragmented message, one still
active, one that began mid-term (past its first term), and one of end point messages.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from pipeline_messages import Chat, Move, serialization
from pipeline_rig import CHANNEL, SEGMENT_LENGTH, ArchiveRig, RecordedStream
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from driver.archive.segments import segment_spans

pytestmark = pytest.mark.slow

TERM = 64 * 1024


@dataclass
class Recorded:
    rig: ArchiveRig
    stopped: RecordedStream
    active: RecordedStream
    late: RecordedStream
    messages: RecordedStream
    fragmented_index: int

    @property
    def archive_dir(self) -> str:
        return str(self.rig.archive_dir)

    def all(self) -> list[RecordedStream]:
        return [self.stopped, self.active, self.late, self.messages]


def _payload(i: int) -> bytes:
    return f"A{i:05d}".encode() * (1 + i % 7)


MESSAGE_OBJECTS: list[object] = [
    *(Move(i, i * 0.5, -float(i)) for i in range(40)),
    Chat("ann", "hello", b"\x00\x01\x02"),
    {"plain": [1, 2, 3]},
    7,
    "text",
]
GARBAGE = [b"\xc1\xc1\xc1", b"\x92\x01"]  # 0xc1 is never used by msgpack; the second is a truncated array


@pytest.fixture(scope="module")
def recorded() -> Iterator[Recorded]:
    rig = ArchiveRig()
    try:
        stopped = rig.stream(CHANNEL, 7)
        payloads = [_payload(i) for i in range(3000)]
        payloads[10] = b""
        fragmented_index = 1500
        payloads[fragmented_index] = random.Random(1500).randbytes(5000)  # > mtu - 32: four fragments
        stopped.publish(payloads)
        rig.stop_recording(CHANNEL, 7)
        stopped.close()

        active = rig.stream(CHANNEL, 8)
        active.publish(f"active-{i}".encode() for i in range(200))

        late = _late_start(rig)

        messages = rig.stream(CHANNEL, 11)
        ser = serialization()
        messages.publish([ser.encode(m) for m in MESSAGE_OBJECTS] + GARBAGE + [ser.encode(Move(99, math.nan, 1.0))])
        yield Recorded(rig, stopped, active, late, messages, fragmented_index)
    finally:
        rig.close()


def _late_start(rig: ArchiveRig) -> RecordedStream:
    """A recording that starts mid-term, past its first term: the publication's log begins at term offset 6400.

    (Joining a subscriber mid-stream would do too, but where the driver joins it
    depends on when it last looked at the other subscribers: racy for a test.)
    """
    assert rig.archive is not None
    assert rig.aeron is not None
    rig.archive.start_recording(CHANNEL, 9)
    publication = rig.aeron.add_exclusive_publication(f"{CHANNEL}|init-term-id=100|term-id=101|term-offset=6400", 9)
    stream = RecordedStream(rig, publication)
    assert stream.start_position == TERM + 6400
    stream.publish(b"late-%d" % i for i in range(1000))  # on into the next segment
    return stream


def _read(spark: SparkSession, recorded: Recorded, **options: object) -> DataFrame:
    reader = spark.read.format("endpoint-archive")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(recorded.archive_dir)


def _spans(stream: RecordedStream, low: int = 0, high: int = 1 << 62) -> list[tuple[int, int, int]]:
    end = stream.descriptor().end_position
    start = stream.start_position
    return list(segment_spans(start, max(low, start), min(high, end), TERM, SEGMENT_LENGTH))


def _plan(df: DataFrame) -> str:
    """The executed physical plan as text (a Filter node reads ``Filter (<condition>)``)."""
    return str(df._jdf.queryExecution().executedPlan().toString())


def _by_position(df: DataFrame) -> list[tuple[int, bytes]]:
    return [(r.position, bytes(r.payload)) for r in df.orderBy("position").select("position", "payload").collect()]


def test_every_message_of_a_recording_is_one_row_with_its_header(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.stopped
    descriptor = stream.descriptor()
    assert not descriptor.is_active
    rows = _read(spark, recorded).filter(F.col("recording_id") == stream.recording_id).orderBy("position").collect()
    assert [bytes(r.payload) for r in rows] == stream.payloads
    assert [r.position for r in rows] == stream.positions
    assert rows[0].position == descriptor.start_position == 0
    assert {r.session_id for r in rows} == {stream.session_id}
    assert {r.stream_id for r in rows} == {7}
    assert {r.channel for r in rows} == {CHANNEL}
    assert {r.flags for r in rows} == {0xC0}
    assert {r.reserved_value for r in rows} == {0}
    for r in rows:
        assert r.position == ((r.term_id - descriptor.initial_term_id) * TERM) + r.term_offset
    fragmented = rows[recorded.fragmented_index]
    assert len(fragmented.payload) == 5000
    assert bytes(rows[10].payload) == b""


def test_all_recordings_in_one_read(spark: SparkSession, recorded: Recorded) -> None:
    df = _read(spark, recorded)
    counts = {r.recording_id: r["count"] for r in df.groupBy("recording_id").count().collect()}
    assert counts == {s.recording_id: len(s.payloads) for s in recorded.all()}
    assert df.rdd.getNumPartitions() == sum(len(_spans(s)) for s in recorded.all())


def test_recording_id_pushdown_prunes_partitions(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.stopped
    assert len(_spans(stream)) >= 4  # the recording spans several segments
    df = _read(spark, recorded).filter(F.col("recording_id") == stream.recording_id)
    assert df.rdd.getNumPartitions() == len(_spans(stream))
    per_partition = df.select(F.spark_partition_id().alias("p"), "recording_id").distinct().collect()
    assert {r.recording_id for r in per_partition} == {stream.recording_id}
    # Pushed down: no Filter left in the plan. A filter the source cannot take stays with Spark.
    assert "Filter (" not in _plan(df)
    other = _read(spark, recorded).filter(F.length("payload") > 100)
    assert "Filter (" in _plan(other)
    assert other.rdd.getNumPartitions() == sum(len(_spans(s)) for s in recorded.all())
    assert other.count() == 1  # the fragmented message


def test_stream_id_in_and_recording_id_in(spark: SparkSession, recorded: Recorded) -> None:
    df = _read(spark, recorded).filter(F.col("stream_id").isin(9, 11))
    assert df.rdd.getNumPartitions() == len(_spans(recorded.late)) + len(_spans(recorded.messages))
    assert {r.recording_id for r in df.select("recording_id").distinct().collect()} == {
        recorded.late.recording_id,
        recorded.messages.recording_id,
    }
    ids = (recorded.active.recording_id, recorded.late.recording_id)
    both = _read(spark, recorded).filter(F.col("recording_id").isin(*ids) & (F.col("stream_id") == 8))
    assert both.count() == len(recorded.active.payloads)
    assert _read(spark, recorded).filter(F.col("recording_id") == 999).count() == 0


def test_position_range_pushdown_reads_only_its_segments(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.stopped
    low, high = 2 * SEGMENT_LENGTH + 1000, 3 * SEGMENT_LENGTH + 777  # not on frame boundaries
    df = _read(spark, recorded).filter(
        (F.col("recording_id") == stream.recording_id) & (F.col("position") >= low) & (F.col("position") < high)
    )
    assert df.rdd.getNumPartitions() == 2
    expected = [(p, m) for p, m in zip(stream.positions, stream.payloads, strict=True) if low <= p < high]
    assert _by_position(df) == expected
    strict = _read(spark, recorded).filter(
        (F.col("recording_id") == stream.recording_id) & (F.col("position") > low) & (F.col("position") <= high)
    )
    assert _by_position(strict) == [
        (p, m) for p, m in zip(stream.positions, stream.payloads, strict=True) if low < p <= high
    ]
    exact = stream.positions[1234]
    one = _read(spark, recorded).filter((F.col("position") == exact) & (F.col("stream_id") == 7))
    assert _by_position(one) == [(exact, stream.payloads[1234])]


def test_options_select_recordings_and_positions(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.stopped
    low, high = stream.positions[100], stream.positions[200]
    df = _read(spark, recorded, recording_id=stream.recording_id, from_position=low, to_position=high)
    assert _by_position(df) == list(zip(stream.positions[100:200], stream.payloads[100:200], strict=True))
    ids = f"{recorded.active.recording_id},{recorded.late.recording_id}"
    expected = len(recorded.active.payloads) + len(recorded.late.payloads)
    assert _read(spark, recorded, recording_id=ids).count() == expected
    assert _read(spark, recorded, stream_id=11).count() == len(recorded.messages.payloads)


def test_an_active_recording_is_read_up_to_its_recorded_position(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.active
    assert stream.descriptor().is_active
    df = _read(spark, recorded, recording_id=stream.recording_id)
    assert _by_position(df) == list(zip(stream.positions, stream.payloads, strict=True))
    stream.publish(b"more-%d" % i for i in range(300))  # into the next segments
    again = _read(spark, recorded, recording_id=stream.recording_id)
    assert _by_position(again) == list(zip(stream.positions, stream.payloads, strict=True))
    assert again.rdd.getNumPartitions() == len(_spans(stream))


def test_a_recording_that_began_mid_term(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.late
    assert stream.start_position % TERM != 0
    df = _read(spark, recorded, recording_id=stream.recording_id)
    rows = _by_position(df)
    assert rows == list(zip(stream.positions, stream.payloads, strict=True))
    assert rows[0][0] == stream.start_position
    assert df.rdd.getNumPartitions() == len(_spans(stream)) == 2
    tail = _read(spark, recorded).filter((F.col("stream_id") == 9) & (F.col("position") < stream.start_position + 640))
    assert _by_position(tail) == rows[:10]


def test_serialization_columns_decode_endpoint_messages(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.messages
    df = _read(spark, recorded, recording_id=stream.recording_id, serialization="pipeline_messages:serialization")
    assert df.columns[-2:] == ["message_type", "message"]
    rows = df.orderBy("position").collect()
    assert [bytes(r.payload) for r in rows] == stream.payloads
    decoded = [(r.message_type, None if r.message is None else json.loads(r.message)) for r in rows]
    assert decoded[0] == ("Move", {"seq": 0, "x": 0.0, "y": -0.0})
    assert decoded[39] == ("Move", {"seq": 39, "x": 19.5, "y": -39.0})
    assert decoded[40] == ("Chat", {"author": "ann", "text": "hello", "attachment": "AAEC"})
    assert decoded[41:44] == [("dict", {"plain": [1, 2, 3]}), ("int", 7), ("str", "text")]
    assert decoded[44:46] == [(None, None), (None, None)]  # undecodable: nulls, not an error
    assert decoded[46] == ("Move", {"seq": 99, "x": "nan", "y": 1.0})
    moves = df.filter(F.col("message_type") == "Move").select(F.get_json_object("message", "$.seq").cast("int"))
    assert sorted(r[0] for r in moves.collect()) == [*range(40), 99]


def test_aggregation_over_all_rows_through_arrow(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.stopped
    df = _read(spark, recorded, recording_id=stream.recording_id)
    got = {r.k: r["count"] for r in df.groupBy(F.substring("payload", 1, 3).alias("k")).count().collect()}
    expected: dict[bytes, int] = {}
    for payload in stream.payloads:
        expected[payload[:3]] = expected.get(payload[:3], 0) + 1
    assert {bytes(k): v for k, v in got.items()} == expected
    assert df.agg(F.sum(F.length("payload"))).collect()[0][0] == sum(len(p) for p in stream.payloads)


def test_small_batches_give_the_same_rows(spark: SparkSession, recorded: Recorded) -> None:
    stream = recorded.stopped
    df = _read(spark, recorded, recording_id=stream.recording_id, max_rows_per_batch=7)
    assert _by_position(df) == list(zip(stream.positions, stream.payloads, strict=True))


@pytest.mark.parametrize(
    ("options", "path", "message"),
    [
        ({}, "/nonexistent/endpoint-archive", "archive directory /nonexistent/endpoint-archive does not exist"),
        ({"stream_id": "seven"}, None, r"option stream_id='seven': must be a 32-bit stream id"),
        ({"recording_id": "-1"}, None, r"option recording_id='-1': must be a recording id >= 0"),
        ({"from_position": "10", "to_position": "5"}, None, "to_position=5: must not be below from_position=10"),
        ({"serialization": "no_colon"}, None, r"option serialization='no_colon': must be 'module:attr'"),
        ({"max_rows_per_batch": "0"}, None, "option max_rows_per_batch='0'"),
        ({"recordingid": "1"}, None, r"unknown option\(s\) recordingid; the options are .*recording_id"),
    ],
)
def test_bad_options_are_clear_errors(
    spark: SparkSession, recorded: Recorded, options: dict[str, str], path: str | None, message: str
) -> None:
    reader = spark.read.format("endpoint-archive")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message):
        reader.load(path or recorded.archive_dir).collect()


def test_a_directory_without_catalog_and_an_unimportable_serialization(spark: SparkSession, recorded: Recorded) -> None:
    with pytest.raises(Exception, match=r"is not an archive directory: it has no archive\.catalog"):
        spark.read.format("endpoint-archive").load(str(recorded.rig.aeron_dir)).collect()
    df = _read(spark, recorded, serialization="no_such_module_here:serialization", recording_id=0)
    with pytest.raises(Exception, match="cannot import 'no_such_module_here'"):
        df.collect()
