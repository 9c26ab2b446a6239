"""The driver demo: an embedded media driver, a publisher and two subscribers over ``aeron:ipc``.

Run it with ``.venv/bin/python examples/driver_demo.py``. In a few seconds it shows:

1. what ``offer`` says before anyone subscribes (``NOT_CONNECTED``: nothing is
   queued, the message is simply not accepted);
2. messages going through, one of them larger than the MTU: it travels as several
   fragments and a ``FragmentAssembler`` hands it back whole;
3. back pressure: while the subscriber stops reading, ``offer`` fills the term
   window and then returns ``BACK_PRESSURED``; ``offer_async`` waits until the
   subscriber has caught up.

Two subscriptions read the same stream: one polls through a FragmentAssembler
(whole messages), the other is an ``async for`` over raw fragments (so it sees
the large message as its pieces).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable

from driver.client import (
    BACK_PRESSURED,
    NOT_CONNECTED,
    Aeron,
    FragmentAssembler,
    Header,
    OfferResult,
    Publication,
    Subscription,
)
from driver.core.media_driver import MediaDriver
from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG

__all__ = ["main"]

# A small term (64 KiB) so the back-pressure part fills the publication window quickly.
CHANNEL = "aeron:ipc?term-length=64k"
STREAM_ID = 1001
LARGE_MESSAGE_LENGTH = 5000  # above the 1408-byte MTU: four fragments
BURST_MESSAGE = b"x" * 1000


def describe(result: int) -> str:
    """A negative offer result by its Aeron name; a position as ``position=N``."""
    return f"position={result}" if result >= 0 else OfferResult(result).name


def show(payload: memoryview | bytes) -> str:
    if len(payload) > 40:
        return f"<{len(payload)} bytes: {bytes(payload[:12])!r}...{bytes(payload[-6:])!r}>"
    return repr(bytes(payload))


class Reader:
    """Subscriber 1: a poll loop through a FragmentAssembler, printing whole messages."""

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.assembler = FragmentAssembler(self.on_message)
        self.running = asyncio.Event()
        self.running.set()
        self.received = 0
        self.burst_received = 0
        self.large_intact = False

    def on_message(self, payload: memoryview, header: Header) -> None:
        # ``payload`` is only valid during this call: copy what you keep.
        self.received += 1
        if payload[:5].tobytes() == b"burst":
            self.burst_received += 1
            return
        if len(payload) == LARGE_MESSAGE_LENGTH:
            self.large_intact = bytes(payload) == large_message()
        print(
            f"  [reader] {show(payload)} session={header.session_id} "
            f"stream={header.stream_id} position={header.position}"
        )

    async def wait_for(self, count: int) -> None:
        """Until ``count`` messages have arrived (bounded)."""
        await wait_until(lambda: self.received >= count)

    async def run(self) -> None:
        poll = self.subscription.poll
        while not self.subscription.is_closed:
            await self.running.wait()
            if poll(self.assembler, 10) == 0:
                await asyncio.sleep(0.001)  # idle: back off instead of spinning the loop


async def raw_fragments(subscription: Subscription, counts: dict[str, int]) -> None:
    """Subscriber 2: ``async for`` over raw fragments (no reassembly): count what arrives."""
    async for payload, header in subscription:
        flags = header.flags
        counts["fragments"] += 1
        if flags & (BEGIN_FRAG_FLAG | END_FRAG_FLAG) != (BEGIN_FRAG_FLAG | END_FRAG_FLAG):
            counts["pieces"] += 1
            counts["piece_bytes"] += len(payload)


def large_message() -> bytes:
    return bytes(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i % 26] for i in range(LARGE_MESSAGE_LENGTH))


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Bounded wait for something another task does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("demo: gave up waiting")
        await asyncio.sleep(0.001)


async def exchange(aeron: Aeron) -> bool:
    publication: Publication = await aeron.add_publication_async(CHANNEL, STREAM_ID)
    print(
        f"publication: session={publication.session_id} stream={publication.stream_id} "
        f"term={publication.term_buffer_length // 1024} KiB max_payload={publication.max_payload_length} "
        f"max_message={publication.max_message_length}"
    )

    print("\n1. nobody subscribed yet")
    result = publication.offer(b"hello?")
    print(f"  offer(b'hello?') -> {describe(result)} (not queued: offer again once a subscriber is there)")
    assert result == NOT_CONNECTED

    reader_subscription = await aeron.add_subscription_async(CHANNEL, STREAM_ID)
    raw_subscription = await aeron.add_subscription_async(CHANNEL, STREAM_ID)
    await wait_until(lambda: publication.is_connected and raw_subscription.is_connected)
    print(f"  two subscriptions added; publication.is_connected={publication.is_connected}")

    reader = Reader(reader_subscription)
    counts = {"fragments": 0, "pieces": 0, "piece_bytes": 0}
    tasks = [asyncio.create_task(reader.run()), asyncio.create_task(raw_fragments(raw_subscription, counts))]
    try:
        print("\n2. messages, one of them larger than the MTU")
        messages = [b"hello, endpoint", b"second message", large_message(), b"last one"]
        for sent, message in enumerate(messages, 1):
            position = await publication.offer_async(message, timeout=5.0)
            print(f"  [publisher] offer_async({show(message)}) -> {describe(position)}")
            await reader.wait_for(sent)
        pieces = -(-LARGE_MESSAGE_LENGTH // publication.max_payload_length)
        await wait_until(lambda: counts["fragments"] == len(messages) - 1 + pieces)
        print(
            f"  [raw] async for saw {counts['fragments']} fragments: the {LARGE_MESSAGE_LENGTH}-byte message "
            f"came as {counts['pieces']} pieces ({counts['piece_bytes']} bytes); "
            f"reassembled intact: {reader.large_intact}"
        )

        print("\n3. back pressure: the reader pauses, the publisher keeps offering")
        reader.running.clear()
        accepted = 0
        result = 0
        for _ in range(10_000):  # bounded: the window is 64 KiB of 1 KiB messages
            result = publication.offer(b"burst" + BURST_MESSAGE)
            if result >= 0:
                accepted += 1
            elif result != BACK_PRESSURED:
                await asyncio.sleep(0)  # ADMIN_ACTION (term rotation): just retry
            else:
                break
        print(
            f"  accepted {accepted} x {len(BURST_MESSAGE) + 5} bytes, then offer -> {describe(result)} "
            f"(position={publication.position}, limit={publication.position_limit})"
        )
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, reader.running.set)
        started = time.monotonic()
        position = await publication.offer_async(b"burst" + BURST_MESSAGE, timeout=5.0)
        print(
            f"  offer_async waited {(time.monotonic() - started) * 1000:.0f} ms for the reader to resume "
            f"-> {describe(position)}"
        )
        await wait_until(lambda: reader.burst_received == accepted + 1)
        print(f"  reader caught up: {reader.burst_received} burst messages, nothing lost")
        return reader.large_intact
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await publication.close_async()
        await reader_subscription.close_async()
        await raw_subscription.close_async()


async def main() -> int:
    started = time.monotonic()
    with MediaDriver.launch_embedded() as driver:
        print(f"driver: embedded in {driver.aeron_dir}")
        async with await Aeron.connect_async(aeron_dir=driver.aeron_dir) as aeron:
            print(f"client: connected (client_id={aeron.client_id})")
            ok = await exchange(aeron)
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
