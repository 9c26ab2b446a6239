"""A UDP channel URI turned into the socket addresses a driver binds and sends to.

Theory of operation
-------------------
Follows Aeron 1.15.1's ``UdpChannel.parse``; three shapes:

* **multicast** -- ``endpoint`` is a multicast group whose last address byte is
  odd; data goes to it and control (SM/NAK) to the same group with the last byte
  + 1, same port. ``interface`` picks the local address (port and prefix
  optional); ``ttl`` sets the multicast TTL (else 0 = the OS default).
* **explicit control** (multi-destination cast, or a subscription that tells its
  sender where to find it) -- ``control=host:port`` is the local address of both
  data and control, ``endpoint`` (default ``0.0.0.0:0``) the remote.
* **unicast** -- ``endpoint`` is the remote address (a subscription binds it),
  ``interface`` the local one (default the wildcard ``0.0.0.0:0``).

A UDP channel needs an endpoint, a control address, a ``tags`` channel tag or a
``control-mode``; a dynamic control mode needs a control address (today's
Aeron's rule). The canonical form (1.15.1:
``UDP-<local address hex>-<local port>-<remote address hex>-<remote port>``)
names the endpoint: two channels with the same canonical form share a socket.
A unicast channel with no endpoint, control or tag is unique, so its canonical
form gets a process-wide ``-<n>`` suffix.

The only I/O is host name resolution, done by a ``resolver(host) -> ip`` given
to :meth:`UdpChannel.parse` (default :func:`resolve_host`, via
``socket.getaddrinfo``, IPv4 preferred). Unlike Aeron, the driver does not scan
the machine's network interfaces: an ``interface`` address is used as given
unless ``local_addresses`` (the machine's addresses, in order of preference) is
passed, in which case it selects the first local address inside
``interface``'s subnet, as Aeron does for ``interface=10.0.0.0/8``. Multicast
without ``interface`` therefore binds the wildcard address where Aeron would
name the first multicast-capable interface; only the canonical form differs,
and that never leaves the driver.

Every failure raises :class:`~driver.errors.InvalidChannelError` naming the
parameter (``endpoint``, ``control``, ``interface``, ``control-mode``, ``media``).
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import socket
from collections.abc import Callable, Iterable

import attrs

from driver.errors import InvalidChannelError
from driver.uri import (
    CONTROL_MODE_DYNAMIC,
    CONTROL_MODE_MANUAL,
    ENDPOINT_PARAM_NAME,
    INTERFACE_PARAM_NAME,
    MDC_CONTROL_MODE_PARAM_NAME,
    MDC_CONTROL_PARAM_NAME,
    UDP_MEDIA,
    ChannelUri,
)

__all__ = [
    "CANONICAL_PREFIX",
    "InterfaceSearchAddress",
    "LocalAddresses",
    "Resolver",
    "SocketAddress",
    "UdpChannel",
    "canonicalise",
    "destination_address",
    "parse_interface",
    "parse_socket_address",
    "resolve_host",
]

CANONICAL_PREFIX = "UDP-"

SocketAddress = tuple[str, int]
"""(IP address literal, port), as the socket module takes it."""

Resolver = Callable[[str], str]
"""Host name or IP literal -> IP literal; raises OSError (or ValueError) for an unknown host."""

LocalAddresses = Callable[[], Iterable[str]]
"""The machine's own IP addresses, in order of preference."""

_IPV4_ANY = "0.0.0.0"
_IPV6_ANY = "::"
_unique_canonical_form_value = itertools.count()

_IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def resolve_host(host: str) -> str:
    """An IP literal for ``host``: itself when it already is one, else the first getaddrinfo answer (IPv4 first)."""
    literal = _literal(host)
    if literal is not None:
        return literal
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    if not infos:
        raise OSError(f"no address for {host!r}")
    for family, _, _, _, sockaddr in infos:
        if family == socket.AF_INET:
            return str(sockaddr[0])
    return str(infos[0][4][0])


@functools.lru_cache(maxsize=4096)
def _literal(host: str) -> str | None:
    """``host`` as an IP literal in its normal form, None when it is a name (only literals are remembered: a
    server parses the same few addresses in every channel it opens, and ``ip_address`` is slow)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _ip(text: str) -> _IpAddress:
    return ipaddress.ip_address(text)


def _resolve(field: str, value: str, host: str, resolver: Resolver) -> str:
    try:
        resolved = resolver(host)
        _ip(resolved)  # the resolver must hand back a literal
    except (OSError, ValueError, UnicodeError) as exc:
        raise InvalidChannelError(field, value, f"unknown host {host!r} ({exc})") from None
    return resolved


def _parse_port(field: str, value: str, text: str, allowed: str) -> int:
    if not text.isdigit() or not text.isascii() or int(text) > 65535:
        raise InvalidChannelError(field, value, allowed)
    return int(text)


def parse_socket_address(
    value: str, field: str = ENDPOINT_PARAM_NAME, resolver: Resolver = resolve_host
) -> SocketAddress:
    """``host:port`` or ``[ipv6%scope]:port`` -> a resolved (ip, port) (Aeron's SocketAddressUtil)."""
    allowed = "host:port required (or [ipv6]:port), port 0..65535"
    if value.startswith("["):
        close = value.find("]")
        if close < 0 or value[close + 1 : close + 2] != ":":
            raise InvalidChannelError(field, value, allowed)
        host, port_text = value[1:close], value[close + 2 :]
    else:
        host, colon, port_text = value.partition(":")
        if not colon or ":" in port_text:
            raise InvalidChannelError(field, value, allowed)
    if not host:
        raise InvalidChannelError(field, value, allowed)
    port = _parse_port(field, value, port_text, allowed)
    return _resolve(field, value, host, resolver), port


@attrs.frozen
class InterfaceSearchAddress:
    """The ``interface`` parameter: a local address, an optional port and a subnet prefix length."""

    address: str
    port: int = 0
    prefix_length: int = 32

    @classmethod
    def wildcard(cls) -> InterfaceSearchAddress:
        return cls(_IPV4_ANY, 0, 0)

    @property
    def is_wildcard(self) -> bool:
        return _ip(self.address).is_unspecified

    @property
    def socket_address(self) -> SocketAddress:
        return (self.address, self.port)

    def contains(self, address: str) -> bool:
        """Is ``address`` inside this subnet (same family; a /0 wildcard holds every address)?"""
        candidate = _ip(address)
        if self.prefix_length == 0:
            return True
        network = ipaddress.ip_network(f"{_ip(self.address)}/{self.prefix_length}", strict=False)
        return candidate.version == network.version and candidate in network


def parse_interface(value: str, resolver: Resolver = resolve_host) -> InterfaceSearchAddress:
    """``host[:port][/prefix]`` or ``[ipv6][:port][/prefix]`` (Aeron's InterfaceSearchAddress)."""
    field = INTERFACE_PARAM_NAME
    allowed = "host[:port][/prefix length] or [ipv6][:port][/prefix length]"
    slash = value.rfind("/")
    colon = value.rfind(":")
    brace = value.rfind("]")
    end = len(value)
    if slash >= 0:
        end = slash
    has_port = colon >= 0 and colon > brace
    if has_port:
        end = min(end, colon)
    host = value[:end]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise InvalidChannelError(field, value, allowed)
    port = 0
    if has_port:
        port = _parse_port(field, value, value[colon + 1 : slash if slash > colon else len(value)], allowed)
    address = _resolve(field, value, host, resolver)
    bits = 32 if _ip(address).version == 4 else 128
    prefix = bits
    if slash >= 0:
        text = value[slash + 1 :]
        if not text.isdigit() or not text.isascii() or int(text) > bits:
            raise InvalidChannelError(field, value, f"{allowed}; prefix length 0..{bits}")
        prefix = int(text)
    return InterfaceSearchAddress(address, port, prefix)


def canonicalise(local: SocketAddress, remote: SocketAddress) -> str:
    """1.15.1's endpoint name: ``UDP-<local addr hex>-<local port>-<remote addr hex>-<remote port>``."""
    return f"{CANONICAL_PREFIX}{_ip(local[0]).packed.hex()}-{local[1]}-{_ip(remote[0]).packed.hex()}-{remote[1]}"


def _udp_uri(uri: str | ChannelUri) -> ChannelUri:
    channel_uri = uri if isinstance(uri, ChannelUri) else ChannelUri.parse(uri)
    if channel_uri.media != UDP_MEDIA:
        raise InvalidChannelError("media", channel_uri.media, f'"{UDP_MEDIA}" (UdpChannel only supports UDP)')
    return channel_uri


def _local_interface(
    search: InterfaceSearchAddress, local_addresses: LocalAddresses | None, multicast: bool
) -> SocketAddress:
    """The local address ``interface`` designates (see the module notes on interface scanning)."""
    if local_addresses is None or (search.is_wildcard and not multicast):
        return search.socket_address
    for address in local_addresses():
        try:
            if search.contains(address):
                return (str(_ip(address)), search.port)
        except ValueError:
            continue
    shown = f"{search.address}/{search.prefix_length}"
    raise InvalidChannelError(INTERFACE_PARAM_NAME, shown, "an address or subnet of a local network interface")


def _multicast_control(data: SocketAddress) -> SocketAddress:
    raw = bytearray(_ip(data[0]).packed)
    raw[-1] = (raw[-1] + 1) & 0xFF
    return (str(ipaddress.ip_address(bytes(raw))), data[1])


@attrs.frozen(eq=False)
class UdpChannel:
    """The addresses, mode and canonical name of one UDP channel; equal when canonical forms are."""

    original_uri_string: str
    channel_uri: ChannelUri
    remote_data: SocketAddress
    local_data: SocketAddress
    remote_control: SocketAddress
    local_control: SocketAddress
    interface: InterfaceSearchAddress
    canonical_form: str
    is_multicast: bool = False
    has_explicit_control: bool = False
    control_mode: str | None = None
    multicast_ttl: int = 0
    tag: int | None = None
    has_no_distinguishing_characteristic: bool = False

    @classmethod
    def parse(
        cls,
        uri: str | ChannelUri,
        *,
        resolver: Resolver = resolve_host,
        local_addresses: LocalAddresses | None = None,
    ) -> UdpChannel:
        channel_uri = _udp_uri(uri)
        endpoint_text = channel_uri.get(ENDPOINT_PARAM_NAME)
        control_text = channel_uri.get(MDC_CONTROL_PARAM_NAME)
        control_mode = channel_uri.get(MDC_CONTROL_MODE_PARAM_NAME)
        tag = channel_uri.channel_tag
        no_distinguishing = endpoint_text is None and control_text is None and tag is None
        if no_distinguishing and control_mode is None:
            raise InvalidChannelError(
                ENDPOINT_PARAM_NAME, None, "a UDP channel needs an endpoint, a control address, tags or a control-mode"
            )
        if control_mode == CONTROL_MODE_DYNAMIC and control_text is None:
            raise InvalidChannelError(MDC_CONTROL_MODE_PARAM_NAME, control_mode, "a control address with it")

        endpoint = (
            parse_socket_address(endpoint_text, ENDPOINT_PARAM_NAME, resolver)
            if endpoint_text is not None
            else (_IPV4_ANY, 0)
        )
        control = (
            parse_socket_address(control_text, MDC_CONTROL_PARAM_NAME, resolver) if control_text is not None else None
        )
        interface_text = channel_uri.get(INTERFACE_PARAM_NAME)
        search = InterfaceSearchAddress.wildcard()
        if interface_text is not None:
            search = parse_interface(interface_text, resolver)

        is_multicast = False
        has_explicit_control = False
        ttl = 0
        if _ip(endpoint[0]).is_multicast:
            if not _ip(endpoint[0]).packed[-1] & 1:
                raise InvalidChannelError(
                    ENDPOINT_PARAM_NAME, endpoint_text, "a multicast data address whose last byte is odd"
                )
            is_multicast = True
            local = _local_interface(search, local_addresses, multicast=True)
            remote_control = _multicast_control(endpoint)
            canonical_form = canonicalise(local, endpoint)
            ttl = channel_uri.ttl or 0
        elif control is not None:
            has_explicit_control = True
            local = control
            remote_control = endpoint
            canonical_form = canonicalise(control, endpoint)
        else:
            local = _local_interface(search, local_addresses, multicast=False)
            remote_control = endpoint
            suffix = f"-{next(_unique_canonical_form_value)}" if no_distinguishing else ""
            canonical_form = canonicalise(local, endpoint) + suffix
        return cls(
            original_uri_string=str(uri),
            channel_uri=channel_uri,
            remote_data=endpoint,
            local_data=local,
            remote_control=remote_control,
            local_control=local,
            interface=search,
            canonical_form=canonical_form,
            is_multicast=is_multicast,
            has_explicit_control=has_explicit_control,
            control_mode=control_mode,
            multicast_ttl=ttl,
            tag=tag,
            has_no_distinguishing_characteristic=no_distinguishing,
        )

    @property
    def binds_any_port(self) -> bool:
        """A unicast endpoint on port 0: its receive endpoint binds a port the kernel picks (one per request,
        never shared until bound; then known by :meth:`with_bound_port`'s canonical form)."""
        return (
            ENDPOINT_PARAM_NAME in self.channel_uri
            and not self.is_multicast
            and not self.has_explicit_control
            and self.remote_data[1] == 0
        )

    def with_bound_port(self, port: int) -> UdpChannel:
        """This channel with its endpoint's port 0 replaced by the port bound for it."""
        host = self.remote_data[0]
        endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return UdpChannel.parse(self.channel_uri.with_param(ENDPOINT_PARAM_NAME, endpoint))

    @property
    def is_manual_control_mode(self) -> bool:
        return self.control_mode == CONTROL_MODE_MANUAL

    @property
    def is_dynamic_control_mode(self) -> bool:
        return self.control_mode == CONTROL_MODE_DYNAMIC

    @property
    def has_tag(self) -> bool:
        return self.tag is not None

    @property
    def protocol_family(self) -> socket.AddressFamily:
        return socket.AF_INET if _ip(self.remote_data[0]).version == 4 else socket.AF_INET6

    def does_tag_match(self, other: UdpChannel) -> bool:
        """Does ``other`` (a ``tags=`` reference with no addresses) name this channel by its tag?"""
        if self.tag is None or other.tag is None or self.tag != other.tag:
            return False
        if other.remote_data == (_IPV4_ANY, 0) and other.local_data == (_IPV4_ANY, 0):
            return True
        raise InvalidChannelError("tags", str(other.tag), "a channel matched by tag has no endpoint or control address")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UdpChannel):
            return NotImplemented
        return self.canonical_form == other.canonical_form

    def __hash__(self) -> int:
        return hash(self.canonical_form)

    def __str__(self) -> str:
        return self.canonical_form


def destination_address(uri: str | ChannelUri, resolver: Resolver = resolve_host) -> SocketAddress:
    """The resolved ``endpoint`` of an ADD/REMOVE_DESTINATION channel (multi-destination cast)."""
    channel_uri = _udp_uri(uri)
    endpoint_text = channel_uri.get(ENDPOINT_PARAM_NAME)
    if endpoint_text is None:
        raise InvalidChannelError(ENDPOINT_PARAM_NAME, None, "host:port required for a destination")
    return parse_socket_address(endpoint_text, ENDPOINT_PARAM_NAME, resolver)
