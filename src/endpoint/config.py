"""Configuration of end points: attrs classes, validated on creation.

Every field is checked when the object is built; a bad value raises
:class:`~endpoint.errors.ConfigurationError` naming the field, the value and
what is allowed. Fields that shape the driver (directory, threading mode, MTU,
buffer sizes) form :meth:`Configuration.driver_key`: end points in one process
whose keys are equal share one driver.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import attrs

from driver.config import ThreadingMode, configured_aeron_dir
from endpoint.errors import ConfigurationError
from endpoint.reconnect import Backoff
from endpoint.serialization import Serialization

__all__ = [
    "DEFAULT_APP_ID",
    "HANDSHAKE_STREAM_ID",
    "IPC_HANDSHAKE_STREAM_BASE",
    "IPC_REPLY_STREAM_BASE",
    "REPLY_STREAM_ID",
    "ClientConfiguration",
    "Configuration",
    "ServerConfiguration",
    "UnhandledPolicy",
    "default_aeron_dir",
]

HANDSHAKE_STREAM_ID = 0x1337CAFE
"""Stream of HELLO/DONE messages on a server's UDP port."""
IPC_HANDSHAKE_STREAM_BASE = 0x13370000
"""IPC handshakes use ``base + port``, so several IPC servers can share one driver."""
IPC_REPLY_STREAM_BASE = 0x13380000
"""An IPC server answers every IPC client on ``base + port`` (clients pick theirs out by connect key)."""
REPLY_STREAM_ID = 0x1337C0DE
"""Stream on which a UDP client hears its handshake answers, on its own port."""

_MIB = 1024 * 1024
_APP_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
IdleMode = Literal["backoff", "busy_spin"]
UnhandledPolicy = Literal["ignore", "log_once", "error"]


def _fail(field: str, value: object, allowed: str) -> ConfigurationError:
    return ConfigurationError(f"{field}={value!r} is not allowed: {allowed}")


def _power_of_two(low: int, high: int) -> Any:
    def check(inst: object, attribute: attrs.Attribute[int], value: int) -> None:
        if not isinstance(value, int) or value < low or value > high or value & (value - 1):
            raise _fail(attribute.name, value, f"a power of two from {low} to {high}")

    return check


def _int_range(low: int, high: int) -> Any:
    def check(inst: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _fail(attribute.name, value, f"an integer from {low} to {high}")

    return check


def _positive_seconds(maximum: float = 86_400.0) -> Any:
    def check(inst: object, attribute: attrs.Attribute[float], value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= maximum:
            raise _fail(attribute.name, value, f"seconds, > 0 and <= {maximum:g}")

    return check


def _mtu(inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 64 <= value <= 65504 or value % 32:
        raise _fail(attribute.name, value, "an integer from 64 to 65504 and a multiple of 32")


def _one_of(*choices: object) -> Any:
    def check(inst: object, attribute: attrs.Attribute[object], value: object) -> None:
        if value not in choices:
            raise _fail(attribute.name, value, "one of " + ", ".join(repr(c) for c in choices))

    return check


def _bool(inst: object, attribute: attrs.Attribute[bool], value: bool) -> None:
    if not isinstance(value, bool):
        raise _fail(attribute.name, value, "True or False")


def _app_id(inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _APP_ID.fullmatch(value):
        raise _fail(attribute.name, value, "1 to 32 characters of A-Z a-z 0-9 _ . -")


def _ip_address(inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        ipaddress.ip_address(value)
    except ValueError:
        raise _fail(attribute.name, value, "an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0 or ::") from None


def _networks(inst: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]) -> None:
    for item in value:
        try:
            if not isinstance(item, str):
                raise TypeError(item)
            ipaddress.ip_network(item, strict=False)
        except (ValueError, TypeError):
            raise _fail(attribute.name, item, "addresses or CIDR networks such as 10.0.0.0/8 or ::1") from None


def _id_range(inst: object, attribute: attrs.Attribute[tuple[int, int]], value: tuple[int, int]) -> None:
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(v, int) for v in value)
        or not 1 <= value[0] < value[1] <= 0x7FFF_FFFF
    ):
        raise _fail(attribute.name, value, "a pair (low, high) with 1 <= low < high <= 2**31-1")


def _tag(inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or len(value) > 32:
        raise _fail(attribute.name, value, "a string of at most 32 characters")


def _threading_mode(value: object) -> ThreadingMode:
    try:
        return ThreadingMode(value)
    except ValueError:
        allowed = ", ".join(m.value for m in ThreadingMode)
        raise _fail("threading_mode", value, f"one of {allowed}") from None


def _address_list(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Iterable):
        raise _fail(name, value, "a list of addresses or CIDR networks such as ['10.0.0.0/8']")
    return tuple(value)


def _allow_list(value: object) -> tuple[str, ...]:
    return _address_list("allow", value)


def _deny_list(value: object) -> tuple[str, ...]:
    return _address_list("deny", value)


def _optional_path(value: object) -> Path | None:
    return None if value is None else Path(str(value))


DEFAULT_APP_ID = "endpoint"
"""The app id of end points that name none: they use the default driver directory itself."""


def default_aeron_dir(app_id: str = DEFAULT_APP_ID) -> Path:
    """The driver directory of end points with this app id and no ``aeron_dir``.

    The default app id gets the directory every Aeron program of this user uses by default (``$AERON_DIR``, else
    ``/dev/shm/aeron-<user>``), so ``aeron-tools`` finds it without ``--dir``; another app id gets its own beside
    it, ``<that directory>-<app_id>``. Defined once, in :func:`driver.config.configured_aeron_dir`.
    """
    return configured_aeron_dir(None if app_id == DEFAULT_APP_ID else app_id)


@attrs.define(kw_only=True)
class Configuration:
    """What servers and clients share: the driver, the connections' logs, timeouts and serialization."""

    app_id: str = attrs.field(default=DEFAULT_APP_ID, validator=_app_id)
    """Names the shared driver directory; end points with the same app id (and settings) share one driver."""
    aeron_dir: Path | None = attrs.field(default=None, converter=_optional_path)
    """Driver directory; default :func:`default_aeron_dir` of the app id: ``$AERON_DIR`` or
    ``/dev/shm/aeron-<user>`` for the default app id (where the tools look), ``<that>-<app_id>`` for another."""
    unique_aeron_dir: bool = False
    """Give this end point a driver of its own on a fresh directory (no sharing, no IPC with other processes)."""
    launch_driver: bool = True
    """Start an embedded driver when no live driver owns the directory; False only attaches (a standalone one)."""
    threading_mode: ThreadingMode = attrs.field(default=ThreadingMode.INVOKER, converter=_threading_mode)
    driver_idle_strategy: str = attrs.field(
        default="backoff", validator=_one_of("backoff", "sleeping", "yielding", "busy_spin", "noop")
    )
    driver_timeout: float = attrs.field(default=10.0, validator=_positive_seconds(600))
    """A driver whose heartbeat is older than this is dead: connections close and the driver is restarted."""

    enable_ipc: bool = True
    enable_udp: bool = True
    mtu: int = attrs.field(default=1408, validator=_mtu)
    term_length: int = attrs.field(default=64 * 1024, validator=_power_of_two(64 * 1024, 1 << 30))
    """Term length of each connection's UDP logs; 64 KiB keeps a thousand connections small."""
    ipc_term_length: int = attrs.field(default=64 * 1024, validator=_power_of_two(64 * 1024, 1 << 30))
    sparse_logs: bool = True
    """A driver the end point launches creates its logs sparse (pages allocated as first written), as Aeron's
    ``term-buffer-sparse-file`` does: allocating a 64 KiB-term log up front zeroes ~200 KiB, a twentieth of a
    millisecond, four times per UDP connection at each end, which a connect storm pays in full. The trade, as in
    Aeron: free space is checked when a log is made, so a file system filled by others later faults the writer;
    False allocates every page at creation."""
    socket_rcvbuf: int = attrs.field(default=4 << 20, validator=_int_range(0, 1 << 30))
    """SO_RCVBUF of the driver's sockets (the kernel caps it at ``net.core.rmem_max``); 0 keeps the driver default
    (Aeron's 128 KiB). A server's one UDP socket takes every client's datagrams: 128 KiB holds about 150 small ones,
    a few milliseconds of a thousand players, so one late tick overflowed it, and the loss, NAKs and retransmits that
    followed took down hundreds of connections at once; 4 MiB rides out a late tick."""
    socket_sndbuf: int = attrs.field(default=0, validator=_int_range(0, 1 << 30))
    counters_buffer_length: int = attrs.field(default=4 << 20, validator=_power_of_two(1 << 20, 64 << 20))
    """Bytes of counter values in the embedded driver's ``cnc.dat`` (128 each, and four times as much metadata, the
    file allocated up front): 4 MiB is 32,768 counters. A UDP connection holds about 12 at each end (its streams'
    positions, the end point's three), 19 once it has newest-wins streams both ways: the default holds 2,000
    connections, or 1,700 with newest-wins streams (8 MiB: 3,400). Past 75% full the end point's own counters give
    way (connections go on without them); past 100% a new stream is refused. It takes effect in the driver an end
    point launches (one it attaches to keeps its own)."""
    heartbeat_interval: float = attrs.field(default=2.0, validator=_positive_seconds(5.0))
    """How often the driver heartbeats a connection's UDP stream with nothing to send (Aeron: every 100 ms; set on
    the connection's channel, so handshake streams keep Aeron's). An idle connection's keepalive pings (every
    ``ping_interval`` to one and a half) already prove the stream alive, so heartbeats only cost a datagram at
    both ends; at most 5 s, half the receivers' image liveness timeout."""
    tail_probe: float = attrs.field(default=0.1, validator=_positive_seconds(5.0))
    """How soon after a connection's reliable stream last sent data the driver sends one heartbeat anyway (a tail
    probe): a peer that lost the last datagrams learns of them from it and asks for them again, instead of only
    with the next message, keepalive or ``heartbeat_interval``'s heartbeat (up to seconds on a quiet stream). One
    datagram after each burst, none after a keepalive (the next one reveals a lost one); at ``heartbeat_interval``
    or above, none."""
    status_message_interval: float = attrs.field(default=1.0, validator=_positive_seconds(2.5))
    """How often the driver sends a status message for a UDP stream it receives when no reading triggered one
    (Aeron: every 200 ms). Status messages also go whenever the reader moves a quarter window, so this bounds only
    idle streams and a sender's wait after a lost one; at most 2.5 s, half the publication connection timeout."""

    handshake_timeout: float = attrs.field(default=2.0, validator=_positive_seconds(600))
    """Time for one handshake step to be answered before the client retries it."""
    connect_timeout: float = attrs.field(default=10.0, validator=_positive_seconds())
    """Bound on a whole ``connect`` (all retries)."""
    send_timeout: float = attrs.field(default=5.0, validator=_positive_seconds())
    """How long ``send`` waits out back pressure before TransmitError."""
    ping_interval: float = attrs.field(default=1.0, validator=_positive_seconds(3600))
    """A connection that has sent nothing for this long sends its peer a keepalive, at the latest half an interval
    later (so that those of many idle connections leave together; see ``endpoint.connection.liveness``)."""
    peer_timeout: float = attrs.field(default=5.0, validator=_positive_seconds(86_400))
    """A connection that hears nothing for this long is dead and closed."""
    close_timeout: float = attrs.field(default=1.0, validator=_positive_seconds(600))
    """How long a graceful close waits for the disconnect message to reach the peer."""
    native_dispatch: bool = attrs.field(default=True, validator=_bool)
    """Unsealed connections read the peer with one native call per poll: typed messages are decoded and handed to
    sync listeners without a Python frame each (everything else takes the Python path); and ``send_nowait`` hands
    a message to the log in one native call when nothing is queued. False: the Python path each way (kept to
    compare, and to rule the native one out)."""
    idle_strategy: IdleMode = attrs.field(default="backoff", validator=_one_of("backoff", "busy_spin"))
    """How the end point's poller waits when idle: ``backoff`` spins briefly then sleeps; ``busy_spin`` never sleeps."""
    rpc_timeout: float = attrs.field(default=30.0, validator=_positive_seconds())
    """Default bound on one remote call (a proxy or a call may set its own)."""
    max_pending_calls: int = attrs.field(default=65_536, validator=_int_range(1, 1 << 20))
    """Calls one connection may have awaiting answers; a call beyond it waits for a free slot (within its timeout).
    Also the most calls of the peer's this end runs at once for one connection: one more is refused
    (BudgetExceededError on both sides)."""
    max_message_size: int = attrs.field(default=64 << 20, validator=_int_range(1 << 16, 1 << 31))
    """Largest message ``send`` streams in chunks when it exceeds the connection's max message length; the
    receiver drops (and reports) a larger one rather than buffer it."""
    stream_chunk_size: int = attrs.field(default=1 << 20, validator=_int_range(1024, 16 << 20))
    """Upper bound on one chunk of a stream; chunks are also kept within the connection's max message length."""
    stream_window: int = attrs.field(default=8 << 20, validator=_int_range(1 << 16, 1 << 30))
    """Bytes of a stream the receiver buffers for a slow consumer before it stops reading the connection."""
    max_incoming_streams: int = attrs.field(default=64, validator=_int_range(1, 1 << 16))
    """Streams and large messages one connection may have arriving at once; one more is declined (the sender gets
    StreamCancelledError, this end's ``on_error`` a BudgetExceededError) and counted."""
    max_incoming_bytes: int = attrs.field(default=128 << 20, validator=_int_range(1 << 16, 1 << 40))
    """Bytes one connection may make this end hold: large messages being assembled, stream chunks not yet consumed,
    messages waiting for async listeners. A large message that would go over is dropped (and counted); streams and
    queued messages instead stop the connection being read until they drain. Keep it at least ``max_message_size``."""
    stream_stall_timeout: float = attrs.field(default=30.0, validator=_positive_seconds())
    """A large message or stream arriving that gets no chunk for this long (while this end reads the connection) is
    dropped and counted: a sender that stops half way cannot hold its bytes here for good."""

    sealed: bool = attrs.field(default=False, validator=_bool)
    """Seal every message after the handshake (AES-GCM per direction, replay window): an on-path attacker can
    neither read nor inject. A client asks for it in its HELLO; a server seals a connection when either end asks,
    so a server with ``sealed=True`` seals every connection. Costs a few microseconds per message each way."""

    buffered_sessions: bool = attrs.field(default=False, validator=_bool)
    """Buffered sessions (both ends must opt in; see docs/endpoint.md): a session is the client's key, not a
    connection. Messages sent either way while its connection is down are kept (``max_buffered_*``) and delivered
    once and in order after a reconnect within the server's ``session_timeout``. A server offers sessions, a client
    claims its one; with either end not opted in, connections are as without."""
    max_buffered_messages: int = attrs.field(default=1024, validator=_int_range(1, 1 << 20))
    """Messages kept for a peer that has not acknowledged them: per buffered session (each end, each direction),
    and by a client's ``send`` while reconnecting (``buffer_while_reconnecting``). Past it: SessionBufferFullError
    (a BudgetExceededError)."""
    max_buffered_bytes: int = attrs.field(default=4 << 20, validator=_int_range(1024, 1 << 30))
    """Encoded bytes of those kept messages."""

    on_unhandled: UnhandledPolicy = attrs.field(default="log_once", validator=_one_of("ignore", "log_once", "error"))
    """What becomes of a message no listener takes (none for its class, no catch-all): it is always dropped and
    counted (``connection.unhandled_messages``, the end point's ``unhandled_messages``); ``log_once`` also logs one
    warning per message class on the ``endpoint`` logger, ``error`` reports each to ``on_error`` as an
    :class:`~endpoint.errors.UnhandledMessageError` with its connection, ``ignore`` does nothing more."""

    serialization: Serialization = attrs.field(factory=Serialization)

    def __attrs_post_init__(self) -> None:
        if not (self.enable_ipc or self.enable_udp):
            raise ConfigurationError("enable_ipc=False and enable_udp=False leave no transport: enable one")
        if self.socket_sndbuf and self.socket_sndbuf < self.mtu:
            raise ConfigurationError(
                f"socket_sndbuf={self.socket_sndbuf!r} is not allowed: 0 (the OS default) or at least mtu={self.mtu}"
            )
        if self.peer_timeout <= self.ping_interval:
            raise ConfigurationError(
                f"peer_timeout={self.peer_timeout!r} must be longer than ping_interval={self.ping_interval!r}"
            )

    def resolved_aeron_dir(self) -> Path:
        return self.aeron_dir if self.aeron_dir is not None else default_aeron_dir(self.app_id)

    def driver_key(self) -> tuple[object, ...]:
        """What must be equal for two end points to share one driver."""
        return (
            str(self.resolved_aeron_dir()),
            self.threading_mode,
            self.driver_idle_strategy,
            self.mtu,
            self.socket_rcvbuf,
            self.socket_sndbuf,
            self.counters_buffer_length,
            self.status_message_interval,
            self.sparse_logs,
            self.launch_driver,
            self.driver_timeout,
        )


@attrs.define(kw_only=True)
class ServerConfiguration(Configuration):
    port: int = attrs.field(default=2000, validator=_int_range(0, 65535))
    """UDP port of the handshake and of every connection's inbound stream; also names the IPC handshake stream.
    0: the driver binds a free port when the server binds, and ``Server.port`` says which (tests, ad hoc servers)."""
    listen_address: str = attrs.field(default="127.0.0.1", validator=_ip_address)
    """Address to bind; ``0.0.0.0`` (or ``::``) for every interface."""
    control_port: int = attrs.field(default=0, validator=_int_range(0, 65535))
    """UDP port the server's streams to clients leave from and the clients' status messages come back to (their
    NATs learn it; see docs/endpoint.md, NAT). 0: ``port + 1`` (with ``port=0`` the server picks a pair of free
    ports); clients use ``port + 1`` unless told otherwise."""
    max_clients: int = attrs.field(default=0, validator=_int_range(0, 1 << 20))
    """0 = no limit."""
    max_connections_per_ip: int = attrs.field(default=0, validator=_int_range(0, 1 << 20))
    """0 = no limit; IPC connections are not counted."""
    allow: tuple[str, ...] = attrs.field(default=(), converter=_allow_list, validator=_networks)
    """When not empty, only these addresses or networks may connect over UDP."""
    deny: tuple[str, ...] = attrs.field(default=(), converter=_deny_list, validator=_networks)
    """These may never connect over UDP (deny wins over allow)."""
    session_id_range: tuple[int, int] = attrs.field(default=(0x1000_0000, 0x7FFF_FFFF), validator=_id_range)
    stream_id_range: tuple[int, int] = attrs.field(default=(0x1000, 0xFFFF), validator=_id_range)
    key_path: Path | None = attrs.field(default=None, converter=_optional_path)
    """The server's X25519 private key file (created on first use); None: ``server-<port>.key`` in the user's
    configuration directory (``$ENDPOINT_CONFIG_DIR``, ``$XDG_CONFIG_HOME/endpoint`` or ``~/.config/endpoint``)."""
    ephemeral_key: bool = False
    """A fresh key each start, kept nowhere (clients that pinned this server will refuse it after a restart)."""
    max_pending_handshakes: int = attrs.field(default=1024, validator=_int_range(1, 1 << 20))
    max_pending_per_source: int = attrs.field(default=256, validator=_int_range(1, 1 << 20))
    """Handshakes in flight from one remote address (one NAT may hide many clients). When either cap is reached the
    oldest half-open handshake (of that address, or overall) gives way and its client is told SERVER_BUSY."""
    cookie_period: float = attrs.field(default=30.0, validator=_positive_seconds(3600))
    """The handshake cookie's secret rotates this often; a cookie is good for one to two periods."""
    max_answer_routes: int = attrs.field(default=512, validator=_int_range(1, 1 << 16))
    """Answer routes the server keeps at once, one per client route (its cookies and handshake answers go out on
    them, to wherever that route's status messages come from); when full, the oldest not serving a handshake in
    flight is closed (one whose client got no cookie within a handshake timeout, if any)."""
    max_answer_routes_per_source: int = attrs.field(default=256, validator=_int_range(1, 1 << 16))
    """Of those, to one remote address (one NAT may hide many clients); beyond it that address's oldest idle one is
    closed, or the answer dropped (the client asks again)."""
    max_routes_per_source: int = attrs.field(default=64, validator=_int_range(1, 1 << 16))
    """Client routes (a route per client process, or per client with a port of its own) one remote address may
    hold on the server's handshake stream at once; the driver refuses more until one ends. The stream holds 1,024
    routes in all, so 1,024 / this many flooding addresses fill it: at 64, eight flooding addresses hold half of it
    and a lone client still gets in at once; at 256 the same flood kept clients out for seconds. A host of many
    client processes connecting at once (or a NAT) waits its turns past this figure: raise it for such a host,
    within ``max_answer_routes_per_source`` and ``max_pending_per_source``."""
    max_groups: int = attrs.field(default=65_536, validator=_int_range(1, 1 << 24))
    """Groups (``server.group(name)``) the server holds at once; one more is a BudgetExceededError. A group's members
    are the server's open connections, each at most once, so no group outgrows ``max_clients``."""
    unreliable_streams: bool = attrs.field(default=True, validator=_bool)
    """UDP connections that are not sealed carry newest-wins messages (``send_unreliable``) on an Aeron stream of
    their own each way, ``reliable=false`` (loss is skipped, never repaired, so a lost snapshot holds back none after
    it), opened on first use. False: they ride the reliable stream (still newest-wins, but loss is repaired first)."""
    session_timeout: float = attrs.field(default=120.0, validator=_positive_seconds())
    """With ``buffered_sessions``: how long a session outlives its lost connection; past it the session and what it
    kept are dropped (counted, ``on_session_expired`` told). Keep it above the clients' ``peer_timeout``."""
    max_sessions: int = attrs.field(default=1024, validator=_int_range(1, 1 << 20))
    """Buffered sessions held at once (connected or waiting for their client); a new one makes the longest-detached
    give way, and with none detached the client connects without a session (counted)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        low, high = self.stream_id_range
        if high - low + 1 < 8:
            raise ConfigurationError(f"stream_id_range={self.stream_id_range!r} is too small: at least 8 ids needed")


@attrs.define(kw_only=True)
class ClientConfiguration(Configuration):
    prefer_ipc: bool = True
    """Use IPC when the server is on this machine and shares our driver directory."""
    local_address: str | None = attrs.field(default=None)
    """Address on which a UDP client hears the server; None picks the one routing to the server."""
    local_port: int = attrs.field(default=0, validator=_int_range(0, 65535))
    """UDP port of the client's handshake answers and inbound streams; 0 uses its handshake route's (a free port,
    shared by the clients on one event loop that reach the same server through the same driver)."""
    tag: str = attrs.field(default="", validator=_tag)
    auto_reconnect: bool = False
    """Reconnect (with the saved address) after the driver restarts, the connection drops uncleanly, or the server
    shut down (a supervisor may be restarting it); not after the server closed the connection with a reason.
    Attempts are spaced by exponential backoff with jitter (``reconnect_*``); ``on_reconnecting`` and
    ``on_reconnected`` listeners are told, and giving up reaches ``on_error`` as ReconnectFailedError."""
    reconnect_initial_delay: float = attrs.field(default=0.1, validator=_positive_seconds(3600))
    """Upper bound of the (jittered) wait before the first reconnect attempt; it doubles with each attempt."""
    reconnect_max_delay: float = attrs.field(default=10.0, validator=_positive_seconds(3600))
    """The longest wait between two reconnect attempts."""
    reconnect_jitter: Literal["full", "decorrelated"] = attrs.field(
        default="full", validator=_one_of("full", "decorrelated")
    )
    """``full``: each wait is drawn from [0, the doubled bound]; ``decorrelated``: from [initial, 3 x the last]."""
    reconnect_timeout: float = attrs.field(default=60.0, validator=_positive_seconds())
    """Give up reconnecting (ReconnectFailedError to ``on_error``) this long after the connection was lost; each
    attempt is bounded by ``connect_timeout`` and by what is left of this."""
    buffer_while_reconnecting: bool = attrs.field(default=False, validator=_bool)
    """With ``auto_reconnect``: ``client.send`` while the client reconnects keeps the message (bounded by
    ``max_buffered_messages`` and ``max_buffered_bytes``; BudgetExceededError past them) and the new connection
    delivers the kept ones once, in order, before later ones; they are dropped if reconnecting gives up. (Only
    what this client sends; ``buffered_sessions`` keeps both directions, exactly once, across process restarts.)"""
    session_key_path: Path | None = attrs.field(default=None, converter=_optional_path)
    """With ``buffered_sessions``: the client's X25519 private key file, its session's identity (created on first
    use, 0o600). A restarted process with the same file resumes the same session on the server; None: a key in
    memory, so the session survives reconnects of this client object only."""
    known_servers_path: Path | None = attrs.field(default=None, converter=_optional_path)
    """Trust-on-first-use store of server keys; None: ``known_servers.json`` in the user's configuration directory
    (see ``ServerConfiguration.key_path``)."""
    remember_servers: bool = True
    """False keeps pins in memory for this client only (nothing read or written)."""
    allow_server_key_change: bool = False
    """Accept a server whose key differs from the stored one (and store the new key)."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        if self.reconnect_initial_delay > self.reconnect_max_delay:
            raise ConfigurationError(
                f"reconnect_initial_delay={self.reconnect_initial_delay!r} must not exceed "
                f"reconnect_max_delay={self.reconnect_max_delay!r}"
            )
        if self.local_address is not None:
            try:
                if not isinstance(self.local_address, str):
                    raise ValueError(self.local_address)
                ipaddress.ip_address(self.local_address)
            except ValueError:
                raise _fail("local_address", self.local_address, "an IPv4 or IPv6 address of this machine") from None

    def reconnect_backoff(self) -> Backoff:
        """The backoff policy the ``reconnect_*`` fields describe."""
        return Backoff(
            initial_delay=self.reconnect_initial_delay, max_delay=self.reconnect_max_delay, jitter=self.reconnect_jitter
        )
