"""Buffered sessions across real failures: a client process killed and restarted, the network taken away.

A client process (its own embedded driver, UDP) is SIGKILLed and started again with the same session key file:
the server's listeners see the same session come back (``conn.session`` is the same object, ``conn.resumed``),
and what the server sent meanwhile reaches the new process once and in order. In a network namespace of the
test's own, a server process and a client process stream numbered messages to each other through their session
while the network is taken away for a while — every UDP datagram dropped (an nftables rule), or the interface
itself down — and given back: each side then has every number exactly once, in
order, and the client's new connection resumed the same session.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from endpoint import Connection, Server
from support.endpoints import Num, server_config, wait_until
from support.logged_process import LoggedProcess

pytestmark = [pytest.mark.process, pytest.mark.slow]

PEER = Path(__file__).with_name("session_peer.py")


def lines(process: LoggedProcess) -> list[str]:
    """Its complete lines so far (a line being written as we read is left for the next look)."""
    return process.output().split("\n")[:-1]


def got(process: LoggedProcess) -> list[int]:
    return [int(line.split()[1]) for line in lines(process) if line.startswith("got ")]


def connects(process: LoggedProcess) -> list[str]:
    return [line for line in lines(process) if line.startswith("connect ")]


async def test_a_killed_client_restarted_with_its_key_file_resumes_its_session(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    server = Server(
        server_config(
            aeron_dir,
            port,
            buffered_sessions=True,
            ephemeral_key=True,
            enable_ipc=False,
            ping_interval=0.2,
            peer_timeout=1.5,
            handshake_timeout=0.5,
        )
    )
    seen: list[Connection] = []
    received: list[int] = []
    server.on_connect(seen.append)
    server.on_message(Num, lambda conn, num: received.append(num.i))
    key = tmp_path / "client-session.key"
    second_dir = Path(f"{client_dir}-again")

    def client(directory: Path, sends: int, name: str) -> LoggedProcess:
        args = [sys.executable, str(PEER), "--role", "client", "--port", str(port), "--aeron-dir", str(directory)]
        args += ["--key-path", str(key), "--send", str(sends), "--duration", "90"]
        return LoggedProcess.spawn(args, tmp_path / f"{name}.log")

    try:
        async with asyncio.timeout(120):
            await server.bind()
            with client(client_dir, 5, "first") as first:
                await wait_until(lambda: seen, 30, 0.02, "the first client's connection")
                session = seen[0].session
                assert session is not None
                await wait_until(lambda: received == list(range(5)), 10, what="the first client's messages")
                for i in range(10):
                    await session.send(Num(1000 + i))
                await wait_until(lambda: got(first) == [1000 + i for i in range(10)], 10, what="delivered to 1st")
                await wait_until(lambda: session.kept == 0, 10, what="the first client's acknowledgements")
                first.kill()
                # Sent while the client is dead (the server may not know yet): kept in the session.
                for i in range(10, 30):
                    await session.send(Num(1000 + i))
                assert session.kept == 20
            with client(second_dir, 3, "second") as second:
                await wait_until(lambda: len(seen) == 2, 30, 0.02, "the restarted client's connection")
                assert seen[1].session is session, "the server's listener sees the same session"
                assert seen[1].resumed
                await wait_until(lambda: 1029 in got(second), 15, what="what was sent meanwhile")
                await wait_until(lambda: received[5:] == [0, 1, 2], 10, what="the new process's messages")
                await asyncio.sleep(0.5)  # a duplicate would have come by now
                assert got(second) == [1000 + i for i in range(10, 30)], second.output()
                assert [line.split()[1:] for line in connects(second)] == [[str(session.id), "True"]]
                assert connects(first)[0].split()[1:] == [str(session.id), "False"]
                await wait_until(lambda: seen[0].is_closed, 10, what="the dead client's connection to go")
                assert server.session_stats.resumed == 1
                assert len(server.sessions) == 1
    finally:
        async with asyncio.timeout(30):
            await server.close()
        shutil.rmtree(second_dir, ignore_errors=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def namespace() -> Iterator[str]:
    """A network namespace of our own (loopback up, an nftables input chain to drop UDP with); deleted after."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None:
        pytest.skip("needs root, iproute2 and nftables to cut a network of our own")
    name = f"eps-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"cannot create a network namespace here: {exc}")
    try:
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        _ip("netns", "exec", name, "nft", "add", "table", "inet", "cut")
        chain = "{ type filter hook input priority 0 ; policy accept ; }"
        _ip("netns", "exec", name, "nft", "add", "chain", "inet", "cut", "input", chain)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


CUTS = {
    # Every datagram dropped on the way in: sends succeed, nothing arrives (a dead link, a firewall).
    "dropped": (
        ("nft", "add", "rule", "inet", "cut", "input", "meta", "l4proto", "udp", "drop"),
        ("nft", "flush", "chain", "inet", "cut", "input"),
    ),
    # The interface itself goes down (and comes up again): a network removed rather than filtered.
    "link down": (("ip", "link", "set", "lo", "down"), ("ip", "link", "set", "lo", "up")),
}


@pytest.mark.parametrize("how", list(CUTS))
def test_the_network_taken_away_and_given_back_loses_and_doubles_nothing_either_way(
    namespace: str, aeron_dir: Path, tmp_path: Path, how: str
) -> None:
    cut, restore = CUTS[how]
    count = 600
    port = "24513"

    def peer(role: str, *extra: str) -> LoggedProcess:
        args = ["ip", "netns", "exec", namespace, sys.executable, str(PEER), "--role", role, "--port", port]
        args += ["--aeron-dir", f"{aeron_dir}-{role}", "--send", str(count), "--interval", "0.015", *extra]
        return LoggedProcess.spawn(args, tmp_path / f"{role}.log")

    def wait(condition: object, timeout_s: float, what: str, *processes: LoggedProcess) -> None:
        asyncio.run(_wait_sync(condition, timeout_s, what, processes))

    try:
        with peer("server") as server:
            wait(partial(server.has, "serving"), 30, "the server to serve", server)
            with peer("client", "--key-path", str(tmp_path / "client.key")) as client:
                wait(lambda: len(got(server)) > 40 and len(got(client)) > 40, 30, "both streams", server, client)
                _ip("netns", "exec", namespace, *cut)
                before = (len(got(server)), len(got(client)))
                # Cut off until both ends have declared the connection lost (peer_timeout 1.5 s), sending all along.
                wait(lambda: server.has("lost ") and client.has("lost "), 30, "both ends to lose it", server, client)
                sent_then = server.output().count("sent ")
                more = min(sent_then + 20, count - 1)
                wait(lambda: server.output().count("sent ") > more, 30, "sends while detached", server)
                assert len(got(server)) <= before[0] + 20, "the cut let messages through"
                assert len(got(client)) <= before[1] + 20, "the cut let messages through"
                _ip("netns", "exec", namespace, *restore)
                wait(
                    lambda: len(got(server)) >= count and len(got(client)) >= count,
                    60,
                    "every message after the network came back",
                    server,
                    client,
                )
                wait(lambda: len(connects(client)) >= 2, 10, "the client's second connect", client)
                asyncio.run(asyncio.sleep(0.5))  # a duplicate would have come by now
                assert got(server) == list(range(count)), server.output()[-2000:]
                assert got(client) == list(range(count)), client.output()[-2000:]
                first, again = connects(client)[0].split(), connects(client)[-1].split()
                assert again[1:] == [first[1], "True"], connects(client)
                assert connects(server)[-1].split()[1:] == [first[1], "True"], connects(server)
    finally:
        for role in ("server", "client"):
            shutil.rmtree(f"{aeron_dir}-{role}", ignore_errors=True)


async def _wait_sync(condition: object, timeout_s: float, what: str, processes: tuple[LoggedProcess, ...]) -> None:
    try:
        await wait_until(condition, timeout_s, 0.05, what)  # type: ignore[arg-type]
    except AssertionError:
        logs = "\n".join(f"--- {p.log_path.name}:\n{p.output()[-3000:]}" for p in processes)
        raise AssertionError(f"timed out waiting for {what}\n{logs}") from None
