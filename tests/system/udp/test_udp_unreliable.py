"""``reliable=false`` is a subscription's choice, as in Aeron: one receive endpoint carries a reliable stream and an
unreliable one side by side, and under loss the first is repaired while the second pads over what was lost."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from udp_helpers import (
    Collector,
    UdpDrivers,
    free_udp_port,
    make_message,
    offer_retrying,
    parse_message,
    system_counter,
)

from driver.concurrent.system_counters import SystemCounterId
from support.clients import wait_for_image
from support.waiting import WaitTimeoutError, execute_until

STREAM_ID = 3003
RELIABLE_SESSION, UNRELIABLE_SESSION = 0x1000_0001, 0x1000_0002
COUNT = 400


def test_one_endpoint_carries_a_reliable_and_an_unreliable_stream_under_loss(udp: UdpDrivers) -> None:
    publisher_driver = udp.embedded("pub")
    subscriber_driver = udp.embedded("sub", receive_loss_rate=0.05, receive_fault_seed=41)
    subscriber = udp.client(subscriber_driver.aeron_dir)
    publisher = udp.client(publisher_driver.aeron_dir)
    endpoint = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    # The reliable subscription comes first and so makes the endpoint: the unreliable one must not inherit its mode.
    reliable = subscriber.add_subscription(f"{endpoint}|session-id={RELIABLE_SESSION}", STREAM_ID)
    unreliable = subscriber.add_subscription(f"{endpoint}|session-id={UNRELIABLE_SESSION}|reliable=false", STREAM_ID)
    publications = [
        publisher.add_exclusive_publication(f"{endpoint}|term-length=65536|session-id={session}", STREAM_ID)
        for session in (RELIABLE_SESSION, UNRELIABLE_SESSION)
    ]
    for subscription in (reliable, unreliable):
        wait_for_image(subscription)
    collector = Collector(session_id=RELIABLE_SESSION)
    skipped: list[int] = []

    def on_unreliable(buffer: memoryview, header: Any) -> None:
        skipped.append(parse_message(bytes(buffer))[1])

    def drain() -> None:
        collector.poll(reliable)
        unreliable.poll(on_unreliable, 100)

    fills_before = system_counter(subscriber_driver.aeron_dir, SystemCounterId.LOSS_GAP_FILLS)
    deadline = time.monotonic() + 60
    for seq in range(COUNT):
        message = make_message(0, seq, 200)
        for publication in publications:
            offer_retrying(publication, message, drain, deadline, f"offer of {seq}")
    execute_until(
        lambda: len(collector.seqs) >= COUNT or collector.problems,
        drain,
        timeout_s=max(1.0, deadline - time.monotonic()),
        max_iterations=10_000_000,
        interval_s=0.0001,
        description="every reliable message",
    )
    # What is still to come on the unreliable stream comes now or never (its last message may be lost): drain a while.
    with contextlib.suppress(WaitTimeoutError):
        execute_until(
            lambda: skipped and skipped[-1] == COUNT - 1,
            drain,
            timeout_s=2,
            max_iterations=1_000_000,
            interval_s=0.001,
            description="the unreliable stream's tail",
        )
    collector.check(COUNT)  # repaired: every message, once, in order
    assert skipped == sorted(set(skipped)), "the unreliable stream delivered out of order or twice"
    assert COUNT // 2 < len(skipped) < COUNT, "the unreliable stream lost nothing, or nearly everything"
    assert system_counter(subscriber_driver.aeron_dir, SystemCounterId.LOSS_GAP_FILLS) > fills_before
    assert udp.errors.seen == []
