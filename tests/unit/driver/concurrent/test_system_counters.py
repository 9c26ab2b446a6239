from __future__ import annotations

import struct

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import (
    COUNTER_LENGTH,
    MAX_LABEL_LENGTH,
    METADATA_LENGTH,
    CountersManager,
)
from driver.concurrent.system_counters import (
    CLIENT_HEARTBEAT_TYPE_ID,
    LOCAL_SOCKET_ADDRESS_TYPE_ID,
    MAX_CHANNEL_LENGTH,
    PUBLISHER_LIMIT_NAME,
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_TYPE_ID,
    RECEIVE_CHANNEL_STATUS_TYPE_ID,
    SEND_CHANNEL_STATUS_TYPE_ID,
    SUBSCRIBER_POSITION_TYPE_ID,
    DriverSystemCounterId,
    SystemCounterId,
    SystemCounters,
    allocate_channel_status,
    allocate_client_heartbeat,
    allocate_local_socket_address,
    allocate_stream_counter,
    allocate_subscriber_position,
    local_socket_address_of,
    stream_counter_name,
    system_counter_id,
)

# Aeron 1.15.1 SystemCounterDescriptor, verbatim.
LABELS_1_15_1 = [
    "Bytes sent",
    "Bytes received",
    "Failed offers to ReceiverProxy",
    "Failed offers to SenderProxy",
    "Failed offers to DriverConductorProxy",
    "NAKs sent",
    "NAKs received",
    "Status Messages sent",
    "Status Messages received",
    "Heartbeats sent",
    "Heartbeats received",
    "Retransmits sent",
    "Flow control under runs",
    "Flow control over runs",
    "Invalid packets",
    "Errors",
    "Short sends",
    "Failed attempts to free log buffers",
    "Sender flow control limits applied",
    "Unblocked Publications",
    "Unblocked Control Commands",
    "Possible TTL Asymmetry",
    "ControllableIdleStrategy status",
    "Loss gap fills",
    "Client liveness timeouts",
]


def make(n: int = 64) -> CountersManager:
    return CountersManager(
        AtomicBuffer(bytearray(n * METADATA_LENGTH)), AtomicBuffer(bytearray(n * COUNTER_LENGTH)), lambda: 0
    )


def test_system_counter_ids_and_labels() -> None:
    assert [c.value for c in SystemCounterId] == list(range(25))
    assert [c.label for c in SystemCounterId] == LABELS_1_15_1
    assert int(SystemCounterId.CLIENT_TIMEOUTS) == 24


def test_system_counters_allocated_in_id_order() -> None:
    manager = make()
    counters = SystemCounters(manager)
    seen: list[tuple[int, int, bytes, str]] = []
    manager.for_each(lambda cid, tid, key, label: seen.append((cid, tid, key[:4], label)))
    assert seen[:25] == [(i, 0, struct.pack("<i", i), LABELS_1_15_1[i]) for i in range(25)]
    # This driver's own counters follow the generation's, keyed by their ids.
    assert seen[25:] == [(25 + i, 0, struct.pack("<i", 25 + i), c.label) for i, c in enumerate(DriverSystemCounterId)]
    assert counters.id_of(DriverSystemCounterId.IMAGES_REFUSED_INVALID_SETUP) == 25
    counters.get(SystemCounterId.ERRORS).increment()
    counters[SystemCounterId.BYTES_SENT].get_and_add(100)
    assert manager.get_counter_value(15) == 1
    assert manager.get_counter_value(0) == 100
    counters.close()
    assert manager.get_counter_state(3) == -1


@pytest.mark.parametrize("current", [False, True])
def test_a_system_counter_is_found_by_its_label_in_either_generation(current: bool) -> None:
    manager = make()
    counters = SystemCounters(manager, current=current)
    allocate_client_heartbeat(manager, 7)  # not a system counter: where the look stops
    drops = DriverSystemCounterId.RECEIVE_SOCKET_DROPS
    assert system_counter_id(manager, drops.label) == counters.id_of(drops)
    assert system_counter_id(manager, "Bytes sent") == 0
    assert system_counter_id(manager, "no such counter") == -1
    assert system_counter_id(make(), drops.label) == -1  # (Aeron's drivers have none of ours)


def test_stream_counter_key_and_label() -> None:
    manager = make()
    channel = "aeron:udp?endpoint=localhost:40123"
    cid = allocate_stream_counter(manager, PUBLISHER_LIMIT_NAME, PUBLISHER_LIMIT_TYPE_ID, 42, -7, 1001, channel)
    key = manager.get_counter_key(cid)
    assert struct.unpack_from("<qiii", key, 0) == (42, -7, 1001, len(channel))
    assert key[20 : 20 + len(channel)] == channel.encode()
    assert key[20 + len(channel) :] == bytes(112 - 20 - len(channel))
    assert manager.get_counter_label(cid) == f"pub-lmt: 42 -7 1001 {channel}"
    assert manager.get_counter_type_id(cid) == 1


def test_stream_counter_truncation() -> None:
    manager = make()
    channel = "aeron:udp?endpoint=localhost:40123|alias=" + "x" * 400
    cid = allocate_stream_counter(manager, "snd-pos", 2, 1, 2, 3, channel)
    key = manager.get_counter_key(cid)
    assert MAX_CHANNEL_LENGTH == 92
    assert struct.unpack_from("<i", key, 16)[0] == 92
    assert key[20:] == channel[:92].encode()
    label = manager.get_counter_label(cid)
    assert len(label) == MAX_LABEL_LENGTH
    assert label == ("snd-pos: 1 2 3 " + channel)[:MAX_LABEL_LENGTH]


def test_subscriber_position_suffix() -> None:
    manager = make()
    cid = allocate_subscriber_position(manager, 5, 6, 7, "aeron:ipc", 4096)
    assert manager.get_counter_label(cid) == "sub-pos: 5 6 7 aeron:ipc @4096"
    assert manager.get_counter_type_id(cid) == SUBSCRIBER_POSITION_TYPE_ID
    long_channel = "aeron:ipc?alias=" + "y" * 360
    cid = allocate_subscriber_position(manager, 5, 6, 7, long_channel, 4096)
    assert "@" not in manager.get_counter_label(cid)  # no room left: Aeron omits it


def test_client_heartbeat() -> None:
    manager = make()
    cid = allocate_client_heartbeat(manager, 1234567890123)
    assert manager.get_counter_type_id(cid) == CLIENT_HEARTBEAT_TYPE_ID
    assert manager.get_counter_label(cid) == "client-heartbeat: 1234567890123"
    assert manager.get_counter_key(cid)[:8] == struct.pack("<q", 1234567890123)
    assert manager.find_by_type_id_and_registration_id(CLIENT_HEARTBEAT_TYPE_ID, 1234567890123) == cid


def test_channel_status_reproduces_1_15_1_key() -> None:
    manager = make()
    channel = "aeron:udp?endpoint=localhost:40123"
    cid = allocate_channel_status(manager, SEND_CHANNEL_STATUS_TYPE_ID, channel)
    assert manager.get_counter_label(cid) == f"snd-channel: {channel}"
    key = manager.get_counter_key(cid)
    n = len(channel)
    assert key[:n] == struct.pack("<i", n) + channel[: n - 4].encode()
    assert key[n:] == bytes(112 - n)
    cid = allocate_channel_status(manager, RECEIVE_CHANNEL_STATUS_TYPE_ID, channel)
    assert manager.get_counter_label(cid).startswith("rcv-channel: ")
    with pytest.raises(ValueError, match="type_id"):
        allocate_channel_status(manager, 1, channel)


def test_stream_counter_names() -> None:
    assert stream_counter_name(PUBLISHER_POS_TYPE_ID) == "pub-pos (sample)"
    assert [stream_counter_name(t) for t in (1, 2, 3, 4, 5, 9)] == [
        "pub-lmt",
        "snd-pos",
        "rcv-hwm",
        "sub-pos",
        "rcv-pos",
        "snd-lmt",
    ]
    assert stream_counter_name(99) == "<unknown>"


def test_local_socket_address_key_and_label_as_later_aerons_lay_them_out() -> None:
    manager = make()
    cid = allocate_local_socket_address(manager, 17, "127.0.0.1:40123")
    assert manager.get_counter_type_id(cid) == LOCAL_SOCKET_ADDRESS_TYPE_ID == 14
    assert manager.get_counter_label(cid) == "rcv-local-sockaddr: 17 127.0.0.1:40123"
    key = manager.get_counter_key(cid)
    assert key[:8] == struct.pack("<ii", 17, 15)
    assert key[8:23] == b"127.0.0.1:40123"
    assert local_socket_address_of(key) == (17, "127.0.0.1:40123")
    # A forged length never reads past the key.
    assert local_socket_address_of(struct.pack("<ii", 3, 1 << 20) + b"x" * 104) == (3, "x" * 104)
