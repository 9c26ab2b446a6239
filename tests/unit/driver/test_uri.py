"""Channel URI grammar, typed parameter validation, sizes and durations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.errors import DriverConfigurationError, InvalidChannelError
from driver.uri import (
    KNOWN_PARAMS,
    PARAMS_1_15,
    ChannelUri,
    InitialPosition,
    parse_duration_ns,
    parse_size,
)

# ------------------------------------------------------------------------------------------- sizes, durations


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("1408", 1408),
        ("64k", 65536),
        ("64K", 65536),
        ("16m", 16 * 1024 * 1024),
        ("1G", 1 << 30),
        ("-1", -1),
        ("8589934591g", 8589934591 << 30),
    ],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "k", "1.5m", "12kb", " 12", "1_000", "0x10", "8589934592g", "\uff11\uff12"])
def test_parse_size_rejects_naming_the_field(text: str) -> None:
    with pytest.raises(DriverConfigurationError) as info:
        parse_size(text, "aeron.mtu.length")
    assert info.value.field == "aeron.mtu.length"
    assert info.value.value == text


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("250", 250),
        ("250ns", 250),
        ("7us", 7_000),
        ("5ms", 5_000_000),
        ("5MS", 5_000_000),
        ("5s", 5_000_000_000),
        ("5S", 5_000_000_000),
        ("0s", 0),
    ],
)
def test_parse_duration_ns(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("text", ["", "s", "5m", "5h", "1.5s", "ms", "5 s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(DriverConfigurationError, match="duration"):
        parse_duration_ns(text)


@given(st.integers(0, 1 << 32), st.sampled_from(["", "k", "m", "g"]))
def test_size_round_trip(number: int, suffix: str) -> None:
    multiplier = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[suffix]
    assert parse_size(f"{number}{suffix}") == number * multiplier


# ------------------------------------------------------------------------------------------- grammar


@pytest.mark.parametrize(
    ("text", "prefix", "media", "params"),
    [
        ("aeron:ipc", "", "ipc", {}),
        ("aeron:udp?endpoint=localhost:40123", "", "udp", {"endpoint": "localhost:40123"}),
        (
            "aeron:udp?endpoint=224.0.1.1:40456|interface=192.168.1.0/24|ttl=4",
            "",
            "udp",
            {"endpoint": "224.0.1.1:40456", "interface": "192.168.1.0/24", "ttl": "4"},
        ),
        ("aeron-spy:aeron:udp?endpoint=[::1]:40123", "aeron-spy", "udp", {"endpoint": "[::1]:40123"}),
        ("aeron:ipc?alias=a=b:c,d", "", "ipc", {"alias": "a=b:c,d"}),
        ("aeron:ipc?alias=", "", "ipc", {"alias": ""}),
        ("aeron:udp?control-mode=manual", "", "udp", {"control-mode": "manual"}),
    ],
)
def test_parse(text: str, prefix: str, media: str, params: dict[str, str]) -> None:
    uri = ChannelUri.parse(text)
    assert (uri.prefix, uri.media, uri.params) == (prefix, media, params)
    assert str(uri) == text
    assert ChannelUri.parse(str(uri)) == uri
    assert hash(ChannelUri.parse(text)) == hash(uri)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("udp?endpoint=x:1", "uri"),
        ("Aeron:ipc", "uri"),
        ("aeron-spy:ipc", "uri"),
        ("aeron:tcp", "media"),
        ("aeron:", "media"),
        ("aeron:ud:p", "media"),
        ("aeron-spy:aeron:ipc", "media"),
        ("aeron:udp?", "uri"),
        ("aeron:udp?endpoint", "uri"),
        ("aeron:udp?endpoint=h:1|", "uri"),
        ("aeron:udp?=5", "uri"),
        ("aeron:ipc?" + "alias=" + "x" * 4096, "uri"),
    ],
)
def test_grammar_errors_name_the_part(text: str, field: str) -> None:
    with pytest.raises(InvalidChannelError) as info:
        ChannelUri.parse(text)
    assert info.value.field == field


def test_repeated_key_keeps_the_last_value_like_aeron() -> None:
    assert ChannelUri.parse("aeron:ipc?alias=a|alias=b").get("alias") == "b"


def test_unknown_params_are_kept_and_round_trip() -> None:
    uri = ChannelUri.parse("aeron:ipc?x-custom=hello|term-length=64k")
    assert uri.get("x-custom") == "hello"
    assert "x-custom" in uri
    assert str(uri) == "aeron:ipc?x-custom=hello|term-length=64k"


def test_param_name_sets() -> None:
    assert len(PARAMS_1_15) == 16
    assert PARAMS_1_15 < KNOWN_PARAMS
    assert {"eos", "tether", "group", "rejoin", "cc", "fc", "gtag", "ssc", "stream-id"} <= KNOWN_PARAMS


KEYS = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="=|?"), min_size=1, max_size=12)
VALUES = st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="|"), max_size=20)


@given(st.dictionaries(KEYS.filter(lambda k: k not in KNOWN_PARAMS), VALUES, max_size=6), st.booleans())
def test_round_trip_of_arbitrary_unknown_params(params: dict[str, str], spy: bool) -> None:
    prefix = "aeron-spy:" if spy else ""
    text = prefix + "aeron:udp" + ("?" + "|".join(f"{k}={v}" for k, v in params.items()) if params else "")
    uri = ChannelUri.parse(text)
    assert uri.params == params
    assert str(uri) == text


# ------------------------------------------------------------------------------------------- typed validation

VALID = [
    "aeron:ipc?term-length=64k",
    "aeron:ipc?term-length=1g",
    "aeron:ipc?term-length=16777216",
    "aeron:udp?endpoint=h:1|mtu=32",
    "aeron:udp?endpoint=h:1|mtu=65504",
    "aeron:udp?endpoint=h:1|mtu=8k",
    "aeron:ipc?session-id=-5",
    "aeron:ipc?session-id=tag:123",
    "aeron:ipc?linger=0",
    "aeron:ipc?linger=5s",
    "aeron:udp?endpoint=h:1|reliable=false",
    "aeron:ipc?sparse=true",
    "aeron:ipc?eos=false|tether=true|rejoin=false|group=true|ssc=true",
    "aeron:udp?endpoint=h:1|ttl=0",
    "aeron:udp?endpoint=h:1|ttl=255",
    "aeron:udp?endpoint=h:1|interface=10.0.0.1:0/8",
    "aeron:udp?endpoint=h:1|interface=[fe80::1]/64",
    "aeron:udp?control=10.0.0.1:40000|control-mode=dynamic",
    "aeron:udp?control-mode=response",
    "aeron:ipc?tags=1,2",
    "aeron:ipc?tags=7",
    "aeron:udp?endpoint=h:1|fc=min,g:5/3,t:2s",
    "aeron:udp?endpoint=h:1|fc=tagged,g:100",
    "aeron:udp?endpoint=h:1|cc=cubic",
    "aeron:udp?endpoint=h:1|gtag=-7",
    "aeron:udp?endpoint=h:1|so-sndbuf=2m|so-rcvbuf=2m|rcv-wnd=128k",
    "aeron:ipc?pub-wnd=1m",
    "aeron:udp?endpoint=h:1|media-rcv-ts-offset=reserved|channel-snd-ts-offset=8",
    "aeron:udp?endpoint=h:1|response-endpoint=h:2|response-correlation-id=prototype",
    "aeron:udp?endpoint=h:1|nak-delay=100us|max-resend=256",
    "aeron:ipc?untethered-window-limit-timeout=5s|untethered-resting-timeout=10s|untethered-linger-timeout=1s",
    "aeron:ipc?stream-id=-1",
    "aeron:ipc?init-term-id=5|term-id=7|term-offset=64",
    "aeron:ipc?init-term-id=0|term-id=0|term-offset=65536|term-length=64k",
    "aeron:ipc?init-term-id=2147483647|term-id=-2147483648|term-offset=0",
]


@pytest.mark.parametrize("text", VALID)
def test_valid_params(text: str) -> None:
    assert str(ChannelUri.parse(text)) == text


INVALID = [
    ("aeron:ipc?term-length=32k", "term-length"),
    ("aeron:ipc?term-length=2g", "term-length"),
    ("aeron:ipc?term-length=100000", "term-length"),
    ("aeron:ipc?term-length=lots", "term-length"),
    ("aeron:ipc?mtu=16", "mtu"),
    ("aeron:ipc?mtu=1400", "mtu"),
    ("aeron:ipc?mtu=65536", "mtu"),
    ("aeron:ipc?session-id=abc", "session-id"),
    ("aeron:ipc?session-id=2147483648", "session-id"),
    ("aeron:ipc?session-id=tag:x", "session-id"),
    ("aeron:ipc?linger=-1", "linger"),
    ("aeron:ipc?linger=5h", "linger"),
    ("aeron:ipc?reliable=yes", "reliable"),
    ("aeron:ipc?sparse=True", "sparse"),
    ("aeron:ipc?eos=1", "eos"),
    ("aeron:udp?ttl=256", "ttl"),
    ("aeron:udp?endpoint=localhost", "endpoint"),
    ("aeron:udp?endpoint=localhost:70000", "endpoint"),
    ("aeron:udp?endpoint=::1:40123", "endpoint"),
    ("aeron:udp?control=:5", "control"),
    ("aeron:udp?control-mode=auto", "control-mode"),
    ("aeron:udp?interface=10.0.0.1/33", "interface"),
    ("aeron:ipc?tags=a", "tags"),
    ("aeron:ipc?tags=1,2,3", "tags"),
    ("aeron:ipc?tags=1,-1", "tags"),
    ("aeron:udp?fc=fastest", "fc"),
    ("aeron:udp?fc=min,x:1", "fc"),
    ("aeron:udp?cc=reno", "cc"),
    ("aeron:udp?gtag=g", "gtag"),
    ("aeron:udp?so-sndbuf=0", "so-sndbuf"),
    ("aeron:udp?max-resend=0", "max-resend"),
    ("aeron:udp?max-resend=257", "max-resend"),
    ("aeron:udp?media-rcv-ts-offset=later", "media-rcv-ts-offset"),
    ("aeron:udp?response-correlation-id=x", "response-correlation-id"),
    ("aeron:ipc?stream-id=1.0", "stream-id"),
    ("aeron:ipc?init-term-id=1|term-id=1", "term-offset"),
    ("aeron:ipc?term-offset=0", "init-term-id"),
    ("aeron:ipc?init-term-id=1|term-id=1|term-offset=33", "term-offset"),
    ("aeron:ipc?init-term-id=1|term-id=1|term-offset=-32", "term-offset"),
    ("aeron:ipc?init-term-id=1|term-id=1|term-offset=65568|term-length=64k", "term-offset"),
    ("aeron:ipc?init-term-id=1|term-id=1|term-offset=2147483584", "term-offset"),
    ("aeron:ipc?init-term-id=10|term-id=9|term-offset=0", "term-id"),
    ("aeron:ipc?init-term-id=x|term-id=9|term-offset=0", "init-term-id"),
]


@pytest.mark.parametrize(("text", "field"), INVALID)
def test_invalid_params_name_the_parameter(text: str, field: str) -> None:
    with pytest.raises(InvalidChannelError) as info:
        ChannelUri.parse(text)
    assert info.value.field == field
    assert field in str(info.value)


def test_invalid_channel_error_is_a_configuration_error() -> None:
    with pytest.raises(DriverConfigurationError, match=r"mtu='1400' is invalid: a multiple of 32 in 32\.\.65504"):
        ChannelUri.parse("aeron:ipc?mtu=1400")


def test_constructor_validates_like_parse() -> None:
    with pytest.raises(InvalidChannelError, match="term-length"):
        ChannelUri("ipc", {"term-length": "3"})
    with pytest.raises(InvalidChannelError, match="alias"):
        ChannelUri("ipc", {"alias": "a|b"})
    with pytest.raises(InvalidChannelError, match="prefix"):
        ChannelUri("udp", {}, prefix="aeron-tap")


# ------------------------------------------------------------------------------------------- typed access


def test_typed_accessors() -> None:
    uri = ChannelUri.parse(
        "aeron:udp?endpoint=224.0.1.1:40456|interface=eth0|control=h:2|control-mode=manual|ttl=8|mtu=8k"
        "|term-length=128k|linger=200ms|reliable=false|sparse=true|session-id=-3|tags=11,12"
        "|init-term-id=1|term-id=3|term-offset=1024"
    )
    assert uri.is_udp
    assert not uri.is_ipc
    assert not uri.is_spy
    assert uri.endpoint == "224.0.1.1:40456"
    assert uri.interface == "eth0"
    assert uri.control == "h:2"
    assert uri.control_mode == "manual"
    assert uri.ttl == 8
    assert uri.mtu == 8192
    assert uri.term_length == 131072
    assert uri.linger_ns == 200_000_000
    assert uri.reliable is False
    assert uri.sparse is True
    assert uri.session_id == -3
    assert uri.session_id_tag is None
    assert (uri.channel_tag, uri.entity_tag) == (11, 12)
    assert uri.initial_position == InitialPosition(1, 3, 1024)


def test_absent_params_are_none() -> None:
    uri = ChannelUri.parse("aeron:ipc")
    assert uri.term_length is None
    assert uri.mtu is None
    assert uri.session_id is None
    assert uri.reliable is None
    assert uri.initial_position is None
    assert uri.channel_tag is None
    assert uri.entity_tag is None
    assert uri.get("x", "dflt") == "dflt"


def test_session_tag_and_entity_tag_only() -> None:
    uri = ChannelUri.parse("aeron:ipc?session-id=tag:99|tags=,5")
    assert uri.session_id is None
    assert uri.session_id_tag == 99
    assert uri.channel_tag is None
    assert uri.entity_tag == 5


def test_with_and_without_param_make_validated_copies() -> None:
    uri = ChannelUri.parse("aeron-spy:aeron:udp?endpoint=h:1")
    changed = uri.with_param("session-id", "7")
    assert str(changed) == "aeron-spy:aeron:udp?endpoint=h:1|session-id=7"
    assert str(uri) == "aeron-spy:aeron:udp?endpoint=h:1"
    assert str(changed.without_param("endpoint").without_spy_prefix()) == "aeron:udp?session-id=7"
    with pytest.raises(InvalidChannelError, match="session-id"):
        uri.with_param("session-id", "x")
    assert repr(uri) == "ChannelUri.parse('aeron-spy:aeron:udp?endpoint=h:1')"
