"""Archive throughput: our archive beside Aeron Java 1.15.1's ArchivingMediaDriver, recording and replay.

    python benchmarks/archive_throughput.py [--mode all|record|replay] [--messages 3000000] [--batch 64]
                                            [--sizes 32,1024] [--term-length 16m] [--segment-length 128m]
                                            [--archive-dir DIR] [--no-java] [--quick]

Two archiving drivers, one after the other: ours (``python -m driver.archive
--with-driver``) and Aeron Java 1.15.1's ``io.aeron.archive.ArchivingMediaDriver``
(one JVM, the archive in SHARED mode, C2 JIT). Each hosts the media driver for its
rows; each row's publisher and subscriber are spawned Python processes of their
own (our client, speaking Aeron's archive protocol to either archive), talking
to it over IPC (``aeron:ipc?term-length=16m``).

Recording: the publisher asks the archive (``ArchiveClient``) to record the stream,
then offers ``--messages`` messages of each size in ``--sizes`` with ``offer_batch``
(``--batch`` per call) as fast as it can; the row's time runs from its first offer
until the recording's ``rec-pos`` counter equals the publication's position
(nothing lost, nothing still in flight). The peer row is the same publisher with a
plain subscriber process draining (``Image.poll_payloads``, no-op handler) on our
driver instead of an archive: from the first offer until the subscriber has counted
every message. Both are ``messages / seconds``; publisher-side offer rates are
shown too. 1 KiB rows send a tenth as many messages.

Replay: that recording is replayed (``ArchiveClient.replay``) to a subscriber
process that counts the messages; the peer is a live publisher streaming the same
messages to the same kind of subscriber. Both time the subscriber from its first
message to its last.

The archive directory is under /dev/shm unless ``--archive-dir`` says otherwise
(it is removed afterwards either way). Bars (our archive, 32-byte messages):
recording keeps up with at least 1,000,000 msgs/s and replay delivers at least
1,000,000 msgs/s.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import fresh_aeron_dir, print_table  # noqa: E402

STREAM_ID = 1101
REPLAY_STREAM_ID = 1102
BAR_MSGS_PER_S = 1_000_000
RUN_TIMEOUT_S = 300.0


def _noop(payload: memoryview, flags: object) -> None:
    pass


def _connect_archive(aeron: Any, aeron_dir: str, archive: dict[str, Any]) -> Any:
    from driver.archive import ArchiveContext
    from driver.archive.client import ArchiveClient

    context = ArchiveContext.from_env({}, aeron_dir=aeron_dir, **archive)
    return ArchiveClient.connect(aeron, context, timeout=30)


def publisher(
    aeron_dir: str,
    archive: dict[str, Any] | None,
    channel: str,
    messages: int,
    length: int,
    batch_size: int,
    ready: Any,
    out: Any,
) -> None:
    """Offer ``messages`` messages of ``length`` bytes; with an ``archive`` (its client settings), record them and
    wait for the archive's ``rec-pos`` counter to catch up.

    Reports (first offer monotonic time, offers done time, recorded time or None, position, recording id).
    """
    from driver.archive import recording_pos
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        control = None
        if archive is not None:
            control = _connect_archive(aeron, aeron_dir, archive)
            control.start_recording(channel, STREAM_ID)
        publication = aeron.add_exclusive_publication(channel, STREAM_ID)
        deadline = time.monotonic() + 60
        if archive is None:
            ready.wait(60)
        while not publication.is_connected:
            if time.monotonic() > deadline:
                raise RuntimeError("publication never connected")
            time.sleep(0.001)
        recording_id = counter_id = -1
        counters = aeron.counters_reader
        if control is not None:
            while counter_id < 0:
                counter_id = recording_pos.find_counter_id_by_session(counters, publication.session_id)
                if time.monotonic() > deadline:
                    raise RuntimeError("no recording")
            recording_id = recording_pos.recording_id_of(counters, counter_id)
        batch = [b"x" * length] * batch_size
        offer_batch = publication.offer_batch
        sent = 0
        started = time.monotonic()
        deadline = started + RUN_TIMEOUT_S
        while sent < messages:
            if offer_batch(batch if messages - sent >= batch_size else batch[: messages - sent]) > 0:
                sent += min(batch_size, messages - sent)
            elif time.monotonic() > deadline:
                break
        offered = time.monotonic()
        position = publication.position
        recorded_at = None
        if counter_id >= 0:
            while counters.get_counter_value(counter_id) < position and time.monotonic() < deadline:
                pass
            if counters.get_counter_value(counter_id) == position:
                recorded_at = time.monotonic()
        out.put((started, offered, recorded_at, position, recording_id, sent))
        if control is not None:
            control.stop_recording(channel, STREAM_ID)
            control.close()
        else:
            time.sleep(0.2)  # let the subscriber finish before the publication goes


def subscriber(
    aeron_dir: str,
    archive: dict[str, Any] | None,
    channel: str,
    stream_id: int,
    messages: int,
    recording_id: int,
    ready: Any,
    out: Any,
) -> None:
    """Count ``messages`` (a replay of ``recording_id`` when given an archive); report monotonic first/last times."""
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        control = None
        if archive is not None:
            control = _connect_archive(aeron, aeron_dir, archive)
            requested = time.monotonic()
            replay_id = control.replay(recording_id, channel, stream_id, position=0)
            subscription = control.replay_subscription(channel, stream_id, replay_id)
        else:
            subscription = aeron.add_subscription(channel, stream_id)
            requested = time.monotonic()
        ready.set()

        def poll(handler: Any, limit: int) -> int:  # the cheapest per-message path, the same for both sides
            return sum(image.poll_payloads(handler, limit) for image in subscription.images)

        received = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while received == 0:
            received = poll(_noop, 4096)
            if time.monotonic() > deadline:
                out.put((0, requested, requested, requested))
                return
        first = time.monotonic()
        while received < messages and time.monotonic() < deadline:
            received += poll(_noop, 4096)
        last = time.monotonic()
        out.put((received, requested, first, last))
        subscription.close()
        if control is not None:
            control.close()


IPC_CONTROL = "aeron:ipc?term-length=64k"


class ArchivingDriver:
    """``python -m driver.archive --with-driver`` on fresh directories; stopped by pid and removed at the end."""

    name = "our archive"

    def __init__(self, archive_dir: Path | None, segment_length: str) -> None:
        self.aeron_dir = fresh_aeron_dir("archive")
        self.archive_dir = archive_dir if archive_dir is not None else Path(f"{self.aeron_dir}-archive")
        self.log = Path(f"{self.aeron_dir}.log")
        # IPC for control, responses and events: nothing of the run on shared UDP ports
        self.client = {
            "control_channel": IPC_CONTROL,
            "control_response_channel": IPC_CONTROL,
            "recording_events_channel": IPC_CONTROL,
        }
        env = {
            **os.environ,
            "AERON_ARCHIVE_CONTROL_CHANNEL": IPC_CONTROL,
            "AERON_ARCHIVE_RECORDING_EVENTS_CHANNEL": IPC_CONTROL,
        }
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "driver.archive",
                    "--with-driver",
                    "-d",
                    str(self.aeron_dir),
                    "--archive-dir",
                    str(self.archive_dir),
                    "--segment-file-length",
                    segment_length,
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        deadline = time.monotonic() + 30
        while "archive ready" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"archive did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def close(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        shutil.rmtree(self.aeron_dir, ignore_errors=True)
        shutil.rmtree(self.archive_dir, ignore_errors=True)
        self.log.unlink(missing_ok=True)


# The tests' JVM options stop at the C1 compiler to start fast; a benchmark wants the JIT's best.
BENCH_JVM_OPTIONS = ("-Xms64m", "-Xmx1g", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED")


class JavaArchivingDriver:
    """Aeron Java 1.15.1's ArchivingMediaDriver (from the interop tests' peer cache) on fresh directories."""

    name = "Aeron Java 1.15.1 archive"

    def __init__(self, root: Path, segment_length: str, term_length: str) -> None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from support.aeron_java import AeronJava
        from support.java_archive import start_java_archive

        found = AeronJava.ensure()
        self.root = root
        self.archive = start_java_archive(
            AeronJava(found.java, found.jar, BENCH_JVM_OPTIONS),
            root,
            props={
                "aeron.archive.segment.file.length": segment_length,
                "aeron.ipc.term.buffer.length": term_length,
                "aeron.term.buffer.sparse.file": False,
            },
        )
        self.aeron_dir = self.archive.aeron_dir
        self.archive_dir = self.archive.archive_dir
        ch = self.archive.channels
        self.client = {
            "control_channel": ch.control_channel,
            "control_stream_id": ch.control_stream_id,
            "control_response_channel": ch.control_response_channel,
            "recording_events_channel": ch.recording_events_channel,
            "recording_events_stream_id": ch.recording_events_stream_id,
        }

    def close(self) -> None:
        try:
            self.archive.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


Host = ArchivingDriver | JavaArchivingDriver


def run_recording(host: Host, channel: str, messages: int, length: int, batch: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    pub = ctx.Process(
        target=publisher, args=(str(host.aeron_dir), host.client, channel, messages, length, batch, ready, out)
    )
    pub.start()
    started, offered, recorded_at, position, recording_id, sent = out.get(timeout=RUN_TIMEOUT_S + 60)
    pub.join(60)
    elapsed = (recorded_at - started) if recorded_at is not None else float("nan")
    return {
        "messages": sent,
        "rate": sent / elapsed if recorded_at is not None else 0.0,
        "offer_rate": sent / (offered - started),
        "no_loss": recorded_at is not None,
        "position": position,
        "recording_id": recording_id,
    }


def run_plain(host: Host, channel: str, messages: int, length: int, batch: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, pub_out, sub_out = ctx.Event(), ctx.Queue(), ctx.Queue()
    sub = ctx.Process(
        target=subscriber, args=(str(host.aeron_dir), None, channel, STREAM_ID, messages, -1, ready, sub_out)
    )
    sub.start()
    pub = ctx.Process(
        target=publisher, args=(str(host.aeron_dir), None, channel, messages, length, batch, ready, pub_out)
    )
    pub.start()
    started, offered, _, _, _, sent = pub_out.get(timeout=RUN_TIMEOUT_S + 60)
    received, _, first, last = sub_out.get(timeout=RUN_TIMEOUT_S + 60)
    pub.join(60)
    sub.join(60)
    return {
        "messages": received,
        "rate": received / (last - started) if received else 0.0,
        "offer_rate": sent / (offered - started),
        "no_loss": received == sent,
        "first_to_last": received / (last - first) if last > first else 0.0,
    }


def run_replay(host: Host, recording_id: int, messages: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    sub = ctx.Process(
        target=subscriber,
        args=(str(host.aeron_dir), host.client, "aeron:ipc", REPLAY_STREAM_ID, messages, recording_id, ready, out),
    )
    sub.start()
    received, requested, first, last = out.get(timeout=RUN_TIMEOUT_S + 60)
    sub.join(60)
    return {
        "messages": received,
        "rate": received / (last - first) if last > first else 0.0,
        "from_request": received / (last - requested) if last > requested else 0.0,
    }


def measure(
    host: Host, mode: str, channel: str, messages: int, length: int, batch: int
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One host's recording (and replay of it, unless only recording is asked for)."""
    recording = run_recording(host, channel, messages, length, batch)
    replay = run_replay(host, recording["recording_id"], messages) if mode in ("all", "replay") else None
    return recording, replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["all", "record", "replay"], default="all")
    parser.add_argument("--messages", type=int, default=3_000_000, help="32-byte messages (1 KiB: a tenth)")
    parser.add_argument("--sizes", default="32,1024", help="message lengths, comma separated")
    parser.add_argument("--batch", type=int, default=64, help="messages per offer_batch call")
    parser.add_argument("--term-length", default="16m")
    parser.add_argument("--segment-length", default="128m")
    parser.add_argument("--archive-dir", type=Path, default=None, help="default: beside the driver in /dev/shm")
    parser.add_argument("--no-java", action="store_true", help="skip Aeron Java's archive")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200,000 messages")
    args = parser.parse_args()
    base_messages = 200_000 if args.quick else args.messages
    sizes = [int(size) for size in args.sizes.split(",")]
    channel = f"aeron:ipc?term-length={args.term_length}"
    archive_dir = args.archive_dir / f"archive-bench-{os.getpid()}" if args.archive_dir else None
    results: dict[tuple[str, int], tuple[dict[str, Any], dict[str, Any] | None]] = {}
    plains: dict[int, dict[str, Any]] = {}
    names = [ArchivingDriver.name] + ([] if args.no_java else [JavaArchivingDriver.name])

    def count(length: int) -> int:
        return base_messages if length <= 64 else max(1, base_messages // 10)

    host: Host = ArchivingDriver(archive_dir, args.segment_length)
    try:
        for length in sizes:
            results[(host.name, length)] = measure(host, args.mode, channel, count(length), length, args.batch)
            plains[length] = run_plain(host, channel, count(length), length, args.batch)
    finally:
        host.close()
    if not args.no_java:
        java_root = Path(f"{fresh_aeron_dir('java-archive')}-root")
        host = JavaArchivingDriver(java_root, args.segment_length, args.term_length)
        try:
            for length in sizes:
                results[(host.name, length)] = measure(host, args.mode, channel, count(length), length, args.batch)
        finally:
            host.close()

    bars: list[tuple[str, float, bool]] = []
    for length in sizes:
        messages = count(length)
        plain = plains[length]
        rows: list[tuple[object, ...]] = []
        for name in names:
            recording = results[(name, length)][0]
            rows.append(
                (
                    f"recorded by {name}",
                    recording["messages"],
                    recording["rate"],
                    recording["rate"] * length / 1e6,
                    recording["offer_rate"],
                    "yes" if recording["no_loss"] else "NO",
                    recording["rate"] / plain["rate"] if plain["rate"] else 0.0,
                )
            )
        rows.append(
            (
                "plain subscriber (peer)",
                plain["messages"],
                plain["rate"],
                plain["rate"] * length / 1e6,
                plain["offer_rate"],
                "yes" if plain["no_loss"] else "NO",
                1.0,
            )
        )
        print_table(
            f"Archive recording, {length}-byte messages over IPC ({channel}), publisher and archive/subscriber "
            f"in separate processes (batch {args.batch}, {messages:,} messages)",
            ["", "messages", "msgs/s", "MB/s", "publisher offers/s", "no loss", "x plain subscriber"],
            rows,
        )
        print("  (msgs/s: first offer until everything is recorded / received)")
        ours = results[(ArchivingDriver.name, length)]
        if length == 32:
            bars.append(("recording keeps up with >= 1,000,000 msgs/s", ours[0]["rate"], ours[0]["no_loss"]))
        if args.mode == "record":
            continue
        replay_rows: list[tuple[object, ...]] = []
        for name in names:
            recording, replay = results[(name, length)]
            assert replay is not None
            replay_rows.append(
                (
                    f"replay by {name}",
                    replay["messages"],
                    replay["rate"],
                    replay["rate"] * length / 1e6,
                    replay["rate"] / plain["first_to_last"] if plain["first_to_last"] else 0.0,
                    f"{replay['from_request']:,.0f}",
                )
            )
        replay_rows.append(
            (
                "live IPC stream (peer)",
                plain["messages"],
                plain["first_to_last"],
                plain["first_to_last"] * length / 1e6,
                1.0,
                "",
            )
        )
        print_table(
            f"Archive replay, {messages:,} {length}-byte messages to a subscriber process over IPC",
            ["", "messages", "msgs/s", "MB/s", "x live stream", "msgs/s from the request"],
            replay_rows,
        )
        print("  (msgs/s: the subscriber's first message to its last)")
        if length == 32:
            replay = ours[1]
            assert replay is not None
            bars.append(
                ("replay delivers >= 1,000,000 msgs/s", replay["rate"], replay["messages"] == ours[0]["messages"])
            )
    print("\nBars")
    for what, rate, complete in bars:
        met = complete and rate >= BAR_MSGS_PER_S
        print(f"  {what}: {rate:,.0f} msgs/s -> {'met' if met else 'NOT met'}{'' if complete else ' (incomplete)'}")


if __name__ == "__main__":
    main()
