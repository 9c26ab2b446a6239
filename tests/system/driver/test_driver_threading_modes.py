"""Every threading mode of our driver carries a publish/subscribe exchange, embedded and as a process.

DEDICATED, SHARED_NETWORK and SHARED put the agents on threads of their own;
INVOKER starts none, so the test itself calls ``driver.invoker.invoke()`` (the
standalone driver does it in its main loop).
"""

from __future__ import annotations

import select
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from driver.client import BACK_PRESSURED, Aeron, Header, Subscription
from driver.config import DriverContext
from driver.core.ipc_publication import IpcPublication
from driver.core.media_driver import MediaDriver
from support.clients import offer_all, poll_until, wait_for_image
from support.driver_process import DriverProcess

SMALL_TERM = "aeron:ipc?term-length=64k"
THREADED_MODES = ["DEDICATED", "SHARED_NETWORK", "SHARED"]
SETTINGS: dict[str, Any] = {
    "timer_interval_ns": 50_000_000,
    "client_liveness_timeout_ns": 2_000_000_000,
    "publication_linger_timeout_ns": 500_000_000,
}


def context(aeron_dir: Path, mode: str) -> DriverContext:
    return DriverContext.from_env({}, aeron_dir=aeron_dir, threading_mode=mode, **SETTINGS)


def messages(count: int) -> list[bytes]:
    return [(b"mode message %06d " % i).ljust(40 + i % 150, b"+") for i in range(count)]


def exchange(client: Aeron, stream_id: int, count: int = 2000) -> None:
    """Publish ``count`` messages through several term rotations and read them back in order."""
    subscription = client.add_subscription(SMALL_TERM, stream_id)
    publication = client.add_publication(SMALL_TERM, stream_id)
    wait_for_image(subscription)
    sent = messages(count)
    received: list[bytes] = []

    def handler(payload: memoryview, header: Header) -> None:
        received.append(bytes(payload))

    positions = offer_all(publication, sent, lambda: subscription.poll(handler, 100))
    poll_until(subscription, handler, lambda: len(received) >= count)
    assert received == sent
    assert positions[-1] > 3 * 64 * 1024


@pytest.mark.parametrize("mode", THREADED_MODES)
def test_embedded_threaded_mode(aeron_dir: Path, mode: str) -> None:
    threads_before = set(threading.enumerate())
    with MediaDriver.launch(context(aeron_dir, mode)) as driver:
        agent_threads = set(threading.enumerate()) - threads_before
        assert driver.invoker is None
        assert agent_threads, f"{mode} started no agent thread"
        with Aeron.connect(aeron_dir=aeron_dir) as client:
            exchange(client, 60)
    for thread in agent_threads:
        thread.join(5)
        assert not thread.is_alive(), thread


async def test_embedded_invoker_mode_is_driven_by_the_application(aeron_dir: Path) -> None:
    threads_before = set(threading.enumerate())
    driver = MediaDriver.launch(context(aeron_dir, "INVOKER"))
    invoker = driver.invoker
    assert invoker is not None
    assert set(threading.enumerate()) <= threads_before  # no agent thread
    paused = True
    stop = anyio.Event()
    invocations = 0

    async def drive() -> None:
        nonlocal invocations
        while not stop.is_set():
            work = 0
            if not paused:
                work = invoker.invoke()
                invocations += 1
            await anyio.sleep(0 if work else 0.000_2)

    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(drive)
                try:
                    client = await Aeron.connect_async(aeron_dir=aeron_dir)
                    with client:
                        # Nobody invokes the driver: nothing answers.
                        with anyio.move_on_after(0.3) as scope:
                            await client.add_subscription_async(SMALL_TERM, 61)
                        assert scope.cancelled_caught
                        paused = False
                        subscription = await client.add_subscription_async(SMALL_TERM, 62)
                        publication = await client.add_exclusive_publication_async(SMALL_TERM, 62)
                        sent = messages(2000)
                        received: list[bytes] = []

                        async def consume() -> None:
                            async for payload, _header in subscription.fragments(idle_timeout=20):
                                received.append(bytes(payload))
                                if len(received) == len(sent):
                                    return

                        async with anyio.create_task_group() as exchange_tasks:
                            exchange_tasks.start_soon(consume)
                            for message in sent:
                                assert await publication.offer_async(message, timeout=20) > 0
                        assert received == sent
                        assert publication.position > 3 * 64 * 1024
                finally:
                    stop.set()
    finally:
        driver.close()
    assert invocations > 0


def test_invoker_driver_answers_blocking_calls_on_the_same_thread(aeron_dir: Path) -> None:
    """With ``driver_agent_invoker`` a blocking add runs the driver while it waits: one thread does it all."""
    threads_before = set(threading.enumerate())
    with MediaDriver.launch(context(aeron_dir, "INVOKER")) as driver:
        assert driver.invoker is not None
        with Aeron.connect(
            aeron_dir=aeron_dir, driver_agent_invoker=driver.invoker, use_conductor_agent_invoker=True
        ) as client:
            assert set(threading.enumerate()) <= threads_before  # neither a driver nor a client thread
            conductor = client.conductor_agent_invoker
            assert conductor is not None
            subscription = client.add_subscription(SMALL_TERM, 64)
            publication = client.add_exclusive_publication(SMALL_TERM, 64)
            sent = messages(500)
            received: list[bytes] = []

            def handler(payload: memoryview, header: Header) -> None:
                received.append(bytes(payload))

            pending = list(sent)
            for _ in range(200_000):
                if len(received) == len(sent):
                    break
                client.invoke_driver()
                conductor.invoke()
                if pending and publication.offer(pending[0]) > 0:
                    pending.pop(0)
                subscription.poll(handler, 100)
            assert received == sent
            publication.close()  # blocking too: the driver is run until it confirms
            subscription.close()


def test_a_sleeping_invoker_host_is_woken_by_a_client_command(aeron_dir: Path) -> None:
    """The host parks (doorbell raised) and sleeps on the doorbell's socket; a client's command rings it."""
    with MediaDriver.launch(context(aeron_dir, "INVOKER")) as driver:
        invoker, doorbell = driver.invoker, driver.doorbell
        assert invoker is not None
        assert doorbell is not None
        assert (aeron_dir / "doorbell.dat").exists()
        with Aeron.connect(
            aeron_dir=aeron_dir, driver_agent_invoker=invoker, use_conductor_agent_invoker=True
        ) as client:
            conductor = client.conductor_agent_invoker
            assert conductor is not None
            for _ in range(20):
                invoker.invoke()
            doorbell.park()
            assert not driver.has_unread_commands()
            pending = client.conductor.begin_add_subscription(SMALL_TERM, 65, None, None)
            assert driver.has_unread_commands()
            ready, _, _ = select.select([doorbell.socket], [], [], 30)
            assert ready, "the command did not ring the doorbell"
            doorbell.unpark()
            for _ in range(10_000):
                invoker.invoke()
                conductor.invoke()
                if pending.done:
                    break
            assert pending.done
            subscription = pending.outcome()
            assert isinstance(subscription, Subscription)
            subscription.close()


def test_a_subscriber_moving_while_limits_are_recomputed_is_not_missed(
    aeron_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver recomputes IPC limits after a change of publications or subscribers, then only for subscribers
    that moved. One that moved while the limits were being recomputed must still count as moved: otherwise a
    subscriber with nothing more to read leaves its publisher back-pressured for good (seen under load)."""
    with MediaDriver.launch(context(aeron_dir, "INVOKER")) as driver:
        invoker = driver.invoker
        assert invoker is not None
        with Aeron.connect(
            aeron_dir=aeron_dir, driver_agent_invoker=invoker, use_conductor_agent_invoker=True
        ) as client:
            subscription = client.add_subscription(SMALL_TERM, 66)
            publication = client.add_exclusive_publication(SMALL_TERM, 66)
            conductor = client.conductor_agent_invoker
            assert conductor is not None
            for _ in range(10_000):
                if subscription.images and publication.is_connected:
                    break
                invoker.invoke()
                conductor.invoke()
            for _ in range(10_000):
                if publication.offer(bytes(1000)) == BACK_PRESSURED:
                    break
                invoker.invoke()
            assert publication.offer(bytes(1000)) == BACK_PRESSURED
            original = IpcPublication.update_publisher_limit

            def subscriber_drains_meanwhile(self: IpcPublication) -> int:
                work = original(self)
                subscription.poll(lambda payload, header: None, 10_000)  # right after its position was read
                return work

            monkeypatch.setattr(IpcPublication, "update_publisher_limit", subscriber_drains_meanwhile)
            monkeypatch.setattr(IpcPublication, "topology_version", IpcPublication.topology_version + 1)
            invoker.invoke()  # the full recomputation, with the subscriber moving in the middle of it
            monkeypatch.setattr(IpcPublication, "update_publisher_limit", original)
            for _ in range(100):
                invoker.invoke()
            assert publication.offer(b"again") > 0


@pytest.mark.process
@pytest.mark.parametrize("mode", [*THREADED_MODES, "INVOKER"])
def test_driver_process_mode(aeron_dir: Path, tmp_path: Path, mode: str) -> None:
    process = DriverProcess.start(aeron_dir, tmp_path / "driver.log", SETTINGS, threading_mode=mode)
    try:
        with Aeron.connect(aeron_dir=aeron_dir) as client:
            exchange(client, 63)
        assert f"({mode})" in process.output()
    finally:
        assert process.stop() == 0
    assert "driver: stopped" in process.output()
