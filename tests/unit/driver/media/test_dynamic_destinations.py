"""The destinations of a private publication on a dynamic control channel (pure logic, time passed in)."""

from __future__ import annotations

from driver.media.endpoints import (
    DESTINATION_RECLAIM_NS,
    DESTINATION_TIMEOUT_NS,
    MAX_DESTINATIONS_PER_PUBLICATION,
    DynamicDestinations,
)

S = 1_000_000_000


def _destinations(host: str | None = None) -> tuple[DynamicDestinations, list[tuple[bytes, tuple[str, int]]]]:
    sent: list[tuple[bytes, tuple[str, int]]] = []

    def send(data: memoryview, address: tuple[str, int]) -> int:
        sent.append((bytes(data), address))
        return len(data)

    return DynamicDestinations(send, host), sent


def test_it_sends_to_every_receiver_that_spoke_and_to_nobody_before() -> None:
    destinations, sent = _destinations()
    assert destinations.send(memoryview(b"abcd")) == 4  # nobody yet: nothing goes out
    assert sent == []
    destinations.on_status_message(("10.0.0.1", 1000), 0)
    destinations.on_status_message(("10.0.0.1", 1001), 0)
    destinations.on_status_message(("10.0.0.1", 1000), 1)  # again: the same destination
    destinations.send(memoryview(b"x"))
    assert sent == [(b"x", ("10.0.0.1", 1000)), (b"x", ("10.0.0.1", 1001))]


def test_a_full_publication_refuses_newcomers_while_its_receivers_live_then_lets_a_silent_one_go() -> None:
    destinations, _ = _destinations()
    members = [("10.0.0.1", 2000 + i) for i in range(MAX_DESTINATIONS_PER_PUBLICATION)]
    for member in members:
        assert destinations.on_status_message(member, 0)
    late = ("10.0.0.1", 3000)
    assert not destinations.on_status_message(late, DESTINATION_RECLAIM_NS - 1)
    for member in members[1:]:  # all but the first keep speaking
        destinations.on_status_message(member, DESTINATION_RECLAIM_NS)
    assert destinations.on_status_message(late, DESTINATION_RECLAIM_NS)  # the first was silent long enough
    assert members[0] not in destinations.addresses
    assert late in destinations.addresses


def test_silent_receivers_expire() -> None:
    destinations, _ = _destinations()
    destinations.on_status_message(("10.0.0.1", 1000), 0)
    destinations.on_status_message(("10.0.0.1", 1001), 4 * S)
    destinations.expire(DESTINATION_TIMEOUT_NS, DESTINATION_TIMEOUT_NS)
    assert destinations.addresses == [("10.0.0.1", 1000), ("10.0.0.1", 1001)]
    destinations.expire(DESTINATION_TIMEOUT_NS + 1, DESTINATION_TIMEOUT_NS)
    assert destinations.addresses == [("10.0.0.1", 1001)]


def test_a_receiver_host_admits_only_that_address() -> None:
    destinations, _ = _destinations("fd18:2::1")
    assert not destinations.on_status_message(("10.0.0.1", 1000), 0)
    assert not destinations.on_status_message(("fd18:2::2", 1000, 0, 0), 0)  # type: ignore[arg-type]
    assert destinations.on_status_message(("fd18:2::1", 1000, 0, 0), 0)  # type: ignore[arg-type]
    assert len(destinations.addresses) == 1
