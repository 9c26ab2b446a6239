"""UDP round-trip latency between two processes: endpoint vs Aeron Java 1.15.1 vs pyzmq, in one run.

    python benchmarks/udp_latency.py [--messages 10000] [--java-messages 20000] [--no-java] [--quick]
                                     [--pure-spin]

Ping sends a 32-byte message carrying a timestamp over ``aeron:udp`` on 127.0.0.1,
pong echoes it on a second channel, ping records the round trip. Our ping and pong
are separate processes that poll in a tight loop and call ``sched_yield`` after an
empty poll (on a 2-core machine three purely spinning processes -- ping, pong and
the driver -- mostly wait for the scheduler's tick; ``--pure-spin`` adds that row).
The driver is one standalone driver both use (three processes) or one per side
(four), SHARED threading, with a yielding, busy-spin or backoff idle strategy.
"2 processes, embedded INVOKER drivers": each of ping and pong embeds an
INVOKER-mode driver and busy-spins one loop that runs its driver's duty cycle and
polls (its client conductor every 64 rounds): two processes, one thread each, no
GIL hand-offs and nothing else to schedule on a 2-core machine.

Aeron Java 1.15.1 runs its ``io.aeron.samples.Ping`` and ``Pong`` (busy-spin
polling) as separate JVMs on one Java ``MediaDriver``: DEDICATED with its default
backoff idle strategy, and SHARED with backoff (``--java-yielding`` adds SHARED with a
yielding driver). Busy-spinning or yielding Java drivers are not in the default run:
on a 2-core machine DEDICATED busy spin (five spinning threads) did not finish its
warm-up in 300 s, SHARED busy spin and SHARED yielding not in 90 s. The
percentiles are read from Ping's HdrHistogram output. pyzmq runs REQ/REP over
``tcp://127.0.0.1`` with blocking receives, and PAIR with busy NOBLOCK polling.
The speed-up column is against Aeron Java with its defaults (DEDICATED, backoff).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import MESSAGE_LENGTH, fresh_aeron_dir, percentile, print_table, run_zmq_round_trip, standalone_driver  # noqa: E402
from udp_throughput import free_tcp_port, free_udp_port, invoker_client  # noqa: E402

PING_STREAM, PONG_STREAM = 1002, 1003
_STAMP = struct.Struct("<q")
WARMUP = 2_000
JAVA_TIMEOUT_S = 90.0
INVOKER_ROW = "endpoint, 2 processes, embedded INVOKER drivers, busy spin"
YIELDING_JAVA = "org.agrona.concurrent.YieldingIdleStrategy"


# -- endpoint -------------------------------------------------------------------------------------


def _client_idle(yielding: bool) -> Callable[[int], None]:
    """Busy spin, or give the core away (sched_yield) after an empty poll: on a 2-core machine
    three spinning processes (ping, pong, driver) otherwise wait for the scheduler's tick."""
    if not yielding:
        return lambda work: None
    sched_yield = os.sched_yield

    def idle(work: int) -> None:
        if not work:
            sched_yield()

    return idle


def endpoint_pong(
    aeron_dir: str,
    ping_channel: str,
    pong_channel: str,
    yielding: bool,
    ready: mp.synchronize.Event,
    stop: mp.synchronize.Event,
) -> None:
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        sub = aeron.add_subscription(ping_channel, PING_STREAM)
        pub = aeron.add_exclusive_publication(pong_channel, PONG_STREAM)
        ready.set()
        offer = pub.offer

        def echo(payload: memoryview, header: object) -> None:
            while offer(payload) < 0:
                pass

        poll = sub.poll
        idle = _client_idle(yielding)
        while not stop.is_set():
            for _ in range(10_000):
                idle(poll(echo, 10))


def endpoint_ping(
    aeron_dir: str, ping_channel: str, pong_channel: str, messages: int, yielding: bool, out: mp.Queue
) -> None:
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        pub = aeron.add_exclusive_publication(ping_channel, PING_STREAM)
        sub = aeron.add_subscription(pong_channel, PONG_STREAM)
        deadline = time.monotonic() + 30
        while not (pub.is_connected and sub.images) and time.monotonic() < deadline:
            time.sleep(0.001)
        rtts: list[int] = []
        now = time.perf_counter_ns
        buffer = bytearray(MESSAGE_LENGTH)
        got: list[int] = []

        def on_pong(payload: memoryview, header: object) -> None:
            got.append(now() - _STAMP.unpack_from(payload)[0])

        poll = sub.poll
        offer = pub.offer
        idle = _client_idle(yielding)
        deadline = time.monotonic() + 120
        for i in range(messages + WARMUP):
            _STAMP.pack_into(buffer, 0, now())
            while offer(buffer) < 0:
                pass
            while not got:
                idle(poll(on_pong, 1))
                if time.monotonic() > deadline:  # a lost message is repaired, but bound the wait
                    out.put(rtts)
                    return
            if i >= WARMUP:
                rtts.append(got[0])
            got.clear()
        out.put(rtts)


def run_endpoint(
    messages: int, *, shared_driver: bool, idle: str, threading_mode: str = "SHARED", yielding: bool = False
) -> list[int]:
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    ping_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    pong_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    args = ["--threading-mode", threading_mode]
    with contextlib.ExitStack() as stack:
        pong_dir = ping_dir = fresh_aeron_dir("udp-lat")
        stack.enter_context(standalone_driver(pong_dir, idle, args))
        if not shared_driver:
            ping_dir = fresh_aeron_dir("udp-lat-ping")
            stack.enter_context(standalone_driver(ping_dir, idle, args))
        pong = ctx.Process(
            target=endpoint_pong, args=(str(pong_dir), ping_channel, pong_channel, yielding, ready, stop), daemon=True
        )
        pong.start()
        ready.wait(60)
        ping = ctx.Process(
            target=endpoint_ping, args=(str(ping_dir), ping_channel, pong_channel, messages, yielding, out), daemon=True
        )
        ping.start()
        rtts: list[int] = out.get(timeout=300)
        stop.set()
        ping.join(30)
        pong.join(30)
        for proc in (ping, pong):
            if proc.is_alive():
                proc.kill()
                proc.join(5)
    return rtts


# -- endpoint with an embedded INVOKER-mode driver in each process -------------------------------


def invoker_pong(ping_channel: str, pong_channel: str, ready: mp.synchronize.Event, stop: mp.synchronize.Event) -> None:
    with invoker_client("udp-lat-inv-pong") as (invoke, conductor, aeron):
        sub = aeron.add_subscription(ping_channel, PING_STREAM)
        pub = aeron.add_exclusive_publication(pong_channel, PONG_STREAM)
        ready.set()
        offer = pub.offer

        def echo(payload: memoryview, header: object) -> None:
            for spins in range(1, 10_000_000):
                if offer(payload) >= 0:
                    return
                invoke()
                if spins & 1023 == 0:
                    conductor()

        poll = sub.poll
        while not stop.is_set():
            for _ in range(64):
                invoke()
                poll(echo, 10)
            conductor()


def invoker_ping(ping_channel: str, pong_channel: str, messages: int, out: mp.Queue) -> None:
    """Round trips in ns; fewer than asked if one did not come back within the run's time limit."""
    rtts: list[int] = []
    try:
        with invoker_client("udp-lat-inv-ping") as (invoke, conductor, aeron):
            pub = aeron.add_exclusive_publication(ping_channel, PING_STREAM)
            sub = aeron.add_subscription(pong_channel, PONG_STREAM)
            deadline = time.monotonic() + 30
            while not (pub.is_connected and sub.images) and time.monotonic() < deadline:
                invoke()
                conductor()
            now = time.perf_counter_ns
            buffer = bytearray(MESSAGE_LENGTH)
            got: list[int] = []

            def on_pong(payload: memoryview, header: object) -> None:
                got.append(now() - _STAMP.unpack_from(payload)[0])

            poll = sub.poll
            offer = pub.offer
            deadline = time.monotonic() + 120
            spins = 0
            for i in range(messages + WARMUP):
                _STAMP.pack_into(buffer, 0, now())
                while offer(buffer) < 0:
                    invoke()
                    spins += 1
                    if spins & 1023 == 0 and time.monotonic() > deadline:
                        return
                while not got:
                    invoke()
                    poll(on_pong, 1)
                    spins += 1
                    if spins & 1023 == 0:
                        conductor()  # keeps the client alive while a lost message is repaired
                        if time.monotonic() > deadline:
                            return
                if i >= WARMUP:
                    rtts.append(got[0])
                got.clear()
                if i & 63 == 0:
                    conductor()
    finally:
        out.put(rtts)


def _two_free_udp_ports() -> tuple[int, int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))  # both held: two different ports
        return a.getsockname()[1], b.getsockname()[1]


def run_invoker(messages: int) -> list[int]:
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    ping_port, pong_port = _two_free_udp_ports()
    ping_channel = f"aeron:udp?endpoint=127.0.0.1:{ping_port}"
    pong_channel = f"aeron:udp?endpoint=127.0.0.1:{pong_port}"
    pong = ctx.Process(target=invoker_pong, args=(ping_channel, pong_channel, ready, stop), daemon=True)
    pong.start()
    ping = None
    try:
        if not ready.wait(60):
            raise RuntimeError("the pong process did not start")
        ping = ctx.Process(target=invoker_ping, args=(ping_channel, pong_channel, messages, out), daemon=True)
        ping.start()
        rtts: list[int] = out.get(timeout=300)
    finally:
        stop.set()
        for proc in (ping, pong):
            if proc is not None:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
    if len(rtts) < messages:
        print(f"  (embedded INVOKER drivers: {len(rtts)} of {messages} round trips in the time limit)", file=sys.stderr)
    return rtts


# -- Aeron Java -----------------------------------------------------------------------------------

_HDR_ROW = re.compile(r"^\s*([\d.]+)\s+([\d.]+)\s+\d+\s+", re.MULTILINE)
_HDR_MAX = re.compile(r"#\[Max\s*=\s*([\d.]+)")


def parse_hdr_histogram(text: str) -> dict[str, float]:
    """p50/p99/p99.9/max in µs from HdrHistogram's percentile distribution (values already in µs)."""
    rows = [(float(v), float(p)) for v, p in _HDR_ROW.findall(text)]
    if not rows:
        raise ValueError("no percentile distribution in the output")

    def at(q: float) -> float:
        return next((v for v, p in rows if p >= q), rows[-1][0])

    found = _HDR_MAX.search(text)
    return {
        "p50": at(0.5),
        "p99": at(0.99),
        "p99.9": at(0.999),
        "max": float(found[1]) if found else rows[-1][0],
    }


def run_java(peer: object, messages: int, threading_mode: str, idle: str | None) -> tuple[int, dict[str, float]]:
    """Java MediaDriver + Pong + Ping (three JVMs); returns (samples, percentiles in µs)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.aeron_java import AeronJava, start_java_media_driver

    assert isinstance(peer, AeronJava)
    aeron_dir = fresh_aeron_dir("java-lat")
    driver_log, pong_log = Path(f"{aeron_dir}.driver.log"), Path(f"{aeron_dir}.pong.log")
    driver_props: dict[str, str | int | float | bool] = {
        "aeron.threading.mode": threading_mode,
        "aeron.term.buffer.length": 16 << 20,
        "aeron.term.buffer.sparse.file": False,
    }
    if idle is not None:
        for agent in ("conductor", "sender", "receiver", "shared"):
            driver_props[f"aeron.{agent}.idle.strategy"] = idle
    else:  # 1.15.1's own default: BackoffIdleStrategy for every agent
        for agent in ("conductor", "sender", "receiver", "shared"):
            driver_props[f"aeron.{agent}.idle.strategy"] = "org.agrona.concurrent.BackoffIdleStrategy"
    client_props: dict[str, str | int | float | bool] = {
        "aeron.dir": str(aeron_dir),
        "aeron.sample.ping.channel": f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}",
        "aeron.sample.pong.channel": f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}",
        "aeron.sample.ping.streamId": PING_STREAM,
        "aeron.sample.pong.streamId": PONG_STREAM,
        "aeron.sample.messages": messages,
        "aeron.sample.messageLength": MESSAGE_LENGTH,
        "aeron.sample.warmup.messages": 5_000,
        "aeron.sample.warmup.iterations": 1,
    }
    driver = start_java_media_driver(peer, aeron_dir, driver_log, props=driver_props)
    pong = None
    try:
        pong = peer.start("io.aeron.samples.Pong", props=client_props, output=pong_log)
        done = peer.run("io.aeron.samples.Ping", props=client_props, timeout_s=JAVA_TIMEOUT_S, input_text="n\n")
        if done.returncode != 0:
            raise RuntimeError(f"Ping exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return messages, parse_hdr_histogram(done.stdout)
    finally:
        if pong is not None:
            AeronJava.stop(pong)
        AeronJava.stop(driver.process)
        for path in (driver_log, pong_log):
            path.unlink(missing_ok=True)
        shutil.rmtree(aeron_dir, ignore_errors=True)


# -- pyzmq ----------------------------------------------------------------------------------------


def run_zmq(messages: int, busy: bool) -> list[int]:
    return run_zmq_round_trip(f"tcp://127.0.0.1:{free_tcp_port()}", messages, busy, request_reply=True)


# -- main -----------------------------------------------------------------------------------------


def _summary(rtts_ns: Sequence[int]) -> dict[str, float]:
    values = sorted(rtts_ns)
    return {
        "p50": percentile(values, 50) / 1000,
        "p99": percentile(values, 99) / 1000,
        "p99.9": percentile(values, 99.9) / 1000,
        "max": values[-1] / 1000 if values else float("nan"),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="round trips per endpoint and pyzmq row")
    parser.add_argument("--java-messages", type=int, default=20_000, help="round trips per Aeron Java row")
    parser.add_argument("--no-java", action="store_true", help="skip the Aeron Java rows")
    parser.add_argument("--quick", action="store_true", help="only the default row of each side")
    parser.add_argument(
        "--java-yielding", action="store_true", help="add Java SHARED with a yielding driver (needs >= 4 cores)"
    )
    parser.add_argument(
        "--pure-spin", action="store_true", help="add our all-busy-spin row (slow on machines with < 4 cores)"
    )
    args = parser.parse_args(argv)
    # A SIGTERM (e.g. from `timeout`) unwinds normally, so the standalone drivers are stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    n = args.messages

    results: dict[str, tuple[int, dict[str, float]]] = {}

    def note(name: str) -> None:
        print(f"  {name}: p50 {results[name][1]['p50']:.1f} µs", file=sys.stderr, flush=True)

    def ours(name: str, **kwargs: object) -> None:
        rtts = run_endpoint(n, **kwargs)  # type: ignore[arg-type]
        results[name] = (len(rtts), _summary(rtts))
        note(name)

    java_base = "Aeron Java 1.15.1 Ping/Pong, DEDICATED, backoff (default)"
    if not args.no_java:
        from udp_throughput import java_peer

        peer = java_peer()
        # Busy-spinning drivers are left out: on a 2-core machine DEDICATED busy spin (five
        # spinning threads) took over 300 s for the warm-up, SHARED busy spin over 90 s.
        variants = [("DEDICATED", "backoff (default)", None)]
        if not args.quick:
            variants.append(("SHARED", "backoff", None))
        if args.java_yielding:
            variants.append(("SHARED", "yielding", YIELDING_JAVA))
        for mode, label, idle in variants:
            name = f"Aeron Java 1.15.1 Ping/Pong, {mode}, {label}"
            try:
                results[name] = run_java(peer, args.java_messages, mode, idle)
            except TimeoutError:
                print(f"  {name}: did not finish in {JAVA_TIMEOUT_S:.0f} s", file=sys.stderr)
                continue
            note(name)

    for busy, name in ((False, "pyzmq REQ/REP tcp://, blocking recv"), (True, "pyzmq PAIR tcp://, busy NOBLOCK")):
        rtts = run_zmq(n, busy)
        results[name] = (len(rtts), _summary(rtts))
        note(name)

    rtts = run_invoker(n)
    results[INVOKER_ROW] = (len(rtts), _summary(rtts))
    note(INVOKER_ROW)
    ours("endpoint, 1 shared driver, yielding; clients spin+yield", shared_driver=True, idle="yielding", yielding=True)
    if not args.quick:
        ours(
            "endpoint, 1 shared driver, busy spin; clients spin+yield",
            shared_driver=True,
            idle="busy_spin",
            yielding=True,
        )
        ours("endpoint, 2 drivers, yielding; clients spin+yield", shared_driver=False, idle="yielding", yielding=True)
        ours(
            "endpoint, 1 shared driver, backoff; clients spin+yield", shared_driver=True, idle="backoff", yielding=True
        )
        if args.pure_spin:
            ours("endpoint, 1 shared driver, busy spin; clients pure spin", shared_driver=True, idle="busy_spin")

    base = results[java_base][1]["p50"] if java_base in results else float("nan")
    rows = []
    for name, (samples, q) in results.items():
        rows.append((name, samples, q["p50"], q["p99"], q["p99.9"], q["max"], base / q["p50"]))
    print_table(
        f"UDP round trip (µs), {MESSAGE_LENGTH}-byte messages over 127.0.0.1, ping and pong in separate processes "
        "(ours: SHARED threading)",
        ["", "samples", "p50", "p99", "p99.9", "max", "p50 speed-up vs Java default"],
        rows,
    )


if __name__ == "__main__":
    main()
