"""The rules of the driver directory: one live driver per directory, stale ones taken over, clean-up, bad settings.

Our driver's directory is live while its process holds the directory's lock: a
SIGKILLed driver's directory is taken over at once. A directory without the lock
file (a real Aeron driver's) is live while the heartbeat its driver stamps on
the to-driver ring buffer is younger than the *starting* driver's
``aeron.driver.timeout``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from driver.client import Aeron, Header
from driver.cnc import CncFile
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver, is_driver_active
from driver.errors import ActiveDriverError, DeadDriverError
from driver.ownership import LOCK_FILE, OwnerState, owner_state
from support.clients import offer_all, poll_until, wait_for_image
from support.driver_process import DriverProcess
from support.waiting import execute_until

SETTINGS: dict[str, Any] = {
    "timer_interval_ns": 50_000_000,
    "client_liveness_timeout_ns": 2_000_000_000,
    "publication_linger_timeout_ns": 500_000_000,
}
SHORT_DRIVER_TIMEOUT_MS = 500


def context(aeron_dir: Path, **changes: object) -> DriverContext:
    return DriverContext.from_env({}, aeron_dir=aeron_dir, **{**SETTINGS, **changes})


def run_driver(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m driver ARGS`` to completion (bounded): for drivers expected to exit by themselves."""
    return subprocess.run(
        [sys.executable, "-m", "driver", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
        check=False,
    )


def round_trip(aeron_dir: Path, stream_id: int) -> None:
    with Aeron.connect(aeron_dir=aeron_dir) as client:
        subscription = client.add_subscription("aeron:ipc", stream_id)
        publication = client.add_publication("aeron:ipc", stream_id)
        wait_for_image(subscription)
        got: list[bytes] = []

        def handler(payload: memoryview, header: Header) -> None:
            got.append(bytes(payload))

        offer_all(publication, [b"one", b"two"], lambda: subscription.poll(handler, 10))
        poll_until(subscription, handler, lambda: len(got) >= 2, timeout_s=10)
        assert got == [b"one", b"two"]


def cnc_pid(aeron_dir: Path) -> int:
    cnc = CncFile.map_existing(aeron_dir, timeout_s=5.0)
    try:
        return cnc.pid
    finally:
        cnc.close()


# ---------------------------------------------------------------------------------------------- live directory


def test_second_embedded_driver_on_a_live_directory_is_refused(media_driver: MediaDriver) -> None:
    aeron_dir = media_driver.aeron_dir
    with pytest.raises(ActiveDriverError) as raised:
        MediaDriver.launch(context(aeron_dir))
    assert str(aeron_dir) in str(raised.value)
    round_trip(aeron_dir, 70)  # the first driver is untouched


@pytest.mark.process
def test_second_driver_process_on_a_live_directory_exits_1(driver_process: DriverProcess) -> None:
    aeron_dir = driver_process.aeron_dir
    second = run_driver("--dir", str(aeron_dir))
    assert second.returncode == 1, second
    assert "active driver" in second.stderr
    assert str(aeron_dir) in second.stderr
    assert cnc_pid(aeron_dir) == driver_process.pid
    round_trip(aeron_dir, 71)


# ---------------------------------------------------------------------------------------------- stale directory


@pytest.mark.process
def test_directory_of_a_killed_driver_is_taken_over_at_once(driver_process: DriverProcess, tmp_path: Path) -> None:
    aeron_dir = driver_process.aeron_dir
    with Aeron.connect(aeron_dir=aeron_dir) as client:
        publication = client.add_publication("aeron:ipc", 72)
        old_log = Path(publication.log_buffers.path)
    assert old_log.exists()  # the driver lingers over it; the SIGKILL comes first
    assert owner_state(aeron_dir) is OwnerState.ALIVE
    driver_process.kill()

    # Its heartbeat is fresh, but its process (the holder of the directory's lock) is gone.
    assert owner_state(aeron_dir) is OwnerState.DEAD
    assert not is_driver_active(aeron_dir, 60_000)
    # A client is told at once, with a type saying why; a heartbeat wait would end in a plain DriverTimeoutError.
    with pytest.raises(DeadDriverError):
        Aeron.connect(aeron_dir=aeron_dir, driver_timeout_ms=60_000)
    successor = DriverProcess.start(aeron_dir, tmp_path / "successor.log", SETTINGS)
    try:
        assert cnc_pid(aeron_dir) == successor.pid
        assert not old_log.exists()  # a fresh directory, not the dead driver's files
        round_trip(aeron_dir, 73)
    finally:
        assert successor.stop() == 0


def test_embedded_driver_takes_over_a_dead_directory_at_once(driver_process: DriverProcess) -> None:
    aeron_dir = driver_process.aeron_dir
    driver_process.kill()
    with MediaDriver.launch(context(aeron_dir, driver_timeout_ms=60_000)):
        assert cnc_pid(aeron_dir) == os.getpid()
        assert owner_state(aeron_dir) is OwnerState.ALIVE
        round_trip(aeron_dir, 74)


@pytest.mark.process
def test_directory_without_a_lock_is_judged_by_its_heartbeat(driver_process: DriverProcess) -> None:
    """A real Aeron driver holds no lock: its directory is live until the heartbeat goes stale, as in Aeron."""
    aeron_dir = driver_process.aeron_dir
    driver_process.kill()
    (aeron_dir / LOCK_FILE).unlink()  # now it looks like a Java or C driver's directory
    assert owner_state(aeron_dir) is OwnerState.UNKNOWN

    # Still live for a driver with the default 10 s timeout: its heartbeat is fresh.
    with pytest.raises(ActiveDriverError):
        MediaDriver.launch(context(aeron_dir))
    execute_until(
        lambda: not is_driver_active(aeron_dir, SHORT_DRIVER_TIMEOUT_MS),
        timeout_s=10,
        interval_s=0.05,
        description="the killed driver's heartbeat to go stale",
    )
    with MediaDriver.launch(context(aeron_dir, driver_timeout_ms=SHORT_DRIVER_TIMEOUT_MS)):
        assert cnc_pid(aeron_dir) == os.getpid()
        round_trip(aeron_dir, 79)


def test_client_of_a_killed_driver_is_told_at_once(driver_process: DriverProcess) -> None:
    """A connected client watches its driver's process: its death ends the client well before the heartbeat
    timeout, with DeadDriverError."""
    errors: list[BaseException] = []
    client = Aeron.connect(
        aeron_dir=driver_process.aeron_dir,
        driver_timeout_ms=60_000,
        keepalive_interval_ns=50_000_000,
        error_handler=errors.append,
    )
    try:
        client.add_subscription("aeron:ipc", 80)
        driver_process.kill()
        execute_until(lambda: client.is_closed, timeout_s=20, description="the client to notice the dead driver")
        assert isinstance(client.termination_cause, DeadDriverError), client.termination_cause
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- clean-up


def test_dir_delete_on_shutdown_removes_the_directory(aeron_dir: Path) -> None:
    with MediaDriver.launch(context(aeron_dir, dir_delete_on_shutdown=True)):
        round_trip(aeron_dir, 75)
        assert (aeron_dir / "cnc.dat").exists()
    assert not aeron_dir.exists()


def test_directory_is_kept_without_dir_delete_on_shutdown(aeron_dir: Path) -> None:
    with MediaDriver.launch(context(aeron_dir)):
        round_trip(aeron_dir, 76)
    assert (aeron_dir / "cnc.dat").exists()
    assert not is_driver_active(aeron_dir, SHORT_DRIVER_TIMEOUT_MS, now_ms=2**62)


def test_launch_embedded_picks_a_fresh_directory_and_removes_it() -> None:
    driver = MediaDriver.launch_embedded(**SETTINGS)
    try:
        default = DriverContext.from_env().aeron_dir
        assert driver.aeron_dir.name.startswith(Path(default).name + "-")
        assert driver.aeron_dir != Path(default)
        round_trip(driver.aeron_dir, 77)
    finally:
        driver.close()
        leftover = driver.aeron_dir.exists()
        shutil.rmtree(driver.aeron_dir, ignore_errors=True)
    assert not leftover


@pytest.mark.process
def test_driver_process_deletes_its_directory_on_shutdown(aeron_dir: Path, tmp_path: Path) -> None:
    process = DriverProcess.start(aeron_dir, tmp_path / "driver.log", {**SETTINGS, "dir_delete_on_shutdown": True})
    try:
        round_trip(aeron_dir, 78)
    finally:
        assert process.stop() == 0
    assert not aeron_dir.exists()


@pytest.mark.process
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_driver_process_stopped_by_a_signal_removes_its_directory(aeron_dir: Path, tmp_path: Path, signum: int) -> None:
    """Its directory sits in memory (/dev/shm): a supervisor's stop must not leave it behind."""
    process = DriverProcess.start(aeron_dir, tmp_path / "driver.log", SETTINGS)
    try:
        round_trip(aeron_dir, 81)
        process.signal(signum)
        assert process.wait(15) == 0, process.output()
    finally:
        process.stop()
    assert not aeron_dir.exists(), process.output()


# ---------------------------------------------------------------------------------------------- bad settings


@pytest.mark.process
@pytest.mark.parametrize(
    ("env", "args", "named"),
    [
        pytest.param({"AERON_TERM_BUFFER_LENGTH": "1000"}, (), "aeron.term.buffer.length", id="term-length"),
        pytest.param({"AERON_MTU_LENGTH": "1001"}, (), "aeron.mtu.length", id="mtu"),
        pytest.param({}, ("-D", "aeron.threading.mode=SOMETIMES"), "aeron.threading.mode", id="threading-mode"),
        pytest.param({}, ("-D", "aeron.client.liveness.timeout=soon"), "aeron.client.liveness.timeout", id="timeout"),
    ],
)
def test_bad_configuration_exits_1_naming_the_property(
    aeron_dir: Path, env: dict[str, str], args: tuple[str, ...], named: str
) -> None:
    done = run_driver("--dir", str(aeron_dir), *args, env=env)
    assert done.returncode == 1, done
    assert named in done.stderr
    assert "Traceback" not in done.stderr
    assert not aeron_dir.exists()  # refused before touching the directory
