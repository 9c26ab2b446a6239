"""Unary RPC over one connection: ours (IPC and UDP) beside grpcio and pyzmq DEALER/ROUTER, in one run.

    python benchmarks/rpc_calls.py [--calls 20000] [--pipelined-calls 100000] [--window 256]
                                   [--idle busy_spin|backoff] [--driver-idle STRATEGY] [--quick]
                                   [--only SUBSTRING] [--profile]

Every row is a server process and a client process (spawned; this process only
starts them and prints the results). The call is the same everywhere: an
argument of an int and a 32-character string, ``price(Order(qty, sku))``, whose
result is an int (``qty * 3 + len(sku)``, checked by the client). The client
makes one call after another (``--calls``, after a warm-up; each timed with
``time.perf_counter_ns``: calls/s, p50, p99), then ``--pipelined-calls`` with
``--window`` calls in flight: that many asyncio tasks, each making calls in a
loop until the total is reached (calls/s from the first call to the last answer).

Ours: the server exposes ``PricingService`` (an ``async def price`` that never
suspends, answered on the spot) with ``server.rpc.expose(obj, 1)``; the client
calls it through ``conn.rpc.proxy(Pricing, 1)`` (a ``typing.Protocol``), the
``Order`` travelling as a registered attrs class. Both end points and their
drivers use ``--idle`` (``idle_strategy`` and ``driver_idle_strategy``; ``--driver-idle`` sets the
drivers' apart). Over
IPC the client shares the server's Aeron directory (the driver is embedded in
the server process); over UDP each process has its own directory and embedded
driver, and the connection goes over 127.0.0.1.

Peers, both asyncio, both msgpack-encoding ``(qty, sku)`` and the int answer:
grpcio's ``grpc.aio`` with a generic handler (``unary_unary_rpc_method_handler``
with msgpack (de)serializers, so no protoc) over TCP 127.0.0.1 and a unix socket;
pyzmq (``zmq.asyncio``) DEALER client / ROUTER server, a call id frame matching
answers to calls, over ``tcp://127.0.0.1`` and ``ipc://``. The peers never busy
poll: ``--idle`` applies to ours only.

The ratio table divides our calls/s by each peer's (> 1: ours is faster); IPC
rows are naturally compared with the unix socket / ``ipc://`` peers and UDP rows
with the TCP ones, all four are shown. ``--profile`` runs our client and server
under cProfile.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fresh_aeron_dir, percentile, print_table
from _endpoint_common import (
    CALC_OBJECT_ID,
    SKU,
    Order,
    Pricing,
    PricingService,
    children,
    free_tcp_port,
    price_of,
    rpc_serialization,
    run_async,
    serve_grpc,
    serve_until_stopped,
    wait_event,
)

from endpoint.config import IdleMode

CALL_TIMEOUT_S = 10.0
"""Bound on one call (ours: the proxy's timeout; grpcio: the call's deadline; pyzmq: the whole phase's)."""
RUN_TIMEOUT_S = 600.0
"""Bound on one client's whole run."""
GRPC_SERVICE = "bench.Pricing"
GRPC_METHOD = f"/{GRPC_SERVICE}/Price"

OURS_IPC = "ours IPC"
OURS_UDP = "ours UDP"
GRPC_TCP = "grpcio aio, TCP 127.0.0.1"
GRPC_UNIX = "grpcio aio, unix socket"
ZMQ_TCP = "pyzmq DEALER/ROUTER, tcp://127.0.0.1"
ZMQ_IPC = "pyzmq DEALER/ROUTER, ipc://"
PEERS = (GRPC_TCP, GRPC_UNIX, ZMQ_TCP, ZMQ_IPC)
SHORT = {GRPC_TCP: "x grpc tcp", GRPC_UNIX: "x grpc unix", ZMQ_TCP: "x zmq tcp", ZMQ_IPC: "x zmq ipc"}

PIPELINED_BAR = 50_000
GRPC_RATIO_BAR = 3.0
P50_BAR_US = 150.0


class Plan(NamedTuple):
    """What a client process does."""

    calls: int
    warmup: int
    pipelined: int
    window: int


class Result(NamedTuple):
    sequential_calls: int
    sequential_seconds: float
    latencies_ns: list[int]
    """Sorted."""
    pipelined_calls: int
    pipelined_seconds: float

    @property
    def sequential_rate(self) -> float:
        return self.sequential_calls / self.sequential_seconds if self.sequential_seconds else 0.0

    @property
    def pipelined_rate(self) -> float:
        return self.pipelined_calls / self.pipelined_seconds if self.pipelined_seconds else 0.0


Call = Callable[[int], Awaitable[int]]
"""``call(qty)`` makes one remote call of ``price(qty, SKU)`` and returns the answer."""


async def measure(call: Call, plan: Plan) -> Result:
    """The client's whole run against one ``call`` function: warm-up, one at a time, then pipelined."""
    expected = {qty: price_of(qty, SKU) for qty in range(256)}

    async def checked(qty: int) -> None:
        answer = await call(qty)
        if answer != expected[qty]:
            raise RuntimeError(f"price({qty}) answered {answer!r}, not {expected[qty]}")

    for i in range(plan.warmup):
        await checked(i & 0xFF)
    now = time.perf_counter_ns
    latencies: list[int] = []
    append = latencies.append
    start = time.perf_counter()
    for i in range(plan.calls):
        begin = now()
        answer = await call(i & 0xFF)
        append(now() - begin)
        if answer != expected[i & 0xFF]:
            raise RuntimeError(f"price({i & 0xFF}) answered {answer!r}")
    sequential_seconds = time.perf_counter() - start

    async def window(total: int) -> float:
        remaining = total

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await checked(remaining & 0xFF)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(plan.window, total))))
        return time.perf_counter() - began

    await window(min(plan.pipelined, plan.window * 8))  # warm-up of the pipelined path
    pipelined_seconds = await window(plan.pipelined)
    latencies.sort()
    return Result(plan.calls, sequential_seconds, latencies, plan.pipelined, pipelined_seconds)


def _report(out: Any, where: str, run: Callable[[], Awaitable[Result]]) -> Callable[[], Coroutine[Any, Any, None]]:
    """A child's main: put its Result (or one line saying what failed) on ``out``."""

    async def main() -> None:
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S):
                out.put(tuple(await run()))  # a plain tuple: the parent has no __mp_main__.Result
        except BaseException as exc:
            out.put(f"{where}: {type(exc).__name__}: {exc}")
            raise

    return main


# -- ours -------------------------------------------------------------------------------------------------------


def endpoint_server(
    aeron_dir: str, port: Any, idle: IdleMode, driver_idle: str, ready: Any, stop: Any, out: Any, profile: bool
) -> None:
    """``port``: a shared value the server's own port goes into once it is bound."""

    async def serve() -> None:
        from endpoint import Server, ServerConfiguration

        config = ServerConfiguration(
            port=0,
            listen_address="127.0.0.1",
            aeron_dir=aeron_dir,
            serialization=rpc_serialization(),
            idle_strategy=idle,
            driver_idle_strategy=driver_idle,
        )
        server = Server(config)
        server.rpc.expose(PricingService(), CALC_OBJECT_ID, interface=Pricing)
        await serve_until_stopped(server, ready, stop, out, RUN_TIMEOUT_S + 60, bound=port)

    run_async(serve, "RPC server (ours)" if profile else "")


def endpoint_client(
    aeron_dir: str,
    port: Any,
    idle: IdleMode,
    driver_idle: str,
    udp: bool,
    plan: Plan,
    ready: Any,
    out: Any,
    profile: bool,
) -> None:
    async def run() -> Result:
        from endpoint import Client, ClientConfiguration

        config = ClientConfiguration(
            aeron_dir=aeron_dir,
            serialization=rpc_serialization(),
            prefer_ipc=not udp,
            idle_strategy=idle,
            driver_idle_strategy=driver_idle,
        )
        async with Client(config) as client:
            if not await wait_event(ready, 60):
                raise TimeoutError("the server process did not start")
            conn = await client.connect("127.0.0.1", port.value)
            if conn.is_ipc == udp:
                raise RuntimeError(f"connected over {'IPC' if conn.is_ipc else 'UDP'}, not as asked")
            price = conn.rpc.proxy(Pricing, CALC_OBJECT_ID, timeout=CALL_TIMEOUT_S).price
            result = await measure(lambda qty: price(Order(qty, SKU)), plan)
            await conn.close("done")
            return result

    run_async(_report(out, "client", run), "RPC client (ours)" if profile else "")


def run_endpoint(plan: Plan, idle: IdleMode, driver_idle: str, udp: bool, profile: bool) -> Result:
    with children() as group:
        ctx = group.ctx
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        server_dir = fresh_aeron_dir("rpc-srv")
        client_dir = fresh_aeron_dir("rpc-cli") if udp else server_dir
        group.dirs += [server_dir, client_dir]
        port = ctx.Value("i", 0)
        server = group.start(endpoint_server, str(server_dir), port, idle, driver_idle, ready, stop, out, profile)
        client = group.start(endpoint_client, str(client_dir), port, idle, driver_idle, udp, plan, ready, out, profile)
        result = out.get(timeout=RUN_TIMEOUT_S + 60)
        group.join(client, 15)  # the client leaves first: over IPC it uses the server's driver
        stop.set()
        group.join(server, 15)
    if isinstance(result, str):
        raise RuntimeError(result)
    return Result(*result)


# -- grpcio -----------------------------------------------------------------------------------------------------


def grpc_server(address: str, ready: Any, stop: Any, out: Any) -> None:
    import grpc
    import msgpack  # type: ignore[import-untyped]

    async def price(request: list[Any], context: Any) -> int:
        qty, sku = request
        return price_of(qty, sku)

    method = grpc.unary_unary_rpc_method_handler(
        price, request_deserializer=msgpack.unpackb, response_serializer=msgpack.packb
    )
    serve_grpc(GRPC_SERVICE, {"Price": method}, address, ready, stop, out, RUN_TIMEOUT_S + 60)


def grpc_client(address: str, plan: Plan, ready: Any, out: Any) -> None:
    async def run() -> Result:
        import grpc
        import msgpack

        if not await wait_event(ready, 60):
            raise TimeoutError("the server process did not start")
        async with grpc.aio.insecure_channel(address) as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            stub = channel.unary_unary(
                GRPC_METHOD, request_serializer=msgpack.packb, response_deserializer=msgpack.unpackb
            )
            return await measure(lambda qty: stub((qty, SKU), timeout=CALL_TIMEOUT_S), plan)

    asyncio.run(_report(out, "grpc client", run)())


def run_grpc(plan: Plan, unix: bool) -> Result:
    with tempfile.TemporaryDirectory(prefix="rpc-bench-") as tmp:
        address = f"unix:{tmp}/grpc.sock" if unix else f"127.0.0.1:{free_tcp_port()}"
        return _run_pair(grpc_server, grpc_client, address, plan)


# -- pyzmq ------------------------------------------------------------------------------------------------------


def zmq_server(address: str, ready: Any, stop: Any, out: Any) -> None:
    async def serve() -> None:
        import msgpack
        import zmq
        import zmq.asyncio

        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.bind(address)
        packb, unpackb = msgpack.packb, msgpack.unpackb

        async def answer() -> None:
            recv, send = sock.recv_multipart, sock.send_multipart
            while True:
                identity, call_id, payload = await recv()
                qty, sku = unpackb(payload)
                await send((identity, call_id, packb(price_of(qty, sku))))

        task = asyncio.get_running_loop().create_task(answer())
        try:
            ready.set()
            await wait_event(stop, RUN_TIMEOUT_S + 60)
            if task.done():
                task.result()  # raise what stopped it
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            sock.close(0)
            ctx.term()

    try:
        asyncio.run(serve())
    except Exception as exc:
        out.put(f"zmq server: {type(exc).__name__}: {exc}")
        raise


def zmq_client(address: str, plan: Plan, ready: Any, out: Any) -> None:
    async def run() -> Result:
        import msgpack
        import zmq
        import zmq.asyncio

        if not await wait_event(ready, 60):
            raise TimeoutError("the server process did not start")
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.connect(address)
        loop = asyncio.get_running_loop()
        packb, unpackb = msgpack.packb, msgpack.unpackb
        pending: dict[bytes, asyncio.Future[int]] = {}
        ids = itertools.count(1)

        async def read_answers() -> None:
            recv = sock.recv_multipart
            while True:
                call_id, payload = await recv()
                future = pending.pop(call_id, None)
                if future is not None and not future.done():
                    future.set_result(unpackb(payload))

        async def call(qty: int) -> int:
            call_id = next(ids).to_bytes(8, "little")
            future: asyncio.Future[int] = loop.create_future()
            pending[call_id] = future
            await sock.send_multipart((call_id, packb((qty, SKU))))
            return await future

        reader = loop.create_task(read_answers())
        try:
            # One bound for everything: a per-call wait_for would cost the peer more than the call itself.
            async with asyncio.timeout(RUN_TIMEOUT_S - 10):
                return await measure(call, plan)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            sock.close(0)
            ctx.term()

    asyncio.run(_report(out, "zmq client", run)())


def run_zmq(plan: Plan, ipc: bool) -> Result:
    with tempfile.TemporaryDirectory(prefix="rpc-bench-") as tmp:
        address = f"ipc://{tmp}/zmq.sock" if ipc else f"tcp://127.0.0.1:{free_tcp_port()}"
        return _run_pair(zmq_server, zmq_client, address, plan)


def _run_pair(server_fn: Callable[..., None], client_fn: Callable[..., None], address: str, plan: Plan) -> Result:
    with children() as group:
        ctx = group.ctx
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        server = group.start(server_fn, address, ready, stop, out)
        client = group.start(client_fn, address, plan, ready, out)
        result = out.get(timeout=RUN_TIMEOUT_S + 60)
        group.join(client, 15)
        stop.set()
        group.join(server, 15)
    if isinstance(result, str):
        raise RuntimeError(result)
    return Result(*result)


# -- main ------------------------------------------------------------------------------------------------------


def _ratio(ours: float, peer: float) -> str:
    return f"{ours / peer:.2f}" if ours and peer else "-"


def _print_bars(results: dict[str, Result], idle: str, driver_idle: str, window: int) -> None:
    print(f"\nBars (idle {idle}, driver idle {driver_idle}, window {window})")
    for name in (OURS_IPC, OURS_UDP):
        r = results.get(name)
        if r is None:
            continue
        met = "MET" if r.pipelined_rate >= PIPELINED_BAR else "NOT MET"
        print(f"  {name}: pipelined {r.pipelined_rate:,.0f} calls/s >= {PIPELINED_BAR:,}: {met}")
        for peer in (GRPC_TCP, GRPC_UNIX):
            p = results.get(peer)
            if p is None or not p.pipelined_rate:
                continue
            ratio = r.pipelined_rate / p.pipelined_rate
            met = "MET" if ratio >= GRPC_RATIO_BAR else "NOT MET"
            print(f"  {name}: pipelined x {peer} {ratio:.2f} >= {GRPC_RATIO_BAR:g}: {met}")
    r = results.get(OURS_IPC)
    if r is not None:
        p50 = percentile(r.latencies_ns, 50) / 1000
        if idle == "busy_spin":
            met = "MET" if p50 <= P50_BAR_US else "NOT MET"
            print(f"  {OURS_IPC}: p50 one call in flight {p50:.1f} µs <= {P50_BAR_US:g} µs: {met}")
        else:
            print(f"  {OURS_IPC}: p50 one call in flight {p50:.1f} µs (the {P50_BAR_US:g} µs bar is for busy_spin)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000, help="calls one at a time, timed each")
    parser.add_argument("--warmup", type=int, default=1_000, help="calls one at a time before measuring")
    parser.add_argument("--pipelined-calls", type=int, default=100_000, help="calls made with --window in flight")
    parser.add_argument("--window", type=int, default=256, help="calls in flight in the pipelined run")
    parser.add_argument(
        "--idle",
        choices=("busy_spin", "backoff"),
        default="busy_spin",
        help="ours only: idle_strategy and driver_idle_strategy of both end points (default: %(default)s)",
    )
    parser.add_argument(
        "--driver-idle",
        choices=("busy_spin", "backoff", "yielding", "sleeping"),
        default=None,
        help="ours only: driver_idle_strategy apart from --idle (default: as --idle)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 300 + 2,000 calls after 50 warm-up calls")
    parser.add_argument("--only", default="", help="run only rows whose name contains this")
    parser.add_argument("--profile", action="store_true", help="cProfile our client and server (slows them down)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    if args.quick:
        plan = Plan(calls=300, warmup=50, pipelined=2_000, window=min(args.window, 64))
    else:
        plan = Plan(args.calls, args.warmup, args.pipelined_calls, args.window)
    if min(plan.calls, plan.pipelined, plan.window) < 1 or plan.warmup < 0:
        parser.error("--calls, --pipelined-calls and --window must be at least 1, --warmup at least 0")

    driver_idle = args.driver_idle or args.idle
    idle_label = args.idle if driver_idle == args.idle else f"{args.idle}, driver {driver_idle}"
    rows: dict[str, Callable[[], Result]] = {
        OURS_IPC: functools.partial(run_endpoint, plan, args.idle, driver_idle, False, args.profile),
        OURS_UDP: functools.partial(run_endpoint, plan, args.idle, driver_idle, True, args.profile),
        GRPC_TCP: functools.partial(run_grpc, plan, False),
        GRPC_UNIX: functools.partial(run_grpc, plan, True),
        ZMQ_TCP: functools.partial(run_zmq, plan, False),
        ZMQ_IPC: functools.partial(run_zmq, plan, True),
    }
    results: dict[str, Result] = {}
    failed: list[str] = []
    for name, run in rows.items():
        if args.only and args.only not in name:
            continue
        try:
            results[name] = done = run()
        except Exception as exc:  # one broken row must not hide the others
            print(f"  {name}: FAILED: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        print(
            f"  {name}: {done.sequential_rate:,.0f} calls/s one at a time, {done.pipelined_rate:,.0f} pipelined",
            file=sys.stderr,
            flush=True,
        )

    table = []
    for name, r in results.items():
        p50, p90, p99 = (percentile(r.latencies_ns, p) / 1000 for p in (50, 90, 99))
        label = f"{name} ({idle_label})" if name in (OURS_IPC, OURS_UDP) else name
        table.append((label, r.sequential_rate, p50, p90, p99, r.pipelined_rate))
    print_table(
        f"Unary RPC, price(Order(int, 32-byte str)) -> int, client and server in separate processes "
        f"({plan.calls:,} calls one at a time, {plan.pipelined:,} with {plan.window} in flight)",
        ["", "calls/s (1 in flight)", "p50 µs", "p90 µs", "p99 µs", f"calls/s ({plan.window} in flight)"],
        table,
    )

    ratios = []
    for name in (OURS_IPC, OURS_UDP):
        ours = results.get(name)
        if ours is None:
            continue
        for mode, rate in (("1 in flight", ours.sequential_rate), (f"{plan.window} in flight", ours.pipelined_rate)):
            cells = []
            for peer in PEERS:
                p = results.get(peer)
                peer_rate = 0.0 if p is None else p.sequential_rate if mode == "1 in flight" else p.pipelined_rate
                cells.append(_ratio(rate, peer_rate))
            ratios.append((f"{name}, {mode}", *cells))
    if ratios:
        print_table(
            "Ratios ours / grpc and ours / zmq, calls/s (> 1: ours is faster)",
            ["", *(SHORT[peer] for peer in PEERS)],
            ratios,
        )
    _print_bars(results, args.idle, driver_idle, plan.window)

    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
