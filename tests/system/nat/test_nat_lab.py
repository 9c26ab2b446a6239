"""The NAT lab itself: the router translates, the server cannot reach the client's private address, a rebinding
moves the client to new public ports, a block drops everything (IPv4 and IPv6)."""

from __future__ import annotations

import pytest

from support.nat import CLIENT_V4, CLIENT_V6, ROUTER_PUBLIC_V4, ROUTER_PUBLIC_V6, SERVER_V4, SERVER_V6, NatLab

pytestmark = pytest.mark.process

_ECHO = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7000))
s.settimeout(10)
data, source = s.recvfrom(100)
print(source[0], source[1], flush=True)
s.sendto(b"back", source)
"""

_ASK = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
s.bind((sys.argv[2], 0))
s.settimeout(5)
s.sendto(b"hello", (sys.argv[1], 7000))
print(s.recvfrom(100)[0].decode(), flush=True)
"""

_SEND_TO_PRIVATE = """
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
try:
    s.sendto(b"x", (sys.argv[1], 7000))
    print("sent", flush=True)
except OSError as exc:
    print("unreachable", exc.errno, flush=True)
"""


def _echo_through(lab: NatLab, server: str, client: str) -> tuple[str, int]:
    """One datagram from the client to the server's echo and back; the source the server saw."""
    import subprocess
    import sys

    echo = subprocess.Popen(
        [*lab.prefix(lab.server), sys.executable, "-c", _ECHO, server],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(50):  # the echo binds within a moment; the ask retries until it answers
            asked = lab.exec(lab.client, sys.executable, "-c", _ASK, server, client, check=False)
            if asked.returncode == 0:
                break
        assert asked.stdout.strip() == "back", asked.stdout + asked.stderr
        out, _ = echo.communicate(timeout=20)
    finally:
        if echo.poll() is None:
            echo.kill()
            echo.wait(10)
    host, port = out.split()
    return host, int(port)


@pytest.mark.parametrize(
    ("server", "client", "public"), [(SERVER_V4, CLIENT_V4, ROUTER_PUBLIC_V4), (SERVER_V6, CLIENT_V6, ROUTER_PUBLIC_V6)]
)
def test_the_router_masquerades_and_rebinds(nat_lab: NatLab, server: str, client: str, public: str) -> None:
    host, port = _echo_through(nat_lab, server, client)
    assert host == public
    assert 20000 <= port <= 20999
    nat_lab.rebind()
    host, port = _echo_through(nat_lab, server, client)
    assert host == public
    assert 30000 <= port <= 30999


@pytest.mark.parametrize("private", [CLIENT_V4, CLIENT_V6])
def test_the_server_has_no_route_to_the_private_network(nat_lab: NatLab, private: str) -> None:
    import sys

    result = nat_lab.exec(nat_lab.server, sys.executable, "-c", _SEND_TO_PRIVATE, private, check=False)
    assert result.stdout.split()[0] == "unreachable", result.stdout + result.stderr
