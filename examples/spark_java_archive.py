"""Spark over an existing Aeron Archive: aggregate the recordings an Aeron (Java, C, ...) archive keeps.

Point it at the archive directory (``aeron.archive.dir``) of an Aeron 1.15 archive
— Java's ``ArchivingMediaDriver`` writes ``archive.catalog``, ``archive-mark.dat``
and ``<recording>-<position>.rec`` segments there — or of ours; the archive may
be running (the recordings being made read up to what the ``rec-pos`` counter
says is recorded) or stopped::

    python examples/spark_java_archive.py /var/lib/aeron/archive

prints one line per recording (stream, channel, messages, payload bytes, last
position), read in batch. With ``--stream OUT --checkpoint DIR`` it also runs a
structured stream over the same directory into Parquet files under OUT and
stops once it has caught up: run it again later, with the same checkpoint, and
it adds exactly the messages recorded since (the checkpoint holds each
recording's position), never one twice::

    python examples/spark_java_archive.py /var/lib/aeron/archive --stream /data/out --checkpoint /data/ckpt

Nothing here needs Aeron's Java code: the data source reads the files. To try it
without an Aeron deployment, record with Aeron's ``RecordedBasicPublisher``
sample on an ``ArchivingMediaDriver`` (aeron-all 1.15.1 jar), or with ours
(``examples/game_recording.py``). See docs/pipeline.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from endpoint.pipeline import local_session

__all__ = ["main", "per_recording", "stream_to_parquet"]

STREAM_TIMEOUT_S = 300


def per_recording(spark: SparkSession, archive_dir: str, stream_id: int | None) -> DataFrame:
    """One row per recording: messages, payload bytes and last position (the stream id is pushed down)."""
    reader = spark.read.format("endpoint-archive")
    if stream_id is not None:
        reader = reader.option("stream_id", stream_id)
    return (
        reader.load(archive_dir)
        .groupBy("recording_id", "stream_id", "channel")
        .agg(
            F.count("*").alias("messages"),
            F.sum(F.length("payload")).alias("payload_bytes"),
            F.max("position").alias("last_position"),
        )
        .orderBy("recording_id")
    )


def stream_to_parquet(spark: SparkSession, archive_dir: str, out: str, checkpoint: str) -> tuple[int, int]:
    """Stream what is recorded and not yet in ``out`` (per the checkpoint) into Parquet; (rows added, rows in out)."""

    def rows_in_out() -> int:
        return spark.read.parquet(out).count() if any(Path(out).glob("*.parquet")) else 0

    before = rows_in_out()
    query = (
        spark.readStream.format("endpoint-archive")
        .load(archive_dir)
        .select("recording_id", "stream_id", "position", "payload")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(STREAM_TIMEOUT_S):
            raise TimeoutError(f"the stream did not catch up within {STREAM_TIMEOUT_S} s")
    finally:
        query.stop()
    after = rows_in_out()
    return after - before, after


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive_dir", help="an Aeron archive directory (holding archive.catalog)")
    parser.add_argument("--stream-id", type=int, help="only recordings of this stream id")
    parser.add_argument("--stream", metavar="OUT", help="also stream every recorded message into Parquet under OUT")
    parser.add_argument("--checkpoint", help="the stream's checkpoint directory (with --stream)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    args = parser.parse_args(argv)
    if (args.stream is None) != (args.checkpoint is None):
        parser.error("--stream and --checkpoint go together")
    if not (Path(args.archive_dir) / "archive.catalog").is_file():
        print(f"{args.archive_dir}: no archive.catalog, not an Aeron archive directory", file=sys.stderr)
        return 2
    spark = local_session("spark-java-archive", args.master)
    try:
        total = 0
        for r in per_recording(spark, args.archive_dir, args.stream_id).collect():
            total += r.messages
            print(
                f"recording {r.recording_id} stream {r.stream_id} {r.channel}: {r.messages} messages, "
                f"{r.payload_bytes} payload bytes, last position {r.last_position}"
            )
        print(f"batch: {total} messages")
        if args.stream is not None:
            added, rows = stream_to_parquet(spark, args.archive_dir, args.stream, args.checkpoint)
            print(f"stream: {added} new messages this run, {rows} in {args.stream}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
