"""The archive's request path as an attacker sees it: raw SBE requests over real sockets to a real archive.

Limits on replays and recordings (Aeron's ``max.concurrent.*`` settings, refused with Aeron's error codes and
counted in the driver's counters file), absurd ids, positions, lengths and channel strings (each a typed error
answer, nothing else lost), and the counters the refusals leave for the tools.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest
from archive_helpers import ArchiveHarness, Collector, message, offer_all

from driver.archive import MaxRecordingsError, MaxReplaysError, control
from driver.archive.catalog import Catalog
from driver.archive.client import ArchiveClient
from driver.archive.control import ControlResponse, ErrorCode, ResponseCode
from driver.archive.refusals import ARCHIVE_REFUSALS_TYPE_ID, Refusal
from driver.client import Aeron, Counter, FragmentAssembler
from driver.concurrent.counters import CountersReader
from driver.tools import families
from driver.tools.stat import read_counters
from support.endpoints import distinct_free_udp_ports, free_udp_port
from support.waiting import execute_until

CHANNEL = "aeron:ipc?term-length=64k"
STREAM = 7
REPLAY_STREAM = 99
RESPONSE_STREAM = 77
LIMIT_TYPE_ID = 1101


def refusal_counter(reader: CountersReader, kind: Refusal) -> int:
    """The value of the archive's refusal counter of this kind, as the stat tools and the exporter read it."""
    assert ARCHIVE_REFUSALS_TYPE_ID == families.ARCHIVE_REFUSALS_TYPE_ID
    found = [
        sample.value
        for sample in read_counters(reader)
        if families.classify(sample) == (families.ARCHIVE_REFUSALS, (("reason", kind.name.lower()),))
    ]
    assert len(found) == 1, f"{kind}: {len(found)} counters"
    return found[0]


class RawSession:
    """A control session spoken in raw SBE: requests encoded by hand, answers decoded as they come."""

    def __init__(self, aeron: Aeron, harness: ArchiveHarness, response_stream: int = RESPONSE_STREAM) -> None:
        context = harness.context
        self.responses = aeron.add_subscription("aeron:ipc", response_stream)
        self.publication = aeron.add_exclusive_publication(context.control_channel, context.control_stream_id)
        self.answers: list[control.Message] = []
        self._assembler = FragmentAssembler(lambda payload, header: self.answers.append(control.decode(payload)))
        self._next = 1
        execute_until(lambda: self.publication.is_connected, description="control channel connected")
        offer_all(self.publication, [control.encode(control.ConnectRequest(1, response_stream, "aeron:ipc"))])
        connected = self.answer(1)
        assert connected.code == ResponseCode.OK
        self.session_id = connected.relevant_id

    def request(self, make: Callable[[int, int], control.Message]) -> int:
        self._next += 1
        offer_all(self.publication, [control.encode(make(self.session_id, self._next))])
        return self._next

    def answer(self, correlation_id: int) -> ControlResponse:
        def found() -> ControlResponse | None:
            self.responses.poll(self._assembler, 16)
            for m in self.answers:
                if isinstance(m, ControlResponse) and m.correlation_id == correlation_id:
                    return m
            return None

        response: ControlResponse = execute_until(found, description=f"the answer to {correlation_id}")
        return response

    def ask(self, make: Callable[[int, int], control.Message]) -> ControlResponse:
        return self.answer(self.request(make))

    def close(self) -> None:
        self.publication.close()
        self.responses.close()


def record(harness: ArchiveHarness, archive: ArchiveClient, count: int) -> tuple[int, list[int]]:
    """A stopped recording of ``count`` messages: its id and the stream position after each."""
    archive.start_recording(CHANNEL, STREAM)
    publication = harness.client.add_exclusive_publication(CHANNEL, STREAM)
    ends = [offer_all(publication, [message(i, 100)]) for i in range(count)]
    rid = harness.wait_for_recordings(1)[0].recording_id
    harness.wait_recorded(rid, ends[-1])
    publication.close()
    harness.wait_stopped(rid)
    assert archive.stop_recording(CHANNEL, STREAM)
    return rid, ends


def test_replays_past_the_limit_are_refused_with_aerons_error_and_counted(
    make_archive: Callable[..., ArchiveHarness],
) -> None:
    harness = make_archive(max_concurrent_replays=2, message_timeout_ns=60_000_000_000)
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, ends = record(harness, archive, 10)
        limit = harness.client.add_counter(LIMIT_TYPE_ID, b"", "replay limit")
        raw = RawSession(harness.client, harness)
        try:
            limit.set(ends[4])  # stands still: the replays wait there, under way
            replays = [archive.bounded_replay(rid, limit.id, "aeron:ipc", REPLAY_STREAM + i) for i in range(2)]
            assert harness.archive.conductor.active_replays == 2
            with pytest.raises(MaxReplaysError, match="max concurrent replays reached 2"):
                archive.replay(rid, "aeron:ipc", REPLAY_STREAM + 2)
            refused = raw.ask(lambda s, c: control.ReplayRequest(s, c, rid, 0, -1, REPLAY_STREAM + 3, "aeron:ipc"))
            assert (refused.code, refused.relevant_id) == (ResponseCode.ERROR, ErrorCode.MAX_REPLAYS)
            assert harness.archive.conductor.refusals[Refusal.MAX_REPLAYS] == 2
            assert refusal_counter(harness.client.counters_reader, Refusal.MAX_REPLAYS) == 2
            assert harness.archive.conductor.active_replays == 2  # nothing else lost
            assert archive.stop_replay(replays[0])
            archive.replay(rid, "aeron:ipc", REPLAY_STREAM + 4)  # room again
            assert harness.archive.conductor.active_replays == 2
        finally:
            raw.close()
            limit.close()


def test_recordings_past_the_limit_are_refused_and_extra_images_go_unrecorded(
    make_archive: Callable[..., ArchiveHarness],
) -> None:
    harness = make_archive(max_concurrent_recordings=2)
    raw = RawSession(harness.client, harness)
    second_port, third_port = distinct_free_udp_ports(2)
    try:
        first = raw.ask(lambda s, c: control.StartRecordingRequest(s, c, 1, control.SourceLocation.LOCAL, CHANNEL))
        assert first.code == ResponseCode.OK
        second = raw.ask(
            lambda s, c: control.StartRecordingRequest(
                s, c, 2, control.SourceLocation.REMOTE, f"aeron:udp?endpoint=127.0.0.1:{second_port}"
            )
        )
        assert second.code == ResponseCode.OK
        # A third subscription (a port of the attacker's choosing) is refused: no socket is opened for it.
        third = raw.ask(
            lambda s, c: control.StartRecordingRequest(
                s, c, 3, control.SourceLocation.REMOTE, f"aeron:udp?endpoint=127.0.0.1:{third_port}"
            )
        )
        assert (third.code, third.relevant_id) == (ResponseCode.ERROR, ErrorCode.MAX_RECORDINGS)
        assert "max concurrent recordings reached 2" in third.error_message
        # Three publishers on one recorded channel: two recordings, the third image counted and left unrecorded.
        publications = [harness.client.add_exclusive_publication(CHANNEL, 1) for _ in range(3)]
        try:
            for publication in publications:
                offer_all(publication, [message(0, 64)])
            execute_until(
                lambda: harness.archive.conductor.refusals[Refusal.MAX_RECORDINGS] == 2,
                description="the third image refused",
            )
            assert harness.archive.conductor.active_recordings == 2
            assert len(harness.archive.recordings()) == 2
            assert refusal_counter(harness.client.counters_reader, Refusal.MAX_RECORDINGS) == 2
            assert any(isinstance(e, MaxRecordingsError) for e in harness.errors)
        finally:
            for publication in publications:
                publication.close()
        with (
            ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive,
            pytest.raises(MaxRecordingsError),
        ):
            archive.start_recording("aeron:ipc?term-length=64k|alias=x", 4)
    finally:
        raw.close()


BIG = 2**63 - 1


def test_absurd_ids_positions_lengths_and_channels_get_error_answers_and_nothing_else_is_lost(
    harness: ArchiveHarness,
) -> None:
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, ends = record(harness, archive, 10)
    raw = RawSession(harness.client, harness)
    huge = (
        "aeron:udp?endpoint=127.0.0.1:24327|alias=" + "x" * 7_900
    )  # as long as the control channel carries (64 KiB terms: 8 KiB messages)
    location = control.SourceLocation.REMOTE
    errors: dict[str, tuple[Callable[[int, int], control.Message], int]] = {
        "huge recording channel": (
            lambda s, c: control.StartRecordingRequest(s, c, 1, location, huge),
            ErrorCode.GENERIC,
        ),
        "huge replay channel": (lambda s, c: control.ReplayRequest(s, c, rid, 0, -1, 5, huge), ErrorCode.GENERIC),
        "not a channel": (lambda s, c: control.ReplayRequest(s, c, rid, 0, -1, 5, "\x00\x7f:"), ErrorCode.GENERIC),
        "replay of id -1": (
            lambda s, c: control.ReplayRequest(s, c, -1, 0, -1, 5, "aeron:ipc"),
            ErrorCode.UNKNOWN_RECORDING,
        ),
        "replay of id max": (
            lambda s, c: control.ReplayRequest(s, c, BIG, 0, -1, 5, "aeron:ipc"),
            ErrorCode.UNKNOWN_RECORDING,
        ),
        "replay from past the end": (
            lambda s, c: control.ReplayRequest(s, c, rid, 1 << 62, -1, 5, "aeron:ipc"),
            ErrorCode.GENERIC,
        ),
        "replay of length -5": (
            lambda s, c: control.ReplayRequest(s, c, rid, 0, -5, 5, "aeron:ipc"),
            ErrorCode.GENERIC,
        ),
        "replay of an unaligned position": (
            lambda s, c: control.ReplayRequest(s, c, rid, 3, -1, 5, "aeron:ipc"),
            ErrorCode.GENERIC,
        ),
        "bounded by counter -7": (
            lambda s, c: control.BoundedReplayRequest(s, c, rid, 0, -1, -7, 5, "aeron:ipc"),
            ErrorCode.GENERIC,
        ),
        "bounded by counter max": (
            lambda s, c: control.BoundedReplayRequest(s, c, rid, 0, -1, 2**31 - 1, 5, "aeron:ipc"),
            ErrorCode.GENERIC,
        ),
        "truncate of id max": (
            lambda s, c: control.TruncateRecordingRequest(s, c, BIG, 0),
            ErrorCode.UNKNOWN_RECORDING,
        ),
        "truncate past the end": (lambda s, c: control.TruncateRecordingRequest(s, c, rid, 1 << 62), ErrorCode.GENERIC),
        "truncate below the start": (
            lambda s, c: control.TruncateRecordingRequest(s, c, rid, -(1 << 62)),
            ErrorCode.GENERIC,
        ),
        "stop position of id -1": (lambda s, c: control.StopPositionRequest(s, c, -1), ErrorCode.UNKNOWN_RECORDING),
        "extend id max": (
            lambda s, c: control.ExtendRecordingRequest(s, c, BIG, STREAM, location, CHANNEL),
            ErrorCode.UNKNOWN_RECORDING,
        ),
        "purge id -1": (lambda s, c: control.PurgeRecordingRequest(s, c, -1), ErrorCode.UNKNOWN_RECORDING),
        "find from id max": (
            lambda s, c: control.FindLastMatchingRecordingRequest(s, c, BIG, 1, 1, ""),
            ErrorCode.UNKNOWN_RECORDING,
        ),
    }
    try:
        for name, (make, code) in errors.items():
            answer = raw.ask(make)
            assert (answer.code, answer.relevant_id) == (ResponseCode.ERROR, code), f"{name}: {answer}"
        unknown = raw.ask(lambda s, c: control.ListRecordingRequest(s, c, -1))
        assert unknown.code == ResponseCode.RECORDING_UNKNOWN
        assert raw.ask(lambda s, c: control.RecordingPositionRequest(s, c, BIG)).relevant_id == -1
        # listings asking for everything are answered as far as there is something, in bounded batches
        correlation = raw.request(lambda s, c: control.ListRecordingsRequest(s, c, -5, 2**31 - 1))
        assert raw.answer(correlation).code == ResponseCode.RECORDING_UNKNOWN
        listed = [m for m in raw.answers if isinstance(m, control.RecordingDescriptorMessage)]
        assert [d.recording_id for d in listed] == [rid]
        correlation = raw.request(
            lambda s, c: control.ListRecordingSubscriptionsRequest(s, c, -(2**31), 2**31 - 1, 0, 0, "")
        )
        assert raw.answer(correlation).code == ResponseCode.SUBSCRIPTION_UNKNOWN
        assert harness.archive.conductor.refusals[Refusal.REQUEST_ERRORS] == len(errors)
        assert refusal_counter(harness.client.counters_reader, Refusal.REQUEST_ERRORS) == len(errors)
        assert harness.archive.conductor.active_replays == 0
        assert harness.archive.conductor.active_recordings == 0
        # nothing else lost: the session and the archive still serve, the recording is whole
        assert raw.ask(lambda s, c: control.KeepAliveRequest(s, c)).code == ResponseCode.OK
        assert raw.ask(lambda s, c: control.StopPositionRequest(s, c, rid)).relevant_id == ends[-1]
    finally:
        raw.close()


def test_connects_with_response_channels_the_driver_refuses_are_counted_and_hold_nothing(
    harness: ArchiveHarness,
) -> None:
    context = harness.context
    publication = harness.client.add_exclusive_publication(context.control_channel, context.control_stream_id)
    try:
        execute_until(lambda: publication.is_connected, description="control channel connected")
        bad = ["not a uri", "aeron:udp?endpoint=" + "9" * 7_000, "aeron:udp?endpoint=127.0.0.1:99999"]
        offer_all(publication, [control.encode(control.ConnectRequest(i, 5, c)) for i, c in enumerate(bad)])
        execute_until(
            lambda: harness.archive.conductor.refusals[Refusal.MALFORMED_REQUEST] == len(bad),
            description="the bad connects counted",
        )
        assert harness.archive.conductor.control_sessions == 0
        assert refusal_counter(harness.client.counters_reader, Refusal.MALFORMED_REQUEST) == len(bad)
        with ArchiveClient.connect(harness.client, context, timeout=10) as archive:
            assert archive.recordings() == []
    finally:
        publication.close()


_CHILD = """
import sys, time
from pathlib import Path
from driver.archive import ArchiveContext
from driver.archive.client import ArchiveClient
from driver.client import Aeron

aeron_dir, control, response, replay_channel, limit_position, record_channel = sys.argv[1:7]
context = ArchiveContext.from_env(
    {}, aeron_dir=Path(aeron_dir), control_channel=control, control_response_channel=response
)
aeron = Aeron.connect(aeron_dir=Path(aeron_dir))
archive = ArchiveClient.connect(aeron, context, timeout=10)
limit = aeron.add_counter(1101, b"", "child's replay limit")
limit.set(int(limit_position))
replay_id = archive.bounded_replay(0, limit.id, replay_channel, 5)
subscription = archive.replay_subscription(replay_channel, 5, replay_id)
archive.start_recording(record_channel, 3)
deadline = time.monotonic() + 20
while not subscription.images and time.monotonic() < deadline:
    time.sleep(0.01)
print("ready" if subscription.images else "no replay image", flush=True)
time.sleep(60)
"""


@pytest.mark.driver_settings(image_liveness_timeout_ns=3_000_000_000, publication_connection_timeout_ns=3_000_000_000)
def test_a_client_killed_mid_replay_leaves_no_session_or_replay_behind(
    make_archive: Callable[..., ArchiveHarness],
) -> None:
    """A client process SIGKILLed with a control session, a waiting replay and a recording subscription open
    over UDP on 127.0.0.1: its session ends (its response channel disconnects), its replay ends (its subscriber
    and its limit counter go); the recording subscription stays, as Aeron's do (it belongs to the archive).

    The driver first times the dead client out, then its image, then the publication's connection: each
    timeout is 3 s here (Aeron's 10 s and 5 s defaults for the last two would add 9 s to wait out)."""
    control_port, response_port, replay_port = (free_udp_port() for _ in range(3))
    harness = make_archive(
        control_channel=f"aeron:udp?endpoint=127.0.0.1:{control_port}",
        control_response_channel=f"aeron:udp?endpoint=127.0.0.1:{response_port}",
        message_timeout_ns=1_000_000_000,
    )
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, ends = record(harness, archive, 10)
    assert rid == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(harness.aeron_dir),
            harness.context.control_channel,
            harness.context.control_response_channel,
            f"aeron:udp?endpoint=127.0.0.1:{replay_port}",
            str(ends[4]),
            "aeron:ipc?term-length=64k|alias=child",
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdout is not None
        readable, _, _ = select.select([child.stdout], [], [], 60)  # the child's own waits are bounded too
        assert readable, "the child never reported"
        assert child.stdout.readline().strip() == b"ready"
        conductor = harness.archive.conductor
        assert (conductor.control_sessions, conductor.active_replays) == (1, 1)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        execute_until(
            lambda: conductor.control_sessions == 0 and conductor.active_replays == 0,
            timeout_s=30,
            description="the dead client's session and replay ended",
        )
        assert len(harness.archive.recording_subscriptions()) == 1
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        if child.stdout is not None:
            child.stdout.close()


def test_a_reused_limit_counter_slot_has_a_new_registration_id_and_does_not_move_the_replay(
    harness: ArchiveHarness,
) -> None:
    """The archive tells a bounded replay's limit counter from whatever later takes its slot by registration id:
    the driver must give the slot's new counter a different one, or a stranger's counter would bound the replay."""
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, ends = record(harness, archive, 10)
        limit = harness.client.add_counter(LIMIT_TYPE_ID, b"", "replay limit")
        limit.set(ends[4])
        slot, registration_id = limit.id, limit.registration_id
        replay_id = archive.bounded_replay(rid, limit.id, "aeron:ipc", REPLAY_STREAM)
        subscription = archive.replay_subscription("aeron:ipc", REPLAY_STREAM, replay_id)
        collector = Collector(subscription)
        assert len(collector.poll_until(5)) == 5
        limit.close()  # allocate (past the free-to-reuse timeout) until a new counter lands in the freed slot
        held: list[Counter] = []

        def stranger_in() -> Counter | None:
            counter = harness.client.add_counter(LIMIT_TYPE_ID, b"", "stranger")
            held.append(counter)
            return counter if counter.id == slot else None

        try:
            reused = execute_until(stranger_in, timeout_s=20, max_iterations=2_000, description="the freed slot reused")
            reader = harness.client.counters_reader
            assert reader.get_counter_registration_id(slot) == reused.registration_id != registration_id
            reused.set(ends[-1])  # a stranger's value: the replay must not follow it
            execute_until(lambda: not subscription.images, description="the replay ended at its frozen bound")
            collector.poll()
            assert len(collector.messages) == 5
        finally:
            for counter in held:
                counter.close()
            subscription.close()


def test_a_find_over_a_large_catalog_does_not_hold_the_archive(make_archive: Callable[..., ArchiveHarness]) -> None:
    """FindLastMatchingRecording over 20000 recordings, none matching, is worked through a bounded number of
    entries per duty cycle: a keep-alive sent after it is answered first (before, the whole catalog was read in
    one go, so one small request could hold the archive's thread -- and its recordings -- for as long as it liked)."""
    entries = 20_000
    harness = make_archive(max_catalog_entries=entries + 16)
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, _ = record(harness, archive, 1)
        descriptor = archive.recording(rid)
    harness.close()
    catalog = Catalog(harness.archive_dir, max_entries=entries + 16)
    try:
        for _ in range(entries):
            added = catalog.add(
                start_position=0,
                start_timestamp=1,
                initial_term_id=descriptor.initial_term_id,
                segment_file_length=descriptor.segment_file_length,
                term_buffer_length=descriptor.term_buffer_length,
                mtu_length=descriptor.mtu_length,
                session_id=1,
                stream_id=2,
                stripped_channel="aeron:ipc",
                original_channel="aeron:ipc",
                source_identity="aeron:ipc",
            )
            catalog.stop(added, 0, 2)
    finally:
        catalog.close()
    harness = make_archive(max_catalog_entries=entries + 16)
    raw = RawSession(harness.client, harness)
    try:
        find = raw.request(lambda s, c: control.FindLastMatchingRecordingRequest(s, c, 0, 42, 42, "nowhere"))
        alive = raw.request(lambda s, c: control.KeepAliveRequest(s, c))
        assert raw.answer(alive).code == ResponseCode.OK
        answered_first = [m.correlation_id for m in raw.answers if isinstance(m, ControlResponse)]
        assert find not in answered_first, "the find held the archive until it had read the whole catalog"
        assert raw.answer(find).relevant_id == -1  # nothing matched, all the way down
        same = raw.ask(lambda s, c: control.FindLastMatchingRecordingRequest(s, c, 0, 1, 2, "ipc"))
        assert same.relevant_id == rid + entries  # the last of those that match
        ours = raw.ask(
            lambda s, c: control.FindLastMatchingRecordingRequest(s, c, 0, descriptor.session_id, STREAM, "")
        )
        assert ours.relevant_id == rid
    finally:
        raw.close()


def test_a_client_does_not_choose_how_much_the_archive_allocates_for_its_answers(harness: ArchiveHarness) -> None:
    """A connect asking for 16 MiB terms on its response channel gets the archive's 64 KiB (as Aeron's archive
    strips a response channel and sets its own term length); otherwise 64 sessions could make it map 3 GiB each."""
    responses = harness.client.add_subscription("aeron:ipc", RESPONSE_STREAM)
    publication = harness.client.add_exclusive_publication(
        harness.context.control_channel, harness.context.control_stream_id
    )
    try:
        execute_until(lambda: publication.is_connected, description="control channel connected")
        request = control.ConnectRequest(1, RESPONSE_STREAM, "aeron:ipc?term-length=16m|alias=a")
        offer_all(publication, [control.encode(request)])
        image = execute_until(lambda: responses.images and responses.images[0], description="the response image")
        assert image.term_buffer_length == 64 * 1024
    finally:
        publication.close()
        responses.close()
