"""``loss``: the driver's loss report (LossStat) — per image, how often and how much data was lost.

The text output is Java LossStat's CSV, line for line; ``--json`` gives the
same entries as data. Loss is recorded by the receiver of a UDP stream when it
finds a gap it has to NAK; IPC streams never lose data and never appear here.
"""

from __future__ import annotations

import json

from driver.concurrent.loss_report import LossEntry, read_loss_report
from driver.tools.common import format_iso_time, format_java_time

__all__ = ["LOSS_STAT_HEADER", "format_loss", "loss_json", "read_loss_report"]

LOSS_STAT_HEADER = (
    "#OBSERVATION_COUNT, TOTAL_BYTES_LOST, FIRST_OBSERVATION, LAST_OBSERVATION, SESSION_ID, STREAM_ID, CHANNEL, SOURCE"
)


def format_loss(entries: list[LossEntry]) -> str:
    lines = [LOSS_STAT_HEADER]
    lines.extend(
        f"{e.observation_count},{e.total_bytes_lost},{format_java_time(e.first_observation_ms)},"
        f"{format_java_time(e.last_observation_ms)},{e.session_id},{e.stream_id},{e.channel},{e.source}"
        for e in entries
    )
    lines.append(f"{len(entries)} entries read")
    return "\n".join(lines) + "\n"


def loss_json(entries: list[LossEntry]) -> str:
    return (
        json.dumps(
            {
                "entries": [
                    {
                        "observation_count": e.observation_count,
                        "total_bytes_lost": e.total_bytes_lost,
                        "first_observation_ms": e.first_observation_ms,
                        "last_observation_ms": e.last_observation_ms,
                        "first_observation": format_iso_time(e.first_observation_ms),
                        "last_observation": format_iso_time(e.last_observation_ms),
                        "session_id": e.session_id,
                        "stream_id": e.stream_id,
                        "channel": e.channel,
                        "source": e.source,
                    }
                    for e in entries
                ]
            },
            indent=2,
        )
        + "\n"
    )
