"""UdpChannel: URI -> addresses, modes and 1.15.1 canonical forms (cases from 1.15.1's UdpChannelTest)."""

from __future__ import annotations

import re
import socket

import pytest

from driver.errors import InvalidChannelError
from driver.media import InterfaceSearchAddress, UdpChannel, destination_address, resolve_host
from driver.media.udp_channel import canonicalise, parse_interface, parse_socket_address
from driver.uri import ChannelUri

HOSTS = {"localhost": "127.0.0.1", "box.example": "10.1.2.3", "v6.example": "fe80::1"}


def resolver(host: str) -> str:
    if host in HOSTS:
        return HOSTS[host]
    return resolve_host(host) if host[:1].isdigit() or ":" in host else _unknown(host)


def _unknown(host: str) -> str:
    raise OSError(f"unknown host {host}")


def parse(uri: str, **kwargs: object) -> UdpChannel:
    return UdpChannel.parse(uri, resolver=resolver, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ unicast


def test_explicit_local_address_and_port() -> None:
    channel = parse("aeron:udp?interface=localhost:40123|endpoint=localhost:40124")
    assert channel.local_data == channel.local_control == ("127.0.0.1", 40123)
    assert channel.remote_data == channel.remote_control == ("127.0.0.1", 40124)
    assert not channel.is_multicast
    assert not channel.has_explicit_control
    assert channel.protocol_family == socket.AF_INET


def test_implied_local_address() -> None:
    channel = parse("aeron:udp?endpoint=localhost:40124")
    assert channel.local_data == channel.local_control == ("0.0.0.0", 0)
    assert channel.remote_data == channel.remote_control == ("127.0.0.1", 40124)
    assert channel.interface == InterfaceSearchAddress.wildcard()
    assert channel.multicast_ttl == 0


def test_implied_local_port_and_any_address_interface() -> None:
    assert parse("aeron:udp?interface=localhost|endpoint=localhost:40124").local_data == ("127.0.0.1", 0)
    assert parse("aeron:udp?interface=0.0.0.0|endpoint=localhost:40124").local_data == ("0.0.0.0", 0)
    ipv6 = parse("aeron:udp?endpoint=[::1]:40124|interface=[::]")
    assert ipv6.local_data == ("::", 0)
    assert ipv6.remote_data == ("::1", 40124)
    assert ipv6.protocol_family == socket.AF_INET6


@pytest.mark.parametrize(
    ("uri", "canonical"),
    [
        ("aeron:udp?endpoint=192.168.0.1:40456", "UDP-00000000-0-c0a80001-40456"),
        ("aeron:udp?interface=127.0.0.1|endpoint=192.168.0.1:40456", "UDP-7f000001-0-c0a80001-40456"),
        ("aeron:udp?interface=127.0.0.1:40455|endpoint=192.168.0.1:40456", "UDP-7f000001-40455-c0a80001-40456"),
        ("aeron:udp?interface=localhost|endpoint=localhost:40456", "UDP-7f000001-0-7f000001-40456"),
        (
            "aeron:udp?endpoint=192.168.0.1:40456|interface=[::1]",
            "UDP-00000000000000000000000000000001-0-c0a80001-40456",
        ),
        (
            "aeron:udp?endpoint=[fe80::5246:5dff:fe73:df06]:40456|interface=127.0.0.1:40455",
            "UDP-7f000001-40455-fe8000000000000052465dfffe73df06-40456",
        ),
        ("aeron:udp?endpoint=box.example:7", "UDP-00000000-0-0a010203-7"),
        # multicast
        ("aeron:udp?interface=localhost|endpoint=224.0.1.1:40456", "UDP-7f000001-0-e0000101-40456"),
        ("aeron:udp?interface=127.0.0.1|endpoint=224.0.0.1:40456", "UDP-7f000001-0-e0000001-40456"),
        ("aeron:udp?interface=127.0.0.1:40455|endpoint=224.0.1.1:40456", "UDP-7f000001-40455-e0000101-40456"),
        (
            "aeron:udp?endpoint=[FF01::FD]:40456|interface=localhost",
            "UDP-7f000001-0-ff0100000000000000000000000000fd-40456",
        ),
        (
            "aeron:udp?endpoint=224.0.1.1:40456|interface=[::1]:54321/64",
            "UDP-00000000000000000000000000000001-54321-e0000101-40456",
        ),
        # explicit control
        ("aeron:udp?control=localhost:40457|endpoint=192.168.0.1:40456", "UDP-7f000001-40457-c0a80001-40456"),
        ("aeron:udp?control=localhost:40457|control-mode=dynamic", "UDP-7f000001-40457-00000000-0"),
    ],
)
def test_canonical_forms_match_1_15_1(uri: str, canonical: str) -> None:
    channel = parse(uri)
    assert channel.canonical_form == canonical
    assert str(channel) == canonical
    assert channel.original_uri_string == uri
    assert channel.channel_uri == ChannelUri.parse(uri)


def test_canonicalise() -> None:
    assert canonicalise(("10.0.0.1", 1), ("::1", 2)) == "UDP-0a000001-1-00000000000000000000000000000001-2"


def test_equality_and_hashing_follow_the_canonical_form() -> None:
    first = parse("aeron:udp?endpoint=localhost:40124")
    second = parse("aeron:udp?endpoint=127.0.0.1:40124|alias=x")
    assert first == second
    assert hash(first) == hash(second)
    assert {first: 1}[second] == 1
    assert first != parse("aeron:udp?endpoint=localhost:40125")
    assert first != "UDP-00000000-0-7f000001-40124"


def test_channel_uri_object_accepted() -> None:
    uri = ChannelUri.parse("aeron:udp?endpoint=localhost:40124")
    assert parse(uri).canonical_form == parse(str(uri)).canonical_form  # type: ignore[arg-type]


def test_spy_prefix_is_kept_on_the_uri() -> None:
    channel = parse("aeron-spy:aeron:udp?endpoint=localhost:40124")
    assert channel.channel_uri.is_spy
    assert channel.remote_data == ("127.0.0.1", 40124)


# ------------------------------------------------------------------------------------------ multicast


def test_multicast_addresses() -> None:
    channel = parse("aeron:udp?interface=localhost|endpoint=224.10.9.9:40124|ttl=4")
    assert channel.is_multicast
    assert channel.remote_data == ("224.10.9.9", 40124)
    assert channel.remote_control == ("224.10.9.10", 40124)
    assert channel.local_data == channel.local_control == ("127.0.0.1", 0)
    assert channel.multicast_ttl == 4
    assert channel.interface == InterfaceSearchAddress("127.0.0.1", 0, 32)


def test_multicast_without_interface_binds_the_wildcard() -> None:
    channel = parse("aeron:udp?endpoint=239.255.0.1:40456")
    assert channel.local_data == ("0.0.0.0", 0)
    assert channel.remote_control == ("239.255.0.2", 40456)


def test_ipv6_multicast_control_is_data_plus_one() -> None:
    assert parse("aeron:udp?endpoint=[ff02::fd]:40456").remote_control == ("ff02::fe", 40456)


@pytest.mark.parametrize("endpoint", ["224.10.9.8:40124", "239.0.0.0:1", "[ff02::fe]:40456"])
def test_even_multicast_address_is_rejected(endpoint: str) -> None:
    with pytest.raises(InvalidChannelError, match="odd") as info:
        parse(f"aeron:udp?endpoint={endpoint}")
    assert info.value.field == "endpoint"


def test_ttl_ignored_for_unicast() -> None:
    assert parse("aeron:udp?endpoint=localhost:1|ttl=8").multicast_ttl == 0


def test_interface_subnet_selects_a_local_address() -> None:
    def local_addresses() -> list[str]:
        return ["10.9.9.9", "fe80::1", "127.0.0.1", "192.168.1.20"]

    channel = parse("aeron:udp?interface=127.0.0.0:40455/24|endpoint=224.0.1.1:40456", local_addresses=local_addresses)
    assert channel.canonical_form == "UDP-7f000001-40455-e0000101-40456"
    unicast = parse("aeron:udp?interface=192.168.0.0/16|endpoint=10.0.0.1:5", local_addresses=local_addresses)
    assert unicast.local_data == ("192.168.1.20", 0)
    wildcard = parse("aeron:udp?endpoint=224.0.1.1:40456", local_addresses=local_addresses)
    assert wildcard.local_data == ("10.9.9.9", 0)  # first local address of the family, as Aeron picks one
    with pytest.raises(InvalidChannelError, match="local network interface") as info:
        parse("aeron:udp?interface=172.16.0.0/12|endpoint=10.0.0.1:5", local_addresses=local_addresses)
    assert info.value.field == "interface"
    # without a list of local addresses the interface is taken as given
    assert parse("aeron:udp?interface=127.0.0.0/24|endpoint=10.0.0.1:5").local_data == ("127.0.0.0", 0)


# ------------------------------------------------------------------------------------------ control & modes


def test_explicit_control() -> None:
    channel = parse("aeron:udp?control=localhost:40457|endpoint=localhost:40456")
    assert channel.has_explicit_control
    assert not channel.is_multicast
    assert channel.local_data == channel.local_control == ("127.0.0.1", 40457)
    assert channel.remote_data == channel.remote_control == ("127.0.0.1", 40456)
    assert not channel.is_manual_control_mode
    assert not channel.is_dynamic_control_mode


def test_control_modes() -> None:
    dynamic = parse("aeron:udp?control=localhost:40457|control-mode=dynamic")
    assert dynamic.is_dynamic_control_mode
    assert not dynamic.is_manual_control_mode
    assert dynamic.remote_data == ("0.0.0.0", 0)
    manual = parse("aeron:udp?control-mode=manual")
    assert manual.is_manual_control_mode
    assert not manual.has_explicit_control
    assert manual.has_no_distinguishing_characteristic


def test_unique_suffix_for_channels_without_distinguishing_characteristic() -> None:
    first = parse("aeron:udp?control-mode=manual")
    second = parse("aeron:udp?control-mode=manual")
    pattern = re.compile(r"UDP-00000000-0-00000000-0-(\d+)")
    first_match, second_match = pattern.fullmatch(first.canonical_form), pattern.fullmatch(second.canonical_form)
    assert first_match
    assert second_match
    assert int(second_match.group(1)) > int(first_match.group(1))
    assert first != second
    tagged = parse("aeron:udp?tags=7")  # a tag distinguishes: no suffix
    assert tagged.canonical_form == "UDP-00000000-0-00000000-0"
    assert tagged.tag == 7
    assert tagged.has_tag


def test_tag_matching() -> None:
    publication = parse("aeron:udp?endpoint=localhost:5|tags=7")
    reference = parse("aeron:udp?tags=7")
    assert publication.does_tag_match(reference)
    assert not publication.does_tag_match(parse("aeron:udp?tags=8"))
    assert not parse("aeron:udp?endpoint=localhost:5").does_tag_match(reference)
    with pytest.raises(InvalidChannelError):
        publication.does_tag_match(parse("aeron:udp?endpoint=localhost:6|tags=7"))


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("uri", "field"),
    [
        ("aeron:udp", "endpoint"),  # nothing to tell the channel apart
        ("aeron:udp?alias=x", "endpoint"),
        ("aeron:udp?endpoint=localhost", "endpoint"),  # no port
        ("aeron:udp?endpoint=localhost:", "endpoint"),
        ("aeron:udp?endpoint=localhost:70000", "endpoint"),
        ("aeron:udp?endpoint=nowhere.invalid:40124", "endpoint"),  # unknown host
        ("aeron:udp?control=nowhere.invalid:40124", "control"),
        ("aeron:udp?endpoint=localhost:1|interface=nowhere.invalid", "interface"),
        ("aeron:udp?endpoint=localhost:1|interface=127.0.0.1/33", "interface"),
        ("aeron:udp?endpoint=localhost:1|interface=127.0.0.1:x", "interface"),
        ("aeron:udp?control-mode=dynamic", "control-mode"),  # dynamic needs a control address (today's rule)
        ("aeron:ipc", "media"),
        ("unknownudp://localhost:40124", "uri"),
    ],
)
def test_bad_channels_raise_typed_errors(uri: str, field: str) -> None:
    with pytest.raises(InvalidChannelError) as info:
        parse(uri)
    assert info.value.field == field


def test_unknown_host_message() -> None:
    with pytest.raises(InvalidChannelError, match="unknown host"):
        parse("aeron:udp?endpoint=nowhere.invalid:40124")


def test_resolver_must_return_an_ip_literal() -> None:
    with pytest.raises(InvalidChannelError, match="unknown host"):
        UdpChannel.parse("aeron:udp?endpoint=somewhere:1", resolver=lambda host: "not-an-ip")


# ------------------------------------------------------------------------------------------ helpers


def test_parse_socket_address_forms() -> None:
    assert parse_socket_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_socket_address("[::1]:65535") == ("::1", 65535)
    assert parse_socket_address("[fe80::1%eth0]:5", resolver=lambda host: host.split("%")[0]) == ("fe80::1", 5)
    for bad in ("[::1]", "[::1]5", "::1:5", "a:b:c", ":5", "host:-1"):
        with pytest.raises(InvalidChannelError, match="host:port required"):
            parse_socket_address(bad, "endpoint", resolver)


def test_parse_interface_forms() -> None:
    assert parse_interface("localhost", resolver) == InterfaceSearchAddress("127.0.0.1", 0, 32)
    assert parse_interface("127.0.0.0:40455/24", resolver) == InterfaceSearchAddress("127.0.0.0", 40455, 24)
    assert parse_interface("[::1]:54321/64", resolver) == InterfaceSearchAddress("::1", 54321, 64)
    assert parse_interface("[::1]", resolver) == InterfaceSearchAddress("::1", 0, 128)
    assert parse_interface("10.0.0.0/8", resolver).contains("10.200.1.1")
    assert not parse_interface("10.0.0.0/8", resolver).contains("::1")


def test_resolve_host_default() -> None:
    assert resolve_host("127.0.0.1") == "127.0.0.1"
    assert resolve_host("0:0::1") == "::1"
    assert resolve_host("localhost") in ("127.0.0.1", "::1")


def test_destination_address() -> None:
    assert destination_address("aeron:udp?endpoint=localhost:40124", resolver) == ("127.0.0.1", 40124)
    assert destination_address(ChannelUri.parse("aeron:udp?endpoint=10.0.0.1:1"), resolver) == ("10.0.0.1", 1)
    with pytest.raises(InvalidChannelError, match="host:port required") as info:
        destination_address("aeron:udp?control=localhost:1", resolver)
    assert info.value.field == "endpoint"
    with pytest.raises(InvalidChannelError) as info:
        destination_address("aeron:ipc", resolver)
    assert info.value.field == "media"
