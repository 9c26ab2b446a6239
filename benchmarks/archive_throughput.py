"""Archive throughput, 32-byte messages: recording beside a plain subscriber, replay beside a live stream.

    python benchmarks/archive_throughput.py [--mode all|record|replay] [--messages 3000000] [--batch 64]
                                            [--term-length 16m] [--segment-length 128m] [--archive-dir DIR]
                                            [--quick]

One archiving driver process (``python -m driver.archive --with-driver``) hosts the
media driver for every row; each row's publisher and subscriber are spawned
processes of their own, talking to it over IPC (``aeron:ipc?term-length=16m``).

Recording: the publisher asks the archive (``ArchiveClient``) to record the stream,
then offers ``--messages`` 32-byte messages with ``offer_batch`` (``--batch`` per
call) as fast as it can; the row's time runs from its first offer until the
catalog's recorded position equals the publication's position (nothing lost,
nothing still in flight). The peer row is the same publisher with a plain
subscriber process draining (``Image.poll_payloads``, no-op handler) instead of the
archive: from the first offer until the subscriber has counted every message.
Both are ``messages / seconds``; publisher-side offer rates are shown too.

Replay: a recording of ``--messages`` 32-byte messages (made first) is replayed
(``ArchiveClient.replay``) to a subscriber process that counts the messages;
the peer is a live publisher streaming the same messages to the same kind of
subscriber. Both time the subscriber from its first message to its last.

The archive directory is under /dev/shm unless ``--archive-dir`` says otherwise
(it is removed afterwards either way). Bars: recording keeps up with at least
1,000,000 msgs/s and replay delivers at least 1,000,000 msgs/s.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MESSAGE_LENGTH, fresh_aeron_dir, print_table

STREAM_ID = 1101
REPLAY_STREAM_ID = 1102
BAR_MSGS_PER_S = 1_000_000
RUN_TIMEOUT_S = 300.0


def _noop(payload: memoryview, flags: object) -> None:
    pass


def _connect_archive(aeron: Any, aeron_dir: str, archive_dir: str) -> Any:
    from driver.archive import ArchiveContext
    from driver.archive.client import ArchiveClient

    # the environment's archive channels (Aeron's UDP defaults unless set), as the archive process has them
    context = ArchiveContext.from_env(aeron_dir=aeron_dir, archive_dir=archive_dir)
    return ArchiveClient.connect(aeron, context, timeout=30)


def publisher(
    aeron_dir: str,
    archive_dir: str | None,
    channel: str,
    messages: int,
    batch_size: int,
    ready: Any,
    out: Any,
) -> None:
    """Offer ``messages`` 32-byte messages; with ``archive_dir``, record them and wait for the archive to catch up.

    Reports (first offer monotonic time, offers done time, recorded time or None, position, recording id).
    """
    from driver.archive import Catalog
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        control = None
        if archive_dir is not None:
            control = _connect_archive(aeron, aeron_dir, archive_dir)
            control.start_recording(channel, STREAM_ID)
        publication = aeron.add_exclusive_publication(channel, STREAM_ID)
        deadline = time.monotonic() + 60
        if archive_dir is None:
            ready.wait(60)
        while not publication.is_connected:
            if time.monotonic() > deadline:
                raise RuntimeError("publication never connected")
            time.sleep(0.001)
        recording_id = -1
        catalog = None
        if control is not None:
            while recording_id < 0:
                found = [d for d in control.recordings() if d.session_id == publication.session_id]
                if found:
                    recording_id = found[0].recording_id
                elif time.monotonic() > deadline:
                    raise RuntimeError("no recording")
            catalog = Catalog(archive_dir, writable=False)
        batch = [b"x" * MESSAGE_LENGTH] * batch_size
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
        if catalog is not None:
            while catalog.recorded_position(recording_id) < position and time.monotonic() < deadline:
                pass
            if catalog.recorded_position(recording_id) == position:
                recorded_at = time.monotonic()
            catalog.close()
        out.put((started, offered, recorded_at, position, recording_id, sent))
        if control is not None:
            control.stop_recording(channel, STREAM_ID)
            control.close()
        else:
            time.sleep(0.2)  # let the subscriber finish before the publication goes


def subscriber(
    aeron_dir: str,
    archive_dir: str | None,
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
        if archive_dir is not None:
            control = _connect_archive(aeron, aeron_dir, archive_dir)
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


class ArchivingDriver:
    """``python -m driver.archive --with-driver`` on fresh directories; stopped by pid and removed at the end."""

    def __init__(self, archive_dir: Path | None, segment_length: str) -> None:
        self.aeron_dir = fresh_aeron_dir("archive")
        self.archive_dir = archive_dir if archive_dir is not None else Path(f"{self.aeron_dir}-archive")
        self.log = Path(f"{self.aeron_dir}.log")
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


def run_recording(host: ArchivingDriver, channel: str, messages: int, batch: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    pub = ctx.Process(
        target=publisher, args=(str(host.aeron_dir), str(host.archive_dir), channel, messages, batch, ready, out)
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


def run_plain(host: ArchivingDriver, channel: str, messages: int, batch: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, pub_out, sub_out = ctx.Event(), ctx.Queue(), ctx.Queue()
    sub = ctx.Process(
        target=subscriber, args=(str(host.aeron_dir), None, channel, STREAM_ID, messages, -1, ready, sub_out)
    )
    sub.start()
    pub = ctx.Process(target=publisher, args=(str(host.aeron_dir), None, channel, messages, batch, ready, pub_out))
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


def run_replay(host: ArchivingDriver, recording_id: int, messages: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    sub = ctx.Process(
        target=subscriber,
        args=(
            str(host.aeron_dir),
            str(host.archive_dir),
            "aeron:ipc",
            REPLAY_STREAM_ID,
            messages,
            recording_id,
            ready,
            out,
        ),
    )
    sub.start()
    received, requested, first, last = out.get(timeout=RUN_TIMEOUT_S + 60)
    sub.join(60)
    return {
        "messages": received,
        "rate": received / (last - first) if last > first else 0.0,
        "from_request": received / (last - requested) if last > requested else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["all", "record", "replay"], default="all")
    parser.add_argument("--messages", type=int, default=3_000_000)
    parser.add_argument("--batch", type=int, default=64, help="messages per offer_batch call")
    parser.add_argument("--term-length", default="16m")
    parser.add_argument("--segment-length", default="128m")
    parser.add_argument("--archive-dir", type=Path, default=None, help="default: beside the driver in /dev/shm")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200,000 messages")
    args = parser.parse_args()
    messages = 200_000 if args.quick else args.messages
    channel = f"aeron:ipc?term-length={args.term_length}"
    archive_dir = args.archive_dir / f"archive-bench-{os.getpid()}" if args.archive_dir else None
    host = ArchivingDriver(archive_dir, args.segment_length)
    bars: list[tuple[str, float, bool]] = []
    try:
        recording: dict[str, Any] | None = None
        if args.mode in ("all", "record"):
            recording = run_recording(host, channel, messages, args.batch)
            plain = run_plain(host, channel, messages, args.batch)
            print_table(
                f"Archive recording, {MESSAGE_LENGTH}-byte messages over IPC ({channel}), "
                f"publisher and archive/subscriber in separate processes (batch {args.batch}, {messages:,} messages)",
                ["", "messages", "msgs/s", "MB/s", "publisher offers/s", "no loss", "x plain subscriber"],
                [
                    (
                        "recorded by the archive",
                        recording["messages"],
                        recording["rate"],
                        recording["rate"] * MESSAGE_LENGTH / 1e6,
                        recording["offer_rate"],
                        "yes" if recording["no_loss"] else "NO",
                        recording["rate"] / plain["rate"] if plain["rate"] else 0.0,
                    ),
                    (
                        "plain subscriber (peer)",
                        plain["messages"],
                        plain["rate"],
                        plain["rate"] * MESSAGE_LENGTH / 1e6,
                        plain["offer_rate"],
                        "yes" if plain["no_loss"] else "NO",
                        1.0,
                    ),
                ],
            )
            print("  (msgs/s: first offer until everything is recorded / received)")
            bars.append(("recording keeps up with >= 1,000,000 msgs/s", recording["rate"], recording["no_loss"]))
        if args.mode in ("all", "replay"):
            if recording is None:
                recording = run_recording(host, channel, messages, args.batch)
            replay = run_replay(host, recording["recording_id"], messages)
            live = run_plain(host, channel, messages, args.batch)
            print_table(
                f"Archive replay, {messages:,} {MESSAGE_LENGTH}-byte messages to a subscriber process over IPC",
                ["", "messages", "msgs/s", "MB/s", "x live stream"],
                [
                    (
                        "replay of the recording",
                        replay["messages"],
                        replay["rate"],
                        replay["rate"] * MESSAGE_LENGTH / 1e6,
                        replay["rate"] / live["first_to_last"] if live["first_to_last"] else 0.0,
                    ),
                    (
                        "live IPC stream (peer)",
                        live["messages"],
                        live["first_to_last"],
                        live["first_to_last"] * MESSAGE_LENGTH / 1e6,
                        1.0,
                    ),
                ],
            )
            print(
                f"  (msgs/s: the subscriber's first message to its last; replay from the request: "
                f"{replay['from_request']:,.0f} msgs/s)"
            )
            bars.append(
                ("replay delivers >= 1,000,000 msgs/s", replay["rate"], replay["messages"] == recording["messages"])
            )
    finally:
        host.close()
    print("\nBars")
    for what, rate, complete in bars:
        met = complete and rate >= BAR_MSGS_PER_S
        print(f"  {what}: {rate:,.0f} msgs/s -> {'met' if met else 'NOT met'}{'' if complete else ' (incomplete)'}")


if __name__ == "__main__":
    main()
