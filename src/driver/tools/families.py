"""Which Prometheus metric family each Aeron counter belongs to: the exporter's catalogue.

Theory of operation: a driver's counters are of a few kinds, told apart by type
id (Aeron's ``AeronCounters``) and, for the system counters (type 0), by their
fixed label. Monotonic counts (bytes, NAKs, errors ...) become Prometheus
*counters* named ``*_total`` with their unit in the name, so ``rate()`` works on
them; positions, limits and statuses go up and down and become *gauges*. Each
kind is one family, and the stream, session and channel a counter belongs to are
labels, not part of its name. Values kept in milliseconds or nanoseconds are
scaled to seconds, Prometheus's base unit.

:func:`classify` is pure (a sample in, a family and labels out); the exporter
renders, the Grafana dashboard and its test read :data:`FAMILIES`.
"""

from __future__ import annotations

import re
from typing import Literal

import attrs

from driver.concurrent.system_counters import (
    CLIENT_HEARTBEAT_TYPE_ID,
    PER_IMAGE_TYPE_ID,
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_TYPE_ID,
    RECEIVE_CHANNEL_STATUS_TYPE_ID,
    RECEIVER_HWM_TYPE_ID,
    RECEIVER_POS_TYPE_ID,
    SEND_CHANNEL_STATUS_TYPE_ID,
    SENDER_LIMIT_TYPE_ID,
    SENDER_POSITION_TYPE_ID,
    SUBSCRIBER_POSITION_TYPE_ID,
    SYSTEM_COUNTER_TYPE_ID,
    CurrentSystemCounterId,
    DriverSystemCounterId,
    SystemCounterId,
)
from driver.tools.connections import (
    ENDPOINT_STAT_TYPE_ID,
    MESSAGES_RECEIVED_TYPE_ID,
    MESSAGES_SENT_TYPE_ID,
    RTT_TYPE_ID,
)
from driver.tools.stat import CounterSample

__all__ = [
    "ARCHIVE_REFUSALS_TYPE_ID",
    "FAMILIES",
    "RECORDING_POSITION_TYPE_ID",
    "Family",
    "Labels",
    "classify",
    "family_named",
]

RECORDING_POSITION_TYPE_ID = 100
"""Aeron Archive's recording position counter."""
ARCHIVE_REFUSALS_TYPE_ID = 4301
"""Our archive's refusal counters (``archive refused: <reason>``, one per reason)."""

Kind = Literal["counter", "gauge"]
Labels = tuple[tuple[str, str], ...]


@attrs.frozen
class Family:
    """One metric family: its name (without ``_total``), kind, unit and help, and how raw values scale."""

    name: str
    kind: Kind
    help: str
    unit: str = ""
    scale: float = 1.0
    """Multiplies the raw value: 1e-3 for milliseconds, 1e-9 for nanoseconds (Prometheus wants seconds)."""

    @property
    def sample_name(self) -> str:
        """The name samples carry: counters end in ``_total``."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


def _counter(name: str, help_text: str, unit: str = "") -> Family:
    return Family(f"aeron_driver_{name}", "counter", help_text, unit)


def _gauge(name: str, help_text: str, unit: str = "", scale: float = 1.0) -> Family:
    return Family(name, "gauge", help_text, unit, scale)


_SYSTEM: dict[str, Family] = {
    SystemCounterId.BYTES_SENT.label: _counter("sent_bytes", "Bytes the driver sent on UDP.", "bytes"),
    SystemCounterId.BYTES_RECEIVED.label: _counter("received_bytes", "Bytes the driver received on UDP.", "bytes"),
    SystemCounterId.RECEIVER_PROXY_FAILS.label: _counter("receiver_proxy_fails", "Failed offers to the receiver."),
    SystemCounterId.SENDER_PROXY_FAILS.label: _counter("sender_proxy_fails", "Failed offers to the sender."),
    SystemCounterId.CONDUCTOR_PROXY_FAILS.label: _counter("conductor_proxy_fails", "Failed offers to the conductor."),
    SystemCounterId.NAK_MESSAGES_SENT.label: _counter("naks_sent", "NAKs sent (this driver lost data)."),
    SystemCounterId.NAK_MESSAGES_RECEIVED.label: _counter("naks_received", "NAKs received (peers lost data)."),
    SystemCounterId.STATUS_MESSAGES_SENT.label: _counter("status_messages_sent", "Status messages sent."),
    SystemCounterId.STATUS_MESSAGES_RECEIVED.label: _counter("status_messages_received", "Status messages received."),
    SystemCounterId.HEARTBEATS_SENT.label: _counter("heartbeats_sent", "Data heartbeats sent."),
    SystemCounterId.HEARTBEATS_RECEIVED.label: _counter("heartbeats_received", "Data heartbeats received."),
    SystemCounterId.RETRANSMITS_SENT.label: _counter("retransmits_sent", "Retransmissions sent."),
    SystemCounterId.FLOW_CONTROL_UNDER_RUNS.label: _counter("flow_control_under_runs", "Flow control under runs."),
    SystemCounterId.FLOW_CONTROL_OVER_RUNS.label: _counter("flow_control_over_runs", "Flow control over runs."),
    SystemCounterId.INVALID_PACKETS.label: _counter("invalid_packets", "Datagrams dropped as malformed."),
    SystemCounterId.ERRORS.label: _counter("errors", "Errors the driver recorded in its error log."),
    SystemCounterId.SHORT_SENDS.label: _counter("short_sends", "Datagrams the socket sent only in part."),
    SystemCounterId.FREE_FAILS.label: _counter("free_fails", "Failed attempts to free log buffers."),
    SystemCounterId.SENDER_FLOW_CONTROL_LIMITS.label: _counter(
        "sender_flow_control_limits", "Times the sender was held back by flow control."
    ),
    SystemCounterId.UNBLOCKED_PUBLICATIONS.label: _counter(
        "unblocked_publications", "Publications unblocked after a publisher died mid-claim."
    ),
    SystemCounterId.UNBLOCKED_COMMANDS.label: _counter(
        "unblocked_commands", "Client commands unblocked after a client died mid-write."
    ),
    SystemCounterId.POSSIBLE_TTL_ASYMMETRY.label: _counter(
        "possible_ttl_asymmetry", "Multicast receivers that may be out of the sender's TTL."
    ),
    SystemCounterId.CONTROLLABLE_IDLE_STRATEGY.label: _gauge(
        "aeron_driver_controllable_idle_strategy_status", "Status of a controllable idle strategy."
    ),
    SystemCounterId.LOSS_GAP_FILLS.label: _counter("loss_gap_fills", "Gaps filled with padding after loss."),
    SystemCounterId.CLIENT_TIMEOUTS.label: _counter("client_timeouts", "Clients timed out by the driver."),
    CurrentSystemCounterId.RESOLUTION_CHANGES.label: _counter("resolution_changes", "Name resolution changes."),
    CurrentSystemCounterId.CONDUCTOR_MAX_CYCLE_TIME.label: _gauge(
        "aeron_driver_conductor_max_cycle_time_seconds", "Longest conductor duty cycle.", "seconds", 1e-9
    ),
    CurrentSystemCounterId.CONDUCTOR_CYCLE_TIME_THRESHOLD_EXCEEDED.label: _counter(
        "conductor_cycle_time_threshold_exceeded", "Conductor duty cycles over the threshold."
    ),
    CurrentSystemCounterId.SENDER_MAX_CYCLE_TIME.label: _gauge(
        "aeron_driver_sender_max_cycle_time_seconds", "Longest sender duty cycle.", "seconds", 1e-9
    ),
    CurrentSystemCounterId.SENDER_CYCLE_TIME_THRESHOLD_EXCEEDED.label: _counter(
        "sender_cycle_time_threshold_exceeded", "Sender duty cycles over the threshold."
    ),
    CurrentSystemCounterId.RECEIVER_MAX_CYCLE_TIME.label: _gauge(
        "aeron_driver_receiver_max_cycle_time_seconds", "Longest receiver duty cycle.", "seconds", 1e-9
    ),
    CurrentSystemCounterId.RECEIVER_CYCLE_TIME_THRESHOLD_EXCEEDED.label: _counter(
        "receiver_cycle_time_threshold_exceeded", "Receiver duty cycles over the threshold."
    ),
    CurrentSystemCounterId.NAME_RESOLVER_MAX_TIME.label: _gauge(
        "aeron_driver_name_resolver_max_time_seconds", "Longest name resolution.", "seconds", 1e-9
    ),
    CurrentSystemCounterId.NAME_RESOLVER_TIME_THRESHOLD_EXCEEDED.label: _counter(
        "name_resolver_time_threshold_exceeded", "Name resolutions over the threshold."
    ),
    CurrentSystemCounterId.BYTES_CURRENTLY_MAPPED.label: _gauge(
        "aeron_driver_mapped_bytes", "Bytes of log buffers the driver has mapped.", "bytes"
    ),
    CurrentSystemCounterId.RETRANSMITTED_BYTES.label: _counter("retransmitted_bytes", "Bytes retransmitted.", "bytes"),
    CurrentSystemCounterId.RETRANSMIT_OVERFLOW.label: _counter(
        "retransmit_overflows", "Retransmissions refused: the retransmit pool was full."
    ),
    CurrentSystemCounterId.ERROR_FRAMES_RECEIVED.label: _counter("error_frames_received", "Error frames received."),
    CurrentSystemCounterId.ERROR_FRAMES_SENT.label: _counter("error_frames_sent", "Error frames sent."),
    CurrentSystemCounterId.PUBLICATIONS_REVOKED.label: _counter("publications_revoked", "Publications revoked."),
    CurrentSystemCounterId.PUBLICATION_IMAGES_REVOKED.label: _counter(
        "publication_images_revoked", "Images revoked by their publisher."
    ),
    CurrentSystemCounterId.IMAGES_REJECTED.label: _counter("images_rejected", "Images rejected."),
    CurrentSystemCounterId.CONTROL_PROTOCOL_VERSION.label: _gauge(
        "aeron_driver_control_protocol_version", "The client-driver protocol version (major << 16 | minor << 8)."
    ),
    CurrentSystemCounterId.STATUS_MESSAGES_REJECTED.label: _counter(
        "status_messages_rejected", "Status messages rejected."
    ),
    CurrentSystemCounterId.NATIVE_RESOURCE_AGENT_PROXY_FAILS.label: _counter(
        "native_resource_agent_proxy_fails", "Failed offers to the native resource agent."
    ),
    DriverSystemCounterId.AGENT_COMMANDS_DEFERRED.label: _counter(
        "agent_commands_deferred", "Commands between agents deferred because a queue was full."
    ),
    DriverSystemCounterId.SETUPS_NOT_ELICITED.label: _counter(
        "unknown_sessions_dropped", "Data of unknown sessions dropped: too many awaiting SETUP."
    ),
    DriverSystemCounterId.IMAGES_EVICTED_SILENT.label: _counter(
        "images_evicted", "Silent images evicted to make room for a new one."
    ),
    DriverSystemCounterId.DYNAMIC_DESTINATIONS_REFUSED.label: _counter(
        "dynamic_destinations_refused", "Receivers not added as dynamic destinations: the publication was full."
    ),
    DriverSystemCounterId.RECEIVE_SOCKET_DROPS.label: _counter(
        "receive_socket_drops", "Datagrams the kernel dropped because a receive socket's queue was full (overload)."
    ),
    DriverSystemCounterId.IMAGE_TIMEOUTS_PUT_OFF.label: _counter(
        "image_timeouts_put_off", "Silent images kept past the liveness timeout: their socket was dropping datagrams."
    ),
}

IMAGES_REFUSED = _counter("images_refused", "Images the driver refused to create, by reason.")
_IMAGES_REFUSED_REASONS: dict[str, str] = {
    DriverSystemCounterId.IMAGES_REFUSED_INVALID_SETUP.label: "invalid_setup",
    DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH.label: "term_length",
    DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT.label: "subscription_limit",
    DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT.label: "source_limit",
}
_SOFTWARE_VERSION_PREFIX = "Aeron software:"
SOFTWARE_VERSION = _gauge("aeron_driver_software_version", "The driver's software version number.")
UNCLASSIFIED_SYSTEM = _gauge(
    "aeron_driver_unclassified_system", "A system counter this exporter does not know, by its label."
)

_STREAM_LABELS = ("registration_id", "session_id", "stream_id", "channel")
_STREAM: dict[int, Family] = {
    PUBLISHER_LIMIT_TYPE_ID: _gauge(
        "aeron_publisher_limit_bytes", "Position a publication may be written up to (pub-lmt).", "bytes"
    ),
    SENDER_POSITION_TYPE_ID: _gauge("aeron_sender_position_bytes", "Position the sender has sent (snd-pos).", "bytes"),
    RECEIVER_HWM_TYPE_ID: _gauge(
        "aeron_receiver_high_water_mark_bytes", "Highest position an image has received (rcv-hwm).", "bytes"
    ),
    SUBSCRIBER_POSITION_TYPE_ID: _gauge(
        "aeron_subscriber_position_bytes", "Position a subscriber has consumed (sub-pos).", "bytes"
    ),
    RECEIVER_POS_TYPE_ID: _gauge(
        "aeron_receiver_position_bytes", "Position an image has received without gaps (rcv-pos).", "bytes"
    ),
    SENDER_LIMIT_TYPE_ID: _gauge("aeron_sender_limit_bytes", "Position flow control lets the sender reach.", "bytes"),
    PER_IMAGE_TYPE_ID: _gauge("aeron_per_image", "A per-image counter (type 10)."),
    PUBLISHER_POS_TYPE_ID: _gauge(
        "aeron_publisher_position_bytes", "Position a publication has been written to (pub-pos).", "bytes"
    ),
}
_CHANNEL_STATUS: dict[int, Family] = {
    SEND_CHANNEL_STATUS_TYPE_ID: _gauge(
        "aeron_send_channel_status", "A send channel's status: 1 active, 0 initializing, -1 errored, 2 closing."
    ),
    RECEIVE_CHANNEL_STATUS_TYPE_ID: _gauge(
        "aeron_receive_channel_status", "A receive channel's status: 1 active, 0 initializing, -1 errored, 2 closing."
    ),
}
CLIENT_HEARTBEAT = _gauge(
    "aeron_client_heartbeat_timestamp_seconds", "When a client last stamped its heartbeat (Unix time).", "seconds", 1e-3
)
RECORDING_POSITION = _gauge(
    "aeron_archive_recording_position_bytes", "Position an archive recording has reached (rec-pos).", "bytes"
)
ARCHIVE_REFUSALS = Family(
    "aeron_archive_refusals",
    "counter",
    "Requests and inputs an archive turned away or dropped, by reason (limits, malformed, errors, answers lost).",
)
CONNECTION_RTT = _gauge(
    "aeron_endpoint_connection_rtt_seconds", "An end point connection's last round-trip time.", "seconds", 1e-9
)
CONNECTION_SENT = Family(
    "aeron_endpoint_connection_sent_messages", "counter", "Messages an end point connection has sent."
)
CONNECTION_RECEIVED = Family(
    "aeron_endpoint_connection_received_messages",
    "counter",
    "Messages an end point connection has received (keepalives included).",
)
_CONNECTION: dict[int, Family] = {
    RTT_TYPE_ID: CONNECTION_RTT,
    MESSAGES_SENT_TYPE_ID: CONNECTION_SENT,
    MESSAGES_RECEIVED_TYPE_ID: CONNECTION_RECEIVED,
}
_ENDPOINT_STAT: dict[str, Family] = {
    "connections": _gauge("aeron_endpoint_connections", "Connections a server end point holds."),
    "decode_errors": Family(
        "aeron_endpoint_decode_errors", "counter", "Messages a server end point dropped as malformed."
    ),
    "seal_failures": Family(
        "aeron_endpoint_seal_failures", "counter", "Sealed connections closed because a message did not open."
    ),
    "driver_restarts": Family(
        "aeron_endpoint_driver_restarts", "counter", "Times a server end point's driver was restarted."
    ),
    "handshake_packets": Family(
        "aeron_endpoint_handshake_packets", "counter", "Handshake packets a server end point received."
    ),
    "handshake_challenges": Family(
        "aeron_endpoint_handshake_challenges", "counter", "Cookie challenges a server end point sent."
    ),
    "handshakes_accepted": Family(
        "aeron_endpoint_handshakes_accepted", "counter", "Handshakes a server end point turned into connections."
    ),
    "sessions": _gauge(
        "aeron_endpoint_sessions", "Buffered sessions a server end point holds, connected or waiting for their client."
    ),
}
HANDSHAKE_DROPS = Family(
    "aeron_endpoint_handshake_drops", "counter", "Handshake packets a server end point dropped, by reason."
)
REJECTIONS = Family("aeron_endpoint_rejections", "counter", "Clients a server end point turned away, by reason.")
SESSION_EVENTS = Family(
    "aeron_endpoint_session_events",
    "counter",
    "Buffered sessions a server end point opened, resumed, expired, evicted, refused or closed, by event.",
)
_STAT_LABEL = re.compile(r"endpoint-stat: (server|client) (\d+) pid=(\d+) ([\w:]+)")
_CONNECTION_LABEL = re.compile(r"[\w-]+: (-?\d+) (server|client) (ipc|udp) (\S*) out=(-?\d+)/(-?\d+) in=.*")
UNCLASSIFIED = _gauge("aeron_unclassified", "A counter of a type this exporter does not know, by type id and label.")
_ARCHIVE_REFUSED_PREFIX = "archive refused: "
_RECORDING_LABEL = re.compile(r"rec-pos: (-?\d+) (-?\d+) (-?\d+) (.*)")

FAMILIES: tuple[Family, ...] = (
    *dict.fromkeys(_SYSTEM.values()),
    IMAGES_REFUSED,
    SOFTWARE_VERSION,
    UNCLASSIFIED_SYSTEM,
    *_STREAM.values(),
    *_CHANNEL_STATUS.values(),
    CLIENT_HEARTBEAT,
    RECORDING_POSITION,
    ARCHIVE_REFUSALS,
    CONNECTION_RTT,
    CONNECTION_SENT,
    CONNECTION_RECEIVED,
    *_ENDPOINT_STAT.values(),
    HANDSHAKE_DROPS,
    REJECTIONS,
    SESSION_EVENTS,
    UNCLASSIFIED,
)
"""Every family :func:`classify` can answer, in the order the exporter renders them."""


def family_named(name: str) -> Family | None:
    """The family a sample name (``..._total`` for counters) or family name belongs to."""
    for family in FAMILIES:
        if name in (family.name, family.sample_name):
            return family
    return None


def classify(sample: CounterSample) -> tuple[Family, Labels]:
    """The family of one counter and the labels that tell it apart from the others of its family."""
    type_id = sample.type_id
    if type_id == SYSTEM_COUNTER_TYPE_ID:
        family = _SYSTEM.get(sample.label)
        if family is not None:
            return family, ()
        reason = _IMAGES_REFUSED_REASONS.get(sample.label)
        if reason is not None:
            return IMAGES_REFUSED, (("reason", reason),)
        if sample.label.startswith(_SOFTWARE_VERSION_PREFIX):
            return SOFTWARE_VERSION, (("version", sample.label[len(_SOFTWARE_VERSION_PREFIX) :].strip()),)
        return UNCLASSIFIED_SYSTEM, (("label", sample.label),)
    stream = _STREAM.get(type_id)
    if stream is not None:
        return stream, tuple((name, str(getattr(sample, name))) for name in _STREAM_LABELS)
    status = _CHANNEL_STATUS.get(type_id)
    if status is not None:
        return status, (("channel", sample.channel or ""),)
    if type_id == CLIENT_HEARTBEAT_TYPE_ID:
        return CLIENT_HEARTBEAT, (("client_id", str(sample.registration_id)),)
    if type_id == RECORDING_POSITION_TYPE_ID:
        match = _RECORDING_LABEL.fullmatch(sample.label)
        if match is not None:
            recording_id, session_id, stream_id, channel = match.groups()
            return RECORDING_POSITION, (
                ("recording_id", recording_id),
                ("session_id", session_id),
                ("stream_id", stream_id),
                ("channel", channel),
            )
    if type_id == ARCHIVE_REFUSALS_TYPE_ID and sample.label.startswith(_ARCHIVE_REFUSED_PREFIX):
        return ARCHIVE_REFUSALS, (("reason", sample.label[len(_ARCHIVE_REFUSED_PREFIX) :].replace(" ", "_")),)
    connection = _CONNECTION.get(type_id)
    if connection is not None:
        match = _CONNECTION_LABEL.fullmatch(sample.label)
        if match is not None:
            connection_id, role, transport, peer, session_id, stream_id = match.groups()
            return connection, (
                ("connection_id", connection_id),
                ("role", role),
                ("transport", transport),
                ("peer", peer),
                ("session_id", session_id),
                ("stream_id", stream_id),
            )
    if type_id == ENDPOINT_STAT_TYPE_ID:
        stat = _STAT_LABEL.fullmatch(sample.label)
        if stat is not None:
            role, port, pid, name = stat.groups()
            labels: Labels = (("role", role), ("port", port), ("pid", pid))
            if name.startswith("handshake_drops:"):
                return HANDSHAKE_DROPS, (*labels, ("reason", name.partition(":")[2]))
            if name.startswith("rejections:"):
                return REJECTIONS, (*labels, ("reason", name.partition(":")[2]))
            if name.startswith("session_events:"):
                return SESSION_EVENTS, (*labels, ("event", name.partition(":")[2]))
            family = _ENDPOINT_STAT.get(name)
            if family is not None:
                return family, labels
    return UNCLASSIFIED, (("type_id", str(type_id)), ("label", sample.label))
