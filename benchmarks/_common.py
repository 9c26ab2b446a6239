"""Shared helpers for the benchmarks: a standalone driver process, stats, result tables."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

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


def zmq_sink(address: str, messages: int, ready: Any, out: Any) -> None:
    """pyzmq PULL: count ``messages`` and report (received, seconds from the first to the last)."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.bind(address)
    ready.set()
    recv = sock.recv
    recv()
    start = time.perf_counter()
    received = 1
    while received < messages:
        recv()
        received += 1
    out.put((received, time.perf_counter() - start))
    sock.close(0)
    ctx.term()


def zmq_source(address: str, messages: int, ready: Any) -> None:
    """pyzmq PUSH: one ``send`` per message, as fast as it goes."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    ready.wait(30)
    sock.connect(address)
    send = sock.send
    payload = b"x" * MESSAGE_LENGTH
    for _ in range(messages):
        send(payload)
    sock.close(linger=10_000)
    ctx.term()


def run_zmq_push_pull(address: str, messages: int) -> tuple[int, float]:
    """PUSH and PULL in two processes over ``address``; (messages received, seconds)."""
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    sink = ctx.Process(target=zmq_sink, args=(address, messages, ready, out), daemon=True)
    sink.start()
    source = ctx.Process(target=zmq_source, args=(address, messages, ready), daemon=True)
    source.start()
    received, elapsed = out.get(timeout=300)
    source.join(60)
    sink.join(60)
    return received, elapsed


ROUND_TRIP_WARMUP = 2_000
_STAMP = struct.Struct("<q")


def _zmq_kinds(busy: bool, request_reply: bool) -> tuple[int, int]:
    import zmq

    if busy or not request_reply:
        return zmq.PAIR, zmq.PAIR
    return zmq.REQ, zmq.REP


def zmq_pong(address: str, busy: bool, request_reply: bool, ready: Any, stop: Any) -> None:
    """Echo every message until ``stop``; busy polls with NOBLOCK, else blocking receives."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(_zmq_kinds(busy, request_reply)[1])
    sock.bind(address)
    ready.set()
    sock.setsockopt(zmq.RCVTIMEO, 200)
    while not stop.is_set():
        try:
            msg = sock.recv(zmq.NOBLOCK) if busy else sock.recv()
        except zmq.Again:
            continue
        sock.send(msg)
    sock.close(0)
    ctx.term()


def zmq_ping(address: str, messages: int, busy: bool, request_reply: bool, out: Any) -> None:
    """Send timestamps, wait for each echo, report the round trips (ns) after a warm-up."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(_zmq_kinds(busy, request_reply)[0])
    sock.connect(address)
    now = time.perf_counter_ns
    buffer = bytearray(MESSAGE_LENGTH)
    rtts = []
    for i in range(messages + ROUND_TRIP_WARMUP):
        start = now()
        _STAMP.pack_into(buffer, 0, start)
        sock.send(buffer)
        while True:
            try:
                sock.recv(zmq.NOBLOCK if busy else 0)
                break
            except zmq.Again:
                continue
        if i >= ROUND_TRIP_WARMUP:
            rtts.append(now() - start)
    out.put(rtts)
    sock.close(0)
    ctx.term()


def run_zmq_round_trip(address: str, messages: int, busy: bool, request_reply: bool = False) -> list[int]:
    """Ping and pong in two processes over ``address``; the round trips in ns.

    Blocking receives use PAIR, or REQ/REP with ``request_reply``; busy polling uses PAIR.
    """
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    pong = ctx.Process(target=zmq_pong, args=(address, busy, request_reply, ready, stop), daemon=True)
    pong.start()
    ready.wait(60)
    ping = ctx.Process(target=zmq_ping, args=(address, messages, busy, request_reply, out), daemon=True)
    ping.start()
    rtts: list[int] = out.get(timeout=600)
    stop.set()
    ping.join(30)
    pong.join(30)
    return rtts


def driver_log(
    path: Path, session_id: int, stream_id: int, initial_term_id: int, term_length: int, *, image: bool = False
) -> Any:
    """A log file with its metadata as the driver writes it for a publication (or, with ``image``, an image):
    what the driver benchmarks build their publications and images on."""
    from driver.logbuffer import descriptor as lbd
    from driver.logbuffer.log_buffers import LogBuffers

    log = LogBuffers.create(path, term_length, 4096)
    initialize = lbd.initialize_image_metadata if image else lbd.initialize_publication_metadata
    initialize(
        log.metadata,
        session_id=session_id,
        stream_id=stream_id,
        initial_term_id=initial_term_id,
        mtu_length=1408,
        term_length=term_length,
        page_size=4096,
        correlation_id=session_id,
    )
    return log
