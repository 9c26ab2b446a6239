"""Driver and client settings, named and defaulted as in Aeron 1.15.1.

Every setting has Aeron's system-property name (``aeron.mtu.length``) and the
environment form the C driver reads (``AERON_MTU_LENGTH``: upper case, dots to
underscores). Values given as text are parsed the Aeron way: sizes take k/m/g,
durations ns/us/ms/s (plain numbers are ns), booleans are "true"/anything else.
Construction only converts; :meth:`DriverContext.conclude` checks every field
and raises :class:`~driver.errors.DriverConfigurationError` naming the property, the
value and the allowed range, so a bad setting fails before any file is made.

Settings this implementation adds: ``aeron.cnc.version`` (``AERON_CNC_VERSION``:
"current", the default, for today's CnC 0.2.0 layout that today's C and Java
clients need; "15" for Aeron 1.15.x clients and tools, which accept nothing
else), ``aeron.driver.termination.validator`` (today's TERMINATE_DRIVER command:
"deny", the default, "allow", or "token:<text>" to accept that token only) and
``aeron.dir.delete.on.shutdown`` (later Aeron properties; 1.15.1 has neither).

Bounds on what a packet from the network can make the driver allocate (our own;
Aeron has none of them): ``aeron.receiver.max.term.length`` (the longest term a
SETUP may ask an image for), ``aeron.receiver.max.images.per.subscription`` and
``aeron.receiver.max.images.per.source`` (images one subscription holds, in all
and from one source address), and ``aeron.receiver.sparse.image.threshold``
(image logs longer than this are sparse: their pages cost memory only once data
fills them). ``aeron.driver.command.queue.capacity`` bounds each queue between
the driver's agents.
"""

from __future__ import annotations

import enum
import getpass
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
from attrs import AttrsInstance

from driver.cnc import CNC_FILE, CncGeneration
from driver.errors import DriverConfigurationError
from driver.int32 import INT32_MAX as _INT32_MAX
from driver.logbuffer.frame import FRAME_ALIGNMENT
from driver.media.faults import FaultSpec
from driver.uri import parse_duration_ns, parse_size

__all__ = [
    "IDLE_STRATEGY_FIELDS",
    "IDLE_STRATEGY_NAMES",
    "ClientContext",
    "DriverContext",
    "ThreadingMode",
    "configured_aeron_dir",
    "default_aeron_dir",
    "default_user_name",
    "env_name",
    "normalize_idle_strategy",
]

IDLE_STRATEGY_FIELDS = (
    "conductor_idle_strategy",
    "sender_idle_strategy",
    "receiver_idle_strategy",
    "shared_network_idle_strategy",
    "shared_idle_strategy",
)
"""The driver context's idle strategy settings, one per agent composition."""
_TERM_MIN_LENGTH = 64 * 1024
_TERM_MAX_LENGTH = 1024 * 1024 * 1024
_PAGE_MIN_SIZE = 4 * 1024
_PAGE_MAX_SIZE = 1024 * 1024 * 1024
_MAX_UDP_PAYLOAD_LENGTH = 65504
_RING_TRAILER_LENGTH = 768
_BROADCAST_TRAILER_LENGTH = 128
_COUNTER_LENGTH = 128
_COUNTERS_METADATA_RATIO = 4
_MIB = 1024 * 1024


def default_user_name() -> str:
    """The user part of default directory names: the login name, else the uid, else ``default``.

    The login name comes from the environment (``LOGNAME``, ``USER``...) or the password database, as Aeron's
    ``user.name``; a process whose uid has no name (a container's bare uid) gets the uid's digits.
    """
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment or the password database
        getuid = getattr(os, "getuid", None)
        return str(getuid()) if getuid is not None else "default"


def default_aeron_dir(app_id: str | None = None) -> Path:
    """``/dev/shm/aeron-<user>`` on Linux when /dev/shm exists, else ``<tmp>/aeron-<user>`` (as Aeron).

    This is the one definition of the default driver directory: the driver, its clients, the tools and the
    end points all use it. An ``app_id`` names a directory of its own beside it, ``aeron-<user>-<app_id>``.
    ``$AERON_DIR`` is not read here (see :func:`configured_aeron_dir`).
    """
    name = f"aeron-{default_user_name()}" if app_id is None else f"aeron-{default_user_name()}-{app_id}"
    if sys.platform.startswith("linux") and os.path.isdir("/dev/shm"):
        return Path("/dev/shm") / name
    return Path(tempfile.gettempdir()) / name


def configured_aeron_dir(app_id: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The directory a program uses when none is given in code: ``$AERON_DIR`` if set, else the default.

    With an ``app_id`` it is ``<that directory>-<app_id>``. Tools and end points call this, so setting
    ``AERON_DIR`` moves both together (and a test can move them off the real default).
    """
    env = os.environ if environ is None else environ
    configured = env.get(env_name("aeron.dir"))
    if not configured:
        return default_aeron_dir(app_id)
    base = Path(configured)
    return base if app_id is None else base.with_name(f"{base.name}-{app_id}")


def env_name(property_name: str) -> str:
    """The environment variable for an Aeron property: ``aeron.dir`` -> ``AERON_DIR``."""
    return property_name.upper().replace(".", "_")


class ThreadingMode(enum.Enum):
    """How the driver's conductor, sender and receiver agents share threads."""

    DEDICATED = "DEDICATED"  # a thread each
    SHARED_NETWORK = "SHARED_NETWORK"  # sender and receiver share one, conductor its own
    SHARED = "SHARED"  # one thread for all three
    INVOKER = "INVOKER"  # no thread: the embedding application calls the duty cycle


IDLE_STRATEGY_NAMES: tuple[str, ...] = ("backoff", "busy_spin", "yielding", "sleeping", "noop")

_IDLE_ALIASES = {
    "backoff": "backoff",
    "busy_spin": "busy_spin",
    "busyspin": "busy_spin",
    "spin": "busy_spin",
    "yielding": "yielding",
    "sleeping": "sleeping",
    "sleepingmillis": "sleeping",
    "noop": "noop",
}


def normalize_idle_strategy(name: str, field: str = "idle strategy") -> str:
    """A short idle strategy name from a short name or an Agrona/Aeron class name.

    ``org.agrona.concurrent.BusySpinIdleStrategy`` -> ``busy_spin``;
    ``SleepingMillisIdleStrategy`` -> ``sleeping``.
    """
    key = name.strip().rsplit(".", 1)[-1].lower()
    if key.endswith("idlestrategy") and key != "idlestrategy":
        key = key[: -len("idlestrategy")]
    short = _IDLE_ALIASES.get(key)
    if short is None:
        raise DriverConfigurationError(
            field, name, f"one of {', '.join(IDLE_STRATEGY_NAMES)} or an Agrona idle strategy class name"
        )
    return short


# ---------------------------------------------------------------------------------------------- parsing


class _Kind(enum.Enum):
    SIZE = "size"
    DURATION = "duration"
    MILLIS = "millis"
    INT = "int"
    BOOL = "bool"
    PATH = "path"
    THREADING = "threading"
    IDLE = "idle"
    CNC = "cnc"
    RATE = "rate"
    TEXT = "text"


def _parse_text(kind: _Kind, prop: str, text: str) -> object:
    text = text.strip()
    if kind is _Kind.SIZE:
        return parse_size(text, prop)
    if kind is _Kind.DURATION:
        return parse_duration_ns(text, prop)
    if kind is _Kind.MILLIS:
        # Aeron reads aeron.driver.timeout as plain milliseconds; a suffixed duration is accepted too.
        if text.lstrip("-").isdigit():
            return int(text)
        return parse_duration_ns(text, prop) // 1_000_000
    if kind is _Kind.INT:
        try:
            return int(text, 10)
        except ValueError:
            raise DriverConfigurationError(prop, text, "an integer") from None
    if kind is _Kind.BOOL:
        return text.lower() == "true"
    if kind is _Kind.PATH:
        if not text:
            raise DriverConfigurationError(prop, text, "a directory path")
        return Path(text)
    if kind is _Kind.THREADING:
        try:
            return ThreadingMode[text.upper()]
        except KeyError:
            raise DriverConfigurationError(prop, text, f"one of {', '.join(m.name for m in ThreadingMode)}") from None
    if kind is _Kind.IDLE:
        return normalize_idle_strategy(text, prop)
    if kind is _Kind.TEXT:
        return text
    if kind is _Kind.RATE:
        try:
            return float(text)
        except ValueError:
            raise DriverConfigurationError(prop, text, "a rate between 0 and 1") from None
    return CncGeneration.parse(text)


def _format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        if isinstance(value, CncGeneration):
            return "15" if value is CncGeneration.V15 else "current"
        return str(value.value)
    return str(value)


def _to_path(value: str | os.PathLike[str]) -> Path:
    return value if isinstance(value, Path) else Path(value)


def _meta(prop: str | None, kind: _Kind) -> dict[str, object]:
    """attrs field metadata: the Aeron property name (None: settable only by keyword) and how to parse text."""
    return {"property": prop, "kind": kind}


_T = TypeVar("_T", bound=AttrsInstance)


def _build(cls: type[_T], lookup: Callable[[str], str | None], overrides: Mapping[str, object]) -> _T:
    """Collect constructor arguments from text settings, then apply overrides (typed or text)."""
    fields = {a.name: a for a in attrs.fields(cls)}
    unknown = set(overrides) - set(fields)
    if unknown:
        raise DriverConfigurationError(
            ", ".join(sorted(unknown)), None, f"a {cls.__name__} field ({', '.join(sorted(fields))})"
        )
    kwargs: dict[str, object] = {}
    for name, attribute in fields.items():
        prop = attribute.metadata.get("property")
        kind = attribute.metadata.get("kind")
        if name in overrides:
            value = overrides[name]
            if isinstance(value, str) and kind is not None:
                value = _parse_text(kind, prop or name, value)
            kwargs[name] = value
        elif prop is not None and kind is not None:
            text = lookup(prop)
            if text is not None:
                kwargs[name] = _parse_text(kind, prop, text)
    return cls(**kwargs)


def _properties_of(instance: AttrsInstance) -> dict[str, str]:
    out: dict[str, str] = {}
    for attribute in attrs.fields(type(instance)):
        prop = attribute.metadata.get("property")
        if prop is not None:
            out[prop] = _format_value(getattr(instance, attribute.name))
    return out


class _Checker:
    """Validation helpers that name the property of the field they check."""

    def __init__(self, instance: AttrsInstance) -> None:
        self._instance = instance
        self._props = {a.name: a.metadata.get("property") or a.name for a in attrs.fields(type(instance))}

    def prop(self, name: str) -> str:
        return str(self._props[name])

    def value(self, name: str) -> Any:
        return getattr(self._instance, name)

    def fail(self, name: str, allowed: str) -> DriverConfigurationError:
        return DriverConfigurationError(self.prop(name), self.value(name), allowed)

    def int_range(self, name: str, low: int, high: int) -> int:
        value = self.value(name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(name, f"an integer in {low}..{high}")
        return value

    def power_of_two(self, name: str, low: int, high: int, plus: int = 0, unit: str = "") -> None:
        value = self.value(name)
        ok = isinstance(value, int) and not isinstance(value, bool) and low + plus <= value <= high + plus
        if ok:
            body = value - plus
            ok = body > 0 and body & (body - 1) == 0
        if not ok:
            extra = f" + {plus} bytes of trailer" if plus else ""
            raise self.fail(name, f"a power of two in {low}..{high}{unit}{extra}")

    def mtu(self, name: str) -> None:
        value = self.int_range(name, FRAME_ALIGNMENT, _MAX_UDP_PAYLOAD_LENGTH)
        if value % FRAME_ALIGNMENT:
            raise self.fail(name, f"a multiple of {FRAME_ALIGNMENT} in {FRAME_ALIGNMENT}..{_MAX_UDP_PAYLOAD_LENGTH}")

    def timeout(self, name: str, allow_zero: bool = False) -> None:
        low = 0 if allow_zero else 1
        self.int_range(name, low, (1 << 63) - 1)

    def boolean(self, name: str) -> None:
        if not isinstance(self.value(name), bool):
            raise self.fail(name, "true or false")

    def idle(self, name: str) -> None:
        value = self.value(name)
        if not isinstance(value, str) or normalize_idle_strategy(value, self.prop(name)) != value:
            raise self.fail(name, f"one of {', '.join(IDLE_STRATEGY_NAMES)}")

    def instance(self, name: str, kind: type) -> None:
        if not isinstance(self.value(name), kind):
            raise self.fail(name, f"a {kind.__name__}")


# ---------------------------------------------------------------------------------------------- driver


@attrs.frozen
class DriverContext:
    """Every media driver setting; defaults are Aeron 1.15.1's."""

    aeron_dir: Path = attrs.field(
        factory=default_aeron_dir, converter=_to_path, metadata=_meta("aeron.dir", _Kind.PATH)
    )
    dir_delete_on_start: bool = attrs.field(default=False, metadata=_meta("aeron.dir.delete.on.start", _Kind.BOOL))
    dir_delete_on_shutdown: bool = attrs.field(
        default=False, metadata=_meta("aeron.dir.delete.on.shutdown", _Kind.BOOL)
    )
    dir_warn_if_exists: bool = attrs.field(default=True, metadata=_meta("aeron.dir.warn.if.exists", _Kind.BOOL))
    cnc_generation: CncGeneration = attrs.field(
        default=CncGeneration.CURRENT, metadata=_meta("aeron.cnc.version", _Kind.CNC)
    )
    termination_validator: str = attrs.field(
        default="deny", metadata=_meta("aeron.driver.termination.validator", _Kind.TEXT)
    )

    term_buffer_length: int = attrs.field(default=16 * _MIB, metadata=_meta("aeron.term.buffer.length", _Kind.SIZE))
    ipc_term_buffer_length: int = attrs.field(
        default=64 * _MIB, metadata=_meta("aeron.ipc.term.buffer.length", _Kind.SIZE)
    )
    term_buffer_sparse_file: bool = attrs.field(
        default=False, metadata=_meta("aeron.term.buffer.sparse.file", _Kind.BOOL)
    )
    receiver_max_term_length: int = attrs.field(
        default=16 * _MIB, metadata=_meta("aeron.receiver.max.term.length", _Kind.SIZE)
    )
    """The longest term a SETUP may ask for (an image's log is three terms); a subscription can ask for less
    with ``max-term-length``. 16 MiB is Aeron's default term length, so default publishers connect."""
    receiver_max_images_per_subscription: int = attrs.field(
        default=1024, metadata=_meta("aeron.receiver.max.images.per.subscription", _Kind.INT)
    )
    """Images one subscription holds at most (a subscription can ask for fewer with ``max-images``)."""
    receiver_max_images_per_source: int = attrs.field(
        default=64, metadata=_meta("aeron.receiver.max.images.per.source", _Kind.INT)
    )
    """Images one subscription holds at most from one source address (``max-images-per-source``)."""
    receiver_sparse_image_threshold: int = attrs.field(
        default=_MIB, metadata=_meta("aeron.receiver.sparse.image.threshold", _Kind.SIZE)
    )
    """Image logs longer than this are created sparse (no page allocated until data is written to it)."""
    command_queue_capacity: int = attrs.field(
        default=1024, metadata=_meta("aeron.driver.command.queue.capacity", _Kind.INT)
    )
    """Commands each queue between the driver's agents holds; the conductor keeps what does not fit."""
    perform_storage_checks: bool = attrs.field(default=True, metadata=_meta("aeron.perform.storage.checks", _Kind.BOOL))
    low_file_store_warning_threshold: int = attrs.field(
        default=160 * _MIB, metadata=_meta("aeron.low.file.store.warning.threshold", _Kind.SIZE)
    )
    mtu_length: int = attrs.field(default=1408, metadata=_meta("aeron.mtu.length", _Kind.SIZE))
    ipc_mtu_length: int = attrs.field(default=1408, metadata=_meta("aeron.ipc.mtu.length", _Kind.SIZE))
    file_page_size: int = attrs.field(default=4096, metadata=_meta("aeron.file.page.size", _Kind.SIZE))
    publication_term_window_length: int = attrs.field(
        default=0, metadata=_meta("aeron.publication.term.window.length", _Kind.SIZE)
    )
    ipc_publication_term_window_length: int = attrs.field(
        default=0, metadata=_meta("aeron.ipc.publication.term.window.length", _Kind.SIZE)
    )
    initial_window_length: int = attrs.field(
        default=128 * 1024, metadata=_meta("aeron.rcv.initial.window.length", _Kind.SIZE)
    )
    send_to_status_poll_ratio: int = attrs.field(
        default=6, metadata=_meta("aeron.send.to.status.poll.ratio", _Kind.INT)
    )
    socket_rcvbuf_length: int = attrs.field(default=128 * 1024, metadata=_meta("aeron.socket.so_rcvbuf", _Kind.SIZE))
    socket_sndbuf_length: int = attrs.field(default=0, metadata=_meta("aeron.socket.so_sndbuf", _Kind.SIZE))
    socket_multicast_ttl: int = attrs.field(default=0, metadata=_meta("aeron.socket.multicast.ttl", _Kind.INT))
    publication_reserved_session_id_low: int = attrs.field(
        default=-1, metadata=_meta("aeron.publication.reserved.session.id.low", _Kind.INT)
    )
    publication_reserved_session_id_high: int = attrs.field(
        default=1000, metadata=_meta("aeron.publication.reserved.session.id.high", _Kind.INT)
    )
    spies_simulate_connection: bool = attrs.field(
        default=False, metadata=_meta("aeron.spies.simulate.connection", _Kind.BOOL)
    )

    threading_mode: ThreadingMode = attrs.field(
        default=ThreadingMode.DEDICATED, metadata=_meta("aeron.threading.mode", _Kind.THREADING)
    )
    conductor_idle_strategy: str = attrs.field(
        default="backoff", metadata=_meta("aeron.conductor.idle.strategy", _Kind.IDLE)
    )
    sender_idle_strategy: str = attrs.field(default="backoff", metadata=_meta("aeron.sender.idle.strategy", _Kind.IDLE))
    receiver_idle_strategy: str = attrs.field(
        default="backoff", metadata=_meta("aeron.receiver.idle.strategy", _Kind.IDLE)
    )
    shared_network_idle_strategy: str = attrs.field(
        default="backoff", metadata=_meta("aeron.sharednetwork.idle.strategy", _Kind.IDLE)
    )
    shared_idle_strategy: str = attrs.field(default="backoff", metadata=_meta("aeron.shared.idle.strategy", _Kind.IDLE))

    client_liveness_timeout_ns: int = attrs.field(
        default=5_000_000_000, metadata=_meta("aeron.client.liveness.timeout", _Kind.DURATION)
    )
    image_liveness_timeout_ns: int = attrs.field(
        default=10_000_000_000, metadata=_meta("aeron.image.liveness.timeout", _Kind.DURATION)
    )
    publication_linger_timeout_ns: int = attrs.field(
        default=5_000_000_000, metadata=_meta("aeron.publication.linger.timeout", _Kind.DURATION)
    )
    publication_unblock_timeout_ns: int = attrs.field(
        default=10_000_000_000, metadata=_meta("aeron.publication.unblock.timeout", _Kind.DURATION)
    )
    publication_connection_timeout_ns: int = attrs.field(
        default=5_000_000_000, metadata=_meta("aeron.publication.connection.timeout", _Kind.DURATION)
    )
    status_message_timeout_ns: int = attrs.field(
        default=200_000_000, metadata=_meta("aeron.rcv.status.message.timeout", _Kind.DURATION)
    )
    publication_heartbeat_interval_ns: int = attrs.field(
        default=100_000_000, metadata=_meta("aeron.publication.heartbeat.interval", _Kind.DURATION)
    )
    """How often an idle network publication sends a heartbeat. Aeron 1.15.1 fixes it at 100 ms (not a setting
    there); here it is one, so a server of many idle connections can space them out. Keep it well within the
    receivers' ``image_liveness_timeout_ns``."""
    timer_interval_ns: int = attrs.field(default=1_000_000_000, metadata=_meta("aeron.timer.interval", _Kind.DURATION))
    nak_unicast_retry_ns: int = attrs.field(
        default=10_000_000, metadata=_meta("aeron.nak.unicast.retry", _Kind.DURATION)
    )
    """How long a unicast receiver waits before repeating a NAK for a gap still open: today's Aeron's 10 ms
    (1.15.1 used 60 ms, which under loss often re-asked just as the sender's linger ended: 5-14% of the
    loss-free rate at 5% loss, against 53-73% with 10 ms)."""
    nak_retry_max_ns: int = attrs.field(default=640_000_000, metadata=_meta("aeron.nak.retry.max", _Kind.DURATION))
    """The longest wait between repeated NAKs of one gap (ours; Aeron repeats at a fixed interval): after three
    repeats at ``nak_unicast_retry_ns``, each waits twice as long as the one before, up to this. A repair that has
    not come by then is mostly queued behind a backlog in our own receive socket, and NAKing every gap of hundreds
    of images every 10 ms only adds to that backlog (the senders' repairs join it). 0: no backoff."""
    retransmit_unicast_linger_ns: int = attrs.field(
        default=10_000_000, metadata=_meta("aeron.retransmit.unicast.linger", _Kind.DURATION)
    )
    """How long a unicast sender ignores NAKs for a range it has just resent (today's 10 ms; 1.15.1: 60 ms)."""
    counters_free_to_reuse_timeout_ns: int = attrs.field(
        default=1_000_000_000, metadata=_meta("aeron.counters.free.to.reuse.timeout", _Kind.DURATION)
    )
    driver_timeout_ms: int = attrs.field(default=10_000, metadata=_meta("aeron.driver.timeout", _Kind.MILLIS))

    conductor_buffer_length: int = attrs.field(
        default=_MIB + _RING_TRAILER_LENGTH, metadata=_meta("aeron.conductor.buffer.length", _Kind.SIZE)
    )
    to_clients_buffer_length: int = attrs.field(
        default=_MIB + _BROADCAST_TRAILER_LENGTH, metadata=_meta("aeron.clients.buffer.length", _Kind.SIZE)
    )
    counters_values_buffer_length: int = attrs.field(
        default=_MIB, metadata=_meta("aeron.counters.buffer.length", _Kind.SIZE)
    )
    error_buffer_length: int = attrs.field(default=_MIB, metadata=_meta("aeron.error.buffer.length", _Kind.SIZE))
    loss_report_buffer_length: int = attrs.field(
        default=_MIB, metadata=_meta("aeron.loss.report.buffer.length", _Kind.SIZE)
    )

    # Fault injection on every UDP socket of the driver (tests, benchmarks): rates in [0, 1].
    send_loss_rate: float = attrs.field(default=0.0, metadata=_meta("aeron.debug.send.loss.rate", _Kind.RATE))
    send_reorder_rate: float = attrs.field(default=0.0, metadata=_meta("aeron.debug.send.reorder.rate", _Kind.RATE))
    send_duplicate_rate: float = attrs.field(default=0.0, metadata=_meta("aeron.debug.send.duplicate.rate", _Kind.RATE))
    send_fault_seed: int = attrs.field(default=0, metadata=_meta("aeron.debug.send.seed", _Kind.INT))
    receive_loss_rate: float = attrs.field(default=0.0, metadata=_meta("aeron.debug.receive.loss.rate", _Kind.RATE))
    receive_reorder_rate: float = attrs.field(
        default=0.0, metadata=_meta("aeron.debug.receive.reorder.rate", _Kind.RATE)
    )
    receive_duplicate_rate: float = attrs.field(
        default=0.0, metadata=_meta("aeron.debug.receive.duplicate.rate", _Kind.RATE)
    )
    receive_fault_seed: int = attrs.field(default=0, metadata=_meta("aeron.debug.receive.seed", _Kind.INT))

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: object) -> DriverContext:
        """From Aeron property names (``aeron.mtu.length``: ``"8k"``); other keys are ignored."""
        return _build(cls, properties.get, overrides)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        properties: Mapping[str, str] | None = None,
        **overrides: object,
    ) -> DriverContext:
        """From ``AERON_*`` environment variables, then Aeron ``properties``, then ``overrides`` by field name."""
        env = os.environ if environ is None else environ
        props = properties or {}

        def lookup(prop: str) -> str | None:
            value = props.get(prop)
            return value if value is not None else env.get(env_name(prop))

        return _build(cls, lookup, overrides)

    def to_properties(self) -> dict[str, str]:
        """The settings as Aeron property text (for a child process or a Java driver)."""
        return _properties_of(self)

    def evolve(self, **changes: object) -> DriverContext:
        """A copy with some fields changed (text values are parsed like overrides)."""
        return _build(type(self), lambda prop: None, {**attrs.asdict(self, recurse=False), **changes})

    # ------------------------------------------------------------------ derived values

    @property
    def cnc_path(self) -> Path:
        return self.aeron_dir / CNC_FILE

    @property
    def counters_metadata_buffer_length(self) -> int:
        return self.counters_values_buffer_length * _COUNTERS_METADATA_RATIO

    @property
    def driver_timeout_ns(self) -> int:
        return self.driver_timeout_ms * 1_000_000

    @property
    def effective_ipc_term_buffer_length(self) -> int:
        """IPC term length; 0 in ``aeron.ipc.term.buffer.length`` means "as for UDP"."""
        return self.ipc_term_buffer_length or self.term_buffer_length

    def publication_term_window_length_for(self, term_length: int) -> int:
        """How far a network publication may run ahead of its sender: term/2, capped by the setting."""
        window = term_length // 2
        return min(self.publication_term_window_length, window) if self.publication_term_window_length else window

    @property
    def send_faults(self) -> FaultSpec:
        return FaultSpec(self.send_loss_rate, self.send_reorder_rate, self.send_duplicate_rate, self.send_fault_seed)

    @property
    def receive_faults(self) -> FaultSpec:
        return FaultSpec(
            self.receive_loss_rate, self.receive_reorder_rate, self.receive_duplicate_rate, self.receive_fault_seed
        )

    def ipc_publication_term_window_length_for(self, term_length: int) -> int:
        """How far an IPC publication may run ahead of its slowest subscriber: a term, capped by the setting."""
        window = term_length
        if self.ipc_publication_term_window_length:
            return min(self.ipc_publication_term_window_length, window)
        return window

    # ------------------------------------------------------------------ validation

    def conclude(self) -> DriverContext:
        """Check every setting; returns self, raises DriverConfigurationError naming the first bad property."""
        c = _Checker(self)
        c.instance("aeron_dir", Path)
        for name in ("dir_delete_on_start", "dir_delete_on_shutdown", "dir_warn_if_exists"):
            c.boolean(name)
        for name in ("term_buffer_sparse_file", "perform_storage_checks", "spies_simulate_connection"):
            c.boolean(name)
        c.instance("cnc_generation", CncGeneration)
        if not (self.termination_validator in ("allow", "deny") or self.termination_validator.startswith("token:")):
            raise c.fail("termination_validator", '"deny", "allow" or "token:<text>"')
        c.instance("threading_mode", ThreadingMode)

        c.power_of_two("term_buffer_length", _TERM_MIN_LENGTH, _TERM_MAX_LENGTH)
        if self.ipc_term_buffer_length != 0:
            c.power_of_two("ipc_term_buffer_length", _TERM_MIN_LENGTH, _TERM_MAX_LENGTH)
        c.int_range("low_file_store_warning_threshold", 0, (1 << 63) - 1)
        c.power_of_two("receiver_max_term_length", _TERM_MIN_LENGTH, _TERM_MAX_LENGTH)
        c.int_range("receiver_max_images_per_subscription", 1, _INT32_MAX)
        c.int_range("receiver_max_images_per_source", 1, _INT32_MAX)
        c.int_range("receiver_sparse_image_threshold", 0, (1 << 63) - 1)
        c.int_range("command_queue_capacity", 1, 1 << 24)
        c.mtu("mtu_length")
        c.mtu("ipc_mtu_length")
        c.power_of_two("file_page_size", _PAGE_MIN_SIZE, _PAGE_MAX_SIZE)
        c.int_range("publication_term_window_length", 0, _TERM_MAX_LENGTH)
        c.int_range("ipc_publication_term_window_length", 0, _TERM_MAX_LENGTH)
        c.int_range("initial_window_length", self.mtu_length, _INT32_MAX)
        c.int_range("send_to_status_poll_ratio", 1, _INT32_MAX)
        c.int_range("socket_rcvbuf_length", 0, _INT32_MAX)
        c.int_range("socket_sndbuf_length", 0, _INT32_MAX)
        if 0 < self.socket_sndbuf_length < self.mtu_length:
            raise c.fail("socket_sndbuf_length", f"0 (OS default) or >= the MTU ({self.mtu_length})")
        c.int_range("socket_multicast_ttl", 0, 255)
        for prefix in ("send", "receive"):
            for kind in ("loss", "reorder", "duplicate"):
                name = f"{prefix}_{kind}_rate"
                value = getattr(self, name)
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                    raise c.fail(name, "a rate between 0 and 1")
            c.int_range(f"{prefix}_fault_seed", -(1 << 63), (1 << 63) - 1)
        c.int_range("publication_reserved_session_id_low", -(1 << 31), _INT32_MAX)
        c.int_range("publication_reserved_session_id_high", self.publication_reserved_session_id_low, _INT32_MAX)
        for name in IDLE_STRATEGY_FIELDS:
            c.idle(name)
        for name in (
            "client_liveness_timeout_ns",
            "image_liveness_timeout_ns",
            "publication_unblock_timeout_ns",
            "publication_connection_timeout_ns",
            "status_message_timeout_ns",
            "publication_heartbeat_interval_ns",
            "timer_interval_ns",
            "nak_unicast_retry_ns",
            "retransmit_unicast_linger_ns",
            "driver_timeout_ms",
        ):
            c.timeout(name)
        c.timeout("publication_linger_timeout_ns", allow_zero=True)
        c.timeout("nak_retry_max_ns", allow_zero=True)
        c.timeout("counters_free_to_reuse_timeout_ns", allow_zero=True)

        c.power_of_two("conductor_buffer_length", 1024, _TERM_MAX_LENGTH, plus=_RING_TRAILER_LENGTH)
        c.power_of_two("to_clients_buffer_length", 1024, _TERM_MAX_LENGTH, plus=_BROADCAST_TRAILER_LENGTH)
        values = c.int_range("counters_values_buffer_length", _COUNTER_LENGTH, _INT32_MAX // _COUNTERS_METADATA_RATIO)
        if values % _COUNTER_LENGTH:
            raise c.fail(
                "counters_values_buffer_length",
                f"a multiple of {_COUNTER_LENGTH} in {_COUNTER_LENGTH}..{_INT32_MAX // _COUNTERS_METADATA_RATIO}",
            )
        c.int_range("error_buffer_length", 1024, _INT32_MAX)
        c.int_range("loss_report_buffer_length", 1024, _INT32_MAX)
        total = (
            128
            + self.conductor_buffer_length
            + self.to_clients_buffer_length
            + self.counters_metadata_buffer_length
            + self.counters_values_buffer_length
            + self.error_buffer_length
        )
        if total > _INT32_MAX:
            raise DriverConfigurationError(
                "cnc.dat length", total, f"at most {_INT32_MAX} bytes (header, conductor, clients, counters x5, errors)"
            )
        return self


# ---------------------------------------------------------------------------------------------- client


def _log_error(error: BaseException) -> None:
    logging.getLogger("driver.client").error("client error: %s", error, exc_info=error)


@attrs.frozen
class ClientContext:
    """Client settings; defaults are Aeron 1.15.1's (``keepalive_interval_ns`` has no property there)."""

    aeron_dir: Path = attrs.field(
        factory=default_aeron_dir, converter=_to_path, metadata=_meta("aeron.dir", _Kind.PATH)
    )
    driver_timeout_ms: int = attrs.field(default=10_000, metadata=_meta("aeron.driver.timeout", _Kind.MILLIS))
    resource_linger_duration_ns: int = attrs.field(
        default=3_000_000_000, metadata=_meta("aeron.client.resource.linger.duration", _Kind.DURATION)
    )
    idle_sleep_duration_ns: int = attrs.field(
        default=16_000_000, metadata=_meta("aeron.client.idle.sleep.duration", _Kind.DURATION)
    )
    keepalive_interval_ns: int = attrs.field(default=500_000_000, metadata=_meta(None, _Kind.DURATION))
    idle_strategy: str = attrs.field(default="sleeping", metadata=_meta(None, _Kind.IDLE))
    busy_sleep_duration_ns: int = attrs.field(default=0, metadata=_meta(None, _Kind.DURATION))
    """Ours (0: off, Aeron's behaviour): with the ``sleeping`` strategy, the conductor thread sleeps this instead of
    ``idle_sleep_duration_ns`` until a second of such sleeps found no work (new images, answers), so an active
    client hears of them sooner and a quiet one still wakes only every ``idle_sleep_duration_ns``."""
    error_handler: Callable[[BaseException], None] = attrs.field(default=_log_error)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: object) -> ClientContext:
        return _build(cls, properties.get, overrides)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> ClientContext:
        env = os.environ if environ is None else environ
        return _build(cls, lambda prop: env.get(env_name(prop)), overrides)

    def to_properties(self) -> dict[str, str]:
        return _properties_of(self)

    def evolve(self, **changes: object) -> ClientContext:
        """A copy with some fields changed (text values are parsed like overrides)."""
        return _build(type(self), lambda prop: None, {**attrs.asdict(self, recurse=False), **changes})

    @property
    def driver_timeout_ns(self) -> int:
        return self.driver_timeout_ms * 1_000_000

    @property
    def cnc_path(self) -> Path:
        return self.aeron_dir / CNC_FILE

    def conclude(self) -> ClientContext:
        """Check every setting; returns self, raises DriverConfigurationError naming the first bad one."""
        c = _Checker(self)
        c.instance("aeron_dir", Path)
        c.timeout("driver_timeout_ms")
        c.timeout("resource_linger_duration_ns", allow_zero=True)
        c.timeout("idle_sleep_duration_ns")
        c.timeout("keepalive_interval_ns")
        c.timeout("busy_sleep_duration_ns", allow_zero=True)
        if self.busy_sleep_duration_ns > self.idle_sleep_duration_ns:
            raise c.fail("busy_sleep_duration_ns", f"<= idle_sleep_duration_ns ({self.idle_sleep_duration_ns} ns)")
        if self.keepalive_interval_ns >= self.driver_timeout_ms * 1_000_000:
            raise c.fail("keepalive_interval_ns", f"< aeron.driver.timeout ({self.driver_timeout_ms} ms)")
        c.idle("idle_strategy")
        if not callable(self.error_handler):
            raise c.fail("error_handler", "a callable taking the exception")
        return self
