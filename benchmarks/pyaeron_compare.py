"""Endpoint beside today's Aeron (the C media driver + C client, via pyaeron), in one run.

    python benchmarks/pyaeron_compare.py [--messages 2000000] [--batch 64] [--pings 10000] [--quick]

Both sides run the same worker code (this file, ``--role ...``) in separate
processes: ours under this interpreter with our standalone driver (``python -m
driver``, SHARED, backoff), pyaeron's under the pyaeron venv's CPython >= 3.12
(see tests/support/aeron_c.py) with pyaeron's embedded C media driver in a
process of its own (SHARED threading, its default idle strategy). Each pair of
processes shares one driver, over ``aeron:ipc`` or ``aeron:udp`` on 127.0.0.1.

Throughput: 32-byte messages, publisher and subscriber in two processes; the
subscriber counts with ``poll`` and times first-to-last message. pyaeron offers
one message per ``offer`` (it has no batch call); ours is shown both with
``offer_batch`` and with one ``offer`` per message. The UDP runs add rows where
our publisher and subscriber each embed a driver of their own in INVOKER mode
(run by the worker's loop, no driver thread), as end points do by default. Round trip: ping stamps,
pong echoes on a second stream; both poll in a loop (busy spin over IPC,
``sched_yield`` after an empty poll over UDP). Ratios are ours / pyaeron's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import MESSAGE_LENGTH, fresh_aeron_dir, percentile, print_table, standalone_driver  # noqa: E402

STREAM_ID, PING_STREAM, PONG_STREAM = 1001, 1002, 1003
IPC_CHANNEL = "aeron:ipc?term-length=64m"
RUN_TIMEOUT_S = 120.0
WARMUP = 2_000
_STAMP = struct.Struct("<q")


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


# -- worker side (runs under either interpreter) ------------------------------------------------


class _Client:
    """The few calls the workers need, over our client or pyaeron's."""

    def __init__(self, impl: str, aeron_dir: str) -> None:
        self.impl = impl
        self.driver: Any = None
        self.drive: Any = None
        """ours-invoker: runs one duty cycle of this process's driver and of the client's conductor."""
        if impl == "ours":
            from driver.client import Aeron

            self.aeron: Any = Aeron.connect(aeron_dir=aeron_dir)
        elif impl == "ours-invoker":
            from driver.client import Aeron
            from driver.config import DriverContext
            from driver.core.media_driver import MediaDriver

            # This process's own driver (AERON_* settings from the environment), run by this loop.
            self.driver = MediaDriver.launch(
                DriverContext.from_env(aeron_dir=aeron_dir, threading_mode="INVOKER", dir_delete_on_shutdown=True)
            )
            invoker = self.driver.invoker
            self.aeron = Aeron.connect(
                aeron_dir=aeron_dir, driver_agent_invoker=invoker, use_conductor_agent_invoker=True
            )
            conductor = self.aeron.conductor_agent_invoker

            def drive() -> None:
                invoker.invoke()
                conductor.invoke()

            self.drive = drive
        else:
            import pyaeron  # type: ignore[import-not-found]

            self.aeron = pyaeron.Aeron(dir=aeron_dir)

    def close(self) -> None:
        self.aeron.close()
        if self.driver is not None:
            self.driver.close()

    def await_connected(self, *endpoints: Any) -> None:
        deadline = time.monotonic() + 30
        while not all(e.is_connected for e in endpoints):
            if time.monotonic() > deadline:
                raise TimeoutError("never connected")
            if self.drive is not None:
                self.drive()
            else:
                time.sleep(0.001)


def _noop(payload: object, header: object) -> None:
    pass


def _ok(result: object) -> bool:
    return result is True or (type(result) is int and result > 0)


def worker_sub(client: _Client, channel: str, messages: int) -> None:
    sub = client.aeron.add_subscription(channel, STREAM_ID)
    emit(event="ready")
    poll = sub.poll
    drive = client.drive or (lambda: None)
    received = 0
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while received == 0 and time.monotonic() < deadline:
        drive()
        received = poll(_noop, 4096)
    start = time.perf_counter()
    while received < messages and time.perf_counter() - start < RUN_TIMEOUT_S:
        drive()
        received += poll(_noop, 4096)
    emit(event="done", received=received, elapsed=time.perf_counter() - start)
    if client.drive is not None:
        end = time.monotonic() + 1.0  # the publisher's last status messages and its close
        while time.monotonic() < end:
            drive()


def worker_pub(client: _Client, channel: str, messages: int, batch_size: int) -> None:
    pub = client.aeron.add_exclusive_publication(channel, STREAM_ID)
    client.await_connected(pub)
    payload = b"x" * MESSAGE_LENGTH
    sent = 0
    deadline = time.monotonic() + RUN_TIMEOUT_S
    if client.drive is not None:
        # This process runs its own driver: after each batch, or every 64 messages, and when refused.
        drive, step = client.drive, max(batch_size, 1)
        offer_one = pub.offer_batch if batch_size > 1 else pub.offer
        message: Any = [payload] * batch_size if batch_size > 1 else payload
        while sent < messages and time.monotonic() < deadline:
            for _ in range(64 // step or 1):
                if offer_one(message) > 0:
                    sent += step
                else:
                    break
            drive()
        emit(event="done", sent=sent)
        end = time.monotonic() + 2.0  # keep sending what is left and answering NAKs until the subscriber drained
        while time.monotonic() < end:
            drive()
        return
    if batch_size > 1:
        batch = [payload] * batch_size
        offer_batch = pub.offer_batch
        while sent < messages and time.monotonic() < deadline:
            if offer_batch(batch) > 0:
                sent += batch_size
    elif client.impl == "ours":
        offer = pub.offer
        while sent < messages and time.monotonic() < deadline:
            if offer(payload) > 0:
                sent += 1
    else:
        offer = pub.offer
        ok = _ok
        while sent < messages and time.monotonic() < deadline:
            if ok(offer(payload)):
                sent += 1
    emit(event="done", sent=sent)
    time.sleep(1.0)  # let the subscriber drain before the log goes away


def worker_pong(client: _Client, channel: str, stop_file: str, yielding: bool) -> None:
    sub = client.aeron.add_subscription(channel, PING_STREAM)
    pub = client.aeron.add_exclusive_publication(channel, PONG_STREAM)
    emit(event="ready")
    offer, poll, ok = pub.offer, sub.poll, _ok
    sched_yield = os.sched_yield

    def echo(payload: object, header: object) -> None:
        data = bytes(payload)  # type: ignore[call-overload]
        for _ in range(1_000_000):
            if ok(offer(data)):
                return

    deadline = time.monotonic() + 10 * RUN_TIMEOUT_S
    stop = Path(stop_file)
    while time.monotonic() < deadline and not stop.exists():
        for _ in range(20_000):
            if not poll(echo, 10) and yielding:
                sched_yield()


def worker_ping(client: _Client, channel: str, messages: int, yielding: bool) -> None:
    pub = client.aeron.add_exclusive_publication(channel, PING_STREAM)
    sub = client.aeron.add_subscription(channel, PONG_STREAM)
    client.await_connected(pub, sub)
    now = time.perf_counter_ns
    pad = b"\0" * (MESSAGE_LENGTH - _STAMP.size)
    got: list[int] = []
    rtts: list[int] = []

    def on_pong(payload: object, header: object) -> None:
        got.append(now() - _STAMP.unpack_from(payload)[0])  # type: ignore[call-overload]

    offer, poll, ok, sched_yield = pub.offer, sub.poll, _ok, os.sched_yield
    deadline = time.monotonic() + RUN_TIMEOUT_S
    for i in range(messages + WARMUP):
        message = _STAMP.pack(now()) + pad
        while not ok(offer(message)):
            pass
        while not got:
            if not poll(on_pong, 1) and yielding:
                sched_yield()
            if time.monotonic() > deadline:
                emit(event="done", rtts=rtts, timed_out=True)
                return
        if i >= WARMUP:
            rtts.append(got[0])
        got.clear()
    emit(event="done", rtts=rtts)


def worker_c_driver(aeron_dir: str) -> None:
    import pyaeron

    driver = pyaeron.MediaDriver(dir=aeron_dir, threading="shared")
    emit(event="ready")
    try:
        deadline = time.monotonic() + 20 * RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        driver.close()


def worker_main(args: argparse.Namespace) -> None:
    if args.role == "c-driver":
        worker_c_driver(args.dir)
        return
    client = _Client(args.impl, args.dir)
    try:
        if args.role == "sub":
            worker_sub(client, args.channel, args.messages)
        elif args.role == "pub":
            worker_pub(client, args.channel, args.messages, args.batch)
        elif args.role == "pong":
            worker_pong(client, args.channel, args.stop_file, args.yielding)
        else:
            worker_ping(client, args.channel, args.messages, args.yielding)
    finally:
        client.close()


# -- orchestration (runs under the project's interpreter) ---------------------------------------


class _Worker:
    """A worker subprocess in its own session; JSON events on stdout, stopped by its pid."""

    def __init__(
        self, python: str, role: str, aeron_dir: Path, impl: str, *extra: str, env_extra: dict[str, str] | None = None
    ) -> None:
        env = {
            **os.environ,
            **(env_extra or {}),
            "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")]),
        }
        if impl == "c":
            env.pop("PYTHONPATH")
        self.proc = subprocess.Popen(
            [python, __file__, "--role", role, "--impl", impl, "--dir", str(aeron_dir), *extra],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=env,
        )

    def event(self, timeout_s: float = RUN_TIMEOUT_S * 2) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.proc.args[3]} exited ({self.proc.poll()}) before reporting")
            with contextlib.suppress(json.JSONDecodeError):
                fields: dict[str, Any] = json.loads(line)
                return fields
        raise TimeoutError("worker silent")

    def stop(self) -> None:
        from support.aeron_c import AeronC

        AeronC.stop(self.proc)


# The same tuning on both drivers: a 2 MB receiver window and 2 MB socket buffers (with ``mtu=8k`` on the channel).
_TUNED_OURS = (
    "-D",
    "aeron.rcv.initial.window.length=2m",
    "-D",
    "aeron.socket.so_rcvbuf=2m",
    "-D",
    "aeron.socket.so_sndbuf=2m",
)
_TUNED_C = {"AERON_RCV_INITIAL_WINDOW_LENGTH": "2m", "AERON_SOCKET_SO_RCVBUF": "2m", "AERON_SOCKET_SO_SNDBUF": "2m"}


@contextlib.contextmanager
def _driver(impl: str, peer_python: str, tuned: bool = False) -> Any:
    aeron_dir = fresh_aeron_dir(f"cmp-{impl}")
    if impl == "ours":
        with standalone_driver(aeron_dir, extra=_TUNED_OURS if tuned else ()):
            yield aeron_dir
        return
    driver = _Worker(peer_python, "c-driver", aeron_dir, "c", env_extra=_TUNED_C if tuned else None)
    try:
        driver.event(60)
        yield aeron_dir
    finally:
        driver.stop()
        shutil.rmtree(aeron_dir, ignore_errors=True)


def _python(impl: str, peer_python: str) -> str:
    return peer_python if impl == "c" else sys.executable


def run_throughput(impl: str, peer_python: str, channel: str, messages: int, batch: int, tuned: bool = False) -> float:
    python = _python(impl, peer_python)
    if impl == "ours-invoker":
        return _run_throughput_invoker(python, channel, messages, batch, tuned)
    with _driver(impl, peer_python, tuned) as aeron_dir:
        sub = _Worker(python, "sub", aeron_dir, impl, "--channel", channel, "--messages", str(messages))
        pub = None
        try:
            sub.event(60)
            pub = _Worker(
                python, "pub", aeron_dir, impl, "--channel", channel, "--messages", str(messages), "--batch", str(batch)
            )
            done = sub.event()
            pub.event()
        finally:
            for worker in (pub, sub):
                if worker is not None:
                    worker.stop()
    received, elapsed = done["received"], done["elapsed"]
    return received / elapsed if elapsed else 0.0


def _run_throughput_invoker(python: str, channel: str, messages: int, batch: int, tuned: bool) -> float:
    """Publisher and subscriber processes with a driver each, in INVOKER mode (run by the worker's loop)."""
    dirs = [fresh_aeron_dir("cmp-inv-sub"), fresh_aeron_dir("cmp-inv-pub")]
    env = _TUNED_C if tuned else None  # our driver reads the same AERON_* settings
    sub = _Worker(
        python, "sub", dirs[0], "ours-invoker", "--channel", channel, "--messages", str(messages), env_extra=env
    )
    pub = None
    try:
        sub.event(60)
        pub = _Worker(
            python,
            "pub",
            dirs[1],
            "ours-invoker",
            "--channel",
            channel,
            "--messages",
            str(messages),
            "--batch",
            str(batch),
            env_extra=env,
        )
        done = sub.event()
        pub.event()
    finally:
        for worker in (pub, sub):
            if worker is not None:
                worker.stop()
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)
    received, elapsed = done["received"], done["elapsed"]
    return received / elapsed if elapsed else 0.0


def run_round_trip(impl: str, peer_python: str, channel: str, pings: int, yielding: bool) -> list[float]:
    python = _python(impl, peer_python)
    flags = ["--yielding"] if yielding else []
    with _driver(impl, peer_python) as aeron_dir:
        stop_file = Path(f"{aeron_dir}.stop")
        pong = _Worker(python, "pong", aeron_dir, impl, "--channel", channel, "--stop-file", str(stop_file), *flags)
        ping = None
        try:
            pong.event(60)
            ping = _Worker(python, "ping", aeron_dir, impl, "--channel", channel, "--messages", str(pings), *flags)
            done = ping.event(600)
        finally:
            stop_file.touch()
            for worker in (ping, pong):
                if worker is not None:
                    worker.stop()
            stop_file.unlink(missing_ok=True)
    return sorted(rtt / 1000 for rtt in done["rtts"])


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def orchestrate(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.aeron_c import AeronC

    peer = str(AeronC.ensure().python)
    messages, pings = (200_000, 2_000) if args.quick else (args.messages, args.pings)
    udp = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"

    tp_rows = []
    runs = (("IPC", IPC_CHANNEL, False), ("UDP", udp, False), ("UDP mtu 8k, 2 MB window", f"{udp}|mtu=8k", True))
    for title, channel, tuned in runs:
        theirs = run_throughput("c", peer, channel, messages, 1, tuned)
        ours_batch = run_throughput("ours", peer, channel, messages, args.batch, tuned)
        ours_single = run_throughput("ours", peer, channel, messages, 1, tuned)
        results = {
            f"{title}: C driver + pyaeron, offer": theirs,
            f"{title}: endpoint, offer_batch({args.batch})": ours_batch,
            f"{title}: endpoint, offer": ours_single,
        }
        if channel.startswith("aeron:udp"):
            for label, size in ((f"offer_batch({args.batch})", args.batch), ("offer", 1)):
                results[f"{title}: endpoint, a driver per process (INVOKER), {label}"] = run_throughput(
                    "ours-invoker", peer, channel, messages, size, tuned
                )
        tp_rows += [(name, rate, rate * MESSAGE_LENGTH / 1e6, rate / theirs) for name, rate in results.items()]
    print_table(
        f"Throughput, {MESSAGE_LENGTH}-byte messages, two processes on one driver ({messages:,} messages)",
        ["", "msgs/s", "MB/s", "x pyaeron"],
        tp_rows,
    )

    rt_rows = []
    udp_rt = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    for title, channel, yielding in (("IPC, busy spin", "aeron:ipc", False), ("UDP, yielding", udp_rt, True)):
        results = {
            f"{title}: C driver + pyaeron": run_round_trip("c", peer, channel, pings, yielding),
            f"{title}: endpoint": run_round_trip("ours", peer, channel, pings, yielding),
        }
        base = next(iter(results.values()))
        base_p50, base_p99 = percentile(base, 50), percentile(base, 99)
        for name, values in results.items():
            p50, p99 = percentile(values, 50), percentile(values, 99)
            rt_rows.append((name, len(values), p50, p99, percentile(values, 99.9), base_p50 / p50, base_p99 / p99))
    print_table(
        f"Round trip, {MESSAGE_LENGTH}-byte messages, ping and pong processes on one driver, us "
        "(ratio > 1: ours is faster)",
        ["", "samples", "p50", "p99", "p99.9", "p50 x", "p99 x"],
        rt_rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2_000_000, help="messages per throughput run")
    parser.add_argument("--batch", type=int, default=64, help="messages per offer_batch call (ours)")
    parser.add_argument("--pings", type=int, default=10_000, help="round trips per latency run")
    parser.add_argument("--quick", action="store_true", help="200k messages, 2k round trips")
    parser.add_argument("--role", choices=["c-driver", "sub", "pub", "ping", "pong"], help=argparse.SUPPRESS)
    parser.add_argument("--impl", choices=["ours", "ours-invoker", "c"], default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--channel", default=IPC_CHANNEL, help=argparse.SUPPRESS)
    parser.add_argument("--stop-file", help=argparse.SUPPRESS)
    parser.add_argument("--yielding", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        worker_main(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
