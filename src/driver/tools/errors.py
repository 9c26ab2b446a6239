"""``errors``: the driver's distinct error log (ErrorStat) — each error once, with its count and times.

The text output is Java ErrorStat's, line for line (times in local time as
Java's ``yyyy-MM-dd HH:mm:ss.SSSZ``), so scripts written for ErrorStat keep
working; ``--json`` gives the same records as data.
"""

from __future__ import annotations

import json

from driver.concurrent.error_log import ErrorObservation, read_error_log
from driver.tools.common import format_iso_time, format_java_time

__all__ = ["errors_json", "format_errors", "read_error_log"]


def format_errors(observations: list[ErrorObservation]) -> str:
    """ErrorStat's body: one ``***`` block per distinct error, then the count."""
    parts = [
        f"***\n{o.observation_count} observations from {format_java_time(o.first_observation_ms)} "
        f"to {format_java_time(o.last_observation_ms)} for:\n {o.text}\n"
        for o in observations
    ]
    parts.append(f"\n{len(observations)} distinct errors observed.\n")
    return "".join(parts)


def errors_json(observations: list[ErrorObservation]) -> str:
    return (
        json.dumps(
            {
                "distinct_errors": len(observations),
                "errors": [
                    {
                        "observation_count": o.observation_count,
                        "first_observation_ms": o.first_observation_ms,
                        "last_observation_ms": o.last_observation_ms,
                        "first_observation": format_iso_time(o.first_observation_ms),
                        "last_observation": format_iso_time(o.last_observation_ms),
                        "text": o.text,
                    }
                    for o in observations
                ],
            },
            indent=2,
        )
        + "\n"
    )
