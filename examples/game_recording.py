"""Record a game-state stream with the archive, then compute per-player statistics on Spark.

::

    python examples/game_recording.py                          # 20 players, 600 ticks, Spark local[2]
    python examples/game_recording.py --players 100 --ticks 3000 --master 'local[*]'

The game loop publishes one ``PlayerState`` per player per tick on
``aeron:ipc`` stream 1001 (messages encoded with the examples' Serialization,
as an end point would). An archiving driver in this process records that
stream; when the game ends the publication closes and the recording stops at
the stream's end. Then a local Spark session reads the recording with the
``endpoint-archive`` data source, decodes the messages (``serialization``
option) and aggregates per player: ticks seen, distance travelled, top speed,
final score. The Spark part is ``player_stats_job.py``, which also runs on its own, or
unchanged under ``spark-submit`` on a cluster with the archive directory on
shared storage (``docs/pipeline.md``); ``--archive-dir`` keeps the recording
for that.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from messages import PlayerState, make_serialization
from player_stats_job import STATE_STREAM, player_stats, session

from driver.archive import ArchiveContext, ArchivingMediaDriver
from driver.client.aeron import Aeron
from driver.config import DriverContext

__all__ = ["main", "play"]

STATE_CHANNEL = "aeron:ipc?term-length=1m"


def play(aeron: Aeron, players: int, ticks: int, seed: int = 7) -> int:
    """Run the game loop, publishing every player's state each tick; returns the messages published."""
    rng = random.Random(seed)
    encode = make_serialization().encode
    xs = [rng.uniform(0, 100) for _ in range(players)]
    ys = [rng.uniform(0, 100) for _ in range(players)]
    scores = [0] * players
    speed = [rng.uniform(0.2, 2.0) for _ in range(players)]  # some players are simply faster
    published = 0
    with aeron.add_exclusive_publication(STATE_CHANNEL, STATE_STREAM) as publication:
        deadline = time.monotonic() + 10
        while not publication.is_connected:  # the archive's subscription
            if time.monotonic() > deadline:
                raise TimeoutError("the archive did not subscribe to the game-state stream")
            time.sleep(0.001)
        for tick in range(ticks):
            for p in range(players):
                angle = rng.uniform(0, 2 * math.pi)
                xs[p] = min(max(xs[p] + speed[p] * math.cos(angle), 0.0), 100.0)
                ys[p] = min(max(ys[p] + speed[p] * math.sin(angle), 0.0), 100.0)
                scores[p] += rng.random() < 0.05 * speed[p]
                message = encode(PlayerState(tick, p, xs[p], ys[p], scores[p]))
                give_up = time.monotonic() + 10
                while publication.offer(message) < 0:  # back pressure: the recorder is catching up
                    if time.monotonic() > give_up:
                        raise TimeoutError("the recording stopped taking the stream")
                    time.sleep(0.0001)
                published += 1
    return published


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=600)
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2], local[*], spark://host:7077)")
    parser.add_argument("--archive-dir", type=Path, help="record into this directory and keep it (default: a temp dir)")
    parser.add_argument("--no-spark", action="store_true", help="only record (e.g. for spark-submit later)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="game-recording-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    archive_dir = args.archive_dir or base / "archive"
    try:
        driver_context = DriverContext.from_env(aeron_dir=base / "aeron", dir_delete_on_shutdown=True)
        archive_context = ArchiveContext.from_env(archive_dir=archive_dir, segment_file_length="16m")
        with (
            ArchivingMediaDriver.launch(driver_context, archive_context) as both,
            Aeron.connect(aeron_dir=base / "aeron") as aeron,
        ):
            both.archive.start_recording(STATE_CHANNEL, STATE_STREAM)
            started = time.perf_counter()
            published = play(aeron, args.players, args.ticks)
            elapsed = time.perf_counter() - started
            deadline = time.monotonic() + 10
            while not (recordings := both.archive.recordings()) or recordings[-1].is_active:
                if time.monotonic() > deadline:
                    raise TimeoutError("the recording did not stop at the end of the stream")
                time.sleep(0.01)
            recording = recordings[-1]
            print(
                f"recorded {published} PlayerState messages in {elapsed:.2f} s: recording {recording.recording_id} "
                f"[{recording.start_position}, {recording.stop_position}) on {recording.original_channel}"
            )
        if args.no_spark:
            return 0
        spark = session(args.master)
        try:
            stats = player_stats(spark, str(archive_dir)).collect()
        finally:
            spark.stop()
        print(f"{'player':>6} {'ticks':>6} {'distance':>9} {'top speed':>9} {'score':>6}")
        for r in stats:
            print(f"{r.player:>6} {r.ticks:>6} {r.distance:>9.1f} {r.top_speed:>9.2f} {r.score:>6}")
        total = sum(r.ticks for r in stats)
        if total != published or len(stats) != args.players:
            print(f"MISMATCH: Spark saw {total} states of {len(stats)} players; published {published}")
            return 1
        print(f"game recording complete: {total} states of {len(stats)} players read back by Spark")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
