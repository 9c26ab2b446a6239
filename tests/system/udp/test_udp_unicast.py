"""Unicast over loopback between two of our drivers, over a lossy, reordering, duplicating path.

The publisher's driver and the subscriber's driver have their own directories
(embedded in this process, or real ``python -m driver`` processes); faults are
injected on the receiving driver's sockets, or on the sending driver's. Every
message carries its sequence number and a checksum: the subscriber must see each
exactly once, whole and in order, whatever the path did to the datagrams.
"""

from __future__ import annotations

import pytest
from udp_helpers import Collector, UdpDrivers, driver_errors, free_udp_port, publish_checked, system_counter

from driver.concurrent.system_counters import SystemCounterId
from support.clients import wait_for_image

SMALL_BODY = 32 - 16  # 12-byte head + body + 4-byte CRC = 32 bytes
LARGE_BODY = 64 * 1024 - 16  # 64 KiB: fragmented into ~47 MTU-sized frames
STREAM_ID = 1001

# Message counts keep every case to a second or two on a 2-core machine (20 % loss is slow to repair).
COUNTS = {(0.01, "small"): 5000, (0.05, "small"): 4000, (0.2, "small"): 2000,
          (0.01, "large"): 32, (0.05, "large"): 20, (0.2, "large"): 8}  # fmt: skip


def _faults(rate: float, side: str) -> dict[str, object]:
    return {
        f"{side}_loss_rate": rate,
        f"{side}_reorder_rate": rate,
        f"{side}_duplicate_rate": rate,
        f"{side}_fault_seed": int(rate * 1000) + 17,
    }


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("side", ["receive", "send"])
@pytest.mark.parametrize("rate", [0.01, 0.05, 0.2])
def test_unicast_exactly_once_in_order_under_faults(udp: UdpDrivers, rate: float, side: str, size: str) -> None:
    faulty = _faults(rate, side)
    publisher_driver = udp.embedded("pub", **(faulty if side == "send" else {}))
    subscriber_driver = udp.embedded("sub", **(faulty if side == "receive" else {}))
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    subscription = udp.client(subscriber_driver.aeron_dir).add_subscription(channel, STREAM_ID)
    publication = udp.client(publisher_driver.aeron_dir).add_exclusive_publication(channel, STREAM_ID)
    wait_for_image(subscription)
    collector = Collector(session_id=publication.session_id)
    count = COUNTS[(rate, size)]
    publish_checked(
        publication, [(subscription, collector)], count, SMALL_BODY if size == "small" else LARGE_BODY, timeout_s=40
    )
    for driver in (publisher_driver, subscriber_driver):
        assert driver_errors(driver.aeron_dir) == []
    # The faults really happened and the loss was repaired by NAKs and retransmits.
    if size == "large" or rate >= 0.05:
        assert system_counter(subscriber_driver.aeron_dir, SystemCounterId.NAK_MESSAGES_SENT) > 0
        assert system_counter(publisher_driver.aeron_dir, SystemCounterId.RETRANSMITS_SENT) > 0
    assert udp.errors.seen == []


@pytest.mark.process
@pytest.mark.parametrize("size", ["small", "large"])
def test_unicast_between_driver_processes_with_faults_on_both_sides(udp: UdpDrivers, size: str) -> None:
    publisher_driver = udp.process("pub", **_faults(0.05, "send"))
    subscriber_driver = udp.process("sub", **_faults(0.05, "receive"))
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    subscription = udp.client(subscriber_driver.aeron_dir).add_subscription(channel, STREAM_ID)
    publication = udp.client(publisher_driver.aeron_dir).add_publication(channel, STREAM_ID)
    wait_for_image(subscription)
    collector = Collector(session_id=publication.session_id)
    count, body = (3000, SMALL_BODY) if size == "small" else (16, LARGE_BODY)
    publish_checked(publication, [(subscription, collector)], count, body, timeout_s=40)
    assert driver_errors(publisher_driver.aeron_dir) == []
    assert driver_errors(subscriber_driver.aeron_dir) == []
    assert system_counter(subscriber_driver.aeron_dir, SystemCounterId.NAK_MESSAGES_SENT) > 0
