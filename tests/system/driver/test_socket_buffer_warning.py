"""A driver asking for more socket buffer than the kernel allows says so at start, as Aeron's drivers do: the
kernel caps the length without an error, and the process then drops whatever arrives while it is late to read."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from driver.config import DriverContext
from driver.core import media_driver
from driver.core.media_driver import MediaDriver
from driver.media.os_buffers import refused_buffer_lengths

_INT32_MAX = (1 << 31) - 1


def _rmem_max() -> int:
    try:
        value = int(Path("/proc/sys/net/core/rmem_max").read_text())
    except (OSError, ValueError):
        pytest.skip("no /proc/sys/net/core/rmem_max: the kernel's cap cannot be read to ask past it")
    if 2 * value + 4096 > _INT32_MAX:
        pytest.skip(f"net.core.rmem_max is {value}: no length past it fits the setting")
    return value


def test_the_kernel_grants_at_most_its_maximum_and_says_nothing() -> None:
    """What the warning rests on: Linux grants ``min(asked, rmem_max)`` without an error (and reports twice what
    it granted, socket(7))."""
    cap = _rmem_max()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65_536)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2 == min(65_536, cap)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2 * cap + 4096)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2 == cap


def test_lengths_within_the_cap_are_granted_and_those_past_it_named() -> None:
    cap = _rmem_max()
    assert refused_buffer_lengths(0, 0) == []
    assert refused_buffer_lengths(0, cap) == []
    (line,) = refused_buffer_lengths(0, 2 * cap + 4096)
    assert line.startswith(f"SO_RCVBUF: asked for {2 * cap + 4096} bytes, the kernel grants {cap}:")
    assert "raise net.core.rmem_max" in line


def test_a_driver_warns_once_per_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = 2 * _rmem_max() + 4096
    monkeypatch.setattr(media_driver, "_warned_buffers", set())
    caplog.set_level(logging.WARNING, logger="driver")
    for name in ("first", "second"):
        ctx = DriverContext.from_env({}, aeron_dir=tmp_path / name, threading_mode="SHARED", socket_rcvbuf_length=asked)
        MediaDriver.launch(ctx).close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "driver" and "SO_RCVBUF" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"asked for {asked} bytes" in warnings[0]


def test_a_driver_asking_within_the_cap_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = _rmem_max()
    monkeypatch.setattr(media_driver, "_warned_buffers", set())
    caplog.set_level(logging.WARNING, logger="driver")
    ctx = DriverContext.from_env({}, aeron_dir=tmp_path / "d", threading_mode="SHARED", socket_rcvbuf_length=cap)
    MediaDriver.launch(ctx).close()
    assert not [r for r in caplog.records if "SO_RCVBUF" in r.getMessage()]
