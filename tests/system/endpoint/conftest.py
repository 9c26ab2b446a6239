"""Fixtures of the end point system tests: a free port, a second Aeron directory, no driver left behind."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from endpoint.listeners import _global_error_listeners
from endpoint.registry import registry
from support.endpoints import free_udp_port


@pytest.fixture
def port() -> int:
    """A UDP port on 127.0.0.1 that was free a moment ago (the server's)."""
    return free_udp_port()


@pytest.fixture
def client_dir(aeron_dir: Path) -> Iterator[Path]:
    """A second unique, not yet existing Aeron directory next to ``aeron_dir`` (for UDP clients), removed after."""
    path = aeron_dir.with_name(f"{aeron_dir.name[:40]}-client-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_driver_left_behind() -> Iterator[None]:
    """Every end point a test opens must be closed by its end: no shared driver and no global listener survives."""
    before = list(_global_error_listeners)
    yield
    leaked = registry.active()
    assert not leaked, f"drivers still leased after the test: {[d.aeron_dir for d in leaked]}"
    assert _global_error_listeners == before, "a global error listener was left registered"
