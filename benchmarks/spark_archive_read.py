"""Spark reading an archive Aeron Java 1.15.1 wrote, beside one our archive wrote, in one run.

    python benchmarks/spark_archive_read.py [--messages 1000000] [--sizes 32,1024] [--term-length 4194304]
                                            [--segment-length 16777216] [--repeat 3] [--quick]

Two archive directories under /dev/shm (or the temp dir), each holding one
recording per size in ``--sizes`` (stream id 2000 + index), recorded over
``aeron:ipc``:

- Java's: Aeron Java 1.15.1's ``io.aeron.archive.ArchivingMediaDriver`` (one JVM,
  the archive in SHARED mode) records what a small Java program on ``AeronArchive``
  (``addRecordedExclusivePublication``) offers as fast as it can; the JVM is then
  stopped, leaving the directory as an existing Aeron deployment has it.
- Ours: our embedded media driver and ``Archive`` record what our exclusive
  publication offers with ``offer_batch`` (64 per call), in this process.

Every payload starts with the message's index (8 bytes, little-endian), the rest
is 0xAB; 1 KiB rows record a tenth as many messages (``--messages`` counts the
32-byte ones). Then one local[2] SparkSession runs, on each recording,
``spark.read.format("endpoint-archive").option("stream_id", ...)`` and
``groupBy(substring(payload, 1, 1)).agg(count, sum(length(payload)), max(position))``
(256 groups, every row's payload read): both twice untimed (not with ``--quick``), then ``--repeat`` times
each in turns, the order swapped each round (the first source a session reads is
slower while it warms up); the table shows the best run as rows/s and payload MB/s (10^6 bytes). The ratio is
Java's archive over ours (1.00: Spark reads both at the same rate; both are read
by the same code, so it shows whether Aeron's layout costs anything).
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import print_table  # noqa: E402

BASE_STREAM_ID = 2000
BATCH = 64
RECORD_TIMEOUT_S = 600.0
# The tests' JVM options stop at the C1 compiler to start fast; a benchmark wants the JIT's best.
BENCH_JVM_OPTIONS = ("-Xms64m", "-Xmx1g", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED")


def messages_for(length: int, messages: int) -> int:
    """1 KiB and larger rows send a tenth as many messages."""
    return messages if length < 1024 else max(1, messages // 10)


def payload_prefix(length: int) -> tuple[Callable[[int], bytes], bytes]:
    return struct.Struct("<Q").pack, b"\xab" * (length - 8)


def record_ours(
    archive_dir: Path, aeron_dir: Path, jobs: Sequence[tuple[int, int, int]], args: argparse.Namespace
) -> list[float]:
    """Record each (stream id, length, messages) with our embedded driver and archive; seconds per recording."""
    from driver.archive import Archive
    from driver.client.aeron import Aeron
    from driver.core.media_driver import MediaDriver

    channel = f"aeron:ipc?term-length={args.term_length}"
    seconds = []
    driver = MediaDriver.launch(aeron_dir=str(aeron_dir), dir_delete_on_shutdown=True)
    try:
        with (
            Archive.launch(
                aeron_dir=aeron_dir, archive_dir=archive_dir, segment_file_length=args.segment_length
            ) as archive,
            Aeron.connect(aeron_dir=aeron_dir) as aeron,
        ):
            for stream_id, length, messages in jobs:
                pack, filler = payload_prefix(length)
                before = len(archive.recordings())
                archive.start_recording(channel, stream_id)
                publication = aeron.add_exclusive_publication(channel, stream_id)
                deadline = time.monotonic() + RECORD_TIMEOUT_S
                while len(archive.recordings()) == before:
                    if time.monotonic() > deadline:
                        raise TimeoutError("our archive did not start recording")
                    time.sleep(0.01)
                started = time.perf_counter()
                sent = 0
                while sent < messages:
                    batch = [pack(i) + filler for i in range(sent, min(sent + BATCH, messages))]
                    while publication.offer_batch(batch) < 0:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"publishing stalled at {sent:,} messages")
                    sent += len(batch)
                target = publication.position
                while max(r.recorded_position for r in archive.recordings() if r.stream_id == stream_id) < target:
                    if time.monotonic() > deadline:
                        raise TimeoutError("our archive did not record everything in time")
                    time.sleep(0.01)
                seconds.append(time.perf_counter() - started)
                archive.stop_recording(channel, stream_id)
                publication.close()
    finally:
        driver.close()
    return seconds


def record_java(root: Path, jobs: Sequence[tuple[int, int, int]], args: argparse.Namespace) -> tuple[Path, list[float]]:
    """Record each job on Java's ArchivingMediaDriver with the RecordedOffers program, then stop the JVM."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.aeron_java import AeronJava
    from support.java_archive import free_udp_port, start_java_archive
    from support.java_programs import SOURCES, compile_java

    found = AeronJava.ensure()
    peer = AeronJava(found.java, found.jar, BENCH_JVM_OPTIONS)
    program = compile_java(peer, (SOURCES / "RecordedOffers.java").read_text(encoding="utf-8"), "RecordedOffers")
    archive = start_java_archive(
        peer,
        root,
        props={
            "aeron.archive.segment.file.length": args.segment_length,
            "aeron.term.buffer.sparse.file": False,
        },
    )
    seconds = []
    try:
        ch = archive.channels
        for stream_id, length, messages in jobs:
            out = program.run(
                str(archive.aeron_dir),
                ch.control_channel,
                str(ch.control_stream_id),
                f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}",
                str(ch.control_response_stream_id),
                f"aeron:ipc?term-length={args.term_length}",
                str(stream_id),
                str(messages),
                str(length),
                timeout_s=RECORD_TIMEOUT_S,
            )
            values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            if "timeout" in values or int(values.get("messages", -1)) != messages:
                raise RuntimeError(f"RecordedOffers did not record {messages:,} messages:\n{out[-2000:]}")
            seconds.append(float(values["seconds"]))
    finally:
        code = archive.stop()
    if code != 0:
        raise RuntimeError(f"ArchivingMediaDriver exited with {code}:\n{archive.output()[-2000:]}")
    return archive.archive_dir, seconds


def aggregate(df: Any, n: int, length: int) -> Callable[[], object]:
    """The timed query: 256 groups over every row's payload, checked against what was recorded."""
    from pyspark.sql import functions as F

    def run() -> object:
        got = (
            df.groupBy(F.substring("payload", 1, 1).alias("k"))
            .agg(F.count("*").alias("n"), F.sum(F.length("payload")).alias("b"), F.max("position").alias("p"))
            .collect()
        )
        if sum(r.n for r in got) != n or sum(r.b for r in got) != n * length:
            raise RuntimeError(f"groupBy saw {sum(r.n for r in got):,} rows, expected {n:,}")
        return got

    return run


def interleaved(runs: dict[str, Callable[[], object]], repeat: int, warmups: int = 2) -> dict[str, float]:
    """Best seconds of each run: all warmed up ``warmups`` times first, then timed in turns, the order swapped
    each round.

    Whichever source Spark reads first in a session reads slower for a while (workers and the JIT still warming),
    so timing one source's runs before the other's would credit the second with the warm-up.
    """
    for _ in range(warmups):
        for run in runs.values():
            run()
    best = dict.fromkeys(runs, float("inf"))
    names = list(runs)
    for round_ in range(repeat):
        for name in names if round_ % 2 == 0 else reversed(names):
            started = time.perf_counter()
            runs[name]()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="32-byte messages (default: %(default)s)")
    parser.add_argument("--sizes", default="32,1024", help="payload lengths, >= 8 (default: %(default)s)")
    parser.add_argument("--term-length", type=int, default=4 << 20, help="IPC term length (default: %(default)s)")
    parser.add_argument(
        "--segment-length", type=int, default=16 << 20, help="archive segment file length (default: %(default)s)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per query (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 messages, no warm-up, one timed run")
    args = parser.parse_args(argv)
    messages = 20_000 if args.quick else args.messages
    repeat = 1 if args.quick else args.repeat
    warmups = 0 if args.quick else 2  # a smoke run proves the steps work; its rates are not measurements
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if messages < 1 or repeat < 1 or not sizes or min(sizes) < 8:
        parser.error("--messages and --repeat must be at least 1, every size at least 8")
    jobs = [(BASE_STREAM_ID + i, length, messages_for(length, messages)) for i, length in enumerate(sizes)]

    from endpoint.pipeline import local_session

    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix="endpoint-bench-spark-java-", dir=base))
    spark = None
    rows: list[tuple[object, ...]] = []
    ratios: list[tuple[object, ...]] = []
    try:
        ours_dir = root / "ours-archive"
        ours_s = record_ours(ours_dir, root / "ours-aeron", jobs, args)
        java_dir, java_s = record_java(root / "java", jobs, args)
        for (_, length, n), o, j in zip(jobs, ours_s, java_s, strict=True):
            print(
                f"  recorded {n:,} x {length} B: ours {n / o:,.0f} msg/s, Java {n / j:,.0f} msg/s",
                file=sys.stderr,
                flush=True,
            )
        spark = local_session("spark-archive-read-benchmark", "local[2]")
        for stream_id, length, n in jobs:
            runs = {
                name: aggregate(
                    spark.read.format("endpoint-archive").option("stream_id", str(stream_id)).load(str(d)), n, length
                )
                for name, d in (("ours", ours_dir), ("Java", java_dir))
            }
            best = interleaved(runs, repeat, warmups)
            for name, seconds in best.items():
                rows.append((f"{name}, {length} B", n, seconds, n / seconds, n * length / seconds / 1e6))
                print(f"  {name} {length} B: {n / seconds:,.0f} rows/s", file=sys.stderr, flush=True)
            ratios.append((f"{length} B", f"{best['ours'] / best['Java']:.2f}"))
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    print_table(
        "Spark batch read + groupBy of an archive directory, local[2], Java 1.15.1's archive beside ours "
        f"(term {args.term_length:,}, segment {args.segment_length:,})",
        ["archive, payload", "rows", "best s", "rows/s", "MB/s"],
        rows,
    )
    print_table("Ratio Java-written / ours, rows/s (1.00: the same rate)", ["payload", "x ours"], ratios)
    print(f"  (cpu count {os.cpu_count()})")


if __name__ == "__main__":
    main()
