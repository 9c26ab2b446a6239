"""The end point connection counters' key: a pure codec, and how the exporter reads their labels."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from driver.tools import families
from driver.tools.cli import main
from driver.tools.connections import (
    MESSAGES_RECEIVED_TYPE_ID,
    MESSAGES_SENT_TYPE_ID,
    RTT_TYPE_ID,
    ConnectionKey,
    connections_json,
    format_connections,
    read_connections,
    run_live,
)
from driver.tools.stat import CounterSample, CounterSource
from support.tool_dirs import FakeDriverDir

KEY = ConnectionKey(
    connection_id=914529093,
    opened_ms=1_795_367_667_905,
    pid=4321,
    transport="udp",
    role="server",
    out_session_id=-1870994132,
    out_stream_id=21473,
    in_session_id=914529093,
    in_stream_id=57407,
    peer="127.0.0.1:52683",
)


def test_key_round_trips_and_fits_a_counter_key() -> None:
    encoded = KEY.encode()
    assert len(encoded) <= 112
    assert ConnectionKey.decode(encoded) == KEY
    assert ConnectionKey.decode(encoded + b"\0" * 20) == KEY  # the driver pads keys with zeros


def test_a_long_peer_is_cut_to_fit() -> None:
    key = attrs.evolve(KEY, peer="[" + "f" * 200 + "]:1")
    encoded = key.encode()
    assert len(encoded) == 112
    decoded = ConnectionKey.decode(encoded)
    assert decoded is not None
    assert key.peer.startswith(decoded.peer)


@pytest.mark.parametrize("cut", [0, 1, 20, 43])
def test_a_short_key_is_not_ours(cut: int) -> None:
    assert ConnectionKey.decode(KEY.encode()[:cut]) is None


def test_fields_out_of_range_are_not_ours() -> None:
    encoded = bytearray(KEY.encode())
    encoded[36] = 7  # transport
    assert ConnectionKey.decode(bytes(encoded)) is None


def test_exporter_labels_come_from_the_counter_label() -> None:
    for type_id, family in ((RTT_TYPE_ID, families.CONNECTION_RTT), (MESSAGES_SENT_TYPE_ID, families.CONNECTION_SENT)):
        sample = CounterSample(counter_id=40, value=180_000, type_id=type_id, label=KEY.label(type_id))
        got, labels = families.classify(sample)
        assert got is family
        assert dict(labels) == {
            "connection_id": "914529093",
            "role": "server",
            "transport": "udp",
            "peer": "127.0.0.1:52683",
            "session_id": "-1870994132",
            "stream_id": "21473",
        }


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeDriverDir]:
    directory = FakeDriverDir(tmp_path / "aeron")
    try:
        yield directory
    finally:
        directory.close()


def _add_connection(fake: FakeDriverDir, key: ConnectionKey, rtt_ns: int, sent: int, received: int) -> list[int]:
    ids = []
    for type_id, value in ((RTT_TYPE_ID, rtt_ns), (MESSAGES_SENT_TYPE_ID, sent), (MESSAGES_RECEIVED_TYPE_ID, received)):
        counter_id = fake.counters.allocate(key.label(type_id), type_id, key.encode())
        fake.set_value(counter_id, value)
        ids.append(counter_id)
    return ids


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_795_367_677_905

    def __call__(self) -> int:
        return self.now_ms


def test_readings_join_the_connection_with_its_stream_positions(fake: FakeDriverDir) -> None:
    """The IPC stream of the fake driver (session 11, stream 1001) is this connection's both ways."""
    key = attrs.evolve(KEY, transport="ipc", peer="ipc", out_session_id=11, out_stream_id=1001, in_session_id=11)
    key = attrs.evolve(key, in_stream_id=1001)
    rtt_id, sent_id, received_id = _add_connection(fake, key, 250_000, 10, 12)
    clock = Clock()
    source = CounterSource(fake.directory)
    try:
        before = read_connections(source, clock)
        fake.set_value(sent_id, 20)
        fake.set_value(fake.ipc_sub_pos, 2048)
        clock.now_ms += 1000
        after = read_connections(source, clock)
    finally:
        source.close()
    [row] = after.rows
    assert row.key == key
    assert row.rtt_ns == 250_000
    assert (row.messages_sent, row.messages_received) == (20, 12)
    assert row.bytes_sent == 4096  # pub-pos
    assert row.bytes_received == 2048  # sub-pos
    assert row.headroom == 69632 - 4096  # pub-lmt - pub-pos
    doc = json.loads(connections_json(after, before))
    [entry] = doc["connections"]
    assert entry["age_s"] == 11.0  # opened 10 s before the first reading, 1 s before the second
    assert entry["rates"]["messages_out"] > 0
    assert entry["rates"]["bytes_in"] > 0
    assert entry["rates"]["messages_in"] == 0
    text = format_connections(after, before)
    assert "1 end point connection(s)" in text
    assert "250 us" in text
    assert "ipc" in text
    fake.set_value(rtt_id, -1)
    fake.set_value(received_id, 13)
    source = CounterSource(fake.directory)
    try:
        assert read_connections(source).rows[0].rtt_ns is None
    finally:
        source.close()


def test_live_view_renders_with_rich(fake: FakeDriverDir, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    monkeypatch.setenv("COLUMNS", "200")  # rich's width when not on a terminal
    _add_connection(fake, KEY, 1_500_000, 1, 1)
    out = io.StringIO()
    source = CounterSource(fake.directory)
    try:
        assert run_live(source, 0.01, 2, out) == 0
    finally:
        source.close()
    text = out.getvalue()
    assert "127.0.0.1:52683" in text
    assert "1.500 ms" in text


def test_cli_connections_once_and_json(fake: FakeDriverDir) -> None:
    _add_connection(fake, KEY, 1_500_000, 5, 6)
    out = io.StringIO()
    assert main(["connections", "-d", str(fake.directory), "--json", "--interval", "0.05"], out=out) == 0
    [entry] = json.loads(out.getvalue())["connections"]
    assert (entry["id"], entry["role"], entry["transport"], entry["peer"]) == (914529093, "server", "udp", KEY.peer)
    out = io.StringIO()
    assert main(["connections", "-d", str(fake.directory), "--once", "--interval", "0.05"], out=out) == 0
    assert "127.0.0.1:52683" in out.getvalue()
