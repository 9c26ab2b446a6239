"""A loss-free stream whose terms end in padding asks for nothing again.

Each term of a stream of same-sized messages that do not divide the term ends in a PAD frame. The sender sends
that frame's header like any other, so a receiver on a loss-free path (loopback, no faults) sees no gap at any
term end: no NAK is sent and nothing is retransmitted. A missing pad would hold the rebuild (and so the
subscriber and the sender's window) at the end of every term until a NAK round trip repaired it.
"""

from __future__ import annotations

import pytest
from udp_helpers import Collector, UdpDrivers, driver_errors, free_udp_port, publish_checked, system_counter

from driver.concurrent.system_counters import SystemCounterId
from support.clients import wait_for_image

STREAM_ID = 1002
TERM_LENGTH = 64 * 1024


# Frames of 64 bytes fill a term exactly; of 96 (the benchmarks' Move) leave a 64-byte pad, of 160 a 96-byte one,
# of 736 a pad that is its header alone.
@pytest.mark.parametrize("body", [16, 36, 100, 688])
def test_term_end_padding_needs_no_nak(udp: UdpDrivers, body: int) -> None:
    publisher_driver = udp.embedded("pub")
    subscriber_driver = udp.embedded("sub")
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length={TERM_LENGTH}"
    subscription = udp.client(subscriber_driver.aeron_dir).add_subscription(channel, STREAM_ID)
    publication = udp.client(publisher_driver.aeron_dir).add_exclusive_publication(channel, STREAM_ID)
    wait_for_image(subscription)
    collector = Collector(session_id=publication.session_id)
    frames_per_term = TERM_LENGTH // (((body + 16 + 32) + 31) & ~31)  # (a checked message: 16 bytes of its own)
    publish_checked(publication, [(subscription, collector)], frames_per_term * 5, body, timeout_s=40)
    assert collector.problems == []
    for driver in (publisher_driver, subscriber_driver):
        assert driver_errors(driver.aeron_dir) == []
    assert system_counter(subscriber_driver.aeron_dir, SystemCounterId.NAK_MESSAGES_SENT) == 0
    assert system_counter(publisher_driver.aeron_dir, SystemCounterId.RETRANSMITS_SENT) == 0
