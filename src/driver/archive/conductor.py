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

import concurrent.futures
import queue
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from driver.archive import control, recording_pos
from driver.archive.catalog import NULL_POSITION, Catalog, RecordingDescriptor
from driver.archive.context import ArchiveContext
from driver.archive.control import ProtocolError, ResponseCode
from driver.archive.errors import (
    ArchiveError,
    InvalidPositionError,
    MaxRecordingsError,
    MaxReplaysError,
    RecordingNotFoundError,
    RecordingStateError,
)
from driver.archive.mark import archive_id_of
from driver.archive.recorder import RecordingSession, SegmentWriter, StopReason, SyncLevel
from driver.archive.refusals import Refusal, Refusals
from driver.archive.replay_bound import CounterBound, check_limit_counter
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
from driver.archive.sessions import ControlSession, ControlSessions, Listing, Search, SessionLimitError
from driver.client.aeron import Aeron
from driver.client.counter import Counter
from driver.client.publication import ADMIN_ACTION, ExclusivePublication
from driver.client.subscription import Image, Subscription
from driver.logbuffer.descriptor import int32, position_bits_to_shift
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.header import Header
from driver.uri import SPY_PREFIX, ChannelUri

__all__ = ["ArchiveConductor", "recover_catalog"]

_MAX_COMMANDS_PER_CYCLE = 16
_MAX_SCANS_PER_CYCLE = 256
"""Catalog entries a listing looks at per duty cycle (as Aeron's listing sessions do)."""
_MAX_QUEUED_ANSWERS = 512
"""Answers a control session may have waiting for its client (a listing stops short of filling it)."""
NULL_VALUE = -1
_CONTROL_TERM_LENGTH = 64 * 1024
"""Term length of every response publication (Aeron's ``aeron.archive.control.term.buffer.length`` default)."""
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


class _RecordingSubscription:
    """A subscription the archive records; each image on it becomes (or extends) a recording."""

    __slots__ = ("channel", "extend_id", "requester", "stream_id", "subscription")

    def __init__(self, channel: str, stream_id: int, extend_id: int | None) -> None:
        self.channel = channel
        self.stream_id = stream_id
        self.extend_id = extend_id
        self.subscription: Subscription | None = None
        self.requester: tuple[int, int] | None = None
        """The control session and correlation id that asked, when that session takes recording signals."""


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
        self._sessions = ControlSessions(random.randint(1, 1 << 30), context.max_control_sessions)
        self._publications: dict[int, ExclusivePublication] = {}
        """Each control session's response publication (the shell's half of the session)."""
        self._next_replay = 1
        self._next_replay_session = random.randint(1, 1 << 30)  # replay images' session ids: clear of others'
        self.archive_id = archive_id_of(context.archive_dir, context.archive_id)
        self._signal_targets: dict[int, tuple[int, int, int]] = {}
        """Recording id -> (control session, correlation, subscription id) its signals go to."""
        self._pending_images: list[tuple[_RecordingSubscription, Image]] = []
        self._progress_due_ns = 0
        self._last_progress: dict[int, int] = {}
        self.refusals = Refusals(aeron.add_counter)
        """What the archive turned away or dropped, by kind (also in the driver's counters file)."""
        self._control = aeron.add_subscription(context.control_channel, context.control_stream_id)
        self._local_control: Subscription | None = None
        if context.local_control_channel and (context.local_control_channel, context.local_control_stream_id) != (
            context.control_channel,
            context.control_stream_id,
        ):
            self._local_control = aeron.add_subscription(context.local_control_channel, context.local_control_stream_id)
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
        if self._local_control is not None:
            work += self._local_control.poll(self._control_assembler, 16)
        if len(self._sessions):
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

    @property
    def malformed_requests(self) -> int:
        return self.refusals[Refusal.MALFORMED_REQUEST]

    @property
    def dropped_answers(self) -> int:
        """Answers that never reached their client: queued when its session ended, or over the queue's bound."""
        return self.refusals[Refusal.DROPPED_ANSWERS]

    @property
    def control_sessions(self) -> int:
        """Control sessions held (connecting, active, or ending), each with a response publication."""
        return len(self._sessions)

    @property
    def active_recordings(self) -> int:
        return len(self._recordings)

    @property
    def active_replays(self) -> int:
        """Replays under way (each holds a publication until it ends)."""
        return len(self._replays)

    def on_close(self) -> None:
        for session in list(self._recordings.values()):
            session.stop(StopReason.ARCHIVE_CLOSED)
            self._end_recording(session)
        for replay in self._replays.values():
            replay.close()
        self._replays.clear()
        for publication in self._publications.values():
            publication.close()
        self._publications.clear()
        self.refusals.close()

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
        if len(_strip(channel).encode()) + 2 * len(channel.encode()) > _MAX_CHANNEL_BYTES:
            raise ArchiveError(f"channel of {len(channel.encode())} bytes is too long to catalog")
        limit = self.context.max_concurrent_recordings
        if max(len(self._recording_subs), len(self._recordings)) >= limit:
            self.refusals.add(Refusal.MAX_RECORDINGS)
            raise MaxRecordingsError(f"max concurrent recordings reached {limit}")
        for link in self._recording_subs.values():
            if link.stream_id == stream_id and link.channel == channel:
                raise RecordingStateError(f"{channel} stream {stream_id} is already being recorded")
        link = _RecordingSubscription(channel, stream_id, extend_id)
        link.subscription = self.aeron.add_subscription(
            _source_channel(uri, channel, local),
            stream_id,
            available_image_handler=lambda image: self._pending_images.append((link, image)),
        )
        registration_id = link.subscription.registration_id
        self._recording_subs[registration_id] = link
        return registration_id

    def _start_session(self, link: _RecordingSubscription, image: Image) -> None:
        if link.subscription is None or link.subscription.registration_id not in self._recording_subs:
            return
        if len(self._recordings) >= self.context.max_concurrent_recordings:
            self.refusals.add(Refusal.MAX_RECORDINGS)  # more images than recordings allowed: this one goes unrecorded
            self.context.error_handler(
                MaxRecordingsError(
                    f"max concurrent recordings reached, cannot record {link.stream_id}:{link.channel} "
                    f"session {image.session_id}"
                )
            )
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
        if link.requester is not None:
            target = (*link.requester, link.subscription.registration_id)
            self._signal_targets[recording_id] = target
            signal = control.RecordingSignal.START if link.extend_id is None else control.RecordingSignal.EXTEND
            self._signal(target, recording_id, session.position, signal)
        self._event(
            control.RecordingStarted(
                recording_id, d.start_position, image.session_id, link.stream_id, stripped, image.source_identity
            )
        )

    def _position_counter(self, d: RecordingDescriptor, image: Image) -> Counter | None:
        """Aeron's ``rec-pos`` counter, so stat tools show each recording's position live."""
        key = recording_pos.key_of(d.recording_id, image.session_id, image.source_identity)
        label = recording_pos.label_of(d.recording_id, image.session_id, d.stream_id, d.stripped_channel)
        try:
            counter = self.aeron.add_counter(recording_pos.RECORDING_POSITION_TYPE_ID, key, label)
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
        if session.error is not None:
            self.context.error_handler(session.error)
        self._event(control.RecordingStopped(session.recording_id, session.start_position, session.position))
        target = self._signal_targets.pop(session.recording_id, None)
        if target is not None:
            self._signal(target, session.recording_id, session.position, control.RecordingSignal.STOP)

    def _op_stop_recording(self, channel: str, stream_id: int) -> bool:
        """Stop the recording subscription of this channel string and stream; failing that, the first whose
        channel names the same stream as Aeron's archive keys them (media, endpoint, interface, control, tags)."""
        links = [(rid, link) for rid, link in self._recording_subs.items() if link.stream_id == stream_id]
        key = _key(channel)
        for registration_id, link in [*[x for x in links if x[1].channel == channel], *links]:
            if link.channel == channel or _key(link.channel) == key:
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

    def _op_list_recording_subscriptions(
        self, pseudo_index: int, count: int, channel_fragment: str, stream_id: int | None
    ) -> list[tuple[int, int, str]]:
        """(subscription id, stream id, stripped channel) of the recording subscriptions from ``pseudo_index`` on
        (their order of creation) whose channel contains the fragment (and of ``stream_id``, if given)."""
        found: list[tuple[int, int, str]] = []
        for subscription_id, link in list(self._recording_subs.items())[max(0, pseudo_index) :]:
            if len(found) >= count:
                break
            if (stream_id is None or link.stream_id == stream_id) and channel_fragment in link.channel:
                found.append((subscription_id, link.stream_id, _strip(link.channel)))
        return found

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

    def _op_replay(
        self,
        recording_id: int,
        position: int,
        length: int,
        channel: str,
        stream_id: int,
        bound: CounterBound | None = None,
    ) -> int:
        if len(self._replays) >= self.context.max_concurrent_replays:
            self.refusals.add(Refusal.MAX_REPLAYS)
            raise MaxReplaysError(f"max concurrent replays reached {self.context.max_concurrent_replays}")
        d = self.catalog.descriptor(recording_id)
        if position < 0:  # NULL position: from the start
            position = d.start_position
        check_replay_position(self.archive_dir, d, position)
        if length != FOLLOW and length < 0:
            raise InvalidPositionError(f"replay length {length}: must be >= 0, or -1 to follow the recording")
        if bound is not None:
            if position > bound.value:
                raise InvalidPositionError(
                    f"replay of recording {recording_id} from {position} exceeds the limit counter's {bound.value}"
                )
        elif not d.is_active and length == FOLLOW:
            length = d.stop_position - position
        session_id = int32(self._next_replay_session)
        self._next_replay_session += 1
        # Aeron's replay session id: a count above, the replay image's session id in the low 32 bits.
        replay_id = (self._next_replay << 32) | (session_id & 0xFFFFFFFF)
        self._next_replay += 1
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
            replay_id,
            d,
            self.catalog,
            self.archive_dir,
            publication,
            position,
            length,
            deadline,
            bound=bound,
            counters=self.aeron.counters_reader if bound is not None else None,
        )
        return replay_id

    def _op_bounded_replay(
        self, recording_id: int, position: int, length: int, limit_counter_id: int, channel: str, stream_id: int
    ) -> int:
        """A replay that never reads past counter ``limit_counter_id``'s value (Aeron's bounded replay)."""
        reader = self.aeron.counters_reader
        try:
            state: int | None = reader.get_counter_state(limit_counter_id)
        except ValueError:
            state = None
        check_limit_counter(limit_counter_id, reader.max_counter_id, state)
        bound = CounterBound(
            limit_counter_id,
            reader.get_counter_registration_id(limit_counter_id),
            reader.get_counter_value(limit_counter_id),
        )
        return self._op_replay(recording_id, position, length, channel, stream_id, bound)

    def _op_archive_id(self) -> int:
        return self.archive_id

    def _op_stop_replay(self, replay_id: int) -> bool:
        replay = self._replays.pop(replay_id, None)
        if replay is None:
            return False
        replay.close()
        return True

    # -- control sessions --------------------------------------------------------------------------

    def _on_control_fragment(self, payload: memoryview, header: Header) -> None:
        try:
            message = control.decode(payload)
        except ProtocolError as exc:
            self.refusals.add(Refusal.MALFORMED_REQUEST)
            self.context.error_handler(exc)
            return
        if isinstance(message, control.ConnectRequest):
            self._connect(message)
            return
        session_id = getattr(message, "control_session_id", None)
        handler = _HANDLERS.get(type(message))
        session = self._sessions.get(session_id) if isinstance(session_id, int) else None
        if session is None or (handler is None and not isinstance(message, control.CloseSessionRequest)):
            self.refusals.add(Refusal.MALFORMED_REQUEST)  # not a request, or for a session not (or no longer) ours
            return
        if isinstance(message, control.CloseSessionRequest):
            session.end("closed by the client")
            return
        assert handler is not None
        correlation_id: int = getattr(message, "correlation_id", 0)
        try:
            handler(self, session, message)
        except Exception as exc:
            self.refusals.add(Refusal.REQUEST_ERRORS)
            session.error(correlation_id, _wire_error(exc), _error_code(exc))

    def _connect(self, request: control.ConnectRequest) -> None:
        now = time.monotonic_ns()
        try:
            session = self._sessions.open(
                request.correlation_id,
                now,
                self.context.message_timeout_ns,
                version=request.version,
                max_queued=_MAX_QUEUED_ANSWERS,
            )
        except SessionLimitError as exc:
            self.refusals.add(Refusal.MAX_CONTROL_SESSIONS)
            self.context.error_handler(exc)
            return
        if session.refusal:
            self.refusals.add(Refusal.MAX_CONTROL_SESSIONS)
        try:
            publication = self.aeron.add_exclusive_publication(
                _response_channel(request.response_channel), request.response_stream_id
            )
        except Exception as exc:  # a response channel the driver will not publish on: counted, unanswered
            self._sessions.remove(session.session_id)
            self.refusals.add(Refusal.MALFORMED_REQUEST)
            self.context.error_handler(exc)
            return
        self._publications[session.session_id] = publication

    def _service_sessions(self) -> int:
        """Connect, flush and retire control sessions, and feed their listings; never waits."""
        work = 0
        now = time.monotonic_ns()
        for session in list(self._sessions.by_id.values()):
            publication = self._publications[session.session_id]
            work += session.poll(now, publication.is_connected)
            if session.listing is not None and not session.is_done:
                work += self._continue_listing(session, session.listing)
            if session.search is not None and not session.is_done:
                work += self._continue_search(session, session.search)
            while (answer := session.next_answer()) is not None:
                if len(answer) > publication.max_message_length:
                    session.sent()
                    self.context.error_handler(
                        ArchiveError(f"answer of {len(answer)} bytes exceeds the response channel's message limit")
                    )
                    continue
                result = publication.offer(answer)
                if result == ADMIN_ACTION:
                    result = publication.offer(answer)
                if result < 0:
                    session.blocked(now)
                    break
                session.sent()
                work += 1
            if session.is_done:
                self.refusals.add(Refusal.DROPPED_ANSWERS, session.dropped + len(session.queue))
                self._sessions.remove(session.session_id)
                self._publications.pop(session.session_id).close()
                if session.reason != "closed by the client":
                    self.context.error_handler(ArchiveError(session.reason))
                work += 1
        return work

    def _continue_listing(self, session: ControlSession, listing: Listing) -> int:
        """Up to a cycle's worth of descriptors for a listing, as far as the session's queue has room."""
        scanned = 0
        end = self.catalog.next_recording_id
        while listing.remaining > 0 and scanned < _MAX_SCANS_PER_CYCLE and session.room > 1:
            if listing.next_id >= end or (not listing.filtered and listing.next_id >= listing.limit_id):
                break
            recording_id = listing.next_id
            listing.next_id += 1
            scanned += 1
            try:
                d = self.catalog.descriptor(recording_id)
            except RecordingNotFoundError:
                continue  # purged
            if listing.filtered and (
                d.stream_id != listing.stream_id or (listing.fragment or "") not in d.original_channel
            ):
                continue
            session.enqueue(control.encode(_descriptor_message(session.session_id, listing.correlation_id, d)))
            listing.remaining -= 1
        exhausted = listing.next_id >= end or (not listing.filtered and listing.next_id >= listing.limit_id)
        if listing.remaining == 0:
            session.listing = None
        elif exhausted and session.room > 0:
            session.respond(ResponseCode.RECORDING_UNKNOWN, listing.correlation_id, listing.next_id)
            session.listing = None
        return scanned

    def _start_listing(self, session: ControlSession, listing: Listing) -> None:
        if session.listing is not None:
            raise RecordingStateError("a listing is already under way on this control session")
        session.listing = listing

    # The handlers: one per request template, each answering on the session.

    def _on_start_recording(self, session: ControlSession, r: control.StartRecordingRequest) -> None:
        local = r.source_location == control.SourceLocation.LOCAL
        subscription_id = self._op_start_recording(r.channel, r.stream_id, local)
        self._want_signals(session, r.correlation_id, subscription_id)
        session.respond(ResponseCode.OK, r.correlation_id, subscription_id)

    def _want_signals(self, session: ControlSession, correlation_id: int, subscription_id: int) -> None:
        """Today's clients (an authenticated connect, version > 0) get recording signals; 1.15.1's never asked."""
        link = self._recording_subs.get(subscription_id)
        if link is not None and session.version > 0:
            link.requester = (session.session_id, correlation_id)

    def _signal(self, target: tuple[int, int, int], recording_id: int, position: int, signal: int) -> None:
        session = self._sessions.get(target[0])
        if session is not None:
            session_id, correlation_id, subscription_id = target
            event = control.RecordingSignalEvent(
                session_id, correlation_id, recording_id, subscription_id, position, signal
            )
            session.enqueue(control.encode(event))

    def _on_stop_recording(self, session: ControlSession, r: control.StopRecordingRequest) -> None:
        if self._op_stop_recording(r.channel, r.stream_id):
            session.respond(ResponseCode.OK, r.correlation_id)
        else:
            session.respond(
                ResponseCode.ERROR,
                r.correlation_id,
                control.ErrorCode.UNKNOWN_SUBSCRIPTION,
                f"no recording found for streamId={r.stream_id} channel={r.channel}",
            )

    def _on_stop_recording_subscription(
        self, session: ControlSession, r: control.StopRecordingSubscriptionRequest
    ) -> None:
        if self._op_stop_recording_subscription(r.subscription_id):
            session.respond(ResponseCode.OK, r.correlation_id)
        else:
            session.respond(
                ResponseCode.ERROR,
                r.correlation_id,
                control.ErrorCode.UNKNOWN_SUBSCRIPTION,
                f"no recording subscription found for {r.subscription_id}",
            )

    def _on_replay(self, session: ControlSession, r: control.ReplayRequest) -> None:
        replay_id = self._op_replay(r.recording_id, r.position, r.length, r.replay_channel, r.replay_stream_id)
        session.respond(ResponseCode.OK, r.correlation_id, replay_id)

    def _on_bounded_replay(self, session: ControlSession, r: control.BoundedReplayRequest) -> None:
        replay_id = self._op_bounded_replay(
            r.recording_id, r.position, r.length, r.limit_counter_id, r.replay_channel, r.replay_stream_id
        )
        session.respond(ResponseCode.OK, r.correlation_id, replay_id)

    def _on_stop_replay(self, session: ControlSession, r: control.StopReplayRequest) -> None:
        if self._op_stop_replay(r.replay_session_id):
            session.respond(ResponseCode.OK, r.correlation_id)
        else:
            session.respond(
                ResponseCode.ERROR,
                r.correlation_id,
                control.ErrorCode.UNKNOWN_REPLAY,
                f"replay session not known for {r.replay_session_id}",
            )

    def _on_list_recordings(self, session: ControlSession, r: control.ListRecordingsRequest) -> None:
        self._start_listing(session, Listing(r.correlation_id, r.from_recording_id, r.record_count))

    def _on_list_recordings_for_uri(self, session: ControlSession, r: control.ListRecordingsForUriRequest) -> None:
        listing = Listing(
            r.correlation_id, r.from_recording_id, r.record_count, stream_id=r.stream_id, fragment=r.channel
        )
        self._start_listing(session, listing)

    def _on_list_recording_subscriptions(
        self, session: ControlSession, r: control.ListRecordingSubscriptionsRequest
    ) -> None:
        """The recording subscriptions from a pseudo index on that match, as many as asked for and the session's
        queue has room for, then SUBSCRIPTION_UNKNOWN if there were fewer (as Aeron's archive answers)."""
        stream_id = r.stream_id if r.apply_stream_id else None
        count = max(0, min(r.subscription_count, session.room - 1))
        found = self._op_list_recording_subscriptions(r.pseudo_index, count, r.channel, stream_id)
        for subscription_id, found_stream_id, channel in found:
            descriptor = control.RecordingSubscriptionDescriptor(
                session.session_id, r.correlation_id, subscription_id, found_stream_id, channel
            )
            session.enqueue(control.encode(descriptor))
        if len(found) < r.subscription_count:
            session.respond(ResponseCode.SUBSCRIPTION_UNKNOWN, r.correlation_id)

    def _on_list_recording(self, session: ControlSession, r: control.ListRecordingRequest) -> None:
        if session.listing is not None:
            raise RecordingStateError("a listing is already under way on this control session")
        try:
            d = self.catalog.descriptor(r.recording_id)
        except RecordingNotFoundError:
            session.respond(ResponseCode.RECORDING_UNKNOWN, r.correlation_id, r.recording_id)
            return
        session.enqueue(control.encode(_descriptor_message(session.session_id, r.correlation_id, d)))

    def _on_extend_recording(self, session: ControlSession, r: control.ExtendRecordingRequest) -> None:
        local = r.source_location == control.SourceLocation.LOCAL
        subscription_id = self._op_extend_recording(r.recording_id, r.channel, r.stream_id, local)
        self._want_signals(session, r.correlation_id, subscription_id)
        session.respond(ResponseCode.OK, r.correlation_id, subscription_id)

    def _on_recording_position(self, session: ControlSession, r: control.RecordingPositionRequest) -> None:
        recording = self._recordings.get(r.recording_id)
        position = recording.position if recording is not None else NULL_POSITION
        session.respond(ResponseCode.OK, r.correlation_id, position)

    def _on_stop_position(self, session: ControlSession, r: control.StopPositionRequest) -> None:
        session.respond(ResponseCode.OK, r.correlation_id, self.catalog.descriptor(r.recording_id).stop_position)

    def _on_truncate_recording(self, session: ControlSession, r: control.TruncateRecordingRequest) -> None:
        self._op_truncate_recording(r.recording_id, r.position)
        session.respond(ResponseCode.OK, r.correlation_id)

    def _on_purge_recording(self, session: ControlSession, r: control.PurgeRecordingRequest) -> None:
        self._op_purge_recording(r.recording_id)
        session.respond(ResponseCode.OK, r.correlation_id)
        if session.version > 0:
            target = (session.session_id, r.correlation_id, NULL_VALUE)
            self._signal(target, r.recording_id, NULL_VALUE, control.RecordingSignal.DELETE)

    def _on_find_last_matching_recording(
        self, session: ControlSession, r: control.FindLastMatchingRecordingRequest
    ) -> None:
        end = self.catalog.next_recording_id
        if r.min_recording_id < 0 or r.min_recording_id >= end:
            raise RecordingNotFoundError(f"min recording id outside valid range: {r.min_recording_id}")
        if session.search is not None:
            raise RecordingStateError("a find last matching recording is already under way on this control session")
        session.search = Search(r.correlation_id, r.min_recording_id, end, r.session_id, r.stream_id, r.channel)
        self._continue_search(session, session.search)

    def _continue_search(self, session: ControlSession, search: Search) -> int:
        """Up to a cycle's worth of catalog entries for a search, newest first; answers once found or exhausted."""
        scanned = 0
        found = NULL_VALUE
        while search.next_id >= search.min_id and scanned < _MAX_SCANS_PER_CYCLE:
            recording_id = search.next_id
            search.next_id -= 1
            scanned += 1
            try:
                d = self.catalog.descriptor(recording_id)
            except RecordingNotFoundError:
                continue  # purged
            if (
                d.session_id == search.session_id
                and d.stream_id == search.stream_id
                and (search.channel in d.original_channel)
            ):
                found = recording_id
                break
        if found != NULL_VALUE or search.next_id < search.min_id:
            session.search = None
            session.respond(ResponseCode.OK, search.correlation_id, found)
        return scanned

    def _on_keep_alive(self, session: ControlSession, r: control.KeepAliveRequest) -> None:
        session.respond(ResponseCode.OK, r.correlation_id)

    def _on_archive_id(self, session: ControlSession, r: control.ArchiveIdRequest) -> None:
        session.respond(ResponseCode.OK, r.correlation_id, self.archive_id)

    # -- events ------------------------------------------------------------------------------------

    def _event(self, event: control.RecordingStarted | control.RecordingProgress | control.RecordingStopped) -> None:
        if self._events is not None:
            self._events.offer(control.encode(event))  # best effort: nobody listening is fine

    def _send_progress(self) -> int:
        now = time.monotonic_ns()
        if now < self._progress_due_ns:
            return 0
        self._progress_due_ns = now + self.context.progress_interval_ns
        sent = 0
        for recording_id, session in self._recordings.items():
            if session.position != self._last_progress.get(recording_id):
                self._last_progress[recording_id] = session.position
                self._event(control.RecordingProgress(recording_id, session.start_position, session.position))
                sent += 1
        return sent

    def operation(self, name: str) -> Callable[..., Any]:
        """The ``_op_`` method for an operation name (for the in-process API)."""
        method = getattr(self, f"_op_{name}", None)
        if method is None:
            raise AttributeError(name)
        return method  # type: ignore[no-any-return]


_HANDLERS: dict[type, Callable[[ArchiveConductor, ControlSession, Any], None]] = {
    control.StartRecordingRequest: ArchiveConductor._on_start_recording,
    control.StopRecordingRequest: ArchiveConductor._on_stop_recording,
    control.StopRecordingSubscriptionRequest: ArchiveConductor._on_stop_recording_subscription,
    control.ReplayRequest: ArchiveConductor._on_replay,
    control.BoundedReplayRequest: ArchiveConductor._on_bounded_replay,
    control.StopReplayRequest: ArchiveConductor._on_stop_replay,
    control.ListRecordingsRequest: ArchiveConductor._on_list_recordings,
    control.ListRecordingsForUriRequest: ArchiveConductor._on_list_recordings_for_uri,
    control.ListRecordingRequest: ArchiveConductor._on_list_recording,
    control.ListRecordingSubscriptionsRequest: ArchiveConductor._on_list_recording_subscriptions,
    control.ExtendRecordingRequest: ArchiveConductor._on_extend_recording,
    control.RecordingPositionRequest: ArchiveConductor._on_recording_position,
    control.StopPositionRequest: ArchiveConductor._on_stop_position,
    control.TruncateRecordingRequest: ArchiveConductor._on_truncate_recording,
    control.PurgeRecordingRequest: ArchiveConductor._on_purge_recording,
    control.FindLastMatchingRecordingRequest: ArchiveConductor._on_find_last_matching_recording,
    control.KeepAliveRequest: ArchiveConductor._on_keep_alive,
    control.ArchiveIdRequest: ArchiveConductor._on_archive_id,
}


def _descriptor_message(
    session_id: int, correlation_id: int, d: RecordingDescriptor
) -> control.RecordingDescriptorMessage:
    return control.RecordingDescriptorMessage(
        session_id,
        correlation_id,
        d.recording_id,
        d.start_timestamp,
        d.stop_timestamp,
        d.start_position,
        d.stop_position,
        d.initial_term_id,
        d.segment_file_length,
        d.term_buffer_length,
        d.mtu_length,
        d.session_id,
        d.stream_id,
        d.stripped_channel,
        d.original_channel,
        d.source_identity,
    )


def _error_code(exc: BaseException) -> int:
    if isinstance(exc, RecordingNotFoundError):
        return control.ErrorCode.UNKNOWN_RECORDING
    if isinstance(exc, RecordingStateError):
        return control.ErrorCode.ACTIVE_RECORDING
    if isinstance(exc, MaxReplaysError):
        return control.ErrorCode.MAX_REPLAYS
    if isinstance(exc, MaxRecordingsError):
        return control.ErrorCode.MAX_RECORDINGS
    return control.ErrorCode.GENERIC


def _wire_error(exc: BaseException) -> str:
    """The error text for the wire: its type name first, so our clients raise the same typed error."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return f"{type(exc).__name__}: {text}"


def _response_channel(channel: str) -> str:
    """A client's response channel as the archive publishes on it: the parameters that say where (as Aeron's
    archive strips it), with the archive's own 64 KiB terms -- a client does not choose how much we allocate."""
    uri = ChannelUri.parse(channel)
    keep = {"endpoint", "interface", "control", "control-mode", "tags", "alias", "session-id"}
    params = {k: v for k, v in uri.params.items() if k in keep}
    return str(ChannelUri(uri.media, {**params, "term-length": str(_CONTROL_TERM_LENGTH)}, uri.prefix))


def _source_channel(uri: ChannelUri, channel: str, local: bool) -> str:
    """What the archive subscribes to: a UDP publication on its own driver (``local``, Aeron's LOCAL source) is
    read in place through a spy; anything else is received as any subscriber receives it."""
    return SPY_PREFIX + channel if local and uri.is_udp and not uri.is_spy else channel


def _key(channel: str) -> tuple[str, ...]:
    """What Aeron's archive matches a stop-recording request on: the media and the parameters naming the stream."""
    uri = ChannelUri.parse(channel)
    return (uri.media, *(uri.params.get(name, "") for name in ("endpoint", "interface", "control", "tags")))


def _strip(channel: str) -> str:
    """The channel without the parameters that do not say which stream it is (Aeron's stripped channel)."""
    uri = ChannelUri.parse(channel)
    keep = {"endpoint", "interface", "control", "control-mode", "tags", "session-id"}
    params = {k: v for k, v in uri.params.items() if k in keep}
    return str(ChannelUri(uri.media, params, uri.prefix))
