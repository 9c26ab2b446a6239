"""Driver and client settings: Aeron names, 1.15.1 defaults, env/property parsing, validation messages."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from driver.cnc import CncGeneration
from driver.config import (
    IDLE_STRATEGY_NAMES,
    ClientContext,
    DriverContext,
    ThreadingMode,
    default_aeron_dir,
    env_name,
    normalize_idle_strategy,
)
from driver.errors import DriverConfigurationError

MIB = 1024 * 1024


def test_defaults_are_aeron_1_15_1() -> None:
    ctx = DriverContext()
    assert ctx.aeron_dir == default_aeron_dir()
    assert ctx.term_buffer_length == 16 * MIB
    assert ctx.ipc_term_buffer_length == 64 * MIB
    assert ctx.mtu_length == ctx.ipc_mtu_length == 1408
    assert ctx.file_page_size == 4096
    assert ctx.threading_mode is ThreadingMode.DEDICATED
    assert ctx.conductor_idle_strategy == ctx.sender_idle_strategy == ctx.receiver_idle_strategy == "backoff"
    assert ctx.shared_idle_strategy == ctx.shared_network_idle_strategy == "backoff"
    assert ctx.client_liveness_timeout_ns == 5_000_000_000
    assert ctx.image_liveness_timeout_ns == 10_000_000_000
    assert ctx.publication_linger_timeout_ns == 5_000_000_000
    assert ctx.publication_unblock_timeout_ns == 10_000_000_000
    assert ctx.publication_connection_timeout_ns == 5_000_000_000
    assert ctx.status_message_timeout_ns == 200_000_000
    assert ctx.timer_interval_ns == 1_000_000_000
    assert ctx.counters_free_to_reuse_timeout_ns == 1_000_000_000
    assert ctx.driver_timeout_ms == 10_000
    assert ctx.conductor_buffer_length == MIB + 768
    assert ctx.to_clients_buffer_length == MIB + 128
    assert ctx.counters_values_buffer_length == MIB
    assert ctx.counters_metadata_buffer_length == 4 * MIB
    assert ctx.error_buffer_length == ctx.loss_report_buffer_length == MIB
    assert ctx.initial_window_length == 128 * 1024
    assert ctx.socket_rcvbuf_length == 128 * 1024
    assert ctx.socket_sndbuf_length == 0
    assert ctx.socket_multicast_ttl == 0
    assert ctx.send_to_status_poll_ratio == 6
    assert (ctx.publication_reserved_session_id_low, ctx.publication_reserved_session_id_high) == (-1, 1000)
    assert ctx.publication_term_window_length == ctx.ipc_publication_term_window_length == 0
    assert not ctx.dir_delete_on_start
    assert not ctx.dir_delete_on_shutdown
    assert not ctx.term_buffer_sparse_file
    assert not ctx.spies_simulate_connection
    assert ctx.cnc_generation is CncGeneration.CURRENT  # today's layout by default; 15 for 1.15.1 clients
    assert ctx.termination_validator == "deny"
    assert ctx.conclude() is ctx


def test_property_names_are_aeron_s() -> None:
    props = set(DriverContext().to_properties())
    expected = {
        "aeron.dir",
        "aeron.term.buffer.length",
        "aeron.ipc.term.buffer.length",
        "aeron.mtu.length",
        "aeron.ipc.mtu.length",
        "aeron.file.page.size",
        "aeron.threading.mode",
        "aeron.conductor.idle.strategy",
        "aeron.sender.idle.strategy",
        "aeron.receiver.idle.strategy",
        "aeron.sharednetwork.idle.strategy",
        "aeron.shared.idle.strategy",
        "aeron.client.liveness.timeout",
        "aeron.image.liveness.timeout",
        "aeron.publication.linger.timeout",
        "aeron.publication.unblock.timeout",
        "aeron.publication.connection.timeout",
        "aeron.conductor.buffer.length",
        "aeron.clients.buffer.length",
        "aeron.counters.buffer.length",
        "aeron.error.buffer.length",
        "aeron.loss.report.buffer.length",
        "aeron.dir.delete.on.start",
        "aeron.dir.delete.on.shutdown",
        "aeron.term.buffer.sparse.file",
        "aeron.publication.term.window.length",
        "aeron.ipc.publication.term.window.length",
        "aeron.driver.timeout",
        "aeron.timer.interval",
        "aeron.counters.free.to.reuse.timeout",
        "aeron.spies.simulate.connection",
        "aeron.cnc.version",
        "aeron.rcv.initial.window.length",
        "aeron.rcv.status.message.timeout",
        "aeron.socket.so_rcvbuf",
        "aeron.socket.so_sndbuf",
        "aeron.socket.multicast.ttl",
    }
    assert expected <= props


def test_env_name() -> None:
    assert env_name("aeron.dir") == "AERON_DIR"
    assert env_name("aeron.socket.so_rcvbuf") == "AERON_SOCKET_SO_RCVBUF"


def test_from_env_parses_aeron_forms(tmp_path: Path) -> None:
    environ = {
        "AERON_DIR": str(tmp_path),
        "AERON_TERM_BUFFER_LENGTH": "64k",
        "AERON_IPC_TERM_BUFFER_LENGTH": "1m",
        "AERON_MTU_LENGTH": "8k",
        "AERON_THREADING_MODE": "shared",
        "AERON_CONDUCTOR_IDLE_STRATEGY": "org.agrona.concurrent.BusySpinIdleStrategy",
        "AERON_SENDER_IDLE_STRATEGY": "io.aeron.driver.YieldingIdleStrategy",
        "AERON_CLIENT_LIVENESS_TIMEOUT": "2s",
        "AERON_PUBLICATION_LINGER_TIMEOUT": "100ms",
        "AERON_TIMER_INTERVAL": "500000",
        "AERON_DRIVER_TIMEOUT": "2500",
        "AERON_DIR_DELETE_ON_START": "TRUE",
        "AERON_TERM_BUFFER_SPARSE_FILE": "yes",
        "AERON_CNC_VERSION": "current",
        "AERON_SOCKET_SO_RCVBUF": "2m",
        "UNRELATED": "x",
    }
    ctx = DriverContext.from_env(environ).conclude()
    assert ctx.aeron_dir == tmp_path
    assert ctx.term_buffer_length == 65536
    assert ctx.ipc_term_buffer_length == MIB
    assert ctx.mtu_length == 8192
    assert ctx.threading_mode is ThreadingMode.SHARED
    assert ctx.conductor_idle_strategy == "busy_spin"
    assert ctx.sender_idle_strategy == "yielding"
    assert ctx.client_liveness_timeout_ns == 2_000_000_000
    assert ctx.publication_linger_timeout_ns == 100_000_000
    assert ctx.timer_interval_ns == 500_000
    assert ctx.driver_timeout_ms == 2500
    assert ctx.dir_delete_on_start is True
    assert ctx.term_buffer_sparse_file is False  # Aeron: only "true" (any case) is true
    assert ctx.cnc_generation is CncGeneration.CURRENT
    assert ctx.socket_rcvbuf_length == 2 * MIB
    assert ctx.cnc_path == tmp_path / "cnc.dat"


def test_from_env_overrides_win_and_accept_text_or_values(tmp_path: Path) -> None:
    ctx = DriverContext.from_env(
        {"AERON_MTU_LENGTH": "4096", "AERON_DIR": "/nowhere"},
        mtu_length="2k",
        aeron_dir=tmp_path,
        threading_mode=ThreadingMode.INVOKER,
    )
    assert ctx.mtu_length == 2048
    assert ctx.aeron_dir == tmp_path
    assert ctx.threading_mode is ThreadingMode.INVOKER


def test_unknown_override_names_the_field() -> None:
    with pytest.raises(DriverConfigurationError, match="mtu"):
        DriverContext.from_env({}, mtu=1408)


def test_from_properties_and_back() -> None:
    props = {
        "aeron.dir": "/tmp/x-aeron",
        "aeron.ipc.term.buffer.length": "128k",
        "aeron.driver.timeout": "3s",
        "aeron.publication.unblock.timeout": "15s",
        "java.io.tmpdir": "/tmp",
    }
    ctx = DriverContext.from_properties(props).conclude()
    assert ctx.aeron_dir == Path("/tmp/x-aeron")
    assert ctx.ipc_term_buffer_length == 128 * 1024
    assert ctx.driver_timeout_ms == 3000
    assert ctx.publication_unblock_timeout_ns == 15_000_000_000
    again = DriverContext.from_properties(ctx.to_properties())
    assert again == ctx


def test_to_properties_text() -> None:
    props = DriverContext(cnc_generation=CncGeneration.CURRENT, term_buffer_sparse_file=True).to_properties()
    assert props["aeron.cnc.version"] == "current"
    assert props["aeron.term.buffer.sparse.file"] == "true"
    assert props["aeron.threading.mode"] == "DEDICATED"
    assert props["aeron.client.liveness.timeout"] == "5000000000"
    assert DriverContext().to_properties()["aeron.cnc.version"] == "current"
    assert DriverContext(cnc_generation=CncGeneration.V15).to_properties()["aeron.cnc.version"] == "15"
    assert DriverContext.from_env({"AERON_CNC_VERSION": "15"}).cnc_generation is CncGeneration.V15


@pytest.mark.parametrize(
    ("prop", "text"),
    [
        ("aeron.term.buffer.length", "16MB"),
        ("aeron.client.liveness.timeout", "5 minutes"),
        ("aeron.threading.mode", "TURBO"),
        ("aeron.conductor.idle.strategy", "org.example.MyIdleStrategy"),
        ("aeron.socket.multicast.ttl", "eight"),
        ("aeron.cnc.version", "16"),
        ("aeron.dir", ""),
    ],
)
def test_unparseable_text_names_the_property(prop: str, text: str) -> None:
    with pytest.raises(DriverConfigurationError) as info:
        DriverContext.from_properties({prop: text})
    assert info.value.field == prop
    with pytest.raises(DriverConfigurationError) as info:
        DriverContext.from_env({env_name(prop): text})
    assert info.value.field == prop


INVALID: list[tuple[dict[str, Any], str, str]] = [
    ({"term_buffer_length": 32 * 1024}, "aeron.term.buffer.length", "power of two in 65536..1073741824"),
    ({"term_buffer_length": 3 * MIB}, "aeron.term.buffer.length", "power of two"),
    ({"term_buffer_length": 2048 * MIB}, "aeron.term.buffer.length", "power of two"),
    ({"ipc_term_buffer_length": 100_000}, "aeron.ipc.term.buffer.length", "power of two"),
    ({"mtu_length": 1400}, "aeron.mtu.length", "multiple of 32 in 32..65504"),
    ({"mtu_length": 65536}, "aeron.mtu.length", "32..65504"),
    ({"ipc_mtu_length": 0}, "aeron.ipc.mtu.length", "32..65504"),
    ({"file_page_size": 2048}, "aeron.file.page.size", "power of two in 4096..1073741824"),
    ({"file_page_size": 12288}, "aeron.file.page.size", "power of two"),
    ({"initial_window_length": 1024}, "aeron.rcv.initial.window.length", "1408.."),
    ({"socket_sndbuf_length": 1000}, "aeron.socket.so_sndbuf", ">= the MTU"),
    ({"socket_multicast_ttl": 256}, "aeron.socket.multicast.ttl", "0..255"),
    ({"send_to_status_poll_ratio": 0}, "aeron.send.to.status.poll.ratio", "1.."),
    (
        {"publication_reserved_session_id_low": 10, "publication_reserved_session_id_high": 5},
        "aeron.publication.reserved.session.id.high",
        "10..",
    ),
    ({"conductor_idle_strategy": "turbo"}, "aeron.conductor.idle.strategy", "backoff"),
    ({"client_liveness_timeout_ns": 0}, "aeron.client.liveness.timeout", "1.."),
    ({"timer_interval_ns": -5}, "aeron.timer.interval", "1.."),
    ({"publication_linger_timeout_ns": -1}, "aeron.publication.linger.timeout", "0.."),
    ({"driver_timeout_ms": 0}, "aeron.driver.timeout", "1.."),
    ({"conductor_buffer_length": MIB}, "aeron.conductor.buffer.length", "+ 768 bytes of trailer"),
    ({"to_clients_buffer_length": MIB + 768}, "aeron.clients.buffer.length", "+ 128 bytes of trailer"),
    ({"counters_values_buffer_length": 1000}, "aeron.counters.buffer.length", "multiple of 128"),
    ({"counters_values_buffer_length": 1 << 30}, "aeron.counters.buffer.length", "128..536870911"),
    ({"error_buffer_length": 0}, "aeron.error.buffer.length", "1024.."),
    ({"loss_report_buffer_length": 10}, "aeron.loss.report.buffer.length", "1024.."),
    ({"publication_term_window_length": -1}, "aeron.publication.term.window.length", "0.."),
    ({"dir_delete_on_start": "true"}, "aeron.dir.delete.on.start", "true or false"),
    ({"threading_mode": "SHARED"}, "aeron.threading.mode", "ThreadingMode"),
    (
        {"conductor_buffer_length": (1 << 30) + 768, "to_clients_buffer_length": (1 << 30) + 128},
        "cnc.dat length",
        "at most 2147483647",
    ),
]


@pytest.mark.parametrize(("fields", "prop", "allowed"), INVALID)
def test_conclude_names_the_property_and_range(fields: dict[str, Any], prop: str, allowed: str) -> None:
    ctx = DriverContext(**fields)
    with pytest.raises(DriverConfigurationError) as info:
        ctx.conclude()
    assert info.value.field == prop
    assert allowed in info.value.allowed
    assert prop in str(info.value)


def test_ipc_term_length_zero_means_the_udp_term_length() -> None:
    ctx = DriverContext(ipc_term_buffer_length=0, term_buffer_length=128 * 1024).conclude()
    assert ctx.effective_ipc_term_buffer_length == 128 * 1024
    assert DriverContext().effective_ipc_term_buffer_length == 64 * MIB


def test_term_windows() -> None:
    ctx = DriverContext()
    assert ctx.publication_term_window_length_for(MIB) == MIB // 2
    assert ctx.ipc_publication_term_window_length_for(MIB) == MIB
    capped = DriverContext(publication_term_window_length=4096, ipc_publication_term_window_length=8192)
    assert capped.publication_term_window_length_for(MIB) == 4096
    assert capped.ipc_publication_term_window_length_for(MIB) == 8192
    assert capped.publication_term_window_length_for(4096) == 2048


def test_evolve_aliases_and_path_conversion(tmp_path: Path) -> None:
    ctx = DriverContext(aeron_dir=str(tmp_path))
    assert ctx.aeron_dir == tmp_path
    changed = ctx.evolve(aeron_dir=f"{tmp_path}-x", mtu_length="4k", dir_delete_on_shutdown=True)
    assert changed.aeron_dir == Path(f"{tmp_path}-x")
    assert changed.mtu_length == 4096
    assert changed.dir_delete_on_shutdown is True
    assert ctx.mtu_length == 1408
    assert changed.evolve() == changed
    assert ctx.driver_timeout_ns == 10_000_000_000
    client = ClientContext(aeron_dir=str(tmp_path)).evolve(driver_timeout_ms=500)
    assert client.aeron_dir == tmp_path
    assert client.driver_timeout_ns == 500_000_000
    with pytest.raises(DriverConfigurationError, match="nonsense"):
        ctx.evolve(nonsense=1)


def test_context_is_immutable() -> None:
    ctx = DriverContext()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ctx.mtu_length = 4096  # type: ignore[misc]
    assert attrs.evolve(ctx, mtu_length=4096).mtu_length == 4096


# ------------------------------------------------------------------------------------------- idle strategies


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("backoff", "backoff"),
        ("org.agrona.concurrent.BackoffIdleStrategy", "backoff"),
        ("busy_spin", "busy_spin"),
        ("org.agrona.concurrent.BusySpinIdleStrategy", "busy_spin"),
        ("io.aeron.driver.BusySpinIdleStrategy", "busy_spin"),
        ("BusySpinIdleStrategy", "busy_spin"),
        ("yielding", "yielding"),
        ("org.agrona.concurrent.YieldingIdleStrategy", "yielding"),
        ("sleeping", "sleeping"),
        ("org.agrona.concurrent.SleepingIdleStrategy", "sleeping"),
        ("org.agrona.concurrent.SleepingMillisIdleStrategy", "sleeping"),
        ("noop", "noop"),
        ("org.agrona.concurrent.NoOpIdleStrategy", "noop"),
    ],
)
def test_idle_strategy_names(name: str, short: str) -> None:
    assert normalize_idle_strategy(name) == short
    assert short in IDLE_STRATEGY_NAMES


@pytest.mark.parametrize("name", ["", "IdleStrategy", "org.agrona.concurrent.ControllableIdleStrategy", "fast"])
def test_unknown_idle_strategy(name: str) -> None:
    with pytest.raises(DriverConfigurationError, match="idle strategy"):
        normalize_idle_strategy(name)


# ------------------------------------------------------------------------------------------- aeron dir


def test_default_aeron_dir_follows_aeron(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    path = default_aeron_dir()
    if sys.platform.startswith("linux") and Path("/dev/shm").is_dir():
        assert path == Path("/dev/shm/aeron-alice")
    else:
        assert path.name == "aeron-alice"


def test_default_aeron_dir_without_a_user_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_user() -> str:
        raise KeyError("no user")

    monkeypatch.setattr("getpass.getuser", no_user)
    expected = f"aeron-{os.getuid()}" if hasattr(os, "getuid") else "aeron-default"
    assert default_aeron_dir().name == expected


def test_default_aeron_dir_off_linux(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "bob")
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    assert default_aeron_dir() == tmp_path / "aeron-bob"


# ------------------------------------------------------------------------------------------- client


def test_client_defaults() -> None:
    ctx = ClientContext().conclude()
    assert ctx.driver_timeout_ms == 10_000
    assert ctx.keepalive_interval_ns == 500_000_000
    assert ctx.resource_linger_duration_ns == 3_000_000_000
    assert ctx.idle_sleep_duration_ns == 16_000_000
    assert ctx.idle_strategy == "sleeping"
    assert ctx.busy_sleep_duration_ns == 0  # off: Aeron's one sleep
    assert callable(ctx.error_handler)
    assert ctx.aeron_dir == default_aeron_dir()


def test_client_from_env(tmp_path: Path) -> None:
    seen: list[BaseException] = []
    ctx = ClientContext.from_env(
        {"AERON_DIR": str(tmp_path), "AERON_DRIVER_TIMEOUT": "20000", "AERON_CLIENT_RESOURCE_LINGER_DURATION": "1s"},
        keepalive_interval_ns="250ms",
        idle_strategy="org.agrona.concurrent.YieldingIdleStrategy",
        error_handler=seen.append,
    ).conclude()
    assert ctx.cnc_path == tmp_path / "cnc.dat"
    assert ctx.driver_timeout_ms == 20_000
    assert ctx.resource_linger_duration_ns == 1_000_000_000
    assert ctx.keepalive_interval_ns == 250_000_000
    assert ctx.idle_strategy == "yielding"
    ctx.error_handler(ValueError("x"))
    assert len(seen) == 1
    assert set(ctx.to_properties()) == {
        "aeron.dir",
        "aeron.driver.timeout",
        "aeron.client.resource.linger.duration",
        "aeron.client.idle.sleep.duration",
    }


def test_client_default_error_handler_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("ERROR", logger="driver.client"):
        ClientContext().error_handler(RuntimeError("boom"))
    assert "boom" in caplog.text
    assert caplog.records[0].exc_info is not None


@pytest.mark.parametrize(
    ("fields", "prop"),
    [
        ({"driver_timeout_ms": 0}, "aeron.driver.timeout"),
        ({"keepalive_interval_ns": 0}, "keepalive_interval_ns"),
        ({"keepalive_interval_ns": 10_000_000_000}, "keepalive_interval_ns"),
        ({"resource_linger_duration_ns": -1}, "aeron.client.resource.linger.duration"),
        ({"idle_strategy": "warp"}, "idle_strategy"),
        ({"busy_sleep_duration_ns": -1}, "busy_sleep_duration_ns"),
        ({"busy_sleep_duration_ns": 20_000_000}, "busy_sleep_duration_ns"),
        ({"error_handler": 5}, "error_handler"),
    ],
)
def test_client_validation_names_the_setting(fields: dict[str, Any], prop: str) -> None:
    with pytest.raises(DriverConfigurationError) as info:
        ClientContext(**fields).conclude()
    assert info.value.field == prop


def test_spies_simulate_connection_from_property_environment_and_checked() -> None:
    """Aeron's ``aeron.spies.simulate.connection`` (env ``AERON_SPIES_SIMULATE_CONNECTION``): only "true" is true."""
    assert DriverContext.from_properties({"aeron.spies.simulate.connection": "true"}).spies_simulate_connection
    assert DriverContext.from_env({"AERON_SPIES_SIMULATE_CONNECTION": "TRUE"}).conclude().spies_simulate_connection
    assert not DriverContext.from_env({"AERON_SPIES_SIMULATE_CONNECTION": "1"}).conclude().spies_simulate_connection
    assert DriverContext.from_env({}, spies_simulate_connection="true").spies_simulate_connection
    with pytest.raises(DriverConfigurationError) as info:
        attrs.evolve(DriverContext(), spies_simulate_connection=1).conclude()
    assert info.value.field == "aeron.spies.simulate.connection"
