"""The end point connection counters' key: a pure codec, and how the exporter reads their labels."""

from __future__ import annotations

import attrs
import pytest

from driver.tools import families
from driver.tools.connections import (
    MESSAGES_SENT_TYPE_ID,
    RTT_TYPE_ID,
    ConnectionKey,
)
from driver.tools.stat import CounterSample

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
