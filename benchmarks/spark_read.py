"""Spark batch reads of a recording through ``endpoint-archive``, beside the same rows from Parquet, in one run.

    python benchmarks/spark_read.py [--messages 2000000] [--term-length 4194304]
                                    [--segment-length 16777216] [--repeat 3] [--quick]

A real archive (embedded media driver + Archive, IPC, in a temp dir under
/dev/shm) records ``--messages`` 32-byte messages (default 2,000,000;
``--quick`` 50,000) offered in batches of 64. The first 8 bytes of each
payload are the message's index (little-endian), so its first byte cycles
through 256 values. Then a local[2] SparkSession
(``endpoint.pipeline.local_session``) runs, for each source:

- ``count()``: every row still goes through the Python worker and Arrow (a
  Python data source has no column pruning);
- ``groupBy(substring(payload, 1, 1)).agg(count, sum(position))``: 256 groups
  over every row's payload.

The peer is the same rows (all ten columns, same types) written by pyarrow
to one Parquet file (row groups of 131,072 rows, default compression) and
read with ``spark.read.parquet``, which Spark reads natively in the JVM.
Each query runs once untimed (workers start, the JIT warms; not with ``--quick``), then
``--repeat`` times; the table shows the best run, rows/s = messages / seconds.
The ratio is archive rows/s over Parquet rows/s (> 1: the archive is faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MESSAGE_LENGTH, print_table

ROWS_BAR = 1_000_000.0
STREAM_ID = 1001
BATCH = 64
RECORD_TIMEOUT_S = 600.0


def record(root: Path, messages: int, term_length: int, segment_length: int) -> tuple[Path, float]:
    """Record ``messages`` 32-byte messages with a real archive; (archive dir, seconds it took)."""
    from driver.archive import Archive
    from driver.client.aeron import Aeron
    from driver.core.media_driver import MediaDriver

    channel = f"aeron:ipc?term-length={term_length}"
    aeron_dir, archive_dir = root / "aeron", root / "archive"
    filler = b"\xab" * (MESSAGE_LENGTH - 8)
    pack = struct.Struct("<Q").pack
    driver = MediaDriver.launch(aeron_dir=str(aeron_dir), dir_delete_on_shutdown=True)
    try:
        with (
            Archive.launch(aeron_dir=aeron_dir, archive_dir=archive_dir, segment_file_length=segment_length) as archive,
            Aeron.connect(aeron_dir=aeron_dir) as aeron,
        ):
            archive.start_recording(channel, STREAM_ID)
            publication = aeron.add_exclusive_publication(channel, STREAM_ID)
            started = time.perf_counter()
            deadline = time.monotonic() + RECORD_TIMEOUT_S
            while not archive.recordings():
                if time.monotonic() > deadline:
                    raise TimeoutError("the archive did not start recording")
                time.sleep(0.01)
            sent = 0
            while sent < messages:
                batch = [pack(i) + filler for i in range(sent, min(sent + BATCH, messages))]
                while publication.offer_batch(batch) < 0:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"publishing stalled at {sent:,} messages")
                sent += len(batch)
            target = publication.position
            while archive.recordings()[0].recorded_position < target:
                if time.monotonic() > deadline:
                    raise TimeoutError("the archive did not record everything in time")
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            archive.stop_recording(channel, STREAM_ID)
    finally:
        driver.close()
    return archive_dir, elapsed


def write_parquet(spark_rows_source: Path, out: Path, messages: int) -> None:
    """The same rows as the archive read gives, as one Parquet file written by pyarrow (decoded without Spark)."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    from driver.archive.catalog import Catalog
    from endpoint.pipeline.frames import ARROW_SCHEMA, message_batches
    from endpoint.pipeline.partitions import plan_recording, read_span

    with Catalog(spark_rows_source, writable=False) as catalog:
        [descriptor] = catalog.descriptors()
    with pq.ParquetWriter(out, ARROW_SCHEMA) as writer:
        rows = 0
        for span in plan_recording(str(spark_rows_source), descriptor, 0, 1 << 62):
            for found in read_span(span):
                for batch in message_batches(found, descriptor.recording_id, descriptor.original_channel):
                    writer.write_table(pa.Table.from_batches([batch]), row_group_size=131_072)
                    rows += batch.num_rows
    if rows != messages:
        raise RuntimeError(f"Parquet got {rows:,} rows, expected {messages:,}")


def timed(run: Callable[[], object], repeat: int, warm_up: bool = True) -> tuple[float, float]:
    """(best, median) seconds of ``repeat`` runs after one untimed warm-up run (if ``warm_up``)."""
    if warm_up:
        run()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2_000_000, help="messages recorded (default: %(default)s)")
    parser.add_argument("--term-length", type=int, default=4 << 20, help="IPC term length (default: %(default)s)")
    parser.add_argument(
        "--segment-length", type=int, default=16 << 20, help="archive segment file length (default: %(default)s)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per query (default: %(default)s)")
    parser.add_argument(
        "--batch-rows", type=int, default=65_536, help="archive: max_rows_per_batch option (default: %(default)s)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 50,000 messages, one run, no warm-up")
    args = parser.parse_args(argv)
    messages = 50_000 if args.quick else args.messages
    repeat = 1 if args.quick else args.repeat
    if messages < 1 or repeat < 1:
        parser.error("--messages and --repeat must be at least 1")

    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from endpoint.pipeline import local_session

    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix="endpoint-bench-spark-", dir=base))
    spark = None
    try:
        archive_dir, recording_s = record(root, messages, args.term_length, args.segment_length)
        print(
            f"  recorded {messages:,} messages of {MESSAGE_LENGTH} bytes in {recording_s:.1f} s "
            f"({messages / recording_s:,.0f} msg/s)",
            file=sys.stderr,
            flush=True,
        )
        parquet = root / "rows.parquet"
        write_parquet(archive_dir, parquet, messages)
        spark = local_session("spark-read-benchmark", "local[2]")
        archive_df = (
            spark.read.format("endpoint-archive")
            .option("max_rows_per_batch", str(args.batch_rows))
            .load(str(archive_dir))
        )
        parquet_df = spark.read.parquet(str(parquet))
        partitions = archive_df.rdd.getNumPartitions()

        def count(df: DataFrame) -> Callable[[], object]:
            def run() -> object:
                got = df.count()
                if got != messages:
                    raise RuntimeError(f"count {got:,}, expected {messages:,}")
                return got

            return run

        def group(df: DataFrame) -> Callable[[], object]:
            def run() -> object:
                rows = (
                    df.groupBy(F.substring("payload", 1, 1).alias("k"))
                    .agg(F.count("*").alias("n"), F.sum("position").alias("p"))
                    .collect()
                )
                if sum(r.n for r in rows) != messages:
                    raise RuntimeError("groupBy lost rows")
                return rows

            return run

        results: dict[str, tuple[float, float]] = {}
        for name, run in (
            ("endpoint-archive count", count(archive_df)),
            ("endpoint-archive groupBy", group(archive_df)),
            ("parquet count", count(parquet_df)),
            ("parquet groupBy", group(parquet_df)),
        ):
            results[name] = best, _ = timed(run, repeat, warm_up=not args.quick)
            print(f"  {name}: {messages / best:,.0f} rows/s", file=sys.stderr, flush=True)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    print_table(
        f"Spark batch read, {messages:,} rows of {MESSAGE_LENGTH}-byte payloads, local[2] "
        f"(archive: {partitions} partitions, term {args.term_length:,}, segment {args.segment_length:,})",
        ["", "best s", "median s", "rows/s (best)"],
        [(name, best, median, messages / best) for name, (best, median) in results.items()],
    )
    ratios = []
    for query in ("count", "groupBy"):
        ours = results[f"endpoint-archive {query}"][0]
        peer = results[f"parquet {query}"][0]
        ratios.append((query, f"{peer / ours:.2f}"))
    print_table("Ratio endpoint-archive / parquet, rows/s (> 1: the archive is faster)", ["", "x parquet"], ratios)
    print(f"\nBar (local[2], {messages:,} rows)")
    for query in ("count", "groupBy"):
        rate = messages / results[f"endpoint-archive {query}"][0]
        met = "MET" if rate >= ROWS_BAR else "NOT MET"
        print(f"  endpoint-archive {query}: {rate:,.0f} rows/s >= {ROWS_BAR:,.0f}: {met}")
    print(f"  (cpu count {os.cpu_count()})")


if __name__ == "__main__":
    main()
