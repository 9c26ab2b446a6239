"""Shared helpers for the benchmarks: a standalone driver process, stats, result tables."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

MESSAGE_LENGTH = 32


def fresh_aeron_dir(tag: str) -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return base / f"endpoint-bench-{tag}-{os.getpid()}-{os.urandom(3).hex()}"


@contextlib.contextmanager
def standalone_driver(
    aeron_dir: Path, idle: str = "backoff", extra: Sequence[str] = ()
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python -m driver`` on ``aeron_dir`` until the block ends."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "driver",
            "--dir",
            str(aeron_dir),
            "--threading-mode",
            "SHARED",
            "--idle-strategy",
            idle,
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        cnc = aeron_dir / "cnc.dat"
        while not (cnc.exists() and cnc.stat().st_size > 0 and int.from_bytes(cnc.read_bytes()[:4], "little")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"standalone driver did not start (exit {proc.returncode})")
            time.sleep(0.05)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
        shutil.rmtree(aeron_dir, ignore_errors=True)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[index]


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [list(map(str, header))] + [
        [
            f"{c:,.0f}" if isinstance(c, float) and c >= 100 else (f"{c:.2f}" if isinstance(c, float) else str(c))
            for c in r
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))
