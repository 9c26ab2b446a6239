"""One-way throughput of small messages over one Server/Client connection, beside asyncio TCP and pyzmq, in one run.

    python benchmarks/endpoint_throughput.py [--messages 500000] [--term-length 65536] [--quick]
                                             [--only SUBSTRING] [--profile] [--dispatch native,python]

Every row is a sender process and a receiver process. The message is
``Move(seq: int, x: float, y: float)``: an attrs class registered in a
``Serialization`` for our rows (built anew for each message and decoded back
into a ``Move`` on the server), a msgpack-packed tuple ``(seq, x, y)`` for the
peers. The rate is first-to-last message at the receiver; CPU per message is
the user + system time of the whole process (every thread) over the same span,
which moves less than the rate on a shared machine.

Ours: a ``Server`` process counts with a sync ``on_message(Move)`` listener; a
``Client`` process connects and sends as fast as it can, with
``conn.send_nowait(msg)`` in a loop (``await asyncio.sleep(0)`` when it returns
False) or with ``await conn.send(msg)``. Over IPC the client shares the
server's Aeron directory and so attaches to the driver embedded in the server
process; over UDP each process has its own directory and embedded driver
(``prefer_ipc=False``), the connection going over 127.0.0.1. The rows run with
the default 64 KiB terms (``term_length``/``ipc_term_length``, which the server
grants) and again with 1 MiB terms, since how far a publisher may run ahead of
its subscriber is bounded by the term: a term over IPC, half a term over UDP.
The ``buffered session`` rows send with ``await conn.send`` on a connection that carries a buffered session
(``buffered_sessions=True`` on both ends): every message numbered, kept until acknowledged, and acknowledged
back. ``--dispatch native,python`` runs each of our rows with ``native_dispatch`` True and False (the native
poll-and-dispatch and one-call ``send_nowait``, or the Python path) for a before/after in one run.
``--profile`` runs our sender and receiver under cProfile and prints the top entries.

Peers: a plain asyncio TCP server (``asyncio.start_server``; it feeds
``reader.read(65536)`` into a ``msgpack.Unpacker`` and counts) with a client
that does ``writer.write(msgpack.packb(...))`` per message and ``await
writer.drain()`` every 256 — the baseline of the ratio column; and pyzmq
DEALER (sender) / ROUTER (receiver) over ``tcp://127.0.0.1``, blocking calls,
one msgpack payload per message.
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
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_aeron_dir, print_table
from _endpoint_common import (
    Move,
    children,
    free_tcp_port,
    free_udp_port,
    run_async,
    serialization,
    wait_count,
    wait_event,
)

STALL_S = 10.0
"""A receiver that hears nothing new for this long reports what it has."""
DRAIN_EVERY = 256
BASELINE = "asyncio TCP + msgpack"


# -- endpoint ---------------------------------------------------------------------------------------------------


def endpoint_sink(
    aeron_dir: str,
    port: int,
    messages: int,
    term_length: int,
    threading: str,
    ready: Any,
    stop: Any,
    out: Any,
    profile: bool,
    sealed: bool = False,
    buffered: bool = False,
    native_dispatch: bool = True,
) -> None:
    """Server process: count ``Move`` messages with a sync listener (``sealed``: seal every connection;
    ``buffered``: offer buffered sessions)."""

    async def serve() -> None:
        from endpoint import Server, ServerConfiguration

        config = ServerConfiguration(
            port=port,
            listen_address="127.0.0.1",
            aeron_dir=aeron_dir,
            serialization=serialization(),
            term_length=term_length,
            ipc_term_length=term_length,
            threading_mode=threading,
            sealed=sealed,
            buffered_sessions=buffered,
            native_dispatch=native_dispatch,
        )
        server = Server(config)
        count = 0
        first = last = cpu_first = cpu_last = 0.0

        @server.on_message(Move)
        def on_move(conn: object, message: Move) -> None:
            nonlocal count, first, last, cpu_first, cpu_last
            count += 1
            if count == 1:
                first, cpu_first = time.perf_counter(), time.process_time()
            elif count == messages:
                last, cpu_last = time.perf_counter(), time.process_time()

        try:
            async with server:
                ready.set()
                got, moved = await wait_count(lambda: count, messages, STALL_S)
                out.put(("ok", got, (last or moved) - first if got else 0.0, (cpu_last or cpu_first) - cpu_first))
                await wait_event(stop, 120)
        except Exception as exc:
            out.put(("error", f"server: {type(exc).__name__}: {exc}", 0.0, 0.0))
            raise

    run_async(serve, "receiver (Server, sync on_message)" if profile else "")


def endpoint_source(
    aeron_dir: str,
    port: int,
    messages: int,
    mode: str,
    udp: bool,
    threading: str,
    ready: Any,
    done: Any,
    out: Any,
    profile: bool,
    sealed: bool = False,
    buffered: bool = False,
    native_dispatch: bool = True,
) -> None:
    """Client process: connect, then send ``messages`` Moves with ``send_nowait`` or ``await send``
    (``sealed``: ask for a sealed connection; ``buffered``: claim a buffered session, every send kept until
    acknowledged)."""

    async def send_all() -> None:
        from endpoint import Client, ClientConfiguration

        config = ClientConfiguration(
            aeron_dir=aeron_dir,
            serialization=serialization(),
            prefer_ipc=not udp,
            threading_mode=threading,
            sealed=sealed,
            buffered_sessions=buffered,
            native_dispatch=native_dispatch,
        )
        try:
            async with Client(config) as client:
                if not ready.wait(60):
                    raise TimeoutError("the server process did not start")
                conn = await client.connect("127.0.0.1", port)
                if conn.sealed != sealed:
                    raise RuntimeError(f"asked for sealed={sealed}, the connection has sealed={conn.sealed}")
                if (conn.session is not None) != buffered:
                    raise RuntimeError(f"asked for buffered={buffered}, the connection has session={conn.session}")
                start, cpu_start = time.perf_counter(), time.process_time()
                if mode == "send_nowait":
                    send_nowait = conn.send_nowait
                    sleep = asyncio.sleep
                    i = 0
                    while i < messages:
                        if send_nowait(Move(i, 1.0, 2.0)):
                            i += 1
                        else:
                            await sleep(0)
                else:
                    send = conn.send
                    for i in range(messages):
                        await send(Move(i, 1.0, 2.0))
                out.put(("sent", messages, time.perf_counter() - start, time.process_time() - cpu_start))
                await wait_event(done, 120)
        except Exception as exc:
            out.put(("error", f"client: {type(exc).__name__}: {exc}", 0.0, 0.0))
            raise

    run_async(send_all, f"sender (Client, {mode})" if profile else "")


class Result(NamedTuple):
    received: int
    seconds: float
    """First to last message at the receiver."""
    send_seconds: float
    receiver_cpu: float
    """CPU seconds of the whole receiver process (every thread) from its first message to its last."""
    sender_cpu: float


def _collect(out: Any, sent_out: Any) -> Result:
    status, received, elapsed, receiver_cpu = out.get(timeout=180)
    if status != "ok":
        raise RuntimeError(received)
    sent_status, detail, sent_elapsed, sender_cpu = sent_out.get(timeout=30)
    if sent_status != "sent":
        raise RuntimeError(detail)
    return Result(received, elapsed, sent_elapsed, receiver_cpu, sender_cpu)


def run_endpoint(
    messages: int,
    mode: str,
    udp: bool,
    term_length: int,
    threading: str,
    profile: bool,
    sealed: bool = False,
    buffered: bool = False,
    native_dispatch: bool = True,
) -> Result:
    """One sender process and one receiver process over one connection (``sealed``: a sealed connection;
    ``buffered``: carrying a buffered session; ``native_dispatch``: the end points' setting of that name)."""
    with children() as group:
        ctx = group.ctx
        ready, stop, done, out, sent_out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        server_dir = fresh_aeron_dir("ep-tp-srv")
        client_dir = fresh_aeron_dir("ep-tp-cli") if udp else server_dir
        group.dirs += [server_dir, client_dir]
        port = free_udp_port()
        server = group.start(
            endpoint_sink,
            str(server_dir),
            port,
            messages,
            term_length,
            threading,
            ready,
            stop,
            out,
            profile,
            sealed,
            buffered,
            native_dispatch,
        )
        client = group.start(
            endpoint_source,
            str(client_dir),
            port,
            messages,
            mode,
            udp,
            threading,
            ready,
            done,
            sent_out,
            profile,
            sealed,
            buffered,
            native_dispatch,
        )
        result = _collect(out, sent_out)
        done.set()
        group.join(client, 15)  # the client leaves first: over IPC it uses the server's driver
        stop.set()
        group.join(server, 15)
    return result


# -- asyncio TCP + msgpack -------------------------------------------------------------------------------------


def tcp_sink(port: int, messages: int, ready: Any, stop: Any, out: Any) -> None:
    async def serve() -> None:
        import msgpack  # type: ignore[import-untyped]

        count = 0
        first = last = cpu_first = cpu_last = 0.0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal count, first, last, cpu_first, cpu_last
            unpacker = msgpack.Unpacker()
            feed = unpacker.feed
            read = reader.read
            while count < messages:
                data = await read(65536)
                if not data:
                    break
                feed(data)
                for _ in unpacker:
                    count += 1
                    if count == 1:
                        first, cpu_first = time.perf_counter(), time.process_time()
                last, cpu_last = time.perf_counter(), time.process_time()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            ready.set()
            got, _ = await wait_count(lambda: count, messages, STALL_S)
            out.put(("ok", got, last - first if got else 0.0, cpu_last - cpu_first))
            await wait_event(stop, 60)

    asyncio.run(serve())


def tcp_source(port: int, messages: int, ready: Any, done: Any, out: Any) -> None:
    async def send_all() -> None:
        import msgpack

        ready.wait(60)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        packb = msgpack.packb
        write = writer.write
        start, cpu_start = time.perf_counter(), time.process_time()
        for i in range(messages):
            write(packb((i, 1.0, 2.0)))
            if i % DRAIN_EVERY == 0:
                await writer.drain()
        await writer.drain()
        out.put(("sent", messages, time.perf_counter() - start, time.process_time() - cpu_start))
        await wait_event(done, 120)
        writer.close()

    asyncio.run(send_all())


def run_tcp(messages: int) -> Result:
    return _run_pair(tcp_sink, tcp_source, free_tcp_port(), messages)


# -- pyzmq DEALER/ROUTER ---------------------------------------------------------------------------------------


def zmq_sink(port: int, messages: int, ready: Any, stop: Any, out: Any) -> None:
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.bind(f"tcp://127.0.0.1:{port}")
    ready.set()
    recv = sock.recv_multipart
    unpackb = msgpack.unpackb
    sock.setsockopt(zmq.RCVTIMEO, int(STALL_S * 1000))
    count = 0
    first = last = cpu_first = 0.0
    try:
        while count < messages:
            _, payload = recv()
            unpackb(payload)
            count += 1
            if count == 1:
                first, cpu_first = time.perf_counter(), time.process_time()
        last = time.perf_counter()
    except zmq.Again:
        last = time.perf_counter() - STALL_S
    out.put(("ok", count, last - first if count else 0.0, time.process_time() - cpu_first))
    stop.wait(60)
    sock.close(0)
    ctx.term()


def zmq_source(port: int, messages: int, ready: Any, done: Any, out: Any) -> None:
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    ready.wait(60)
    sock.connect(f"tcp://127.0.0.1:{port}")
    send = sock.send
    packb = msgpack.packb
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(messages):
        send(packb((i, 1.0, 2.0)))
    out.put(("sent", messages, time.perf_counter() - start, time.process_time() - cpu_start))
    done.wait(120)
    sock.close(linger=0)
    ctx.term()


def run_zmq(messages: int) -> Result:
    return _run_pair(zmq_sink, zmq_source, free_tcp_port(), messages)


def _run_pair(sink: Callable[..., None], source: Callable[..., None], port: int, messages: int) -> Result:
    with children() as group:
        ctx = group.ctx
        ready, stop, done, out, sent_out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        server = group.start(sink, port, messages, ready, stop, out)
        client = group.start(source, port, messages, ready, done, sent_out)
        result = _collect(out, sent_out)
        done.set()
        group.join(client, 10)
        stop.set()
        group.join(server, 10)
    return result


# -- main ------------------------------------------------------------------------------------------------------


TUNED_TERM = 1024 * 1024


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument(
        "--term-length", type=int, default=64 * 1024, help="term_length and ipc_term_length the server grants"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 messages, no 1 MiB-term rows")
    parser.add_argument("--only", default="", help="run only rows whose name contains this (the baseline always runs)")
    parser.add_argument(
        "--driver-threading",
        default="INVOKER",
        help="threading mode(s) of the embedded drivers, comma-separated for a row each (e.g. INVOKER,SHARED)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile our sender and receiver (slows them down)")
    parser.add_argument(
        "--dispatch",
        default="native",
        help="the end points' reading path(s), comma-separated for a row each: native (native_dispatch=True), python",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    n = 20_000 if args.quick else args.messages

    rows: dict[str, Callable[[], Result]] = {
        BASELINE: lambda: run_tcp(n),
        "pyzmq DEALER/ROUTER tcp:// + msgpack": lambda: run_zmq(n),
    }
    terms = [(args.term_length, "")] if args.quick else [(args.term_length, ""), (TUNED_TERM, ", 1 MiB terms")]
    modes = args.driver_threading.split(",")
    dispatches = args.dispatch.split(",")
    if not set(dispatches) <= {"native", "python"}:
        parser.error("--dispatch takes native, python or both")
    for term_length, suffix in terms:
        for transport in ("IPC", "UDP"):
            for mode in ("send_nowait", "send"):
                for threading in modes:
                    for dispatch in dispatches:
                        label = "send_nowait" if mode == "send_nowait" else "await send"
                        driver = f", {threading} driver" if len(modes) > 1 else ""
                        how = f", {dispatch} dispatch" if len(dispatches) > 1 else ""
                        rows[f"endpoint {transport}, {label}{suffix}{driver}{how}"] = functools.partial(
                            run_endpoint,
                            n,
                            mode,
                            transport == "UDP",
                            term_length,
                            threading,
                            args.profile,
                            False,
                            False,
                            dispatch == "native",
                        )
    for transport in ("IPC", "UDP"):  # what buffered sessions cost: every message numbered, kept and acknowledged
        rows[f"endpoint {transport}, await send, buffered session"] = functools.partial(
            run_endpoint, n, "send", transport == "UDP", args.term_length, modes[0], args.profile, False, True
        )
    results: dict[str, Result] = {}
    failed: list[str] = []
    for name, run in rows.items():
        if name != BASELINE and args.only and args.only not in name:
            continue
        try:
            results[name] = run()
        except Exception as exc:  # one broken row must not hide the others
            print(f"  {name}: FAILED: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        r = results[name]
        print(f"  {name}: {r.received / r.seconds if r.seconds else 0:,.0f} msgs/s", file=sys.stderr, flush=True)

    base_result = results.get(BASELINE)
    base = base_result.received / base_result.seconds if base_result and base_result.seconds else 0.0
    table = []
    for name, r in results.items():
        rate = r.received / r.seconds if r.seconds else 0.0
        table.append(
            (
                name,
                r.received,
                rate,
                n / r.send_seconds if r.send_seconds else 0.0,
                r.sender_cpu / n * 1e6,
                r.receiver_cpu / max(r.received, 1) * 1e6,
                rate / base if base else float("nan"),
            )
        )
    print_table(
        f"End point throughput, one way, {n:,} Move(seq, x, y) messages, sender and receiver in separate processes",
        ["", "received", "msgs/s", "sender msgs/s", "sender CPU µs/msg", "receiver CPU µs/msg", f"x {BASELINE}"],
        table,
    )
    print(
        f"  (msgs/s: first to last message at the receiver; CPU: user + system of the whole process, all threads, "
        f"over the same interval; term length {args.term_length:,} unless the row says otherwise)"
    )

    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
