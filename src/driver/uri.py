"""Aeron channel URIs: ``[aeron-spy:]aeron:<media>[?key=value(|key=value)*]``.

Theory of operation: the grammar is Aeron's (1.15.1 ``ChannelUri``): after the
optional ``aeron-spy:`` prefix and ``aeron:``, the media runs to ``?`` (a ``:``
inside it is an error); then ``key=value`` pairs separated by ``|``, where a
value may contain anything but ``|`` (``=``, ``:`` and ``,`` included). Keys are
case-sensitive and a repeated key keeps its last value, as in Aeron.

Unlike Aeron's parser, which only splits the text and leaves each parameter to
whoever reads it, :meth:`ChannelUri.parse` also checks every parameter it knows
(those of 1.15.1 and of today's Aeron) for type and range, so a bad channel
fails at once with an :class:`~driver.errors.InvalidChannelError` naming the
parameter. Parameters it does not know are kept and ignored, as Aeron does.
Three are ours, for subscriptions: ``max-term-length`` (the longest term a
publisher's SETUP may ask this subscription's images for), ``max-images`` and
``max-images-per-source`` (images the subscription holds, in all and from one
source address); each can only tighten the driver's setting of the same name.
Sizes take Agrona's ``k``/``m``/``g`` suffixes (:func:`parse_size`) and durations
``ns``/``us``/``ms``/``s`` (:func:`parse_duration_ns`, plain numbers are ns).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from driver.errors import DriverConfigurationError, InvalidChannelError
from driver.int32 import INT32_MAX as _INT32_MAX
from driver.int32 import INT32_MIN as _INT32_MIN
from driver.int32 import int32

__all__ = [
    "AERON_PREFIX",
    "AERON_SCHEME",
    "ALIAS_PARAM_NAME",
    "CHANNEL_RECEIVE_TIMESTAMP_OFFSET_PARAM_NAME",
    "CHANNEL_SEND_TIMESTAMP_OFFSET_PARAM_NAME",
    "CONGESTION_CONTROL_PARAM_NAME",
    "CONTROL_MODE_DYNAMIC",
    "CONTROL_MODE_MANUAL",
    "CONTROL_MODE_RESPONSE",
    "ENDPOINT_PARAM_NAME",
    "EOS_PARAM_NAME",
    "EVICT_SILENT_PARAM_NAME",
    "FLOW_CONTROL_PARAM_NAME",
    "FRAME_ALIGNMENT",
    "GROUP_PARAM_NAME",
    "GROUP_TAG_PARAM_NAME",
    "HEARTBEAT_INTERVAL_PARAM_NAME",
    "INITIAL_TERM_ID_PARAM_NAME",
    "INTERFACE_PARAM_NAME",
    "IPC_CHANNEL",
    "IPC_MEDIA",
    "KNOWN_PARAMS",
    "LINGER_PARAM_NAME",
    "MAX_IMAGES_PARAM_NAME",
    "MAX_IMAGES_PER_SOURCE_PARAM_NAME",
    "MAX_RESEND_MAX",
    "MAX_RESEND_PARAM_NAME",
    "MAX_TERM_LENGTH_PARAM_NAME",
    "MAX_UDP_PAYLOAD_LENGTH",
    "MAX_URI_LENGTH",
    "MDC_CONTROL_MODE_PARAM_NAME",
    "MDC_CONTROL_PARAM_NAME",
    "MEDIA_RCV_TIMESTAMP_OFFSET_PARAM_NAME",
    "MTU_LENGTH_PARAM_NAME",
    "NAK_DELAY_PARAM_NAME",
    "PARAMS_1_15",
    "PUBLICATION_WINDOW_LENGTH_PARAM_NAME",
    "RECEIVER_WINDOW_LENGTH_PARAM_NAME",
    "REJOIN_PARAM_NAME",
    "RELIABLE_STREAM_PARAM_NAME",
    "RESPONSE_CORRELATION_ID_PARAM_NAME",
    "RESPONSE_ENDPOINT_PARAM_NAME",
    "SESSION_ID_PARAM_NAME",
    "SOCKET_RCVBUF_PARAM_NAME",
    "SOCKET_SNDBUF_PARAM_NAME",
    "SPARSE_PARAM_NAME",
    "SPIES_SIMULATE_CONNECTION_PARAM_NAME",
    "SPY_PREFIX",
    "SPY_QUALIFIER",
    "STREAM_ID_PARAM_NAME",
    "TAGS_PARAM_NAME",
    "TAG_PREFIX",
    "TAIL_PROBE_PARAM_NAME",
    "TERM_ID_PARAM_NAME",
    "TERM_LENGTH_PARAM_NAME",
    "TERM_MAX_LENGTH",
    "TERM_MIN_LENGTH",
    "TERM_OFFSET_PARAM_NAME",
    "TETHER_PARAM_NAME",
    "TTL_PARAM_NAME",
    "UDP_MEDIA",
    "UNTETHERED_LINGER_TIMEOUT_PARAM_NAME",
    "UNTETHERED_RESTING_TIMEOUT_PARAM_NAME",
    "UNTETHERED_WINDOW_LIMIT_TIMEOUT_PARAM_NAME",
    "ChannelUri",
    "InitialPosition",
    "parse_duration_ns",
    "parse_size",
]

AERON_SCHEME = "aeron"
AERON_PREFIX = "aeron:"
SPY_QUALIFIER = "aeron-spy"
SPY_PREFIX = "aeron-spy:"
IPC_MEDIA = "ipc"
UDP_MEDIA = "udp"
IPC_CHANNEL = "aeron:ipc"
TAG_PREFIX = "tag:"
MAX_URI_LENGTH = 4095  # today's Aeron; 1.15.1 had no limit

# --- parameters of Aeron 1.15.1
ENDPOINT_PARAM_NAME = "endpoint"
INTERFACE_PARAM_NAME = "interface"
INITIAL_TERM_ID_PARAM_NAME = "init-term-id"
TERM_ID_PARAM_NAME = "term-id"
TERM_OFFSET_PARAM_NAME = "term-offset"
TERM_LENGTH_PARAM_NAME = "term-length"
MTU_LENGTH_PARAM_NAME = "mtu"
TTL_PARAM_NAME = "ttl"
MDC_CONTROL_PARAM_NAME = "control"
MDC_CONTROL_MODE_PARAM_NAME = "control-mode"
SESSION_ID_PARAM_NAME = "session-id"
LINGER_PARAM_NAME = "linger"
RELIABLE_STREAM_PARAM_NAME = "reliable"
TAGS_PARAM_NAME = "tags"
SPARSE_PARAM_NAME = "sparse"
ALIAS_PARAM_NAME = "alias"
# --- added by later Aeron versions
EOS_PARAM_NAME = "eos"
TETHER_PARAM_NAME = "tether"
GROUP_PARAM_NAME = "group"
REJOIN_PARAM_NAME = "rejoin"
CONGESTION_CONTROL_PARAM_NAME = "cc"
FLOW_CONTROL_PARAM_NAME = "fc"
GROUP_TAG_PARAM_NAME = "gtag"
SPIES_SIMULATE_CONNECTION_PARAM_NAME = "ssc"
SOCKET_SNDBUF_PARAM_NAME = "so-sndbuf"
SOCKET_RCVBUF_PARAM_NAME = "so-rcvbuf"
RECEIVER_WINDOW_LENGTH_PARAM_NAME = "rcv-wnd"
PUBLICATION_WINDOW_LENGTH_PARAM_NAME = "pub-wnd"
MEDIA_RCV_TIMESTAMP_OFFSET_PARAM_NAME = "media-rcv-ts-offset"
CHANNEL_RECEIVE_TIMESTAMP_OFFSET_PARAM_NAME = "channel-rcv-ts-offset"
CHANNEL_SEND_TIMESTAMP_OFFSET_PARAM_NAME = "channel-snd-ts-offset"
RESPONSE_ENDPOINT_PARAM_NAME = "response-endpoint"
RESPONSE_CORRELATION_ID_PARAM_NAME = "response-correlation-id"
NAK_DELAY_PARAM_NAME = "nak-delay"
UNTETHERED_WINDOW_LIMIT_TIMEOUT_PARAM_NAME = "untethered-window-limit-timeout"
UNTETHERED_LINGER_TIMEOUT_PARAM_NAME = "untethered-linger-timeout"
UNTETHERED_RESTING_TIMEOUT_PARAM_NAME = "untethered-resting-timeout"
MAX_RESEND_PARAM_NAME = "max-resend"
STREAM_ID_PARAM_NAME = "stream-id"
# Ours (a subscription's bounds on what publishers may make it hold; each only tightens the driver's setting):
MAX_TERM_LENGTH_PARAM_NAME = "max-term-length"
MAX_IMAGES_PARAM_NAME = "max-images"
MAX_IMAGES_PER_SOURCE_PARAM_NAME = "max-images-per-source"
EVICT_SILENT_PARAM_NAME = "evict-silent"
"""``true``: when the subscription is at an image limit, its longest-silent image gives way to a new one."""
RECEIVER_HOST_PARAM_NAME = "receiver-host"
"""A private publication (``session-id=``) on a ``control-mode=dynamic`` channel: only receivers at this IP
address become its destinations (a server answering a client it knows by address, through a NAT too)."""
HEARTBEAT_INTERVAL_PARAM_NAME = "heartbeat-interval"
"""A network publication's heartbeat interval when idle (the driver's ``publication_heartbeat_interval_ns`` when
absent). Only the sending driver reads it: nothing changes on the wire but how often heartbeats go."""
TAIL_PROBE_PARAM_NAME = "tail-probe"
"""A network publication's tail probe (ours): one heartbeat this long after data, when shorter than the heartbeat
interval, so that a receiver that lost the stream's last datagrams asks for them again soon (a stream with a long
heartbeat interval otherwise reveals such a loss only with its next message). Absent: none. Only the sending driver
reads it; the probe is an ordinary heartbeat."""

CONTROL_MODE_MANUAL = "manual"
CONTROL_MODE_DYNAMIC = "dynamic"
CONTROL_MODE_RESPONSE = "response"

TERM_MIN_LENGTH = 64 * 1024
TERM_MAX_LENGTH = 1024 * 1024 * 1024
FRAME_ALIGNMENT = 32
MAX_UDP_PAYLOAD_LENGTH = 65504
MAX_RESEND_MAX = 256

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INVALID_TAG = -1

_DECIMAL = re.compile(r"-?[0-9]+")
_SIZE_MULTIPLIERS = {"k": 1024, "m": 1024 * 1024, "g": 1024 * 1024 * 1024}
_DURATION_MULTIPLIERS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


# ---------------------------------------------------------------------------------------------- numbers


def _parse_long(
    text: str, field: str, allowed: str, error: type[DriverConfigurationError], original: str | None = None
) -> int:
    shown = text if original is None else original
    if not _DECIMAL.fullmatch(text):
        raise error(field, shown, allowed)
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise error(field, shown, f"{allowed} (fits in 64 bits)")
    return value


def parse_size(
    text: str, field: str = "size", *, error: type[DriverConfigurationError] = DriverConfigurationError
) -> int:
    """Agrona's parseSize: an integer with an optional k/m/g (x1024) suffix, any case."""
    allowed = "an integer with an optional k, m or g suffix"
    if not text:
        raise error(field, text, allowed)
    multiplier = _SIZE_MULTIPLIERS.get(text[-1].lower())
    if multiplier is None:
        return _parse_long(text, field, allowed, error)
    value = _parse_long(text[:-1], field, allowed, error, text) * multiplier
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise error(field, text, f"{allowed} (fits in 64 bits)")
    return value


def parse_duration_ns(
    text: str, field: str = "duration", *, error: type[DriverConfigurationError] = DriverConfigurationError
) -> int:
    """Agrona's parseDuration: an integer of ns, or with an ns/us/ms/s suffix, any case."""
    allowed = "an integer of nanoseconds or with an ns, us, ms or s suffix"
    lowered = text.lower()
    for suffix in ("ns", "us", "ms", "s"):
        if lowered.endswith(suffix):
            value = _parse_long(text[: -len(suffix)], field, allowed, error, text) * _DURATION_MULTIPLIERS[suffix]
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise error(field, text, f"{allowed} (fits in 64 bits)")
            return value
    return _parse_long(text, field, allowed, error)


# ---------------------------------------------------------------------------------------------- validators


def _bad(key: str, value: str, allowed: str) -> InvalidChannelError:
    return InvalidChannelError(key, value, allowed)


def _int_in(key: str, value: str, low: int, high: int) -> int:
    allowed = f"an integer in {low}..{high}"
    number = _parse_long(value, key, allowed, InvalidChannelError)
    if not low <= number <= high:
        raise _bad(key, value, allowed)
    return number


def _check_int32(key: str, value: str) -> None:
    _int_in(key, value, _INT32_MIN, _INT32_MAX)


def _check_int64(key: str, value: str) -> None:
    _parse_long(value, key, "a 64-bit integer", InvalidChannelError)


def _check_bool(key: str, value: str) -> None:
    if value not in ("true", "false"):
        raise _bad(key, value, '"true" or "false"')


def _check_term_length(key: str, value: str) -> None:
    length = parse_size(value, key, error=InvalidChannelError)
    if not (TERM_MIN_LENGTH <= length <= TERM_MAX_LENGTH and length & (length - 1) == 0):
        raise _bad(key, value, f"a power of two in {TERM_MIN_LENGTH}..{TERM_MAX_LENGTH} (64k..1g)")


def _check_mtu(key: str, value: str) -> None:
    mtu = parse_size(value, key, error=InvalidChannelError)
    if not (FRAME_ALIGNMENT <= mtu <= MAX_UDP_PAYLOAD_LENGTH and mtu % FRAME_ALIGNMENT == 0):
        raise _bad(key, value, f"a multiple of {FRAME_ALIGNMENT} in {FRAME_ALIGNMENT}..{MAX_UDP_PAYLOAD_LENGTH}")


def _check_positive_size(key: str, value: str) -> None:
    size = parse_size(value, key, error=InvalidChannelError)
    if not 0 < size <= _INT32_MAX:
        raise _bad(key, value, f"a size in 1..{_INT32_MAX}")


def _check_positive_duration(key: str, value: str) -> None:
    if parse_duration_ns(value, key, error=InvalidChannelError) <= 0:
        raise _bad(key, value, "a duration > 0")


def _check_duration(key: str, value: str) -> None:
    if parse_duration_ns(value, key, error=InvalidChannelError) < 0:
        raise _bad(key, value, "a duration >= 0")


def _check_ttl(key: str, value: str) -> None:
    _int_in(key, value, 0, 255)


def _check_session_id(key: str, value: str) -> None:
    if value.startswith(TAG_PREFIX):
        _parse_long(value[len(TAG_PREFIX) :], key, "an int32 or tag:<64-bit tag>", InvalidChannelError)
    else:
        _parse_long(value, key, "an int32 or tag:<64-bit tag>", InvalidChannelError)
        _int_in(key, value, _INT32_MIN, _INT32_MAX)


def _check_tags(key: str, value: str) -> None:
    parts = value.split(",")
    allowed = "<channel tag>[,<publication tag>], 64-bit integers other than -1"
    if len(parts) > 2:
        raise _bad(key, value, allowed)
    for part in parts:
        if part == "" and len(parts) == 2:
            continue  # ",5": a publication tag without a channel tag
        if _parse_long(part, key, allowed, InvalidChannelError) == _INVALID_TAG:
            raise _bad(key, value, allowed)


def _check_control_mode(key: str, value: str) -> None:
    if value not in (CONTROL_MODE_MANUAL, CONTROL_MODE_DYNAMIC, CONTROL_MODE_RESPONSE):
        raise _bad(key, value, f'"{CONTROL_MODE_MANUAL}", "{CONTROL_MODE_DYNAMIC}" or "{CONTROL_MODE_RESPONSE}"')


_PORT = r"(?P<port>[0-9]{1,5})"
_HOST = r"(?:\[(?P<ipv6>[0-9A-Fa-f:.%A-Za-z]+)\]|(?P<host>[^:\[\]/|\s]+))"
_SOCKET_ADDRESS = re.compile(_HOST + ":" + _PORT)
_INTERFACE = re.compile(_HOST + "(?::" + _PORT + ")?(?:/(?P<prefix>[0-9]{1,3}))?")


def _check_port(key: str, value: str, port: str | None, allowed: str) -> None:
    if port is not None and int(port) > 65535:
        raise _bad(key, value, allowed)


def _check_socket_address(key: str, value: str) -> None:
    allowed = "host:port or [ipv6]:port, port 0..65535"
    match = _SOCKET_ADDRESS.fullmatch(value)
    if match is None:
        raise _bad(key, value, allowed)
    _check_port(key, value, match.group("port"), allowed)


def _check_interface(key: str, value: str) -> None:
    allowed = "host[:port][/prefix length] or [ipv6][:port][/prefix length]"
    match = _INTERFACE.fullmatch(value)
    if match is None:
        raise _bad(key, value, allowed)
    _check_port(key, value, match.group("port"), allowed)
    prefix = match.group("prefix")
    if prefix is not None and int(prefix) > (128 if match.group("ipv6") else 32):
        raise _bad(key, value, allowed)


def _check_congestion_control(key: str, value: str) -> None:
    if value not in ("static", "cubic"):
        raise _bad(key, value, '"static" or "cubic"')


def _check_flow_control(key: str, value: str) -> None:
    strategy, *arguments = value.split(",")
    allowed = "max|min|tagged|preferred[,g:<tag>[/<min group size>]][,t:<timeout>]"
    if strategy not in ("max", "min", "tagged", "preferred"):
        raise _bad(key, value, allowed)
    for argument in arguments:
        if argument.startswith("t:"):
            parse_duration_ns(argument[2:], key, error=InvalidChannelError)
        elif argument.startswith("g:"):
            tag, _, group_size = argument[2:].partition("/")
            if tag:
                _parse_long(tag, key, allowed, InvalidChannelError)
            if group_size:
                _int_in(key, group_size, 0, _INT32_MAX)
        elif not argument.startswith("rrwm:"):
            raise _bad(key, value, allowed)


def _check_timestamp_offset(key: str, value: str) -> None:
    if value != "reserved":
        _int_in(key, value, _INT32_MIN, _INT32_MAX)


def _check_response_correlation_id(key: str, value: str) -> None:
    if value != "prototype":
        _check_int64(key, value)


def _check_max_resend(key: str, value: str) -> None:
    _int_in(key, value, 1, MAX_RESEND_MAX)


def _check_count(key: str, value: str) -> None:
    _int_in(key, value, 1, _INT32_MAX)


def _accept(key: str, value: str) -> None:
    pass


_Validator = Callable[[str, str], None]

_VALIDATORS: dict[str, _Validator] = {
    ENDPOINT_PARAM_NAME: _check_socket_address,
    INTERFACE_PARAM_NAME: _check_interface,
    INITIAL_TERM_ID_PARAM_NAME: _check_int32,
    TERM_ID_PARAM_NAME: _check_int32,
    TERM_OFFSET_PARAM_NAME: _check_int32,
    TERM_LENGTH_PARAM_NAME: _check_term_length,
    MTU_LENGTH_PARAM_NAME: _check_mtu,
    TTL_PARAM_NAME: _check_ttl,
    MDC_CONTROL_PARAM_NAME: _check_socket_address,
    MDC_CONTROL_MODE_PARAM_NAME: _check_control_mode,
    SESSION_ID_PARAM_NAME: _check_session_id,
    LINGER_PARAM_NAME: _check_duration,
    RELIABLE_STREAM_PARAM_NAME: _check_bool,
    TAGS_PARAM_NAME: _check_tags,
    SPARSE_PARAM_NAME: _check_bool,
    ALIAS_PARAM_NAME: _accept,
    EOS_PARAM_NAME: _check_bool,
    TETHER_PARAM_NAME: _check_bool,
    GROUP_PARAM_NAME: _check_bool,
    REJOIN_PARAM_NAME: _check_bool,
    CONGESTION_CONTROL_PARAM_NAME: _check_congestion_control,
    FLOW_CONTROL_PARAM_NAME: _check_flow_control,
    GROUP_TAG_PARAM_NAME: _check_int64,
    SPIES_SIMULATE_CONNECTION_PARAM_NAME: _check_bool,
    SOCKET_SNDBUF_PARAM_NAME: _check_positive_size,
    SOCKET_RCVBUF_PARAM_NAME: _check_positive_size,
    RECEIVER_WINDOW_LENGTH_PARAM_NAME: _check_positive_size,
    PUBLICATION_WINDOW_LENGTH_PARAM_NAME: _check_positive_size,
    MEDIA_RCV_TIMESTAMP_OFFSET_PARAM_NAME: _check_timestamp_offset,
    CHANNEL_RECEIVE_TIMESTAMP_OFFSET_PARAM_NAME: _check_timestamp_offset,
    CHANNEL_SEND_TIMESTAMP_OFFSET_PARAM_NAME: _check_timestamp_offset,
    RESPONSE_ENDPOINT_PARAM_NAME: _check_socket_address,
    RESPONSE_CORRELATION_ID_PARAM_NAME: _check_response_correlation_id,
    NAK_DELAY_PARAM_NAME: _check_duration,
    UNTETHERED_WINDOW_LIMIT_TIMEOUT_PARAM_NAME: _check_duration,
    UNTETHERED_LINGER_TIMEOUT_PARAM_NAME: _check_duration,
    UNTETHERED_RESTING_TIMEOUT_PARAM_NAME: _check_duration,
    MAX_RESEND_PARAM_NAME: _check_max_resend,
    STREAM_ID_PARAM_NAME: _check_int32,
    MAX_TERM_LENGTH_PARAM_NAME: _check_term_length,
    HEARTBEAT_INTERVAL_PARAM_NAME: _check_positive_duration,
    TAIL_PROBE_PARAM_NAME: _check_positive_duration,
    MAX_IMAGES_PARAM_NAME: _check_count,
    MAX_IMAGES_PER_SOURCE_PARAM_NAME: _check_count,
    EVICT_SILENT_PARAM_NAME: _check_bool,
}

KNOWN_PARAMS: frozenset[str] = frozenset(_VALIDATORS)
PARAMS_1_15: frozenset[str] = frozenset(
    {
        ENDPOINT_PARAM_NAME,
        INTERFACE_PARAM_NAME,
        INITIAL_TERM_ID_PARAM_NAME,
        TERM_ID_PARAM_NAME,
        TERM_OFFSET_PARAM_NAME,
        TERM_LENGTH_PARAM_NAME,
        MTU_LENGTH_PARAM_NAME,
        TTL_PARAM_NAME,
        MDC_CONTROL_PARAM_NAME,
        MDC_CONTROL_MODE_PARAM_NAME,
        SESSION_ID_PARAM_NAME,
        LINGER_PARAM_NAME,
        RELIABLE_STREAM_PARAM_NAME,
        TAGS_PARAM_NAME,
        SPARSE_PARAM_NAME,
        ALIAS_PARAM_NAME,
    }
)


class InitialPosition(NamedTuple):
    """Where an exclusive publication starts (init-term-id, term-id, term-offset)."""

    initial_term_id: int
    term_id: int
    term_offset: int


def _check_initial_position(params: Mapping[str, str]) -> None:
    names = (INITIAL_TERM_ID_PARAM_NAME, TERM_ID_PARAM_NAME, TERM_OFFSET_PARAM_NAME)
    present = [name for name in names if name in params]
    if not present:
        return
    if len(present) < 3:
        missing = next(name for name in names if name not in params)
        raise InvalidChannelError(missing, None, f"{', '.join(names)} must be given together")
    term_offset = int(params[TERM_OFFSET_PARAM_NAME])
    limit = TERM_MAX_LENGTH
    if TERM_LENGTH_PARAM_NAME in params:
        limit = parse_size(params[TERM_LENGTH_PARAM_NAME], TERM_LENGTH_PARAM_NAME, error=InvalidChannelError)
    if not 0 <= term_offset <= limit or term_offset % FRAME_ALIGNMENT:
        raise InvalidChannelError(
            TERM_OFFSET_PARAM_NAME,
            params[TERM_OFFSET_PARAM_NAME],
            f"a multiple of {FRAME_ALIGNMENT} in 0..{limit} (the term length)",
        )
    initial_term_id = int(params[INITIAL_TERM_ID_PARAM_NAME])
    term_id = int(params[TERM_ID_PARAM_NAME])
    difference = int32(term_id - initial_term_id)
    if difference < 0:
        raise InvalidChannelError(
            TERM_ID_PARAM_NAME,
            params[TERM_ID_PARAM_NAME],
            f"at most 2^31 - 1 terms after {INITIAL_TERM_ID_PARAM_NAME}={initial_term_id}",
        )


# ---------------------------------------------------------------------------------------------- the URI


class ChannelUri:
    """A parsed and validated channel; immutable and hashable (``with_param`` makes a changed copy)."""

    __slots__ = ("_media", "_params", "_prefix")

    def __init__(self, media: str, params: Mapping[str, str] | None = None, prefix: str = "") -> None:
        if media not in (UDP_MEDIA, IPC_MEDIA):
            raise InvalidChannelError("media", media, f'"{UDP_MEDIA}" or "{IPC_MEDIA}"')
        if prefix not in ("", SPY_QUALIFIER):
            raise InvalidChannelError("prefix", prefix, f'"" or "{SPY_QUALIFIER}"')
        if prefix == SPY_QUALIFIER and media != UDP_MEDIA:
            raise InvalidChannelError("media", media, f'"{UDP_MEDIA}" (a spy watches a network publication)')
        items = dict(params or {})
        for key, value in items.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidChannelError(str(key), value, "string keys and values")
            if not key or any(c in key for c in "=|?"):
                raise InvalidChannelError("uri", key, "parameter names are non-empty without '=', '|' or '?'")
            if "|" in value:
                raise InvalidChannelError(key, value, "a value without '|'")
            validator = _VALIDATORS.get(key)
            if validator is not None:
                validator(key, value)
        _check_initial_position(items)
        self._media = media
        self._prefix = prefix
        self._params = items

    @classmethod
    def parse(cls, uri: str) -> ChannelUri:
        if len(uri) > MAX_URI_LENGTH:
            raise InvalidChannelError("uri", uri[:64] + "...", f"at most {MAX_URI_LENGTH} characters")
        rest = uri
        prefix = ""
        if rest.startswith(SPY_PREFIX):
            prefix = SPY_QUALIFIER
            rest = rest[len(SPY_PREFIX) :]
        if not rest.startswith(AERON_PREFIX):
            raise InvalidChannelError("uri", uri, f"starts with '{AERON_PREFIX}' or '{SPY_PREFIX}{AERON_PREFIX}'")
        rest = rest[len(AERON_PREFIX) :]
        media, question, query = rest.partition("?")
        if ":" in media:
            raise InvalidChannelError("media", media, f'"{UDP_MEDIA}" or "{IPC_MEDIA}" (no \':\')')
        params: dict[str, str] = {}
        if question:
            for pair in query.split("|"):
                key, equals, value = pair.partition("=")
                if not equals:
                    raise InvalidChannelError("uri", uri, f"key=value pairs separated by '|'; found {pair!r}")
                params[key] = value
        return cls(media, params, prefix)

    # -------------------------------------------------------------- plain access

    @property
    def media(self) -> str:
        return self._media

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def params(self) -> dict[str, str]:
        """A copy of the parameters, in URI order."""
        return dict(self._params)

    @property
    def is_ipc(self) -> bool:
        return self._media == IPC_MEDIA

    @property
    def is_udp(self) -> bool:
        return self._media == UDP_MEDIA

    @property
    def is_spy(self) -> bool:
        return self._prefix == SPY_QUALIFIER

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._params.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._params

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def with_param(self, key: str, value: str) -> ChannelUri:
        params = dict(self._params)
        params[key] = value
        return ChannelUri(self._media, params, self._prefix)

    def without_param(self, key: str) -> ChannelUri:
        params = dict(self._params)
        params.pop(key, None)
        return ChannelUri(self._media, params, self._prefix)

    def without_spy_prefix(self) -> ChannelUri:
        return ChannelUri(self._media, self._params, "")

    # -------------------------------------------------------------- typed access (values were validated)

    def get_int(self, key: str) -> int | None:
        value = self._params.get(key)
        return None if value is None else int(value)

    def get_bool(self, key: str) -> bool | None:
        value = self._params.get(key)
        return None if value is None else value == "true"

    def get_size(self, key: str) -> int | None:
        value = self._params.get(key)
        return None if value is None else parse_size(value, key, error=InvalidChannelError)

    def get_duration_ns(self, key: str) -> int | None:
        value = self._params.get(key)
        return None if value is None else parse_duration_ns(value, key, error=InvalidChannelError)

    @property
    def endpoint(self) -> str | None:
        return self._params.get(ENDPOINT_PARAM_NAME)

    @property
    def interface(self) -> str | None:
        return self._params.get(INTERFACE_PARAM_NAME)

    @property
    def control(self) -> str | None:
        return self._params.get(MDC_CONTROL_PARAM_NAME)

    @property
    def control_mode(self) -> str | None:
        return self._params.get(MDC_CONTROL_MODE_PARAM_NAME)

    @property
    def term_length(self) -> int | None:
        return self.get_size(TERM_LENGTH_PARAM_NAME)

    @property
    def mtu(self) -> int | None:
        return self.get_size(MTU_LENGTH_PARAM_NAME)

    @property
    def ttl(self) -> int | None:
        return self.get_int(TTL_PARAM_NAME)

    @property
    def linger_ns(self) -> int | None:
        return self.get_duration_ns(LINGER_PARAM_NAME)

    @property
    def reliable(self) -> bool | None:
        return self.get_bool(RELIABLE_STREAM_PARAM_NAME)

    @property
    def sparse(self) -> bool | None:
        return self.get_bool(SPARSE_PARAM_NAME)

    @property
    def session_id(self) -> int | None:
        """The fixed session id, or None when absent or given as ``tag:N``."""
        value = self._params.get(SESSION_ID_PARAM_NAME)
        if value is None or value.startswith(TAG_PREFIX):
            return None
        return int(value)

    @property
    def session_id_tag(self) -> int | None:
        """N of ``session-id=tag:N`` (the session of the publication tagged N), else None."""
        value = self._params.get(SESSION_ID_PARAM_NAME)
        if value is None or not value.startswith(TAG_PREFIX):
            return None
        return int(value[len(TAG_PREFIX) :])

    @property
    def channel_tag(self) -> int | None:
        tags = self._params.get(TAGS_PARAM_NAME)
        if tags is None:
            return None
        first = tags.split(",")[0]
        return int(first) if first else None

    @property
    def entity_tag(self) -> int | None:
        tags = self._params.get(TAGS_PARAM_NAME)
        if tags is None or "," not in tags:
            return None
        return int(tags.split(",")[1])

    @property
    def initial_position(self) -> InitialPosition | None:
        if INITIAL_TERM_ID_PARAM_NAME not in self._params:
            return None
        return InitialPosition(
            int(self._params[INITIAL_TERM_ID_PARAM_NAME]),
            int(self._params[TERM_ID_PARAM_NAME]),
            int(self._params[TERM_OFFSET_PARAM_NAME]),
        )

    # -------------------------------------------------------------- identity

    def __str__(self) -> str:
        head = f"{SPY_PREFIX}{AERON_PREFIX}" if self._prefix else AERON_PREFIX
        if not self._params:
            return head + self._media
        return head + self._media + "?" + "|".join(f"{k}={v}" for k, v in self._params.items())

    def __repr__(self) -> str:
        return f"ChannelUri.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChannelUri):
            return NotImplemented
        return self._media == other._media and self._prefix == other._prefix and self._params == other._params

    def __hash__(self) -> int:
        return hash((self._media, self._prefix, frozenset(self._params.items())))
