"""Round trip over one Server/Client connection, beside asyncio TCP and pyzmq, in one run.

    python benchmarks/endpoint_latency.py [--samples 10000] [--warmup 1000] [--quick] [--only SUBSTRING]

Every row is a client process and a server process. The client sends
``Probe(seq, sent_ns)`` and waits for it to come back before sending the next;
the round trip is taken with ``time.perf_counter_ns`` around send and reply.

Ours: the ``Server``'s ``on_message(Probe)`` listener sends the probe back —
a sync listener calling ``conn.send_nowait(msg)``, or an async one doing
``await conn.send(msg)`` (the client then sends with ``await conn.send`` too);
the client's sync listener sets the ``asyncio.Future`` that the sending
coroutine awaits. Both end points run with ``idle_strategy="busy_spin"`` (the
poller never sleeps) or the default ``"backoff"``; the drivers keep their
default (backoff) idle strategy. Over IPC the client shares the server's Aeron
directory (the driver embedded in the server process); over UDP each process
has its own directory and embedded driver (``prefer_ipc=False``).

Peers, both decoding and re-encoding the probe on the server as ours does:
asyncio TCP (``asyncio.start_server``, ``msgpack.Unpacker`` fed from
``reader.read``, the reply written with ``writer.write``) — the baseline of the
ratio column; pyzmq DEALER (client) / ROUTER (server) over ``tcp://127.0.0.1``
with blocking receives, and with busy ``NOBLOCK`` polling on both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_aeron_dir, percentile, print_table
from _endpoint_common import Probe, children, free_tcp_port, free_udp_port, serialization, wait_event

from endpoint.config import IdleMode

BASELINE = "asyncio TCP + msgpack echo"
REPLY_TIMEOUT_S = 10.0


# -- endpoint ---------------------------------------------------------------------------------------------------


def endpoint_echo(
    aeron_dir: str, port: int, idle: IdleMode, mode: str, threading: str, ready: Any, stop: Any, out: Any
) -> None:
    """Server process: send every Probe back."""

    async def serve() -> None:
        from endpoint import Connection, Server, ServerConfiguration

        config = ServerConfiguration(
            port=port,
            listen_address="127.0.0.1",
            aeron_dir=aeron_dir,
            serialization=serialization(),
            idle_strategy=idle,
            threading_mode=threading,
        )
        server = Server(config)
        pending: set[asyncio.Task[None]] = set()

        if mode == "send_nowait":

            @server.on_message(Probe)
            def echo(conn: Connection, message: Probe) -> None:
                if not conn.send_nowait(message):  # back pressure: not expected one at a time, but never drop
                    task = asyncio.ensure_future(conn.send(message))
                    pending.add(task)
                    task.add_done_callback(pending.discard)

        else:

            @server.on_message(Probe)
            async def echo_async(conn: Connection, message: Probe) -> None:
                await conn.send(message)

        try:
            async with server:
                ready.set()
                await wait_event(stop, 600)
        except Exception as exc:
            out.put(f"server: {type(exc).__name__}: {exc}")
            raise

    asyncio.run(serve())


def endpoint_ping(
    aeron_dir: str,
    port: int,
    idle: IdleMode,
    mode: str,
    threading: str,
    samples: int,
    warmup: int,
    udp: bool,
    ready: Any,
    out: Any,
) -> None:
    """Client process: one probe in flight at a time; the round trips (ns) after the warm-up."""

    async def ping() -> None:
        from endpoint import Client, ClientConfiguration, Connection

        config = ClientConfiguration(
            aeron_dir=aeron_dir,
            serialization=serialization(),
            prefer_ipc=not udp,
            idle_strategy=idle,
            threading_mode=threading,
        )
        client = Client(config)
        waiter: list[asyncio.Future[Probe]] = []

        @client.on_message(Probe)
        def on_probe(conn: Connection, message: Probe) -> None:
            if waiter and not waiter[0].done():
                waiter[0].set_result(message)

        try:
            async with client:
                if not ready.wait(60):
                    raise TimeoutError("the server process did not start")
                conn = await client.connect("127.0.0.1", port)
                loop = asyncio.get_running_loop()
                now = time.perf_counter_ns
                rtts: list[int] = []
                watchdog = loop.create_task(_watchdog(waiter))
                for i in range(warmup + samples):
                    future: asyncio.Future[Probe] = loop.create_future()
                    waiter[:] = [future]
                    start = now()
                    if mode == "send_nowait":
                        if not conn.send_nowait(Probe(i, start)):
                            await conn.send(Probe(i, start))
                    else:
                        await conn.send(Probe(i, start))
                    reply = await future
                    end = now()
                    if reply.seq != i:
                        raise RuntimeError(f"probe {i} came back as {reply.seq}")
                    if i >= warmup:
                        rtts.append(end - start)
                watchdog.cancel()
                out.put(rtts)
        except Exception as exc:
            out.put(f"client: {type(exc).__name__}: {exc}")
            raise

    asyncio.run(ping())


async def _watchdog(waiter: list[asyncio.Future[Any]]) -> None:
    """Fail the probe in flight when no reply has come for REPLY_TIMEOUT_S (a lost reply must not hang the run)."""
    last: asyncio.Future[Any] | None = None
    since = time.monotonic()
    while True:
        await asyncio.sleep(0.5)
        current = waiter[0] if waiter else None
        if current is not last:
            last, since = current, time.monotonic()
        elif current is not None and not current.done() and time.monotonic() - since > REPLY_TIMEOUT_S:
            current.set_exception(TimeoutError(f"no reply for {REPLY_TIMEOUT_S:g} s"))


def run_endpoint(samples: int, warmup: int, idle: IdleMode, mode: str, udp: bool, threading: str) -> list[int]:
    with children() as group:
        ctx = group.ctx
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        server_dir = fresh_aeron_dir("ep-lat-srv")
        client_dir = fresh_aeron_dir("ep-lat-cli") if udp else server_dir
        group.dirs += [server_dir, client_dir]
        port = free_udp_port()
        server = group.start(endpoint_echo, str(server_dir), port, idle, mode, threading, ready, stop, out)
        client = group.start(
            endpoint_ping, str(client_dir), port, idle, mode, threading, samples, warmup, udp, ready, out
        )
        result = out.get(timeout=600)
        group.join(client, 15)  # the client leaves first: over IPC it uses the server's driver
        stop.set()
        group.join(server, 15)
    if isinstance(result, str):
        raise RuntimeError(result)
    return list(result)


# -- asyncio TCP + msgpack -------------------------------------------------------------------------------------


def tcp_echo(port: int, ready: Any, stop: Any) -> None:
    async def serve() -> None:
        import msgpack  # type: ignore[import-untyped]

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            unpacker = msgpack.Unpacker()
            packb = msgpack.packb
            while data := await reader.read(65536):
                unpacker.feed(data)
                for message in unpacker:
                    writer.write(packb(message))
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            ready.set()
            await wait_event(stop, 600)

    asyncio.run(serve())


def tcp_ping(port: int, samples: int, warmup: int, ready: Any, out: Any) -> None:
    async def ping() -> None:
        import msgpack

        ready.wait(60)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        unpacker = msgpack.Unpacker()
        packb = msgpack.packb
        now = time.perf_counter_ns
        rtts: list[int] = []
        for i in range(warmup + samples):
            start = now()
            writer.write(packb((i, start)))
            reply = None
            while reply is None:
                data = await asyncio.wait_for(reader.read(65536), REPLY_TIMEOUT_S)
                if not data:
                    raise ConnectionError("the echo server closed the connection")
                unpacker.feed(data)
                for message in unpacker:
                    reply = message
            end = now()
            if i >= warmup:
                rtts.append(end - start)
        out.put(rtts)
        writer.close()

    asyncio.run(ping())


def run_tcp(samples: int, warmup: int) -> list[int]:
    port = free_tcp_port()
    return _run_pair(tcp_echo, (port,), tcp_ping, (port, samples, warmup))


# -- pyzmq DEALER/ROUTER ---------------------------------------------------------------------------------------


def zmq_echo(port: int, busy: bool, ready: Any, stop: Any) -> None:
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(f"tcp://127.0.0.1:{port}")
    sock.setsockopt(zmq.RCVTIMEO, 200)
    ready.set()
    flags = zmq.NOBLOCK if busy else 0
    packb, unpackb = msgpack.packb, msgpack.unpackb
    while not stop.is_set():
        for _ in range(10_000 if busy else 1):
            try:
                identity, payload = sock.recv_multipart(flags)
            except zmq.Again:
                continue
            sock.send_multipart((identity, packb(unpackb(payload))))
    sock.close(0)
    ctx.term()


def zmq_ping(port: int, busy: bool, samples: int, warmup: int, ready: Any, out: Any) -> None:
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    ready.wait(60)
    sock.connect(f"tcp://127.0.0.1:{port}")
    sock.setsockopt(zmq.RCVTIMEO, int(REPLY_TIMEOUT_S * 1000))
    flags = zmq.NOBLOCK if busy else 0
    packb, unpackb = msgpack.packb, msgpack.unpackb
    now = time.perf_counter_ns
    rtts: list[int] = []
    for i in range(warmup + samples):
        start = now()
        sock.send(packb((i, start)))
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while True:
            try:
                reply = sock.recv(flags)
                break
            except zmq.Again:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no reply for {REPLY_TIMEOUT_S:g} s") from None
        unpackb(reply)
        end = now()
        if i >= warmup:
            rtts.append(end - start)
    out.put(rtts)
    sock.close(0)
    ctx.term()


def run_zmq(samples: int, warmup: int, busy: bool) -> list[int]:
    port = free_tcp_port()
    return _run_pair(zmq_echo, (port, busy), zmq_ping, (port, busy, samples, warmup))


def _run_pair(
    server_fn: Callable[..., None],
    server_args: tuple[Any, ...],
    client_fn: Callable[..., None],
    client_args: tuple[Any, ...],
) -> list[int]:
    with children() as group:
        ctx = group.ctx
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        server = group.start(server_fn, *server_args, ready, stop)
        client = group.start(client_fn, *client_args, ready, out)
        rtts: list[int] = out.get(timeout=600)
        group.join(client, 10)
        stop.set()
        group.join(server, 10)
    return rtts


# -- main ------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000, help="round trips measured per row")
    parser.add_argument("--warmup", type=int, default=1_000, help="round trips before measuring")
    parser.add_argument("--quick", action="store_true", help="smoke run: 500 samples after 100 warm-up round trips")
    parser.add_argument(
        "--driver-threading",
        default="INVOKER",
        help="threading mode(s) of the embedded drivers, comma-separated for a row each (e.g. INVOKER,SHARED)",
    )
    parser.add_argument("--only", default="", help="run only rows whose name contains this (the baseline always runs)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    samples, warmup = (500, 100) if args.quick else (args.samples, args.warmup)

    rows: dict[str, Callable[[], list[int]]] = {
        BASELINE: lambda: run_tcp(samples, warmup),
        "pyzmq DEALER/ROUTER tcp://, blocking recv": lambda: run_zmq(samples, warmup, busy=False),
        "pyzmq DEALER/ROUTER tcp://, busy NOBLOCK recv": lambda: run_zmq(samples, warmup, busy=True),
    }
    for transport in ("IPC", "UDP"):
        variants: tuple[tuple[IdleMode, str], ...] = (
            ("busy_spin", "send_nowait"),
            ("busy_spin", "send"),
            ("backoff", "send_nowait"),
        )
        modes = args.driver_threading.split(",")
        for idle, mode in variants:
            for threading in modes:
                label = "send_nowait" if mode == "send_nowait" else "await send"
                driver = f", {threading} driver" if len(modes) > 1 else ""
                rows[f"endpoint {transport}, {idle}, {label}{driver}"] = functools.partial(
                    run_endpoint, samples, warmup, idle, mode, transport == "UDP", threading
                )
    results: dict[str, list[int]] = {}
    failed: list[str] = []
    for name, run in rows.items():
        if name != BASELINE and args.only and args.only not in name:
            continue
        try:
            results[name] = sorted(run())
        except Exception as exc:  # one broken row must not hide the others
            print(f"  {name}: FAILED: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        print(f"  {name}: p50 {percentile(results[name], 50) / 1000:.1f} µs", file=sys.stderr, flush=True)

    base = results.get(BASELINE)
    base_p50 = percentile(base, 50) / 1000 if base else float("nan")
    table = []
    for name, values in results.items():
        p50, p99, p999 = (percentile(values, p) / 1000 for p in (50, 99, 99.9))
        table.append((name, len(values), p50, p99, p999, values[-1] / 1000, base_p50 / p50))
    print_table(
        "End point round trip (µs), Probe(seq, sent_ns), client and server in separate processes",
        ["", "samples", "p50", "p99", "p99.9", "max", f"p50 speed-up vs {BASELINE}"],
        table,
    )

    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
