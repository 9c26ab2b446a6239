"""The archive's agent: recordings, replays, control sessions and events on one thread.

Theory of operation
-------------------
The conductor is the single owner of the catalog, the recording and replay
sessions and the control sessions. It drives its own Aeron client (invoker
mode), so image notifications, control requests and segment I/O all happen
in its duty cycle; calls from other threads (:class:`~driver.archive.Archive`'s
methods) are queued and answered through futures. Every operation exists once,
as a ``_op_<name>`` method, and is reached both from the in-process API and
from control requests.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from driver.archive.catalog import Catalog, RecordingDescriptor
from driver.archive.context import ArchiveContext
from driver.archive.errors import (
    ArchiveError,
    InvalidPositionError,
    RecordingStateError,
)
from driver.archive.protocol import (
    PROTOCOL_VERSION,
    ProtocolError,
    RecordingEvent,
    decode_request,
    decode_response,
    encode_event,
    encode_response,
)
from driver.archive.recorder import RecordingSession, SegmentWriter, StopReason, SyncLevel
from driver.archive.replayer import FOLLOW, ReplaySession, check_replay_position
from driver.archive.segments import (
    complete_frames_end,
    ensure_segment,
    segment_base_position,
    segment_files,
    segment_index,
    segment_path,
    zero_tail,
)
from driver.client.aeron import Aeron
from driver.client.counter import Counter
from driver.client.publication import ADMIN_ACTION, ExclusivePublication
from driver.client.subscription import Image, Subscription
from driver.logbuffer.descriptor import int32, position_bits_to_shift
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.header import Header
from driver.uri import ChannelUri

__all__ = ["ArchiveConductor", "recover_catalog"]

_MAX_COMMANDS_PER_CYCLE = 16
RECORDING_POSITION_TYPE_ID = 100
"""Aeron Archive's counter type for a recording's position."""
_MAX_SOURCE_IDENTITY = 96  # a counter key holds 112 bytes: 16 of ids and length, the rest identity
_MAX_LABEL = 380
_MAX_CHANNEL_BYTES = 800
"""Stripped + original channel in a catalog descriptor, with room left for the source identity."""


_PAGE_SIZE = 4096
"""Write-back granularity assumed when judging frames written but never confirmed (Aeron's ``Catalog.PAGE_SIZE``)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def recover_catalog(catalog: Catalog, archive_dir: Path) -> list[int]:
    """Stop recordings a crash left active at their last complete frame and zero torn tails; returns their ids.

    What Aeron 1.15.1 does on opening its catalog, done from a position known to be good: ours keep their recorded
    position in the catalog; for one Aeron's archive left active, the walk starts at its newest segment's base.
    """
    recovered: list[int] = []
    for entry in list(catalog.entries()):
        descriptor = entry.descriptor
        if not entry.valid or not descriptor.is_active:
            continue
        known = descriptor.recorded_position if entry.keeps_recorded_position else _newest_base(descriptor, archive_dir)
        end = _recover_end(descriptor, archive_dir, known)
        catalog.stop(descriptor.recording_id, end, _now_ms())
        recovered.append(descriptor.recording_id)
    return recovered


def _newest_base(d: RecordingDescriptor, archive_dir: Path) -> int:
    """Where the newest segment file on disk begins (the start position if that is the first segment)."""
    files = segment_files(archive_dir, d.recording_id)
    if not files:
        return d.start_position
    term_length = d.term_buffer_length
    base = d.start_position - (d.start_position & (term_length - 1)) + files[-1][0] * d.segment_file_length
    return max(base, d.start_position)


def _recover_end(d: RecordingDescriptor, archive_dir: Path, position: int) -> int:
    term_length = d.term_buffer_length
    segment_length = d.segment_file_length
    base = segment_base_position(d.start_position, position, term_length, segment_length)
    index = segment_index(d.start_position, position, term_length, segment_length)
    path = segment_path(archive_dir, d.recording_id, d.start_position, position, term_length, segment_length)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return position
    bits = position_bits_to_shift(term_length)
    term_id = int32(d.initial_term_id + (position >> bits))
    end_offset = complete_frames_end(
        data,
        position - base,
        min(len(data), segment_length),
        term_length=term_length,
        stream_id=d.stream_id,
        term_id_at_offset=term_id,
        page_size=_PAGE_SIZE,
    )
    zero_tail(path, end_offset, segment_length)  # the torn tail (and anything after it) goes
    for later_index, later in segment_files(archive_dir, d.recording_id):
        if later_index > index:
            later.unlink()
    if end_offset == segment_length:  # full: the next segment exists, as after a write that filled one
        later = segment_path(
            archive_dir, d.recording_id, d.start_position, base + segment_length, term_length, segment_length
        )
        ensure_segment(later, segment_length)
    return base + end_offset


class _ControlSession:
    """A client's session: its response publication and the answers waiting for room in it."""

    __slots__ = (
        "connect_correlation_id",
        "connect_deadline_ns",
        "outbox",
        "publication",
        "session_id",
        "stuck_since_ns",
        "version",
    )

    def __init__(
        self, session_id: int, publication: ExclusivePublication, correlation_id: int, version: int, deadline: int
    ) -> None:
        self.session_id = session_id
        self.publication = publication
        self.connect_correlation_id = correlation_id
        self.version = version
        self.connect_deadline_ns = deadline
        self.outbox: collections.deque[bytes] = collections.deque()
        self.stuck_since_ns = 0
        """When the response publication stopped taking answers or lost its subscriber (0: it is fine)."""


class _RecordingSubscription:
    """A subscription the archive records; each image on it becomes (or extends) a recording."""

    __slots__ = ("channel", "extend_id", "stream_id", "subscription")

    def __init__(self, channel: str, stream_id: int, extend_id: int | None) -> None:
        self.channel = channel
        self.stream_id = stream_id
        self.extend_id = extend_id
        self.subscription: Subscription | None = None


class ArchiveConductor:
    """The archive agent (see the module docstring)."""

    role_name = "archive-conductor"

    def __init__(self, context: ArchiveContext, aeron: Aeron, catalog: Catalog) -> None:
        self.context = context
        self.aeron = aeron
        self.catalog = catalog
        self.archive_dir = context.archive_dir
        self._invoker = aeron.conductor_agent_invoker
        self._commands: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._recording_subs: dict[int, _RecordingSubscription] = {}
        self._recordings: dict[int, RecordingSession] = {}
        self._replays: dict[int, ReplaySession] = {}
        self._control_sessions: dict[int, _ControlSession] = {}
        self._connecting: list[_ControlSession] = []
        self._next_control_session = 1
        self._next_replay = random.randint(1, 1 << 30)  # replay ids are session ids: keep clear of other archives'
        self._pending_images: list[tuple[_RecordingSubscription, Image]] = []
        self._progress_due_ns = 0
        self._last_progress: dict[int, int] = {}
        self.malformed_requests = 0
        self._control = aeron.add_subscription(context.control_channel, context.control_stream_id)
        self._control_assembler = FragmentAssembler(self._on_control_fragment)
        self._events: ExclusivePublication | None = None
        if context.recording_events_enabled:
            self._events = aeron.add_exclusive_publication(
                context.recording_events_channel, context.recording_events_stream_id
            )
        self._sync = SyncLevel(context.file_sync_level)

    # -- duty cycle --------------------------------------------------------------------------------

    def on_start(self) -> None:
        pass

    def do_work(self) -> int:
        work = 0
        if self._invoker is not None:
            work += self._invoker.invoke()
        if self._pending_images:  # before commands: a listing asked for now shows the recordings begun by now
            pending, self._pending_images = self._pending_images, []
            for link, image in pending:
                self._start_session(link, image)
            work += len(pending)
        for _ in range(_MAX_COMMANDS_PER_CYCLE):
            try:
                call, future = self._commands.get_nowait()
            except queue.Empty:
                break
            work += 1
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as exc:
                    future.set_exception(exc)
        work += self._control.poll(self._control_assembler, 16)
        if self._connecting:
            work += self._check_connecting()
        if self._control_sessions:
            work += self._service_sessions()
        for session in list(self._recordings.values()):
            work += session.do_work()
            if session.is_done:
                self._end_recording(session)
        if self._replays:
            now = time.monotonic_ns()
            for replay in list(self._replays.values()):
                work += replay.do_work(now)
                if replay.is_done:
                    del self._replays[replay.replay_id]
        if self._recordings:
            work += self._send_progress()
        return work

    def on_close(self) -> None:
        for session in list(self._recordings.values()):
            session.stop(StopReason.ARCHIVE_CLOSED)
            self._end_recording(session)
        for replay in self._replays.values():
            replay.close()
        self._replays.clear()

    def submit(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``call`` on the conductor thread; the future holds its result."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._commands.put((call, future))
        return future

    # -- recordings --------------------------------------------------------------------------------

    def _op_start_recording(self, channel: str, stream_id: int, local: bool = True) -> int:
        return self._subscribe(channel, stream_id, local, extend_id=None)

    def _subscribe(self, channel: str, stream_id: int, local: bool, extend_id: int | None) -> int:
        uri = ChannelUri.parse(channel)
        if local and uri.is_udp:
            raise ArchiveError(
                f"{channel}: recording a UDP publication locally needs a spy subscription, which this driver does "
                "not offer yet; record it as a receiver with local=False (the archive's driver then receives the "
                "stream like any subscriber, sharing the channel with subscribers on the same driver)"
            )
        if len(_strip(channel).encode()) + 2 * len(channel.encode()) > _MAX_CHANNEL_BYTES:
            raise ArchiveError(f"channel of {len(channel.encode())} bytes is too long to catalog")
        for link in self._recording_subs.values():
            if link.stream_id == stream_id and link.channel == channel:
                raise RecordingStateError(f"{channel} stream {stream_id} is already being recorded")
        link = _RecordingSubscription(channel, stream_id, extend_id)
        link.subscription = self.aeron.add_subscription(
            channel, stream_id, available_image_handler=lambda image: self._pending_images.append((link, image))
        )
        registration_id = link.subscription.registration_id
        self._recording_subs[registration_id] = link
        return registration_id

    def _start_session(self, link: _RecordingSubscription, image: Image) -> None:
        if link.subscription is None or link.subscription.registration_id not in self._recording_subs:
            return
        stripped = link.channel
        if link.extend_id is not None:
            try:
                recording_id = self._extend(link.extend_id, image)
            except ArchiveError as exc:
                self.context.error_handler(exc)
                return
        else:
            recording_id = self.catalog.add(
                start_position=image.position,
                start_timestamp=_now_ms(),
                initial_term_id=image.initial_term_id,
                segment_file_length=max(self.context.segment_file_length, image.term_buffer_length),
                term_buffer_length=image.term_buffer_length,
                mtu_length=image.mtu_length,
                session_id=image.session_id,
                stream_id=link.stream_id,
                stripped_channel=_strip(stripped),
                original_channel=stripped,
                source_identity=image.source_identity,
            )
        d = self.catalog.descriptor(recording_id)
        writer = SegmentWriter(
            self.archive_dir, recording_id, d.start_position, d.term_buffer_length, d.segment_file_length, self._sync
        )
        session = RecordingSession(
            recording_id, image, self.catalog, writer, position_counter=self._position_counter(d, image)
        )
        self._recordings[recording_id] = session
        self._last_progress[recording_id] = session.position
        self._event(
            RecordingEvent(
                "started",
                recording_id,
                d.start_position,
                session.position,
                image.session_id,
                link.stream_id,
                stripped,
                image.source_identity,
            )
        )

    def _position_counter(self, d: RecordingDescriptor, image: Image) -> Counter | None:
        """Aeron's ``rec-pos`` counter, so stat tools show each recording's position live."""
        source = image.source_identity.encode()[:_MAX_SOURCE_IDENTITY]
        key = struct.pack("<qii", d.recording_id, image.session_id, len(source)) + source
        label = f"rec-pos: {d.recording_id} {image.session_id} {d.stream_id} {d.stripped_channel}"
        try:
            counter = self.aeron.add_counter(RECORDING_POSITION_TYPE_ID, key, label[:_MAX_LABEL])
        except Exception as exc:  # the counters file is full: record anyway
            self.context.error_handler(exc)
            return None
        counter.set_ordered(image.position)
        return counter

    def _extend(self, recording_id: int, image: Image) -> int:
        d = self.catalog.descriptor(recording_id)
        if d.is_active:
            raise RecordingStateError(f"recording {recording_id} is active; only a stopped recording can be extended")
        mismatch = [
            f"{name} {ours} != {theirs}"
            for name, ours, theirs in (
                ("initial term id", d.initial_term_id, image.initial_term_id),
                ("term length", d.term_buffer_length, image.term_buffer_length),
                ("mtu", d.mtu_length, image.mtu_length),
                ("join position", d.stop_position, image.position),
            )
            if ours != theirs
        ]
        if mismatch:
            raise InvalidPositionError(f"cannot extend recording {recording_id}: {', '.join(mismatch)}")
        self.catalog.extend(recording_id)
        return recording_id

    def _end_recording(self, session: RecordingSession) -> None:
        self._recordings.pop(session.recording_id, None)
        self._last_progress.pop(session.recording_id, None)
        reason = session.stop_reason.value if session.stop_reason is not None else ""
        if session.error is not None:
            reason = f"{reason}: {session.error}"
            self.context.error_handler(session.error)
        self._event(
            RecordingEvent("stopped", session.recording_id, session.start_position, session.position, reason=reason)
        )

    def _op_stop_recording(self, channel: str, stream_id: int) -> bool:
        for registration_id, link in list(self._recording_subs.items()):
            if link.stream_id == stream_id and link.channel == channel:
                self._op_stop_recording_subscription(registration_id)
                return True
        return False

    def _op_stop_recording_subscription(self, subscription_id: int) -> bool:
        link = self._recording_subs.pop(subscription_id, None)
        if link is None or link.subscription is None:
            return False
        subscription = link.subscription
        for session in list(self._recordings.values()):
            if session.image.subscription is subscription:
                session.stop()
                self._end_recording(session)
        subscription.close()
        return True

    def _op_list_recordings(self, from_id: int, count: int) -> list[dict[str, object]]:
        return [d.to_dict() for d in self.catalog.descriptors(from_id, count)]

    def _op_list_recordings_for_uri(
        self, from_id: int, count: int, channel_fragment: str, stream_id: int | None
    ) -> list[dict[str, object]]:
        return [d.to_dict() for d in self.catalog.find(channel_fragment, stream_id, from_id, count)]

    def _op_list_recording(self, recording_id: int) -> dict[str, object]:
        return self.catalog.descriptor(recording_id).to_dict()

    def _op_recording_position(self, recording_id: int) -> int | None:
        d = self.catalog.descriptor(recording_id)
        return d.recorded_position if d.is_active else None

    def _op_stop_position(self, recording_id: int) -> int | None:
        d = self.catalog.descriptor(recording_id)
        return None if d.is_active else d.stop_position

    def _op_extend_recording(self, recording_id: int, channel: str, stream_id: int, local: bool = True) -> int:
        d = self.catalog.descriptor(recording_id)
        if d.is_active:
            raise RecordingStateError(f"recording {recording_id} is active; only a stopped recording can be extended")
        if d.stream_id != stream_id:
            raise RecordingStateError(f"recording {recording_id} is of stream {d.stream_id}, not {stream_id}")
        return self._subscribe(channel, stream_id, local, extend_id=recording_id)

    def _stopped(self, recording_id: int) -> RecordingDescriptor:
        d = self.catalog.descriptor(recording_id)
        if d.is_active or recording_id in self._recordings:
            raise RecordingStateError(f"recording {recording_id} is active; stop it first")
        if any(r.recording_id == recording_id for r in self._replays.values()):
            raise RecordingStateError(f"recording {recording_id} is being replayed")
        return d

    def _op_truncate_recording(self, recording_id: int, position: int) -> None:
        d = self._stopped(recording_id)
        if position != d.stop_position:
            check_replay_position(self.archive_dir, d, position)
        base = segment_base_position(d.start_position, position, d.term_buffer_length, d.segment_file_length)
        index = segment_index(d.start_position, position, d.term_buffer_length, d.segment_file_length)
        for later_index, path in segment_files(self.archive_dir, recording_id):
            if later_index > index:
                path.unlink()
        # The segment holding the new end stays, whole and zeroed from there (Aeron's tools look for it).
        path = segment_path(
            self.archive_dir, recording_id, d.start_position, position, d.term_buffer_length, d.segment_file_length
        )
        if path.exists():
            zero_tail(path, position - base, d.segment_file_length)
        self.catalog.truncate(recording_id, position)

    def _op_purge_recording(self, recording_id: int) -> None:
        self._stopped(recording_id)
        for _, path in segment_files(self.archive_dir, recording_id):
            path.unlink()
        self.catalog.delete(recording_id)

    # -- replays -----------------------------------------------------------------------------------

    def _op_replay(self, recording_id: int, position: int, length: int, channel: str, stream_id: int) -> int:
        d = self.catalog.descriptor(recording_id)
        if position < 0:  # NULL position: from the start
            position = d.start_position
        check_replay_position(self.archive_dir, d, position)
        if length != FOLLOW and length < 0:
            raise InvalidPositionError(f"replay length {length}: must be >= 0, or -1 to follow the recording")
        if not d.is_active and length == FOLLOW:
            length = d.stop_position - position
        replay_id = self._next_replay
        self._next_replay += 1
        session_id = int32(replay_id)
        bits = position_bits_to_shift(d.term_buffer_length)
        term_id = int32(d.initial_term_id + (position >> bits))
        uri = ChannelUri.parse(channel)
        start = {
            "init-term-id": d.initial_term_id,
            "term-id": term_id,
            "term-offset": position & (d.term_buffer_length - 1),
            "term-length": d.term_buffer_length,
            "mtu": d.mtu_length,
            "session-id": session_id,
        }
        uri = ChannelUri(uri.media, {**uri.params, **{k: str(v) for k, v in start.items()}}, uri.prefix)
        publication = self.aeron.add_exclusive_publication(str(uri), stream_id)
        deadline = time.monotonic_ns() + self.context.message_timeout_ns
        self._replays[replay_id] = ReplaySession(
            replay_id, d, self.catalog, self.archive_dir, publication, position, length, deadline
        )
        return replay_id

    def _op_stop_replay(self, replay_id: int) -> bool:
        replay = self._replays.pop(replay_id, None)
        if replay is None:
            return False
        replay.close()
        return True

    # -- control sessions --------------------------------------------------------------------------

    def _on_control_fragment(self, payload: memoryview, header: Header) -> None:
        try:
            request = decode_request(payload)
        except ProtocolError as exc:
            self.malformed_requests += 1
            self.context.error_handler(exc)
            return
        if request.operation == "connect":
            self._connect(request.correlation_id, *request.args)
            return
        session = self._control_sessions.get(request.session_id)
        if session is None:
            self.malformed_requests += 1
            return
        if request.operation == "close_session":
            del self._control_sessions[request.session_id]
            session.publication.close()
            return
        try:
            value = getattr(self, f"_op_{request.operation}")(*request.args)
            message = encode_response(request.correlation_id, value)
            if isinstance(value, list) and len(message) > session.publication.max_message_length:
                message = self._page(request.correlation_id, value, session.publication.max_message_length)
        except Exception as exc:
            message = encode_response(request.correlation_id, error=exc)
        self._respond(session, message)

    def _connect(self, correlation_id: int, channel: str, stream_id: int, version: int) -> None:
        try:
            publication = self.aeron.add_exclusive_publication(channel, stream_id)
        except Exception as exc:
            self.context.error_handler(exc)
            return
        deadline = time.monotonic_ns() + self.context.message_timeout_ns
        self._connecting.append(
            _ControlSession(self._next_control_session, publication, correlation_id, version, deadline)
        )
        self._next_control_session += 1

    def _check_connecting(self) -> int:
        """Answer ``connect`` once the client's response subscription sees us (never blocking the duty cycle)."""
        now = time.monotonic_ns()
        waiting: list[_ControlSession] = []
        for session in self._connecting:
            if not session.publication.is_connected:
                if now < session.connect_deadline_ns:
                    waiting.append(session)
                else:
                    session.publication.close()
                    self.context.error_handler(
                        ArchiveError(
                            f"control session {session.session_id}: the client's response channel never connected"
                        )
                    )
                continue
            correlation_id = session.connect_correlation_id
            if session.version != PROTOCOL_VERSION:
                error = ArchiveError(
                    f"archive protocol version {session.version} is not this archive's {PROTOCOL_VERSION}"
                )
                self._respond(session, encode_response(correlation_id, error=error))
                session.publication.close()
                continue
            self._control_sessions[session.session_id] = session
            self._respond(session, encode_response(correlation_id, session.session_id))
        done = len(self._connecting) - len(waiting)
        self._connecting = waiting
        return done

    @staticmethod
    def _page(correlation_id: int, rows: list[Any], limit: int) -> bytes:
        """The longest first part of a list answer that fits in one message (the client asks for the rest)."""
        low, high = 1, len(rows)
        best = encode_response(correlation_id, rows[:1])
        while low <= high:
            middle = (low + high) // 2
            message = encode_response(correlation_id, rows[:middle])
            if len(message) <= limit:
                best, low = message, middle + 1
            else:
                high = middle - 1
        return best

    def _respond(self, session: _ControlSession, message: bytes) -> None:
        """Send an answer now, or queue it behind the session's earlier ones (never waiting here)."""
        if len(message) > session.publication.max_message_length:
            correlation_id = decode_response(message).correlation_id
            message = encode_response(
                correlation_id,
                error=ArchiveError(
                    f"answer of {len(message)} bytes exceeds the response channel's max message length "
                    f"{session.publication.max_message_length}"
                ),
            )
        session.outbox.append(message)
        self._flush(session)

    def _flush(self, session: _ControlSession) -> int:
        sent = 0
        outbox = session.outbox
        while outbox:
            result = session.publication.offer(outbox[0])
            if result == ADMIN_ACTION:
                result = session.publication.offer(outbox[0])
            if result < 0:
                break
            outbox.popleft()
            sent += 1
        return sent

    def _service_sessions(self) -> int:
        """Flush queued answers; end sessions whose client stopped reading for longer than the message timeout."""
        work = 0
        now = time.monotonic_ns()
        for session in list(self._control_sessions.values()):
            if session.outbox:
                work += self._flush(session)
            healthy = not session.outbox and session.publication.is_connected
            if healthy:
                session.stuck_since_ns = 0
            elif session.stuck_since_ns == 0:
                session.stuck_since_ns = now
            elif now - session.stuck_since_ns > self.context.message_timeout_ns:
                del self._control_sessions[session.session_id]
                session.publication.close()
                if session.outbox:
                    self.context.error_handler(
                        ArchiveError(
                            f"control session {session.session_id}: client stopped reading; "
                            f"{len(session.outbox)} answer(s) dropped and the session closed"
                        )
                    )
                work += 1
        return work

    # -- events ------------------------------------------------------------------------------------

    def _event(self, event: RecordingEvent) -> None:
        if self._events is not None:
            self._events.offer(encode_event(event))  # best effort: nobody listening is fine

    def _send_progress(self) -> int:
        now = time.monotonic_ns()
        if now < self._progress_due_ns:
            return 0
        self._progress_due_ns = now + self.context.progress_interval_ns
        sent = 0
        for recording_id, session in self._recordings.items():
            if session.position != self._last_progress.get(recording_id):
                self._last_progress[recording_id] = session.position
                self._event(RecordingEvent("progress", recording_id, session.start_position, session.position))
                sent += 1
        return sent

    def operation(self, name: str) -> Callable[..., Any]:
        """The ``_op_`` method for a protocol operation name (for the in-process API)."""
        method = getattr(self, f"_op_{name}", None)
        if method is None:
            raise AttributeError(name)
        return method  # type: ignore[no-any-return]


def _strip(channel: str) -> str:
    """The channel without the parameters that do not say which stream it is (Aeron's stripped channel)."""
    uri = ChannelUri.parse(channel)
    keep = {"endpoint", "interface", "control", "control-mode", "tags", "session-id"}
    params = {k: v for k, v in uri.params.items() if k in keep}
    return str(ChannelUri(uri.media, params, uri.prefix))
