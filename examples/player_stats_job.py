"""The Spark job of the game example: per-player statistics from a recorded game-state stream.

Run it on this machine (an embedded Spark, ``local[2]``)::

    python examples/player_stats_job.py /path/to/archive

or submit the same file, unchanged, to a Spark cluster whose workers see the
archive directory (shared storage) and have ``endpoint`` installed::

    spark-submit --master spark://host:7077 \\
        --conf spark.pyspark.python=/opt/venv/bin/python \\
        --py-files examples/messages.py \\
        examples/player_stats_job.py /shared/archive

It prints one line per player (ticks seen, distance travelled, top speed,
final score) and a total line. See docs/pipeline.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from endpoint.pipeline import local_session, register

__all__ = ["STATE_STREAM", "main", "player_stats", "session"]

STATE_STREAM = 1001
EXAMPLES = Path(__file__).resolve().parent


def session(master: str | None) -> SparkSession:
    """Under spark-submit: the session it configured; otherwise an embedded one on ``master`` (local[2])."""
    if master is None and "PYSPARK_GATEWAY_PORT" in os.environ:  # launched by spark-submit
        spark = SparkSession.builder.appName("player-stats").getOrCreate()
        register(spark)
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        return spark
    return local_session("player-stats", master or "local[2]", python_path=[EXAMPLES])


def player_stats(spark: SparkSession, archive_dir: str) -> DataFrame:
    """Per player: ticks, distance, top speed (largest step), final score; best score first."""
    states = (
        spark.read.format("endpoint-archive")
        .option("stream_id", STATE_STREAM)
        .option("serialization", "messages:make_serialization")
        .load(archive_dir)
        .where(F.col("message_type") == "PlayerState")
        .select(F.from_json("message", "tick long, player int, x double, y double, score long").alias("s"))
        .select("s.*")
    )
    by_player = Window.partitionBy("player").orderBy("tick")
    dx = F.col("x") - F.lag("x").over(by_player)
    dy = F.col("y") - F.lag("y").over(by_player)
    return (
        states.withColumn("step", F.sqrt(dx * dx + dy * dy))
        .groupBy("player")
        .agg(
            F.count("*").alias("ticks"),
            F.coalesce(F.sum("step"), F.lit(0.0)).alias("distance"),
            F.coalesce(F.max("step"), F.lit(0.0)).alias("top_speed"),
            F.max("score").alias("score"),
        )
        .orderBy(F.desc("score"), "player")
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archive_dir", help="the archive directory holding the recording")
    parser.add_argument("--master", help="Spark master when not under spark-submit (default local[2])")
    args = parser.parse_args(argv)
    spark = session(args.master)
    try:
        rows = player_stats(spark, args.archive_dir).collect()
        print(f"{'player':>6} {'ticks':>6} {'distance':>9} {'top speed':>9} {'score':>6}")
        for r in rows:
            print(f"{r.player:>6} {r.ticks:>6} {r.distance:>9.1f} {r.top_speed:>9.2f} {r.score:>6}")
        total = sum(r.ticks for r in rows)
        print(f"player stats: {total} states of {len(rows)} players on {spark.sparkContext.master}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
