"""UDP throughput of 32-byte messages between two processes: endpoint vs Aeron Java 1.15.1 vs pyzmq, in one run.

    python benchmarks/udp_throughput.py [--messages 2000000] [--batch 64] [--loss 0.01,0.05]
                                        [--java-messages 20000000] [--no-java] [--quick]

Our rows: a publisher process and a subscriber process over ``aeron:udp`` on
127.0.0.1, each with its own standalone driver (``python -m driver``, so four
processes), or both on one shared driver (three processes), or each embedding
an INVOKER-mode driver that its own loop runs (two processes: one thread per
process runs driver, client conductor and application, with no GIL hand-offs;
"2 processes, embedded INVOKER drivers"). The publisher
offers batches with ``ExclusivePublication.offer_batch``; the subscriber counts
with ``Subscription.poll`` and times first-to-last message. Variants show what
moves the number: driver threading (SHARED / DEDICATED), ``mtu=8k`` on the
channel, and receive-side loss injected in the subscriber's driver
(``-D aeron.debug.receive.loss.rate=...``; NAKs repair it, so nothing may be lost).

Aeron Java 1.15.1 runs its ``io.aeron.samples.EmbeddedThroughput`` (one JVM: an
embedded driver, a publisher thread and a subscriber thread over UDP loopback)
with its default threading (DEDICATED) and SHARED, and with loss injected by its
``DebugReceiveChannelEndpointSupplier``; its rate is read from the sample's
per-second report. pyzmq is PUSH/PULL over ``tcp://127.0.0.1`` with one ``send``
per message. The ratio column is against Aeron Java with its default threading.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing as mp
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import MESSAGE_LENGTH, fresh_aeron_dir, print_table, run_zmq_push_pull, standalone_driver  # noqa: E402

STREAM_ID = 1001
RUN_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 10.0


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


# -- endpoint -------------------------------------------------------------------------------------


def _noop(payload: memoryview, header: object) -> None:
    pass


def endpoint_subscriber(
    aeron_dir: str,
    channel: str,
    messages: int,
    sent: mp.sharedctypes.Synchronized[int],
    ready: mp.synchronize.Event,
    out: mp.Queue,
) -> None:
    """Count until everything the publisher sent has arrived (it reports its total when it stops)."""
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        sub = aeron.add_subscription(channel, STREAM_ID)
        ready.set()
        poll = sub.poll
        out.put(count_until_sent(lambda: poll(_noop, 4096), messages, sent))


def count_until_sent(
    poll: Callable[[], int],
    messages: int,
    sent: mp.sharedctypes.Synchronized[int],
    every_1024: Callable[[], object] | None = None,
) -> tuple[int, float]:
    """(received, seconds first to last): poll until the publisher's reported total (or a stall), timing from the
    first message."""
    received = 0
    deadline = time.monotonic() + 60
    while received == 0:
        received = poll()
        if every_1024 is not None:
            every_1024()
        if time.monotonic() > deadline:
            return 0, 0.0
    start = last = time.perf_counter()
    target = messages
    checks = 0
    while received < target:
        got = poll()
        if got:
            received += got
            last = time.perf_counter()
        checks += 1
        if checks & 1023 == 0:
            if every_1024 is not None:
                every_1024()
            total = sent.value
            if total >= 0:
                target = total
            if time.perf_counter() - last > DRAIN_TIMEOUT_S:
                break
    return received, last - start


def endpoint_publisher(
    aeron_dir: str,
    channel: str,
    messages: int,
    batch_size: int,
    seconds: float,
    sent_out: mp.sharedctypes.Synchronized[int],
    ready: mp.synchronize.Event,
    done: mp.synchronize.Event,
) -> None:
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        pub = aeron.add_exclusive_publication(channel, STREAM_ID)
        ready.wait(30)
        deadline = time.monotonic() + 30
        while not pub.is_connected and time.monotonic() < deadline:
            time.sleep(0.001)
        batch = [b"x" * MESSAGE_LENGTH] * batch_size
        offer_batch = pub.offer_batch
        sent = 0
        deadline = time.monotonic() + seconds
        while sent < messages:
            if offer_batch(batch) > 0:
                sent += batch_size
            elif time.monotonic() > deadline:
                break
            if sent & 0xFFFF == 0 and time.monotonic() > deadline:
                break
        sent_out.value = sent
        # Keep the publication open until the subscriber has everything (or gives up): closing
        # it would let the driver linger and drop what loss repair still needs to resend.
        done.wait(RUN_TIMEOUT_S)


# -- endpoint with an embedded INVOKER-mode driver in each process -------------------------------


@contextlib.contextmanager
def invoker_client(tag: str, props: Sequence[str] = ()) -> Iterator[tuple[Callable[[], int], Callable[[], int], Any]]:
    """An INVOKER-mode driver in this process and a client on it whose conductor is invoked too.

    Yields ``(invoke_driver, invoke_conductor, aeron)``: the caller's loop runs both.
    """
    from driver.client import Aeron
    from driver.config import DriverContext
    from driver.core.media_driver import MediaDriver

    aeron_dir = fresh_aeron_dir(tag)
    properties = dict(prop.split("=", 1) for prop in props)
    context = DriverContext.from_env(
        properties=properties,
        aeron_dir=str(aeron_dir),
        threading_mode="INVOKER",
        dir_delete_on_start=True,
        dir_delete_on_shutdown=True,
    )
    driver = MediaDriver.launch(context)
    try:
        assert driver.invoker is not None
        with Aeron.connect(
            aeron_dir=str(aeron_dir), driver_agent_invoker=driver.invoker, use_conductor_agent_invoker=True
        ) as aeron:
            conductor = aeron.conductor_agent_invoker
            assert conductor is not None
            yield driver.invoker.invoke, conductor.invoke, aeron
    finally:
        driver.close()
        shutil.rmtree(aeron_dir, ignore_errors=True)


def invoker_subscriber(
    channel: str,
    messages: int,
    props: Sequence[str],
    sent: mp.sharedctypes.Synchronized[int],
    ready: mp.synchronize.Event,
    out: mp.Queue,
) -> None:
    """As ``endpoint_subscriber``, running its own driver between polls."""
    with invoker_client("udp-inv-sub", props) as (invoke, conductor, aeron):
        sub = aeron.add_subscription(channel, STREAM_ID)
        ready.set()
        poll = sub.poll

        def drive_and_poll() -> int:
            invoke()
            return poll(_noop, 4096)

        out.put(count_until_sent(drive_and_poll, messages, sent, conductor))


def invoker_publisher(
    channel: str,
    messages: int,
    batch_size: int,
    seconds: float,
    props: Sequence[str],
    sent_out: mp.sharedctypes.Synchronized[int],
    ready: mp.synchronize.Event,
    done: mp.synchronize.Event,
) -> None:
    """As ``endpoint_publisher``, running its own driver after each batch."""
    with invoker_client("udp-inv-pub", props) as (invoke, conductor, aeron):
        pub = aeron.add_exclusive_publication(channel, STREAM_ID)
        ready.wait(30)
        deadline = time.monotonic() + 30
        while not pub.is_connected and time.monotonic() < deadline:
            invoke()
            conductor()
        batch = [b"x" * MESSAGE_LENGTH] * batch_size
        offer_batch = pub.offer_batch
        sent = 0
        cycles = 0
        deadline = time.monotonic() + seconds
        while sent < messages:
            if offer_batch(batch) > 0:
                sent += batch_size
            invoke()
            cycles += 1
            if cycles & 1023 == 0:
                conductor()
                if time.monotonic() > deadline:
                    break
        sent_out.value = sent
        # Keep the driver running until the subscriber has everything: loss repair resends from here.
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not done.is_set() and time.monotonic() < deadline:
            for _ in range(256):
                invoke()
            conductor()


def run_invoker(
    messages: int,
    batch_size: int,
    seconds: float,
    *,
    channel_params: str = "",
    loss: float = 0.0,
    driver_props: Sequence[str] = (),
) -> tuple[int, int, float]:
    """(messages sent, received, seconds first-to-last), each process running an embedded INVOKER driver."""
    ctx = mp.get_context("spawn")
    ready, done, out = ctx.Event(), ctx.Event(), ctx.Queue()
    sent = ctx.Value("q", -1)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}{channel_params}"
    messages -= messages % batch_size
    sub_props = list(driver_props)
    if loss:
        sub_props += [f"aeron.debug.receive.loss.rate={loss}", "aeron.debug.receive.seed=7"]
    sub = ctx.Process(target=invoker_subscriber, args=(channel, messages, sub_props, sent, ready, out), daemon=True)
    sub.start()
    pub = ctx.Process(
        target=invoker_publisher,
        args=(channel, messages, batch_size, seconds, list(driver_props), sent, ready, done),
        daemon=True,
    )
    pub.start()
    try:
        received, elapsed = out.get(timeout=seconds + DRAIN_TIMEOUT_S + 90)
    finally:
        done.set()
        pub.join(30)
        sub.join(30)
        for proc in (pub, sub):
            if proc.is_alive():
                proc.kill()
                proc.join(5)
    return sent.value, received, elapsed


def _driver_args(threading_mode: str, loss: float, props: Sequence[str] = ()) -> list[str]:
    args = ["--threading-mode", threading_mode]
    for prop in props:
        args += ["-D", prop]
    if loss:
        args += ["-D", f"aeron.debug.receive.loss.rate={loss}", "-D", "aeron.debug.receive.seed=7"]
    return args


def run_endpoint(
    messages: int,
    batch_size: int,
    seconds: float,
    *,
    threading_mode: str = "SHARED",
    idle: str = "backoff",
    shared_driver: bool = False,
    channel_params: str = "",
    loss: float = 0.0,
    driver_props: Sequence[str] = (),
) -> tuple[int, int, float]:
    """(messages sent, received, seconds first-to-last) for one configuration."""
    ctx = mp.get_context("spawn")
    ready, done, out = ctx.Event(), ctx.Event(), ctx.Queue()
    sent = ctx.Value("q", -1)
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}{channel_params}"
    messages -= messages % batch_size
    with contextlib.ExitStack() as stack:
        sub_dir = fresh_aeron_dir("udp-sub")
        stack.enter_context(standalone_driver(sub_dir, idle, _driver_args(threading_mode, loss, driver_props)))
        pub_dir = sub_dir
        if not shared_driver:
            pub_dir = fresh_aeron_dir("udp-pub")
            stack.enter_context(standalone_driver(pub_dir, idle, _driver_args(threading_mode, 0.0, driver_props)))
        sub = ctx.Process(
            target=endpoint_subscriber, args=(str(sub_dir), channel, messages, sent, ready, out), daemon=True
        )
        sub.start()
        pub = ctx.Process(
            target=endpoint_publisher,
            args=(str(pub_dir), channel, messages, batch_size, seconds, sent, ready, done),
            daemon=True,
        )
        pub.start()
        received, elapsed = out.get(timeout=seconds + DRAIN_TIMEOUT_S + 90)
        done.set()
        pub.join(30)
        sub.join(30)
        for proc in (pub, sub):
            if proc.is_alive():
                proc.kill()
                proc.join(5)
    return sent.value, received, elapsed


# -- Aeron Java -----------------------------------------------------------------------------------

_JAVA_REPORT = re.compile(r"msgs/sec, \S+ bytes/sec, totals (\d+) messages")


# The tests' JVM options stop at the C1 compiler to start fast; a benchmark wants the JIT's best.
BENCH_JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED")
JAVA_TUNED = {"aeron.mtu.length": "8k", "aeron.rcv.initial.window.length": "2m", "aeron.socket.so_rcvbuf": "2m"}


def java_peer() -> object:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.aeron_java import AeronJava

    found = AeronJava.ensure()
    return AeronJava(found.java, found.jar, BENCH_JVM_OPTIONS)


def java_loss_props(loss: float) -> dict[str, str | int | float | bool]:
    if not loss:
        return {}
    return {
        "aeron.ReceiveChannelEndpoint.supplier": "io.aeron.driver.ext.DebugReceiveChannelEndpointSupplier",
        "aeron.debug.receive.data.loss.rate": loss,
        "aeron.debug.receive.data.loss.seed": 7,
    }


def run_java(
    peer: object, seconds: float, threading_mode: str, loss: float = 0.0, extra: dict[str, str] | None = None
) -> tuple[int, float]:
    """(messages the subscriber got, msgs/s) from EmbeddedThroughput's per-second report.

    The sample streams a fixed count and then asks "Execute again?"; it is given more
    than it can send in ``seconds``, read for that long and stopped. The rate is the
    mean of the report intervals after the first (connection set-up, JIT warm-up).
    """
    from support.aeron_java import AeronJava

    assert isinstance(peer, AeronJava)
    aeron_dir = fresh_aeron_dir("java-tp")
    log = Path(f"{aeron_dir}.log")
    props: dict[str, str | int | float | bool] = {
        "aeron.dir": str(aeron_dir),
        "aeron.dir.delete.on.start": True,
        "aeron.dir.delete.on.shutdown": True,
        "aeron.threading.mode": threading_mode,
        "aeron.sample.messages": 1_000_000_000,
        "aeron.sample.messageLength": MESSAGE_LENGTH,
        "aeron.sample.channel": f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}",
        **java_loss_props(loss),
        **(extra or {}),
    }
    proc = peer.start("io.aeron.samples.EmbeddedThroughput", props=props, output=log)
    try:
        deadline = time.monotonic() + 60
        while not _JAVA_REPORT.search(log.read_text(errors="replace")):  # first report: streaming began
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"EmbeddedThroughput did not start ({proc.returncode}):\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        time.sleep(seconds)
        text = log.read_text(errors="replace")
    finally:
        AeronJava.stop(proc)
        log.unlink(missing_ok=True)
        shutil.rmtree(aeron_dir, ignore_errors=True)
    totals = [int(m) for m in _JAVA_REPORT.findall(text)]
    deltas = [b - a for a, b in itertools.pairwise(totals)]
    steady = deltas[1:] or deltas
    return totals[-1], sum(steady) / len(steady) if steady else 0.0


# -- pyzmq ----------------------------------------------------------------------------------------


def run_zmq(messages: int) -> tuple[int, float]:
    return run_zmq_push_pull(f"tcp://127.0.0.1:{free_tcp_port()}", messages)


# -- main -----------------------------------------------------------------------------------------


def _losses(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


TUNED_PARAMS = "|mtu=8k"
TUNED_PROPS = ("aeron.rcv.initial.window.length=2m", "aeron.socket.so_rcvbuf=2m", "aeron.socket.so_sndbuf=2m")
TUNED = "mtu=8k, 2 MB window"
INVOKER_ROW = "endpoint, 2 processes, embedded INVOKER drivers"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2_000_000, help="messages per endpoint and pyzmq row")
    parser.add_argument("--seconds", type=float, default=8.0, help="cap on an endpoint row's sending time")
    parser.add_argument("--java-seconds", type=float, default=6.0, help="measuring time of an Aeron Java row")
    parser.add_argument("--batch", type=int, default=64, help="messages per offer_batch call")
    parser.add_argument("--loss", type=_losses, default=[0.01, 0.05], help="receive loss rates for the loss rows")
    parser.add_argument("--no-java", action="store_true", help="skip the Aeron Java rows")
    parser.add_argument("--quick", action="store_true", help="defaults and loss rows only (no variants)")
    args = parser.parse_args(argv)
    # A SIGTERM (e.g. from `timeout`) unwinds normally, so the standalone drivers are stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    n, batch = args.messages, args.batch

    # name -> (sent, received, msgs/s); sent is None where the peer does not tell
    results: dict[str, tuple[int | None, int, float]] = {}

    def note(name: str) -> None:
        print(f"  {name}: {results[name][2]:,.0f} msgs/s", file=sys.stderr, flush=True)

    def ours(name: str, **kwargs: object) -> None:
        sent, received, elapsed = run_endpoint(n, batch, args.seconds, **kwargs)  # type: ignore[arg-type]
        results[name] = (sent, received, received / elapsed if elapsed else 0.0)
        note(name)

    def invoker(name: str, **kwargs: object) -> None:
        sent, received, elapsed = run_invoker(n, batch, args.seconds, **kwargs)  # type: ignore[arg-type]
        results[name] = (sent, received, received / elapsed if elapsed else 0.0)
        note(name)

    def java(name: str, mode: str, loss: float = 0.0, extra: dict[str, str] | None = None) -> None:
        received, rate = run_java(peer, args.java_seconds, mode, loss, extra)
        results[name] = (None, received, rate)
        note(name)

    java_default = "Aeron Java 1.15.1, DEDICATED (default)"
    if not args.no_java:
        peer = java_peer()
        java(java_default, "DEDICATED")
        if not args.quick:
            java("Aeron Java 1.15.1, SHARED", "SHARED")
            java(f"Aeron Java 1.15.1, DEDICATED, {TUNED}", "DEDICATED", extra=JAVA_TUNED)
        for loss in args.loss:
            java(f"Aeron Java 1.15.1, DEDICATED, {loss:.0%} loss", "DEDICATED", loss)

    received, elapsed = run_zmq(n)
    results["pyzmq PUSH/PULL tcp://127.0.0.1"] = (n, received, received / elapsed)
    note("pyzmq PUSH/PULL tcp://127.0.0.1")

    tuned: dict[str, object] = {"channel_params": TUNED_PARAMS, "driver_props": TUNED_PROPS}
    ours("endpoint, 2 drivers SHARED")
    if not args.quick:
        ours("endpoint, 2 drivers DEDICATED", threading_mode="DEDICATED")
    ours(f"endpoint, 2 drivers SHARED, {TUNED}", **tuned)
    if not args.quick:
        ours(f"endpoint, 2 drivers DEDICATED, {TUNED}", threading_mode="DEDICATED", **tuned)
        ours(f"endpoint, 1 shared driver SHARED, {TUNED}", shared_driver=True, **tuned)
    for loss in args.loss:
        ours(f"endpoint, 2 drivers SHARED, {TUNED}, {loss:.0%} loss", loss=loss, **tuned)
    invoker(INVOKER_ROW)
    invoker(f"{INVOKER_ROW}, {TUNED}", **tuned)
    for loss in args.loss:
        invoker(f"{INVOKER_ROW}, {TUNED}, {loss:.0%} loss", loss=loss, **tuned)

    base = results[java_default][2] if java_default in results else 0.0
    rows = []
    for name, (sent, received, rate) in results.items():
        lost = "-" if sent is None else str(sent - received)
        ratio = rate / base if base else float("nan")
        rows.append((name, received, lost, rate, rate * MESSAGE_LENGTH / 1e6, ratio))
    print_table(
        f"UDP throughput, {MESSAGE_LENGTH}-byte messages over 127.0.0.1, publisher and subscriber in separate "
        f"processes (ours: offer_batch of {batch})",
        ["", "received", "lost", "msgs/s", "MB/s", "x Java default"],
        rows,
    )
    for prefix, reference in (
        ("endpoint, 2 drivers SHARED, " + TUNED, f"endpoint, 2 drivers SHARED, {TUNED}"),
        (f"{INVOKER_ROW}, {TUNED}", f"{INVOKER_ROW}, {TUNED}"),
        ("Aeron Java 1.15.1, DEDICATED", java_default),
    ):
        for loss in args.loss:
            key = f"{prefix}, {loss:.0%} loss"
            if key in results and results[reference][2]:
                print(f"  {key}: {results[key][2] / results[reference][2]:.0%} of the loss-free rate")


if __name__ == "__main__":
    main()
