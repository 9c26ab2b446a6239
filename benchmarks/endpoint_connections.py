"""Connections: handshake rate, a thousand clients on one server, and what idle connections cost.

    python benchmarks/endpoint_connections.py [--handshakes 200] [--udp-handshakes 200] [--clients 1000]
                                              [--client-processes 4] [--concurrency 16] [--crowd-seconds 5]
                                              [--idle-clients 100] [--idle-seconds 10] [--only abcs] [--quick]
                                              [--storm-processes 4] [--storm-per-process 100] [--storm-shared 400]
                                              [--storm-sources 16]

About two minutes with the defaults on a 2-core machine, most of it the
thousand IPC clients of (b) and the idle periods of (c).

(a) Handshakes per second. A ``Server`` process; one client process opens
``--handshakes`` connections (``--udp-handshakes`` over UDP) one after another (each a new ``Client``, kept
open) and then, after closing those, as many at once (``asyncio.gather`` over
new ``Client`` objects in one event loop; they share one driver, as every end
point of a process with the same driver settings does). The clients of one
event loop share their handshake route to a server (its publication and answer
subscription, and over UDP the answer port); over UDP two more phases (one
after another, all at once) give each client a route of its own (a local port
each), which is what a server sees from clients in separate processes; the
server's CPU time per connection is the figure to read there, as this client
process then does four driver commands per connection instead of two. Over IPC the clients
share the server's Aeron directory (the driver embedded in the server
process); over UDP the client process has its own directory and driver
(``prefer_ipc=False``). The peer in the same run is asyncio TCP: a
``start_server`` whose handler writes one byte, and a client that counts a
connection once ``open_connection`` returned and that byte arrived.

(b) ``--clients`` concurrent IPC clients on one server process, spread over
``--client-processes`` child processes, each connecting its share with at most
``--concurrency`` handshakes in flight. Reported: how many connected, how long
that took, the server's RSS with none and with all of them connected and idle
(then per connection), the Aeron directory's size, and the CPU every process
used over ``--crowd-seconds`` while they sat idle.

(s) Connect storms (only when asked: ``--only s``). UDP clients all calling
``connect`` at once into one server process: ``--storm-processes`` client
processes (a driver each) of ``--storm-per-process`` clients with a handshake
route each (a local port each; from ``--storm-sources`` loopback addresses in
turn when given, as clients on hosts of their own, else all from 127.0.0.1),
then one process of ``--storm-shared`` clients sharing one route. Reported:
connections made, handshakes per second (first connect to last answer), the
server's and the clients' CPU per connection (drivers included), the rates those
CPU costs allow (the machine's cores shared by server and clients, and the server
alone on a core), failures by reason, the server's ``HandshakeStats`` and its
garbage collector's time;
``--storm-profile`` writes the server's and each client process's cProfile over
the storm.

(c) An idle server with ``--idle-clients`` idle IPC clients (one client
process): the server process's CPU time (``/proc/<pid>/stat``, all threads,
its embedded driver included) over ``--idle-seconds`` after they connected,
as % of one core; the same for the clients' process, and for the server over
5 s before any client came. Then the same with UDP clients (their process has
a driver of its own), measured once the handshakes' own streams have closed:
over UDP every idle connection still carries Aeron's heartbeats (every 100 ms)
and status messages (every 200 ms) in each direction.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_aeron_dir, percentile, print_table
from _endpoint_common import (
    children,
    cpu_seconds,
    free_tcp_port,
    free_udp_port,
    rss_breakdown,
    rss_bytes,
    serialization,
    wait_event,
)

MIB = 1024 * 1024
_T0 = time.monotonic()


def note(text: str) -> None:
    print(f"  [{time.monotonic() - _T0:6.1f} s] {text}", file=sys.stderr, flush=True)


# -- the server process -------------------------------------------------------------------------------------------


def endpoint_server(
    aeron_dir: str,
    port: int,
    connected: Any,
    ready: Any,
    stop: Any,
    out: Any,
    env: dict[str, str] | None = None,
    profile: str = "",
    window: tuple[Any, Any] | None = None,
) -> None:
    """A ``Server`` that counts its live connections in ``connected`` until ``stop``; then reports its errors.

    ``env`` is set first: ``AERON_*`` variables reach the embedded driver's context. ``profile``: a file to write
    the server process's cProfile statistics to (its event loop's thread; the driver's own threads are not in it),
    over its whole life or, with ``window`` (two events), from the first event set to the second.
    """
    os.environ.update(env or {})
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        if window is None:
            profiler.enable()
        try:
            _endpoint_server(aeron_dir, port, connected, ready, stop, out, profiler if window else None, window)
        finally:
            profiler.disable()
            profiler.dump_stats(profile)
        return
    _endpoint_server(aeron_dir, port, connected, ready, stop, out, None, window)


_SERVER_CONFIG_ENV = "BENCH_SERVER_CONFIG"
_SERVER_GC_ENV = "BENCH_SERVER_GC"
"""``freeze`` (what the server holds once bound is left out of collections), optionally ``,N`` (the youngest
generation's threshold): ``--storm-server-env BENCH_SERVER_GC=freeze,10000``."""
_TUNE_GC_ENV = "BENCH_TUNE_GC"
"""Set by ``--tune-gc``: the server (once bound) and the storm's client processes (their clients made) call
``endpoint.tune_gc(freeze=True)`` before the storm."""


def _tune_gc(env_name: str | None = None) -> None:
    """``endpoint.tune_gc(freeze=True)`` under ``--tune-gc``; else the collector setting named in ``env_name`` (see
    ``_SERVER_GC_ENV``: ``freeze[,N]`` is ``tune_gc(N, freeze=True)``), if any."""
    from endpoint import tune_gc

    setting = os.environ.get(env_name, "").split(",") if env_name else [""]
    if os.environ.get(_TUNE_GC_ENV):
        tune_gc(freeze=True)
    elif setting[0] == "freeze":
        tune_gc(int(setting[1]) if len(setting) > 1 else 1, freeze=True)  # (1: the threshold as it is)


class GcClock:
    """The garbage collector's time (full collections grow with the objects every connection holds): in total and
    per generation, as (seconds, collections)."""

    def __init__(self) -> None:
        self.by_generation = [[0.0, 0], [0.0, 0], [0.0, 0]]
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = self.by_generation[info["generation"]]
            generation[0] += time.perf_counter() - self._started
            generation[1] += 1

    def mark(self) -> list[list[float]]:
        return [list(g) for g in self.by_generation]

    def seconds(self) -> float:
        return sum(g[0] for g in self.by_generation)

    def summary(self) -> str:
        """Seconds and collections per generation so far."""
        return self.since([[0.0, 0.0]] * 3, self.mark())

    @staticmethod
    def since(mark: list[list[float]], later: list[list[float]]) -> str:
        return ", ".join(f"{b[0] - a[0]:.2f} s / {b[1] - a[1]:.0f}" for a, b in zip(mark, later, strict=True))


def _endpoint_server(
    aeron_dir: str,
    port: int,
    connected: Any,
    ready: Any,
    stop: Any,
    out: Any,
    profiler: Any = None,
    window: tuple[Any, Any] | None = None,
) -> None:

    # The collector's time in total, and per generation over the storm (``window``).
    gc_clock = GcClock()
    gc_marks: list[list[list[float]]] = []

    async def gc_window() -> None:
        assert window is not None
        for event in window:
            if not await wait_event(event, 3600, interval=0.001):
                return
            gc_marks.append(gc_clock.mark())

    async def profile_window() -> None:
        # cProfile follows the thread that enables it: the event loop's, where the storm is served.
        assert window is not None
        if await wait_event(window[0], 3600, interval=0.001):
            profiler.enable()
            await wait_event(window[1], 3600, interval=0.01)
            profiler.disable()

    async def serve() -> None:
        from endpoint import Connection, Server, ServerConfiguration

        if profiler is not None:
            profiling = asyncio.ensure_future(profile_window())
        if window is not None:
            gc_watch = asyncio.ensure_future(gc_window())

        # Integer settings to override, as NAME=VALUE,... (the storm phases' --storm-server-config).
        extra = {
            name: int(value)
            for name, value in (
                item.split("=", 1) for item in os.environ.get(_SERVER_CONFIG_ENV, "").split(",") if item
            )
        }
        config = ServerConfiguration(
            port=port, listen_address="127.0.0.1", aeron_dir=aeron_dir, serialization=serialization(), **extra
        )
        server = Server(config)
        errors: list[str] = []

        @server.on_connect
        def on_connect(conn: Connection) -> None:
            connected.value += 1

        @server.on_disconnect
        def on_disconnect(conn: Connection) -> None:
            connected.value -= 1

        @server.on_error
        def on_error(conn: Connection | None, exc: BaseException) -> None:
            errors.append(f"{type(exc).__name__}: {exc}")

        try:
            async with server:
                _tune_gc(_SERVER_GC_ENV)
                ready.set()
                await wait_event(stop, 3600, interval=0.1)
                gc_note = f"; gc {gc_clock.seconds():.2f} s (by generation: {gc_clock.summary()})"
                if len(gc_marks) == 2:
                    gc_note += "; in the storm " + GcClock.since(*gc_marks)
                stats = server.handshake_stats
                counts = {f: getattr(stats, f, -1) for f in _STORM_COUNTS}
                out.put(("server", len(errors), errors[:3], repr(stats) + gc_note, counts))
                if profiler is not None:
                    profiling.cancel()
                if window is not None:
                    gc_watch.cancel()
        except Exception as exc:
            out.put(("server", -1, [f"{type(exc).__name__}: {exc}"], "", {}))
            raise

    asyncio.run(serve())


def _client_config(
    aeron_dir: str, udp: bool, connect_timeout: float = 30.0, local_port: int = 0, local_address: str | None = None
) -> Any:
    from endpoint import ClientConfiguration

    return ClientConfiguration(
        aeron_dir=aeron_dir,
        serialization=serialization(),
        prefer_ipc=not udp,
        connect_timeout=connect_timeout,
        local_port=local_port,
        local_address=local_address,
    )


async def _close_all(clients: Sequence[Any]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


# -- (a) handshakes per second ------------------------------------------------------------------------------------


class Rate(NamedTuple):
    ok: int
    seconds: float
    p50_ms: float
    """Median time of one connect (sequential phase only; nan for the concurrent one)."""
    error: str
    server_cpu_ms: float = float("nan")
    """The server process's CPU time per connection made (its embedded driver included)."""


def endpoint_handshakes(aeron_dir: str, port: int, count: int, udp: bool, server_pid: int, out: Any) -> None:
    """Client process: ``count`` connects one at a time, then ``count`` at once (and over UDP ``count`` one at a
    time again, each client on a handshake route of its own); a (phase, Rate) for each."""

    async def run() -> None:
        from endpoint import Client

        async def one_at_a_time(own_routes: bool) -> Rate:
            clients: list[Any] = []
            times: list[float] = []
            errors: list[str] = []
            # A local port of its own gives a client a route of its own, as one client per process has.
            ports = distinct_free_udp_ports(count) if own_routes else [0] * count
            start = time.perf_counter()
            server_cpu = cpu_seconds(server_pid)
            for local_port in ports:
                client = Client(_client_config(aeron_dir, udp, local_port=local_port))
                clients.append(client)
                began = time.perf_counter()
                try:
                    await client.connect("127.0.0.1", port)
                    times.append(time.perf_counter() - began)
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
            elapsed = time.perf_counter() - start
            server_ms = (cpu_seconds(server_pid) - server_cpu) * 1000 / max(1, len(times))
            times.sort()
            await _close_all(clients)
            return Rate(len(times), elapsed, percentile(times, 50) * 1000, errors[0] if errors else "", server_ms)

        async def all_at_once(own_routes: bool) -> Rate:
            ports = distinct_free_udp_ports(count) if own_routes else [0] * count
            clients = [Client(_client_config(aeron_dir, udp, local_port=p)) for p in ports]
            start = time.perf_counter()
            server_cpu = cpu_seconds(server_pid)
            outcomes = await asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients), return_exceptions=True)
            elapsed = time.perf_counter() - start
            failed = [o for o in outcomes if isinstance(o, BaseException)]
            server_ms = (cpu_seconds(server_pid) - server_cpu) * 1000 / max(1, count - len(failed))
            first = f"{type(failed[0]).__name__}: {failed[0]}" if failed else ""
            await _close_all(clients)
            return Rate(count - len(failed), elapsed, float("nan"), first, server_ms)

        results = [
            ("sequential", await one_at_a_time(False)),
            ("concurrent (one loop, shared driver)", await all_at_once(False)),
        ]
        if udp:
            results.append(("sequential, a handshake route per client", await one_at_a_time(True)))
            results.append(("concurrent, a handshake route per client", await all_at_once(True)))
        out.put(results)

    asyncio.run(run())


def distinct_free_udp_ports(count: int) -> list[int]:
    """``count`` different UDP ports free right now, below the kernel's ephemeral range (where the drivers' own
    sockets take theirs, so none of these is taken before its client binds it)."""
    held: list[socket.socket] = []
    try:
        for candidate in range(20_000, 32_768):
            if len(held) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        if len(held) < count:
            raise RuntimeError(f"only {len(held)} free UDP ports in 20000-32767, {count} wanted")
        return [s.getsockname()[1] for s in held]
    finally:
        for sock in held:
            sock.close()


def run_endpoint_handshakes(count: int, udp: bool) -> tuple[list[tuple[str, Rate]], str]:
    with children() as group:
        ctx = group.ctx
        ready, stop, out, server_out = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        connected = ctx.Value("i", 0, lock=False)
        server_dir = fresh_aeron_dir("ep-conn-srv")
        client_dir = fresh_aeron_dir("ep-conn-cli") if udp else server_dir
        group.dirs += [server_dir, client_dir]
        port = free_udp_port()
        server = group.start(endpoint_server, str(server_dir), port, connected, ready, stop, server_out)
        if not ready.wait(60):
            raise RuntimeError("the server process did not start")
        client = group.start(endpoint_handshakes, str(client_dir), port, count, udp, server.pid, out)
        phases = out.get(timeout=600)
        group.join(client, 30)
        stop.set()
        _, error_count, errors, stats, _counts = server_out.get(timeout=30)
        group.join(server, 15)
    return phases, f"server errors: {error_count} {errors} {stats}" if error_count else ""


def tcp_accept_server(port: int, ready: Any, stop: Any) -> None:
    async def serve() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"!")
            await reader.read()  # until the client closes
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with server:
            ready.set()
            await wait_event(stop, 600, interval=0.1)

    asyncio.run(serve())


def tcp_handshakes(port: int, count: int, server_pid: int, out: Any) -> None:
    async def run() -> None:
        async def one() -> asyncio.StreamWriter:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await reader.readexactly(1)
            return writer

        results: list[Rate] = []
        writers: list[asyncio.StreamWriter] = []
        times: list[float] = []
        start = time.perf_counter()
        server_cpu = cpu_seconds(server_pid)
        for _ in range(count):
            began = time.perf_counter()
            writers.append(await one())
            times.append(time.perf_counter() - began)
        elapsed = time.perf_counter() - start
        server_ms = (cpu_seconds(server_pid) - server_cpu) * 1000 / max(1, len(writers))
        times.sort()
        results.append(Rate(len(writers), elapsed, percentile(times, 50) * 1000, "", server_ms))
        for writer in writers:
            writer.close()
        start = time.perf_counter()
        server_cpu = cpu_seconds(server_pid)
        outcomes = await asyncio.gather(*(one() for _ in range(count)), return_exceptions=True)
        elapsed = time.perf_counter() - start
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        server_ms = (cpu_seconds(server_pid) - server_cpu) * 1000 / max(1, count - len(failed))
        error = repr(failed[0]) if failed else ""
        results.append(Rate(count - len(failed), elapsed, float("nan"), error, server_ms))
        for o in outcomes:
            if isinstance(o, asyncio.StreamWriter):
                o.close()
        out.put(results)

    asyncio.run(run())


def run_tcp_handshakes(count: int) -> tuple[Rate, Rate]:
    with children() as group:
        ctx = group.ctx
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        port = free_tcp_port()
        server = group.start(tcp_accept_server, port, ready, stop)
        if not ready.wait(60):
            raise RuntimeError("the TCP server process did not start")
        client = group.start(tcp_handshakes, port, count, server.pid, out)
        sequential, concurrent = out.get(timeout=300)
        group.join(client, 15)
        stop.set()
        group.join(server, 15)
    return sequential, concurrent


# -- (s) connect storms ---------------------------------------------------------------------------------------------


class Storm(NamedTuple):
    ok: int
    tried: int
    seconds: float
    """From the first connect started to the last one finished, over all client processes."""
    server_cpu_ms: float
    """The server process's CPU time over the storm per connection made (its embedded driver included)."""
    failures: dict[str, int]
    """Client-side failures by exception type and first words."""
    server_stats: str
    client_cpu_ms: float = float("nan")
    """The client processes' CPU time over their connects (drivers included) per connection made."""
    server_counts: dict[str, int] = {}
    """The server's handshake counters named in ``_STORM_COUNTS`` (-1: not counted by this version)."""
    client_discarded: int = -1
    """Connections the clients made after an answer and threw away (their DONE went unanswered)."""


_STORM_COUNTS = ("challenged", "busy", "overloaded", "evicted", "unanswered", "discarded")
"""The server's handshake counters a storm prints: attempts (a cookie per fresh HELLO), refusals (busy: refused
with a retry-after before anything was made; overloaded: dropped at the half-open caps; evicted), answers that
could not go, and rebuilds (a HELLO's streams made and thrown away)."""


def storm_clients(
    aeron_dir: str,
    port: int,
    local_ports: list[int],
    count: int,
    go: Any,
    out: Any,
    release: Any,
    profile: str = "",
    local_addresses: list[str] | None = None,
) -> None:
    """Client process: ``count`` UDP clients (on ``local_ports`` when given: a route each; else sharing one) all
    connecting at once when ``go`` is set; reports (ok, start, end, failures), then holds them until ``release``.
    ``profile``: a file for the process's cProfile statistics over the connects. ``local_addresses``: each
    client's own source address (loopback aliases standing for hosts of their own), else 127.0.0.1 for all."""
    import cProfile

    profiler = cProfile.Profile()

    async def run() -> None:
        from endpoint import Client

        ports = local_ports or [0] * count
        addresses: list[str | None] = list(local_addresses) if local_addresses else [None] * count
        clients = [
            Client(_client_config(str(aeron_dir), True, connect_timeout=30.0, local_port=p, local_address=a))
            for p, a in zip(ports, addresses, strict=True)
        ]
        # The storm measures handshakes: each process's driver is started (and leased by every client) first.
        await asyncio.gather(*(c.start() for c in clients))
        _tune_gc()
        gc_clock = GcClock()
        await wait_event(go, 120, interval=0.01)
        start, cpu, gc_start = time.time(), time.process_time(), gc_clock.seconds()
        if profile:
            profiler.enable()
        outcomes = await asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients), return_exceptions=True)
        if profile:
            profiler.disable()
            profiler.dump_stats(profile)
        end, cpu, gc_s = time.time(), time.process_time() - cpu, gc_clock.seconds() - gc_start
        failures: dict[str, int] = {}
        for o in outcomes:
            if isinstance(o, BaseException):
                reason = f"{type(o).__name__}: {' '.join(str(o).split()[:8])}"
                failures[reason] = failures.get(reason, 0) + 1
        discarded = sum(getattr(c.handshake_stats, "discarded", 0) for c in clients)
        out.put((count - sum(failures.values()), start, end, failures, cpu, discarded, gc_s))
        await wait_event(release, 600, interval=0.1)
        await _close_all(clients)

    asyncio.run(run())


def run_storm(
    processes: int,
    per_process: int,
    own_routes: bool,
    profile: str = "",
    env: dict[str, str] | None = None,
    sources: int = 0,
) -> Storm:
    """``processes`` client processes (a driver each) of ``per_process`` UDP clients each, all connecting at once
    into one server process: with ``own_routes`` a handshake route per client (a local port each, as clients in
    separate processes have), else the clients of a process share one. ``sources`` > 0: the clients come from that
    many loopback addresses (127.0.0.2, ...) in turn, as clients on hosts of their own would, instead of all from
    127.0.0.1 (where the server's per-address cap, a flood defence, holds them to `max_routes_per_source`, 64,
    handshake routes at once)."""
    with children() as group:
        ctx = group.ctx
        ready, stop, go, release, stormed = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event()
        out, server_out = ctx.Queue(), ctx.Queue()
        connected = ctx.Value("i", 0, lock=False)
        server_dir = fresh_aeron_dir("ep-storm-srv")
        group.dirs.append(server_dir)
        port = free_udp_port()
        server = group.start(
            endpoint_server, str(server_dir), port, connected, ready, stop, server_out, env, profile, (go, stormed)
        )
        if not ready.wait(60):
            raise RuntimeError("the server process did not start")
        ports = distinct_free_udp_ports(processes * per_process) if own_routes else []
        procs = []
        for i in range(processes):
            client_dir = fresh_aeron_dir("ep-storm-cli")
            group.dirs.append(client_dir)
            mine = ports[i * per_process : (i + 1) * per_process]
            client_profile = f"{profile}.client{i}" if profile else ""
            addresses = (
                [f"127.0.0.{2 + n % sources}" for n in range(i * per_process, (i + 1) * per_process)] if sources else []
            )
            procs.append(
                group.start(
                    storm_clients,
                    str(client_dir),
                    port,
                    mine,
                    per_process,
                    go,
                    out,
                    release,
                    client_profile,
                    addresses,
                )
            )
        time.sleep(3.0 + 0.2 * per_process * processes / 100)  # client processes start their drivers
        cpu_before = cpu_seconds(server.pid)
        go.set()
        results = [out.get(timeout=300) for _ in procs]
        cpu_after = cpu_seconds(server.pid)
        stormed.set()
        release.set()
        for proc in procs:
            group.join(proc, 60)
        stop.set()
        _, error_count, errors, stats, counts = server_out.get(timeout=60)
        group.join(server, 30)
    ok = sum(r[0] for r in results)
    failures: dict[str, int] = {}
    for r in results:
        for reason, n in r[3].items():
            failures[reason] = failures.get(reason, 0) + n
    if error_count:
        failures[f"server on_error: {errors[:1]}"] = error_count
    seconds = max(r[2] for r in results) - min(r[1] for r in results)
    client_ms = sum(r[4] for r in results) * 1000 / max(1, ok)
    server_ms = (cpu_after - cpu_before) * 1000 / max(1, ok)
    discarded = sum(r[5] for r in results)
    stats += f"; clients' gc in the storm {sum(r[6] for r in results):.2f} s"
    return Storm(ok, processes * per_process, seconds, server_ms, failures, stats, client_ms, counts, discarded)


# -- (b) and (c): many idle clients -------------------------------------------------------------------------------


def idle_clients(
    aeron_dir: str, port: int, count: int, concurrency: int, out: Any, stop: Any, udp: bool = False
) -> None:
    """Client process: connect ``count`` clients (``concurrency`` at a time), report, then stay idle until ``stop``."""

    async def run() -> None:
        from endpoint import Client

        gate = asyncio.Semaphore(concurrency)
        clients = [Client(_client_config(aeron_dir, udp=udp, connect_timeout=60.0)) for _ in range(count)]

        async def connect(client: Any) -> None:
            async with gate:
                await client.connect("127.0.0.1", port)

        start = time.perf_counter()
        outcomes = await asyncio.gather(*(connect(c) for c in clients), return_exceptions=True)
        elapsed = time.perf_counter() - start
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        first = f"{type(failed[0]).__name__}: {failed[0]}" if failed else ""
        out.put((count - len(failed), elapsed, first))
        await wait_event(stop, 3600, interval=0.1)
        await _close_all(clients)

    asyncio.run(run())


class Crowd(NamedTuple):
    connected: int
    server_saw: int
    seconds: float
    rss_before: int
    rss_after: int
    breakdown_before: dict[str, int]
    breakdown_after: dict[str, int]
    shm_bytes: int
    server_cpu: float
    """% of one core over the idle window."""
    client_cpu: list[float]
    server_idle_cpu: float
    """% of one core before any client came (nan when not measured)."""
    error: str


def _cpu_percent(pids: Sequence[int], seconds: float) -> list[float]:
    before = [cpu_seconds(pid) for pid in pids]
    time.sleep(seconds)
    return [(cpu_seconds(pid) - b) / seconds * 100 for pid, b in zip(pids, before, strict=True)]


def _du(path: Path) -> int:
    """Bytes actually allocated under ``path`` (the connections' log files in /dev/shm)."""
    try:
        text = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, timeout=30).stdout
        return int(text.split()[0]) * 1024
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return 0


def run_crowd(
    clients: int,
    processes: int,
    concurrency: int,
    idle_seconds: float,
    settle: float,
    measure_empty: float = 0.0,
    counters_buffer: str = "",
    udp: bool = False,
) -> Crowd:
    """A server and ``processes`` client processes holding ``clients`` idle connections between them: IPC, or
    with ``udp`` UDP (each client process then has a driver of its own)."""
    with children() as group:
        ctx = group.ctx
        ready, stop, clients_stop, server_out, out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        connected = ctx.Value("i", 0, lock=False)
        aeron_dir = fresh_aeron_dir("ep-crowd")
        group.dirs.append(aeron_dir)
        port = free_udp_port()
        env = {"AERON_COUNTERS_BUFFER_LENGTH": counters_buffer} if counters_buffer else {}
        server = group.start(endpoint_server, str(aeron_dir), port, connected, ready, stop, server_out, env)
        if not ready.wait(60):
            raise RuntimeError("the server process did not start")
        time.sleep(settle)
        rss_before, breakdown_before = rss_bytes(server.pid), rss_breakdown(server.pid)
        server_idle_cpu = _cpu_percent([server.pid], measure_empty)[0] if measure_empty else float("nan")
        shares = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
        client_dirs = [fresh_aeron_dir("ep-crowd-cli") if udp else aeron_dir for _ in shares]
        group.dirs += [d for d in client_dirs if d != aeron_dir]
        crowd = [
            group.start(idle_clients, str(client_dir), port, share, concurrency, out, clients_stop, udp)
            for share, client_dir in zip(shares, client_dirs, strict=True)
        ]
        note(f"{clients} {'UDP' if udp else 'IPC'} clients connecting from {processes} process(es)")
        ok, longest, errors = 0, 0.0, []
        for _ in crowd:
            got, seconds, first = out.get(timeout=900)
            ok += got
            longest = max(longest, seconds)
            if first:
                errors.append(first)
        note(f"{ok} connected in {longest:.1f} s; measuring idle CPU for {idle_seconds:g} s")
        # Over UDP the handshakes' own streams close a few seconds later (the server keeps its answer routes
        # for twice the handshake timeout): measure the steady state after that.
        time.sleep(settle + (5.0 if udp else 0.0))
        server_saw = connected.value
        rss_after, breakdown_after = rss_bytes(server.pid), rss_breakdown(server.pid)
        shm = _du(aeron_dir)
        cpu = _cpu_percent([server.pid, *(p.pid for p in crowd)], idle_seconds)
        clients_stop.set()
        for proc in crowd:
            group.join(proc, 60)
        stop.set()
        _, error_count, server_errors, stats, _counts = server_out.get(timeout=60)
        group.join(server, 15)
    if error_count:
        errors.append(f"server errors: {error_count} {server_errors} {stats}")
    return Crowd(
        ok,
        server_saw,
        longest,
        rss_before,
        rss_after,
        breakdown_before,
        breakdown_after,
        shm,
        cpu[0],
        cpu[1:],
        server_idle_cpu,
        "; ".join(errors),
    )


# -- main ---------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--handshakes", type=int, default=200, help="(a) connections per phase, TCP and IPC")
    parser.add_argument("--udp-handshakes", type=int, default=200, help="(a) connections per phase over UDP")
    parser.add_argument("--clients", type=int, default=1000, help="(b) concurrent clients on one server")
    parser.add_argument("--client-processes", type=int, default=4, help="(b) processes holding those clients")
    parser.add_argument("--concurrency", type=int, default=16, help="(b) handshakes in flight per client process")
    parser.add_argument(
        "--counters-buffer",
        default="",
        help="(b) the server driver's counters buffer (AERON_COUNTERS_BUFFER_LENGTH, e.g. 4m); default 1 MiB: 8,192 "
        "counters, 6 per idle IPC connection plus those of handshakes in flight",
    )
    parser.add_argument("--idle-clients", type=int, default=100, help="(c) idle clients")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="(c) CPU measuring window")
    parser.add_argument("--crowd-seconds", type=float, default=5.0, help="(b) CPU measuring window")
    parser.add_argument("--only", default="abc", help="parts to run, e.g. 'a' or 'bc'; 's' (connect storms) on demand")
    parser.add_argument("--storm-processes", type=int, default=4, help="(s) client processes, a route per client")
    parser.add_argument("--storm-per-process", type=int, default=100, help="(s) clients per client process")
    parser.add_argument(
        "--storm-sources",
        type=int,
        default=0,
        help="(s) routes phase: the clients come from this many loopback addresses (127.0.0.2, ...) in turn, as "
        "clients on hosts of their own; 0: all from 127.0.0.1, which the server's per-address cap "
        "(max_routes_per_source, 64) holds to that many routes at once",
    )
    parser.add_argument("--storm-shared", type=int, default=400, help="(s) clients in one process sharing a route")
    parser.add_argument(
        "--storm-server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="(s) an environment variable for the server process (its embedded driver), e.g. "
        "AERON_RECEIVER_MAX_IMAGES_PER_SOURCE=1024; repeatable",
    )
    parser.add_argument(
        "--storm-server-config",
        default="",
        metavar="NAME=INT,...",
        help="(s) ServerConfiguration settings for the server, e.g. max_answer_routes_per_source=1024",
    )
    parser.add_argument("--storm-only", default="", help="(s) 'routes' or 'shared': run that phase only")
    parser.add_argument(
        "--tune-gc",
        action="store_true",
        help="(s) the server and client processes call endpoint.tune_gc(freeze=True) (the collector's youngest "
        "threshold raised, what start-up made frozen) before the storm",
    )
    parser.add_argument(
        "--storm-profile",
        default="",
        help="(s) write the server's cProfile stats over the storm to FILE.<phase>, client process i's to "
        "FILE.<phase>.client<i>",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 handshakes, 40 clients, 1 s windows")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    if args.quick:
        args.handshakes, args.udp_handshakes, args.clients, args.client_processes, args.idle_clients = 20, 10, 40, 2, 10
        args.idle_seconds = args.crowd_seconds = 1.0
    settle = 0.5 if args.quick else 2.0
    failed: list[str] = []

    if "a" in args.only:
        k = args.handshakes
        rates: dict[str, Rate] = {}
        notes: list[str] = []
        seq, conc = run_tcp_handshakes(k)
        note("(a) asyncio TCP done")
        rates["asyncio TCP connect + 1-byte greeting, sequential"] = seq
        rates["asyncio TCP connect + 1-byte greeting, concurrent"] = conc
        for transport in ("IPC", "UDP"):
            try:
                udp = transport == "UDP"
                phases, server_note = run_endpoint_handshakes(args.udp_handshakes if udp else k, udp)
            except Exception as exc:
                print(f"  endpoint {transport}: FAILED: {exc}", file=sys.stderr, flush=True)
                failed.append(f"endpoint {transport}")
                continue
            for phase, rate in phases:
                rates[f"endpoint {transport}, {phase}"] = rate
            note(f"(a) endpoint {transport} done: " + ", ".join(f"{r.ok / r.seconds:.1f}/s {p}" for p, r in phases))
            if server_note:
                notes.append(f"{transport}: {server_note}")
        base = {kind: rates[f"asyncio TCP connect + 1-byte greeting, {kind}"] for kind in ("sequential", "concurrent")}
        table = []
        for name, r in rates.items():
            kind = "sequential" if "sequential" in name else "concurrent"
            rate = r.ok / r.seconds if r.seconds else 0.0
            base_rate = base[kind].ok / base[kind].seconds if base[kind].seconds else 0.0
            tried = args.udp_handshakes if "UDP" in name else k
            p50 = "-" if math.isnan(r.p50_ms) else f"{r.p50_ms:.1f}"
            server_ms = "-" if math.isnan(r.server_cpu_ms) else f"{r.server_cpu_ms:.1f}"
            ratio = f"{rate / base_rate:.3g}" if base_rate else "-"
            table.append((name, f"{r.ok}/{tried}", r.seconds, rate, p50, server_ms, ratio))
        print_table(
            f"(a) Handshakes per second: {k} connections ({args.udp_handshakes} over UDP) from one client process "
            "to a server process",
            ["", "connected", "seconds", "per s", "p50 ms each", "server CPU ms each", "x asyncio TCP"],
            table,
        )
        for name, r in rates.items():
            if r.error:
                print(f"  {name}: first error: {r.error}")
        for remark in notes:
            print(f"  {remark}")

    if "b" in args.only:
        crowd = run_crowd(
            args.clients, args.client_processes, args.concurrency, args.crowd_seconds, settle, 0.0, args.counters_buffer
        )
        idle_n = max(crowd.server_saw, 1)
        per_conn = (crowd.rss_after - crowd.rss_before) / idle_n
        anon = (crowd.breakdown_after.get("RssAnon", 0) - crowd.breakdown_before.get("RssAnon", 0)) / idle_n
        shmem = (crowd.breakdown_after.get("RssShmem", 0) - crowd.breakdown_before.get("RssShmem", 0)) / idle_n
        rows = [
            ("clients connected (client side)", f"{crowd.connected} of {args.clients}"),
            ("connections the server holds", str(crowd.server_saw)),
            (
                f"time to connect them ({args.client_processes} processes, {args.concurrency} in flight each)",
                f"{crowd.seconds:.1f} s",
            ),
            ("server RSS, no connections", f"{crowd.rss_before / MIB:.1f} MiB"),
            (f"server RSS, {crowd.server_saw} idle connections", f"{crowd.rss_after / MIB:.1f} MiB"),
            ("server RSS per idle connection", f"{per_conn / 1024:.1f} KiB"),
            ("  of which heap and other private memory (RssAnon)", f"{anon / 1024:.1f} KiB"),
            ("  of which mapped log buffers (RssShmem)", f"{shmem / 1024:.1f} KiB"),
            ("log files in the Aeron directory (/dev/shm, allocated)", f"{crowd.shm_bytes / MIB:.1f} MiB"),
            (f"server CPU while idle, {args.crowd_seconds:g} s", f"{crowd.server_cpu:.1f} % of a core"),
            ("client processes' CPU while idle", ", ".join(f"{c:.1f}" for c in crowd.client_cpu) + " % of a core"),
        ]
        print_table(f"(b) {args.clients} concurrent IPC clients on one server process", ["", "result"], rows)
        if crowd.error:
            print(f"  errors: {crowd.error}")

    if "c" in args.only:
        empty = 1.0 if args.quick else 5.0
        crowd = run_crowd(args.idle_clients, 1, args.concurrency, args.idle_seconds, settle, empty)
        idle_rows: list[tuple[object, ...]] = [
            (
                f"server, no clients ({empty:g} s)",
                "1 (server)",
                crowd.server_idle_cpu,
                "< 3",
                "met" if crowd.server_idle_cpu < 3 else "not met",
            ),
            (
                f"server, {crowd.server_saw} idle IPC clients",
                "1 (server)",
                crowd.server_cpu,
                "< 3",
                "met" if crowd.server_cpu < 3 else "not met",
            ),
            (f"client process, {crowd.connected} idle IPC clients", "1 (clients)", crowd.client_cpu[0], "", ""),
        ]
        udp_crowd = run_crowd(args.idle_clients, 1, args.concurrency, args.idle_seconds, settle, udp=True)
        idle_rows += [
            (f"server, {udp_crowd.server_saw} idle UDP clients", "1 (server)", udp_crowd.server_cpu, "", ""),
            (
                f"client process, {udp_crowd.connected} idle UDP clients (its own driver)",
                "1 (clients)",
                udp_crowd.client_cpu[0],
                "",
                "",
            ),
        ]
        crowd = crowd._replace(error="; ".join(e for e in (crowd.error, udp_crowd.error) if e))
        print_table(
            f"(c) Idle CPU over {args.idle_seconds:g} s, % of one core (user + system, all threads)",
            ["", "process", "% of a core", "bar", ""],
            idle_rows,
        )
        if crowd.error:
            print(f"  errors: {crowd.error}")

    if "s" in args.only:
        storm_rows: list[tuple[object, ...]] = []
        cores = len(os.sched_getaffinity(0))
        phases = [
            (
                f"{args.storm_processes} processes x {args.storm_per_process}, a route each"
                + (f", from {args.storm_sources} addresses" if args.storm_sources else ""),
                args.storm_processes,
                args.storm_per_process,
                True,
                "routes",
            ),
            (f"1 process x {args.storm_shared}, one shared route", 1, args.storm_shared, False, "shared"),
        ]
        server_env = dict(item.split("=", 1) for item in args.storm_server_env)
        if args.tune_gc:
            os.environ[_TUNE_GC_ENV] = "1"  # (the client processes inherit it; the server's env adds to it)
        if args.storm_server_config:
            server_env[_SERVER_CONFIG_ENV] = args.storm_server_config
        for name, m, k, own, tag in phases:
            if args.storm_only and tag != args.storm_only:
                continue
            profile = f"{args.storm_profile}.{tag}" if args.storm_profile else ""
            st = run_storm(m, k, own, profile, server_env, args.storm_sources if own else 0)
            rate = st.ok / st.seconds if st.seconds else 0.0
            c = st.server_counts
            refused = "/".join(str(c.get(k, -1)) for k in ("busy", "overloaded", "evicted"))
            thrown = f"{c.get('discarded', -1)}/{st.client_discarded}"
            both_ms = st.server_cpu_ms + st.client_cpu_ms
            storm_rows.append(
                (
                    name,
                    f"{st.ok}/{st.tried}",
                    st.seconds,
                    rate,
                    f"{st.server_cpu_ms:.1f}",
                    f"{st.client_cpu_ms:.1f}",
                    f"{cores * 1000 / both_ms:.0f}" if both_ms > 0 else "-",
                    f"{1000 / st.server_cpu_ms:.0f}" if st.server_cpu_ms > 0 else "-",
                    c.get("challenged", -1),
                    refused,
                    c.get("unanswered", -1),
                    thrown,
                )
            )
            note(f"(s) {name}: {rate:.0f}/s; failures {st.failures}; server {st.server_stats}")
        print_table(
            "(s) Connect storms: UDP clients all connecting at once into one server process",
            [
                "",
                "connected",
                "seconds",
                "handshakes/s",
                "server CPU ms each",
                "clients' CPU ms each",
                f"CPU-bound at /s ({cores} cores)",
                "server alone at /s (1 core)",
                "attempts",
                "refused busy/dropped/evicted",
                "unanswered",
                "thrown away server/clients",
            ],
            storm_rows,
        )
        print(
            f"  CPU-bound at: what this machine's {cores} cores allow at the CPU the server and the clients spent per"
            " connection (a storm well below it waited, one near it was CPU-bound); server alone: what the server's"
            " CPU per connection allows it on a core of its own, the clients elsewhere"
        )
        print(
            "  attempts: fresh HELLOs (a cookie each); refused: SERVER_BUSY with a retry-after before anything was"
            " made / dropped at the half-open caps / evicted; thrown away: connection streams made and then closed"
            " unused (-1: not counted by this version)"
        )

    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
