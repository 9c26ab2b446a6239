"""A client behind a NAT, for real: three network namespaces the test creates and removes.

::

    client ns                 router ns                              server ns
    c0 198.18.1.2  <---->  r0 198.18.1.1 | r1 198.18.2.1  <---->  s0 198.18.2.2
       fd18:1::2              fd18:1::1  | fd18:2::1                 fd18:2::2
    default via the router     forwards; nftables masquerades        no route back to 198.18.1.0/24
                               UDP leaving r1 to a port range        or fd18:1::/64

The router rewrites every UDP packet the client sends towards the server to its own
public address (``198.18.2.1`` / ``fd18:2::1``) and a port from ``port_range``
(source NAT with masquerade, IPv4 and IPv6); the server namespace has routes
only to its own link, so nothing it sends to the client's private address can
arrive. :meth:`NatLab.rebind` moves the masquerade to another port range and
flushes the router's connection tracking, so the client's next packets leave
from new public ports (a NAT rebinding); :meth:`NatLab.block` drops everything
the router forwards until :meth:`NatLab.unblock` (a path that went away, long
enough for mappings and connections to expire).

The addresses are from the benchmarking range (RFC 2544) and a unique local
prefix: they exist only inside these namespaces. Needs root, ``ip``, ``nft``
and ``conntrack``: :func:`nat_lab_unavailable` says why a test must skip.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = [
    "CLIENT_V4",
    "CLIENT_V6",
    "ROUTER_PUBLIC_V4",
    "ROUTER_PUBLIC_V6",
    "SERVER_V4",
    "SERVER_V6",
    "NatLab",
    "nat_lab_unavailable",
]

CLIENT_V4, ROUTER_PRIVATE_V4, ROUTER_PUBLIC_V4, SERVER_V4 = "198.18.1.2", "198.18.1.1", "198.18.2.1", "198.18.2.2"
CLIENT_V6, ROUTER_PRIVATE_V6, ROUTER_PUBLIC_V6, SERVER_V6 = "fd18:1::2", "fd18:1::1", "fd18:2::1", "fd18:2::2"
FIRST_PORTS = (20000, 20999)
REBOUND_PORTS = (30000, 30999)
_COMMAND_TIMEOUT_S = 20.0
_serial = itertools.count()


def nat_lab_unavailable() -> str | None:
    """Why a NAT lab cannot be built here (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces and nftables need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("conntrack", "conntrack")):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (Debian's {package} package)"
    return None


def _run(args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


class NatLab:
    """The three namespaces; :meth:`close` removes them (and with them every link, rule and mapping)."""

    def __init__(self) -> None:
        tag = f"{os.getpid()}-{next(_serial)}"
        self.client = f"ep-natc-{tag}"
        self.router = f"ep-natr-{tag}"
        self.server = f"ep-nats-{tag}"
        self.port_range = FIRST_PORTS
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ set up and tear down

    def _build(self) -> None:
        for ns in (self.client, self.router, self.server):
            _run(["ip", "netns", "add", ns])
            self._made.append(ns)
            self.ip(ns, "link", "set", "lo", "up")
        # veth pairs made inside the namespaces: no name is ever taken in the host's namespace
        self.ip(self.client, "link", "add", "c0", "type", "veth", "peer", "name", "r0", "netns", self.router)
        self.ip(self.server, "link", "add", "s0", "type", "veth", "peer", "name", "r1", "netns", self.router)
        for ns, link, v4, v6 in (
            (self.client, "c0", CLIENT_V4, CLIENT_V6),
            (self.router, "r0", ROUTER_PRIVATE_V4, ROUTER_PRIVATE_V6),
            (self.router, "r1", ROUTER_PUBLIC_V4, ROUTER_PUBLIC_V6),
            (self.server, "s0", SERVER_V4, SERVER_V6),
        ):
            self.ip(ns, "addr", "add", f"{v4}/24", "dev", link)
            self.ip(ns, "-6", "addr", "add", f"{v6}/64", "dev", link, "nodad")
            self.ip(ns, "link", "set", link, "up")
        self.ip(self.client, "route", "add", "default", "via", ROUTER_PRIVATE_V4)
        self.ip(self.client, "-6", "route", "add", "default", "via", ROUTER_PRIVATE_V6)
        for key in ("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"):
            self.exec(self.router, "sysctl", "-qw", key)
        self.nft(
            "add table inet ep_nat",
            "add chain inet ep_nat post { type nat hook postrouting priority srcnat; policy accept; }",
            "add chain inet ep_nat forwarding { type filter hook forward priority filter; policy accept; }",
        )
        self._masquerade(self.port_range)

    def close(self) -> None:
        """Remove the namespaces (idempotent; what was made is removed even if building failed half way)."""
        while self._made:
            ns = self._made.pop()
            _run(["ip", "netns", "del", ns], check=False)

    def __enter__(self) -> NatLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ commands

    def prefix(self, ns: str) -> list[str]:
        """The command prefix that runs a program inside ``ns``."""
        return ["ip", "netns", "exec", ns]

    def exec(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([*self.prefix(ns), *args], check=check)

    def ip(self, ns: str, *args: str) -> None:
        _run(["ip", "-n", ns, *args])

    def nft(self, *commands: str) -> None:
        """Run nft commands in the router, all in one transaction."""
        script = "\n".join(commands) + "\n"
        result = subprocess.run(
            [*self.prefix(self.router), "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"nft failed ({result.returncode}): {result.stderr.strip()}\n{script}")

    # ------------------------------------------------------------------ NAT behaviour

    def _masquerade(self, ports: tuple[int, int]) -> None:
        low, high = ports
        self.nft(
            "flush chain inet ep_nat post",
            f'add rule inet ep_nat post oifname "r1" meta l4proto udp masquerade to :{low}-{high}',
            'add rule inet ep_nat post oifname "r1" masquerade',
        )
        self.port_range = ports

    def rebind(self) -> None:
        """The NAT forgets its mappings and maps the client to ports of another range from now on."""
        self._masquerade(REBOUND_PORTS if self.port_range == FIRST_PORTS else FIRST_PORTS)
        self.exec(self.router, "conntrack", "-F", check=False)  # exits 1 when there was nothing to flush

    def block(self) -> None:
        """Drop everything the router forwards, both ways (mappings then age while nothing passes)."""
        self.nft("flush chain inet ep_nat forwarding", "add rule inet ep_nat forwarding drop")
        self.exec(self.router, "conntrack", "-F", check=False)

    def unblock(self) -> None:
        self.nft("flush chain inet ep_nat forwarding")

    def public_udp_ports(self) -> set[int]:
        """The public (translated) source ports of the client's UDP mappings the router holds now."""
        ports: set[int] = set()
        for family in ("ipv4", "ipv6"):
            result = self.exec(self.router, "conntrack", "-L", "-f", family, "-p", "udp", check=False)
            for line in result.stdout.splitlines():
                sources = [part.split("=", 1)[1] for part in line.split() if part.startswith("src=")]
                dports = [part.split("=", 1)[1] for part in line.split() if part.startswith("dport=")]
                # original direction from the client; the reply direction's destination port is the public one
                if sources and sources[0] in (CLIENT_V4, CLIENT_V6) and len(dports) == 2 and dports[1].isdigit():
                    ports.add(int(dports[1]))
        return ports
