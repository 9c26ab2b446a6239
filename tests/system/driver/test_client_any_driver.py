"""Our client (``driver.client``) against every driver: Java 1.15.1's, ours embedded, ours as a process.

The same tests run on all three through the ``any_driver`` fixture, so the client
and our driver are each checked against the reference implementation of the other.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from driver.client import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    NOT_CONNECTED,
    Aeron,
    BufferClaim,
    ControlledAction,
    DriverClientError,
    FragmentAssembler,
    Header,
    Image,
    Subscription,
)
from driver.errors import DriverTimeoutError, RegistrationError
from support.any_driver import AnyDriver
from support.clients import Errors, offer_all, poll_until, wait_for_image
from support.waiting import execute_until

if TYPE_CHECKING:
    import multiprocessing.synchronize

SMALL_TERM = "aeron:ipc?term-length=64k"


@pytest.fixture
def errors() -> Errors:
    return Errors()


@pytest.fixture
def aeron(any_driver: AnyDriver, errors: Errors) -> Iterator[Aeron]:
    client = Aeron.connect(aeron_dir=any_driver.aeron_dir, error_handler=errors)
    try:
        yield client
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- connecting


def test_connects_and_reads_the_drivers_counters(aeron: Aeron, any_driver: AnyDriver) -> None:
    assert aeron.client_id >= 0
    assert aeron.cnc_path == any_driver.cnc_path
    assert aeron.counters_reader.get_counter_label(0) == "Bytes sent"
    assert not aeron.is_closed
    assert aeron.next_correlation_id() > aeron.client_id


def test_connect_without_driver_times_out(aeron_dir: Path) -> None:
    with pytest.raises(DriverTimeoutError):  # the connect's own driver timeout ends it (no hang: pytest-timeout)
        Aeron.connect(aeron_dir=aeron_dir, driver_timeout_ms=300, keepalive_interval_ns=100_000_000)


def test_invalid_channel_is_a_registration_error(aeron: Aeron) -> None:
    with pytest.raises(RegistrationError) as raised:
        aeron.add_publication("aeron:ipc?term-length=1000", 1)
    assert "term" in str(raised.value).lower()
    # The client is still usable after a refused command.
    assert aeron.add_subscription("aeron:ipc", 1).registration_id > 0


# ---------------------------------------------------------------------------------------------- data path


def test_many_messages_across_term_rotations(aeron: Aeron) -> None:
    subscription = aeron.add_subscription(SMALL_TERM, 10)
    publication = aeron.add_publication(SMALL_TERM, 10)
    assert publication.term_buffer_length == 64 * 1024
    (image,) = wait_for_image(subscription)
    assert image.session_id == publication.session_id
    assert publication.is_connected

    messages = [(b"%06d:" % i) + bytes([i % 251]) * (i % 200) for i in range(20_000)]
    received: list[bytes] = []
    ends: list[int] = []

    def handler(payload: memoryview, header: Header) -> None:
        assert header.session_id == publication.session_id
        assert header.stream_id == 10
        received.append(bytes(payload))
        ends.append(header.position)

    def drain() -> None:
        subscription.poll(handler, 100)

    positions = offer_all(publication, messages, drain)
    poll_until(subscription, handler, lambda: len(received) >= len(messages))
    assert received == messages
    assert ends == positions
    assert positions[-1] > 3 * 64 * 1024  # wrapped through all three partitions at least once
    assert image.position == publication.position == positions[-1]


def test_fragmented_messages_are_reassembled(aeron: Aeron) -> None:
    subscription = aeron.add_subscription(SMALL_TERM, 11)
    publication = aeron.add_publication(SMALL_TERM, 11)
    wait_for_image(subscription)
    assert publication.max_message_length == 8192
    sizes = [publication.max_payload_length + 1, 5000, 8192, 1, 3000, publication.max_payload_length] * 20
    messages = [bytes([(i + j) % 256 for j in range(size)]) for i, size in enumerate(sizes)]
    received: list[bytes] = []
    assembler = FragmentAssembler(lambda payload, header: received.append(bytes(payload)))
    offer_all(publication, messages, lambda: subscription.poll(assembler, 100))
    poll_until(subscription, assembler, lambda: len(received) >= len(messages))
    assert received == messages
    with pytest.raises(ValueError, match="max_message_length"):
        publication.offer(bytes(8193))


def test_try_claim_commit_and_abort(aeron: Aeron) -> None:
    subscription = aeron.add_subscription(SMALL_TERM, 12)
    publication = aeron.add_exclusive_publication(SMALL_TERM, 12)
    wait_for_image(subscription)
    claim = BufferClaim()
    expected: list[tuple[bytes, int]] = []
    received: list[tuple[bytes, int]] = []

    def handler(payload: memoryview, header: Header) -> None:
        received.append((bytes(payload), header.reserved_value))

    deadline = time.monotonic() + 30
    for i in range(3000):
        while (result := publication.try_claim(40, claim)) < 0:
            assert result in (BACK_PRESSURED, ADMIN_ACTION), result
            subscription.poll(handler, 100)
            assert time.monotonic() < deadline
        payload = (b"claim %05d " % i).ljust(40, b".")
        claim.buffer[:] = payload
        if i % 3 == 0:
            claim.abort()
        else:
            claim.reserved_value = i
            claim.commit()
            expected.append((payload, i))
    poll_until(subscription, handler, lambda: len(received) >= len(expected))
    assert received == expected
    with pytest.raises(ValueError, match="max_payload_length"):
        publication.try_claim(publication.max_payload_length + 1, claim)


def test_exclusive_publication_and_offer_batch(aeron: Aeron) -> None:
    subscription = aeron.add_subscription(SMALL_TERM, 13)
    exclusive = aeron.add_exclusive_publication(SMALL_TERM, 13)
    concurrent = aeron.add_publication(SMALL_TERM, 13)
    assert exclusive.session_id != concurrent.session_id
    wait_for_image(subscription, 2)

    by_session: dict[int, list[bytes]] = {exclusive.session_id: [], concurrent.session_id: []}

    def handler(payload: memoryview, header: Header) -> None:
        by_session[header.session_id].append(bytes(payload))

    def drain() -> None:
        subscription.poll(handler, 1000)

    batches = [[b"%08d" % (b * 64 + i) + bytes(24) for i in range(64)] for b in range(300)]
    deadline = time.monotonic() + 30
    for batch in batches:
        for publication in (exclusive, concurrent):
            while (result := publication.offer_batch(batch)) < 0:
                assert result in (BACK_PRESSURED, ADMIN_ACTION), result
                drain()
                assert time.monotonic() < deadline
    flat = [message for batch in batches for message in batch]
    poll_until(subscription, handler, lambda: all(len(v) >= len(flat) for v in by_session.values()))
    assert by_session[exclusive.session_id] == flat
    assert by_session[concurrent.session_id] == flat
    assert exclusive.position == concurrent.position == len(flat) * 64
    with pytest.raises(ValueError, match="max_payload_length"):
        exclusive.offer_batch([bytes(exclusive.max_payload_length + 1)])


def test_flow_control_codes(aeron: Aeron) -> None:
    publication = aeron.add_publication(SMALL_TERM, 14)
    assert publication.offer(b"nobody listens") == NOT_CONNECTED
    assert not publication.is_connected
    subscription = aeron.add_subscription(SMALL_TERM, 14)
    wait_for_image(subscription)
    execute_until(lambda: publication.position_limit > 0, timeout_s=10, description="a publisher limit")
    results = set()
    for _ in range(10_000):
        result = publication.offer(bytes(1000))
        results.add(min(result, 0))
        if result == BACK_PRESSURED:
            break
    assert BACK_PRESSURED in results
    assert publication.position >= publication.term_buffer_length  # the window of an IPC publication is one term
    # Consuming lets the driver raise the limit again.
    poll_until(subscription, lambda p, h: None, lambda: subscription.images[0].position == publication.position)
    execute_until(lambda: publication.offer(b"again") >= 0, timeout_s=10, description="offer after draining")


def test_controlled_poll(aeron: Aeron) -> None:
    subscription = aeron.add_subscription(SMALL_TERM, 15)
    publication = aeron.add_publication(SMALL_TERM, 15)
    wait_for_image(subscription)
    offer_all(publication, [b"%d" % i for i in range(10)], lambda: None)
    seen: list[bytes] = []

    def abort_on_five(payload: memoryview, header: Header) -> ControlledAction:
        if bytes(payload) == b"5" and b"5!" not in seen:
            seen.append(b"5!")
            return ControlledAction.ABORT
        seen.append(bytes(payload))
        return ControlledAction.BREAK if bytes(payload) == b"2" else ControlledAction.CONTINUE

    assert subscription.controlled_poll(abort_on_five, 100) == 3  # 0 1 2, then BREAK
    assert subscription.controlled_poll(abort_on_five, 100) == 2  # 3 4, then ABORT on 5
    assert subscription.controlled_poll(abort_on_five, 100) == 5  # 5 again, then 6..9
    assert seen == [b"0", b"1", b"2", b"3", b"4", b"5!", b"5", b"6", b"7", b"8", b"9"]


def test_shared_publication_and_two_subscriptions(aeron: Aeron) -> None:
    sub_a = aeron.add_subscription(SMALL_TERM, 16)
    sub_b = aeron.add_subscription(SMALL_TERM, 16)
    first = aeron.add_publication(SMALL_TERM, 16)
    second = aeron.add_publication(SMALL_TERM, 16)
    assert first.original_registration_id == second.original_registration_id == first.registration_id
    assert second.registration_id != first.registration_id
    assert not second.is_original
    assert first.session_id == second.session_id
    assert first.log_buffers is second.log_buffers
    (image_a,) = wait_for_image(sub_a)
    (image_b,) = wait_for_image(sub_b)
    assert image_a.correlation_id == image_b.correlation_id
    assert image_a.subscriber_position_id != image_b.subscriber_position_id

    second.close()
    assert second.is_closed
    assert second.offer(b"x") == CLOSED
    assert first.offer(b"still open") > 0
    got: list[bytes] = []
    poll_until(sub_a, lambda p, h: got.append(bytes(p)), lambda: got == [b"still open"])
    assert sub_b.poll(lambda p, h: got.append(bytes(p)), 10) == 1


def test_image_handlers_see_images_come_and_go(aeron: Aeron) -> None:
    available: list[Image] = []
    unavailable: list[Image] = []
    subscription = aeron.add_subscription(
        "aeron:ipc?term-length=64k",
        17,
        available_image_handler=available.append,
        unavailable_image_handler=unavailable.append,
    )
    publication = aeron.add_exclusive_publication(SMALL_TERM, 17)
    (image,) = wait_for_image(subscription)
    assert available == [image]
    assert image.source_identity.startswith("aeron:ipc")
    assert publication.offer(b"last words") > 0
    publication.close()
    # The driver drains, lingers (5 s by default in 1.15.1), then reports the image gone.
    execute_until(lambda: unavailable, lambda: subscription.poll(lambda p, h: None, 10), timeout_s=30, interval_s=0.01)
    assert unavailable == [image]
    assert image.is_closed
    assert subscription.images == ()
    assert image.poll(lambda p, h: None, 10) == 0
    assert image.position == image.join_position + 64


def test_counters(aeron: Aeron) -> None:
    counter = aeron.add_counter(1001, b"key!", "endpoint test counter")
    assert counter.label == "endpoint test counter"
    assert aeron.counters_reader.get_counter_type_id(counter.id) == 1001
    assert aeron.counters_reader.get_counter_key(counter.id)[:4] == b"key!"
    assert counter.increment() == 0
    assert counter.get_and_add(10) == 1
    assert aeron.counters_reader.get_counter_value(counter.id) == 11
    counter.close()
    assert counter.is_closed
    assert counter.get() == 0


# ---------------------------------------------------------------------------------------------- failures


def test_driver_killed_is_reported_as_driver_timeout(any_driver: AnyDriver, errors: Errors) -> None:
    client = Aeron.connect(
        aeron_dir=any_driver.aeron_dir,
        driver_timeout_ms=1000,
        keepalive_interval_ns=100_000_000,
        error_handler=errors,
    )
    try:
        subscription = client.add_subscription("aeron:ipc", 20)
        publication = client.add_publication("aeron:ipc", 20)
        wait_for_image(subscription)
        any_driver.kill()
        with pytest.raises(DriverTimeoutError):
            client.add_publication("aeron:ipc", 21)
        execute_until(lambda: client.is_closed, timeout_s=10, description="client to notice the dead driver")
        assert any(isinstance(e, DriverTimeoutError) for e in errors.seen), errors.seen
        assert isinstance(client.termination_cause, DriverTimeoutError)
        assert publication.offer(b"x") == CLOSED
        assert subscription.poll(lambda p, h: None, 10) == 0
        with pytest.raises(DriverTimeoutError):
            client.add_subscription("aeron:ipc", 22)
    finally:
        client.close()


def test_closed_client_closes_its_resources(any_driver: AnyDriver) -> None:
    client = Aeron.connect(aeron_dir=any_driver.aeron_dir)
    publication = client.add_publication("aeron:ipc", 23)
    subscription = client.add_subscription("aeron:ipc", 23)
    client.close()
    client.close()
    assert client.is_closed
    assert publication.is_closed
    assert publication.offer(b"x") == CLOSED
    assert publication.position == CLOSED
    assert subscription.is_closed
    assert subscription.poll(lambda p, h: None, 10) == 0
    with pytest.raises(DriverClientError):
        client.add_publication("aeron:ipc", 23)


def test_agent_invoker_mode(any_driver: AnyDriver) -> None:
    with Aeron.connect(aeron_dir=any_driver.aeron_dir, use_conductor_agent_invoker=True) as client:
        invoker = client.conductor_agent_invoker
        assert invoker is not None
        subscription = client.add_subscription("aeron:ipc", 24)
        publication = client.add_publication("aeron:ipc", 24)
        execute_until(lambda: subscription.images, invoker.invoke, timeout_s=10, interval_s=0.001)
        assert publication.offer(b"invoked") > 0
        got: list[bytes] = []
        poll_until(subscription, lambda p, h: got.append(bytes(p)), lambda: got == [b"invoked"])


# ---------------------------------------------------------------------------------------------- async


async def test_asyncio_add_offer_and_iterate(any_driver: AnyDriver) -> None:
    async with Aeron.connect(aeron_dir=any_driver.aeron_dir) as client:
        subscription = await client.add_subscription_async(SMALL_TERM, 30)
        publication = await client.add_exclusive_publication_async(SMALL_TERM, 30)
        count = 5000
        received: list[bytes] = []

        async def consume() -> None:
            async for payload, header in subscription.fragments(idle_timeout=20):
                assert header.session_id == publication.session_id
                received.append(bytes(payload))
                if len(received) == count:
                    return

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(consume)
                for i in range(count):
                    assert await publication.offer_async(b"async %d" % i, timeout=20) > 0
        assert received == [b"async %d" % i for i in range(count)]
        counter = await client.add_counter_async(1002, label="async counter")
        assert counter.label == "async counter"
        await publication.close_async()
        await subscription.close_async()
        assert publication.is_closed
        assert subscription.is_closed


async def _first_fragment(subscription: Subscription, idle_timeout: float) -> bytes:
    async for payload, _header in subscription.fragments(idle_timeout=idle_timeout):
        return bytes(payload)
    raise AssertionError("the subscription closed")


async def test_async_waits_time_out_and_cancel(any_driver: AnyDriver) -> None:
    client = await Aeron.connect_async(aeron_dir=any_driver.aeron_dir)
    try:
        publication = await client.add_publication_async("aeron:ipc", 31)
        # Bounded: its own 0.2 s timeout must end it; a hang becomes fail_after's error, outside pytest.raises.
        with anyio.fail_after(30), pytest.raises(TimeoutError):
            await publication.offer_async(b"nobody listens", timeout=0.2)
        subscription = await client.add_subscription_async("aeron:ipc", 32)
        with anyio.move_on_after(0.2) as scope:
            async for _ in subscription:
                pytest.fail("no fragment was published")
        assert scope.cancelled_caught
        with pytest.raises(TimeoutError):
            await _first_fragment(subscription, idle_timeout=0.1)
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- processes


def _publish_in_child(aeron_dir: str, count: int, done: multiprocessing.synchronize.Event) -> None:
    with Aeron.connect(aeron_dir=aeron_dir) as client:
        publication = client.add_exclusive_publication(SMALL_TERM, 40)
        deadline = time.monotonic() + 60
        batch_size = 50
        for start in range(0, count, batch_size):
            batch = [b"%08d" % i for i in range(start, min(start + batch_size, count))]
            while publication.offer_batch(batch) < 0:
                time.sleep(0)
                if time.monotonic() > deadline:
                    raise TimeoutError("child publisher stuck")
        done.wait(60)  # keep the publication until the parent has read everything


def test_publisher_in_another_process(aeron: Aeron, any_driver: AnyDriver) -> None:
    subscription = aeron.add_subscription(SMALL_TERM, 40)
    count = 50_000
    context = multiprocessing.get_context("spawn")
    done = context.Event()
    child = context.Process(target=_publish_in_child, args=(str(any_driver.aeron_dir), count, done))
    child.start()
    try:
        received: list[bytes] = []
        poll_until(subscription, lambda p, h: received.append(bytes(p)), lambda: len(received) >= count)
        assert received == [b"%08d" % i for i in range(count)]
    finally:
        done.set()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join(5)
    assert child.exitcode == 0
