"""Shared parts of the end point (Server/Client) benchmarks: message classes, child processes, /proc readings.

The message classes live here, not in the benchmark scripts, because the
registration hash covers each class's module name: a class defined in a script
is ``__main__.Move`` in the parent and ``__mp_main__.Move`` in a spawned child,
and the handshake would refuse the mismatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from endpoint import Serialization


@attrs.define(slots=True)
class Move:
    """The small message of the throughput runs."""

    seq: int
    x: float
    y: float


@attrs.define(slots=True)
class Probe:
    """The round-trip message: the client stamps it, the server sends it back."""

    seq: int
    sent_ns: int


def serialization() -> Serialization:
    ser = Serialization()
    ser.register(Move)
    ser.register(Probe)
    return ser


# -- the game benchmark's messages (benchmarks/game_server.py) -----------------------------------------------------


@attrs.define(slots=True)
class Input:
    """A player's input, 20 a second: which way it steers, and when it was sent (``time.monotonic_ns``)."""

    seq: int
    dx: float
    dy: float
    sent_ns: int


@attrs.define(slots=True)
class Snapshot:
    """What the server sends each player every tick: the tick, when it was sent (``time.monotonic_ns``, one clock
    for every process on the machine) and its nearest players as ``[id, x, y]`` lists."""

    tick: int
    sent_ns: int
    players: list[list[float]]


def game_serialization() -> Serialization:
    ser = Serialization()
    ser.register(Input, type_id=1)
    ser.register(Snapshot, type_id=2)
    return ser


# -- the RPC benchmark's interface (benchmarks/rpc_calls.py) ------------------------------------------------------


SKU = "sku-0123456789abcdef0123456789ab"
"""The 32-character string of every call."""
assert len(SKU) == 32
CALC_OBJECT_ID = 1


@attrs.define(slots=True)
class Order:
    """The argument of every call: an int and a 32-byte string."""

    qty: int
    sku: str


class Pricing(Protocol):
    """The remote interface: ``price(order)`` answers an int."""

    async def price(self, order: Order) -> int: ...


def price_of(qty: int, sku: str) -> int:
    """What every server (ours, grpcio, pyzmq) computes: the same tiny piece of work."""
    return qty * 3 + len(sku)


class PricingService:
    """Our server's implementation (an ``async def``, as a user would write it; it never suspends)."""

    async def price(self, order: Order) -> int:
        return price_of(order.qty, order.sku)


def rpc_serialization() -> Serialization:
    ser = Serialization()
    ser.register(Order, type_id=1)
    return ser


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_port_both() -> int:
    """A port free for UDP and TCP alike (an end point server takes the UDP one)."""
    for _ in range(100):
        port = free_udp_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no port free for both UDP and TCP")


_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads) from ``/proc/<pid>/stat``."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def context_switches(pid: int) -> int:
    """Times the threads of ``pid`` gave up a core, voluntarily or not (``/proc/<pid>/task/*/status``): its wake-ups.

    Each voluntary switch is a sleep that something later ended (a timer, a datagram, another thread), so over an
    idle window this counts how often the process was woken to run; threads that ended meanwhile are not counted."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # the thread ended while we looked
            continue
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (``/proc/<pid>/statm``), shared mappings (the logs in /dev/shm) included."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE


def rss_breakdown(pid: int) -> dict[str, int]:
    """RssAnon / RssFile / RssShmem of ``pid`` in bytes (``/proc/<pid>/status``)."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


async def serve_until_stopped(server: Any, ready: Any, stop: Any, out: Any, timeout: float, bound: Any = None) -> None:
    """Bind an end point server, say so on ``ready`` and serve until ``stop`` (or ``timeout``); a failure is
    reported on ``out`` for the parent before it is raised. ``bound``: a shared value given the server's port
    before ``ready`` (a server of ``port=0`` picks its own: a port picked for it beforehand may be taken meanwhile)."""
    try:
        async with server:
            if bound is not None:
                bound.value = server.port
            ready.set()
            await wait_event(stop, timeout)
    except Exception as exc:
        out.put(f"server: {type(exc).__name__}: {exc}")
        raise


def serve_grpc(
    service: str,
    methods: dict[str, Any],
    address: str,
    ready: Any,
    stop: Any,
    out: Any,
    timeout: float,
    options: Sequence[tuple[str, Any]] = (),
) -> None:
    """Run a grpc aio server of ``methods`` (name -> method handler) on ``address`` until ``stop``; the peer side
    of the benchmarks. A failure is reported on ``out`` before it is raised."""

    async def serve() -> None:
        import grpc

        server = grpc.aio.server(options=list(options))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
        if not server.add_insecure_port(address):
            raise RuntimeError(f"grpc could not bind {address}")
        await server.start()
        try:
            ready.set()
            await wait_event(stop, timeout)
        finally:
            await server.stop(0)

    try:
        asyncio.run(serve())
    except Exception as exc:
        out.put(f"grpc server: {type(exc).__name__}: {exc}")
        raise


async def wait_event(event: Any, timeout: float, interval: float = 0.02) -> bool:
    """Wait for a multiprocessing Event without blocking the event loop (the end points must keep polling)."""
    deadline = time.monotonic() + timeout
    while not event.is_set():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True


async def wait_count(get: Callable[[], int], target: int, stall_s: float) -> tuple[int, float]:
    """Until ``get() >= target`` or no change for ``stall_s`` s: (last count, perf_counter when it changed)."""
    last, moved = get(), time.perf_counter()
    while last < target:
        await asyncio.sleep(0.01)
        now_count = get()
        if now_count != last:
            last, moved = now_count, time.perf_counter()
        elif time.perf_counter() - moved > stall_s:
            break
    return last, moved


def run_async(main: Callable[[], Coroutine[Any, Any, None]], profile: str = "", top: int = 18) -> None:
    """``asyncio.run(main())``; with ``profile`` (a label) under cProfile, the top entries by own time to stderr.

    cProfile sees only the thread running the event loop, not the driver's or the driver client's threads.
    """
    if not profile:
        asyncio.run(main())
        return
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        asyncio.run(main())
    finally:
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(top)
        body = text.getvalue()
        start = body.find("   ncalls")
        print(
            f"\n--- cProfile, {profile} (event loop thread), by own time ---\n{body[start:].rstrip()}", file=sys.stderr
        )


class Children:
    """Spawned child processes of one measurement; all stopped by pid when the block ends."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.dirs: list[Path] = []

    def start(self, target: Callable[..., Any], *args: Any) -> Any:
        proc = self.ctx.Process(target=target, args=args, daemon=True)
        proc.start()
        self.procs.append(proc)
        return proc

    def join(self, proc: Any, timeout: float) -> bool:
        """Wait for ``proc`` to end on its own; True when it did."""
        proc.join(timeout)
        return not proc.is_alive()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL, every child still running (by pid); remove the Aeron directories."""
        for proc in self.procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                proc.join(5)
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.join(5)
        for path in self.dirs:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def children() -> Iterator[Children]:
    group = Children()
    try:
        yield group
    finally:
        group.stop()


def child_error(where: str, exc: BaseException) -> str:
    return f"{where}: {type(exc).__name__}: {exc}"
