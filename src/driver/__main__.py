"""Standalone media driver, like Aeron's ``aeronmd``: ``python -m driver`` or ``aeron-driver``.

Settings come from Aeron's environment variables (``AERON_DIR``, ...), then
``-D aeron.x=y`` properties, then the flags below, later ones winning.
SIGTERM and SIGINT stop it and remove its directory (``--keep-dir`` keeps it).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from driver.errors import DriverError
from driver.idle import BackoffIdleStrategy
from driver.logs import log_warnings_to_stderr

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m driver", description="Run a standalone media driver.")
    p.add_argument("-d", "--dir", dest="aeron_dir", help="driver directory (aeron.dir)")
    p.add_argument(
        "-t",
        "--threading-mode",
        choices=["DEDICATED", "SHARED_NETWORK", "SHARED", "INVOKER"],
        help="aeron.threading.mode",
    )
    p.add_argument("--idle-strategy", help="idle strategy for every agent: backoff, busy_spin, yielding, sleeping")
    p.add_argument("--term-buffer-length", help="aeron.term.buffer.length (e.g. 16m)")
    p.add_argument("--ipc-term-buffer-length", help="aeron.ipc.term.buffer.length (e.g. 64m)")
    p.add_argument("--delete-dir-on-start", action="store_true", default=None, help="aeron.dir.delete.on.start")
    p.add_argument("--delete-dir-on-shutdown", action="store_true", default=None, help="aeron.dir.delete.on.shutdown")
    p.add_argument(
        "--keep-dir",
        action="store_true",
        help="keep the directory when stopped by SIGTERM or SIGINT (by default it is removed: it lives in memory)",
    )
    p.add_argument(
        "-D",
        dest="properties",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any Aeron property, e.g. -D aeron.client.liveness.timeout=5s",
    )
    return p


def build_context(argv: Sequence[str] | None = None) -> DriverContext:
    args = _parser().parse_args(argv)
    properties: dict[str, str] = {}
    for item in args.properties:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"-D {item!r}: expected NAME=VALUE")
        properties[name.strip()] = value.strip()
    flags = {
        "aeron.dir": args.aeron_dir,
        "aeron.threading.mode": args.threading_mode,
        "aeron.term.buffer.length": args.term_buffer_length,
        "aeron.ipc.term.buffer.length": args.ipc_term_buffer_length,
        "aeron.dir.delete.on.start": None if args.delete_dir_on_start is None else "true",
        "aeron.dir.delete.on.shutdown": None if args.delete_dir_on_shutdown is None else "true",
    }
    if args.idle_strategy:
        for agent in ("conductor", "sender", "receiver", "shared", "sharednetwork"):
            flags[f"aeron.{agent}.idle.strategy"] = args.idle_strategy
    properties.update({k: v for k, v in flags.items() if v is not None})
    return DriverContext.from_env(properties=properties)


def main(argv: Sequence[str] | None = None) -> int:
    keep_dir = _parser().parse_args(argv).keep_dir
    log_warnings_to_stderr()
    try:
        context = build_context(argv).conclude()
        driver = MediaDriver.launch(context)
    except DriverError as exc:
        print(f"driver: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    stopped_by: list[int] = []

    def _on_signal(signum: int, frame: object) -> None:
        stopped_by.append(signum)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    print(f"driver: running in {driver.aeron_dir} ({context.threading_mode.name}); Ctrl-C stops it", flush=True)
    try:
        invoker = driver.invoker
        terminate = driver.termination_requested
        if invoker is None:
            while not stop.wait(0.05) and not terminate.is_set():
                pass
        else:
            idle = BackoffIdleStrategy()
            while not stop.is_set() and not terminate.is_set():
                idle.idle(invoker.invoke())
        if terminate.is_set():
            print("driver: terminated by a client's request", flush=True)
    finally:
        # Stopped by a signal (a supervisor, Ctrl-C): remove the directory, which sits in memory (/dev/shm),
        # unless asked to keep it. Removed before the lock is let go, so a successor's directory is never hit.
        driver.close(delete_dir=True if stopped_by and not keep_dir else None)
    print("driver: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
