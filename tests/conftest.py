"""Fixtures shared by every suite: unique Aeron directories and the real Aeron Java peer."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.cnc import CncGeneration
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from support.aeron_c import AeronC, PeerUnavailableError
from support.aeron_java import AeronJava, JavaMediaDriver, start_java_media_driver
from support.any_driver import AnyDriver
from support.archive_channels import LOCAL_ARCHIVE_ENV
from support.driver_process import DriverProcess

# Archives started by tests (and their child processes) use IPC channels, not Aeron's shared UDP ports.
for _name, _value in LOCAL_ARCHIVE_ENV.items():
    os.environ.setdefault(_name, _value)

pytest_plugins = ["pytester"]  # the plugin's own tests (tests/system/endpoint/test_testing_plugin.py) run pytest


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core, at most four (every test starts drivers, some a JVM or Spark: more workers
    than that only compete for the same cores and stretch the tests' waits)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _shm_base() -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return Path(tempfile.gettempdir())


@pytest.fixture(autouse=True)
def _endpoint_config_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """End points keep their keys and pins in the user's configuration directory by default: never the real one
    in tests, and a fresh one per test (ports are reused across tests, so a shared one could hold a stale pin)."""
    directory = Path(tempfile.mkdtemp(prefix="endpoint-config-"))
    monkeypatch.setenv("ENDPOINT_CONFIG_DIR", str(directory))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def aeron_java() -> AeronJava:
    """Java 11 + aeron-all-1.15.1.jar, installed into the peer cache on first use."""
    return AeronJava.ensure()


@pytest.fixture(scope="session")
def aeron_c() -> AeronC:
    """Today's Aeron C driver and client (pyaeron in a CPython >= 3.12 venv), set up in a cache on first use.

    Skips, naming the reason, where no CPython >= 3.12 exists to run it.
    """
    try:
        return AeronC.ensure()
    except PeerUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def aeron_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A unique, not yet existing Aeron directory (under /dev/shm when possible), removed afterwards."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:48]
    path = _shm_base() / f"endpoint-{name}-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def java_media_driver(aeron_java: AeronJava, aeron_dir: Path, tmp_path: Path) -> Iterator[JavaMediaDriver]:
    """A Java 1.15.1 MediaDriver (SHARED threading) on ``aeron_dir``, ready, stopped by pid afterwards."""
    driver = start_java_media_driver(aeron_java, aeron_dir, tmp_path / "java-media-driver.log")
    try:
        yield driver
    finally:
        AeronJava.stop(driver.process)


FAST_DRIVER_SETTINGS: dict[str, object] = {
    "timer_interval_ns": 50_000_000,
    "client_liveness_timeout_ns": 3_000_000_000,
    "publication_linger_timeout_ns": 500_000_000,
    "publication_unblock_timeout_ns": 2_000_000_000,
    "ipc_term_buffer_length": 1024 * 1024,
}


V15_DRIVER_SETTINGS: dict[str, object] = {**FAST_DRIVER_SETTINGS, "cnc_generation": CncGeneration.V15}
"""For tests where Aeron Java 1.15.1 clients or tools use our driver: they accept only CnC version 15."""


def _driver_settings(request: pytest.FixtureRequest) -> dict[str, object]:
    """Today's generation (the default) unless the test is marked ``cnc_v15``; a ``driver_settings(**fields)``
    marker changes fields (shorter timeouts for a test that waits them out, say)."""
    settings = V15_DRIVER_SETTINGS if request.node.get_closest_marker("cnc_v15") else FAST_DRIVER_SETTINGS
    marker = request.node.get_closest_marker("driver_settings")
    return {**settings, **marker.kwargs} if marker else settings


@pytest.fixture
def media_driver(aeron_dir: Path, request: pytest.FixtureRequest) -> Iterator[MediaDriver]:
    """Our driver embedded in the test process (SHARED thread), with short timers, on ``aeron_dir``."""
    settings = _driver_settings(request)
    ctx = DriverContext.from_env({}, aeron_dir=aeron_dir, threading_mode="SHARED", **settings)
    driver = MediaDriver.launch(ctx)
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def driver_process(aeron_dir: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DriverProcess]:
    """Our standalone driver (``python -m driver``) as a separate process, stopped by pid afterwards."""
    proc = DriverProcess.start(aeron_dir, tmp_path / "driver.log", _driver_settings(request))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(
    params=[
        pytest.param("java", marks=[pytest.mark.interop, pytest.mark.process]),
        "embedded",
        pytest.param("process", marks=pytest.mark.process),
    ]
)
def any_driver(request: pytest.FixtureRequest, aeron_dir: Path) -> AnyDriver:
    """Java's MediaDriver, our embedded MediaDriver or our ``python -m driver`` on ``aeron_dir``."""
    if request.param == "java":
        java: JavaMediaDriver = request.getfixturevalue("java_media_driver")

        def kill_java() -> None:
            java.process.kill()
            java.process.wait(10)

        return AnyDriver("java", aeron_dir, kill_java, java.pid)
    if request.param == "embedded":
        embedded: MediaDriver = request.getfixturevalue("media_driver")
        return AnyDriver("embedded", aeron_dir, embedded.close, os.getpid())
    process: DriverProcess = request.getfixturevalue("driver_process")
    return AnyDriver("process", aeron_dir, process.kill, process.pid)
