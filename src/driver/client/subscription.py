"""Subscriptions and their images: reading what publications appended (Aeron 1.15.1 semantics).

Theory of operation
-------------------
A :class:`Subscription` is the client's interest in (channel, stream). The
driver tells the client about each publication session that matches with
ON_AVAILABLE_IMAGE: a log file to map and the id of a *subscriber position*
counter. That pair is an :class:`Image`. Polling an image reads committed frames
from the term its position points into, hands each payload to the handler as a
zero-copy memoryview, and then stores the new position (ordered) so the driver
can let the publisher advance. A poll never crosses a term boundary; the next
poll continues in the next term.

The subscription keeps its images in a tuple that the conductor replaces (never
mutates) when images come and go, so ``poll`` on a user thread needs no lock.
Images that go away are closed at once (``poll`` returns 0), but their mapping
is unmapped only after the client's resource linger, so a poll racing with the
removal never touches unmapped memory.

Payload memoryviews are valid during the handler call; copy what you keep.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol, Self

from driver.client.aio import await_request, subscription_fragments
from driver.client.requests import PendingRequest, RequestService
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersReader
from driver.concurrent.system_counters import (
    CHANNEL_STATUS_ACTIVE,
    LOCAL_SOCKET_ADDRESS_TYPE_ID,
    local_socket_address_of,
)
from driver.logbuffer.descriptor import (
    LOG_END_OF_STREAM_POSITION_OFFSET,
    initial_term_id,
    mtu_length,
    position_bits_to_shift,
)
from driver.logbuffer.frame import FRAME_ALIGNMENT, HEADER_LENGTH
from driver.logbuffer.header import Header
from driver.logbuffer.log_buffers import LogBuffers
from driver.logbuffer.reader import (
    ControlledAction,
    ControlledFragmentHandler,
    FragmentHandler,
    controlled_read,
    read,
)
from driver.logbuffer.scanner import scan_for_availability, scan_frames

__all__ = [
    "AvailableImageHandler",
    "ControlledAction",
    "ControlledFragmentHandler",
    "FragmentHandler",
    "Image",
    "Subscription",
    "SubscriptionOwner",
    "UnavailableImageHandler",
]

ErrorHandler = Callable[[BaseException], object]
AvailableImageHandler = Callable[["Image"], object]
UnavailableImageHandler = Callable[["Image"], object]

_EMPTY: tuple[Image, ...] = ()


class Image:
    """One publisher session as seen by one subscription."""

    __slots__ = (
        "_error_handler",
        "_final_position",
        "_header",
        "_is_closed",
        "_is_eos",
        "_log",
        "_mask",
        "_meta",
        "_position",
        "_position_bits_to_shift",
        "_term_views",
        "_terms",
        "correlation_id",
        "initial_term_id",
        "join_position",
        "session_id",
        "source_identity",
        "subscriber_position_id",
        "subscription",
        "term_buffer_length",
    )

    def __init__(
        self,
        subscription: Subscription,
        session_id: int,
        subscriber_position: AtomicBuffer,
        subscriber_position_id: int,
        log: LogBuffers,
        error_handler: ErrorHandler,
        source_identity: str,
        correlation_id: int,
    ) -> None:
        self.subscription = subscription
        self.session_id = session_id
        self.subscriber_position_id = subscriber_position_id
        self.source_identity = source_identity
        self.correlation_id = correlation_id
        self._position = subscriber_position
        self._log = log
        self._meta = log.metadata
        self._error_handler = error_handler
        self._terms = tuple(log.terms)
        self._term_views = tuple(log.term_views)
        term_length = log.term_length
        self.term_buffer_length = term_length
        self._mask = term_length - 1
        self._position_bits_to_shift = position_bits_to_shift(term_length)
        self.initial_term_id = initial_term_id(log.metadata)
        self._header = Header(self.initial_term_id, self._position_bits_to_shift, self)
        self.join_position = subscriber_position.get_long_volatile(0)
        self._final_position = self.join_position
        self._is_closed = False
        self._is_eos = False

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def position_bits_to_shift(self) -> int:
        return self._position_bits_to_shift

    @property
    def mtu_length(self) -> int:
        return mtu_length(self._meta)

    @property
    def log_buffers(self) -> LogBuffers:
        return self._log

    @property
    def position(self) -> int:
        """Position this subscriber has consumed up to (its final position once closed)."""
        if self._is_closed:
            return self._final_position
        return self._position.get_long_volatile(0)

    @position.setter
    def position(self, new_position: int) -> None:
        """Move the position forward within the current term (frame aligned), e.g. to skip data."""
        if self._is_closed:
            return
        current = self._position.get_long_volatile(0)
        limit = (current - (current & self._mask)) + self._mask + 1
        if new_position < current or new_position > limit:
            raise ValueError(f"{new_position} new position out of range {current}-{limit}")
        if new_position & (FRAME_ALIGNMENT - 1):
            raise ValueError(f"{new_position} new position not aligned to {FRAME_ALIGNMENT}")
        self._position.put_long_ordered(0, new_position)

    @property
    def ready_entry(self) -> tuple[AtomicBuffer, int, tuple[AtomicBuffer, ...], int, int]:
        """What a :class:`~driver.concurrent._watches.FrameWatch` needs to check many images at once for data."""
        return (self._position, 0, self._terms, self._position_bits_to_shift, self._mask)

    @property
    def is_end_of_stream(self) -> bool:
        """True once the publisher closed and everything it sent has been consumed."""
        if self._is_closed:
            return self._is_eos
        return self._position.get_long_volatile(0) >= self._meta.get_long_volatile(LOG_END_OF_STREAM_POSITION_OFFSET)

    def poll(self, handler: FragmentHandler, fragment_limit: int = 10) -> int:
        """Deliver up to ``fragment_limit`` fragments to ``handler(payload, header)``; returns how many.

        A handler exception goes to the client's error handler; the fragment that
        raised counts as consumed (as in Aeron).
        """
        if self._is_closed:
            return 0
        counter = self._position
        position = counter.get_long(0)
        index = (position >> self._position_bits_to_shift) % 3
        offset = position & self._mask
        fragments, new_offset = read(
            self._terms[index],
            offset,
            handler,
            fragment_limit,
            self._header,
            self._error_handler,
            self._term_views[index],
        )
        if new_offset > offset:
            counter.put_long_ordered(0, position + new_offset - offset)
        return fragments

    def poll_payloads(self, handler: Callable[[memoryview, int], object], fragment_limit: int = 64) -> int:
        """Like :meth:`poll` for handlers that need only the payload and the frame flags: ``handler(payload, flags)``.

        The term is scanned natively in one call and no Header is kept up to date,
        which makes this the cheapest way to drain an image. Fragments are not
        reassembled (``flags`` tells BEGIN/END); a handler exception goes to the
        error handler and the fragment counts as consumed.
        """
        if self._is_closed:
            return 0
        counter = self._position
        read = 0
        # poll_frames's loop written out: delegating to it with a per-term handler of ours cost ~180 ns a poll
        # (+9% a payload in polls of 8), and a client's unreliable snapshots come one a poll.
        for _ in range(2):  # (at a term's end, on into the next term: see poll_frames)
            position = counter.get_long(0)
            index = (position >> self._position_bits_to_shift) % 3
            offset = position & self._mask
            end, frames = scan_frames(self._terms[index], offset, fragment_limit - read)
            if end == offset:
                break
            view = self._term_views[index]
            for frame_offset, length, flags in frames:
                try:
                    handler(view[frame_offset + HEADER_LENGTH : frame_offset + length], flags)
                except Exception as exc:
                    self._error_handler(exc)
            counter.put_long_ordered(0, position + end - offset)
            read += len(frames)
            if end <= self._mask or read >= fragment_limit:
                break
        return read

    def poll_frames(
        self,
        handler: Callable[..., object],
        fragment_limit: int = 64,
        args: tuple[Any, ...] = (),
    ) -> int:
        """Like :meth:`poll_payloads`, with one call per poll: ``handler(term_view, frames, *args)``, ``frames`` being
        ``(frame offset, frame length, flags)`` of each committed DATA frame read (a payload is
        ``term_view[offset + 32 : offset + length]``), for a handler that walks them natively (``args``: what else
        it takes, so a native handler needs no Python call of its own around it). A handler exception goes to the
        error handler and the frames count as consumed.

        A poll that reaches the end of a term goes on into the next one (one call of ``handler`` per term) while the
        limit allows: what follows a term's end is not left for a later poll, which a host polling only the images
        its driver wrote to (the end point poller) would make only once more data came."""
        if self._is_closed:
            return 0
        counter = self._position
        read = 0
        for _ in range(2):
            position = counter.get_long(0)
            index = (position >> self._position_bits_to_shift) % 3
            offset = position & self._mask
            end, frames = scan_frames(self._terms[index], offset, fragment_limit - read)
            if end == offset:
                break
            try:
                handler(self._term_views[index], frames, *args)
            except Exception as exc:
                self._error_handler(exc)
            counter.put_long_ordered(0, position + end - offset)
            read += len(frames)
            if end <= self._mask or read >= fragment_limit:
                break
        return read

    def controlled_poll(self, handler: ControlledFragmentHandler, fragment_limit: int = 10) -> int:
        """Like :meth:`poll`, but ``handler`` returns a :class:`ControlledAction` (ABORT, BREAK, COMMIT, CONTINUE)."""
        if self._is_closed:
            return 0
        counter = self._position
        position = counter.get_long(0)
        index = (position >> self._position_bits_to_shift) % 3
        offset = position & self._mask

        def commit(committed_offset: int) -> None:
            counter.put_long_ordered(0, position + committed_offset - offset)

        fragments, new_offset = controlled_read(
            self._terms[index],
            offset,
            handler,
            fragment_limit,
            self._header,
            commit,
            self._error_handler,
            self._term_views[index],
        )
        if new_offset > offset:
            counter.put_long_ordered(0, position + new_offset - offset)
        return fragments

    def block_poll(self, handler: Callable[[memoryview, int], object], block_length_limit: int) -> int:
        """Hand ``handler(frames, position)`` the raw committed frames from this position, whole, up to
        ``block_length_limit`` bytes and never past the end of the term; returns the block's length.

        The block is the term's own bytes (headers, padding and all), as an archive
        records them; a padding frame longer than the limit comes alone, whole. The
        position moves past the block only when the handler returns, so a handler that
        raises (a failed write) loses nothing.
        """
        if self._is_closed:
            return 0
        counter = self._position
        position = counter.get_long(0)
        index = (position >> self._position_bits_to_shift) % 3
        offset = position & self._mask
        limit = min(block_length_limit, self.term_buffer_length - offset)
        available, padding = scan_for_availability(self._terms[index], offset, limit)
        length = available + padding
        if length > limit and padding and available > HEADER_LENGTH:
            length = available - HEADER_LENGTH  # the frames before the pad now, the pad on its own next time
        if length == 0:
            return 0
        handler(self._term_views[index][offset : offset + length], position)
        counter.put_long_ordered(0, position + length)
        return length

    def _consume_to(self, position: int) -> None:
        """Move the position forward to ``position`` (end of a fragment already delivered)."""
        if not self._is_closed and position > self._position.get_long(0):
            self._position.put_long_ordered(0, position)

    def _close(self) -> None:
        """Stop delivering; called by the conductor when the driver says the image went away."""
        if not self._is_closed:
            final = self._position.get_long_volatile(0)
            self._final_position = final
            self._is_eos = final >= self._meta.get_long_volatile(LOG_END_OF_STREAM_POSITION_OFFSET)
            self._is_closed = True

    def __repr__(self) -> str:
        return (
            f"Image(correlation_id={self.correlation_id}, session_id={self.session_id}, "
            f"join_position={self.join_position}, source_identity={self.source_identity!r}, "
            f"closed={self._is_closed})"
        )


class SubscriptionOwner(RequestService, Protocol):
    """What a subscription needs from the client conductor that made it (which implements it)."""

    def channel_status(self, channel_status_id: int) -> int: ...

    @property
    def counters_reader(self) -> CountersReader: ...

    def release_subscription(self, subscription: Subscription) -> None: ...

    def begin_release(self, resource: Subscription) -> PendingRequest | None: ...


class Subscription:
    """Interest in a (channel, stream): polls every matching image round robin."""

    __slots__ = (
        "_conductor",
        "_images",
        "_is_closed",
        "_round_robin_index",
        "available_image_handler",
        "channel",
        "channel_status_id",
        "registration_id",
        "stream_id",
        "unavailable_image_handler",
    )

    def __init__(
        self,
        conductor: SubscriptionOwner,
        channel: str,
        stream_id: int,
        registration_id: int,
        available_image_handler: AvailableImageHandler | None = None,
        unavailable_image_handler: UnavailableImageHandler | None = None,
    ) -> None:
        self._conductor = conductor
        self.channel = channel
        self.stream_id = stream_id
        self.registration_id = registration_id
        self.available_image_handler = available_image_handler
        self.unavailable_image_handler = unavailable_image_handler
        self.channel_status_id = 0
        self._images: tuple[Image, ...] = _EMPTY
        self._is_closed = False
        self._round_robin_index = 0

    # ------------------------------------------------------------------ state

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def images(self) -> tuple[Image, ...]:
        """A snapshot of the current images."""
        return self._images

    @property
    def image_count(self) -> int:
        return len(self._images)

    @property
    def is_connected(self) -> bool:
        """True when at least one image is there and open."""
        return any(not image.is_closed for image in self._images)

    @property
    def channel_status(self) -> int:
        if self._is_closed:
            return -1
        return self._conductor.channel_status(self.channel_status_id)

    def local_socket_addresses(self) -> list[str]:
        """The ``ip:port`` its driver bound for it, when its channel asked for port 0 (Aeron's
        ``localSocketAddresses``); empty otherwise, before it is active, or from a driver that does not say."""
        status_id = self.channel_status_id
        if self._is_closed or status_id <= 0 or self.channel_status != CHANNEL_STATUS_ACTIVE:
            return []
        reader = self._conductor.counters_reader
        found: list[str] = []

        def visit(counter_id: int, type_id: int, key: bytes, label: str) -> None:
            if type_id != LOCAL_SOCKET_ADDRESS_TYPE_ID:
                return
            owner, address = local_socket_address_of(key)
            if owner == status_id and reader.get_counter_value(counter_id) == CHANNEL_STATUS_ACTIVE:
                found.append(address)

        reader.for_each(visit)
        return found

    def image_by_session_id(self, session_id: int) -> Image | None:
        for image in self._images:
            if image.session_id == session_id:
                return image
        return None

    def __iter__(self) -> Iterator[Image]:
        return iter(self._images)

    def close(self) -> None:
        """Release the subscription (REMOVE_SUBSCRIPTION; waits, bounded, for the driver's answer)."""
        if not self._is_closed:
            self._conductor.release_subscription(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Subscription(registration_id={self.registration_id}, stream_id={self.stream_id}, "
            f"channel={self.channel!r}, images={len(self._images)}, closed={self._is_closed})"
        )

    # ------------------------------------------------------------------ data path

    def poll(self, handler: FragmentHandler, fragment_limit: int = 10) -> int:
        """Deliver up to ``fragment_limit`` fragments, spread round robin over the images."""
        images = self._images
        count = len(images)
        if count == 1:
            return images[0].poll(handler, fragment_limit)
        if count == 0:
            return 0
        start = self._round_robin_index + 1
        if start >= count:
            start = 0
        self._round_robin_index = start
        fragments = 0
        for i in range(start, count):
            fragments += images[i].poll(handler, fragment_limit - fragments)
            if fragments >= fragment_limit:
                return fragments
        for i in range(start):
            fragments += images[i].poll(handler, fragment_limit - fragments)
            if fragments >= fragment_limit:
                break
        return fragments

    def controlled_poll(self, handler: ControlledFragmentHandler, fragment_limit: int = 10) -> int:
        """Controlled variant of :meth:`poll` (see :meth:`Image.controlled_poll`)."""
        images = self._images
        count = len(images)
        if count == 0:
            return 0
        start = self._round_robin_index + 1
        if start >= count:
            start = 0
        self._round_robin_index = start
        fragments = 0
        for i in (*range(start, count), *range(start)):
            fragments += images[i].controlled_poll(handler, fragment_limit - fragments)
            if fragments >= fragment_limit:
                break
        return fragments

    def fragments(
        self,
        *,
        idle_timeout: float | None = None,
        max_idle_sleep: float = 0.001,
    ) -> AsyncIterator[tuple[memoryview, Header]]:
        """Async iterator of ``(payload, header)``; both valid until the next item is requested.

        Waits for data with a backoff (yield, then sleeps up to ``max_idle_sleep``
        seconds); cancellable; ends when the subscription closes. With
        ``idle_timeout`` it raises TimeoutError after that long without a fragment.
        """
        return subscription_fragments(self, idle_timeout=idle_timeout, max_idle_sleep=max_idle_sleep)

    def __aiter__(self) -> AsyncIterator[tuple[memoryview, Header]]:
        return self.fragments()

    async def close_async(self) -> None:
        """:meth:`close` without blocking the event loop while the driver answers."""
        request = self._conductor.begin_release(self)
        if request is not None:
            await await_request(self._conductor, request)

    # ------------------------------------------------------------------ conductor side

    def _add_image(self, image: Image) -> None:
        self._images = (*self._images, image)

    def _remove_image(self, correlation_id: int) -> Image | None:
        images = self._images
        for i, image in enumerate(images):
            if image.correlation_id == correlation_id:
                image._close()
                self._images = images[:i] + images[i + 1 :]
                return image
        return None

    def _internal_close(self) -> tuple[Image, ...]:
        """Close the subscription and its images; returns the images for the conductor to release."""
        self._is_closed = True
        images = self._images
        self._images = _EMPTY
        for image in images:
            image._close()
        return images
