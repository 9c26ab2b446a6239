"""A client behind a NAT, for real (see support/nat.py): server and client in their own processes and network
namespaces, each with its own driver; the router masquerades the client's traffic and the server has no route back
to the client's private network. The client connects and plays, survives the NAT moving it to new public ports
(rebinding) without losing its connection, and reconnects once a mapping that expired (the path went away longer
than the connection's timeout) comes back. IPv4 and IPv6 (NAT66 masquerade)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.logged_process import LoggedProcess
from support.nat import CLIENT_V4, CLIENT_V6, ROUTER_PUBLIC_V4, ROUTER_PUBLIC_V6, SERVER_V4, SERVER_V6, NatLab
from support.waiting import execute_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

PEER = Path(__file__).with_name("nat_peer.py")
PORT = 40123
PEER_TIMEOUT_S = 3.0
FAMILIES = {
    "ipv4": (SERVER_V4, CLIENT_V4, ROUTER_PUBLIC_V4),
    "ipv6": (SERVER_V6, CLIENT_V6, ROUTER_PUBLIC_V6),
}


class Peers:
    """Starts ``nat_peer.py`` in the lab's namespaces; every process still running at the end is killed by pid."""

    def __init__(self, lab: NatLab, tmp_path: Path, family: str) -> None:
        self.lab = lab
        self.tmp_path = tmp_path
        self.server_address, self.client_address, self.public_address = FAMILIES[family]
        self.started: list[LoggedProcess] = []

    def start(self, role: str) -> LoggedProcess:
        ns = self.lab.server if role == "server" else self.lab.client
        args = [
            *self.lab.prefix(ns),
            sys.executable,
            str(PEER),
            role,
            "--address",
            self.server_address,
            "--port",
            str(PORT),
            "--aeron-dir",
            str(self.tmp_path / f"aeron-{role}"),
            "--peer-timeout",
            str(PEER_TIMEOUT_S),
        ]
        process = LoggedProcess.spawn(args, self.tmp_path / f"{role}.log")
        self.started.append(process)
        return process

    def connected(self) -> tuple[LoggedProcess, LoggedProcess]:
        """A server and a client that connected through the NAT and exchange messages."""
        server = self.start("server")
        execute_until(lambda: server.has("serving "), timeout_s=30, description="the server serving")
        client = self.start("client")
        execute_until(lambda: client.has("connected "), timeout_s=30, description="the client connected")
        wait_for_acks(client, 10)
        return server, client

    def close(self) -> None:
        for process in self.started:
            process.kill()
        for role in ("server", "client"):
            shutil.rmtree(self.tmp_path / f"aeron-{role}", ignore_errors=True)


@pytest.fixture(params=sorted(FAMILIES))
def peers(request: pytest.FixtureRequest, nat_lab: NatLab, tmp_path: Path) -> Iterator[Peers]:
    started = Peers(nat_lab, tmp_path, request.param)
    try:
        yield started
    finally:
        started.close()


def acks(client: LoggedProcess) -> int:
    return sum(1 for line in client.output().splitlines() if line.startswith("ack "))


def wait_for_acks(client: LoggedProcess, more: int, timeout_s: float = 20.0) -> None:
    """Until ``more`` Acks beyond those seen so far came back (a Num goes out every 50 ms)."""
    target = acks(client) + more
    execute_until(
        lambda: client.has("exit") or acks(client) >= target,
        timeout_s=timeout_s,
        description=f"{more} more acks:\n{client.output()[-2000:]}",
    )
    assert acks(client) >= target, client.output()[-2000:]


def lines(process: LoggedProcess, word: str) -> list[str]:
    return [line for line in process.output().splitlines() if line.split()[:1] == [word]]


def test_a_client_behind_a_nat_connects_and_plays(peers: Peers) -> None:
    server, _ = peers.connected()
    # The server knows the client by the router's public address, never its private one.
    remote = lines(server, "connected")[0].split()[2]
    assert remote.rpartition(":")[0].strip("[]") == peers.public_address
    assert peers.client_address not in server.output()
    mapped = peers.lab.public_udp_ports()
    assert mapped, "the router holds the client's UDP mappings"
    assert all(20000 <= port <= 20999 for port in mapped), mapped


def test_the_connection_survives_a_nat_rebinding(peers: Peers) -> None:
    server, client = peers.connected()
    before = peers.lab.public_udp_ports()
    assert before
    assert all(20000 <= port <= 20999 for port in before), before
    peers.lab.rebind()
    # The client's next datagrams leave from new public ports; the server follows them and the play goes on.
    wait_for_acks(client, 40)
    after = peers.lab.public_udp_ports()
    assert after
    assert all(30000 <= port <= 30999 for port in after), after
    assert lines(client, "lost") == []
    assert lines(client, "reconnecting") == []
    assert lines(server, "disconnected") == []
    assert len(lines(server, "connected")) == 1


def test_the_client_reconnects_when_its_mapping_expired(peers: Peers) -> None:
    server, client = peers.connected()
    peers.lab.block()
    # Longer than the connection's timeout: both ends give the connection up, the mappings are gone.
    execute_until(lambda: lines(client, "lost"), timeout_s=PEER_TIMEOUT_S * 5, description="the client losing it")
    execute_until(lambda: lines(server, "disconnected"), timeout_s=PEER_TIMEOUT_S * 5, description="the server too")
    time.sleep(1.0)  # reconnect attempts meanwhile find the path still blocked
    peers.lab.unblock()
    execute_until(lambda: lines(client, "reconnected"), timeout_s=30, description="the client reconnecting")
    wait_for_acks(client, 20)
    assert len(lines(server, "connected")) == 2
