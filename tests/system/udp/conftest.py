"""Fixtures for the UDP system tests: several drivers (embedded or processes) and their clients per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from udp_helpers import UdpDrivers


@pytest.fixture
def udp(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[UdpDrivers]:
    drivers = UdpDrivers(request.node.name.replace("/", "_").replace("[", "-").replace("]", ""), tmp_path)
    try:
        yield drivers
    finally:
        drivers.close()
