"""The driver's counters as Aeron 1.15.1 lays them out, so AeronStat reads our cnc.dat.

Theory of operation
-------------------
System counters (type 0) are allocated first, in id order, so counter id ==
``SystemCounterId``; each key is the int32 id, each label the 1.15.1 text.

Stream counters (types 1-5, 9, 10, 12) share one key layout::

    0   int64  registration id
    8   int32  session id
    12  int32  stream id
    16  int32  channel length (at most 92)
    20  ...    channel, ASCII

and one label form, ``"<name>: <regId> <sessionId> <streamId> <channel>"``;
the subscriber position appends ``" @<joinPosition>"`` when the label leaves
room for it. Channel-status counters (types 6, 7) key on the channel alone and
the client heartbeat (type 11) on the int64 client id.

Beyond 1.15.1, as later Aeron versions do: a receive endpoint asked to bind port
0 publishes the address the kernel gave it in a local socket address counter
(type 14, value ``CHANNEL_STATUS_ACTIVE``), keyed on its channel status counter::

    0   int32  channel status counter id
    4   int32  address length
    8   ...    address, ASCII (``ip:port``)

so a client learns the bound port without racing anyone for it.
"""

from __future__ import annotations

import enum
import struct

from driver.concurrent.counters import (
    MAX_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    RECORD_ALLOCATED,
    AtomicCounter,
    CountersManager,
    CountersReader,
    encode_ascii,
)

__all__ = [
    "CHANNEL_OFFSET",
    "CHANNEL_STATUS_ACTIVE",
    "CHANNEL_STATUS_CLOSING",
    "CHANNEL_STATUS_ERRORED",
    "CHANNEL_STATUS_INITIALIZING",
    "CLIENT_HEARTBEAT_NAME",
    "CLIENT_HEARTBEAT_TYPE_ID",
    "CONTROL_PROTOCOL_VERSION",
    "LOCAL_SOCKET_ADDRESS_TYPE_ID",
    "MAX_CHANNEL_LENGTH",
    "MAX_CHANNEL_STATUS_CHANNEL_LENGTH",
    "PER_IMAGE_TYPE_ID",
    "PUBLISHER_LIMIT_NAME",
    "PUBLISHER_LIMIT_TYPE_ID",
    "PUBLISHER_POS_NAME",
    "PUBLISHER_POS_TYPE_ID",
    "RECEIVER_HWM_NAME",
    "RECEIVER_HWM_TYPE_ID",
    "RECEIVER_POS_NAME",
    "RECEIVER_POS_TYPE_ID",
    "RECEIVE_CHANNEL_STATUS_NAME",
    "RECEIVE_CHANNEL_STATUS_TYPE_ID",
    "RECEIVE_LOCAL_SOCKET_ADDRESS_NAME",
    "REGISTRATION_ID_OFFSET",
    "SENDER_LIMIT_NAME",
    "SENDER_LIMIT_TYPE_ID",
    "SENDER_POSITION_NAME",
    "SENDER_POSITION_TYPE_ID",
    "SEND_CHANNEL_STATUS_NAME",
    "SEND_CHANNEL_STATUS_TYPE_ID",
    "SESSION_ID_OFFSET",
    "STREAM_ID_OFFSET",
    "SUBSCRIBER_POSITION_NAME",
    "SUBSCRIBER_POSITION_TYPE_ID",
    "SYSTEM_COUNTER_TYPE_ID",
    "CurrentSystemCounterId",
    "DriverSystemCounterId",
    "SystemCounterId",
    "SystemCounters",
    "allocate_channel_status",
    "allocate_client_heartbeat",
    "allocate_local_socket_address",
    "allocate_stream_counter",
    "allocate_subscriber_position",
    "local_socket_address_of",
    "stream_counter_name",
    "system_counter_id",
]

SYSTEM_COUNTER_TYPE_ID = 0
PUBLISHER_LIMIT_TYPE_ID = 1
SENDER_POSITION_TYPE_ID = 2
RECEIVER_HWM_TYPE_ID = 3
SUBSCRIBER_POSITION_TYPE_ID = 4
RECEIVER_POS_TYPE_ID = 5
SEND_CHANNEL_STATUS_TYPE_ID = 6
RECEIVE_CHANNEL_STATUS_TYPE_ID = 7
SENDER_LIMIT_TYPE_ID = 9
PER_IMAGE_TYPE_ID = 10
CLIENT_HEARTBEAT_TYPE_ID = 11
PUBLISHER_POS_TYPE_ID = 12
LOCAL_SOCKET_ADDRESS_TYPE_ID = 14

PUBLISHER_LIMIT_NAME = "pub-lmt"
SENDER_POSITION_NAME = "snd-pos"
RECEIVER_HWM_NAME = "rcv-hwm"
SUBSCRIBER_POSITION_NAME = "sub-pos"
RECEIVER_POS_NAME = "rcv-pos"
SEND_CHANNEL_STATUS_NAME = "snd-channel"
RECEIVE_CHANNEL_STATUS_NAME = "rcv-channel"
SENDER_LIMIT_NAME = "snd-lmt"
CLIENT_HEARTBEAT_NAME = "client-heartbeat"
PUBLISHER_POS_NAME = "pub-pos (sample)"
RECEIVE_LOCAL_SOCKET_ADDRESS_NAME = "rcv-local-sockaddr"

CHANNEL_STATUS_INITIALIZING = 0
CHANNEL_STATUS_ERRORED = -1
CHANNEL_STATUS_ACTIVE = 1
CHANNEL_STATUS_CLOSING = 2

REGISTRATION_ID_OFFSET = 0
SESSION_ID_OFFSET = 8
STREAM_ID_OFFSET = 12
CHANNEL_OFFSET = 16
MAX_CHANNEL_LENGTH = MAX_KEY_LENGTH - (CHANNEL_OFFSET + 4)
MAX_CHANNEL_STATUS_CHANNEL_LENGTH = MAX_KEY_LENGTH - 4

_STREAM_KEY_HEADER = struct.Struct("<qiii")
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")

_STREAM_COUNTER_NAMES = {
    PUBLISHER_LIMIT_TYPE_ID: PUBLISHER_LIMIT_NAME,
    SENDER_POSITION_TYPE_ID: SENDER_POSITION_NAME,
    RECEIVER_HWM_TYPE_ID: RECEIVER_HWM_NAME,
    SUBSCRIBER_POSITION_TYPE_ID: SUBSCRIBER_POSITION_NAME,
    RECEIVER_POS_TYPE_ID: RECEIVER_POS_NAME,
    SENDER_LIMIT_TYPE_ID: SENDER_LIMIT_NAME,
    PUBLISHER_POS_TYPE_ID: PUBLISHER_POS_NAME,
}


class SystemCounterId(enum.IntEnum):
    """Aeron 1.15.1 ``SystemCounterDescriptor`` ids; ``.label`` is the exact 1.15.1 label."""

    BYTES_SENT = 0
    BYTES_RECEIVED = 1
    RECEIVER_PROXY_FAILS = 2
    SENDER_PROXY_FAILS = 3
    CONDUCTOR_PROXY_FAILS = 4
    NAK_MESSAGES_SENT = 5
    NAK_MESSAGES_RECEIVED = 6
    STATUS_MESSAGES_SENT = 7
    STATUS_MESSAGES_RECEIVED = 8
    HEARTBEATS_SENT = 9
    HEARTBEATS_RECEIVED = 10
    RETRANSMITS_SENT = 11
    FLOW_CONTROL_UNDER_RUNS = 12
    FLOW_CONTROL_OVER_RUNS = 13
    INVALID_PACKETS = 14
    ERRORS = 15
    SHORT_SENDS = 16
    FREE_FAILS = 17
    SENDER_FLOW_CONTROL_LIMITS = 18
    UNBLOCKED_PUBLICATIONS = 19
    UNBLOCKED_COMMANDS = 20
    POSSIBLE_TTL_ASYMMETRY = 21
    CONTROLLABLE_IDLE_STRATEGY = 22
    LOSS_GAP_FILLS = 23
    CLIENT_TIMEOUTS = 24

    @property
    def label(self) -> str:
        return _SYSTEM_COUNTER_LABELS[self]


_SYSTEM_COUNTER_LABELS: dict[SystemCounterId, str] = {
    SystemCounterId.BYTES_SENT: "Bytes sent",
    SystemCounterId.BYTES_RECEIVED: "Bytes received",
    SystemCounterId.RECEIVER_PROXY_FAILS: "Failed offers to ReceiverProxy",
    SystemCounterId.SENDER_PROXY_FAILS: "Failed offers to SenderProxy",
    SystemCounterId.CONDUCTOR_PROXY_FAILS: "Failed offers to DriverConductorProxy",
    SystemCounterId.NAK_MESSAGES_SENT: "NAKs sent",
    SystemCounterId.NAK_MESSAGES_RECEIVED: "NAKs received",
    SystemCounterId.STATUS_MESSAGES_SENT: "Status Messages sent",
    SystemCounterId.STATUS_MESSAGES_RECEIVED: "Status Messages received",
    SystemCounterId.HEARTBEATS_SENT: "Heartbeats sent",
    SystemCounterId.HEARTBEATS_RECEIVED: "Heartbeats received",
    SystemCounterId.RETRANSMITS_SENT: "Retransmits sent",
    SystemCounterId.FLOW_CONTROL_UNDER_RUNS: "Flow control under runs",
    SystemCounterId.FLOW_CONTROL_OVER_RUNS: "Flow control over runs",
    SystemCounterId.INVALID_PACKETS: "Invalid packets",
    SystemCounterId.ERRORS: "Errors",
    SystemCounterId.SHORT_SENDS: "Short sends",
    SystemCounterId.FREE_FAILS: "Failed attempts to free log buffers",
    SystemCounterId.SENDER_FLOW_CONTROL_LIMITS: "Sender flow control limits applied",
    SystemCounterId.UNBLOCKED_PUBLICATIONS: "Unblocked Publications",
    SystemCounterId.UNBLOCKED_COMMANDS: "Unblocked Control Commands",
    SystemCounterId.POSSIBLE_TTL_ASYMMETRY: "Possible TTL Asymmetry",
    SystemCounterId.CONTROLLABLE_IDLE_STRATEGY: "ControllableIdleStrategy status",
    SystemCounterId.LOSS_GAP_FILLS: "Loss gap fills",
    SystemCounterId.CLIENT_TIMEOUTS: "Client liveness timeouts",
}


class CurrentSystemCounterId(enum.IntEnum):
    """The system counters today's Aeron adds after 1.15.1's (ids 25-45); CnC 0.2.0 generation only."""

    RESOLUTION_CHANGES = 25
    CONDUCTOR_MAX_CYCLE_TIME = 26
    CONDUCTOR_CYCLE_TIME_THRESHOLD_EXCEEDED = 27
    SENDER_MAX_CYCLE_TIME = 28
    SENDER_CYCLE_TIME_THRESHOLD_EXCEEDED = 29
    RECEIVER_MAX_CYCLE_TIME = 30
    RECEIVER_CYCLE_TIME_THRESHOLD_EXCEEDED = 31
    NAME_RESOLVER_MAX_TIME = 32
    NAME_RESOLVER_TIME_THRESHOLD_EXCEEDED = 33
    AERON_VERSION = 34
    BYTES_CURRENTLY_MAPPED = 35
    RETRANSMITTED_BYTES = 36
    RETRANSMIT_OVERFLOW = 37
    ERROR_FRAMES_RECEIVED = 38
    ERROR_FRAMES_SENT = 39
    PUBLICATIONS_REVOKED = 40
    PUBLICATION_IMAGES_REVOKED = 41
    IMAGES_REJECTED = 42
    CONTROL_PROTOCOL_VERSION = 43
    STATUS_MESSAGES_REJECTED = 44
    NATIVE_RESOURCE_AGENT_PROXY_FAILS = 45

    @property
    def label(self) -> str:
        return _CURRENT_SYSTEM_COUNTER_LABELS[self]


_CURRENT_SYSTEM_COUNTER_LABELS: dict[CurrentSystemCounterId, str] = {
    CurrentSystemCounterId.RESOLUTION_CHANGES: "Resolution changes",
    CurrentSystemCounterId.CONDUCTOR_MAX_CYCLE_TIME: "Conductor max cycle time doing its work in ns",
    CurrentSystemCounterId.CONDUCTOR_CYCLE_TIME_THRESHOLD_EXCEEDED: "Conductor work cycle exceeded threshold count",
    CurrentSystemCounterId.SENDER_MAX_CYCLE_TIME: "Sender max cycle time doing its work in ns",
    CurrentSystemCounterId.SENDER_CYCLE_TIME_THRESHOLD_EXCEEDED: "Sender work cycle exceeded threshold count",
    CurrentSystemCounterId.RECEIVER_MAX_CYCLE_TIME: "Receiver max cycle time doing its work in ns",
    CurrentSystemCounterId.RECEIVER_CYCLE_TIME_THRESHOLD_EXCEEDED: "Receiver work cycle exceeded threshold count",
    CurrentSystemCounterId.NAME_RESOLVER_MAX_TIME: "NameResolver max time in ns",
    CurrentSystemCounterId.NAME_RESOLVER_TIME_THRESHOLD_EXCEEDED: "NameResolver exceeded threshold count",
    CurrentSystemCounterId.AERON_VERSION: "Aeron software: version=endpoint (python driver) commit=none",
    CurrentSystemCounterId.BYTES_CURRENTLY_MAPPED: "Bytes currently mapped",
    CurrentSystemCounterId.RETRANSMITTED_BYTES: "Retransmitted bytes",
    CurrentSystemCounterId.RETRANSMIT_OVERFLOW: "Retransmit Pool Overflow count",
    CurrentSystemCounterId.ERROR_FRAMES_RECEIVED: "Error Frames received",
    CurrentSystemCounterId.ERROR_FRAMES_SENT: "Error Frames sent",
    CurrentSystemCounterId.PUBLICATIONS_REVOKED: "Publications Revoked",
    CurrentSystemCounterId.PUBLICATION_IMAGES_REVOKED: "Publication Images Revoked",
    CurrentSystemCounterId.IMAGES_REJECTED: "Images rejected",
    CurrentSystemCounterId.CONTROL_PROTOCOL_VERSION: "Control protocol version",
    CurrentSystemCounterId.STATUS_MESSAGES_REJECTED: "Status Messages rejected",
    CurrentSystemCounterId.NATIVE_RESOURCE_AGENT_PROXY_FAILS: "Failed offers to NativeResourceAgentProxy",
}


class DriverSystemCounterId(enum.IntEnum):
    """Counters of this driver only, after the generation's own (their ids differ by generation: find them by
    label, or ask :meth:`SystemCounters.id_of`). Each counts one cause of refused work."""

    IMAGES_REFUSED_INVALID_SETUP = 0
    IMAGES_REFUSED_TERM_LENGTH = 1
    IMAGES_REFUSED_SUBSCRIPTION_LIMIT = 2
    IMAGES_REFUSED_SOURCE_LIMIT = 3
    AGENT_COMMANDS_DEFERRED = 4
    SETUPS_NOT_ELICITED = 5
    IMAGES_EVICTED_SILENT = 6
    DYNAMIC_DESTINATIONS_REFUSED = 7
    RECEIVE_SOCKET_DROPS = 8
    IMAGE_TIMEOUTS_PUT_OFF = 9

    @property
    def label(self) -> str:
        return _DRIVER_SYSTEM_COUNTER_LABELS[self]


_DRIVER_SYSTEM_COUNTER_LABELS: dict[DriverSystemCounterId, str] = {
    DriverSystemCounterId.IMAGES_REFUSED_INVALID_SETUP: "Images refused: invalid SETUP",
    DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH: "Images refused: term length over the subscription's limit",
    DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT: "Images refused: images per subscription limit",
    DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT: "Images refused: images per source address limit",
    DriverSystemCounterId.AGENT_COMMANDS_DEFERRED: "Agent commands deferred: queue full",
    DriverSystemCounterId.SETUPS_NOT_ELICITED: "Unknown sessions dropped: too many awaiting SETUP",
    DriverSystemCounterId.IMAGES_EVICTED_SILENT: "Images evicted: silent, to make room for a new one",
    DriverSystemCounterId.DYNAMIC_DESTINATIONS_REFUSED: "Dynamic destinations refused: publication full",
    DriverSystemCounterId.RECEIVE_SOCKET_DROPS: "Datagrams dropped by the kernel: receive socket full",
    DriverSystemCounterId.IMAGE_TIMEOUTS_PUT_OFF: "Image timeouts put off: silent while its socket dropped",
}


def system_counter_id(reader: CountersReader, label: str) -> int:
    """The id of the system counter labelled ``label`` in ``reader`` (a driver's counters, ours or Aeron's), or -1:
    this driver's own counters (:class:`DriverSystemCounterId`) have ids that differ by generation, and Aeron's
    drivers have none of them. System counters come first, so the look ends at the first counter after them."""
    for counter_id in range(reader.max_counter_id):
        if reader.get_counter_state(counter_id) != RECORD_ALLOCATED:
            break
        if reader.get_counter_type_id(counter_id) != SYSTEM_COUNTER_TYPE_ID:
            break
        if reader.get_counter_label(counter_id) == label:
            return counter_id
    return -1


CONTROL_PROTOCOL_VERSION = (1 << 16) | (0 << 8) | 0
"""Today's client-driver protocol version (SemanticVersion 1.0.0), read by today's clients from counter 43."""


class SystemCounters:
    """All system counters, allocated in id order at driver start.

    Each value slot carries its id as registration id and -1 as owner, as today's
    drivers write them (today's clients find counter 43 by that registration id).
    With ``current`` the counters today's Aeron added follow 1.15.1's; this driver's own
    (:class:`DriverSystemCounterId`) come last, keyed by their counter id.
    """

    def __init__(self, manager: CountersManager, current: bool = False) -> None:
        self._counters: list[AtomicCounter] = []
        ids: list[SystemCounterId | CurrentSystemCounterId | DriverSystemCounterId] = list(SystemCounterId)
        if current:
            ids.extend(CurrentSystemCounterId)
        self._driver_base = len(ids)
        ids.extend(DriverSystemCounterId)
        for index, counter_id in enumerate(ids):
            allocated = manager.allocate(
                counter_id.label,
                SYSTEM_COUNTER_TYPE_ID,
                _INT32.pack(index),
                registration_id=index,
                owner_id=-1,
            )
            self._counters.append(AtomicCounter(manager.values_buffer, allocated, manager))
        if current:
            self._counters[CurrentSystemCounterId.CONTROL_PROTOCOL_VERSION].set_ordered(CONTROL_PROTOCOL_VERSION)

    def id_of(self, counter_id: SystemCounterId | CurrentSystemCounterId | DriverSystemCounterId) -> int:
        if isinstance(counter_id, DriverSystemCounterId):
            return self._driver_base + int(counter_id)
        return int(counter_id)

    def get(self, counter_id: SystemCounterId | CurrentSystemCounterId | DriverSystemCounterId) -> AtomicCounter:
        return self._counters[self.id_of(counter_id)]

    def __getitem__(
        self, counter_id: SystemCounterId | CurrentSystemCounterId | DriverSystemCounterId
    ) -> AtomicCounter:
        return self.get(counter_id)

    def __len__(self) -> int:
        return len(self._counters)

    def close(self) -> None:
        for counter in self._counters:
            counter.close()


def stream_counter_name(type_id: int) -> str:
    """The label prefix of a stream counter type (Aeron's ``StreamPositionCounter.labelName``)."""
    return _STREAM_COUNTER_NAMES.get(type_id, "<unknown>")


def allocate_stream_counter(
    manager: CountersManager,
    name: str,
    type_id: int,
    registration_id: int,
    session_id: int,
    stream_id: int,
    channel: str,
    suffix: str = "",
    owner_id: int = 0,
) -> int:
    """Allocate a stream counter with 1.15.1's key and label; returns its id.

    The value slot also carries the registration id and the owning client (today's layout).

    ``suffix`` is appended only while the label is shorter than 360 bytes, as Aeron
    does for the subscriber position's ``" @<joinPosition>"``.
    """
    channel_key = encode_ascii(channel, MAX_CHANNEL_LENGTH)
    key = _STREAM_KEY_HEADER.pack(registration_id, session_id, stream_id, len(channel_key)) + channel_key
    label = encode_ascii(f"{name}: {registration_id} {session_id} {stream_id} ", MAX_LABEL_LENGTH)
    label += encode_ascii(channel, max(0, MAX_LABEL_LENGTH - len(label)))
    if suffix and len(label) < MAX_LABEL_LENGTH - 20:
        label += encode_ascii(suffix, MAX_LABEL_LENGTH)
    return manager.allocate_raw_label(type_id, key, label, registration_id=registration_id, owner_id=owner_id)


def allocate_subscriber_position(
    manager: CountersManager,
    registration_id: int,
    session_id: int,
    stream_id: int,
    channel: str,
    join_position: int,
) -> int:
    return allocate_stream_counter(
        manager,
        SUBSCRIBER_POSITION_NAME,
        SUBSCRIBER_POSITION_TYPE_ID,
        registration_id,
        session_id,
        stream_id,
        channel,
        f" @{join_position}",
    )


def allocate_client_heartbeat(manager: CountersManager, client_id: int) -> int:
    """Aeron 1.15.1's per-client counter (the driver stamps the last keepalive time in it)."""
    return manager.allocate_raw_label(
        CLIENT_HEARTBEAT_TYPE_ID,
        _INT64.pack(client_id),
        encode_ascii(f"{CLIENT_HEARTBEAT_NAME}: {client_id}", MAX_LABEL_LENGTH),
        registration_id=client_id,
    )


def allocate_channel_status(manager: CountersManager, type_id: int, channel: str) -> int:
    """A send (type 6) or receive (type 7) channel status counter, as 1.15.1 lays it out.

    1.15.1 copies only ``channel length`` bytes of its (int32 length + channel)
    key, so the stored key loses the channel's last four bytes; we reproduce it.
    """
    if type_id == SEND_CHANNEL_STATUS_TYPE_ID:
        name = SEND_CHANNEL_STATUS_NAME
    elif type_id == RECEIVE_CHANNEL_STATUS_TYPE_ID:
        name = RECEIVE_CHANNEL_STATUS_NAME
    else:
        raise ValueError(
            f"type_id={type_id} is invalid: must be {SEND_CHANNEL_STATUS_TYPE_ID} or {RECEIVE_CHANNEL_STATUS_TYPE_ID}"
        )
    channel_key = encode_ascii(channel, MAX_CHANNEL_STATUS_CHANNEL_LENGTH)
    key = (_INT32.pack(len(channel_key)) + channel_key)[: len(channel_key)]
    label = encode_ascii(f"{name}: ", MAX_LABEL_LENGTH)
    label += encode_ascii(channel, MAX_LABEL_LENGTH - len(label))
    return manager.allocate_raw_label(type_id, key, label)


def allocate_local_socket_address(manager: CountersManager, channel_status_id: int, address: str) -> int:
    """The bound ``ip:port`` of the receive endpoint whose channel status counter is ``channel_status_id``."""
    text = encode_ascii(address, MAX_KEY_LENGTH - 8)
    key = _INT32.pack(channel_status_id) + _INT32.pack(len(text)) + text
    label = encode_ascii(f"{RECEIVE_LOCAL_SOCKET_ADDRESS_NAME}: {channel_status_id} {address}", MAX_LABEL_LENGTH)
    return manager.allocate_raw_label(LOCAL_SOCKET_ADDRESS_TYPE_ID, key, label)


def local_socket_address_of(key: bytes) -> tuple[int, str]:
    """(channel status counter id, ``ip:port``) from a local socket address counter's key."""
    (channel_status_id,) = _INT32.unpack_from(key, 0)
    (length,) = _INT32.unpack_from(key, 4)
    length = max(0, min(length, len(key) - 8))
    return channel_status_id, key[8 : 8 + length].decode("ascii", "replace")
