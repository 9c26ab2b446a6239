"""Our standalone driver under real multi-process load and real crashes (SIGKILL).

The driver runs as ``python -m driver`` (``driver_process``: short liveness,
linger and unblock timeouts); publishers and doomed clients are spawned
processes (``support.child_clients``); the test process subscribes and watches
the driver's counters and broadcasts through its ``cnc.dat``. Every wait is
bounded, and every child is stopped by its pid.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from driver.client import CLOSED, NOT_CONNECTED, Aeron, FragmentAssembler, Header, Image
from driver.cnc import CncFile
from driver.command.responses import ClientTimeout
from driver.command.types import ResponseType
from driver.concurrent.broadcast import BroadcastReceiver, CopyBroadcastReceiver
from driver.concurrent.counters import RECORD_ALLOCATED, CountersReader
from driver.concurrent.system_counters import SystemCounterId
from driver.errors import DriverTimeoutError
from support.child_clients import (
    claim_and_hang,
    hold_resources,
    parse_message,
    publish_checked,
    publish_until_closed,
)
from support.clients import Errors, wait_for_image
from support.driver_process import DriverProcess
from support.waiting import execute_until

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.process import BaseProcess

pytestmark = pytest.mark.process

SMALL_TERM = "aeron:ipc?term-length=64k"
TERM_LENGTH = 64 * 1024
SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def errors() -> Errors:
    return Errors()


@pytest.fixture
def aeron(driver_process: DriverProcess, errors: Errors) -> Iterator[Aeron]:
    client = Aeron.connect(aeron_dir=driver_process.aeron_dir, error_handler=errors)
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def spawned(*targets: tuple[Callable[..., object], tuple[Any, ...]]) -> Iterator[list[SpawnProcess]]:
    """Start one spawned child per (target, args); SIGKILL (by pid) and reap any still alive afterwards."""
    children = [SPAWN.Process(target=target, args=args, daemon=True) for target, args in targets]
    try:
        for child in children:
            child.start()
        yield children
    finally:
        for child in children:
            if child.pid is not None and child.exitcode is None:
                sigkill(child)


def sigkill(child: BaseProcess) -> None:
    assert child.pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGKILL)
    child.join(10)


def join_all(children: Sequence[BaseProcess], timeout_s: float = 30.0) -> list[int | None]:
    deadline = time.monotonic() + timeout_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    return [child.exitcode for child in children]


def wait_event(event: Any, what: str, children: Sequence[BaseProcess], timeout_s: float = 30.0) -> None:
    """Wait for a child's event, failing early (with the exit codes) if a child died first."""
    execute_until(
        lambda: event.is_set() or any(c.exitcode not in (None, -signal.SIGKILL) for c in children),
        timeout_s=timeout_s,
        interval_s=0.01,
        description=what,
    )
    assert event.is_set(), f"a child exited before {what}: {[c.exitcode for c in children]}"


@contextlib.contextmanager
def mapped_cnc(aeron_dir: Path) -> Iterator[tuple[CncFile, CountersReader]]:
    cnc = CncFile.map_existing(aeron_dir, timeout_s=5.0)
    try:
        yield cnc, CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
    finally:
        cnc.close()


class Received:
    """Whole messages by publisher, checked as they arrive; torn or foreign ones are kept apart."""

    def __init__(self) -> None:
        self.by_publisher: dict[int, list[int]] = {}
        self.bad: list[str] = []
        self.sessions: set[int] = set()
        self.assembler = FragmentAssembler(self._on_message)

    def _on_message(self, payload: memoryview, header: Header) -> None:
        self.sessions.add(header.session_id)
        try:
            publisher_id, seq = parse_message(bytes(payload))
        except ValueError as exc:
            self.bad.append(str(exc))
            return
        self.by_publisher.setdefault(publisher_id, []).append(seq)

    def count(self, publisher_id: int) -> int:
        return len(self.by_publisher.get(publisher_id, ()))


def system_counter(counters: CountersReader, counter_id: SystemCounterId) -> int:
    assert counters.get_counter_label(counter_id) == counter_id.label
    return counters.get_counter_value(counter_id)


# ---------------------------------------------------------------------------------------------- (a) shared log


def test_two_processes_publish_into_one_shared_publication(driver_process: DriverProcess, aeron: Aeron) -> None:
    stream_id, count = 50, 5000
    subscription = aeron.add_subscription(SMALL_TERM, stream_id)
    ready = [SPAWN.Event(), SPAWN.Event()]
    go, done = SPAWN.Event(), SPAWN.Event()
    directory = str(driver_process.aeron_dir)
    received = Received()
    with spawned(
        *((publish_checked, (directory, SMALL_TERM, stream_id, i, count, 500, ready[i], go, done)) for i in (0, 1))
    ) as children:
        for i in (0, 1):
            wait_event(ready[i], f"publisher {i} to add its publication", children)
        (image,) = wait_for_image(subscription)
        go.set()
        execute_until(
            lambda: (received.count(0) >= count and received.count(1) >= count) or received.bad,
            lambda: subscription.poll(received.assembler, 200),
            timeout_s=60,
            max_iterations=10_000_000,
            interval_s=0.0001,
            description=f"{count} messages from each publisher",
        )
        assert subscription.images == (image,)
        done.set()
        assert join_all(children) == [0, 0]
    assert received.bad == []
    assert received.by_publisher == {0: list(range(count)), 1: list(range(count))}
    assert received.sessions == {image.session_id}  # one shared log, not two
    assert image.position > 20 * TERM_LENGTH  # many term rotations


# ---------------------------------------------------------------------------------------------- (b) dead claim


def test_publisher_killed_mid_claim_is_unblocked(driver_process: DriverProcess, aeron: Aeron) -> None:
    stream_id, committed, count = 51, 100, 3000
    subscription = aeron.add_subscription(SMALL_TERM, stream_id)
    ready_a, claimed, ready_b = SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    go, done = SPAWN.Event(), SPAWN.Event()
    directory = str(driver_process.aeron_dir)
    received = Received()

    def poll() -> None:
        subscription.poll(received.assembler, 200)

    with mapped_cnc(driver_process.aeron_dir) as (_, counters):
        unblocked_before = system_counter(counters, SystemCounterId.UNBLOCKED_PUBLICATIONS)
        with spawned(
            (claim_and_hang, (directory, SMALL_TERM, stream_id, 0, committed, ready_a, claimed)),
            (publish_checked, (directory, SMALL_TERM, stream_id, 1, count, 100, ready_b, go, done)),
        ) as (doomed, survivor):
            wait_event(ready_a, "the doomed publisher to add its publication", [doomed, survivor])
            wait_event(ready_b, "the surviving publisher to add its publication", [doomed, survivor])
            wait_event(claimed, "the doomed publisher to claim", [doomed, survivor])
            sigkill(doomed)  # between try_claim and commit
            assert doomed.exitcode == -signal.SIGKILL
            go.set()
            execute_until(
                lambda: received.count(1) >= count or received.bad,
                poll,
                timeout_s=60,
                max_iterations=10_000_000,
                interval_s=0.0001,
                description="the surviving publisher's messages past the dead claim",
            )
            done.set()
            assert join_all([survivor]) == [0]
        assert received.bad == []
        assert received.by_publisher == {0: list(range(committed)), 1: list(range(count))}
        assert len(received.sessions) == 1
        assert system_counter(counters, SystemCounterId.UNBLOCKED_PUBLICATIONS) > unblocked_before


def test_sole_publisher_killed_mid_claim_drains_and_goes(driver_process: DriverProcess, aeron: Aeron) -> None:
    """With no other publisher the driver times the client out, unblocks the log while draining, then lingers."""
    stream_id, committed = 58, 100
    gone: list[Image] = []
    subscription = aeron.add_subscription(SMALL_TERM, stream_id, unavailable_image_handler=gone.append)
    ready, claimed = SPAWN.Event(), SPAWN.Event()
    received = Received()
    with mapped_cnc(driver_process.aeron_dir) as (_, counters):
        unblocked_before = system_counter(counters, SystemCounterId.UNBLOCKED_PUBLICATIONS)
        args = (str(driver_process.aeron_dir), SMALL_TERM, stream_id, 0, committed, ready, claimed)
        with spawned((claim_and_hang, args)) as (doomed,):
            wait_event(claimed, "the publisher to claim", [doomed])
            (image,) = wait_for_image(subscription)
            log_file = Path(image.log_buffers.path)
            sigkill(doomed)
        execute_until(
            lambda: gone and not log_file.exists(),
            lambda: subscription.poll(received.assembler, 200),
            timeout_s=20,
            interval_s=0.01,
            description="the dead publisher's image to go and its log to be deleted",
        )
        assert system_counter(counters, SystemCounterId.UNBLOCKED_PUBLICATIONS) > unblocked_before
    assert received.bad == []
    assert received.by_publisher == {0: list(range(committed))}
    assert gone == [image]
    assert image.is_closed


# ---------------------------------------------------------------------------------------------- (c) dead client


def _owner_id(label: str) -> int | None:
    """The registration (or client) id a stream or heartbeat counter label starts with."""
    _, sep, rest = label.partition(": ")
    words = rest.split()
    if not sep or not words:
        return None
    try:
        return int(words[0])
    except ValueError:
        return None


def test_killed_client_is_timed_out_and_its_resources_freed(driver_process: DriverProcess, aeron: Aeron) -> None:
    stream_id = 52
    gone: list[Image] = []
    subscription = aeron.add_subscription(SMALL_TERM, stream_id, unavailable_image_handler=gone.append)
    feeder = aeron.add_exclusive_publication(SMALL_TERM, stream_id + 1)  # gives the child's subscription a sub-pos
    report = SPAWN.Queue()
    with spawned((hold_resources, (str(driver_process.aeron_dir), SMALL_TERM, stream_id, report))) as (child,):
        info = report.get(timeout=30)
        client_id = info["client_id"]
        log_file = Path(info["log_file"])
        got: list[bytes] = []
        execute_until(
            lambda: got,
            lambda: subscription.poll(lambda p, h: got.append(bytes(p)), 10),
            timeout_s=10,
            description="the doomed client's message",
        )
        assert got == [b"from a doomed client"]
        assert log_file.exists()

        with mapped_cnc(driver_process.aeron_dir) as (cnc, counters):
            owned = {client_id, info["publication_registration_id"], info["subscription_registration_id"]}
            held: dict[int, str] = {}
            counters.for_each(
                lambda counter_id, type_id, key, label: (
                    held.update({counter_id: label}) if _owner_id(label) in owned else None
                )
            )
            held[info["counter_id"]] = counters.get_counter_label(info["counter_id"])
            labels = sorted(label.split(":")[0] for label in held.values())
            assert labels == ["client-heartbeat", "held by a doomed client", "pub-lmt", "pub-pos (sample)", "sub-pos"]
            timeouts_before = system_counter(counters, SystemCounterId.CLIENT_TIMEOUTS)
            timed_out: list[int] = []

            def on_broadcast(msg_type_id: int, body: memoryview) -> None:
                if msg_type_id == ResponseType.ON_CLIENT_TIMEOUT:
                    timed_out.append(ClientTimeout.decode(body).client_id)

            watcher = CopyBroadcastReceiver(BroadcastReceiver(cnc.to_clients_buffer))

            sigkill(child)

            def freed() -> dict[str, bool]:
                state = {
                    "ON_CLIENT_TIMEOUT": client_id in timed_out,
                    "CLIENT_TIMEOUTS": counters.get_counter_value(SystemCounterId.CLIENT_TIMEOUTS)
                    == timeouts_before + 1,
                    "image unavailable": len(gone) == 1,
                    "log file deleted": not log_file.exists(),
                    "counters freed": all(counters.get_counter_state(i) != RECORD_ALLOCATED for i in held),
                }
                return state if all(state.values()) else {}

            execute_until(
                freed,
                lambda: (watcher.receive(on_broadcast), subscription.poll(lambda p, h: None, 10)),
                timeout_s=20,
                interval_s=0.01,
                description="the dead client's resources to be freed",
            )
    assert subscription.images == ()
    assert gone[0].session_id == info["session_id"]
    assert feeder.offer(b"x") == NOT_CONNECTED  # the dead client's subscription is gone too
    late = aeron.add_subscription(SMALL_TERM, stream_id + 1)
    wait_for_image(late)
    # The driver carries on for the living. The image is announced before the conductor's next cycle raises the
    # publisher limit for the new subscriber, so an offer at that instant may still be back-pressured.
    execute_until(
        lambda: feeder.offer(b"still served") > 0,
        timeout_s=10,
        interval_s=0.001,
        description="an offer to the living subscriber accepted",
    )


# ---------------------------------------------------------------------------------------------- (d) dead driver


def test_driver_killed_under_live_clients(driver_process: DriverProcess, errors: Errors) -> None:
    client = Aeron.connect(
        aeron_dir=driver_process.aeron_dir,
        driver_timeout_ms=1000,
        keepalive_interval_ns=100_000_000,
        error_handler=errors,
    )
    try:
        subscription = client.add_subscription(SMALL_TERM, 54)
        publication = client.add_publication(SMALL_TERM, 55)
        with spawned((publish_until_closed, (str(driver_process.aeron_dir), SMALL_TERM, 54, 1000))) as (child,):
            wait_for_image(subscription, timeout_s=30)
            received = Received()
            execute_until(
                lambda: received.count(0) >= 10,
                lambda: subscription.poll(received.assembler, 10),
                timeout_s=30,
                description="messages from the child publisher",
            )
            driver_process.kill()
            with pytest.raises(DriverTimeoutError):  # the client's driver timeout ends the wait
                client.add_publication(SMALL_TERM, 56)
            execute_until(lambda: client.is_closed, timeout_s=10, description="the client to notice the dead driver")
            assert any(isinstance(e, DriverTimeoutError) for e in errors.seen), errors.seen
            assert publication.offer(b"x") == CLOSED
            assert subscription.poll(lambda p, h: None, 10) == 0
            with pytest.raises(DriverTimeoutError):
                client.add_subscription(SMALL_TERM, 57)
            assert join_all([child]) == [0]  # the child saw CLOSED and returned
        assert received.bad == []
        assert received.by_publisher[0] == list(range(len(received.by_publisher[0])))
    finally:
        client.close()
