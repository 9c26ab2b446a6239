"""Configuration classes: every bad value raises ConfigurationError naming the field and what is allowed.

Also: driver keys (equal settings share a driver) and the default Aeron directory. No I/O beyond reading
``os.environ`` and checking ``/dev/shm``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.config import DriverContext, ThreadingMode
from driver.config import default_aeron_dir as driver_default_aeron_dir
from driver.tools.common import default_directory
from endpoint.config import (
    DEFAULT_APP_ID,
    ClientConfiguration,
    Configuration,
    ServerConfiguration,
    default_aeron_dir,
)
from endpoint.errors import ConfigurationError, EndpointError

ALL = (Configuration, ServerConfiguration, ClientConfiguration)
INT31 = 0x7FFF_FFFF


def raises_for(field: str, allowed: str) -> Any:
    """``pytest.raises`` for a ConfigurationError whose message starts with ``field=`` and contains ``allowed``."""
    return pytest.raises(ConfigurationError, match=rf"^{re.escape(field)}=(?s:.*){re.escape(allowed)}")


# ---------------------------------------------------------------------------------------------- defaults


@pytest.mark.parametrize("cls", ALL)
def test_defaults_are_valid(cls: type[Configuration]) -> None:
    cfg = cls()
    assert cfg.app_id == "endpoint"
    assert cfg.aeron_dir is None
    assert cfg.threading_mode is ThreadingMode.INVOKER
    assert cfg.enable_ipc
    assert cfg.enable_udp
    assert cfg.mtu == 1408
    assert cfg.peer_timeout > cfg.ping_interval


def test_server_and_client_defaults() -> None:
    server = ServerConfiguration()
    assert server.port == 2000
    assert server.listen_address == "127.0.0.1"
    assert server.allow == server.deny == ()
    assert server.session_id_range == (0x1000_0000, INT31)
    assert server.stream_id_range == (0x1000, 0xFFFF)
    client = ClientConfiguration()
    assert client.local_address is None
    assert client.local_port == 0
    assert client.tag == ""


@pytest.mark.parametrize("cls", ALL)
def test_fields_are_keyword_only(cls: type[Configuration]) -> None:
    with pytest.raises(TypeError):
        cls("endpoint")  # type: ignore[misc]


def test_configuration_error_is_a_value_error_and_an_endpoint_error() -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration(mtu=1)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, EndpointError)


# ---------------------------------------------------------------------------------------------- field validators

SECONDS_600 = "seconds, > 0 and <= 600"
SECONDS_DAY = "seconds, > 0 and <= 86400"
ID_PAIR = "a pair (low, high) with 1 <= low < high <= 2**31-1"

INVALID: list[tuple[type[Configuration], str, object, str]] = [
    *[(Configuration, "app_id", v, "1 to 32 characters of A-Z a-z 0-9 _ . -") for v in ("", "x" * 33, "a b", "a/b", 5)],
    (Configuration, "app_id", None, "1 to 32 characters"),
    (Configuration, "driver_idle_strategy", "fast", "one of 'backoff', 'sleeping', 'yielding', 'busy_spin', 'noop'"),
    (Configuration, "driver_idle_strategy", None, "one of 'backoff'"),
    (Configuration, "idle_strategy", "sleeping", "one of 'backoff', 'busy_spin'"),
    *[(Configuration, "driver_timeout", v, SECONDS_600) for v in (0, -1, 600.001, True, "10", math.nan, math.inf)],
    *[(Configuration, "handshake_timeout", v, SECONDS_600) for v in (0, 600.5, None)],
    *[(Configuration, "connect_timeout", v, SECONDS_DAY) for v in (0.0, -0.5, 86_401)],
    *[(Configuration, "send_timeout", v, SECONDS_DAY) for v in (0, -math.inf)],
    (Configuration, "ping_interval", 3601, "seconds, > 0 and <= 3600"),
    (Configuration, "peer_timeout", 86_400.5, SECONDS_DAY),
    (Configuration, "close_timeout", 0, SECONDS_600),
    *[(Configuration, "heartbeat_interval", v, "seconds, > 0 and <= 5") for v in (0, 5.5, -1, True)],
    *[(Configuration, "status_message_interval", v, "seconds, > 0 and <= 2.5") for v in (0, 2.6, None)],
    *[(Configuration, "mtu", v, "an integer from 64 to 65504") for v in (63, 65505, 0, 1408.0, "1408", True)],
    *[
        (Configuration, name, v, "a power of two from 65536 to 1073741824")
        for name in ("term_length", "ipc_term_length")
        for v in (32768, 65537, 3 * 65536, 1 << 31, 65536.0, 0, -65536)
    ],
    *[
        (Configuration, name, v, "an integer from 0 to 1073741824")
        for name in ("socket_rcvbuf", "socket_sndbuf")
        for v in (-1, (1 << 30) + 1, True, 1.5)
    ],
    *[(ServerConfiguration, "port", v, "an integer from 0 to 65535") for v in (65536, -1, True, "2000")],
    *[
        (ServerConfiguration, "listen_address", v, "an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0 or ::")
        for v in ("localhost", "256.0.0.1", "", " 127.0.0.1", "127.0.0.1\n", "10.0.0.0/8", None)
    ],
    *[(ServerConfiguration, "max_clients", v, "an integer from 0 to 1048576") for v in (-1, (1 << 20) + 1)],
    (ServerConfiguration, "max_connections_per_ip", -1, "an integer from 0 to 1048576"),
    *[
        (ServerConfiguration, name, v, "an integer from 1 to 1048576")
        for name in ("max_pending_handshakes", "max_pending_per_source")
        for v in (0, (1 << 20) + 1)
    ],
    *[
        (ServerConfiguration, name, v, ID_PAIR)
        for name in ("session_id_range", "stream_id_range")
        for v in (
            (0, 5000),
            (5000, 5000),
            (6000, 5000),
            (1, INT31 + 1),
            [1, 5000],
            (1,),
            (1, 2, 5000),
            ("1", "5000"),
            (1.0, 5000.0),
            None,
        )
    ],
    *[(ClientConfiguration, "local_port", v, "an integer from 0 to 65535") for v in (-1, 65536)],
    *[(ClientConfiguration, "tag", v, "a string of at most 32 characters") for v in ("x" * 33, 5, None)],
    *[
        (ClientConfiguration, "local_address", v, "an IPv4 or IPv6 address of this machine")
        for v in ("nope", "", "1.2.3")
    ],
]


@pytest.mark.parametrize(
    ("cls", "field", "value", "allowed"), INVALID, ids=[f"{c[0].__name__}.{c[1]}={c[2]!r}"[:60] for c in INVALID]
)
def test_bad_value_names_field_value_and_what_is_allowed(
    cls: type[Configuration], field: str, value: object, allowed: str
) -> None:
    with raises_for(field, allowed) as info:
        cls(**{field: value})
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("allow", ("10.0.0.0/8", "nope"), "addresses or CIDR networks such as 10.0.0.0/8 or ::1"),
        ("allow", ("10.0.0.0/33",), "addresses or CIDR networks"),
        ("deny", ("::1", "::g"), "addresses or CIDR networks"),
        ("deny", (None,), "addresses or CIDR networks"),
    ],
)
def test_bad_network_names_the_bad_entry(field: str, value: tuple[object, ...], allowed: str) -> None:
    with raises_for(field, allowed) as info:
        ServerConfiguration(**{field: value})
    assert repr(value[-1]) in str(info.value)


VALID: list[tuple[type[Configuration], str, object]] = [
    *[(Configuration, "app_id", v) for v in ("a", "x" * 32, "My_App-1.2")],
    *[(Configuration, "driver_idle_strategy", v) for v in ("backoff", "sleeping", "yielding", "busy_spin", "noop")],
    *[(Configuration, "idle_strategy", v) for v in ("backoff", "busy_spin")],
    *[(Configuration, "driver_timeout", v) for v in (600, 0.001, 1e-9)],
    (Configuration, "connect_timeout", 86_400),
    (Configuration, "mtu", 64),
    (Configuration, "mtu", 65504),
    *[(Configuration, "term_length", v) for v in (65536, 1 << 20, 1 << 30)],
    (Configuration, "ipc_term_length", 1 << 30),
    *[(Configuration, "socket_rcvbuf", v) for v in (0, 1 << 30)],
    (Configuration, "socket_sndbuf", 1 << 30),
    *[(ServerConfiguration, "port", v) for v in (0, 1, 65535)],
    *[(ServerConfiguration, "listen_address", v) for v in ("0.0.0.0", "::", "::1", "192.168.1.10", "fe80::1%eth0")],
    *[(ServerConfiguration, "max_clients", v) for v in (0, 1 << 20)],
    *[(ServerConfiguration, "session_id_range", v) for v in ((1, 2), (INT31 - 1, INT31))],
    (ServerConfiguration, "stream_id_range", (1, INT31)),
    *[(ServerConfiguration, "allow", v) for v in ((), ("10.0.0.1",), ("10.0.0.0/8", "::1", "fd00::/8", "10.1.2.3/8"))],
    *[(ClientConfiguration, "local_port", v) for v in (0, 65535)],
    *[(ClientConfiguration, "tag", v) for v in ("", "x" * 32)],
    *[(ClientConfiguration, "local_address", v) for v in (None, "127.0.0.1", "::1")],
]


@pytest.mark.parametrize(("cls", "field", "value"), VALID, ids=[f"{c[0].__name__}.{c[1]}={c[2]!r}"[:60] for c in VALID])
def test_allowed_values_are_accepted(cls: type[Configuration], field: str, value: object) -> None:
    assert getattr(cls(**{field: value}), field) == value


# ---------------------------------------------------------------------------------------------- converters


def test_threading_mode_accepts_its_name() -> None:
    assert Configuration(threading_mode="DEDICATED").threading_mode is ThreadingMode.DEDICATED  # type: ignore[arg-type]
    assert Configuration(threading_mode=ThreadingMode.INVOKER).threading_mode is ThreadingMode.INVOKER


def test_unknown_threading_mode_is_a_configuration_error() -> None:
    with raises_for("threading_mode", "SHARED"):
        Configuration(threading_mode="FAST")  # type: ignore[arg-type]


def test_paths_are_converted() -> None:
    assert Configuration(aeron_dir="/tmp/x").aeron_dir == Path("/tmp/x")  # type: ignore[arg-type]
    assert ServerConfiguration(key_path="k.pem").key_path == Path("k.pem")  # type: ignore[arg-type]
    assert ClientConfiguration(known_servers_path=Path("/a/b")).known_servers_path == Path("/a/b")
    assert ClientConfiguration().known_servers_path is None


def test_address_lists_become_tuples() -> None:
    cfg = ServerConfiguration(allow=["10.0.0.0/8"], deny=iter(["10.0.0.1"]))  # type: ignore[arg-type]
    assert cfg.allow == ("10.0.0.0/8",)
    assert cfg.deny == ("10.0.0.1",)


@pytest.mark.parametrize("value", [None, 5])
def test_a_non_iterable_address_list_is_a_configuration_error(value: object) -> None:
    with raises_for("allow", "addresses or CIDR networks"):
        ServerConfiguration(allow=value)  # type: ignore[arg-type]


def test_a_single_network_string_is_not_split_into_characters() -> None:
    """``allow="10.0.0.0/8"`` (a str, not a tuple) must either mean that network or be refused naming it."""
    message = ""
    try:
        cfg = ServerConfiguration(allow="10.0.0.0/8")  # type: ignore[arg-type]
    except ConfigurationError as exc:
        message = str(exc)
    if message:
        assert "'10.0.0.0/8'" in message
    else:
        assert cfg.allow == ("10.0.0.0/8",)


@pytest.mark.parametrize(("field", "value"), [("listen_address", 2130706433), ("listen_address", b"\x7f\x00\x00\x01")])
def test_server_address_must_be_text(field: str, value: object) -> None:
    with raises_for(field, "an IPv4 or IPv6 address"):
        ServerConfiguration(**{field: value})


@pytest.mark.parametrize("value", [2130706433, b"\x7f\x00\x00\x01"])
def test_client_address_must_be_text(value: object) -> None:
    with raises_for("local_address", "an IPv4 or IPv6 address"):
        ClientConfiguration(local_address=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [("10.0.0.0/8", 167772160), (b"\x7f\x00\x00\x01",)])
def test_networks_must_be_text(value: tuple[object, ...]) -> None:
    with raises_for("allow", "addresses or CIDR networks"):
        ServerConfiguration(allow=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["abc\n", "x" * 32 + "\n"])
def test_app_id_with_a_trailing_newline_is_refused(value: str) -> None:
    with raises_for("app_id", "1 to 32 characters"):
        Configuration(app_id=value)


# ---------------------------------------------------------------------------------------------- what the driver needs


@pytest.mark.parametrize("mtu", [65, 1000, 1409, 65503])
def test_mtu_must_be_a_multiple_of_the_frame_alignment(mtu: int) -> None:
    """The driver refuses an MTU that is not a multiple of 32; the end point must say so up front."""
    with raises_for("mtu", "32"):
        Configuration(mtu=mtu)


def test_send_buffer_smaller_than_the_mtu_is_refused() -> None:
    """The driver refuses 0 < SO_SNDBUF < MTU; the end point must say so up front."""
    with pytest.raises(ConfigurationError, match="socket_sndbuf"):
        Configuration(socket_sndbuf=1024, mtu=1408)
    assert Configuration(socket_sndbuf=1408, mtu=1408).socket_sndbuf == 1408


# ---------------------------------------------------------------------------------------------- cross-field rules


@pytest.mark.parametrize("cls", ALL)
def test_no_transport_is_refused(cls: type[Configuration]) -> None:
    with pytest.raises(ConfigurationError, match=r"enable_ipc=False and enable_udp=False"):
        cls(enable_ipc=False, enable_udp=False)
    assert cls(enable_ipc=False).enable_udp
    assert cls(enable_udp=False).enable_ipc


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize(("ping", "peer"), [(1.0, 1.0), (5.0, 4.0)])
def test_peer_timeout_must_exceed_ping_interval(cls: type[Configuration], ping: float, peer: float) -> None:
    with pytest.raises(ConfigurationError, match=r"^peer_timeout=.*must be longer than ping_interval="):
        cls(ping_interval=ping, peer_timeout=peer)


def test_stream_id_range_needs_room_for_eight_ids() -> None:
    with pytest.raises(ConfigurationError, match=r"^stream_id_range=\(4096, 4102\) is too small: at least 8 ids"):
        ServerConfiguration(stream_id_range=(0x1000, 0x1006))
    assert ServerConfiguration(stream_id_range=(0x1000, 0x1007)).stream_id_range == (0x1000, 0x1007)


def test_setting_a_field_later_is_validated_too() -> None:
    cfg = ServerConfiguration()
    with raises_for("mtu", "an integer from 64"):
        cfg.mtu = 1
    with raises_for("port", "an integer from 0 to 65535"):
        cfg.port = 65536
    assert cfg.mtu == 1408
    assert cfg.port == 2000


def test_evolve_validates() -> None:
    cfg = ClientConfiguration()
    assert attrs.evolve(cfg, tag="x").tag == "x"
    with raises_for("tag", "at most 32"):
        attrs.evolve(cfg, tag="x" * 40)
    with pytest.raises(ConfigurationError, match="peer_timeout"):
        attrs.evolve(cfg, peer_timeout=0.5)


# ---------------------------------------------------------------------------------------------- properties

INT_FIELDS: list[tuple[type[Configuration], str, int, int]] = [
    (Configuration, "mtu", 64, 65504),
    (Configuration, "socket_rcvbuf", 0, 1 << 30),
    (ServerConfiguration, "port", 0, 65535),
    (ServerConfiguration, "max_clients", 0, 1 << 20),
    (ServerConfiguration, "max_connections_per_ip", 0, 1 << 20),
    (ServerConfiguration, "max_pending_handshakes", 1, 1 << 20),
    (ServerConfiguration, "max_pending_per_source", 1, 1 << 20),
    (ClientConfiguration, "local_port", 0, 65535),
    (Configuration, "max_incoming_streams", 1, 1 << 16),
    (Configuration, "max_incoming_bytes", 1 << 16, 1 << 40),
    (Configuration, "max_pending_calls", 1, 1 << 20),
]


@pytest.mark.parametrize(("cls", "field", "low", "high"), INT_FIELDS, ids=[f[1] for f in INT_FIELDS])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_integer_fields_accept_exactly_their_range(
    cls: type[Configuration], field: str, low: int, high: int, data: st.DataObject
) -> None:
    value = data.draw(
        st.one_of(st.integers(), st.integers(low - 2, low + 2), st.integers(high - 2, high + 2), st.integers(low, high))
    )
    if field == "mtu" and low <= value <= high and value % 32:
        value -= value % 32  # the driver's alignment rule is tested on its own above
        value = max(value, low)
    if low <= value <= high:
        assert getattr(cls(**{field: value}), field) == value
    else:
        with raises_for(field, f"an integer from {low} to {high}"):
            cls(**{field: value})


@pytest.mark.parametrize("field", ["term_length", "ipc_term_length"])
@settings(max_examples=60, deadline=None)
@given(value=st.one_of(st.integers(-(1 << 32), 1 << 32), st.integers(0, 40).map(lambda n: 1 << n)))
def test_term_lengths_accept_exactly_powers_of_two_in_range(field: str, value: int) -> None:
    if 65536 <= value <= 1 << 30 and value & (value - 1) == 0:
        assert getattr(Configuration(**{field: value}), field) == value
    else:
        with raises_for(field, "a power of two from 65536 to 1073741824"):
            Configuration(**{field: value})


@settings(max_examples=60, deadline=None)
@given(value=st.one_of(st.integers(-(1 << 32), 1 << 32), st.integers(0, 40).map(lambda n: 1 << n)))
def test_counters_buffer_length_accepts_exactly_powers_of_two_from_1_to_64_mib(value: int) -> None:
    if 1 << 20 <= value <= 64 << 20 and value & (value - 1) == 0:
        assert Configuration(counters_buffer_length=value).counters_buffer_length == value
    else:
        with raises_for("counters_buffer_length", "a power of two from 1048576 to 67108864"):
            Configuration(counters_buffer_length=value)


def test_counters_buffer_length_defaults_to_4_mib_for_servers_and_clients() -> None:
    """32,768 counters: 2,000 connections at about 12 each (one default for both, so they share drivers)."""
    assert ServerConfiguration().counters_buffer_length == ClientConfiguration().counters_buffer_length == 4 << 20


SECONDS_FIELDS = [
    ("driver_timeout", 600.0),
    ("handshake_timeout", 600.0),
    ("connect_timeout", 86_400.0),
    ("send_timeout", 86_400.0),
    ("ping_interval", 3600.0),
    ("peer_timeout", 86_400.0),
    ("close_timeout", 600.0),
    ("stream_stall_timeout", 86_400.0),
]


@pytest.mark.parametrize(("field", "maximum"), SECONDS_FIELDS, ids=[f[0] for f in SECONDS_FIELDS])
@settings(max_examples=60, deadline=None)
@given(value=st.one_of(st.floats(), st.integers(-10, 100_000)))
def test_seconds_fields_accept_exactly_positive_values_up_to_their_maximum(
    field: str, maximum: float, value: float
) -> None:
    # Keep the ping/peer rule out of the way: the smallest ping interval, the largest peer timeout.
    others: dict[str, float] = {"ping_interval": 5e-324} if field == "peer_timeout" else {"peer_timeout": 86_400.0}
    if 0 < value <= maximum and not (field == "peer_timeout" and value <= 5e-324):
        assert getattr(Configuration(**others, **{field: value}), field) == value
    else:
        with pytest.raises(ConfigurationError, match=rf"^{field}="):
            Configuration(**others, **{field: value})


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(
        st.text(max_size=40).filter(lambda s: not s.endswith("\n")),
        st.from_regex(r"[A-Za-z0-9_.-]{1,32}", fullmatch=True),
    )
)
def test_app_id_accepts_exactly_short_names_of_safe_characters(value: str) -> None:
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", value):
        assert Configuration(app_id=value).app_id == value
    else:
        with raises_for("app_id", "1 to 32 characters of A-Z a-z 0-9 _ . -"):
            Configuration(app_id=value)


@settings(max_examples=100, deadline=None)
@given(low=st.integers(-5, INT31 + 5), high=st.integers(-5, INT31 + 5))
def test_session_id_range_accepts_exactly_ordered_pairs_in_the_positive_int32_range(low: int, high: int) -> None:
    if 1 <= low < high <= INT31:
        assert ServerConfiguration(session_id_range=(low, high)).session_id_range == (low, high)
    else:
        with raises_for("session_id_range", ID_PAIR):
            ServerConfiguration(session_id_range=(low, high))


# ---------------------------------------------------------------------------------------------- driver key

DRIVER_CHANGES: list[tuple[str, object]] = [
    ("aeron_dir", "/tmp/endpoint-other"),
    ("app_id", "other"),
    ("threading_mode", ThreadingMode.DEDICATED),
    ("driver_idle_strategy", "busy_spin"),
    ("mtu", 8192),
    ("socket_rcvbuf", 1 << 20),
    ("socket_sndbuf", 1 << 20),
    ("counters_buffer_length", 8 << 20),
    ("status_message_interval", 0.2),
    ("sparse_logs", False),
    ("launch_driver", False),
]
OTHER_CHANGES: list[tuple[str, object]] = [
    ("enable_ipc", False),
    ("enable_udp", False),
    ("term_length", 1 << 20),
    ("ipc_term_length", 1 << 20),
    ("handshake_timeout", 0.5),
    ("connect_timeout", 3.0),
    ("send_timeout", 1.0),
    ("ping_interval", 0.25),
    ("heartbeat_interval", 0.1),
    ("peer_timeout", 60.0),
    ("close_timeout", 0.1),
    ("idle_strategy", "busy_spin"),
]


@pytest.mark.parametrize("a", ALL)
@pytest.mark.parametrize("b", ALL)
def test_equal_driver_settings_give_equal_keys_across_classes(a: type[Configuration], b: type[Configuration]) -> None:
    common: dict[str, Any] = {"app_id": "game", "mtu": 4096, "threading_mode": "DEDICATED", "socket_rcvbuf": 1 << 21}
    key = a(**common).driver_key()
    assert key == b(**common).driver_key()
    assert hash(key) == hash(b(**common).driver_key())
    assert key == a(**common).driver_key()


def test_server_and_client_only_settings_do_not_split_drivers() -> None:
    base = ServerConfiguration().driver_key()
    assert ServerConfiguration(port=4000, max_clients=3, allow=("10.0.0.0/8",)).driver_key() == base
    assert ClientConfiguration(local_port=5000, tag="x", prefer_ipc=False).driver_key() == base


@pytest.mark.parametrize(("field", "value"), OTHER_CHANGES, ids=[c[0] for c in OTHER_CHANGES])
def test_settings_outside_the_driver_keep_the_key(field: str, value: object) -> None:
    assert Configuration(**{field: value}).driver_key() == Configuration().driver_key()


@pytest.mark.parametrize(("field", "value"), DRIVER_CHANGES, ids=[c[0] for c in DRIVER_CHANGES])
def test_each_driver_setting_changes_the_key(field: str, value: object) -> None:
    assert Configuration(**{field: value}).driver_key() != Configuration().driver_key()


def test_key_uses_the_resolved_directory() -> None:
    explicit = Configuration(aeron_dir=default_aeron_dir("game")).driver_key()
    assert Configuration(app_id="game").driver_key() == explicit
    assert Configuration(app_id="other", aeron_dir=default_aeron_dir("game")).driver_key() == explicit
    as_text = Configuration(aeron_dir="/tmp/endpoint-x").driver_key()  # type: ignore[arg-type]
    assert as_text == Configuration(aeron_dir=Path("/tmp/endpoint-x")).driver_key()


# ---------------------------------------------------------------------------------------------- default directory


def test_default_aeron_dir_is_the_driver_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default app id runs where drivers and the tools look by default; another app id beside it."""
    monkeypatch.delenv("AERON_DIR", raising=False)
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    assert default_aeron_dir() == driver_default_aeron_dir() == default_directory()
    assert default_aeron_dir(DEFAULT_APP_ID) == driver_default_aeron_dir()
    assert default_aeron_dir("game") == driver_default_aeron_dir().with_name("aeron-alice-game")
    assert default_aeron_dir().name == "aeron-alice"


def test_aeron_dir_env_moves_every_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AERON_DIR", str(tmp_path / "drivers"))
    assert default_aeron_dir() == tmp_path / "drivers" == default_directory()
    assert default_aeron_dir("game") == tmp_path / "drivers-game"
    assert Configuration().resolved_aeron_dir() == tmp_path / "drivers"


def test_resolved_aeron_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AERON_DIR", raising=False)
    monkeypatch.setattr("getpass.getuser", lambda: "carol")
    assert Configuration(app_id="game").resolved_aeron_dir() == default_aeron_dir("game")
    assert Configuration().resolved_aeron_dir().name == "aeron-carol"
    assert ServerConfiguration(aeron_dir="/tmp/d").resolved_aeron_dir() == Path("/tmp/d")  # type: ignore[arg-type]


def test_the_udp_timers_reach_the_embedded_driver(tmp_path: Path) -> None:
    """Heartbeats and status messages of idle UDP streams are spaced by the end point's settings (Aeron's 100 ms
    and 200 ms would cost a thousand idle connections thousands of datagrams a second)."""
    from endpoint.channels import data_channel, udp_channel
    from endpoint.registry import SharedDriver

    default_config = Configuration(aeron_dir=tmp_path / "a")
    default = SharedDriver(default_config.driver_key(), default_config)._driver_context()
    assert default.status_message_timeout_ns == 1_000_000_000
    assert default.publication_heartbeat_interval_ns == 100_000_000  # Aeron's, for the handshake streams
    config = Configuration(aeron_dir=tmp_path / "b", status_message_interval=0.2)
    ctx = SharedDriver(config.driver_key(), config)._driver_context()
    assert ctx.status_message_timeout_ns == 200_000_000
    ctx.conclude()
    # Connections' UDP publications carry the end point's heartbeat interval; handshake and IPC channels do not.
    assert "heartbeat-interval=2000ms" in data_channel("127.0.0.1:40000", 7, 65536, 1408, heartbeat_interval=2.0)
    assert "heartbeat" not in data_channel(None, 7, 65536, None, heartbeat_interval=2.0)
    assert "heartbeat" not in udp_channel("127.0.0.1:40000", handshake=True)
    # Reliable streams also carry the tail probe (a heartbeat 100 ms after data by default); newest-wins ones not.
    assert Configuration().tail_probe == 0.1
    reliable = data_channel("127.0.0.1:40000", 7, 65536, 1408, heartbeat_interval=2.0, tail_probe=0.1)
    assert "tail-probe=100ms" in reliable
    assert "tail-probe" not in data_channel("127.0.0.1:40000", 7, 65536, 1408, heartbeat_interval=2.0)
    assert "tail-probe" not in data_channel(None, 7, 65536, None, tail_probe=0.1)
    with pytest.raises(ConfigurationError, match="tail_probe"):
        Configuration(tail_probe=0)


def test_sparse_logs_reach_the_embedded_driver(tmp_path: Path) -> None:
    """Logs are sparse by default (a connect storm does not zero every new log's pages); ``sparse_logs=False``
    keeps Aeron's defaults: publications allocated up front, images sparse only when long."""
    from endpoint.registry import SharedDriver

    sparse_config = Configuration(aeron_dir=tmp_path / "a")
    sparse = SharedDriver(sparse_config.driver_key(), sparse_config)._driver_context()
    assert sparse.term_buffer_sparse_file
    assert sparse.receiver_sparse_image_threshold == 0
    full_config = Configuration(aeron_dir=tmp_path / "b", sparse_logs=False)
    full = SharedDriver(full_config.driver_key(), full_config)._driver_context()
    assert not full.term_buffer_sparse_file
    assert full.receiver_sparse_image_threshold == DriverContext().receiver_sparse_image_threshold


def test_an_end_point_driver_lets_subscriptions_ask_for_their_images_per_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's handshake subscription asks for its images per address (``max_routes_per_source``, up to its
    per-address caps); the end point's driver lifts its ceiling (Aeron-style default 64) to allow more, unless the
    operator set one."""
    from endpoint.channels import udp_channel
    from endpoint.registry import SharedDriver

    monkeypatch.delenv("AERON_RECEIVER_MAX_IMAGES_PER_SOURCE", raising=False)
    config = Configuration(aeron_dir=tmp_path / "a")
    lifted = SharedDriver(config.driver_key(), config)._driver_context()
    assert lifted.receiver_max_images_per_source >= ServerConfiguration().max_answer_routes_per_source
    monkeypatch.setenv("AERON_RECEIVER_MAX_IMAGES_PER_SOURCE", "32")
    assert SharedDriver(config.driver_key(), config)._driver_context().receiver_max_images_per_source == 32
    assert "max-images-per-source=256" in udp_channel("127.0.0.1:0", handshake=True, max_images_per_source=256)
    assert "max-images-per-source" not in udp_channel("127.0.0.1:0", handshake=True)


def test_the_route_towards_an_address_is_asked_of_the_kernel_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from endpoint import channels

    sockets: list[socket.socket] = []
    real_socket = socket.socket

    def counted_socket(family: int, kind: int) -> socket.socket:
        sockets.append(real_socket(family, kind))
        return sockets[-1]

    monkeypatch.setattr(channels.socket, "socket", counted_socket)
    monkeypatch.setattr(channels, "_route_lookups", {})
    clock = [10**12]
    monkeypatch.setattr(channels, "_route_clock_ns", lambda: clock[0])
    assert [channels.local_address_towards("127.0.0.1") for _ in range(50)] == ["127.0.0.1"] * 50
    assert len(sockets) == 1
    clock[0] += channels._ROUTE_LOOKUP_TTL_NS  # a second on: asked again (a route may have changed)
    assert channels.local_address_towards("127.0.0.1") == "127.0.0.1"
    assert len(sockets) == 2
    for n in range(channels._ROUTE_LOOKUPS_MAX + 10):  # bounded however many destinations
        channels.local_address_towards(f"127.0.{n // 250}.{n % 250 + 1}")
    assert len(channels._route_lookups) == channels._ROUTE_LOOKUPS_MAX
