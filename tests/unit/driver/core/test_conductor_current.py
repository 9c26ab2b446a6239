"""The driver conductor speaking today's generation (CnC 0.2.0): commands, responses, codes, liveness."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.cnc import CncGeneration
from driver.command.current import (
    DestinationByIdMessage,
    NextSessionIdMessage,
    RejectImageMessage,
    StaticCounterMessage,
    StaticCounterResponse,
    TerminateDriverMessage,
)
from driver.command.messages import CounterMessage, PublicationMessage
from driver.command.responses import ErrorResponse, PublicationReady
from driver.command.types import CommandType, CurrentCommandType, ResponseType
from driver.concurrent.system_counters import (
    CLIENT_HEARTBEAT_TYPE_ID,
    CONTROL_PROTOCOL_VERSION,
    CurrentSystemCounterId,
    DriverSystemCounterId,
)
from driver.errors import CurrentErrorCode, ErrorCode
from support.conductor_harness import ConductorHarness


class Harness(ConductorHarness):
    """Commands and responses as raw bytes (each generation's codecs are what is under test)."""

    def send(self, command: int, body: bytes) -> None:
        self.send_raw(command, body)


@pytest.fixture
def current(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "aeron", CncGeneration.CURRENT)
    yield h
    h.close()


@pytest.fixture
def v15(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "aeron-v15", CncGeneration.V15)
    yield h
    h.close()


def errors(responses: list[tuple[int, bytes]]) -> list[ErrorResponse]:
    return [ErrorResponse.decode(body) for kind, body in responses if kind == ResponseType.ON_ERROR]


def test_today_s_system_counters_and_value_ids(current: Harness) -> None:
    reader = current.counters
    control = CurrentSystemCounterId.CONTROL_PROTOCOL_VERSION
    assert reader.get_counter_label(control) == "Control protocol version"
    assert reader.get_counter_value(control) == CONTROL_PROTOCOL_VERSION == 1 << 16
    assert reader.find_by_registration_id(0, int(control)) == control
    assert reader.get_counter_owner_id(control) == -1
    assert reader.get_counter_label(45) == "Failed offers to NativeResourceAgentProxy"


def test_1_15_generation_has_only_1_15_system_counters(v15: Harness) -> None:
    labels: dict[int, str] = {}
    v15.counters.for_each(lambda cid, type_id, key, label: labels.__setitem__(cid, label))
    # 1.15.1's 25, then this driver's own (none of today's Aeron's).
    assert max(labels) == 24 + len(DriverSystemCounterId)
    assert [labels[25 + i] for i in range(len(DriverSystemCounterId))] == [c.label for c in DriverSystemCounterId]


def test_error_codes_follow_the_generation(current: Harness, v15: Harness) -> None:
    for harness, generic in ((current, CurrentErrorCode.GENERIC_ERROR), (v15, ErrorCode.GENERIC_ERROR)):
        spy = harness.cid()
        harness.send(CommandType.ADD_PUBLICATION, PublicationMessage(harness.client_id, spy, 1, "aeron:bogus").encode())
        truncated = harness.cid()
        harness.send(
            CommandType.ADD_PUBLICATION, (harness.client_id).to_bytes(8, "little") + truncated.to_bytes(8, "little")
        )
        codes = {e.offending_correlation_id: e.error_code for e in errors(harness.work())}
        assert codes[spy] == ErrorCode.INVALID_CHANNEL
        expected_malformed = CurrentErrorCode.MALFORMED_COMMAND if harness is current else generic
        assert codes[truncated] == expected_malformed


def test_unknown_command_type_is_answered_not_ignored(current: Harness) -> None:
    cid = current.cid()
    current.send(0x7F, current.client_id.to_bytes(8, "little") + cid.to_bytes(8, "little"))
    [error] = errors(current.work())
    assert error.offending_correlation_id == cid
    assert error.error_code == CurrentErrorCode.UNKNOWN_COMMAND_TYPE_ID


def test_static_counter_is_shared_and_refused_over_an_owned_counter(current: Harness) -> None:
    first, second = current.cid(), current.cid()
    for cid in (first, second):
        body = StaticCounterMessage(current.client_id, cid, 99, 1500, b"key", "static").encode()
        current.send(CurrentCommandType.ADD_STATIC_COUNTER, body)
    answers = {
        r.correlation_id: r.counter_id
        for r in (
            StaticCounterResponse.decode(b) for k, b in current.work() if k == CurrentCommandType.ON_STATIC_COUNTER
        )
    }
    assert answers[first] == answers[second]
    counter_id = answers[first]
    assert current.counters.get_counter_registration_id(counter_id) == 99
    assert current.counters.get_counter_owner_id(counter_id) == -1
    assert current.counters.get_counter_label(counter_id) == "static"

    owned = current.cid()
    current.send(CommandType.ADD_COUNTER, CounterMessage(current.client_id, owned, 1501, b"", "owned").encode())
    [(_, ready)] = [r for r in current.work() if r[0] == ResponseType.ON_COUNTER_READY]
    owned_id = StaticCounterResponse.decode(ready).counter_id
    assert current.counters.get_counter_registration_id(owned_id) == owned
    assert current.counters.get_counter_owner_id(owned_id) == current.client_id
    clash = current.cid()
    body = StaticCounterMessage(current.client_id, clash, owned, 1501, b"", "clash").encode()
    current.send(CurrentCommandType.ADD_STATIC_COUNTER, body)
    [error] = errors(current.work())
    assert error.offending_correlation_id == clash
    assert error.error_code == CurrentErrorCode.GENERIC_ERROR


def test_next_available_session_id_skips_ones_in_use(current: Harness) -> None:
    pub = current.cid()
    current.send(
        CommandType.ADD_PUBLICATION,
        PublicationMessage(current.client_id, pub, 5, "aeron:ipc?session-id=4242").encode(),
    )
    current.work()
    current.conductor._next_session_id = 4242
    cid = current.cid()
    current.send(
        CurrentCommandType.GET_NEXT_AVAILABLE_SESSION_ID, NextSessionIdMessage(current.client_id, cid, 5).encode()
    )
    [(kind, body)] = current.work()
    assert kind == CurrentCommandType.ON_NEXT_AVAILABLE_SESSION_ID
    answer = StaticCounterResponse.decode(body)
    assert answer.correlation_id == cid
    assert answer.counter_id == 4243


def test_reject_image_is_answered_not_supported_and_unknown_image_generic(current: Harness) -> None:
    pub = current.cid()
    current.send(CommandType.ADD_PUBLICATION, PublicationMessage(current.client_id, pub, 5, "aeron:ipc").encode())
    ready = PublicationReady.decode(current.work()[0][1])
    known, unknown = current.cid(), current.cid()
    for cid, image in ((known, ready.registration_id), (unknown, 123456)):
        body = RejectImageMessage(current.client_id, cid, image, 0, "go away").encode()
        current.send(CurrentCommandType.REJECT_IMAGE, body)
    codes = {e.offending_correlation_id: e.error_code for e in errors(current.work())}
    assert codes == {known: CurrentErrorCode.NOT_SUPPORTED, unknown: CurrentErrorCode.GENERIC_ERROR}


def test_remove_destination_by_unknown_id_is_an_error(current: Harness) -> None:
    cid = current.cid()
    current.send(
        CurrentCommandType.REMOVE_DESTINATION_BY_ID, DestinationByIdMessage(current.client_id, cid, 1, 2).encode()
    )
    [error] = errors(current.work())
    assert error.error_code == CurrentErrorCode.UNKNOWN_PUBLICATION


def test_terminate_driver_needs_the_validator(tmp_path: Path) -> None:
    for setting, token, expected in (
        ("deny", b"", []),
        ("allow", b"", [True]),
        ("token:s3cret", b"wrong", []),
        ("token:s3cret", b"s3cret", [True]),
    ):
        harness = Harness(
            tmp_path / f"aeron-{len(list(tmp_path.iterdir()))}", CncGeneration.CURRENT, termination_validator=setting
        )
        try:
            body = TerminateDriverMessage(harness.client_id, harness.cid(), token).encode()
            harness.send(CurrentCommandType.TERMINATE_DRIVER, body)
            assert harness.work() == []  # never answered, as today's drivers
            assert harness.terminated == expected
        finally:
            harness.close()


def test_a_client_stamping_its_heartbeat_counter_stays_alive(current: Harness) -> None:
    """Today's clients send no keepalive: they stamp the client-heartbeat counter the driver made."""
    pub = current.cid()
    current.send(CommandType.ADD_PUBLICATION, PublicationMessage(current.client_id, pub, 5, "aeron:ipc").encode())
    current.work()
    heartbeat = current.counters.find_by_type_id_and_registration_id(CLIENT_HEARTBEAT_TYPE_ID, current.client_id)
    assert heartbeat >= 0
    assert current.counters.get_counter_registration_id(heartbeat) == current.client_id
    values = current.cnc.counters_values_buffer
    for _ in range(6):
        current.clock.advance_ms(900)
        values.put_long_ordered(heartbeat * 128, current.clock.time_ms())
        assert not any(k == ResponseType.ON_CLIENT_TIMEOUT for k, _ in current.work())
    assert current.client_id in current.conductor.clients
    timed_out = current.run_for(2_500)
    assert any(k == ResponseType.ON_CLIENT_TIMEOUT for k, _ in timed_out)
    assert current.client_id not in current.conductor.clients
