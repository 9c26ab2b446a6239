"""Helpers for the UDP system tests: several drivers per test, free ports, checked streams, counters.

``UdpDrivers`` (the ``udp`` fixture): ``udp.embedded(name, **settings)`` launches our
driver in this process on a fresh directory, ``udp.process(name, **settings)``
starts ``python -m driver`` (optionally under a command prefix such as
``ip netns exec NS``), and ``udp.client(aeron_dir)`` connects a client. At the end
clients close first, then drivers (processes stopped by pid), then the
directories go.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from driver.client import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED, Aeron, FragmentAssembler, Header, Publication
from driver.client import Subscription as ClientSubscription
from driver.cnc import CncFile
from driver.concurrent.counters import RECORD_ALLOCATED, CountersReader
from driver.concurrent.error_log import read_error_log
from driver.concurrent.system_counters import SystemCounterId
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from support.child_clients import make_message, parse_message
from support.clients import Errors
from support.driver_process import DriverProcess
from support.ports import free_udp_port
from support.waiting import execute_until

__all__ = [
    "UDP_SETTINGS",
    "Collector",
    "UdpDrivers",
    "allocated_counters",
    "counters_of",
    "driver_errors",
    "free_udp_port",
    "make_message",
    "offer_retrying",
    "publish_checked",
    "publish_with_embedded_driver",
    "subscribe_with_embedded_driver",
    "system_counter",
]


class Collector:
    """Reassembles and checks messages of one publisher id: whole, each exactly once, in sequence order."""

    def __init__(self, publisher_id: int = 0, session_id: int | None = None) -> None:
        self.publisher_id = publisher_id
        self.session_id = session_id
        self.seqs: list[int] = []
        self.problems: list[str] = []
        self.assembler = FragmentAssembler(self._on_message)

    def _on_message(self, buffer: memoryview, header: Header) -> None:
        if self.session_id is not None and header.session_id != self.session_id:
            return
        try:
            publisher_id, seq = parse_message(bytes(buffer))
        except ValueError as exc:
            self.problems.append(str(exc))
            return
        if publisher_id != self.publisher_id:
            self.problems.append(f"message of publisher {publisher_id}")
        elif seq != len(self.seqs):
            self.problems.append(f"seq {seq} after {len(self.seqs)} in-order messages")
        self.seqs.append(seq)

    def poll(self, subscription: ClientSubscription, limit: int = 100) -> int:
        return subscription.poll(self.assembler, limit)

    def check(self, count: int) -> None:
        assert self.problems == [], self.problems[:5]
        assert self.seqs == list(range(count))


def offer_retrying(
    publication: Publication, message: bytes, drain: Callable[[], object], deadline: float, what: str
) -> None:
    """Offer until accepted, draining the subscribers between tries; fails past ``deadline`` (monotonic)."""
    for _ in range(10_000_000):
        result = publication.offer(message)
        if result >= 0:
            return
        assert result in (BACK_PRESSURED, ADMIN_ACTION, NOT_CONNECTED), result
        drain()
        assert time.monotonic() < deadline, f"{what} stuck at {result}"
    raise AssertionError(f"{what} not accepted after 10,000,000 tries")


def publish_checked(
    publication: Publication,
    subscriptions: Sequence[tuple[ClientSubscription, Collector]],
    count: int,
    body_length: int,
    timeout_s: float = 30.0,
    start_seq: int = 0,
) -> None:
    """Offer ``count`` checked messages (draining every subscriber meanwhile) and wait until all have them."""
    deadline = time.monotonic() + timeout_s

    def drain() -> None:
        for subscription, collector in subscriptions:
            collector.poll(subscription)

    for seq in range(start_seq, start_seq + count):
        offer_retrying(publication, make_message(0, seq, body_length), drain, deadline, f"offer of {seq}")
    total = start_seq + count
    execute_until(
        lambda: all(len(c.seqs) >= total or c.problems for _, c in subscriptions),
        drain,
        timeout_s=max(1.0, deadline - time.monotonic()),
        max_iterations=10_000_000,
        interval_s=0.0001,
        description=f"{total} messages at every subscriber",
    )
    for _, collector in subscriptions:
        collector.check(total)


@contextlib.contextmanager
def counters_of(aeron_dir: Path) -> Iterator[tuple[CncFile, CountersReader]]:
    cnc = CncFile.map_existing(aeron_dir, timeout_s=5.0)
    try:
        yield cnc, CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
    finally:
        cnc.close()


def system_counter(aeron_dir: Path, sid: SystemCounterId) -> int:
    with counters_of(aeron_dir) as (_, reader):
        return reader.get_counter_value(sid)


def driver_errors(aeron_dir: Path) -> list[str]:
    with counters_of(aeron_dir) as (cnc, _):
        return [e.text for e in read_error_log(cnc.error_log_buffer)]


def allocated_counters(reader: CountersReader) -> list[tuple[int, int, str]]:
    """(id, type id, label) of every allocated counter."""
    out: list[tuple[int, int, str]] = []

    def collect(counter_id: int, type_id: int, _key: bytes, label: str) -> None:
        out.append((counter_id, type_id, label))

    reader.for_each(collect)
    return [c for c in out if reader.get_counter_state(c[0]) == RECORD_ALLOCATED]


# Short timers so failures show within a second or two (image liveness, connection, linger).
UDP_SETTINGS: dict[str, object] = {
    "timer_interval_ns": 20_000_000,
    "client_liveness_timeout_ns": 2_000_000_000,
    "publication_linger_timeout_ns": 200_000_000,
    "publication_unblock_timeout_ns": 2_000_000_000,
    "publication_connection_timeout_ns": 1_000_000_000,
    "image_liveness_timeout_ns": 1_000_000_000,
    "term_buffer_length": 1024 * 1024,
    "ipc_term_buffer_length": 1024 * 1024,
}


def _shm_base() -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return Path(tempfile.gettempdir())


class UdpDrivers:
    def __init__(self, test_name: str, log_dir: Path) -> None:
        self._prefix = f"endpoint-udp-{test_name[:32]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._log_dir = log_dir
        self._dirs: list[Path] = []
        self._drivers = contextlib.ExitStack()
        self._clients = contextlib.ExitStack()
        self.errors = Errors()

    def directory(self, name: str) -> Path:
        path = _shm_base() / f"{self._prefix}-{name}"
        self._dirs.append(path)
        return path

    def embedded(self, name: str, threading_mode: str = "SHARED", **settings: object) -> MediaDriver:
        merged = {**UDP_SETTINGS, **settings}
        ctx = DriverContext.from_env({}, aeron_dir=self.directory(name), threading_mode=threading_mode, **merged)
        driver = MediaDriver.launch(ctx)
        self._drivers.callback(driver.close)
        return driver

    def process(self, name: str, prefix: Sequence[str] = (), **settings: object) -> DriverProcess:
        merged = {**UDP_SETTINGS, **settings}
        aeron_dir = self.directory(name)
        log_path = self._log_dir / f"driver-{name}.log"
        if not prefix:
            driver = DriverProcess.start(aeron_dir, log_path, merged)
        else:
            driver = _start_prefixed(prefix, aeron_dir, log_path, merged)
        self._drivers.callback(driver.stop)
        return driver

    def client(self, aeron_dir: Path, **options: object) -> Aeron:
        client = Aeron.connect(aeron_dir=aeron_dir, error_handler=self.errors, **options)
        self._clients.callback(client.close)
        return client

    def close(self) -> None:
        try:
            self._clients.close()
        finally:
            try:
                self._drivers.close()
            finally:
                for path in self._dirs:
                    shutil.rmtree(path, ignore_errors=True)


def _start_prefixed(
    prefix: Sequence[str], aeron_dir: Path, log_path: Path, settings: dict[str, object]
) -> DriverProcess:
    """``python -m driver`` run under a command prefix (``ip netns exec NS``); stopped by pid."""
    properties = DriverContext.from_env({}, None, aeron_dir=aeron_dir, **settings).to_properties()
    args = [*prefix, sys.executable, "-m", "driver", "--threading-mode", "SHARED"]
    for prop, value in properties.items():
        args += ["-D", f"{prop}={value}"]
    with log_path.open("ab") as sink:
        proc = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    driver = DriverProcess(proc, aeron_dir, log_path)
    try:
        execute_until(driver._ready, timeout_s=30, interval_s=0.02, description=f"driver under {prefix}")
    except BaseException:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        raise
    return driver


# -- child processes (multiprocessing spawn targets): an application with its own embedded driver ------

CHILD_TIMEOUT_S = 60.0


def publish_with_embedded_driver(
    aeron_dir: str, channel: str, stream_id: int, settings: dict[str, object], ready: Any
) -> None:
    """Run a driver and a publisher in this (child) process; publish checked messages until killed."""
    ctx = DriverContext.from_env({}, aeron_dir=Path(aeron_dir), threading_mode="SHARED", **settings)
    with MediaDriver.launch(ctx), Aeron.connect(aeron_dir=Path(aeron_dir)) as client:
        publication = client.add_exclusive_publication(channel, stream_id)
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        seq = 0
        while time.monotonic() < deadline:
            if publication.offer(make_message(0, seq, 16)) >= 0:
                seq += 1
                if seq == 200:
                    ready.set()
            time.sleep(0.0005)


def subscribe_with_embedded_driver(
    aeron_dir: str, channel: str, stream_id: int, settings: dict[str, object], ready: Any
) -> None:
    """Run a driver and a subscriber in this (child) process; consume until killed."""
    ctx = DriverContext.from_env({}, aeron_dir=Path(aeron_dir), threading_mode="SHARED", **settings)
    with MediaDriver.launch(ctx), Aeron.connect(aeron_dir=Path(aeron_dir)) as client:
        subscription = client.add_subscription(channel, stream_id)
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        received = [0]

        def count(_buffer: memoryview, _header: Header) -> None:
            received[0] += 1

        assembler = FragmentAssembler(count)
        while time.monotonic() < deadline:
            if subscription.poll(assembler, 100) == 0:
                time.sleep(0.0005)
            if received[0] >= 100:
                ready.set()
