"""Restart on critical driver errors: a standalone driver SIGKILLed, and the network removed, under running end points.

The server and client attach to a standalone driver (a separate process). When it
is killed, both notice the lost heartbeat within their driver timeout, tell every
``on_error`` listener with CriticalDriverError, drop their connections without a
disconnect message (``on_disconnect`` fires with ``lost`` set), start a fresh
embedded driver on the same directory, the server re-binds and the client (with
``auto_reconnect``) connects again, and messages flow as before.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from endpoint import (
    Client,
    ClientConfiguration,
    Connection,
    CriticalDriverError,
    Serialization,
    Server,
    ServerConfiguration,
)
from support.driver_process import DriverProcess
from support.ports import free_server_port
from support.waiting import execute_until

pytestmark = [pytest.mark.process, pytest.mark.slow]


@attrs.define
class Note:
    text: str


def _serialization() -> Serialization:
    serialization = Serialization()
    serialization.register(Note)
    return serialization


async def _wait_for(condition: object, timeout: float, what: str) -> None:
    async def poll() -> None:
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None


async def test_killed_standalone_driver_is_replaced_and_the_client_reconnects(aeron_dir: Path, tmp_path: Path) -> None:
    driver = DriverProcess.start(aeron_dir, tmp_path / "driver.log")
    common = {"aeron_dir": aeron_dir, "driver_timeout": 2.0, "serialization": _serialization()}
    port = free_server_port()
    server = Server(ServerConfiguration(port=port, **common))  # type: ignore[arg-type]
    client = Client(ClientConfiguration(auto_reconnect=True, **common))  # type: ignore[arg-type]
    errors: dict[str, list[BaseException]] = {"server": [], "client": []}
    lost: list[Connection] = []
    received: list[str] = []
    server.on_error(lambda conn, err: errors["server"].append(err))
    client.on_error(lambda conn, err: errors["client"].append(err))
    client.on_disconnect(lambda conn: lost.append(conn))
    server.on_message(Note, lambda conn, note: received.append(note.text))
    try:
        async with server, client:
            first = await client.connect("127.0.0.1", port)
            assert first.is_ipc
            await first.send(Note("before"))
            await _wait_for(lambda: received == ["before"], 10, "the first note")

            driver.kill()

            await _wait_for(lambda: lost, 15, "the client's connection to drop")
            assert lost[0] is first
            assert first.lost
            for side in ("server", "client"):
                await _wait_for(
                    lambda side=side: any(isinstance(e, CriticalDriverError) for e in errors[side]),  # type: ignore[misc]
                    15,
                    f"the {side}'s CriticalDriverError",
                )
            await _wait_for(
                lambda: (
                    client.connection is not None and client.connection is not first and not client.connection.is_closed
                ),
                20,
                "the client to reconnect",
            )
            second = client.connection
            assert second is not None
            await second.send(Note("after"))
            await _wait_for(lambda: received == ["before", "after"], 10, "the note sent after the restart")
            assert server.restarts == 1
            assert client.restarts == 1
            assert (aeron_dir / "cnc.dat").exists()  # the replacement driver runs on the same directory
    finally:
        driver.stop()
    assert not aeron_dir.exists()  # the replacement was launched here, so the last close removed its directory


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def namespace() -> Iterator[str]:
    """A network namespace of our own with an interface carrying 10.213.0.1/24; deleted afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a network namespace")
    name = f"ep-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"cannot create a network namespace here: {exc}")
    try:
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        _add_interface(name)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _add_interface(namespace: str) -> None:
    """A veth pair inside the namespace (both ends there); 10.213.0.1 on one end."""
    _ip("netns", "exec", namespace, "ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
    _ip("netns", "exec", namespace, "ip", "addr", "add", "10.213.0.1/24", "dev", "v0")
    _ip("netns", "exec", namespace, "ip", "link", "set", "v1", "up")
    _ip("netns", "exec", namespace, "ip", "link", "set", "v0", "up")


def test_network_removed_under_a_running_server_restarts_drivers_and_reconnects(
    namespace: str, aeron_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "peer.log"
    script = Path(__file__).with_name("netns_peer.py")
    args = [
        "ip",
        "netns",
        "exec",
        namespace,
        sys.executable,
        str(script),
        "--address",
        "10.213.0.1",
        "--port",
        "24412",
        "--aeron-dir",
        str(aeron_dir),
        "--duration",
        "60",
    ]
    with log.open("wb") as sink:
        peer = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)

    def output() -> str:
        return log.read_text(errors="replace")

    def wait_for(text: str, count: int = 1, timeout_s: float = 30.0) -> None:
        execute_until(
            lambda: output().count(text) >= count,
            timeout_s=timeout_s,
            interval_s=0.05,
            description=f"{count} x {text!r} in the peer's output:\n{output()}",
        )
        if peer.poll() is not None:
            raise AssertionError(f"peer exited with {peer.returncode}:\n{output()}")

    try:
        wait_for("connected")
        wait_for("received 10")
        _ip("netns", "exec", namespace, "ip", "link", "del", "v0")  # the network goes away under both
        wait_for("critical client")
        wait_for("critical server")
        wait_for("lost")
        _add_interface(namespace)  # and comes back: the server re-binds, the client reconnects
        wait_for("rebound")
        wait_for("connected", count=2)
        wait_for("reconnected")  # the client's listeners were told: attempts first, then the new connection
        text = output()
        assert "reconnecting 1" in text, text
        assert text.index("reconnecting 1") < text.index("reconnected"), text
        received_before = output().count("received")
        execute_until(
            lambda: output().count("received") > received_before + 2,
            timeout_s=30,
            interval_s=0.05,
            description=f"notes flowing again:\n{output()}",
        )
    finally:
        if peer.poll() is None:
            os.killpg(peer.pid, signal.SIGTERM)
            try:
                peer.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(peer.pid, signal.SIGKILL)
                peer.wait(10)
        for suffix in ("-server", "-client"):
            shutil.rmtree(f"{aeron_dir}{suffix}", ignore_errors=True)
