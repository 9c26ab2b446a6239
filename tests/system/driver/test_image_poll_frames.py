"""``Image.poll_frames`` hands a handler one poll's frames, with any further arguments it is given.

A native handler (the end point codec's dispatch) takes what it needs besides the frames as arguments, so no
Python function of ours wraps it per poll; the frames it is handed, and the position the image moves to, are the
same with or without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from driver.client import Aeron
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from support.clients import offer_all, wait_for_image

CHANNEL = "aeron:ipc?term-length=64k"
HEADER = 32


def test_poll_frames_passes_its_arguments_on_and_consumes_the_frames(aeron_dir: Path) -> None:
    context = DriverContext.from_env({}, aeron_dir=aeron_dir, threading_mode="SHARED")
    with MediaDriver.launch(context), Aeron.connect(aeron_dir=aeron_dir) as client:
        subscription = client.add_subscription(CHANNEL, 71)
        publication = client.add_publication(CHANNEL, 71)
        (image,) = wait_for_image(subscription)
        sent = [b"first", b"second message", b"third"]
        offer_all(publication, sent, lambda: None)
        calls: list[tuple[Any, ...]] = []
        payloads: list[bytes] = []

        def handler(view: memoryview, frames: list[tuple[int, int, int]], *extra: Any) -> None:
            calls.append(extra)
            payloads.extend(bytes(view[offset + HEADER : offset + length]) for offset, length, _flags in frames)

        marker = object()
        assert image.poll_frames(handler, 2, ("inbox", marker)) == 2
        assert image.poll_frames(handler, 10) == 1  # the rest, with no further arguments
        assert image.poll_frames(handler, 10, ("inbox", marker)) == 0  # nothing new: no call
        assert payloads == sent
        assert calls == [("inbox", marker), ()]
        assert image.position == publication.position


def test_a_poll_that_reaches_a_terms_end_reads_on_into_the_next_term(aeron_dir: Path) -> None:
    """The messages after a term's end are read by the same poll, within its limit: a host that polls only the
    images its driver wrote to would not poll this one again until more data came."""
    context = DriverContext.from_env({}, aeron_dir=aeron_dir, threading_mode="SHARED")
    with MediaDriver.launch(context), Aeron.connect(aeron_dir=aeron_dir) as client:
        subscription = client.add_subscription(CHANNEL, 72)
        publication = client.add_publication(CHANNEL, 72)
        (image,) = wait_for_image(subscription)
        message = bytes(1000)
        filler = [message] * (64 * 1024 // 1056 - 2)  # up to two messages short of the term's end
        offer_all(publication, filler, lambda: None)
        frames_read: list[int] = []

        def count(view: memoryview, frames: list[tuple[int, int, int]]) -> None:
            frames_read.append(len(frames))

        while image.poll_frames(count, 64):
            pass
        assert image.position == publication.position
        tail = [b"before the end %d" % i for i in range(2)] + [message, message, b"after the end"]
        offer_all(publication, tail, lambda: None)
        assert publication.position > 64 * 1024  # the messages go on in the second term
        frames_read.clear()
        assert image.poll_frames(count, 64) == len(tail)
        assert len(frames_read) == 2  # one call per term
        assert image.position == publication.position
        payloads: list[bytes] = []
        offer_all(publication, [b"one more"], lambda: None)
        assert image.poll_payloads(lambda payload, flags: payloads.append(bytes(payload)), 64) == 1
        assert payloads == [b"one more"]


def test_poll_payloads_hands_each_payload_on_and_a_failing_one_to_the_error_handler(aeron_dir: Path) -> None:
    """One payload's handler failing is that payload's alone: the others are handed on and every frame consumed."""
    context = DriverContext.from_env({}, aeron_dir=aeron_dir, threading_mode="SHARED")
    errors: list[BaseException] = []
    with MediaDriver.launch(context), Aeron.connect(aeron_dir=aeron_dir, error_handler=errors.append) as client:
        subscription = client.add_subscription(CHANNEL, 73)
        publication = client.add_publication(CHANNEL, 73)
        (image,) = wait_for_image(subscription)
        sent = [b"first", b"bad", b"third"]
        offer_all(publication, sent, lambda: None)
        payloads: list[bytes] = []

        def handler(payload: memoryview, flags: int) -> None:
            if bytes(payload) == b"bad":
                raise ValueError("bad payload")
            payloads.append(bytes(payload))

        assert image.poll_payloads(handler, 10) == 3
        assert payloads == [b"first", b"third"]
        assert [str(error) for error in errors] == ["bad payload"]
        assert image.position == publication.position
