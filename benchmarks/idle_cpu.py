"""CPU used by an idle driver and an idle connected client, over a fixed window.

    python benchmarks/idle_cpu.py [--seconds 10] [--no-java]

Rows: our standalone driver (``python -m driver``, default backoff idle strategy),
an end point ``Server`` in a process of its own attached to that driver (bound,
no connections: its event loop and its driver client's conductor thread), a
process holding an embedded driver plus a connected client with a publication
and a subscription (nothing sent), and — as the peer — Aeron Java 1.15.1's
MediaDriver (SHARED, its BackoffIdleStrategy), fetched like the interop tests do.
CPU is user+system time from /proc/<pid>/stat over the window, as % of one core.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import fresh_aeron_dir, print_table, standalone_driver  # noqa: E402

CLIENT_SCRIPT = """
import sys, time
from driver.core.media_driver import MediaDriver
from driver.client import Aeron
with MediaDriver.launch_embedded() as d, Aeron.connect(aeron_dir=d.aeron_dir) as a:
    a.add_subscription("aeron:ipc", 1); a.add_publication("aeron:ipc", 1)
    print("ready", flush=True)
    sys.stdin.read()
"""

SERVER_SCRIPT = """
import asyncio, sys
from endpoint import Server, ServerConfiguration
async def main():
    config = ServerConfiguration(aeron_dir=sys.argv[1], launch_driver=False, port=0, listen_address="127.0.0.1")
    server = Server(config)
    await server.bind()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await server.close()
asyncio.run(main())
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(pid: int, seconds: float, settle: float = 2.0) -> float:
    time.sleep(settle)
    start = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - start) / seconds * 100


@contextlib.contextmanager
def script_process(script: str, *args: str) -> Iterator[int]:
    """A Python process running ``script`` until its stdin closes; yields its pid once it printed a line."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)


@contextlib.contextmanager
def java_driver(aeron_dir: Path) -> Iterator[int]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.aeron_java import AeronJava, start_java_media_driver

    peer = AeronJava.ensure()
    log = Path(f"{aeron_dir}.log")
    driver = start_java_media_driver(peer, aeron_dir, log)
    try:
        yield driver.pid
    finally:
        AeronJava.stop(driver.process)
        log.unlink(missing_ok=True)
        shutil.rmtree(aeron_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-java", action="store_true", help="skip the Aeron Java peer row")
    args = parser.parse_args()
    rows = []
    aeron_dir = fresh_aeron_dir("idle")
    with standalone_driver(aeron_dir) as proc:
        rows.append(("endpoint standalone driver (backoff)", measure(proc.pid, args.seconds)))
        with script_process(SERVER_SCRIPT, str(aeron_dir)) as pid:
            rows.append(("endpoint Server attached to it (bound, no connections)", measure(pid, args.seconds)))
    with script_process(CLIENT_SCRIPT) as pid:
        rows.append(("endpoint embedded driver + client", measure(pid, args.seconds)))
    if not args.no_java:
        java_dir = fresh_aeron_dir("idle-java")
        with java_driver(java_dir) as pid:
            rows.append(("Aeron Java 1.15.1 MediaDriver (SHARED, backoff)", measure(pid, args.seconds)))
    print_table(f"Idle CPU over {args.seconds:g} s, % of one core", ["", "% core"], rows)


if __name__ == "__main__":
    main()
