"""Archive clients for other processes: requests over the control channel, answers on a response channel.

Answers are matched by correlation id (unique per driver), so several clients
may share a response channel and stream. Every request waits at most the
client's timeout; an error answer is raised as the archive's typed error.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from driver.archive.catalog import RecordingDescriptor
from driver.archive.context import DEFAULT_CONTROL_RESPONSE_CHANNEL, ArchiveContext
from driver.archive.errors import ArchiveError, ArchiveTimeoutError
from driver.archive.operations import ALL, ArchiveOperations, descriptors
from driver.archive.protocol import (
    PROTOCOL_VERSION,
    ProtocolError,
    RecordingEvent,
    Response,
    decode_event,
    decode_response,
    encode_request,
    error_from_wire,
)
from driver.archive.replayer import FOLLOW
from driver.client.aeron import Aeron
from driver.client.aio import PollBackoff
from driver.client.publication import CLOSED, MAX_POSITION_EXCEEDED
from driver.client.subscription import Subscription
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.header import Header

__all__ = ["ArchiveClient", "AsyncArchiveClient", "RecordingEvents"]

DEFAULT_RESPONSE_STREAM_ID = 20


class _Channel:
    """The sans-wait part shared by both clients: encode, offer once, poll answers into a dict."""

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
        self._answers: dict[int, Response] = {}
        self._waiting: set[int] = set()
        """Correlation ids of our requests still unanswered: answers to other clients on a shared stream are skipped."""
        self._assembler = FragmentAssembler(self._on_response)
        self.responses: Subscription | None = None
        self.publication: Any = None
        self.malformed_responses = 0

    def _on_response(self, payload: memoryview, header: Header) -> None:
        try:
            response = decode_response(payload)
        except ProtocolError:
            self.malformed_responses += 1
            return
        if response.correlation_id in self._waiting:
            self._answers[response.correlation_id] = response

    def encode(self, operation: str, args: tuple[Any, ...]) -> tuple[int, bytes]:
        correlation_id = self.aeron.next_correlation_id()
        if operation != "close_session":
            self._waiting.add(correlation_id)
        return correlation_id, encode_request(correlation_id, self.session_id, operation, *args)

    def forget(self, correlation_id: int) -> None:
        self._waiting.discard(correlation_id)
        self._answers.pop(correlation_id, None)

    def try_offer(self, message: bytes, operation: str) -> bool:
        result = self.publication.offer(message)
        if result in (CLOSED, MAX_POSITION_EXCEEDED):
            raise ArchiveError(f"{operation}: control publication refused the request ({result})")
        return bool(result > 0)

    def take(self, correlation_id: int) -> Response | None:
        if self.responses is not None:
            self.responses.poll(self._assembler, 16)
        response = self._answers.pop(correlation_id, None)
        if response is not None:
            self._waiting.discard(correlation_id)
        return response

    @staticmethod
    def value(response: Response) -> Any:
        if not response.ok:
            raise error_from_wire(response.value)
        return response.value

    def release(self, owns_aeron: bool) -> None:
        """Close the control publication and response subscription (and the Aeron client, if ours)."""
        for resource in (self.publication, self.responses):
            if resource is not None:
                resource.close()
        self.publication = self.responses = None
        self.session_id = 0
        if owns_aeron:
            self.aeron.close()

    def timed_out(self, operation: str) -> ArchiveTimeoutError:
        return ArchiveTimeoutError(
            f"{operation}: no answer from the archive on {self.context.control_channel} "
            f"stream {self.context.control_stream_id} within {self.timeout}s"
        )


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
        response_channel: str = DEFAULT_CONTROL_RESPONSE_CHANNEL,
        response_stream_id: int = DEFAULT_RESPONSE_STREAM_ID,
        timeout: float = 10.0,
        **overrides: Any,
    ) -> ArchiveClient:
        """Connect to the archive of ``context`` (from the environment, then ``overrides``).

        With no ``aeron`` a client of the context's driver is made and closed with this one.
        """
        context = (context or ArchiveContext.from_env(**overrides)).conclude()
        owns = aeron is None
        client = aeron if aeron is not None else Aeron.connect(aeron_dir=context.aeron_dir)
        channel = _Channel(client, context, response_channel, response_stream_id, timeout)
        self = cls(channel, owns)
        try:
            channel.responses = client.add_subscription(response_channel, response_stream_id)
            channel.publication = client.add_exclusive_publication(context.control_channel, context.control_stream_id)
            channel.session_id = int(self._request("connect", response_channel, response_stream_id, PROTOCOL_VERSION))
        except BaseException:
            self.close()
            raise
        return self

    @property
    def control_session_id(self) -> int:
        return self._c.session_id

    def _request(self, operation: str, *args: Any) -> Any:
        c = self._c
        correlation_id, message = c.encode(operation, args)
        try:
            deadline = time.monotonic() + c.timeout
            sleep = 0.0
            while not c.try_offer(message, operation):
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                sleep = min(sleep * 2 or 0.00005, 0.001)
                time.sleep(sleep)
            if operation == "close_session":
                return None
            sleep = 0.0
            while (response := c.take(correlation_id)) is None:
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                sleep = min(sleep * 2 or 0.00005, 0.001)
                time.sleep(sleep)
            return c.value(response)
        finally:
            c.forget(correlation_id)

    def replay_subscription(self, channel: str, stream_id: int, replay_id: int) -> Subscription:
        """Subscribe to one replay: ``channel`` with ``session-id`` set to the replay's."""
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
        response_channel: str = DEFAULT_CONTROL_RESPONSE_CHANNEL,
        response_stream_id: int = DEFAULT_RESPONSE_STREAM_ID,
        timeout: float = 10.0,
        **overrides: Any,
    ) -> AsyncArchiveClient:
        context = (context or ArchiveContext.from_env(**overrides)).conclude()
        owns = aeron is None
        client = aeron if aeron is not None else await Aeron.connect_async(aeron_dir=context.aeron_dir)
        channel = _Channel(client, context, response_channel, response_stream_id, timeout)
        self = cls(channel, owns)
        try:
            channel.responses = await client.add_subscription_async(response_channel, response_stream_id)
            channel.publication = await client.add_exclusive_publication_async(
                context.control_channel, context.control_stream_id
            )
            channel.session_id = int(
                await self._request("connect", response_channel, response_stream_id, PROTOCOL_VERSION)
            )
        except BaseException:
            await self.close()
            raise
        return self

    @property
    def control_session_id(self) -> int:
        return self._c.session_id

    async def _request(self, operation: str, *args: Any) -> Any:
        c = self._c
        correlation_id, message = c.encode(operation, args)
        try:
            deadline = time.monotonic() + c.timeout
            backoff = PollBackoff()
            while not c.try_offer(message, operation):
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                await backoff.idle()
            if operation == "close_session":
                return None
            backoff.reset()
            while (response := c.take(correlation_id)) is None:
                if time.monotonic() > deadline:
                    raise c.timed_out(operation)
                await backoff.idle()
            return c.value(response)
        finally:
            c.forget(correlation_id)

    async def _list(self, operation: str, from_id: int, count: int, *args: Any) -> list[RecordingDescriptor]:
        found: list[RecordingDescriptor] = []
        while len(found) < count:
            page = descriptors(await self._request(operation, from_id, count - len(found), *args))
            if not page:
                break
            found.extend(page)
            from_id = page[-1].recording_id + 1
        return found

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
        return await self._list("list_recordings_for_uri", from_id, count, channel_fragment, stream_id)

    async def recording(self, recording_id: int) -> RecordingDescriptor:
        return RecordingDescriptor(**await self._request("list_recording", recording_id))

    async def recording_position(self, recording_id: int) -> int | None:
        value = await self._request("recording_position", recording_id)
        return None if value is None else int(value)

    async def stop_position(self, recording_id: int) -> int | None:
        value = await self._request("stop_position", recording_id)
        return None if value is None else int(value)

    async def replay(
        self, recording_id: int, channel: str, stream_id: int, *, position: int = -1, length: int = FOLLOW
    ) -> int:
        return int(await self._request("replay", recording_id, position, length, channel, stream_id))

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


def replay_channel(channel: str, replay_id: int) -> str:
    """``channel`` narrowed to one replay's session."""
    separator = "|" if "?" in channel else "?"
    return f"{channel}{separator}session-id={replay_id}"


class RecordingEvents:
    """Recording started / progress / stopped events from an archive (poll, or iterate asynchronously)."""

    def __init__(self, aeron: Aeron, context: ArchiveContext) -> None:
        self.subscription = aeron.add_subscription(context.recording_events_channel, context.recording_events_stream_id)
        self.malformed = 0
        self._handler: Callable[[RecordingEvent], object] = lambda event: None
        self._assembler = FragmentAssembler(self._on_fragment)

    def _on_fragment(self, payload: memoryview, header: Header) -> None:
        try:
            event = decode_event(payload)
        except ProtocolError:
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
