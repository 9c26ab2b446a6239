"""Fixtures of the end point system tests: a free port, a second Aeron directory, server processes, no driver left
behind."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from endpoint.listeners import _global_error_listeners
from endpoint.registry import registry
from support.endpoints import free_server_port
from support.logged_process import LoggedProcess

SERVER_PROCESS = Path(__file__).with_name("server_process.py")


@pytest.fixture
def port() -> int:
    """A UDP port on 127.0.0.1 that was free a moment ago with the next one (the server's port and control port)."""
    return free_server_port()


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


@pytest.fixture
def start_server(tmp_path: Path, aeron_dir: Path) -> Iterator[Callable[..., LoggedProcess]]:
    """``start(port, directory, *options, env=None)`` starts ``server_process.py`` on them (wait for
    ``has("serving ")`` before connecting), with ``env`` added to the environment (``AERON_*`` settings of its
    driver, say). Every one still running at the end is SIGKILLed by pid (before ``aeron_dir`` is removed)."""
    started: list[LoggedProcess] = []

    def start(port: int, directory: Path, *options: str, env: Mapping[str, str] | None = None) -> LoggedProcess:
        args = [sys.executable, str(SERVER_PROCESS), "--port", str(port), "--aeron-dir", str(directory), *options]
        environ = {**os.environ, **env} if env else None
        started.append(LoggedProcess.spawn(args, tmp_path / f"server-{len(started)}.log", environ))
        return started[-1]

    try:
        yield start
    finally:
        for process in started:
            process.kill()
