"""Follow a live recording with Spark Structured Streaming: per-player counts while the game runs.

::

    python examples/live_stats.py                 # 10 players at 50 ticks/s for 8 s, Spark local[2]
    python examples/live_stats.py --duration 30 --rate 200

A game loop thread publishes ``PlayerState`` messages; the archive records the
stream as it flows; a streaming query reads the growing recording
(``spark.readStream.format("endpoint-archive")``: each micro-batch takes what
was recorded since the last one, with recording positions as its offsets) and
keeps a running table of states and best score per player, printed once per
trigger. When the game stops, the query drains what is left and the totals
are checked against what was published. With a checkpoint location the same
query restarts where it stopped, without duplicates or gaps.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from messages import PlayerState, make_serialization

from driver.archive import ArchiveContext, ArchivingMediaDriver
from driver.client.aeron import Aeron
from driver.config import DriverContext

__all__ = ["main"]

STATE_CHANNEL = "aeron:ipc?term-length=1m"
STATE_STREAM = 1002
EXAMPLES = Path(__file__).resolve().parent


class Game(threading.Thread):
    """Publishes every player's state ``rate`` times a second until stopped."""

    def __init__(self, aeron: Aeron, players: int, rate: float) -> None:
        super().__init__(name="game", daemon=True)
        self.aeron = aeron
        self.players = players
        self.rate = rate
        self.published = 0
        self.error: BaseException | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        try:
            self._play()
        except BaseException as exc:
            self.error = exc

    def _play(self) -> None:
        rng = random.Random(11)
        encode = make_serialization().encode
        xs = [50.0] * self.players
        ys = [50.0] * self.players
        scores = [0] * self.players
        with self.aeron.add_exclusive_publication(STATE_CHANNEL, STATE_STREAM) as publication:
            tick = 0
            period = 1.0 / self.rate
            next_tick = time.monotonic()
            while not self.stop_event.is_set():
                for p in range(self.players):
                    angle = rng.uniform(0, 2 * math.pi)
                    xs[p] += math.cos(angle)
                    ys[p] += math.sin(angle)
                    scores[p] += rng.random() < 0.1
                    message = encode(PlayerState(tick, p, xs[p], ys[p], scores[p]))
                    give_up = time.monotonic() + 10
                    while publication.offer(message) < 0:
                        if time.monotonic() > give_up:
                            raise TimeoutError("nobody took the game-state stream for 10 s")
                        time.sleep(0.0005)
                    self.published += 1
                tick += 1
                next_tick += period
                self.stop_event.wait(max(0.0, next_tick - time.monotonic()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--players", type=int, default=10)
    parser.add_argument("--rate", type=float, default=50.0, help="ticks per second")
    parser.add_argument(
        "--duration", type=float, default=20.0, help="seconds the game runs (the first micro-batch takes several)"
    )
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="live-stats-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    archive_dir = base / "archive"
    from pyspark.sql import functions as F

    from endpoint.pipeline import local_session

    spark = local_session("live-stats", args.master, python_path=[EXAMPLES])
    try:
        driver_context = DriverContext.from_env(aeron_dir=base / "aeron", dir_delete_on_shutdown=True)
        archive_context = ArchiveContext.from_env(archive_dir=archive_dir, segment_file_length="16m")
        with (
            ArchivingMediaDriver.launch(driver_context, archive_context) as both,
            Aeron.connect(aeron_dir=base / "aeron") as aeron,
        ):
            both.archive.start_recording(STATE_CHANNEL, STATE_STREAM)
            game = Game(aeron, args.players, args.rate)
            game.start()
            deadline = time.monotonic() + 10
            while not both.archive.recordings():
                if time.monotonic() > deadline:
                    raise TimeoutError("no recording started")
                time.sleep(0.01)
            states = (
                spark.readStream.format("endpoint-archive")
                .option("stream_id", STATE_STREAM)
                .option("serialization", "messages:make_serialization")
                .load(str(archive_dir))
                .where(F.col("message_type") == "PlayerState")
                .select(F.from_json("message", "tick long, player int, score long").alias("s"))
                .select("s.*")
            )
            table = states.groupBy("player").agg(F.count("*").alias("states"), F.max("score").alias("score"))
            query = (
                table.writeStream.outputMode("complete")
                .format("memory")
                .queryName("live_players")
                .option("checkpointLocation", str(base / "checkpoint"))
                .trigger(processingTime="1 second")
                .start()
            )
            try:
                end = time.monotonic() + args.duration
                while time.monotonic() < end and game.error is None:
                    time.sleep(1.0)
                    rows = spark.sql("select * from live_players order by score desc, player").collect()
                    seen = sum(r.states for r in rows)
                    leader = f"leader player {rows[0].player} score {rows[0].score}" if rows else "no rows yet"
                    print(f"live: published {game.published:>7}  counted by Spark {seen:>7}  {leader}", flush=True)
                game.stop_event.set()
                game.join(10)
                if game.error is not None:
                    raise game.error
                while both.archive.recordings()[-1].is_active:
                    if time.monotonic() > end + 20:
                        raise TimeoutError("the recording did not stop after the game")
                    time.sleep(0.05)
                query.processAllAvailable()
                rows = spark.sql("select * from live_players").collect()
            finally:
                query.stop()
        total = sum(r.states for r in rows)
        print(f"final: {len(rows)} players, {total} states counted, {game.published} published")
        if total != game.published:
            print("MISMATCH between what was published and what the stream counted")
            return 1
        print("live stats complete: every published state counted exactly once")
        return 0
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
