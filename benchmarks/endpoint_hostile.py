"""A legitimate client's connect time and round trip while the server is attacked, in one run.

    python benchmarks/endpoint_hostile.py [--connects 20] [--probes 500] [--flood-rate 20000] [--quick]

A ``Server`` process (UDP on 127.0.0.1, embedded driver, default limits) sends every ``Probe`` back. For each
phase a flooder process starts sending from eight loopback sources (127.0.0.2 to 127.0.0.9) at ``--flood-rate``
datagrams a second; once it has run for half a second, ``--connects`` fresh clients connect one after another
(each its own end point and driver directory, ``prefer_ipc=False``, closed again) and one connection measures
``--probes`` round trips, one probe in flight. The phases:

- ``none``: no attack (the baseline of the ratio columns);
- ``garbage``: random datagrams of 1 to 1,400 bytes;
- ``forged SETUPs``: a SETUP for the server's handshake stream with a fresh session id each, the first
  :data:`HUGE_SETUPS` asking for a 64 MiB term (an image of three such terms is what a driver without limits
  creates and fills for each), the rest for 64 KiB;
- ``never-completing HELLOs``: a SETUP and a HELLO data frame per forged client route (fresh session id, a reply
  port nobody listens on), so the server would open a handshake for each if it believed the route.

While a phase runs, the parent samples the server's driver directory (bytes allocated on disk, so sparse logs
count for what they hold), the counters allocated in its ``cnc.dat`` and the server's RSS every 50 ms; the
table prints their high-water marks. A phase whose server directory passes :data:`DISK_LIMIT` (RAM, under
/dev/shm) is stopped there and says so. A last table puts one connection's throughput with sealed messages
beside the plain one: ``--sealed-messages`` small messages one way over one UDP connection and one IPC
connection, sent with ``send_nowait`` (no attack), plain and with ``sealed=True`` on both ends, measured as
``benchmarks/endpoint_throughput.py`` measures its rows (whose code it runs), with the ratio and the CPU each
message costs the sender and the receiver.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import random
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_aeron_dir, percentile, print_table
from _endpoint_common import Probe, free_udp_port, rss_bytes, serialization, serve_until_stopped
from endpoint_throughput import Result, run_endpoint

from driver.cnc import CncFile
from driver.concurrent.counters import CountersReader
from driver.logbuffer.frame import FRAME_ALIGNMENT, HDR_TYPE_DATA, UNFRAGMENTED
from driver.wire.data import DATA_HEADER_LENGTH, write_data_header
from driver.wire.setup import SETUP_LENGTH, write_setup
from endpoint.config import HANDSHAKE_STREAM_ID

SOURCES = [f"127.0.0.{i}" for i in range(2, 10)]
HUGE_TERM_LENGTH = 64 << 20
HUGE_SETUPS = 4
DISK_LIMIT = 2 << 30
PHASE_TIMEOUT_S = 120.0
PHASES = ("none", "garbage", "forged SETUPs", "never-completing HELLOs")


# -- the server -----------------------------------------------------------------------------------------------------


def echo_server(aeron_dir: str, port: int, ready: Any, stop: Any, out: Any) -> None:
    from endpoint import Connection, Server, ServerConfiguration

    server = Server(ServerConfiguration(port=port, aeron_dir=aeron_dir, serialization=serialization()))

    @server.on_message(Probe)
    def echo(conn: Connection, message: Probe) -> None:
        conn.send_nowait(message)

    asyncio.run(serve_until_stopped(server, ready, stop, out, 3600))


# -- the floods -------------------------------------------------------------------------------------------------------


def garbage(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(1, 1400))


def forged_setup(rng: random.Random, term_length: int) -> bytes:
    frame = bytearray(SETUP_LENGTH)
    write_setup(
        frame,
        0,
        session_id=rng.randint(1, 0x7FFF_FFFF),
        stream_id=HANDSHAKE_STREAM_ID,
        initial_term_id=0,
        active_term_id=0,
        term_offset=0,
        term_length=term_length,
        mtu=1408,
        ttl=0,
    )
    return bytes(frame)


def forged_hello_route(rng: random.Random) -> list[bytes]:
    """A SETUP and a data frame carrying a HELLO whose reply port nobody listens on."""
    session_id = rng.randint(1, 0x7FFF_FFFF)
    setup = bytearray(SETUP_LENGTH)
    write_setup(
        setup,
        0,
        session_id=session_id,
        stream_id=HANDSHAKE_STREAM_ID,
        initial_term_id=0,
        active_term_id=0,
        term_offset=0,
        term_length=64 * 1024,
        mtu=1408,
        ttl=0,
    )
    payload = forged_hello(rng)
    data = bytearray(-(-(DATA_HEADER_LENGTH + len(payload)) // FRAME_ALIGNMENT) * FRAME_ALIGNMENT)
    write_data_header(
        data,
        0,
        frame_length=DATA_HEADER_LENGTH + len(payload),
        flags=UNFRAGMENTED,
        frame_type=HDR_TYPE_DATA,
        term_offset=0,
        session_id=session_id,
        stream_id=HANDSHAKE_STREAM_ID,
        term_id=0,
    )
    data[DATA_HEADER_LENGTH : DATA_HEADER_LENGTH + len(payload)] = payload
    return [bytes(setup), bytes(data)]


def forged_hello(rng: random.Random) -> bytes:
    """A well-formed HELLO of a client that will never answer (reply to a port nobody holds)."""
    from endpoint.handshake.protocol import ClientHandshake

    handshake = ClientHandshake(
        registration_hash=serialization().registration_hash,
        reply={"port": rng.randint(20000, 60000)},
    )
    return handshake.hello(time.time_ns())


FLOODS: dict[str, Callable[[random.Random, int], list[bytes]]] = {
    "garbage": lambda rng, _: [garbage(rng)],
    "forged SETUPs": lambda rng, n: [forged_setup(rng, HUGE_TERM_LENGTH if n < HUGE_SETUPS else 64 * 1024)],
    "never-completing HELLOs": lambda rng, _: forged_hello_route(rng),
}


def flooder(kind: str, port: int, rate: int, ready: Any, stop: Any, sent: Any) -> None:
    """Send ``kind`` datagrams to the server at ``rate`` a second, round-robin over the sources, until ``stop``."""
    rng = random.Random(1)
    socks = []
    for source in SOURCES:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((source, 0))
        sock.setblocking(False)
        socks.append(sock)
    make = FLOODS[kind]
    count = 0
    start = time.monotonic()
    ready.set()
    deadline = start + PHASE_TIMEOUT_S
    while not stop.is_set() and time.monotonic() < deadline:
        due = int((time.monotonic() - start) * rate)
        while count < due:
            for datagram in make(rng, count):
                with contextlib.suppress(BlockingIOError):
                    socks[count % len(socks)].sendto(datagram, ("127.0.0.1", port))
            count += 1
        time.sleep(0.001)
    sent.value = count
    for sock in socks:
        sock.close()


# -- the server's resources ---------------------------------------------------------------------------------------


class HighWater:
    """Samples the server's allocated directory bytes, counters and RSS every 50 ms on a thread."""

    def __init__(self, aeron_dir: Path, pid: int, on_over: Callable[[], None]) -> None:
        self._dir = aeron_dir
        self._pid = pid
        self._on_over = on_over
        self.over = False
        """The directory passed :data:`DISK_LIMIT`; ``on_over`` was called to stop the flood."""
        self.disk = self.counters = self.rss = 0
        self._stop = threading.Event()
        self._cnc = CncFile.map_existing(aeron_dir, timeout_s=10)
        self._reader = CountersReader(self._cnc.counters_metadata_buffer, self._cnc.counters_values_buffer)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HighWater:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._cnc.close()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sample()

    def sample(self) -> None:
        disk = 0
        for root, _, files in os.walk(self._dir):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    disk += os.stat(os.path.join(root, name)).st_blocks * 512
        counted = [0]
        self._reader.for_each(lambda *_: counted.__setitem__(0, counted[0] + 1))
        self.disk = max(self.disk, disk)
        if disk > DISK_LIMIT and not self.over:
            self.over = True
            self._on_over()
        self.counters = max(self.counters, counted[0])
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            self.rss = max(self.rss, rss_bytes(self._pid))


# -- the legitimate client ---------------------------------------------------------------------------------------------


async def legitimate(port: int, connects: int, probes: int, connect_ms: list[float], rtt_us: list[float]) -> None:
    """Connect times (ms) of the fresh clients that connected, and round trips (us) on one connection."""
    from endpoint import Client, ClientConfiguration, Connection, EndpointError

    for _ in range(connects):
        aeron_dir = fresh_aeron_dir("hostile-cli")
        config = ClientConfiguration(
            aeron_dir=aeron_dir, serialization=serialization(), prefer_ipc=False, connect_timeout=10
        )
        try:
            async with Client(config) as client:
                start = time.perf_counter()
                try:
                    await client.connect("127.0.0.1", port)
                except EndpointError as exc:
                    print(f"  a legitimate connect failed: {type(exc).__name__}: {exc}")
                    continue
                connect_ms.append((time.perf_counter() - start) * 1e3)
        finally:
            shutil.rmtree(aeron_dir, ignore_errors=True)

    aeron_dir = fresh_aeron_dir("hostile-rtt")
    config = ClientConfiguration(aeron_dir=aeron_dir, serialization=serialization(), prefer_ipc=False)
    try:
        async with Client(config) as client:
            loop = asyncio.get_running_loop()
            waiter: list[asyncio.Future[Probe]] = []

            @client.on_message(Probe)
            def on_probe(conn: Connection, message: Probe) -> None:
                if waiter and not waiter[0].done():
                    waiter[0].set_result(message)

            conn = await client.connect("127.0.0.1", port)
            for i in range(probes):
                future: asyncio.Future[Probe] = loop.create_future()
                waiter[:] = [future]
                start_ns = time.perf_counter_ns()
                await conn.send(Probe(i, start_ns))
                await asyncio.wait_for(future, 10)
                rtt_us.append((time.perf_counter_ns() - start_ns) / 1e3)
    finally:
        shutil.rmtree(aeron_dir, ignore_errors=True)


# -- the run --------------------------------------------------------------------------------------------------------


def run_phase(
    ctx: Any, phase: str, port: int, server_dir: Path, server_pid: int, args: argparse.Namespace
) -> list[object]:
    stop = ctx.Event()
    ready = ctx.Event()
    sent = ctx.Value("q", 0)
    flood = None
    if phase != "none":
        flood = ctx.Process(target=flooder, args=(phase, port, args.flood_rate, ready, stop, sent), daemon=True)
        flood.start()
        if not ready.wait(30):
            raise RuntimeError("the flooder did not start")
        time.sleep(0.5)
    connect_ms: list[float] = []
    rtt_us: list[float] = []
    note = ""
    try:
        with HighWater(server_dir, server_pid, stop.set) as marks:
            try:
                asyncio.run(legitimate(port, args.connects, args.probes, connect_ms, rtt_us))
            except Exception as exc:
                note = f"{type(exc).__name__}: {exc}"[:120]
            marks.sample()
    finally:
        stop.set()
        if flood is not None:
            flood.join(10)
            if flood.is_alive():
                flood.kill()
    connect_ms.sort()
    rtt_us.sort()
    return [
        phase,
        sent.value,
        f"{len(connect_ms)}/{args.connects}",
        percentile(connect_ms, 50),
        percentile(connect_ms, 99),
        percentile(rtt_us, 50),
        percentile(rtt_us, 99),
        f"{marks.disk / 2**20:.1f}",
        marks.counters,
        f"{marks.rss / 2**20:.0f}",
        ("flood stopped at the disk limit; " if marks.over else "") + note,
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connects", type=int, default=20)
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--flood-rate", type=int, default=20_000, help="datagrams (or forged routes) a second")
    parser.add_argument("--sealed-messages", type=int, default=200_000, help="messages per sealed-vs-plain row")
    parser.add_argument("--quick", action="store_true", help="a few connects and probes, a slower flood")
    args = parser.parse_args(argv)
    if args.quick:
        args.connects, args.probes, args.flood_rate, args.sealed_messages = 3, 50, 2_000, 20_000

    ctx = mp.get_context("spawn")
    port = free_udp_port()
    server_dir = fresh_aeron_dir("hostile-srv")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    server = ctx.Process(target=echo_server, args=(str(server_dir), port, ready, stop, out), daemon=True)
    server.start()
    rows: list[list[object]] = []
    try:
        if not ready.wait(60):
            raise RuntimeError(f"the server did not start: {out.get_nowait() if not out.empty() else 'no word'}")
        assert server.pid is not None
        for phase in PHASES:
            rows.append(run_phase(ctx, phase, port, server_dir, server.pid, args))
    finally:
        stop.set()
        server.join(20)
        if server.is_alive():
            server.kill()
        shutil.rmtree(server_dir, ignore_errors=True)

    base_connect, base_rtt = rows[0][3], rows[0][5]
    print_table(
        f"Under attack: a legitimate UDP client ({args.connects} connects, {args.probes} round trips), "
        f"flood {args.flood_rate:,}/s from {len(SOURCES)} sources",
        [
            "attack",
            "sent",
            "connected",
            "connect p50 ms",
            "p99 ms",
            "rtt p50 us",
            "p99 us",
            "server dir MiB (max)",
            "counters (max)",
            "server RSS MiB (max)",
            "note",
        ],
        rows,
    )
    print_table(
        "Ratios to no attack",
        ["attack", "connect p50 x", "rtt p50 x"],
        [[row[0], _ratio(row[3], base_connect), _ratio(row[5], base_rtt)] for row in rows[1:]],
    )
    sealed_table(args.sealed_messages)


def sealed_table(messages: int) -> None:
    """Plain beside sealed, one connection each, over UDP and IPC (the throughput benchmark's own rows)."""
    rows: list[list[object]] = []
    for transport in ("UDP", "IPC"):
        results: dict[bool, Result | None] = {}
        for sealed in (False, True):
            try:
                results[sealed] = run_endpoint(
                    messages, "send_nowait", transport == "UDP", 64 * 1024, "INVOKER", False, sealed
                )
            except Exception as exc:  # one broken row must not hide the other
                print(f"  {transport} sealed={sealed}: FAILED: {exc}", file=sys.stderr, flush=True)
                results[sealed] = None
        plain, sealed_result = results[False], results[True]
        rows.append(
            [
                transport,
                _rate(plain),
                _rate(sealed_result),
                _ratio(_rate(sealed_result), _rate(plain)),
                _cpu_us(plain, sender=True),
                _cpu_us(sealed_result, sender=True),
                _cpu_us(plain, sender=False),
                _cpu_us(sealed_result, sender=False),
            ]
        )
    print_table(
        f"Sealed connections: one connection, one way, {messages:,} Move messages with send_nowait, no attack",
        [
            "transport",
            "plain msgs/s",
            "sealed msgs/s",
            "sealed / plain",
            "sender CPU us/msg plain",
            "sealed",
            "receiver CPU us/msg plain",
            "sealed",
        ],
        rows,
    )


def _rate(result: Result | None) -> float | str:
    return result.received / result.seconds if result is not None and result.seconds else "-"


def _cpu_us(result: Result | None, *, sender: bool) -> float | str:
    if result is None or not result.received:
        return "-"
    return (result.sender_cpu if sender else result.receiver_cpu) / result.received * 1e6


def _ratio(value: object, base: object) -> str:
    ok = isinstance(value, float) and isinstance(base, float) and base > 0
    return f"{value / base:.2f}" if ok else "-"  # type: ignore[operator]


if __name__ == "__main__":
    main()
