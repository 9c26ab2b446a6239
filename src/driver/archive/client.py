"""Archive clients for other processes: Aeron Archive's control protocol over a control and a response channel.

The clients speak the SBE control protocol (:mod:`driver.archive.control`), so
they work with our archive and with Aeron's own (1.15.1 onwards). Answers are
matched by correlation id (unique per driver), so several clients may share a
response channel and stream. Every request waits at most the client's timeout
(a listing: at most the timeout between two of its messages); an error answer
is raised as a typed error.

The request/answer logic is sans-IO (:mod:`driver.archive.exchange`): the two
clients differ only in how they wait.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from driver.archive import control
from driver.archive.catalog import RecordingDescriptor
from driver.archive.context import ArchiveContext
from driver.archive.control import ProtocolError
from driver.archive.errors import (
    ArchiveError,
    ArchiveTimeoutError,
)
from driver.archive.exchange import Exchange, request_for, result_of
from driver.archive.operations import ALL, ArchiveOperations, descriptors
from driver.archive.replayer import FOLLOW
from driver.client.aeron import Aeron
from driver.client.aio import PollBackoff
from driver.client.publication import CLOSED, MAX_POSITION_EXCEEDED
from driver.client.subscription import Subscription
from driver.logbuffer.descriptor import int32
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.header import Header

__all__ = [
    "ArchiveClient",
    "AsyncArchiveClient",
    "RecordingEvent",
    "RecordingEvents",
    "replay_channel",
    "replay_session_id",
]

DEFAULT_RESPONSE_STREAM_ID = 20
MAX_PENDING: Final = 64
"""Requests one client may have unanswered at once (an async client's concurrent calls)."""


class _Channel:
    """The sans-wait part shared by both clients: encode, offer once, poll answers into their exchanges."""

    def __init__(
        self,
        aeron: Aeron,
        context: ArchiveContext,
        response_channel: str,
        response_stream_id: int,
        timeout: float,
    ) -> None:
        self.aeron = aeron
        self.context = context
        self.timeout = timeout
        self.response_channel = response_channel
        self.response_stream_id = response_stream_id
        self.session_id = 0
        self._exchanges: dict[int, Exchange] = {}
        """Our requests still unanswered: answers to other clients on a shared stream are skipped."""
        self._assembler = FragmentAssembler(self._on_response)
        self.responses: Subscription | None = None
        self.publication: Any = None
        self.malformed_responses = 0
        self._progress = False

    def _on_response(self, payload: memoryview, header: Header) -> None:
        try:
            message = control.decode(payload)
        except ProtocolError:
            self.malformed_responses += 1
            return
        correlation_id = getattr(message, "correlation_id", None)
        exchange = self._exchanges.get(correlation_id) if isinstance(correlation_id, int) else None
        if exchange is not None and exchange.on_message(message):
            self._progress = True

    def begin(self, operation: str, args: tuple[Any, ...]) -> tuple[Exchange | None, bytes]:
        if len(self._exchanges) >= MAX_PENDING:
            raise ArchiveError(f"{operation}: {MAX_PENDING} requests already wait for the archive")
        correlation_id = self.aeron.next_correlation_id()
        message, expected = request_for(operation, args, self.session_id, correlation_id)
        if operation == "close_session":
            return None, message
        exchange = Exchange(correlation_id, operation, expected)
        self._exchanges[correlation_id] = exchange
        return exchange, message

    def forget(self, exchange: Exchange | None) -> None:
        if exchange is not None:
            self._exchanges.pop(exchange.correlation_id, None)

    def try_offer(self, message: bytes, operation: str) -> bool:
        result = self.publication.offer(message)
        if result in (CLOSED, MAX_POSITION_EXCEEDED):
            raise ArchiveError(f"{operation}: control publication refused the request ({result})")
        return bool(result > 0)

    def poll(self) -> bool:
        """Read answers; True when one of ours made progress."""
        self._progress = False
        if self.responses is not None:
            self.responses.poll(self._assembler, 16)
        return self._progress

    def release(self, owns_aeron: bool) -> None:
        """Close the control publication and response subscription (and the Aeron client, if ours)."""
        for resource in (self.publication, self.responses):
            if resource is not None:
                resource.close()
        self.publication = self.responses = None
        self.session_id = 0
        self._exchanges.clear()
        if owns_aeron:
            self.aeron.close()

    def timed_out(self, operation: str) -> ArchiveTimeoutError:
        return ArchiveTimeoutError(
            f"{operation}: no answer from the archive on {self.context.control_channel} "
            f"stream {self.context.control_stream_id} within {self.timeout}s"
        )


def _open_context(context: ArchiveContext | None, overrides: dict[str, Any]) -> ArchiveContext:
    return (context or ArchiveContext.from_env(**overrides)).conclude()


class ArchiveClient(ArchiveOperations):
    """A blocking archive client (the operations of :class:`ArchiveOperations`). Create with :meth:`connect`;
    close when done (or use ``with``)."""

    def __init__(self, channel: _Channel, owns_aeron: bool) -> None:
        self._c = channel
        self._owns_aeron = owns_aeron

    @classmethod
    def connect(
        cls,
        aeron: Aeron | None = None,
        context: ArchiveContext | None = None,
        *,
        response_channel: str | None = None,
        response_stream_id: int | None = None,
        timeout: float = 10.0,
        **overrides: Any,
    ) -> ArchiveClient:
        """Connect to the archive of ``context`` (from the environment, then ``overrides``).

        The answers come on ``response_channel``/``response_stream_id`` (default: the context's control response
        channel). With no ``aeron`` a client of the context's driver is made and closed with this one.
        """
        context = _open_context(context, overrides)
        response_channel = response_channel or context.control_response_channel
        response_stream_id = context.control_response_stream_id if response_stream_id is None else response_stream_id
        owns = aeron is None
        client = aeron if aeron is not None else Aeron.connect(aeron_dir=context.aeron_dir)
        channel = _Channel(client, context, response_channel, response_stream_id, timeout)
        self = cls(channel, owns)
        try:
            channel.responses = client.add_subscription(response_channel, response_stream_id)
            channel.publication = client.add_exclusive_publication(context.control_channel, context.control_stream_id)
            channel.session_id = int(self._request("connect", response_channel, response_stream_id))
        except BaseException:
            self.close()
            raise
        return self

    @property
    def control_session_id(self) -> int:
        return self._c.session_id

    def _request(self, operation: str, *args: Any) -> Any:
        c = self._c
        exchange, message = c.begin(operation, args)
        try:
            deadline = time.monotonic() + c.timeout
            sleep = 0.0
            while not c.try_offer(message, operation):
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                sleep = min(sleep * 2 or 0.00005, 0.001)
                time.sleep(sleep)
            if exchange is None:
                return None
            sleep = 0.0
            while not exchange.done:
                if c.poll():
                    deadline = time.monotonic() + c.timeout
                    sleep = 0.0
                    continue
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                sleep = min(sleep * 2 or 0.00005, 0.001)
                time.sleep(sleep)
            return result_of(exchange)
        finally:
            c.forget(exchange)

    def recording(self, recording_id: int) -> RecordingDescriptor:
        return _live(super().recording(recording_id), self.recording_position)

    def recordings(self, from_id: int = 0, count: int = ALL) -> list[RecordingDescriptor]:
        return [_live(d, self.recording_position) for d in super().recordings(from_id, count)]

    def recordings_for_uri(
        self, channel_fragment: str, stream_id: int | None = None, from_id: int = 0, count: int = ALL
    ) -> list[RecordingDescriptor]:
        if stream_id is None:  # the protocol always matches a stream: filter a full listing here instead
            found = [d for d in super().recordings(from_id, ALL) if channel_fragment in d.original_channel]
        else:
            found = super().recordings_for_uri(channel_fragment, stream_id, from_id, count)
        return [_live(d, self.recording_position) for d in found[:count]]

    def find_last_matching_recording(
        self, min_recording_id: int, channel_fragment: str, stream_id: int, session_id: int
    ) -> int | None:
        """The highest recording id from ``min_recording_id`` on with this session, stream and channel fragment."""
        value = self._request("find_last_matching_recording", min_recording_id, session_id, stream_id, channel_fragment)
        return None if value is None else int(value)

    def keep_alive(self) -> None:
        self._request("keep_alive")

    def replay_subscription(self, channel: str, stream_id: int, replay_id: int) -> Subscription:
        """Subscribe to one replay: ``channel`` with ``session-id`` set to the replay's image session id."""
        return self._c.aeron.add_subscription(replay_channel(channel, replay_id), stream_id)

    def recording_events(self) -> RecordingEvents:
        return RecordingEvents(self._c.aeron, self._c.context)

    def close(self) -> None:
        if self._c.publication is not None and self._c.session_id:
            try:
                self._request("close_session")
            except ArchiveError:
                pass
        self._c.release(self._owns_aeron)
        self._owns_aeron = False

    def __enter__(self) -> ArchiveClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _live(d: RecordingDescriptor, position_of: Callable[[int], int | None]) -> RecordingDescriptor:
    """An active recording's descriptor with its recorded position asked for (the descriptor carries none)."""
    if not d.is_active:
        return d
    position = position_of(d.recording_id)
    return d if position is None else _with_position(d, position)


def _with_position(d: RecordingDescriptor, position: int) -> RecordingDescriptor:
    import attrs

    return attrs.evolve(d, recorded_position=position)


class AsyncArchiveClient:
    """The same operations for asyncio/trio code: awaiting never blocks the event loop."""

    def __init__(self, channel: _Channel, owns_aeron: bool) -> None:
        self._c = channel
        self._owns_aeron = owns_aeron

    @classmethod
    async def connect(
        cls,
        aeron: Aeron | None = None,
        context: ArchiveContext | None = None,
        *,
        response_channel: str | None = None,
        response_stream_id: int | None = None,
        timeout: float = 10.0,
        **overrides: Any,
    ) -> AsyncArchiveClient:
        context = _open_context(context, overrides)
        response_channel = response_channel or context.control_response_channel
        response_stream_id = context.control_response_stream_id if response_stream_id is None else response_stream_id
        owns = aeron is None
        client = aeron if aeron is not None else await Aeron.connect_async(aeron_dir=context.aeron_dir)
        channel = _Channel(client, context, response_channel, response_stream_id, timeout)
        self = cls(channel, owns)
        try:
            channel.responses = await client.add_subscription_async(response_channel, response_stream_id)
            channel.publication = await client.add_exclusive_publication_async(
                context.control_channel, context.control_stream_id
            )
            channel.session_id = int(await self._request("connect", response_channel, response_stream_id))
        except BaseException:
            await self.close()
            raise
        return self

    @property
    def control_session_id(self) -> int:
        return self._c.session_id

    async def _request(self, operation: str, *args: Any) -> Any:
        c = self._c
        exchange, message = c.begin(operation, args)
        try:
            deadline = time.monotonic() + c.timeout
            backoff = PollBackoff()
            while not c.try_offer(message, operation):
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                await backoff.idle()
            if exchange is None:
                return None
            backoff.reset()
            while not exchange.done:
                if c.poll():
                    deadline = time.monotonic() + c.timeout
                    backoff.reset()
                    continue
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                await backoff.idle()
            return result_of(exchange)
        finally:
            c.forget(exchange)

    async def _live(self, d: RecordingDescriptor) -> RecordingDescriptor:
        if not d.is_active:
            return d
        position = await self.recording_position(d.recording_id)
        return d if position is None else _with_position(d, position)

    async def _list(self, operation: str, from_id: int, count: int, *args: Any) -> list[RecordingDescriptor]:
        found: list[RecordingDescriptor] = []
        while len(found) < count:
            page = descriptors(await self._request(operation, from_id, count - len(found), *args))
            if not page:
                break
            found.extend(page)
            from_id = page[-1].recording_id + 1
        return [await self._live(d) for d in found]

    async def start_recording(self, channel: str, stream_id: int, *, local: bool = True) -> int:
        return int(await self._request("start_recording", channel, stream_id, local))

    async def stop_recording(self, channel: str, stream_id: int) -> bool:
        return bool(await self._request("stop_recording", channel, stream_id))

    async def stop_recording_subscription(self, subscription_id: int) -> bool:
        return bool(await self._request("stop_recording_subscription", subscription_id))

    async def extend_recording(self, recording_id: int, channel: str, stream_id: int, *, local: bool = True) -> int:
        return int(await self._request("extend_recording", recording_id, channel, stream_id, local))

    async def recordings(self, from_id: int = 0, count: int = ALL) -> list[RecordingDescriptor]:
        return await self._list("list_recordings", from_id, count)

    async def recordings_for_uri(
        self, channel_fragment: str, stream_id: int | None = None, from_id: int = 0, count: int = ALL
    ) -> list[RecordingDescriptor]:
        if stream_id is None:
            found = [d for d in await self.recordings(from_id) if channel_fragment in d.original_channel]
            return found[:count]
        return await self._list("list_recordings_for_uri", from_id, count, channel_fragment, stream_id)

    async def recording_subscriptions(
        self, channel_fragment: str = "", stream_id: int | None = None, *, pseudo_index: int = 0, count: int = ALL
    ) -> list[tuple[int, int, str]]:
        rows = await self._request("list_recording_subscriptions", pseudo_index, count, channel_fragment, stream_id)
        return [(int(a), int(b), str(c)) for a, b, c in rows]

    async def recording(self, recording_id: int) -> RecordingDescriptor:
        return await self._live(RecordingDescriptor(**await self._request("list_recording", recording_id)))

    async def recording_position(self, recording_id: int) -> int | None:
        value = await self._request("recording_position", recording_id)
        return None if value is None else int(value)

    async def stop_position(self, recording_id: int) -> int | None:
        value = await self._request("stop_position", recording_id)
        return None if value is None else int(value)

    async def find_last_matching_recording(
        self, min_recording_id: int, channel_fragment: str, stream_id: int, session_id: int
    ) -> int | None:
        value = await self._request(
            "find_last_matching_recording", min_recording_id, session_id, stream_id, channel_fragment
        )
        return None if value is None else int(value)

    async def keep_alive(self) -> None:
        await self._request("keep_alive")

    async def replay(
        self, recording_id: int, channel: str, stream_id: int, *, position: int = -1, length: int = FOLLOW
    ) -> int:
        return int(await self._request("replay", recording_id, position, length, channel, stream_id))

    async def bounded_replay(
        self,
        recording_id: int,
        limit_counter_id: int,
        channel: str,
        stream_id: int,
        *,
        position: int = -1,
        length: int = FOLLOW,
    ) -> int:
        return int(
            await self._request("bounded_replay", recording_id, position, length, limit_counter_id, channel, stream_id)
        )

    async def archive_id(self) -> int:
        return int(await self._request("archive_id"))

    async def stop_replay(self, replay_id: int) -> bool:
        return bool(await self._request("stop_replay", replay_id))

    async def truncate_recording(self, recording_id: int, position: int) -> None:
        await self._request("truncate_recording", recording_id, position)

    async def purge_recording(self, recording_id: int) -> None:
        await self._request("purge_recording", recording_id)

    async def replay_subscription(self, channel: str, stream_id: int, replay_id: int) -> Subscription:
        return await self._c.aeron.add_subscription_async(replay_channel(channel, replay_id), stream_id)

    def recording_events(self) -> RecordingEvents:
        """Events to poll, or to iterate with ``async for``."""
        return RecordingEvents(self._c.aeron, self._c.context)

    async def close(self) -> None:
        if self._c.publication is not None and self._c.session_id:
            try:
                await self._request("close_session")
            except ArchiveError:
                pass
        self._c.release(self._owns_aeron)
        self._owns_aeron = False

    async def __aenter__(self) -> AsyncArchiveClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def replay_session_id(replay_id: int) -> int:
    """The session id of a replay's image: the low 32 bits of the replay session id, as Aeron defines it."""
    return int32(replay_id & 0xFFFFFFFF)


def replay_channel(channel: str, replay_id: int) -> str:
    """``channel`` narrowed to one replay's image session."""
    separator = "|" if "?" in channel else "?"
    return f"{channel}{separator}session-id={replay_session_id(replay_id)}"


class RecordingEvent:
    """A recording started / progress / stopped event, as one value (``kind`` says which)."""

    __slots__ = (
        "channel",
        "kind",
        "position",
        "recording_id",
        "session_id",
        "source_identity",
        "start_position",
        "stream_id",
    )

    def __init__(
        self,
        kind: str,
        recording_id: int,
        start_position: int,
        position: int = -1,
        session_id: int = 0,
        stream_id: int = 0,
        channel: str = "",
        source_identity: str = "",
    ) -> None:
        self.kind = kind
        self.recording_id = recording_id
        self.start_position = start_position
        self.position = position
        self.session_id = session_id
        self.stream_id = stream_id
        self.channel = channel
        self.source_identity = source_identity

    @classmethod
    def of(cls, message: control.Message) -> RecordingEvent | None:
        if isinstance(message, control.RecordingStarted):
            return cls(
                "started",
                message.recording_id,
                message.start_position,
                message.start_position,
                message.session_id,
                message.stream_id,
                message.channel,
                message.source_identity,
            )
        if isinstance(message, control.RecordingProgress):
            return cls("progress", message.recording_id, message.start_position, message.position)
        if isinstance(message, control.RecordingStopped):
            return cls("stopped", message.recording_id, message.start_position, message.stop_position)
        return None

    def __repr__(self) -> str:
        return f"RecordingEvent({self.kind}, recording {self.recording_id}, {self.start_position}..{self.position})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecordingEvent) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]


class RecordingEvents:
    """Recording started / progress / stopped events from an archive (poll, or iterate asynchronously)."""

    def __init__(self, aeron: Aeron, context: ArchiveContext) -> None:
        self.subscription = aeron.add_subscription(context.recording_events_channel, context.recording_events_stream_id)
        self.malformed = 0
        self._handler: Callable[[RecordingEvent], object] = lambda event: None
        self._assembler = FragmentAssembler(self._on_fragment)

    def _on_fragment(self, payload: memoryview, header: Header) -> None:
        try:
            event = RecordingEvent.of(control.decode(payload))
        except ProtocolError:
            event = None
        if event is None:
            self.malformed += 1
            return
        self._handler(event)

    def poll(self, handler: Callable[[RecordingEvent], object], limit: int = 16) -> int:
        self._handler = handler
        return self.subscription.poll(self._assembler, limit)

    async def __aiter__(self) -> AsyncIterator[RecordingEvent]:
        backoff = PollBackoff(max_sleep=0.005)
        events: list[RecordingEvent] = []
        while not self.subscription.is_closed:
            if self.poll(events.append):
                backoff.reset()
                while events:
                    yield events.pop(0)
            else:
                await backoff.idle()

    def close(self) -> None:
        self.subscription.close()
