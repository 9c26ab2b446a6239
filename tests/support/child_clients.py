"""Client processes for system tests: targets for ``multiprocessing`` (spawn) children.

Every child connects to the driver directory it is given, reports what the
parent needs through events or a queue, and bounds every loop by count and time
so a broken driver makes it fail, never hang. Messages carry a checksum so the
parent can tell a torn message from a whole one.
"""

from __future__ import annotations

import random
import struct
import time
import zlib
from typing import TYPE_CHECKING

from driver.client import CLOSED, Aeron, BufferClaim, Publication

if TYPE_CHECKING:
    import multiprocessing.queues
    import multiprocessing.synchronize

__all__ = [
    "claim_and_hang",
    "hold_resources",
    "make_message",
    "parse_message",
    "publish_checked",
    "publish_until_closed",
]

_HEAD = struct.Struct("<iiI")  # publisher id, sequence number, body length
_CRC = struct.Struct("<I")
CHILD_TIMEOUT_S = 60.0


def make_message(publisher_id: int, seq: int, body_length: int) -> bytes:
    """A message whose content follows from (publisher, seq) and which ends in a CRC-32 of the rest."""
    fill = (publisher_id * 31 + seq) & 0xFF
    body = bytes((fill + i) & 0xFF for i in range(body_length))
    head = _HEAD.pack(publisher_id, seq, body_length) + body
    return head + _CRC.pack(zlib.crc32(head))


def parse_message(payload: bytes) -> tuple[int, int]:
    """(publisher id, seq) of a whole message; ValueError for a torn or foreign one."""
    if len(payload) < _HEAD.size + _CRC.size:
        raise ValueError(f"message of {len(payload)} bytes is too short")
    publisher_id, seq, body_length = _HEAD.unpack_from(payload, 0)
    if len(payload) != _HEAD.size + body_length + _CRC.size:
        raise ValueError(f"message length {len(payload)} does not match its body length {body_length}")
    (crc,) = _CRC.unpack_from(payload, len(payload) - _CRC.size)
    if zlib.crc32(payload[: -_CRC.size]) != crc:
        raise ValueError(f"checksum mismatch in message {publisher_id}/{seq}")
    if payload != make_message(publisher_id, seq, body_length):
        raise ValueError(f"content of message {publisher_id}/{seq} is not what was sent")
    return publisher_id, seq


def _offer(publication: Publication, message: bytes, deadline: float) -> None:
    while (result := publication.offer(message)) < 0:
        if result == CLOSED:
            raise RuntimeError("publication closed while publishing")
        if time.monotonic() > deadline:
            raise TimeoutError(f"offer stuck at {result}")
        time.sleep(0)


def publish_checked(
    aeron_dir: str,
    channel: str,
    stream_id: int,
    publisher_id: int,
    count: int,
    max_body: int,
    ready: multiprocessing.synchronize.Event,
    go: multiprocessing.synchronize.Event,
    done: multiprocessing.synchronize.Event,
) -> None:
    """Add a (shared) publication, signal ``ready``, wait for ``go``, publish ``count`` checked messages.

    Most messages are small; every 50th is long enough to be fragmented. The
    publication stays open until ``done`` so the parent can read everything.
    """
    rng = random.Random(publisher_id)
    with Aeron.connect(aeron_dir=aeron_dir) as client:
        publication = client.add_publication(channel, stream_id)
        ready.set()
        if not go.wait(CHILD_TIMEOUT_S):
            raise TimeoutError("never told to go")
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        for seq in range(count):
            body = rng.randrange(max_body, 3 * max_body) if seq % 50 == 49 else rng.randrange(0, max_body)
            _offer(publication, make_message(publisher_id, seq, body), deadline)
        done.wait(CHILD_TIMEOUT_S)


def claim_and_hang(
    aeron_dir: str,
    channel: str,
    stream_id: int,
    publisher_id: int,
    committed: int,
    ready: multiprocessing.synchronize.Event,
    claimed: multiprocessing.synchronize.Event,
) -> None:
    """Publish ``committed`` messages, then claim a frame, fill half of it and wait to be killed."""
    with Aeron.connect(aeron_dir=aeron_dir) as client:
        publication = client.add_publication(channel, stream_id)
        ready.set()
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        for seq in range(committed):
            _offer(publication, make_message(publisher_id, seq, 16), deadline)
        claim = BufferClaim()
        while publication.try_claim(200, claim) < 0:
            if time.monotonic() > deadline:
                raise TimeoutError("try_claim stuck")
            time.sleep(0)
        claim.buffer[:100] = b"\xee" * 100
        claimed.set()
        for _ in range(int(CHILD_TIMEOUT_S * 10)):  # the parent SIGKILLs us here, before the commit
            time.sleep(0.1)
        claim.abort()


def hold_resources(
    aeron_dir: str,
    channel: str,
    stream_id: int,
    report: multiprocessing.queues.Queue[dict[str, object]],
) -> None:
    """Take a publication, a subscription and a counter, publish one message, report ids, wait to be killed."""
    with Aeron.connect(aeron_dir=aeron_dir) as client:
        publication = client.add_exclusive_publication(channel, stream_id)
        subscription = client.add_subscription(channel, stream_id + 1)
        counter = client.add_counter(4242, b"held", "held by a doomed client")
        _offer(publication, b"from a doomed client", time.monotonic() + CHILD_TIMEOUT_S)
        report.put(
            {
                "client_id": client.client_id,
                "publication_registration_id": publication.registration_id,
                "session_id": publication.session_id,
                "log_file": str(publication.log_buffers.path),
                "subscription_registration_id": subscription.registration_id,
                "counter_id": counter.id,
            }
        )
        for _ in range(int(CHILD_TIMEOUT_S * 10)):
            time.sleep(0.1)


def publish_until_closed(aeron_dir: str, channel: str, stream_id: int, driver_timeout_ms: int) -> None:
    """Publish until the publication reports CLOSED (the driver died); exit 0 then, 3 if it never does."""
    with Aeron.connect(aeron_dir=aeron_dir, driver_timeout_ms=driver_timeout_ms, error_handler=lambda e: None) as c:
        publication = c.add_publication(channel, stream_id)
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        seq = 0
        while time.monotonic() < deadline:
            result = publication.offer(make_message(0, seq, 8))
            if result == CLOSED:
                return
            if result >= 0:
                seq += 1
            time.sleep(0.001)
    raise SystemExit(3)
