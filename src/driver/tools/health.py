"""``driver``: is a media driver alive in this directory? (exit 0 yes, 1 no — for scripts and health checks).

A driver is alive when its cnc.dat is ready and the conductor has stamped the
to-driver ring's consumer heartbeat within the driver timeout — the same test a
client makes before it connects (Aeron's ``CommonContext.isDriverActive``). The
pid is reported but not trusted on its own: in a container the driver's pid may
belong to another namespace, and a pid can be reused.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import attrs

from driver.cnc import CncFile
from driver.concurrent.error_log import read_error_log
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.concurrent.system_counters import CLIENT_HEARTBEAT_TYPE_ID
from driver.errors import DriverError
from driver.ownership import process_is_alive
from driver.tools.common import ToolError, format_iso_time, format_java_time, open_cnc, open_counters

__all__ = ["DEFAULT_DRIVER_TIMEOUT_MS", "DriverStatus", "check_driver", "format_status", "read_status", "status_json"]

DEFAULT_DRIVER_TIMEOUT_MS = 10_000


@attrs.frozen
class DriverStatus:
    """What ``driver`` reports; ``problem`` says why the directory could not be read, if it could not."""

    directory: Path
    alive: bool
    problem: str | None = None
    cnc_version: int | None = None
    generation: str | None = None
    pid: int | None = None
    pid_running: bool | None = None
    start_timestamp_ms: int | None = None
    heartbeat_ms: int | None = None
    heartbeat_age_ms: int | None = None
    client_count: int | None = None
    client_liveness_timeout_ns: int | None = None
    distinct_errors: int | None = None
    driver_timeout_ms: int = DEFAULT_DRIVER_TIMEOUT_MS


def read_status(cnc: CncFile, directory: Path, driver_timeout_ms: int, now_ms: int) -> DriverStatus:
    """The status of a driver whose cnc.dat is mapped."""
    heartbeat_ms = ManyToOneRingBuffer(cnc.to_driver_buffer).consumer_heartbeat_time()
    clients = 0

    def count(counter_id: int, type_id: int, key: bytes, label: str) -> None:
        nonlocal clients
        if type_id == CLIENT_HEARTBEAT_TYPE_ID:
            clients += 1

    open_counters(cnc).for_each(count)
    age = now_ms - heartbeat_ms
    pid = cnc.pid
    return DriverStatus(
        directory=directory,
        alive=heartbeat_ms > 0 and age <= driver_timeout_ms,
        cnc_version=cnc.version,
        generation=cnc.generation.label,
        pid=pid,
        pid_running=process_is_alive(pid),
        start_timestamp_ms=cnc.start_timestamp_ms,
        heartbeat_ms=heartbeat_ms,
        heartbeat_age_ms=age,
        client_count=clients,
        client_liveness_timeout_ns=cnc.client_liveness_timeout_ns,
        distinct_errors=len(read_error_log(cnc.error_log_buffer)),
        driver_timeout_ms=driver_timeout_ms,
    )


def check_driver(
    directory: Path, driver_timeout_ms: int = DEFAULT_DRIVER_TIMEOUT_MS, now_ms: int | None = None
) -> DriverStatus:
    """Never raises for the directory's state: an unreadable directory is a status with a ``problem``."""
    directory = Path(directory)
    try:
        cnc = open_cnc(directory)
    except ToolError as exc:
        return DriverStatus(directory=directory, alive=False, problem=str(exc), driver_timeout_ms=driver_timeout_ms)
    try:
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        return read_status(cnc, directory, driver_timeout_ms, now)
    except (DriverError, ValueError, IndexError) as exc:
        problem = f"{directory}: unreadable: {exc}"
        return DriverStatus(directory=directory, alive=False, problem=problem, driver_timeout_ms=driver_timeout_ms)
    finally:
        cnc.close()


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def format_status(status: DriverStatus) -> str:
    if status.problem is not None:
        return f"driver: NOT RUNNING\n  directory:  {status.directory}\n  reason:     {status.problem}\n"
    assert status.heartbeat_age_ms is not None
    assert status.start_timestamp_ms is not None
    age_s = status.heartbeat_age_ms / 1000
    verdict = "ALIVE" if status.alive else f"DEAD (heartbeat older than {status.driver_timeout_ms / 1000:g} s)"
    liveness_s = (status.client_liveness_timeout_ns or 0) / 1e9
    lines = [
        f"driver: {verdict}",
        f"  directory:       {status.directory}",
        f"  cnc version:     {status.generation}",
        f"  pid:             {status.pid} (process running here: {_yes_no(status.pid_running)})",
        f"  started:         {format_java_time(status.start_timestamp_ms)}",
        f"  heartbeat age:   {age_s:.3f} s",
        f"  clients:         {status.client_count}",
        f"  client liveness: {liveness_s:g} s",
        f"  distinct errors: {status.distinct_errors}",
    ]
    return "\n".join(lines) + "\n"


def status_json(status: DriverStatus) -> str:
    data: dict[str, object] = {
        "directory": str(status.directory),
        "alive": status.alive,
        "problem": status.problem,
        "cnc_version": status.cnc_version,
        "pid": status.pid,
        "pid_running": status.pid_running,
        "start_timestamp_ms": status.start_timestamp_ms,
        "start_time": None if status.start_timestamp_ms is None else format_iso_time(status.start_timestamp_ms),
        "heartbeat_ms": status.heartbeat_ms,
        "heartbeat_age_ms": status.heartbeat_age_ms,
        "client_count": status.client_count,
        "client_liveness_timeout_ns": status.client_liveness_timeout_ns,
        "distinct_errors": status.distinct_errors,
        "driver_timeout_ms": status.driver_timeout_ms,
    }
    return json.dumps(data, indent=2) + "\n"
