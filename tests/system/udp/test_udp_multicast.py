"""Multicast on loopback: one publication, two subscribing drivers, both get everything.

Plain loopback is tried first (a probe joins the group on 127.0.0.1 and checks
that a datagram sent to it comes back). Where the kernel does not loop multicast
back, the test makes a network namespace of its own (``ip netns add``, ``lo``
up, a 224.0.0.0/4 route on ``lo``) and runs the three drivers inside it with
``ip netns exec`` — the clients stay in this process and reach the drivers
through their shared-memory files — and deletes the namespace afterwards. If
neither works, the test skips and says why. ``ENDPOINT_TEST_MULTICAST_NETNS=1``
forces the namespace path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from udp_helpers import Collector, UdpDrivers, driver_errors, free_udp_port, publish_checked, system_counter

from driver.concurrent.system_counters import SystemCounterId
from driver.errors import RegistrationError
from support.clients import wait_for_image

GROUP = "224.20.30.39"  # data address: last byte odd; control is .40
STREAM_ID = 2002

_PROBE = r"""
import socket, struct, sys
group, port = sys.argv[1], int(sys.argv[2])
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
rx.bind((group, port))
rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
              struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton("127.0.0.1")))
rx.settimeout(1.0)
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
tx.sendto(b"probe", (group, port))
print(rx.recv(64).decode())
"""


def _probe(prefix: Sequence[str] = ()) -> str | None:
    """None if multicast on 127.0.0.1 loops back (inside ``prefix``'s namespace); else why not."""
    try:
        result = subprocess.run(
            [*prefix, sys.executable, "-c", _PROBE, GROUP, str(free_udp_port())],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"probe failed to run: {exc}"
    if result.returncode == 0 and result.stdout.strip() == "probe":
        return None
    return (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15, check=False)


@pytest.fixture
def multicast_prefix() -> Iterator[tuple[str, ...]]:
    """The command prefix drivers need for loopback multicast: () or ("ip", "netns", "exec", NS)."""
    forced = os.environ.get("ENDPOINT_TEST_MULTICAST_NETNS") == "1"
    loopback_problem = "forced off by ENDPOINT_TEST_MULTICAST_NETNS=1" if forced else _probe()
    if loopback_problem is None:
        yield ()
        return
    if shutil.which("ip") is None:
        pytest.skip(f"multicast does not loop back on 127.0.0.1 ({loopback_problem}) and there is no `ip` command")
    name = f"endpoint-mc-{uuid.uuid4().hex[:8]}"
    created = _ip("netns", "add", name)
    if created.returncode != 0:
        pytest.skip(
            f"multicast does not loop back on 127.0.0.1 ({loopback_problem}) and "
            f"`ip netns add` failed: {created.stderr.strip()}"
        )
    try:
        prefix = ("ip", "netns", "exec", name)
        for step in (("link", "set", "lo", "up"), ("route", "add", "224.0.0.0/4", "dev", "lo")):
            done = subprocess.run([*prefix, "ip", *step], capture_output=True, text=True, timeout=15, check=False)
            if done.returncode != 0:
                pytest.skip(f"network namespace setup `ip {' '.join(step)}` failed: {done.stderr.strip()}")
        namespace_problem = _probe(prefix)
        if namespace_problem is not None:
            pytest.skip(
                f"multicast does not loop back on 127.0.0.1 ({loopback_problem}), "
                f"not even in a fresh network namespace ({namespace_problem})"
            )
        yield prefix
    finally:
        _ip("netns", "del", name)


def _driver_dirs(udp: UdpDrivers, prefix: Sequence[str], settings: list[dict[str, object]]) -> list[Path]:
    if prefix:
        return [udp.process(f"d{i}", prefix=prefix, **s).aeron_dir for i, s in enumerate(settings)]
    return [udp.embedded(f"d{i}", **s).aeron_dir for i, s in enumerate(settings)]


@pytest.mark.parametrize("loss", [pytest.param(0.0, id="clean"), pytest.param(0.05, id="lossy-subscriber")])
def test_two_subscriber_drivers_get_everything_from_one_multicast_publication(
    udp: UdpDrivers, multicast_prefix: tuple[str, ...], loss: float
) -> None:
    """``fc=min``: the slower subscriber sets the pace, so neither can be left behind.

    (With 1.15.1's default ``max`` flow control a subscriber that falls a window
    behind the fastest one has its data dropped as over-run without learning of the
    gap, times out and rejoins at the live position: "everything" is not promised.)
    """
    lossy: dict[str, object] = {"receive_loss_rate": loss, "receive_reorder_rate": loss, "receive_fault_seed": 5}
    pub_dir, sub1_dir, sub2_dir = _driver_dirs(udp, multicast_prefix, [{}, {}, lossy if loss else {}])
    port = free_udp_port()
    channel = f"aeron:udp?endpoint={GROUP}:{port}|interface=127.0.0.1"
    subscriptions = [udp.client(d).add_subscription(channel, STREAM_ID) for d in (sub1_dir, sub2_dir)]
    publication = udp.client(pub_dir).add_exclusive_publication(channel + "|fc=min", STREAM_ID)
    for subscription in subscriptions:
        (image,) = wait_for_image(subscription)
        assert image.session_id == publication.session_id
    collectors = [Collector(session_id=publication.session_id) for _ in subscriptions]
    publish_checked(publication, list(zip(subscriptions, collectors, strict=True)), 2000, 100, timeout_s=30)
    publish_checked(publication, list(zip(subscriptions, collectors, strict=True)), 6, 64 * 1024 - 16,
                    timeout_s=30, start_seq=2000)  # fmt: skip
    for directory in (pub_dir, sub1_dir, sub2_dir):
        assert driver_errors(directory) == []
    if loss:
        assert system_counter(sub2_dir, SystemCounterId.NAK_MESSAGES_SENT) > 0
        assert system_counter(pub_dir, SystemCounterId.RETRANSMITS_SENT) > 0


def test_multicast_data_address_must_be_odd(udp: UdpDrivers) -> None:
    client = udp.client(udp.embedded("d").aeron_dir)
    with pytest.raises(RegistrationError, match="odd"):
        client.add_subscription(f"aeron:udp?endpoint=224.20.30.40:{free_udp_port()}|interface=127.0.0.1", 1)

