"""Forged SETUP frames against our driver: nothing a packet asks for is granted unbounded.

A raw UDP socket (bound to 127.0.0.1 or a loopback alias 127.0.0.x: all of 127/8
is local on Linux) sends SETUP frames a real publisher never would — a huge
term, an invalid one, thousands of fresh session ids — at a subscription of our
driver. Each is refused and counted by its cause (the reason once in the
distinct error log), no image file is made for it, and a legitimate publisher
still connects during and after the flood. The flood test runs the driver in
its own process and accounts for its files and counters before and after.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from udp_helpers import Collector, UdpDrivers, allocated_counters, counters_of, free_udp_port, publish_checked

from driver.client import Aeron
from driver.cnc import CncFile
from driver.concurrent.counters import CountersReader
from driver.concurrent.error_log import read_error_log
from driver.concurrent.system_counters import DriverSystemCounterId, SystemCounterId
from driver.core import receiver as receiver_module
from driver.logbuffer.frame import HDR_TYPE_DATA
from driver.media.endpoints import MAX_PENDING_SETUPS
from driver.wire.data import write_data_header
from driver.wire.setup import SetupFrame
from support.clients import wait_for_image
from support.waiting import execute_until

STREAM_ID = 7107
MIB = 1024 * 1024


def _setup(session_id: int, term_length: int, *, mtu: int = 1408, term_offset: int = 0) -> bytes:
    return SetupFrame(term_offset, session_id, STREAM_ID, 0, 0, term_length, mtu).encode()


def _send_setups(sock: socket.socket, port: int, *session_ids: int) -> None:
    """A SETUP of a 64 KiB term for each session, to our driver's port."""
    for session_id in session_ids:
        sock.sendto(_setup(session_id, 64 * 1024), ("127.0.0.1", port))


@contextlib.contextmanager
def _sender(alias: str) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((alias, 0))
        yield sock
    finally:
        sock.close()


class Driver:
    """A driver's counters and error log, read through its cnc.dat."""

    def __init__(self, aeron_dir: Path, cnc: CncFile) -> None:
        self.aeron_dir = aeron_dir
        self.cnc = cnc
        self.reader = CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
        labels: dict[str, int] = {}
        self.reader.for_each(lambda cid, type_id, key, label: labels.setdefault(label, cid))
        self._ids = labels

    def value(self, counter: SystemCounterId | DriverSystemCounterId) -> int:
        counter_id = self._ids[counter.label] if isinstance(counter, DriverSystemCounterId) else int(counter)
        return self.reader.get_counter_value(counter_id)

    def errors(self) -> list[str]:
        return [e.text for e in read_error_log(self.cnc.error_log_buffer)]

    def image_files(self) -> list[str]:
        return sorted(p.name for p in (self.aeron_dir / "images").iterdir())

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.aeron_dir)) for p in self.aeron_dir.rglob("*") if p.is_file())

    def counters_in_use(self) -> int:
        return len(allocated_counters(self.reader))


@contextlib.contextmanager
def _driver_view(aeron_dir: Path) -> Iterator[Driver]:
    with counters_of(aeron_dir) as (cnc, _):
        yield Driver(aeron_dir, cnc)


def _subscribe(client: Aeron, port: int, params: str = "") -> object:
    subscription = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}{params}", STREAM_ID)
    execute_until(lambda: subscription.channel_status == 1, timeout_s=10, description="subscription active")
    return subscription


def test_setup_with_a_huge_or_invalid_term_is_refused_counted_and_makes_no_file(udp: UdpDrivers) -> None:
    driver = udp.embedded("sub")
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    subscription = _subscribe(client, port)
    refused_term = DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH
    refused_invalid = DriverSystemCounterId.IMAGES_REFUSED_INVALID_SETUP
    with _driver_view(driver.aeron_dir) as view, _sender("127.0.0.2") as sock:
        # 64 MiB: a power of two Aeron would accept, past the driver's 16 MiB default. 20 sessions: each is
        # refused and counted, the reason logged once.
        for session_id in range(0x1001, 0x1001 + 20):
            sock.sendto(_setup(session_id, 64 * MIB), ("127.0.0.1", port))
        execute_until(lambda: view.value(refused_term) >= 20, timeout_s=10, description="huge terms refused")
        # Invalid SETUPs: term length not a power of two, offset outside the term, mtu past a datagram.
        for frame in (
            _setup(0x2001, 100_000),
            _setup(0x2002, 64 * 1024, term_offset=64 * 1024),
            _setup(0x2003, 64 * 1024, mtu=65536),
        ):
            sock.sendto(frame, ("127.0.0.1", port))
        execute_until(lambda: view.value(refused_invalid) >= 3, timeout_s=10, description="invalid SETUPs refused")
        assert view.image_files() == []
        assert subscription.images == ()  # type: ignore[attr-defined]
        errors = view.errors()
        term_errors = [e for e in errors if "term longer than the subscription allows" in e]
        assert len(term_errors) == 1, errors
        assert f"limit {16 * MIB}" in term_errors[0]
        assert "4097" not in term_errors[0]  # no session id
        assert "127.0.0.2" not in term_errors[0]  # no address
        assert len([e for e in errors if "invalid SETUP" in e]) == 1, errors
        assert view.value(SystemCounterId.ERRORS) == 0


def test_subscription_tightens_the_term_and_image_limits(udp: UdpDrivers) -> None:
    driver = udp.embedded("sub", image_liveness_timeout_ns=5 * 10**9)
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    subscription = _subscribe(client, port, "|max-term-length=64k|max-images=4")
    with _driver_view(driver.aeron_dir) as view, _sender("127.0.0.3") as sock:
        files_before = view.files()
        counters_before = view.counters_in_use() - 1  # less the subscription's channel status
        sock.sendto(_setup(0x3000, 128 * 1024), ("127.0.0.1", port))
        execute_until(
            lambda: view.value(DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH) == 1,
            timeout_s=10,
            description="128 KiB term refused by max-term-length=64k",
        )
        assert view.image_files() == []
        for session_id in range(0x3001, 0x3001 + 10):
            sock.sendto(_setup(session_id, 64 * 1024), ("127.0.0.1", port))
        refused = DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT
        execute_until(lambda: view.value(refused) == 6, timeout_s=10, description="6 of 10 refused by max-images=4")
        wait_for_image(subscription, 4)  # type: ignore[arg-type]
        assert len(view.image_files()) == 4
        assert any("holds as many images as it may (limit 4)" in e for e in view.errors())
        # Closing the subscription frees every image once its teardown ran: files and counters as before.
        subscription.close()  # type: ignore[attr-defined]
        execute_until(
            lambda: view.files() == files_before and view.counters_in_use() == counters_before,
            timeout_s=30,
            description="every image's log file and counters freed",
        )


def test_setup_flood_from_many_sources_is_capped_and_a_legit_publisher_connects(udp: UdpDrivers) -> None:
    per_source = 8
    flood_sources = [f"127.0.0.{n}" for n in range(2, 6)]
    sub_driver = udp.process("sub", receiver_max_images_per_source=per_source, image_liveness_timeout_ns=60 * 10**9)
    pub_driver = udp.embedded("pub")
    port = free_udp_port()
    client = udp.client(sub_driver.aeron_dir)
    subscription = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    execute_until(lambda: subscription.channel_status == 1, timeout_s=10, description="subscription active")
    publisher = udp.client(pub_driver.aeron_dir)
    legit = publisher.add_exclusive_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
    [legit_image] = wait_for_image(subscription)
    collector = Collector(session_id=legit.session_id)
    publish_checked(legit, [(subscription, collector)], 50, 64)

    with _driver_view(sub_driver.aeron_dir) as view, contextlib.ExitStack() as stack:
        files_before = view.files()
        counters_before = view.counters_in_use()
        socks = [stack.enter_context(_sender(alias)) for alias in flood_sources]
        causes = (
            DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT,
            DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT,
            DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH,
        )

        def accounted() -> int:
            refused = sum(view.value(c) for c in causes)
            return refused + view.value(SystemCounterId.CONDUCTOR_PROXY_FAILS) + len(view.image_files())

        # 2,000 SETUPs with fresh session ids, round robin over four source addresses, in bursts the kernel's
        # socket buffer holds; every one is either an image or a counted refusal.
        sent = 0
        session_id = 0x10000
        for _burst in range(100):
            for _ in range(20):
                sock = socks[sent % len(socks)]
                sock.sendto(_setup(session_id, 64 * 1024), ("127.0.0.1", port))
                session_id += 1
                sent += 1
            execute_until(
                lambda expected=sent + 1: accounted() >= expected,  # + the legitimate image
                timeout_s=10,
                description=f"{sent} forged SETUPs accounted for",
            )
            if _burst == 50:  # mid-flood, the legitimate stream still flows
                publish_checked(legit, [(subscription, collector)], 50, 64, start_seq=50)
        # Also one asking for a huge term, per source.
        for index, sock in enumerate(socks):
            sock.sendto(_setup(0x7FFF0000 + index, 256 * MIB), ("127.0.0.1", port))
        execute_until(
            lambda: view.value(DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH) == len(socks),
            timeout_s=10,
            description="huge terms refused",
        )

        forged_images = len(flood_sources) * per_source
        assert len(view.image_files()) == forged_images + 1
        assert accounted() == sent + len(socks) + 1
        assert (
            view.value(DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT)
            + view.value(SystemCounterId.CONDUCTOR_PROXY_FAILS)
            == sent - forged_images
        )
        # Each forged image costs its log file and three counters (receiver hwm and position, subscriber position).
        assert len(view.files()) == len(files_before) + forged_images
        assert view.counters_in_use() == counters_before + 3 * forged_images
        source_errors = [e for e in view.errors() if "from this source address" in e]
        assert len(source_errors) == 1, view.errors()
        # A legitimate publisher still connects, and the first one still flows.
        late = publisher.add_exclusive_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
        execute_until(
            lambda: any(i.session_id == late.session_id for i in subscription.images),
            timeout_s=10,
            description="a late legitimate publisher's image",
        )
        publish_checked(legit, [(subscription, collector)], 50, 64, start_seq=100)
        assert legit_image.session_id == legit.session_id


@pytest.mark.parametrize(
    ("term_length", "params", "sparse"),
    [
        pytest.param(64 * 1024, "", False, id="short-allocated"),
        pytest.param(1024 * 1024, "", True, id="long-sparse"),
        pytest.param(64 * 1024, "|sparse=true", True, id="asked-sparse"),
    ],
)
def test_image_logs_over_the_threshold_or_asked_for_are_sparse(
    udp: UdpDrivers, term_length: int, params: str, sparse: bool
) -> None:
    driver = udp.embedded("sub", receiver_sparse_image_threshold=MIB)
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    subscription = _subscribe(client, port, params)
    with _sender("127.0.0.4") as sock:
        sock.sendto(_setup(0x4000, term_length), ("127.0.0.1", port))
        [image] = wait_for_image(subscription)  # type: ignore[arg-type]
    path = Path(driver.aeron_dir) / "images" / f"{image.correlation_id}.logbuffer"
    stat = path.stat()
    allocated = stat.st_blocks * 512
    if sparse:
        assert allocated < stat.st_size // 4, (allocated, stat.st_size)  # only what was written (metadata)
    else:
        assert allocated >= stat.st_size, (allocated, stat.st_size)


def test_data_from_a_flood_of_unknown_sessions_asks_for_a_bounded_number_of_setups(
    udp: UdpDrivers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unanswered asks are forgotten after a second; here not during the test, so the count is exact.
    monkeypatch.setattr(receiver_module, "PENDING_SETUP_TIMEOUT_NS", 600 * 10**9)
    driver = udp.embedded("sub")
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    subscription = _subscribe(client, port)
    frame = bytearray(64)
    sent = 0
    with _driver_view(driver.aeron_dir) as view, _sender("127.0.0.5") as sock:
        dropped = DriverSystemCounterId.SETUPS_NOT_ELICITED
        elicits = view.value(SystemCounterId.STATUS_MESSAGES_SENT)
        for burst in range(30):
            for n in range(50):
                write_data_header(frame, 0, 64, 0xC0, HDR_TYPE_DATA, 0, 0x50000 + burst * 50 + n, STREAM_ID, 0)
                sock.sendto(frame, ("127.0.0.1", port))
                sent += 1
            # Each unknown session either had its SETUP asked for (a status message) or was dropped, counted.
            execute_until(
                lambda expected=sent: (
                    view.value(SystemCounterId.STATUS_MESSAGES_SENT) - elicits + view.value(dropped) >= expected
                ),
                timeout_s=10,
                description=f"{sent} unknown sessions answered or counted",
            )
        assert view.value(SystemCounterId.STATUS_MESSAGES_SENT) - elicits == MAX_PENDING_SETUPS
        assert view.value(dropped) == sent - MAX_PENDING_SETUPS
        assert subscription.images == ()  # type: ignore[attr-defined]


def test_ended_images_give_their_place_and_files_stay_within_twice_the_limit(udp: UdpDrivers) -> None:
    driver = udp.embedded("sub", image_liveness_timeout_ns=3 * 10**9)
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    subscription = _subscribe(client, port, "|max-images=2")
    refused = DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT
    with _driver_view(driver.aeron_dir) as view, _sender("127.0.0.6") as sock:
        _send_setups(sock, port, 0x6001, 0x6002, 0x6003)
        wait_for_image(subscription, 2)  # type: ignore[arg-type]
        execute_until(lambda: view.value(refused) == 1, timeout_s=10, description="the third refused")
        # No data: the images end and linger, unavailable to the subscriber but with their files.
        execute_until(lambda: subscription.images == (), timeout_s=20, description="both images ended")  # type: ignore[attr-defined]
        _send_setups(sock, port, 0x6004, 0x6005, 0x6006)
        wait_for_image(subscription, 2)  # type: ignore[arg-type]
        execute_until(lambda: view.value(refused) == 2, timeout_s=10, description="the sixth refused")
        assert len(view.image_files()) <= 4
        execute_until(lambda: view.image_files() == [], timeout_s=30, description="every image's file gone")


def test_per_source_counts_follow_images_as_they_come_and_end(udp: UdpDrivers) -> None:
    """The driver keeps each subscription's holdings up to date as images come and end (it does not count them
    afresh each time): a host at its limit is refused while another host is not, and once its images end the
    host gets exactly its limit again."""
    driver = udp.embedded("sub", image_liveness_timeout_ns=3 * 10**9)
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    subscription = _subscribe(client, port, "|max-images-per-source=2")
    refused = DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT
    with _driver_view(driver.aeron_dir) as view, _sender("127.0.0.6") as first, _sender("127.0.0.7") as second:
        _send_setups(first, port, 0x7001, 0x7002, 0x7003)
        wait_for_image(subscription, 2)  # type: ignore[arg-type]
        execute_until(lambda: view.value(refused) == 1, timeout_s=10, description="the first host's third refused")
        second.sendto(_setup(0x7101, 64 * 1024), ("127.0.0.1", port))
        wait_for_image(subscription, 3)  # type: ignore[arg-type]
        first.sendto(_setup(0x7004, 64 * 1024), ("127.0.0.1", port))
        execute_until(lambda: view.value(refused) == 2, timeout_s=10, description="the first host still full")
        execute_until(lambda: subscription.images == (), timeout_s=20, description="every image ended")  # type: ignore[attr-defined]
        _send_setups(first, port, 0x7005, 0x7006, 0x7007)
        wait_for_image(subscription, 2)  # type: ignore[arg-type]
        execute_until(lambda: view.value(refused) == 3, timeout_s=10, description="its limit again, not more")
        assert sorted(i.session_id for i in subscription.images) == [0x7005, 0x7006]  # type: ignore[attr-defined]


def test_evict_silent_lets_live_publishers_in_past_a_subscription_full_of_forged_images(udp: UdpDrivers) -> None:
    driver = udp.embedded("sub", image_liveness_timeout_ns=60 * 10**9)  # forged images would hold on for a minute
    pub_driver = udp.embedded("pub")
    client = udp.client(driver.aeron_dir)
    port = free_udp_port()
    subscription = _subscribe(client, port, "|max-images=3|evict-silent=true")
    evicted = DriverSystemCounterId.IMAGES_EVICTED_SILENT
    with _driver_view(driver.aeron_dir) as view, _sender("127.0.0.7") as sock:
        _send_setups(sock, port, 0x7001, 0x7002, 0x7003)
        wait_for_image(subscription, 3)  # type: ignore[arg-type]
        # Full of images that never send: once they have been silent a while, a live publisher takes a place.
        publisher = udp.client(pub_driver.aeron_dir)
        legit = publisher.add_exclusive_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", STREAM_ID)
        execute_until(
            lambda: any(i.session_id == legit.session_id for i in subscription.images),  # type: ignore[attr-defined]
            timeout_s=20,
            description="the live publisher's image, in place of a silent forged one",
        )
        assert view.value(evicted) >= 1
        # More forged SETUPs evict only silent images: never the live publisher's, which sends heartbeats.
        session_id = 0x7100
        for _round in range(6):
            for _ in range(5):
                sock.sendto(_setup(session_id, 64 * 1024), ("127.0.0.1", port))
                session_id += 1
            execute_until(
                lambda expected=session_id - 0x7100: (
                    view.value(DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT) + view.value(evicted)
                    >= expected
                ),
                timeout_s=10,
                description="forged SETUPs refused or taking a silent image's place",
            )
            assert any(i.session_id == legit.session_id for i in subscription.images)  # type: ignore[attr-defined]
        # Evicted images linger as ended ones do (the subscriber may still list them), at most the limit of them.
        assert len(view.image_files()) <= 2 * 3
        collector = Collector(session_id=legit.session_id)
        publish_checked(legit, [(subscription, collector)], 20, 64)
